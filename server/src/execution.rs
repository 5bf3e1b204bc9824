//! Running a prepared job: plan it, start its SDK harness, register the stage
//! descriptors, and drive the actor topology on a thread of its own.
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use beam_kafka_actors::test_stream::TestStreamJob;
use beam_kafka_actors::{run_job, EnvironmentWorker, Harnesses, JobInput, JobOutcome};
use beam_kafka_fnapi::environment::{self, Endpoints, Harness};
use beam_kafka_fnapi::java_harness::{self, JavaHarnessSetup};
use beam_kafka_fnapi::{FnApiServer, SdkWorker, WorkerSpec};
use beam_kafka_proto::fn_execution as fn_pb;
use beam_kafka_proto::job_management as jm;
use beam_kafka_runtime::app::harnesses;
use beam_kafka_runtime::plan::graph::PipelineGraph;
use beam_kafka_runtime::plan::lower;
use beam_kafka_runtime::plan::topology::TopologyPlan;
use dashmap::DashMap;
use jm::job_message::MessageImportance as Importance;
use jm::job_state::Enum as State;
use tokio::sync::{mpsc, oneshot, watch};

use crate::jobs::Job;
use beam_kafka_actors::status_board::StatusBoard;
use beam_kafka_actors::telemetry::past_span;
use opentelemetry::KeyValue;

/// Endpoints of this process that harnesses are told about.
#[derive(Clone)]
pub struct Services {
    pub fn_api: FnApiServer,
    pub artifact_url: String,
    /// Where the job server staged jobs' artifacts (deleted when a job
    /// ends); `None` for `beam-kafka run`, whose artifacts are the operator's.
    pub artifacts_dir: Option<std::path::PathBuf>,
    /// How this process runs Beam's Java SDK harness for an environment
    /// naming its image, if it was given one (`--java-harness-dir`).
    pub java_harness: Option<JavaHarnessSetup>,
    /// The command that runs Beam's Python SDK harness for an environment
    /// naming its image, if it was given one (`--python-harness-command`).
    pub python_harness_command: Option<String>,
}

/// How long a cancelled job may take to stop before it is reported
/// CANCELLED regardless.
const CANCEL_GRACE: Duration = Duration::from_secs(8);

/// How long an ended job's thread may take to delete its topics and close
/// its clients before the execution stops waiting for it.
const THREAD_END_WAIT: Duration = Duration::from_secs(90);

/// How long a started harness may take to connect its control stream.
const WORKER_CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

pub async fn execute(job: Arc<Job>, services: Services) {
    let _unfinished = FailsIfUnfinished(job.clone());
    job.set_state(State::Starting);
    await_earlier_runs(&job).await;
    let mut harnesses = Vec::new();
    let mut job_thread = None;
    // A panic is a bug of ours; it still ends the job, with what it said,
    // instead of leaving its client waiting.
    let run = std::panic::AssertUnwindSafe(prepare_and_run(&job, &services, &mut harnesses, &mut job_thread));
    // A cancel ends the job within CANCEL_GRACE whatever its tasks are
    // doing: past it the job is reported CANCELLED and its thread, if
    // still busy, is left to stop on its own (it commits nothing the next
    // run would not fence: every task's transaction is its own).
    let mut cancel = job.cancel.subscribe();
    let cancel_overdue = async move {
        let _ = cancel.wait_for(|asked| *asked).await;
        tokio::time::sleep(CANCEL_GRACE).await;
    };
    let outcome = tokio::select! {
        ran = futures::FutureExt::catch_unwind(run) => match ran {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => JobOutcome::Failed(e),
            Err(panic) => {
                let what = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                JobOutcome::Failed(format!("internal error of the runner (please report it): {}", what.unwrap_or_default()))
            }
        },
        _ = cancel_overdue => {
            job.message(
                Importance::JobMessageWarning,
                format!(
                    "the job did not stop within {} s of its cancel: it is reported CANCELLED and its harnesses are stopped; \
                     a new run under this application id resumes from the last commit",
                    CANCEL_GRACE.as_secs()
                ),
            );
            JobOutcome::Cancelled
        }
    };
    // Listed before the state is final: a client that reruns the
    // application as soon as it sees the state must find the entry.
    let (ending, ended) = watch::channel(());
    ENDING.insert(job.id.clone(), (job.runner_options.application_id.clone(), ended));
    report(&job, outcome);
    if let Some(board) = job.board.get() {
        board.end();
    }
    crate::copy_reporting::stop(&job).await;
    // The harnesses go after the state is final: every bundle has finished
    // by then, and a client waiting for the state need not wait for them too.
    let stop_harnesses = async {
        for (harness, worker_id) in harnesses {
            harness.stop().await;
            services.fn_api.release_worker(&worker_id);
        }
        // What Go harnesses were given: binaries, options, scratch space.
        let _ = std::fs::remove_dir_all(harness_work_root(&job.id));
    };
    // The job's thread deletes a finished job's topics and closes its
    // clients and stores after the outcome: whoever waits for this
    // execution (`beam-kafka run` before it exits) waits for that too.
    let thread_ended = async {
        if let Some(ended) = job_thread {
            if tokio::time::timeout(THREAD_END_WAIT, ended).await.is_err() {
                tracing::warn!(job = %job.id, "the job's thread did not end within {} s of its outcome; left to end on its own", THREAD_END_WAIT.as_secs());
            }
        }
        ENDING.remove(&job.id);
        drop(ending);
    };
    tokio::join!(stop_harnesses, thread_ended);
    if let Some(root) = &services.artifacts_dir {
        let staged = root.join(crate::artifacts::safe_dir_name(&job.staging_token));
        let _ = tokio::fs::remove_dir_all(staged).await;
    }
    release_freed_memory();
}

/// Jobs of this process whose state is final while their thread still
/// deletes their topics and closes their clients, with their application
/// id; the receiver wakes when that ended.
static ENDING: LazyLock<DashMap<String, (String, watch::Receiver<()>)>> = LazyLock::new(DashMap::new);

/// How long a new run waits for an earlier one to end, and a stopping job
/// server for its ending jobs (Python's `KafkaStreamsRunner` gives it 10 s).
const ENDING_WAIT: Duration = Duration::from_secs(8);

/// A new run of an application waits until its earlier runs in this
/// process ended: it would otherwise create topics, or join a group, that
/// the earlier run's clean-up then deletes.
async fn await_earlier_runs(job: &Job) {
    let app = &job.runner_options.application_id;
    // This job is listed only once its state is final.
    let earlier: Vec<watch::Receiver<()>> = ENDING.iter().filter(|e| e.value().0 == *app).map(|e| e.value().1.clone()).collect();
    if earlier.is_empty() {
        return;
    }
    job.message(Importance::JobMessageBasic, format!("waiting for the previous run of application {app} to delete its topics"));
    await_all(earlier, Duration::from_secs(60)).await;
}

/// Waits (at most `ENDING_WAIT`) until every job whose state is final has
/// also deleted its topics: for a job server that stops.
pub async fn await_ending_jobs() {
    let ending: Vec<watch::Receiver<()>> = ENDING.iter().map(|e| e.value().1.clone()).collect();
    if !ending.is_empty() {
        tracing::info!("waiting for {} finished job(s) to delete their topics", ending.len());
        await_all(ending, ENDING_WAIT).await;
    }
}

async fn await_all(mut ending: Vec<watch::Receiver<()>>, limit: Duration) {
    // `changed` ends with an error when the ending job drops its sender.
    let all = futures::future::join_all(ending.iter_mut().map(|rx| rx.changed()));
    let _ = tokio::time::timeout(limit, all).await;
}

/// Hands memory the finished job freed back to the OS. glibc keeps freed
/// chunks in per-thread arenas, and every job has threads of its own: a job
/// server's RSS grew by ~140 MB per GroupByKey job of 1M elements without it.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Ends the job FAILED if its execution stops (a panic outside the job's
/// thread, an aborted task) before its state is final: its client, or the
/// `beam-kafka run` copy holding it, must not wait for it forever.
struct FailsIfUnfinished(Arc<Job>);

impl Drop for FailsIfUnfinished {
    fn drop(&mut self) {
        if !crate::jobs::is_terminal(self.0.state().state) {
            let text = "internal error of the runner (please report it): the job's execution ended without an outcome";
            tracing::error!(job = %self.0.id, "{text}");
            self.0.message(Importance::JobMessageError, text);
            self.0.set_state(State::Failed);
        }
    }
}

fn report(job: &Job, outcome: JobOutcome) {
    match outcome {
        JobOutcome::Done => job.set_state(State::Done),
        JobOutcome::Cancelled => job.set_state(State::Cancelled),
        JobOutcome::Failed(error) => {
            tracing::error!(job = %job.id, "job failed: {error}");
            job.message(Importance::JobMessageError, error);
            job.set_state(State::Failed);
        }
    }
}

/// Runs the job; leaves its started harnesses (and worker ids) in `started`
/// for the caller to stop, and what says its thread ended in `job_thread`.
async fn prepare_and_run(
    job: &Arc<Job>,
    services: &Services,
    started: &mut Vec<(Harness, String)>,
    job_thread: &mut Option<oneshot::Receiver<()>>,
) -> Result<JobOutcome, String> {
    let planning = SystemTime::now();
    let mut pipeline = job.pipeline.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let found = crate::earlier_run::take_ids(job, &mut pipeline).await?;
    let graph = PipelineGraph::new(&pipeline)?;
    let mut plan = TopologyPlan::plan(&graph, &job.runner_options.application_id, job.runner_options.internal_parallelism)?;
    let judged = crate::earlier_run::judge(job, &found, &graph, &mut plan).await?;
    tracing::info!(job = %job.id, "plan:\n{}", plan.describe(&graph));
    tracing::debug!(job = %job.id, "start-up: earlier runs checked after {:?}", planning.elapsed().unwrap_or_default());
    let board = StatusBoard::new(&job.id, &job.runner_options.application_id);
    let _ = job.topology_svg.set(plan.to_svg(&graph));
    board.set_state(State::try_from(job.state().state).unwrap_or(State::Unspecified).as_str_name());
    let _ = job.board.set(board.clone());
    crate::copy_reporting::start(job, &board);
    let mut attributes = board.attributes.clone();
    attributes.push(KeyValue::new("beam_kafka.sub_topologies", plan.sub_topologies.len() as i64));
    past_span("beam_kafka.job.plan", planning, SystemTime::now(), attributes);
    let fn_url = services.fn_api.url();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let count = harnesses::harness_count(job.runner_options.sdk_worker_parallelism, cores);
    let lowered = lower::lower(&graph, &plan, &job.id, &fn_url)?;
    let (descriptors, sub_topologies): (Vec<_>, Vec<_>) = lowered.into_iter().map(|(sub, d)| (d, sub)).unzip();
    // Each stage runs on harnesses of its own SDK environment (a Python
    // pipeline with a Java transform runs Python and Java harnesses).
    let env_ids = used_environments(&sub_topologies);
    if env_ids.is_empty() {
        return Err("the pipeline has no transform for an SDK harness to run".into());
    }
    let components = graph.components();
    let mut environments = Vec::new();
    for env_id in &env_ids {
        let env = components.environments.get(env_id).ok_or_else(|| format!("missing environment '{env_id}'"))?;
        job.message(Importance::JobMessageBasic, harness_message(env_id, env, count, job.runner_options.sdk_worker_parallelism));
        environments.push((env_id.clone(), env.clone()));
    }
    let test_stream = lower::test_stream_run(&graph, &plan)?.map(TestStreamJob::new);
    // The job's Kafka start-up (clients, topics) runs while the harnesses
    // start; its tasks start once they connected.
    let harnesses = Harnesses::pending();
    let (ready_tx, ready_rx) = oneshot::channel();
    let input = JobInput {
        job_id: job.id.clone(),
        options: job.runner_options.clone(),
        plan,
        sub_topologies,
        harnesses: harnesses.clone(),
        harnesses_ready: Some(ready_rx),
        test_stream,
        board: board.clone(),
        plan_record: judged.record,
        retired_topics: judged.retired_topics,
        retired_sub_topologies: judged.newly_retired,
    };
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let (done_tx, done_rx) = oneshot::channel();
    let (ended_tx, ended_rx) = oneshot::channel();
    let cancel = job.cancel.subscribe();
    std::thread::Builder::new()
        .name(format!("job-{}", job.id))
        .spawn(move || {
            run_job(input, events_tx, cancel, done_tx);
            let _ = ended_tx.send(());
        })
        .map_err(|e| format!("cannot start the job's thread: {e}"))?;
    *job_thread = Some(ended_rx);
    let (flush_tx, flush_rx) = oneshot::channel();
    tokio::spawn(crate::job_events::forward_events(job.clone(), events_rx, flush_rx));

    // Harnesses are always awaited (a job that failed meanwhile, say on an
    // unreachable cluster, has its outcome read after): one dropped while
    // starting would leave its registration, or its worker, behind.
    let starting = SystemTime::now();
    let workers = match start_environments(job, services, &environments, count, started).await {
        Ok(workers) => workers,
        Err(e) => {
            // The job's thread stops its start-up and ends.
            let _ = ready_tx.send(Err(e.clone()));
            let _ = done_rx.await;
            return Err(e);
        }
    };
    let mut attributes = board.attributes.clone();
    attributes.push(KeyValue::new("beam_kafka.harnesses", workers.len() as i64));
    past_span("beam_kafka.job.harnesses", starting, SystemTime::now(), attributes);
    // Every harness may be asked for any descriptor; it fetches only those
    // of the stages it runs.
    for descriptor in descriptors.into_iter().flatten() {
        for w in &workers {
            w.worker.register_descriptor(descriptor.clone());
        }
    }
    harnesses.connected(workers);
    if !*job.cancel.borrow() {
        job.set_state(State::Running);
    }
    let _ = ready_tx.send(Ok(()));
    let outcome = done_rx.await.unwrap_or_else(|_| JobOutcome::Failed("the job's thread ended without an outcome".into()));
    // What the job said before its outcome lands first: a client reads the
    // committed metrics once the state is final. Later words (of the
    // clean-up) are still forwarded.
    let (flushed_tx, flushed_rx) = oneshot::channel();
    if flush_tx.send(flushed_tx).is_ok() {
        let _ = flushed_rx.await;
    }
    Ok(outcome)
}

/// The environments whose harnesses a job's stages and WindowFns run on,
/// in a stable order.
fn used_environments(sub_topologies: &[beam_kafka_runtime::plan::spec::SubTopologySpec]) -> Vec<String> {
    let stages = sub_topologies.iter().map(|s| s.environment_id.clone());
    let window_fns =
        sub_topologies.iter().flat_map(|s| s.inputs.iter().filter_map(|i| i.window_fns.as_ref().map(|w| w.environment_id.clone())));
    let ids: std::collections::BTreeSet<String> = stages.chain(window_fns).filter(|id| !id.is_empty()).collect();
    ids.into_iter().collect()
}

/// Starts `count` harnesses of each environment; see [`start_harnesses`].
async fn start_environments(
    job: &Arc<Job>,
    services: &Services,
    environments: &[(String, beam_kafka_proto::pipeline::Environment)],
    count: usize,
    started: &mut Vec<(Harness, String)>,
) -> Result<Vec<EnvironmentWorker>, String> {
    let mut all = Vec::new();
    for (env_id, env) in environments {
        let workers = start_harnesses(job, services, env_id, env, (all.len(), count), started).await?;
        all.extend(workers.into_iter().map(|worker| EnvironmentWorker { environment_id: env_id.clone(), worker }));
    }
    Ok(all)
}

/// Starts `count` harnesses of `env`, numbered from `first`, and waits until
/// each connected; each started one goes into `started` at once, so a
/// failure stops them all.
async fn start_harnesses(
    job: &Arc<Job>,
    services: &Services,
    env_id: &str,
    env: &beam_kafka_proto::pipeline::Environment,
    (first, count): (usize, usize),
    started: &mut Vec<(Harness, String)>,
) -> Result<Vec<Arc<SdkWorker>>, String> {
    let fn_url = services.fn_api.url();
    let (log_tx, log_rx) = mpsc::unbounded_channel();
    tokio::spawn(crate::job_events::forward_logs(job.clone(), log_rx));
    let endpoints = Endpoints {
        control: fn_url.clone(),
        logging: fn_url.clone(),
        artifact: services.artifact_url.clone(),
        provision: fn_url.clone(),
        state_socket: Some(services.fn_api.state_socket_url()),
    };
    let mut waiting = Vec::new();
    let options = crate::options::redacted(&job.options, false);
    // Workers are numbered across the job's environments.
    for i in first..first + count {
        // The id is the worker's secret on the Fn API and artifact
        // retrieval: a readable name, then a random part never logged.
        let worker_id = format!("{}-worker-{i}{}{}", job.id, beam_kafka_fnapi::SECRET_SEPARATOR, uuid::Uuid::new_v4().simple());
        let spec = WorkerSpec {
            worker_id: worker_id.clone(),
            provision_info: fn_pb::ProvisionInfo {
                pipeline_options: Some(options.clone()),
                retrieval_token: job.staging_token.clone(),
                logging_endpoint: Some(api(&fn_url)),
                artifact_endpoint: Some(api(&services.artifact_url)),
                control_endpoint: Some(api(&fn_url)),
                dependencies: env.dependencies.clone(),
                ..Default::default()
            },
            logs: log_tx.clone(),
        };
        waiting.push(services.fn_api.expect_worker(spec));
        let work_dir = harness_work_root(&job.id).join(beam_kafka_fnapi::public_name(&worker_id));
        let starting = start_harness(services, env_id, env, &worker_id, &endpoints, &options, &work_dir).await;
        let harness = starting.map_err(|e| {
            services.fn_api.release_worker(&worker_id);
            format!("cannot start the SDK harness of environment '{env_id}': {e}")
        })?;
        started.push((harness, worker_id));
    }
    let mut workers = Vec::new();
    for connected in waiting {
        let mut connect = std::pin::pin!(FnApiServer::await_worker(connected, WORKER_CONNECT_TIMEOUT));
        loop {
            tokio::select! {
                worker = &mut connect => {
                    workers.push(worker?);
                    break;
                }
                // A command that fails at once (a module the interpreter
                // cannot find) fails the job now, not after the timeout.
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if let Some(status) = started.iter_mut().find_map(|(h, _)| h.exited()) {
                        let what = harness_process_advice(env);
                        return Err(format!(
                            "the SDK harness process of environment '{env_id}' exited ({status}) before it connected to \
                             the Fn API; what it printed is in the job server's log ({what})"
                        ));
                    }
                }
            }
        }
    }
    Ok(workers)
}

/// Starts one harness of `env`: Beam's SDK images as processes of this
/// machine (Go's: its staged worker binary, in `work_dir`; Java's and
/// Python's where the server was told how, `--java-harness-dir`,
/// `--python-harness-command`), anything else as the environment says.
async fn start_harness(
    services: &Services,
    env_id: &str,
    env: &beam_kafka_proto::pipeline::Environment,
    worker_id: &str,
    endpoints: &Endpoints,
    options: &prost_types::Struct,
    work_dir: &std::path::Path,
) -> Result<Harness, String> {
    use beam_kafka_runtime::app::sdk_images::{beam_go_image, beam_java_image, beam_python_image};
    if beam_go_image(env).is_some() {
        return beam_kafka_fnapi::go_harness::start(env, worker_id, endpoints, options, work_dir);
    }
    if let Some(image) = beam_java_image(env) {
        return match &services.java_harness {
            Some(setup) => java_harness::start(setup, env, worker_id, endpoints, options),
            None => environment::start(env, worker_id, endpoints).await.map_err(|e| {
                format!(
                    "{e} (environment '{env_id}' runs Beam's Java SDK, {image}: a job server given --java-harness-dir \
                     runs it as a Java process instead; scripts/java-harness.sh prepares that directory)"
                )
            }),
        };
    }
    if let Some(image) = beam_python_image(env) {
        return match &services.python_harness_command {
            Some(command) => environment::start(&environment::process_environment(command, env), worker_id, endpoints).await,
            None => environment::start(env, worker_id, endpoints).await.map_err(|e| {
                format!(
                    "{e} (environment '{env_id}' runs Beam's Python SDK, {image}: a job server given \
                     --python-harness-command, e.g. \"python -m beam_kafka.boot\", runs it as that process instead)"
                )
            }),
        };
    }
    environment::start(env, worker_id, endpoints).await
}

/// What a harness process that exited before connecting was given to run,
/// for the job's error.
fn harness_process_advice(env: &beam_kafka_proto::pipeline::Environment) -> &'static str {
    use beam_kafka_runtime::app::sdk_images::{beam_go_image, beam_java_image, beam_python_image};
    if beam_java_image(env).is_some() {
        "Beam's Java SDK harness runs with the jars of --java-harness-dir, then the jars the client staged"
    } else if beam_go_image(env).is_some() {
        "a Go environment runs the program's staged worker binary, which must be a Beam Go program built for this machine"
    } else if beam_python_image(env).is_some() {
        "Beam's Python SDK image runs as the job server's --python-harness-command, which must start a Beam SDK harness"
    } else {
        "the PROCESS environment's command, --environment_config, must start a Beam SDK harness"
    }
}

/// Where a job's harnesses started from staged code keep their files (a
/// directory per worker), deleted when the job ends.
fn harness_work_root(job_id: &str) -> std::path::PathBuf {
    std::env::temp_dir().join("beam-kafka-harnesses").join(crate::artifacts::safe_dir_name(job_id))
}

/// What the job log says of its harnesses: how many, and how to get more
/// cores working where one harness is all there is.
fn harness_message(env_id: &str, env: &beam_kafka_proto::pipeline::Environment, count: usize, requested: u32) -> String {
    let mut text = format!(
        "starting {count} SDK harness{} of environment '{env_id}' (--sdk_worker_parallelism={requested})",
        if count == 1 { "" } else { "es" }
    );
    if env.urn == beam_kafka_runtime::urns::ENV_EXTERNAL {
        text.push_str(
            "; an EXTERNAL or LOOPBACK worker pool decides whether they are threads of one process (PortableRunner's \
             LOOPBACK: one core) or processes (KafkaStreamsRunner with --sdk_worker_parallelism other than 1, or \
             --environment_type=PROCESS with python -m beam_kafka.boot)",
        );
    }
    text
}

fn api(url: &str) -> beam_kafka_proto::pipeline::ApiServiceDescriptor {
    beam_kafka_proto::pipeline::ApiServiceDescriptor { url: url.to_string(), ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::{FailsIfUnfinished, State};

    #[tokio::test]
    async fn an_execution_that_ends_without_an_outcome_fails_its_job() {
        let job = crate::jobs::tests::job("j", "t");
        let held = job.clone();
        let ended = tokio::spawn(async move {
            let _unfinished = FailsIfUnfinished(held.clone());
            held.set_state(State::Running);
            panic!("a bug of ours");
        });
        assert!(ended.await.is_err());
        assert_eq!(job.state().state, State::Failed as i32);
        let (history, _) = job.messages();
        assert!(format!("{history:?}").contains("ended without an outcome"), "{history:?}");
        // One that ended as it should keeps its state.
        let done = crate::jobs::tests::job("k", "t");
        drop(FailsIfUnfinished(done.clone()));
        assert_eq!(done.state().state, State::Failed as i32, "a job that never started is not left STOPPED either");
        let done = crate::jobs::tests::job("l", "t");
        done.set_state(State::Done);
        drop(FailsIfUnfinished(done.clone()));
        assert_eq!(done.state().state, State::Done as i32);
    }
}
