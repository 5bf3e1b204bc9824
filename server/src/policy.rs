//! What the job server lets a client choose: which SDK environments it
//! starts, where a job's state lives (always under the server's state
//! root), and which Kafka client properties pass (none that load code or
//! read local files). The operator of `beam-kafka run` chooses all of these
//! and is not limited.
use std::path::{Component, Path, PathBuf};

use beam_kafka_proto::pipeline as pb;
use beam_kafka_runtime::urns;
use prost::Message;

/// Kinds of SDK environment a client may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum EnvKind {
    /// EXTERNAL pointing at a worker pool on this machine (PortableRunner's LOOPBACK).
    Loopback,
    /// EXTERNAL pointing at any address: the server dials it.
    External,
    /// PROCESS: the server runs the client's command.
    Process,
    /// DOCKER: the server runs the client's image with host networking.
    Docker,
    /// DOCKER naming Beam's Java SDK image: the server runs Java's harness
    /// as a process with the client's staged jars (or the image, where
    /// Docker is allowed too).
    Java,
    /// DOCKER naming Beam's Python SDK image: the server runs it as its
    /// --python-harness-command (or the image, where Docker is allowed too).
    Python,
    /// DOCKER naming Beam's Go SDK image: the server runs the client's
    /// staged worker binary.
    Go,
}

#[derive(Clone, Debug)]
pub struct Policy {
    pub state_root: PathBuf,
    pub environments: Vec<EnvKind>,
    /// Clients are trusted as the server's own user: nothing is limited.
    pub trusted: bool,
    /// The most tasks per sub-topology a client may ask for (each task has
    /// a thread, Kafka clients and a state store of its own).
    pub max_parallelism: u32,
}

impl Policy {
    /// Checks a submission against the policy and sets the job's state
    /// directory; every problem is returned, each for the user.
    pub fn apply(
        &self,
        pipeline: &pb::Pipeline,
        client_state_dir: Option<&str>,
        options: &mut beam_kafka_config::RunnerOptions,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        if options.internal_parallelism > self.max_parallelism {
            problems.push(format!(
                "internal_parallelism={} is above this job server's limit of {} (its operator can raise --max-parallelism)",
                options.internal_parallelism, self.max_parallelism
            ));
        }
        if self.trusted {
            if let Some(dir) = client_state_dir.filter(|d| !d.trim().is_empty()) {
                options.state_dir = PathBuf::from(dir);
            }
            return problems;
        }
        match state_dir_under(&self.state_root, client_state_dir) {
            Ok(dir) => options.state_dir = dir,
            Err(e) => problems.push(e),
        }
        let components = pipeline.components.clone().unwrap_or_default();
        let mut envs: Vec<(&String, &pb::Environment)> = components.environments.iter().collect();
        envs.sort_by_key(|(id, _)| *id);
        for (id, env) in envs {
            if let Some(kind) = kind_of(env) {
                let image = matches!(kind, EnvKind::Java | EnvKind::Python | EnvKind::Go);
                let allowed = self.environments.contains(&kind) || image && self.environments.contains(&EnvKind::Docker);
                if !allowed {
                    problems.push(format!(
                        "environment '{id}' is {kind:?}, which this job server does not start (it allows {}; its operator \
                         can pass --allow-environments)",
                        self.allowed_list()
                    ));
                }
            }
        }
        let refused = beam_kafka_config::secrets::unsafe_client_property;
        for (key, _) in &options.kafka_properties {
            if let Some(why) = refused(key) {
                problems.push(format!("kafka_property '{key}' is refused by this job server: it {why}"));
            }
        }
        for t in components.transforms.values() {
            let urn = t.spec.as_ref().map(|s| s.urn.as_str()).unwrap_or("");
            let props: Vec<String> = if urn == urns::KAFKA_READ {
                beam_kafka_runtime::plan::validate::read_spec(t).map(|s| s.consumer_config.into_keys().collect()).unwrap_or_default()
            } else if urn == urns::KAFKA_WRITE {
                beam_kafka_runtime::plan::validate::write_spec(t).map(|s| s.producer_config.into_keys().collect()).unwrap_or_default()
            } else {
                continue;
            };
            for key in props {
                if let Some(why) = refused(&key) {
                    problems.push(format!("transform '{}': Kafka property '{key}' is refused by this job server: it {why}", t.unique_name));
                }
            }
        }
        problems
    }

    fn allowed_list(&self) -> String {
        let names: Vec<String> = self.environments.iter().map(|k| format!("{k:?}").to_lowercase()).collect();
        names.join(", ")
    }
}

fn kind_of(env: &pb::Environment) -> Option<EnvKind> {
    match env.urn.as_str() {
        urns::ENV_EXTERNAL => {
            let url = pb::ExternalPayload::decode(env.payload.as_slice()).ok().and_then(|p| p.endpoint).map(|e| e.url).unwrap_or_default();
            Some(if is_local_address(&url) { EnvKind::Loopback } else { EnvKind::External })
        }
        urns::ENV_PROCESS => Some(EnvKind::Process),
        urns::ENV_DOCKER if beam_kafka_runtime::app::sdk_images::beam_java_image(env).is_some() => Some(EnvKind::Java),
        urns::ENV_DOCKER if beam_kafka_runtime::app::sdk_images::beam_python_image(env).is_some() => Some(EnvKind::Python),
        urns::ENV_DOCKER if beam_kafka_runtime::app::sdk_images::beam_go_image(env).is_some() => Some(EnvKind::Go),
        urns::ENV_DOCKER => Some(EnvKind::Docker),
        _ => None,
    }
}

/// Whether a worker pool address (`host:port`, maybe with a scheme) is on
/// this machine.
fn is_local_address(url: &str) -> bool {
    // User info ("[::1]@elsewhere") makes a client dial the part after it.
    if url.contains('@') {
        return false;
    }
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = match rest.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => rest.rsplit_once(':').map_or(rest, |(h, _)| h),
    };
    crate::auth::is_loopback(host)
}

/// The job's state directory: the client may name a directory inside the
/// root (relative, or absolute under it), never one outside.
pub fn state_dir_under(root: &Path, client: Option<&str>) -> Result<PathBuf, String> {
    let Some(asked) = client.map(str::trim).filter(|s| !s.is_empty()) else { return Ok(root.to_path_buf()) };
    let path = Path::new(asked);
    let relative = if path.is_absolute() { path.strip_prefix(root).ok() } else { Some(path) };
    let outside = || format!("state_dir '{asked}' is outside this job server's state root {}: name a directory inside it", root.display());
    let relative = relative.ok_or_else(outside)?;
    if relative.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(outside());
    }
    Ok(root.join(relative))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_state_dir_stays_under_the_root() {
        let root = Path::new("/srv/state");
        assert_eq!(state_dir_under(root, None).unwrap(), root);
        assert_eq!(state_dir_under(root, Some("team-a")).unwrap(), root.join("team-a"));
        assert_eq!(state_dir_under(root, Some("/srv/state/x/y")).unwrap(), root.join("x/y"));
        assert_eq!(state_dir_under(root, Some("/srv/state")).unwrap(), root);
        for bad in ["/tmp/elsewhere", "../x", "a/../../x", "/srv/state/../etc", "/srv/stateful"] {
            let e = state_dir_under(root, Some(bad)).unwrap_err();
            assert!(e.contains("outside"), "{bad}: {e}");
        }
    }

    #[test]
    fn environments_are_classified_by_where_they_run() {
        let external = |url: &str| pb::Environment {
            urn: urns::ENV_EXTERNAL.into(),
            payload: pb::ExternalPayload {
                endpoint: Some(pb::ApiServiceDescriptor { url: url.into(), ..Default::default() }),
                ..Default::default()
            }
            .encode_to_vec(),
            ..Default::default()
        };
        assert_eq!(kind_of(&external("localhost:5000")), Some(EnvKind::Loopback));
        assert_eq!(kind_of(&external("127.0.0.1:5000")), Some(EnvKind::Loopback));
        assert_eq!(kind_of(&external("[::1]:5000")), Some(EnvKind::Loopback));
        assert_eq!(kind_of(&external("10.0.0.2:5000")), Some(EnvKind::External));
        // Found in review: user info made a remote pool look local.
        assert_eq!(kind_of(&external("[::1]@evil.example:5000")), Some(EnvKind::External));
        assert_eq!(kind_of(&external("http://localhost@evil.example:5000")), Some(EnvKind::External));
        assert_eq!(kind_of(&pb::Environment { urn: urns::ENV_PROCESS.into(), ..Default::default() }), Some(EnvKind::Process));
        let docker = |image: &str| pb::Environment {
            urn: urns::ENV_DOCKER.into(),
            payload: pb::DockerPayload { container_image: image.into() }.encode_to_vec(),
            ..Default::default()
        };
        assert_eq!(kind_of(&docker("apache/beam_java17_sdk:2.73.0")), Some(EnvKind::Java));
        assert_eq!(kind_of(&docker("apache/beam_python3.11_sdk:2.73.0")), Some(EnvKind::Python));
        assert_eq!(kind_of(&docker("apache/beam_go_sdk:2.73.0")), Some(EnvKind::Go));
        assert_eq!(kind_of(&docker("my/image:1")), Some(EnvKind::Docker));
    }

    #[test]
    fn a_java_sdk_environment_needs_java_or_docker_allowed() {
        let mut pipeline = pb::Pipeline::default();
        let env = pb::Environment {
            urn: urns::ENV_DOCKER.into(),
            payload: pb::DockerPayload { container_image: "apache/beam_java17_sdk:2.73.0".into() }.encode_to_vec(),
            ..Default::default()
        };
        pipeline.components.get_or_insert_with(Default::default).environments.insert("java".into(), env);
        let problems = |allowed: Vec<EnvKind>| {
            let policy = Policy { state_root: "/srv/state".into(), environments: allowed, trusted: false, max_parallelism: 8 };
            let values = std::collections::BTreeMap::from([
                ("application_id".to_string(), beam_kafka_config::OptionValue::String("app".into())),
                ("bootstrap_servers".to_string(), beam_kafka_config::OptionValue::String("localhost:9092".into())),
            ]);
            let mut options = beam_kafka_config::RunnerOptions::parse(&values).expect("valid options");
            policy.apply(&pipeline, None, &mut options)
        };
        let refused = problems(vec![EnvKind::Loopback]);
        assert!(refused.len() == 1 && refused[0].contains("environment 'java' is Java"), "{refused:?}");
        assert!(problems(vec![EnvKind::Loopback, EnvKind::Java]).is_empty());
        assert!(problems(vec![EnvKind::Docker]).is_empty());
    }
}
