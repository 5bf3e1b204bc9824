//! Starts Beam's Java SDK harness as a process of this machine, for an
//! environment naming Beam's Java SDK image (`runtime::sdk_images` decides
//! what it is told). The harness's own jars come from a directory the
//! operator prepared (`scripts/java-harness.sh`); the client's come from
//! what it staged.
use std::path::{Path, PathBuf};

use beam_kafka_proto::pipeline as pb;
use beam_kafka_runtime::sdk_images;
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
        let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read the Java harness directory {}: {e}", dir.display()))?;
        let mut jars: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jar"))
            .map(|p| p.display().to_string())
            .collect();
        jars.sort();
        if !jars.iter().any(|j| j.contains("beam-sdks-java-harness")) {
            return Err(format!(
                "the Java harness directory {} holds no beam-sdks-java-harness jar (scripts/java-harness.sh fills it)",
                dir.display()
            ));
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
    let json = serde_json::Value::Object(struct_json(options)).to_string();
    let classpath = sdk_images::classpath(&setup.jars, &sdk_images::staged_jars(env));
    let variables = sdk_images::harness_variables(worker_id, &ep.control, &ep.logging, &json);
    let child = Command::new(&setup.java)
        // Java 17 closes JDK internals the harness's libraries reach into.
        .args(["--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED"])
        .arg("-cp")
        .arg(classpath)
        .arg(sdk_images::HARNESS_MAIN)
        .envs(variables)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = child.map_err(|e| format!("cannot start Java ({}) for Beam's Java SDK harness: {e}", setup.java.display()))?;
    // Java's harness prints its id (the worker's secret) at start: what it
    // prints is logged with the id replaced by the worker's public name.
    let name = crate::public_name(worker_id).to_string();
    if let Some(out) = child.stdout.take() {
        tokio::spawn(forward_lines(out, worker_id.to_string(), name.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(forward_lines(err, worker_id.to_string(), name));
    }
    Ok(Harness::Process(child))
}

async fn forward_lines(from: impl tokio::io::AsyncRead + Unpin, secret: String, name: String) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(worker = %name, "Java harness: {}", line.replace(&secret, &name));
    }
}

fn struct_json(s: &prost_types::Struct) -> serde_json::Map<String, serde_json::Value> {
    s.fields.iter().map(|(k, v)| (k.clone(), value_json(v))).collect()
}

fn value_json(v: &prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        // Whole numbers as integers: Java reads an int option from `3`, not `3.0`.
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9e15 => serde_json::Value::from(*n as i64),
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n).map_or(serde_json::Value::Null, serde_json::Value::Number),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
        Some(Kind::StructValue(s)) => serde_json::Value::Object(struct_json(s)),
        Some(Kind::ListValue(l)) => serde_json::Value::Array(l.values.iter().map(value_json).collect()),
    }
}
