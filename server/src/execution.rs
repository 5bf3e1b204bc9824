//! Running a prepared job: plan it, start its SDK harness, register the stage
//! descriptors, and drive the actor topology on a thread of its own.
use std::sync::Arc;
use std::time::Duration;

use beam_kafka_actors::job::{InputSpec, KafkaSinkSpec, SideInputSpec, SubTopologySpec, TimerFamilySpec};
use beam_kafka_actors::output::OutputSink;
use beam_kafka_actors::SourceInput;
use beam_kafka_actors::{run_job, JobEvent, JobInput, JobOutcome};
use beam_kafka_fnapi::environment::{self, Endpoints, Harness};
use beam_kafka_fnapi::{FnApiServer, SdkLog, WorkerSpec};
use beam_kafka_proto::fn_execution as fn_pb;
use beam_kafka_proto::job_management as jm;
use beam_kafka_proto::pipeline::ParDoPayload;
use beam_kafka_proto::pipeline::Schema;
use beam_kafka_proto::prost::Message;
use beam_kafka_runtime::coder::wire_coders;
use beam_kafka_runtime::coder::Coder;
use beam_kafka_runtime::descriptor;
use beam_kafka_runtime::graph::PipelineGraph;
use beam_kafka_runtime::kafka_sink::SinkCodec;
use beam_kafka_runtime::kafka_source::ElementEncoder;
use beam_kafka_runtime::side_input::{Access, SideWindowing};
use beam_kafka_runtime::timers::{TimeDomain, TimerCodec};
use beam_kafka_runtime::topology::{InputKind, TopologyPlan};
use beam_kafka_runtime::validate::{read_spec, write_spec};
use beam_kafka_runtime::windowing::WindowingSpec;
use jm::job_message::MessageImportance as Importance;
use jm::job_state::Enum as State;
use tokio::sync::{mpsc, oneshot};

use crate::jobs::Job;

/// Endpoints of this process that harnesses are told about.
#[derive(Clone)]
pub struct Services {
    pub fn_api: FnApiServer,
    pub artifact_url: String,
}

/// How long a started harness may take to connect its control stream.
const WORKER_CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

pub async fn execute(job: Arc<Job>, services: Services) {
    job.set_state(State::Starting);
    let mut harness = None;
    let outcome = match prepare_and_run(&job, &services, &mut harness).await {
        Ok(o) => o,
        Err(e) => JobOutcome::Failed(e),
    };
    report(&job, outcome);
    // The harness goes after the state is final: every bundle has finished
    // by then, and a client waiting for the state need not wait for it too.
    if let Some((harness, worker_id)) = harness {
        harness.stop().await;
        services.fn_api.release_worker(&worker_id);
    }
    release_freed_memory();
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

/// Runs the job; leaves its started harness (and worker id) in `started`
/// for the caller to stop.
async fn prepare_and_run(job: &Arc<Job>, services: &Services, started: &mut Option<(Harness, String)>) -> Result<JobOutcome, String> {
    let pipeline = job.pipeline.lock().expect("lock").clone();
    let graph = PipelineGraph::new(&pipeline)?;
    let plan = TopologyPlan::plan(&graph, &job.runner_options.application_id, job.runner_options.internal_parallelism)?;
    tracing::info!(job = %job.id, "plan:\n{}", plan.describe(&graph));
    let components = graph.components();
    let env_ids: std::collections::BTreeSet<&String> = plan.sub_topologies.iter().map(|s| &s.stage.environment_id).collect();
    if env_ids.len() > 1 {
        return Err("pipelines with more than one SDK environment are not supported yet".into());
    }
    let Some(env_id) = env_ids.into_iter().next() else {
        return Err("the pipeline has no transform for an SDK harness to run".into());
    };
    let env = components.environments.get(env_id).ok_or_else(|| format!("missing environment '{env_id}'"))?;

    let worker_id = format!("{}-worker", job.id);
    let (log_tx, log_rx) = mpsc::unbounded_channel();
    let fn_url = services.fn_api.url();
    let spec = WorkerSpec {
        worker_id: worker_id.clone(),
        provision_info: fn_pb::ProvisionInfo {
            pipeline_options: Some(job.options.clone()),
            retrieval_token: job.staging_token.clone(),
            logging_endpoint: Some(api(&fn_url)),
            artifact_endpoint: Some(api(&services.artifact_url)),
            control_endpoint: Some(api(&fn_url)),
            dependencies: env.dependencies.clone(),
            ..Default::default()
        },
        logs: log_tx,
    };
    let connected = services.fn_api.expect_worker(spec);
    tokio::spawn(forward_logs(job.clone(), log_rx));
    let endpoints =
        Endpoints { control: fn_url.clone(), logging: fn_url.clone(), artifact: services.artifact_url.clone(), provision: fn_url.clone() };
    let harness = environment::start(env, &worker_id, &endpoints).await.map_err(|e| {
        services.fn_api.release_worker(&worker_id);
        format!("cannot start the SDK harness: {e}")
    })?;
    *started = Some((harness, worker_id));
    let worker = FnApiServer::await_worker(connected, WORKER_CONNECT_TIMEOUT).await?;

    let mut sub_topologies = Vec::new();
    for sub in &plan.sub_topologies {
        let id = format!("{}-{}", job.id, sub.stage.id);
        worker.register_descriptor(descriptor::build(&graph, &sub.stage, &id, &fn_url, &fn_url));
        let mut inputs = Vec::new();
        for i in &sub.inputs {
            let topic = &plan.topics[i.topic];
            let mut source = None;
            let gbk = match &i.kind {
                InputKind::Direct => None,
                InputKind::Source { transform } => {
                    let t = graph.transform(transform);
                    let (element, _) = wire_coders(components, &topic.pcollection)?;
                    source = Some(Arc::new(SourceInput {
                        transform: transform.clone(),
                        name: t.unique_name.clone(),
                        encoder: ElementEncoder::new(read_spec(t)?, matches!(element, Coder::LengthPrefix(_))),
                    }));
                    None
                }
                InputKind::GroupByKey { .. } => {
                    let pc = &components.pcollections[&topic.pcollection];
                    let ws = &components.windowing_strategies[&pc.windowing_strategy_id];
                    let spec = WindowingSpec::from_proto(components, ws)?;
                    Some((spec, wire_coders(components, &topic.pcollection)?.0))
                }
            };
            inputs.push(InputSpec {
                topic: topic.name.clone(),
                partitions: topic.partitions,
                upstream: topic.upstream.clone(),
                source_transform: descriptor::source_id(&i.pcollection),
                gbk,
                source,
                window_coder: wire_coders(components, &i.pcollection)?.1,
                allowed_lateness: allowed_lateness(components, &i.pcollection),
            });
        }
        let mut side_inputs = Vec::new();
        for si in &sub.side_inputs {
            let topic = &plan.topics[si.topic];
            let t = graph.transform(&si.transform);
            let payload = ParDoPayload::decode(t.spec.as_ref().map(|s| s.payload.as_slice()).unwrap_or_default())
                .map_err(|e| format!("'{}' has an unreadable ParDo payload: {e}", t.unique_name))?;
            let urn =
                payload.side_inputs.get(&si.local_name).and_then(|p| p.access_pattern.as_ref()).map(|a| a.urn.clone()).unwrap_or_default();
            let access = Access::from_urn(&urn).ok_or_else(|| {
                format!(
                    "'{}' reads side input '{}' with access pattern '{urn}', which this runner does not serve",
                    t.unique_name, si.local_name
                )
            })?;
            let pc = &components.pcollections[&si.pcollection];
            let window_fn =
                components.windowing_strategies.get(&pc.windowing_strategy_id).and_then(|w| w.window_fn.clone()).unwrap_or_default();
            let (element_coder, window_coder) = wire_coders(components, &si.pcollection)?;
            side_inputs.push(SideInputSpec {
                topic: topic.name.clone(),
                upstream: topic.upstream.clone(),
                transform: si.transform.clone(),
                local_name: si.local_name.clone(),
                access,
                windowing: SideWindowing::from_window_fn(&window_fn),
                element_coder,
                window_coder,
            });
        }
        let mut outputs = Vec::new();
        for o in &sub.outputs {
            let topic = &plan.topics[o.topic];
            let (element_coder, window_coder) = wire_coders(components, &o.pcollection)?;
            outputs.push(OutputSink {
                sink_transform: descriptor::sink_id(&o.pcollection),
                topic: topic.name.clone(),
                partitions: topic.partitions,
                window_coder,
                element_coder,
            });
        }
        let mut kafka_sinks = Vec::new();
        for k in &sub.sinks {
            let t = graph.transform(&k.transform);
            let spec = write_spec(t)?;
            let (element, window) = wire_coders(components, &k.pcollection)?;
            let pc = &components.pcollections[&k.pcollection];
            let row_schema = if spec.with_headers {
                let coder = &components.coders[&pc.coder_id];
                let payload = coder.spec.as_ref().map(|s| s.payload.as_slice()).unwrap_or_default();
                Some(
                    Schema::decode(payload)
                        .map_err(|e| format!("WriteToKafka '{}': its input's row schema is malformed: {e}", t.unique_name))?,
                )
            } else {
                None
            };
            kafka_sinks.push(KafkaSinkSpec {
                sink_transform: descriptor::sink_id(&k.pcollection),
                name: t.unique_name.clone(),
                codec: SinkCodec { spec, element, window, row_schema },
            });
        }
        sub_topologies.push(SubTopologySpec {
            id: sub.id,
            partitions: sub.partitions,
            descriptor_id: id,
            display_name: sub.stage.id.clone(),
            sinks: sub.stage.outputs.iter().map(|pc| descriptor::sink_id(pc)).collect(),
            inputs,
            side_inputs,
            stateful: sub.stage.transforms.iter().any(|t| graph.is_stateful(t)),
            timers: timer_families(&graph, &sub.stage.transforms)?,
            outputs,
            kafka_sinks,
        });
    }

    job.set_state(State::Running);
    let input = JobInput { job_id: job.id.clone(), options: job.runner_options.clone(), plan, sub_topologies, worker };
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let (done_tx, done_rx) = oneshot::channel();
    let cancel = job.cancel.subscribe();
    std::thread::Builder::new()
        .name(format!("job-{}", job.id))
        .spawn(move || {
            let _ = done_tx.send(run_job(input, events_tx, cancel));
        })
        .map_err(|e| format!("cannot start the job's thread: {e}"))?;
    let forward = tokio::spawn(forward_events(job.clone(), events_rx));
    let outcome = done_rx.await.unwrap_or_else(|_| JobOutcome::Failed("the job's thread ended without an outcome".into()));
    let _ = forward.await;
    Ok(outcome)
}

fn api(url: &str) -> beam_kafka_proto::pipeline::ApiServiceDescriptor {
    beam_kafka_proto::pipeline::ApiServiceDescriptor { url: url.to_string(), ..Default::default() }
}

async fn forward_events(job: Arc<Job>, mut rx: mpsc::UnboundedReceiver<JobEvent>) {
    while let Some(ev) = rx.recv().await {
        match ev {
            JobEvent::Info(text) => {
                tracing::info!(job = %job.id, "{text}");
                job.message(Importance::JobMessageBasic, text);
            }
            JobEvent::Metrics(infos) => job.metrics.lock().expect("lock").attempted.add(infos),
            JobEvent::CommittedMetrics(infos) => job.metrics.lock().expect("lock").committed.add(infos),
        }
    }
}

/// SDK warnings and errors reach the user's console through the job's
/// messages, as warnings: the client raises the text of the last
/// JOB_MESSAGE_ERROR, which must be the job's own failure.
async fn forward_logs(job: Arc<Job>, mut rx: mpsc::UnboundedReceiver<SdkLog>) {
    use fn_pb::log_entry::severity::Enum as Severity;
    while let Some(log) = rx.recv().await {
        let importance = match Severity::try_from(log.severity).unwrap_or(Severity::Unspecified) {
            Severity::Error | Severity::Critical => Importance::JobMessageWarning,
            Severity::Warn => Importance::JobMessageWarning,
            _ => continue,
        };
        let text = if log.trace.is_empty() { log.message } else { format!("{}\n{}", log.message, log.trace) };
        job.message(importance, text);
    }
}

/// The allowed lateness (ms) of a PCollection's windowing strategy.
fn allowed_lateness(components: &beam_kafka_proto::pipeline::Components, pcollection: &str) -> i64 {
    components
        .pcollections
        .get(pcollection)
        .and_then(|pc| components.windowing_strategies.get(&pc.windowing_strategy_id))
        .map_or(0, |ws| ws.allowed_lateness.max(0))
}

/// The timer families of a stage's ParDos, with the coders the runner reads
/// their timers with (keys length-prefixed as in the stage's descriptor).
fn timer_families(graph: &PipelineGraph, transforms: &[String]) -> Result<Vec<TimerFamilySpec>, String> {
    use beam_kafka_proto::pipeline::time_domain::Enum as Domain;
    let components = graph.components();
    let mut out = Vec::new();
    for id in transforms {
        let t = graph.transform(id);
        let Some(spec) = t.spec.as_ref().filter(|s| s.urn == beam_kafka_runtime::urns::PAR_DO) else { continue };
        let payload =
            ParDoPayload::decode(spec.payload.as_slice()).map_err(|e| format!("'{}': unreadable ParDo payload: {e}", t.unique_name))?;
        for (family, tf) in &payload.timer_family_specs {
            let domain = match Domain::try_from(tf.time_domain) {
                Ok(Domain::ProcessingTime) => TimeDomain::ProcessingTime,
                _ => TimeDomain::EventTime,
            };
            let coder = components
                .coders
                .get(&tf.timer_family_coder_id)
                .ok_or_else(|| format!("'{}': missing timer coder of '{family}'", t.unique_name))?;
            let (key, window) = match coder.component_coder_ids.as_slice() {
                [k, w] => (k, w),
                _ => return Err(format!("'{}': timer coder of '{family}' is not a timer coder", t.unique_name)),
            };
            let mut scratch = beam_kafka_proto::pipeline::Components { coders: components.coders.clone(), ..Default::default() };
            let lp_key = beam_kafka_runtime::coder::length_prefixed(&mut scratch, key);
            let codec = TimerCodec { key: Coder::from_components(&scratch, &lp_key), window: Coder::from_components(components, window) };
            out.push(TimerFamilySpec { transform: id.clone(), family: family.clone(), domain, codec });
        }
    }
    Ok(out)
}
