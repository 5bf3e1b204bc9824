//! Running one job: topics, bootstrap records, the actor topology, and the
//! end of a bounded job (every terminal task at +∞).
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use beam_kafka_config::{ProcessingGuarantee, RunnerOptions};
use beam_kafka_runtime::kafka_io::same_cluster;
use beam_kafka_fnapi::SdkWorker;
use beam_kafka_proto::pipeline::MonitoringInfo;
use beam_kafka_runtime::coder::Coder;
use beam_kafka_runtime::coders::impulse_element;
use beam_kafka_runtime::gbk::GroupByKey;
use beam_kafka_runtime::windowing::WindowingSpec;
use beam_kafka_runtime::timestamp::Watermark;
use beam_kafka_runtime::task_state;
use beam_kafka_runtime::watermark::InputWatermark;
use beam_kafka_runtime::topology::{changelog_topic, sub_topology_source, TaskId, TopicKind, TopologyPlan};
use dashmap::DashMap;
use rdkafka::consumer::Consumer;
use rdkafka::TopicPartitionList;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::sync::{mpsc, watch};

use crate::envelope;
use crate::kafka::admin::{Admin, TopicSpec};
use crate::kafka::config;
use crate::kafka::rebalance::{JobConsumer, JobContext, Membership};
use crate::kafka::transaction;
use crate::output::KafkaSink;
use crate::messages::Shutdown;
use crate::poller::{poll_loop, PollSettings};
use crate::output::OutputSink;
use crate::stage::{StageActor, StageSpec};
use crate::source::{SourceInput, SourceRoute};
use crate::state::restore_task;
use crate::store::TaskStore;
use crate::task::{upstream_key, InputRoute, RestoredState, TaskConfig, TaskEvent, TaskSupervisor, WatermarkTarget, SOURCE_UPSTREAM};
use crate::user_io::{resolve_sources, start_kafka_io, KafkaIo};
use beam_kafka_runtime::kafka_sink::SinkCodec;

/// One input topic of a sub-topology, ready to run.
pub struct InputSpec {
    pub topic: String,
    pub partitions: u32,
    /// Who reports watermarks on the topic.
    pub upstream: String,
    /// The stage's data source this input feeds.
    pub source_transform: String,
    /// The GroupByKey in front of the stage: its windowing and input coder.
    pub gbk: Option<(WindowingSpec, Coder)>,
    /// Set when the topic is a user topic read by ReadFromKafka.
    pub source: Option<Arc<SourceInput>>,
}

/// A stage output written to a user topic by WriteToKafka.
pub struct KafkaSinkSpec {
    pub sink_transform: String,
    pub name: String,
    pub codec: SinkCodec,
}

/// A sub-topology, its descriptor registered with the worker.
pub struct SubTopologySpec {
    pub id: u32,
    pub partitions: u32,
    pub descriptor_id: String,
    pub display_name: String,
    /// Every data sink of the descriptor.
    pub sinks: Vec<String>,
    pub inputs: Vec<InputSpec>,
    pub outputs: Vec<OutputSink>,
    pub kafka_sinks: Vec<KafkaSinkSpec>,
}

pub struct JobInput {
    pub job_id: String,
    pub options: RunnerOptions,
    pub plan: TopologyPlan,
    pub sub_topologies: Vec<SubTopologySpec>,
    pub worker: Arc<SdkWorker>,
}

/// What a running job reports as it goes.
#[derive(Debug)]
pub enum JobEvent {
    Info(String),
    /// Metrics of finished bundles.
    Metrics(Vec<MonitoringInfo>),
    /// Metrics of bundles whose task has since committed its progress.
    CommittedMetrics(Vec<MonitoringInfo>),
}

#[derive(Debug, PartialEq, Eq)]
pub enum JobOutcome {
    Done,
    Failed(String),
    Cancelled,
}

/// Runs a job to its end on the calling thread, inside an actix system of its
/// own. Blocking: call it from a dedicated thread.
pub fn run_job(input: JobInput, events: mpsc::UnboundedSender<JobEvent>, cancel: watch::Receiver<bool>) -> JobOutcome {
    let system = actix::System::new();
    let outcome = system.block_on(drive(input, events, cancel));
    System::current().stop();
    let _ = system.run();
    outcome
}

async fn drive(mut input: JobInput, events: mpsc::UnboundedSender<JobEvent>, mut cancel: watch::Receiver<bool>) -> JobOutcome {
    if *cancel.borrow_and_update() {
        return JobOutcome::Cancelled;
    }
    let admin = match Admin::connect(&input.options) {
        Ok(a) => a,
        Err(e) => return JobOutcome::Failed(e),
    };
    let start_offsets = match resolve_sources(&admin, &mut input).await {
        Ok(s) => s,
        Err(e) => return JobOutcome::Failed(e),
    };
    let io = match start_kafka_io(&input) {
        Ok(io) => KafkaIo { start_offsets, ..io },
        Err(e) => return JobOutcome::Failed(e),
    };
    let opts = &input.options;
    if opts.processing_guarantee == ProcessingGuarantee::ExactlyOnce {
        for k in io.sinks.values().flatten() {
            let servers = k.codec.spec.producer_config.get("bootstrap.servers").map(String::as_str).unwrap_or_default();
            if !same_cluster(servers, &opts.bootstrap_servers) {
                let _ = events.send(JobEvent::Info(format!(
                    "WriteToKafka '{}' writes to another cluster ({servers}) than the runner's; its records cannot join the \
                     runner's transactions, so they are written at least once",
                    k.name
                )));
            }
        }
    }
    if let Err(e) = bootstrap(&admin, &input).await {
        return JobOutcome::Failed(e);
    }
    let mut consumer_config = config::consumer(opts);
    for (k, v) in &io.consumer_properties {
        consumer_config.set(k, v);
    }
    let (membership_tx, mut membership_rx) = mpsc::unbounded_channel();
    let generation = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let consumer: Arc<JobConsumer> = match consumer_config.create_with_context(JobContext::new(membership_tx, generation.clone())) {
        Ok(c) => Arc::new(c),
        Err(e) => return JobOutcome::Failed(format!("cannot create the Kafka consumer: {e}")),
    };
    let topic_names: Vec<&str> = input.plan.topics.iter().map(|t| t.name.as_str()).collect();
    if let Err(e) = consumer.subscribe(&topic_names) {
        return JobOutcome::Failed(format!("cannot subscribe to {}: {e}", topic_names.join(", ")));
    }
    let producer: Arc<FutureProducer> = match config::producer(opts).create() {
        Ok(p) => Arc::new(p),
        Err(e) => return JobOutcome::Failed(format!("cannot create the Kafka producer: {e}")),
    };
    let (task_tx, mut task_rx) = mpsc::unbounded_channel();
    let routes: Routes = Arc::new(DashMap::new());
    let settings = PollSettings {
        max_records: opts.read_max_elements_per_poll as usize,
        max_wait: Duration::from_millis(opts.read_max_poll_time_ms),
    };
    let (poll_consumer, poll_routes, poll_events) = (consumer.clone(), routes.clone(), task_tx.clone());
    let poller = actix_rt::spawn(async move {
        let reason = poll_loop(poll_consumer, poll_routes, settings, generation).await;
        let _ = poll_events.send(TaskEvent::Failed(reason));
    });
    // Tasks come and go with the partitions the group gives this process.
    let mut live: HashMap<TaskId, LiveTask> = HashMap::new();
    let mut assigned: BTreeSet<(String, i32)> = BTreeSet::new();
    let mut waiting: BTreeSet<TaskId> = input.plan.terminal_tasks().into_iter().collect();
    let outcome = loop {
        tokio::select! {
            m = membership_rx.recv() => match m {
                Some(Membership::Revoked(parts)) => {
                    for p in &parts {
                        assigned.remove(p);
                    }
                    let moving: Vec<TaskId> =
                        live.values().filter(|t| t.partitions.iter().any(|p| parts.contains(p))).map(|t| t.task).collect();
                    let stopped = !moving.is_empty();
                    for t in moving {
                        let gone = live.remove(&t).expect("listed above");
                        for p in &gone.partitions {
                            routes.remove(p);
                        }
                        gone.addr.do_send(Shutdown);
                    }
                    if stopped {
                        let _ = events.send(JobEvent::Info(running_message(opts, &live)));
                    }
                }
                Some(Membership::Assigned(parts)) => {
                    assigned.extend(parts);
                    match start_assigned(&input, &io, &assigned, &live, &consumer, &producer, &task_tx).await {
                        Ok(started) if !started.is_empty() => {
                            for t in started {
                                for p in &t.partitions {
                                    routes.insert(p.clone(), t.addr.clone().recipient());
                                }
                                live.insert(t.task, t);
                            }
                            let _ = events.send(JobEvent::Info(running_message(opts, &live)));
                        }
                        Ok(_) => {}
                        Err(e) => break JobOutcome::Failed(e),
                    }
                }
                None => break JobOutcome::Failed("the consumer stopped reporting its group membership".into()),
            },
            ev = task_rx.recv() => match ev {
                Some(TaskEvent::Finished(task)) => {
                    waiting.remove(&task);
                    if waiting.is_empty() {
                        break JobOutcome::Done;
                    }
                }
                Some(TaskEvent::Failed(error)) => break JobOutcome::Failed(error),
                Some(TaskEvent::Stopped { task, incarnation, reason }) => {
                    // An earlier incarnation (already replaced) is old news.
                    if live.get(&task).is_none_or(|t| t.incarnation != incarnation) {
                        continue;
                    }
                    let gone = live.remove(&task).expect("checked above");
                    for p in &gone.partitions {
                        routes.remove(p);
                    }
                    if !gone.partitions.iter().all(|p| assigned.contains(p)) {
                        continue;
                    }
                    let _ = events.send(JobEvent::Info(format!("task {task} stopped ({reason}); restarting it from its last commit")));
                    if let Err(e) = rewind(&consumer, &gone.partitions).await {
                        break JobOutcome::Failed(e);
                    }
                    match start_assigned(&input, &io, &assigned, &live, &consumer, &producer, &task_tx).await {
                        Ok(started) => {
                            for t in started {
                                for p in &t.partitions {
                                    routes.insert(p.clone(), t.addr.clone().recipient());
                                }
                                live.insert(t.task, t);
                            }
                        }
                        Err(e) => break JobOutcome::Failed(e),
                    }
                }
                Some(TaskEvent::Metrics(m)) => { let _ = events.send(JobEvent::Metrics(m)); }
                Some(TaskEvent::CommittedMetrics(m)) => { let _ = events.send(JobEvent::CommittedMetrics(m)); }
                Some(TaskEvent::Info(text)) => { let _ = events.send(JobEvent::Info(text)); }
                None => break JobOutcome::Failed("every task stopped before the job finished".into()),
            },
            _ = cancel.changed() => break JobOutcome::Cancelled,
        }
    };
    poller.abort();
    for t in live.values() {
        t.addr.do_send(Shutdown);
    }
    consumer.unsubscribe();
    drop(live);
    drop(consumer);
    // Let the actors stop and release the consumer before the group is deleted.
    tokio::time::sleep(Duration::from_millis(100)).await;
    if outcome == JobOutcome::Done && !opts.keep_runner_topics {
        cleanup(&admin, &input, &events).await;
    }
    outcome
}

/// Creates the runner-owned topics and writes the bootstrap records of every
/// impulse topic whose previous contents were fully consumed.
async fn bootstrap(admin: &Admin, input: &JobInput) -> Result<(), String> {
    let opts = &input.options;
    let specs: Vec<TopicSpec> =
        input.plan.runner_topics().map(|t| TopicSpec { name: t.name.clone(), partitions: t.partitions, compacted: false }).chain(
            input.plan.sub_topologies.iter().map(|s| TopicSpec {
                name: changelog_topic(&opts.application_id, s.id),
                partitions: s.partitions,
                compacted: true,
            }),
        ).collect();
    admin.ensure_topics(&specs, opts.topic_replication_factor).await?;
    let producer: FutureProducer =
        config::producer(opts).create().map_err(|e| format!("cannot create a Kafka producer: {e}"))?;
    for topic in &input.plan.topics {
        match topic.kind {
            TopicKind::Impulse => {
                let end = admin.end_offset(&topic.name, 0).await?;
                if end > 0 {
                    // An earlier run (or copy) of this application wrote the
                    // impulse: its tasks resume from their commits instead of
                    // firing it twice.
                    continue;
                }
                let records = [
                    envelope::data(impulse_element()),
                    envelope::watermark(Watermark::PosInf, &topic.upstream, 0, 1),
                ];
                for payload in records {
                    producer
                        .send(FutureRecord::<[u8], _>::to(&topic.name).partition(0).payload(&payload), Duration::from_secs(30))
                        .await
                        .map_err(|(e, _)| format!("cannot write to {}: {e}", topic.name))?;
                }
            }
            TopicKind::Shuffle | TopicKind::Source => {}
        }
    }
    Ok(())
}

type Routes = Arc<DashMap<(String, i32), Recipient<crate::messages::RecordBatch>>>;

/// Every task's saved state: its local store brought up to date with its
/// changelog partition.
async fn restore_states(input: &JobInput, tasks: &[TaskId]) -> Result<HashMap<TaskId, Restored>, String> {
    let opts = input.options.clone();
    let tasks = tasks.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut out = HashMap::new();
        for t in tasks {
            let (store, entries, next) = restore_task(&opts, t)?;
            out.insert(t, Restored { store, entries, next });
        }
        Ok(out)
    })
    .await
    .map_err(|e| format!("restoring state failed: {e}"))?
}

/// A task's restored state, before it is handed to the task.
struct Restored {
    store: TaskStore,
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    next: i64,
}

/// Under exactly_once, a transactional producer per task (its transaction
/// initialised, earlier incarnations fenced).
async fn transactional_producers(input: &JobInput, tasks: &[TaskId]) -> Result<HashMap<TaskId, Arc<FutureProducer>>, String> {
    if input.options.processing_guarantee != ProcessingGuarantee::ExactlyOnce {
        return Ok(HashMap::new());
    }
    let opts = input.options.clone();
    let tasks = tasks.to_vec();
    tokio::task::spawn_blocking(move || tasks.into_iter().map(|t| transaction::start(&opts, t).map(|p| (t, p))).collect())
        .await
        .map_err(|e| format!("starting transactional producers failed: {e}"))?
}

/// Starts `to_start`'s actors; returns each task with the partitions it owns.
#[allow(clippy::too_many_arguments)]
fn start_tasks(
    input: &JobInput,
    io: &KafkaIo,
    to_start: &[TaskId],
    txn_producers: &HashMap<TaskId, Arc<FutureProducer>>,
    restored: &mut HashMap<TaskId, Restored>,
    consumer: Arc<JobConsumer>,
    producer: Arc<FutureProducer>,
    events: mpsc::UnboundedSender<TaskEvent>,
) -> Result<Vec<LiveTask>, String> {
    let opts = &input.options;
    let mut tasks = Vec::new();
    for &task in to_start {
        let sub = input
            .sub_topologies
            .iter()
            .find(|s| s.id == task.sub_topology)
            .ok_or_else(|| format!("no specification for sub-topology {}", task.sub_topology))?;
        let mut inputs = HashMap::new();
        let mut upstreams = Vec::new();
        // A task owns partition p of each input topic that has one.
        for i in sub.inputs.iter().filter(|i| task.partition < i.partitions) {
            let gbk = match &i.gbk {
                Some((spec, coder)) => Some(GroupByKey::new(spec.clone(), coder)?),
                None => None,
            };
            let source = match &i.source {
                Some(src) => {
                    let shared = io.sources.get(&src.transform).cloned().ok_or_else(|| format!("no state for {}", src.name))?;
                    upstreams.push(upstream_key(&i.topic, SOURCE_UPSTREAM));
                    let start = io.start_offsets.get(&(i.topic.clone(), task.partition as i32)).copied();
                    Some(SourceRoute::new(src.clone(), shared, opts.read_idle_timeout_ms as i64, start))
                }
                None => {
                    upstreams.push(upstream_key(&i.topic, &i.upstream));
                    None
                }
            };
            inputs.insert(i.topic.clone(), InputRoute { source_transform: i.source_transform.clone(), gbk, source });
        }
        let mut targets: Vec<WatermarkTarget> = Vec::new();
        for o in &sub.outputs {
            if !targets.iter().any(|t| t.topic == o.topic) {
                targets.push(WatermarkTarget { topic: o.topic.clone(), partitions: o.partitions });
            }
        }
        let task_producer = txn_producers.get(&task).cloned().unwrap_or_else(|| producer.clone());
        let transactional = txn_producers.contains_key(&task);
        // A sink on the runner's cluster writes inside the task's transaction;
        // one on another cluster cannot (at-least-once, said at start).
        let kafka_sinks: Vec<KafkaSink> = io
            .sinks
            .get(&sub.id)
            .into_iter()
            .flatten()
            .map(|k| {
                let servers = k.codec.spec.producer_config.get("bootstrap.servers").map(String::as_str).unwrap_or_default();
                if transactional && same_cluster(servers, &opts.bootstrap_servers) {
                    KafkaSink { producer: task_producer.clone(), ..k.clone() }
                } else {
                    k.clone()
                }
            })
            .collect();
        // The task's durable state, read from its changelog partition.
        let Restored { store, entries, next } = restored.remove(&task).ok_or_else(|| format!("task {task} has no state store"))?;
        let mut watermark_snapshot = Vec::new();
        let mut gbk_entries: HashMap<String, Vec<(Vec<u8>, Vec<u8>)>> = HashMap::new();
        for (k, v) in entries {
            match task_state::split(&k).map_err(|e| format!("task {task}: unreadable state: {e}"))? {
                task_state::Store::Watermark => watermark_snapshot = v,
                task_state::Store::GroupByKey { topic, key } => gbk_entries.entry(topic.to_string()).or_default().push((key.to_vec(), v)),
            }
        }
        for (topic, route) in inputs.iter_mut() {
            if let (Some(gbk), Some(entries)) = (route.gbk.as_mut(), gbk_entries.get(topic)) {
                gbk.restore(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
                    .map_err(|e| format!("task {task}: the saved state of the GroupByKey reading {topic} is unreadable: {e}"))?;
            }
        }
        let mut input_watermark = InputWatermark::new(upstreams);
        if !watermark_snapshot.is_empty() {
            input_watermark.restore(&watermark_snapshot).map_err(|e| format!("task {task}: its saved watermark is unreadable: {e}"))?;
        }
        let restored_state = RestoredState { input_watermark, watermark_snapshot, store, changelog_next: next };
        let incarnation = NEXT_INCARNATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cfg = TaskConfig {
            task,
            incarnation,
            report_source: sub_topology_source(sub.id),
            total_partitions: sub.partitions,
            inputs,
            targets,
            commit_interval: Duration::from_millis(opts.commit_interval_ms),
            state_topic: changelog_topic(&opts.application_id, sub.id),
            transactional,
        };
        let spec = StageSpec {
            display_name: sub.display_name.clone(),
            descriptor_id: sub.descriptor_id.clone(),
            sources: sub.inputs.iter().map(|i| i.source_transform.clone()).collect::<std::collections::BTreeSet<_>>().into_iter().collect(),
            sinks: sub.sinks.clone(),
            outputs: sub.outputs.clone(),
            kafka_sinks,
            producer: task_producer.clone(),
            max_bundle_size: opts.max_bundle_size,
            max_bundle_time: Duration::from_millis(opts.max_bundle_time_ms),
        };
        let topics: Vec<String> = cfg.inputs.keys().cloned().collect();
        let (worker, consumer, producer, events) = (input.worker.clone(), consumer.clone(), task_producer, events.clone());
        let addr = TaskSupervisor::create(move |ctx| {
            let stage = StageActor::new(spec, worker, ctx.address().recipient()).start();
            TaskSupervisor::new(cfg, stage, consumer, producer, events, restored_state)
        });
        let partitions = topics.into_iter().map(|t| (t, task.partition as i32)).collect();
        tasks.push(LiveTask { task, incarnation, addr, partitions });
    }
    Ok(tasks)
}

/// Pauses `partitions` and moves the consumer back to their last commit, so a
/// restarted task reads again what its previous incarnation did not commit.
async fn rewind(consumer: &Arc<JobConsumer>, partitions: &[(String, i32)]) -> Result<(), String> {
    let mut tpl = TopicPartitionList::new();
    for (t, p) in partitions {
        tpl.add_partition(t, *p);
    }
    consumer.pause(&tpl).map_err(|e| format!("cannot pause {partitions:?}: {e}"))?;
    let consumer = consumer.clone();
    tokio::task::spawn_blocking(move || {
        let committed = consumer.committed_offsets(tpl, Duration::from_secs(10)).map_err(|e| format!("cannot read committed offsets: {e}"))?;
        for e in committed.elements() {
            let to = match e.offset() {
                rdkafka::Offset::Offset(o) if o >= 0 => rdkafka::Offset::Offset(o),
                _ => rdkafka::Offset::Beginning,
            };
            consumer
                .seek(e.topic(), e.partition(), to, Duration::from_secs(10))
                .map_err(|err| format!("cannot rewind {}[{}]: {err}", e.topic(), e.partition()))?;
        }
        Ok(())
    })
    .await
    .map_err(|e| format!("rewinding failed: {e}"))?
}

/// Which tasks this process runs now, for the job's messages.
fn running_message(opts: &RunnerOptions, live: &HashMap<TaskId, LiveTask>) -> String {
    let mut ids: Vec<String> = live.keys().map(|t| t.to_string()).collect();
    ids.sort();
    format!("running {} task(s) of application {} on {}: {}", live.len(), opts.application_id, opts.bootstrap_servers, ids.join(" "))
}

static NEXT_INCARNATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A task running in this process, and the input partitions it owns.
struct LiveTask {
    task: TaskId,
    incarnation: u64,
    addr: Addr<TaskSupervisor>,
    partitions: Vec<(String, i32)>,
}

/// The input partitions task `t` owns: partition p of each input topic that has one.
fn task_partitions(input: &JobInput, t: TaskId) -> Vec<(String, i32)> {
    input
        .sub_topologies
        .iter()
        .filter(|s| s.id == t.sub_topology)
        .flat_map(|s| s.inputs.iter())
        .filter(|i| t.partition < i.partitions)
        .map(|i| (i.topic.clone(), t.partition as i32))
        .collect()
}

/// Restores, initialises and starts the tasks whose partitions are now all
/// assigned here; their partitions are resumed once they run.
async fn start_assigned(
    input: &JobInput,
    io: &KafkaIo,
    assigned: &BTreeSet<(String, i32)>,
    live: &HashMap<TaskId, LiveTask>,
    consumer: &Arc<JobConsumer>,
    producer: &Arc<FutureProducer>,
    events: &mpsc::UnboundedSender<TaskEvent>,
) -> Result<Vec<LiveTask>, String> {
    let to_start: Vec<TaskId> = input
        .plan
        .tasks()
        .into_iter()
        .filter(|t| !live.contains_key(t))
        .filter(|t| {
            let parts = task_partitions(input, *t);
            !parts.is_empty() && parts.iter().all(|p| assigned.contains(p))
        })
        .collect();
    if to_start.is_empty() {
        return Ok(Vec::new());
    }
    let txn_producers = transactional_producers(input, &to_start).await?;
    let mut restored = restore_states(input, &to_start).await?;
    let started = start_tasks(input, io, &to_start, &txn_producers, &mut restored, consumer.clone(), producer.clone(), events.clone())?;
    let mut resume = TopicPartitionList::new();
    for t in &started {
        for (topic, p) in &t.partitions {
            resume.add_partition(topic, *p);
        }
    }
    consumer.resume(&resume).map_err(|e| format!("cannot resume the partitions of started tasks: {e}"))?;
    Ok(started)
}

/// Deletes the topics and consumer group of a finished bounded job.
async fn cleanup(admin: &Admin, input: &JobInput, events: &mpsc::UnboundedSender<JobEvent>) {
    let mut names: Vec<String> = input.plan.runner_topics().map(|t| t.name.clone()).collect();
    names.extend(input.plan.sub_topologies.iter().map(|s| changelog_topic(&input.options.application_id, s.id)));
    if let Err(e) = admin.delete_topics(&names).await {
        let _ = events.send(JobEvent::Info(format!("could not delete the job's topics: {e}")));
    }
    let local = input.options.state_dir.join(&input.options.application_id);
    if let Err(e) = std::fs::remove_dir_all(&local) {
        if e.kind() != std::io::ErrorKind::NotFound {
            let _ = events.send(JobEvent::Info(format!("could not delete the job's local state {}: {e}", local.display())));
        }
    }
    // The group empties once the consumer has left; retry briefly.
    for attempt in 0..10 {
        match admin.delete_group(&input.options.application_id).await {
            Ok(()) => return,
            Err(e) if attempt == 9 => {
                let _ = events.send(JobEvent::Info(format!("could not delete the consumer group: {e}")));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
}
