//! Beam's SDK images as processes the runner starts itself, so no Docker
//! is needed. Python's image (what Python's expansion services name) runs
//! as the PROCESS command the operator gives (`--python-harness-command`).
//! Java's SDK and its expansion services name a Docker image of Beam's Java
//! SDK as their environment (`apache/beam_java17_sdk:2.73.0`); the runner runs Java's own
//! harness (`beam-sdks-java-harness`) in a JVM instead, with the jars the
//! client staged for that environment on its classpath, as the image's boot
//! program would, so no Docker is needed. This module decides what that
//! process is told; `fnapi::java_harness` starts it.
use prost::Message;

use crate::pb;

/// The class whose `main` runs Java's SDK harness.
pub const HARNESS_MAIN: &str = "org.apache.beam.fn.harness.FnHarness";

const FILE_ARTIFACT: &str = "beam:artifact:type:file:v1";

/// The image an environment runs when it is Beam's Java SDK image
/// (`[registry/]apache/beam_java<N>_sdk[:tag]`).
pub fn beam_java_image(env: &pb::Environment) -> Option<String> {
    beam_sdk_image(env, "beam_java", |v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()))
}

/// The image an environment runs when it is Beam's Python SDK image
/// (`[registry/]apache/beam_python3.<N>_sdk[:tag]`): what Python's
/// expansion services name by default.
pub fn beam_python_image(env: &pb::Environment) -> Option<String> {
    beam_sdk_image(env, "beam_python", |v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// The image an environment runs when it is Beam's Go SDK image
/// (`[registry/]apache/beam_go_sdk[:tag]`): Go's default environment.
pub fn beam_go_image(env: &pb::Environment) -> Option<String> {
    beam_sdk_image(env, "beam_go", |v| v.is_empty())
}

/// The staged worker binary of a Go environment: the dependency in Go's
/// worker role, else the one staged as "worker" (what Go's SDK stages it
/// as), else the only one.
pub fn go_worker_binary(env: &pb::Environment) -> Option<String> {
    const WORKER_ROLE: &str = "beam:artifact:role:go_worker_binary:v1";
    const STAGING_TO_ROLE: &str = "beam:artifact:role:staging_to:v1";
    let path = |a: &pb::ArtifactInformation| {
        (a.type_urn == FILE_ARTIFACT).then(|| pb::ArtifactFilePayload::decode(a.type_payload.as_slice()).ok().map(|p| p.path)).flatten()
    };
    let staged_as_worker = |a: &&pb::ArtifactInformation| {
        a.role_urn == STAGING_TO_ROLE
            && pb::ArtifactStagingToRolePayload::decode(a.role_payload.as_slice()).is_ok_and(|p| p.staged_name == "worker")
    };
    let deps = &env.dependencies;
    deps.iter()
        .find(|a| a.role_urn == WORKER_ROLE)
        .or_else(|| deps.iter().find(staged_as_worker))
        .or_else(|| (deps.len() == 1).then(|| &deps[0]))
        .and_then(path)
}

/// The arguments Beam's Go worker binary takes to run as a harness (as the
/// Go image's boot program passes them); its options come in the file
/// named by `PIPELINE_OPTIONS_FILE`.
pub fn go_worker_args(worker_id: &str, control: &str, logging: &str, semi_persist_dir: &str) -> Vec<String> {
    vec![
        "--worker=true".into(),
        format!("--id={worker_id}"),
        format!("--logging_endpoint={logging}"),
        format!("--control_endpoint={control}"),
        format!("--semi_persist_dir={semi_persist_dir}"),
    ]
}

fn beam_sdk_image(env: &pb::Environment, prefix: &str, version_ok: impl Fn(&str) -> bool) -> Option<String> {
    if env.urn != crate::urns::ENV_DOCKER {
        return None;
    }
    let image = pb::DockerPayload::decode(env.payload.as_slice()).ok()?.container_image;
    let name = image.rsplit('/').next()?.split(':').next()?;
    let version = name.strip_prefix(prefix)?.strip_suffix("_sdk")?;
    version_ok(version).then_some(image)
}

/// The local jars staged for the environment, in its order (the client's
/// classpath order). After staging, every dependency is a local file.
pub fn staged_jars(env: &pb::Environment) -> Vec<String> {
    env.dependencies
        .iter()
        .filter(|a| a.type_urn == FILE_ARTIFACT)
        .filter_map(|a| pb::ArtifactFilePayload::decode(a.type_payload.as_slice()).ok())
        .map(|p| p.path)
        .filter(|p| p.ends_with(".jar"))
        .collect()
}

/// The harness's classpath: Java's harness and its dependencies first, then
/// what the client staged, as the image's boot program orders them (the
/// client's jars may carry the same Beam classes; the harness's win).
pub fn classpath(harness_jars: &[String], staged: &[String]) -> String {
    let mut seen = std::collections::HashSet::new();
    harness_jars.iter().chain(staged).filter(|j| seen.insert(j.as_str())).cloned().collect::<Vec<_>>().join(":")
}

/// An API endpoint as the harness reads it from its environment: an
/// `ApiServiceDescriptor` in protobuf text format.
pub fn descriptor_text(url: &str) -> String {
    format!("url: {}", quoted(url))
}

fn quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The environment variables Java's harness reads at start: its id (the
/// worker id the runner expects), its options (JSON), and where its
/// control and logging streams go.
pub fn harness_variables(worker_id: &str, control: &str, logging: &str, options_json: &str) -> Vec<(String, String)> {
    vec![
        ("HARNESS_ID".into(), worker_id.into()),
        ("PIPELINE_OPTIONS".into(), options_json.into()),
        ("CONTROL_API_SERVICE_DESCRIPTOR".into(), descriptor_text(control)),
        ("LOGGING_API_SERVICE_DESCRIPTOR".into(), descriptor_text(logging)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docker(image: &str) -> pb::Environment {
        pb::Environment {
            urn: crate::urns::ENV_DOCKER.into(),
            payload: pb::DockerPayload { container_image: image.into() }.encode_to_vec(),
            ..Default::default()
        }
    }

    fn file(path: &str) -> pb::ArtifactInformation {
        pb::ArtifactInformation {
            type_urn: FILE_ARTIFACT.into(),
            type_payload: pb::ArtifactFilePayload { path: path.into(), ..Default::default() }.encode_to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn beam_java_images_are_recognised_with_or_without_registry_and_tag() {
        for image in ["apache/beam_java17_sdk:2.73.0", "apache/beam_java11_sdk", "gcr.io/mirror/apache/beam_java21_sdk:2.75.0"] {
            assert_eq!(beam_java_image(&docker(image)).as_deref(), Some(image));
        }
        for image in ["apache/beam_python3.11_sdk:2.73.0", "apache/beam_go_sdk:2.73.0", "apache/beam_javaX_sdk", "my/java:1"] {
            assert_eq!(beam_java_image(&docker(image)), None, "{image}");
        }
        let process = pb::Environment { urn: crate::urns::ENV_PROCESS.into(), ..Default::default() };
        assert_eq!(beam_java_image(&process), None);
    }

    #[test]
    fn go_images_and_their_worker_binary_are_recognised() {
        assert!(beam_go_image(&docker("apache/beam_go_sdk:2.73.0")).is_some());
        assert!(beam_go_image(&docker("apache/beam_go_sdk")).is_some());
        assert!(beam_go_image(&docker("apache/beam_go1_sdk")).is_none());
        assert!(beam_go_image(&docker("apache/beam_java17_sdk")).is_none());
        let mut env = docker("apache/beam_go_sdk:2.73.0");
        let mut worker = file("/s/worker");
        worker.role_urn = "beam:artifact:role:go_worker_binary:v1".into();
        env.dependencies = vec![file("/s/other"), worker];
        assert_eq!(go_worker_binary(&env).as_deref(), Some("/s/worker"));
        let mut staged = file("/s/w2");
        staged.role_urn = "beam:artifact:role:staging_to:v1".into();
        staged.role_payload = pb::ArtifactStagingToRolePayload { staged_name: "worker".into() }.encode_to_vec();
        env.dependencies = vec![file("/s/other"), staged];
        assert_eq!(go_worker_binary(&env).as_deref(), Some("/s/w2"));
        env.dependencies = vec![file("/s/only")];
        assert_eq!(go_worker_binary(&env).as_deref(), Some("/s/only"));
        env.dependencies = vec![file("/s/a"), file("/s/b")];
        assert_eq!(go_worker_binary(&env), None);
        let args = go_worker_args("w", "localhost:1", "localhost:2", "/d");
        assert_eq!(args[0], "--worker=true");
        assert!(args.contains(&"--semi_persist_dir=/d".to_string()));
    }

    #[test]
    fn beam_python_images_are_recognised() {
        for image in ["apache/beam_python3.11_sdk:2.73.0", "apache/beam_python3.9_sdk"] {
            assert_eq!(beam_python_image(&docker(image)).as_deref(), Some(image));
        }
        for image in ["apache/beam_java17_sdk:2.73.0", "apache/beam_pythonX_sdk", "python:3.11"] {
            assert_eq!(beam_python_image(&docker(image)), None, "{image}");
        }
    }

    #[test]
    fn staged_jars_keep_the_client_order_and_skip_other_files() {
        let mut env = docker("apache/beam_java17_sdk:2.73.0");
        env.dependencies = vec![file("/s/b.jar"), file("/s/a.jar"), file("/s/notes.txt")];
        env.dependencies.push(pb::ArtifactInformation { type_urn: "beam:artifact:type:url:v1".into(), ..Default::default() });
        assert_eq!(staged_jars(&env), ["/s/b.jar", "/s/a.jar"]);
    }

    #[test]
    fn the_harness_jars_come_first_and_none_twice() {
        let cp = classpath(&["/h/harness.jar".into(), "/h/core.jar".into()], &["/s/user.jar".into(), "/h/core.jar".into()]);
        assert_eq!(cp, "/h/harness.jar:/h/core.jar:/s/user.jar");
    }

    #[test]
    fn endpoints_are_text_format_descriptors() {
        assert_eq!(descriptor_text("localhost:8099"), "url: \"localhost:8099\"");
        assert_eq!(descriptor_text("a\"b\\c"), "url: \"a\\\"b\\\\c\"");
        let vars = harness_variables("w1", "localhost:1", "localhost:2", "{}");
        assert!(vars.contains(&("HARNESS_ID".into(), "w1".into())));
        assert!(vars.contains(&("CONTROL_API_SERVICE_DESCRIPTOR".into(), "url: \"localhost:1\"".into())));
    }
}
