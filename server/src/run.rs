//! `beam-kafka run`: runs a saved pipeline as a long-running service process,
//! with no submitting client. This is how operators deploy a pipeline and
//! scale it: start more copies with the same `--application_id`.
//!
//!   beam-kafka run --pipeline wordcount.pb \
//!       --sdk-worker-command "python -m beam_kafka.boot" \
//!       -- --bootstrap_servers=kafka:9092 --application_id=wordcount
//!
//! Runner options follow `--`, spelled as for the Python SDK. SIGTERM or
//! Ctrl-C stops the job cleanly (local stores are checkpointed); the exit
//! code is 0 for DONE or a requested stop, 1 for a failed job.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use beam_kafka_actors::kafka::admin::{self, Admin};
use beam_kafka_fnapi::FnApiServer;
use beam_kafka_proto::job_management as jm;
use beam_kafka_proto::pipeline::{self as pb, Pipeline};
use beam_kafka_runtime::urns;
use jm::job_state::Enum as State;
use prost::Message;
use prost_types::{value::Kind, Struct, Value};
use tokio_stream::wrappers::TcpListenerStream;

use beam_kafka_fnapi::java_harness::JavaHarnessSetup;

use crate::{artifacts, execution, jobs::Job, options, otel, status_server};

#[derive(clap::Args)]
pub struct RunArgs {
    /// A pipeline proto (binary `Pipeline`, e.g. Python's
    /// `p.to_runner_api().SerializeToString()`).
    #[arg(long)]
    pipeline: PathBuf,
    /// Runs every SDK environment of the pipeline as this command (a PROCESS
    /// environment), e.g. "python -m beam_kafka.boot"; without it the
    /// pipeline's own environments are used.
    #[arg(long)]
    sdk_worker_command: Option<String>,
    /// A directory of the jars of Beam's Java SDK harness
    /// (scripts/java-harness.sh fills one): environments naming Beam's Java
    /// SDK image run as Java processes with them.
    #[arg(long, env = "BEAM_KAFKA_JAVA_HARNESS_DIR")]
    java_harness_dir: Option<PathBuf>,
    /// The command that runs Beam's Python SDK harness here, e.g. "python -m
    /// beam_kafka.boot": environments naming Beam's Python SDK image (what
    /// Python's expansion services name by default) run as that process.
    #[arg(long, env = "BEAM_KAFKA_PYTHON_HARNESS_COMMAND")]
    python_harness_command: Option<String>,
    /// Address the Fn API and artifact servers listen on (harnesses connect).
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    #[command(flatten)]
    otel: otel::OtelArgs,
    #[command(flatten)]
    ui: status_server::UiArgs,
    /// Runner and pipeline options, after `--`: --application_id=... etc.
    #[arg(last = true)]
    options: Vec<String>,
}

/// `--name=value` / `--name value` / `--flag` → options by name; repeated
/// names (like --kafka_property) become lists.
pub(crate) fn parse_options(args: &[String]) -> anyhow::Result<Struct> {
    let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let Some(flag) = args[i].strip_prefix("--") else { bail!("'{}' is not an option (expected --name=value)", args[i]) };
        let (name, value) = match flag.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None if args.get(i + 1).is_some_and(|next| !next.starts_with("--")) => {
                i += 1;
                (flag.to_string(), args[i].clone())
            }
            None => (flag.to_string(), "true".to_string()),
        };
        values.entry(name).or_default().push(value);
        i += 1;
    }
    let text = |s: String| Value { kind: Some(Kind::StringValue(s)) };
    let fields = values
        .into_iter()
        .map(|(name, mut vs)| {
            let value = match (name.as_str(), vs.len()) {
                ("kafka_property", _) | (_, 2..) => {
                    Value { kind: Some(Kind::ListValue(prost_types::ListValue { values: vs.into_iter().map(text).collect() })) }
                }
                _ if vs[0] == "true" || vs[0] == "false" => Value { kind: Some(Kind::BoolValue(vs[0] == "true")) },
                _ => text(vs.remove(0)),
            };
            (format!("beam:option:{name}:v1"), value)
        })
        .collect();
    Ok(Struct { fields })
}

/// Makes every environment a PROCESS environment running `command`, but
/// those of Beam's Java SDK (a cross-language transform's), which run with
/// `--java-harness-dir`.
fn use_process_environments(pipeline: &mut Pipeline, command: &str) {
    let payload = pb::ProcessPayload { command: command.to_string(), ..Default::default() }.encode_to_vec();
    let envs = pipeline.components.as_mut().map(|c| c.environments.values_mut()).into_iter().flatten();
    for env in envs.filter(|e| beam_kafka_runtime::app::sdk_images::beam_java_image(e).is_none()) {
        env.urn = urns::ENV_PROCESS.to_string();
        env.payload = payload.clone();
    }
}

/// Pause between tries to reach the brokers (each try waits up to 10 s).
const KAFKA_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// A copy is a service: started while no broker answers (a cluster
/// restarting, a copy scheduled before Kafka is up), it waits for them,
/// saying so at every try, instead of exiting; its `/readyz` says starting
/// meanwhile. A refusal (credentials, TLS) ends it at once. `false`: stopped
/// while waiting.
async fn wait_for_kafka(opts: &beam_kafka_config::RunnerOptions, term: &mut tokio::signal::unix::Signal) -> anyhow::Result<bool> {
    loop {
        let o = opts.clone();
        let tried = tokio::task::spawn_blocking(move || Admin::connect(&o).map(drop)).await?;
        match tried {
            Ok(()) => return Ok(true),
            Err(e) if admin::is_unreachable(&e) => {
                tracing::warn!("{e}; trying again in {} s (a copy waits for its brokers)", KAFKA_RETRY.as_secs())
            }
            Err(e) => bail!(e),
        }
        tokio::select! {
            _ = tokio::time::sleep(KAFKA_RETRY) => {}
            _ = tokio::signal::ctrl_c() => return Ok(false),
            _ = term.recv() => return Ok(false),
        }
    }
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.pipeline).with_context(|| format!("cannot read {}", args.pipeline.display()))?;
    let mut pipeline =
        Pipeline::decode(bytes.as_slice()).with_context(|| format!("{} is not a binary Beam Pipeline proto", args.pipeline.display()))?;
    if let Some(command) = &args.sdk_worker_command {
        use_process_environments(&mut pipeline, command);
    }
    let opts = parse_options(&args.options)?;
    let runner_options = options::check_submission(&mut pipeline, &opts).map_err(|problems| {
        let list: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
        anyhow::anyhow!("beam-kafka cannot run this pipeline:\n{}", list.join("\n"))
    })?;

    let fn_api = FnApiServer::start(&args.bind).await.context("cannot start the Fn API server")?;
    let artifact_listener = tokio::net::TcpListener::bind((args.bind.as_str(), 0)).await.context("cannot start the artifact server")?;
    let artifact_url = artifact_listener.local_addr()?.to_string();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(jm::artifact_retrieval_service_server::ArtifactRetrievalServiceServer::new(artifacts::Retrieval {
                fn_api: fn_api.clone(),
                // The operator's own pipeline: its files are theirs to serve.
                staged_only: None,
            }))
            .serve_with_incoming(TcpListenerStream::new(artifact_listener)),
    );

    let id = format!("run-{}", uuid::Uuid::new_v4().simple());
    let name = runner_options.application_id.clone();
    let resource = vec![
        opentelemetry::KeyValue::new("beam_kafka.application.id", runner_options.application_id.clone()),
        opentelemetry::KeyValue::new("beam_kafka.job.id", id.clone()),
    ];
    let exporting = otel::install(&args.otel, resource).await?;
    if exporting.is_some() {
        crate::user_metrics::enable();
    }
    let job = Arc::new(Job::new(id.clone(), name, id.clone(), pipeline, opts, runner_options));
    let jobs = Arc::new(crate::jobs::Jobs::default());
    jobs.by_id.insert(id, job.clone());
    status_server::start(&args.ui, jobs, crate::auth::Auth::default()).await?;
    let (_, mut messages) = job.messages();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    if !wait_for_kafka(&job.runner_options, &mut term).await? {
        tracing::info!("stopped while waiting for Kafka");
        return Ok(());
    }
    let mut state = job.subscribe_state();
    let java_harness = args.java_harness_dir.as_deref().map(JavaHarnessSetup::from_dir).transpose().map_err(anyhow::Error::msg)?;
    let python_harness_command = args.python_harness_command.clone();
    let services = execution::Services { fn_api, artifact_url, artifacts_dir: None, java_harness, python_harness_command };
    let mut execution = tokio::spawn(execution::execute(job.clone(), services));
    let mut executed = false;
    let mut stop_requested = false;
    let mut last_error = None;
    loop {
        tokio::select! {
            changed = state.changed() => {
                if changed.is_err() { break; }
                let s = state.borrow().state;
                tracing::info!("job {}: {:?}", job.id, State::try_from(s).unwrap_or(State::Unspecified));
                if crate::jobs::is_terminal(s) { break; }
            }
            m = messages.recv() => {
                if let Ok(m) = m {
                    if let Some(jm::job_messages_response::Response::MessageResponse(msg)) = m.response {
                        if msg.importance == jm::job_message::MessageImportance::JobMessageError as i32 {
                            last_error = Some(msg.message_text.clone());
                        }
                        // The runner's own notices (what an earlier run left
                        // and what this one does about it, harnesses): a
                        // copy's operator reads them here. SDK warnings reach
                        // the log through the harness's logging already.
                        if msg.importance == jm::job_message::MessageImportance::JobMessageBasic as i32 {
                            tracing::info!("{}", msg.message_text);
                        }
                    }
                }
            }
            // An execution that ended (a bug of ours) without a final
            // state must not leave this copy running, doing nothing.
            _ = &mut execution, if !executed => { executed = true; break; }
            _ = tokio::signal::ctrl_c(), if !stop_requested => { stop_requested = true; job.cancel.send_replace(true); }
            _ = term.recv(), if !stop_requested => { stop_requested = true; job.cancel.send_replace(true); }
        }
    }
    // The state is final before the job's tasks closed their stores and
    // clients: wait for that (bounded, in case a client hangs on a broker).
    if !executed {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(60), execution).await;
    }
    let _ = tokio::task::spawn_blocking(move || drop(exporting)).await;
    match State::try_from(job.state().state).unwrap_or(State::Unspecified) {
        State::Done => Ok(()),
        State::Cancelled if stop_requested => Ok(()),
        other => bail!("the job ended {other:?}: {}", last_error.unwrap_or_else(|| "no message".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_after_the_separator_become_beam_options() {
        let args: Vec<String> = ["--application_id=a", "--kafka_property", "x=1", "--streaming", "--internal_parallelism=2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let s = parse_options(&args).unwrap();
        let by_name = options::from_struct(&s);
        assert_eq!(by_name["application_id"].as_text().as_deref(), Some("a"));
        assert!(matches!(by_name["kafka_property"], beam_kafka_config::OptionValue::List(_)));
        assert!(matches!(by_name["streaming"], beam_kafka_config::OptionValue::Bool(true)));
        assert!(parse_options(&["oops".to_string()]).is_err());
    }
}
