//! Starts Beam's Java SDK harness as a process of this machine, for an
//! environment naming Beam's Java SDK image (`runtime::app::sdk_images` decides
//! what it is told). The harness's own jars come from a directory the
//! operator prepared (`scripts/java-harness.sh`); the client's come from
//! what it staged.
use std::path::{Path, PathBuf};

use beam_kafka_proto::pipeline as pb;
use beam_kafka_runtime::app::sdk_images;
use tokio::process::Command;

use crate::environment::{Endpoints, Harness};

/// Where Java's harness comes from: a `java` launcher and the jars of
/// `beam-sdks-java-harness` with its dependencies.
#[derive(Clone, Debug)]
pub struct JavaHarnessSetup {
    pub java: PathBuf,
    pub jars: Vec<String>,
}

impl JavaHarnessSetup {
    /// The jars of `dir` (sorted, for a stable classpath) and the `java` of
    /// `JAVA_HOME`, else of the PATH.
    pub fn from_dir(dir: &Path) -> Result<JavaHarnessSetup, String> {
        JavaHarnessSetup::from_jar_dir(dir, "beam-sdks-java-harness")
            .map_err(|e| format!("{e} (scripts/java-harness.sh fills a Java harness directory)"))
    }

    /// The same for any directory of Beam's jars that must hold `required`
    /// (the jar of its main class).
    pub fn from_jar_dir(dir: &Path, required: &str) -> Result<JavaHarnessSetup, String> {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read the directory {}: {e}", dir.display()))?;
        let mut jars: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jar"))
            .map(|p| p.display().to_string())
            .collect();
        jars.sort();
        if !jars.iter().any(|j| j.contains(required)) {
            return Err(format!("the directory {} holds no {required} jar", dir.display()));
        }
        let java = std::env::var_os("JAVA_HOME").map(|h| PathBuf::from(h).join("bin/java")).filter(|j| j.exists());
        Ok(JavaHarnessSetup { java: java.unwrap_or_else(|| PathBuf::from("java")), jars })
    }
}

/// Starts one harness for `env`. Its options (which may hold secrets) go
/// in its environment, which only its own user can read, not on its
/// command line.
pub fn start(
    setup: &JavaHarnessSetup,
    env: &pb::Environment,
    worker_id: &str,
    ep: &Endpoints,
    options: &prost_types::Struct,
) -> Result<Harness, String> {
    let json = crate::harness_process::options_json(options);
    let classpath = sdk_images::classpath(&setup.jars, &sdk_images::staged_jars(env));
    let variables = sdk_images::harness_variables(worker_id, &ep.control, &ep.logging, &json);
    let mut child = Command::new(&setup.java);
    child
        // Java 17 closes JDK internals the harness's libraries reach into.
        .args(["--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED"])
        .arg("-cp")
        .arg(classpath)
        .arg(sdk_images::HARNESS_MAIN)
        .envs(variables);
    // Java's harness prints its id (the worker's secret) at start.
    let child = crate::harness_process::spawn_logged(child, worker_id, "Java harness")
        .map_err(|e| format!("cannot start Java ({}) for Beam's Java SDK harness: {e}", setup.java.display()))?;
    Ok(Harness::Process(child))
}
