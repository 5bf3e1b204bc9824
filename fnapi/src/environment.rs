//! Starting SDK harnesses: EXTERNAL (LOOPBACK is EXTERNAL pointing at the
//! submitting client's worker pool), PROCESS and DOCKER.
use beam_kafka_proto::fn_execution as fn_pb;
use beam_kafka_proto::pipeline as pb;
use prost::Message;
use tokio::process::{Child, Command};

const ENV_EXTERNAL: &str = "beam:env:external:v1";
const ENV_PROCESS: &str = "beam:env:process:v1";
const ENV_DOCKER: &str = "beam:env:docker:v1";

/// Where a started harness should connect.
#[derive(Clone, Debug)]
pub struct Endpoints {
    pub control: String,
    pub logging: String,
    pub artifact: String,
    pub provision: String,
    /// The State API's plain socket, told to PROCESS harnesses (a
    /// `beam_kafka.boot` harness uses it; others ignore it).
    pub state_socket: Option<String>,
}

/// A started harness; dropping it does not stop it, `stop` does.
pub enum Harness {
    External { pool: String, worker_id: String },
    Process(Child),
    Docker { container: String },
}

fn endpoint(url: &str) -> Option<pb::ApiServiceDescriptor> {
    Some(pb::ApiServiceDescriptor { url: url.to_string(), ..Default::default() })
}

fn harness_args(worker_id: &str, ep: &Endpoints) -> Vec<String> {
    vec![
        format!("--id={worker_id}"),
        format!("--control_endpoint={}", ep.control),
        format!("--logging_endpoint={}", ep.logging),
        format!("--artifact_endpoint={}", ep.artifact),
        format!("--provision_endpoint={}", ep.provision),
    ]
}

/// `env` (an image's environment) as a PROCESS environment running
/// `command`, with the same dependencies and capabilities.
pub fn process_environment(command: &str, env: &pb::Environment) -> pb::Environment {
    pb::Environment {
        urn: ENV_PROCESS.to_string(),
        payload: pb::ProcessPayload { command: command.to_string(), ..Default::default() }.encode_to_vec(),
        ..env.clone()
    }
}

/// Starts a harness for `env`. Errors are written for the user.
pub async fn start(env: &pb::Environment, worker_id: &str, ep: &Endpoints) -> Result<Harness, String> {
    match env.urn.as_str() {
        ENV_EXTERNAL => {
            let payload = pb::ExternalPayload::decode(env.payload.as_slice())
                .map_err(|e| format!("the EXTERNAL environment's payload cannot be decoded: {e}"))?;
            let pool = payload
                .endpoint
                .map(|e| e.url)
                .filter(|u| !u.is_empty())
                .ok_or("the EXTERNAL environment names no worker pool address (--environment_config)")?;
            let uri = if pool.contains("://") { pool.clone() } else { format!("http://{pool}") };
            let mut client = fn_pb::beam_fn_external_worker_pool_client::BeamFnExternalWorkerPoolClient::connect(uri)
                .await
                .map_err(|e| format!("cannot reach the SDK worker pool at {pool}: {e}"))?;
            let resp = client
                .start_worker(fn_pb::StartWorkerRequest {
                    worker_id: worker_id.to_string(),
                    control_endpoint: endpoint(&ep.control),
                    logging_endpoint: endpoint(&ep.logging),
                    artifact_endpoint: endpoint(&ep.artifact),
                    provision_endpoint: endpoint(&ep.provision),
                    params: payload.params,
                })
                .await
                .map_err(|e| format!("the SDK worker pool at {pool} refused StartWorker: {}", e.message()))?
                .into_inner();
            if !resp.error.is_empty() {
                return Err(format!("the SDK worker pool at {pool} could not start a worker: {}", resp.error));
            }
            Ok(Harness::External { pool, worker_id: worker_id.to_string() })
        }
        ENV_PROCESS => {
            let payload = pb::ProcessPayload::decode(env.payload.as_slice())
                .map_err(|e| format!("the PROCESS environment's payload cannot be decoded: {e}"))?;
            if payload.command.is_empty() {
                return Err("the PROCESS environment names no command (--environment_config)".into());
            }
            // A command line with arguments ("python -m beam_kafka.boot") runs
            // through the shell; a plain path runs as it is, as in Beam.
            let mut command = if payload.command.contains(char::is_whitespace) && !std::path::Path::new(&payload.command).exists() {
                let mut c = Command::new("sh");
                c.arg("-c").arg(format!("exec {} \"$@\"", payload.command)).arg("sh");
                c
            } else {
                Command::new(&payload.command)
            };
            let child = command
                .args(harness_args(worker_id, ep))
                .envs(payload.env)
                // Beam's boot programs take --id; a harness reads WORKER_ID.
                .env("WORKER_ID", worker_id)
                .envs(ep.state_socket.iter().map(|s| (crate::STATE_SOCKET_ENV, s)))
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("cannot start the SDK harness command '{}': {e}", payload.command))?;
            Ok(Harness::Process(child))
        }
        ENV_DOCKER => {
            let payload = pb::DockerPayload::decode(env.payload.as_slice())
                .map_err(|e| format!("the DOCKER environment's payload cannot be decoded: {e}"))?;
            let info = Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]).output().await;
            match info {
                Ok(out) if out.status.success() => {}
                Ok(out) => {
                    return Err(format!(
                        "the DOCKER environment needs a running Docker engine, and `docker info` failed: {}; \
                         use --environment_type=LOOPBACK or PROCESS instead",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ))
                }
                Err(e) => {
                    return Err(format!(
                        "the DOCKER environment needs Docker, which cannot be run here ({e}); \
                         use --environment_type=LOOPBACK or PROCESS instead"
                    ))
                }
            }
            let out = Command::new("docker")
                .args(["run", "-d", "--rm", "--network=host", &payload.container_image])
                .args(harness_args(worker_id, ep))
                .output()
                .await
                .map_err(|e| format!("cannot run docker: {e}"))?;
            if !out.status.success() {
                return Err(format!("docker could not start {}: {}", payload.container_image, String::from_utf8_lossy(&out.stderr).trim()));
            }
            Ok(Harness::Docker { container: String::from_utf8_lossy(&out.stdout).trim().to_string() })
        }
        other => Err(format!("environment '{other}' cannot be started by this runner")),
    }
}

impl Harness {
    /// Whether a harness process already ended (it will never connect), and
    /// how; other harnesses cannot tell.
    pub fn exited(&mut self) -> Option<String> {
        match self {
            Harness::Process(child) => match child.try_wait() {
                Ok(Some(status)) => Some(status.to_string()),
                _ => None,
            },
            _ => None,
        }
    }

    /// Stops the harness; best effort, errors are logged.
    pub async fn stop(self) {
        match self {
            Harness::External { pool, worker_id } => {
                let uri = if pool.contains("://") { pool.clone() } else { format!("http://{pool}") };
                if let Ok(mut c) = fn_pb::beam_fn_external_worker_pool_client::BeamFnExternalWorkerPoolClient::connect(uri).await {
                    let _ = c.stop_worker(fn_pb::StopWorkerRequest { worker_id }).await;
                }
            }
            Harness::Process(mut child) => {
                let _ = child.kill().await;
            }
            Harness::Docker { container } => {
                let _ = Command::new("docker").args(["rm", "-f", &container]).output().await;
            }
        }
    }
}
