//! Starting tasks on this copy: the copy's transaction (fencing the tasks'
//! earlier owners), each task's restored state, its partitions sought to their last
//! commit, then its supervisor and stage actors. Tasks taken over together
//! are prepared in parallel; a change of assignment meanwhile cancels the start.
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::kafka::failure::failure;
use crate::kafka::producer::{KafkaProducer, ProducerSlot};
use actix::prelude::*;
use beam_kafka_config::ProcessingGuarantee;
use beam_kafka_runtime::gbk::GroupByKey;
use beam_kafka_runtime::kafka::failure::Failure;
use beam_kafka_runtime::kafka::io::same_cluster;
use beam_kafka_runtime::kafka::topic_partition::TopicPartition;
use beam_kafka_runtime::plan::topology::{changelog_topic, sub_topology_source, TaskId};
use beam_kafka_runtime::state::task_state;
use beam_kafka_runtime::window::watermark::InputWatermark;
use rdkafka::consumer::Consumer;
use rdkafka::TopicPartitionList;
use tokio::sync::mpsc;

use crate::bundle_state::BundleState;
use crate::copy_transaction::{CopyTransactions, Prepare, TxnHandle};
use crate::group_by_key::GbkStoreView;
use crate::job_input::JobInput;
use crate::kafka::rebalance::{Assignment, JobConsumer};
use crate::output::KafkaSink;
use crate::side_inputs::{read_side_topic, SideInputs};
use crate::source::SourceRoute;
use crate::stage::{StageActor, StageSpec};
use crate::state::{open_task_store, restore_task, Restored};
use crate::store::{Entries, TaskStore};
use crate::task::{
    upstream_key, AssignmentSeen, InputRoute, RestoredState, TaskConfig, TaskEvent, TaskSupervisor, WatermarkTarget, SOURCE_UPSTREAM,
};
use crate::telemetry::{instruments, past_span};
use crate::user_io::KafkaIo;
use crate::window_fns::WindowFnClient;
use beam_kafka_fnapi::StateHandler;
use beam_kafka_runtime::state::timers::{PendingTimer, TimerId, Timers};
use beam_kafka_runtime::state::user_state::{StateCell, UserState};
use beam_kafka_runtime::task::flow::FlowLimits;
use beam_kafka_runtime::task::roster::Roster;

/// How long asking the job's consumer for a changelog's ends may take
/// before the restore asks on a connection of its own.
const WARM_ENDS_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a start waits for a standby to read its changelog to the end:
/// about what a restore consumer of the start's own would take.
const CATCH_UP_WAIT: Duration = Duration::from_millis(30);

/// Every task's saved state: its local store brought up to date with its
/// changelog partition.
async fn restore_states(input: &JobInput, opened: OpenedStores, consumer: &Arc<JobConsumer>) -> Result<HashMap<TaskId, Restored>, String> {
    let opts = input.options.clone();
    let board = input.board.clone();
    let consumer = consumer.clone();
    tokio::task::spawn_blocking(move || {
        // The job's consumer is connected: asking it for a changelog's ends
        // is one round trip.
        let ends = |topic: &str, partition: i32| consumer.fetch_watermarks(topic, partition, WARM_ENDS_TIMEOUT).ok();
        in_parallel(opened.into_iter().collect(), |t, store| {
            let began = std::time::SystemTime::now();
            let restored = restore_task(&opts, t, store, &ends);
            let end = std::time::SystemTime::now();
            let mut attributes = board.task_attributes(t);
            instruments().restore_duration.record(end.duration_since(began).unwrap_or_default().as_secs_f64(), &attributes);
            if let Ok(r) = &restored {
                attributes.push(opentelemetry::KeyValue::new("beam_kafka.restore.entries", r.entries.len() as i64));
            }
            past_span("beam_kafka.task.restore", began, end, attributes);
            restored
        })
    })
    .await
    .map_err(|e| format!("restoring state failed: {e}"))?
}

/// Tasks' opened stores, each with the changelog offset it is current to.
type OpenedStores = HashMap<TaskId, (TaskStore, i64)>;

/// Opens the stores of `tasks` (waiting for their locks) on blocking
/// threads; runs while their transaction is prepared. Returns them, and
/// the tasks whose store a standby of this copy keeps: those are taken
/// once the earlier owners are fenced (`take_standby_stores`).
fn open_stores(input: &JobInput, tasks: &[TaskId]) -> tokio::task::JoinHandle<Result<(OpenedStores, Vec<TaskId>), String>> {
    let (opts, tasks) = (input.options.clone(), tasks.to_vec());
    tokio::task::spawn_blocking(move || {
        let (warm, cold): (Vec<TaskId>, Vec<TaskId>) = tasks.iter().partition(|t| crate::standby::keeps(&opts.application_id, **t));
        in_parallel(cold.into_iter().map(|t| (t, ())).collect(), |t, ()| open_task_store(&opts, t)).map(|opened| (opened, warm))
    })
}

/// Opened stores stay trusted for the next try of a start that failed.
fn keep_trusted(opened: Option<&OpenedStores>) {
    for (task, (store, from)) in opened.into_iter().flatten() {
        if let Err(e) = store.write_checkpoint(*from) {
            tracing::warn!(task = %task, "{e}");
        }
    }
}

/// The stores of `tasks` that a standby of this copy keeps, each once the
/// standby read to its changelog's end (or for `CATCH_UP_WAIT`): the start
/// fenced their earlier owners, so the end holds the abort of what they
/// left open. A store the standby gave up meanwhile is opened.
async fn take_standby_stores(input: &JobInput, tasks: &[TaskId], consumer: &Arc<JobConsumer>) -> Result<OpenedStores, String> {
    if tasks.is_empty() {
        return Ok(HashMap::new());
    }
    let (opts, tasks, consumer) = (input.options.clone(), tasks.to_vec(), consumer.clone());
    tokio::task::spawn_blocking(move || {
        in_parallel(tasks.into_iter().map(|t| (t, ())).collect(), |t, ()| {
            let began = Instant::now();
            let topic = changelog_topic(&opts.application_id, t.sub_topology);
            let end = consumer.fetch_watermarks(&topic, t.partition as i32, WARM_ENDS_TIMEOUT).ok().map(|(_, high)| high);
            let asked = began.elapsed();
            match end.and_then(|end| crate::standby::claim_when_current(&opts.application_id, t, end, CATCH_UP_WAIT)) {
                Some(warm) => {
                    tracing::debug!(task = %t, "standby store taken after {:?} (changelog end {end:?} asked in {asked:?}; store current to {})", began.elapsed(), warm.1);
                    Ok(warm)
                }
                None => open_task_store(&opts, t),
            }
        })
    })
    .await
    .map_err(|e| format!("taking the standby stores failed: {e}"))?
}

/// Runs a blocking step (Kafka round trips, mostly waiting) for every task,
/// with what it is given for that task, at once: a copy taking over several
/// tasks waits for the slowest, not the sum.
fn in_parallel<I: Send, T: Send>(
    tasks: Vec<(TaskId, I)>,
    step: impl Fn(TaskId, I) -> Result<T, String> + Sync,
) -> Result<HashMap<TaskId, T>, String> {
    std::thread::scope(|scope| {
        let step = &step;
        let handles: Vec<_> = tasks.into_iter().map(|(t, input)| (t, scope.spawn(move || step(t, input)))).collect();
        handles.into_iter().map(|(t, h)| h.join().map_err(|_| format!("preparing task {t} panicked"))?.map(|v| (t, v))).collect()
    })
}

/// Under exactly_once, the copy's transaction of each sub-topology among
/// `tasks`, ready for them (their earlier owners fenced).
async fn prepare_transactions(
    input: &JobInput,
    txns: Option<&CopyTransactions>,
    tasks: &[TaskId],
    consumer: &JobConsumer,
    assignment: &Arc<Assignment>,
    seen: u64,
) -> Result<HashMap<u32, TxnHandle>, Failure> {
    let Some(txns) = txns.filter(|_| input.options.processing_guarantee == ProcessingGuarantee::ExactlyOnce) else {
        return Ok(HashMap::new());
    };
    let assigned: BTreeSet<TopicPartition> = consumer
        .assignment()
        .map(|tpl| tpl.elements().iter().map(|e| TopicPartition::new(e.topic(), e.partition())).collect())
        .unwrap_or_default();
    let owned: BTreeSet<TaskId> =
        input.plan.tasks().into_iter().filter(|t| task_partitions(input, *t).iter().all(|p| assigned.contains(p))).collect();
    let subs: BTreeSet<u32> = tasks.iter().map(|t| t.sub_topology).collect();
    let prepares = subs.into_iter().map(|sub| {
        let starting: Vec<TaskId> = tasks.iter().copied().filter(|t| t.sub_topology == sub).collect();
        let prepare = Prepare {
            partitions: starting.iter().map(|t| (*t, task_partitions(input, *t))).collect(),
            tasks: starting,
            owned: owned.iter().copied().filter(|t| t.sub_topology == sub).collect(),
            assignment: assignment.clone(),
            seen,
        };
        let txn = txns.get(&sub).cloned();
        async move {
            let txn = txn.ok_or_else(|| Failure::fatal(format!("sub-topology {sub} has no transaction")))?;
            let handle = txn.send(prepare).await.map_err(|e| Failure::fatal(format!("the copy's transaction stopped: {e}")))??;
            Ok::<_, Failure>((sub, handle))
        }
    });
    futures::future::try_join_all(prepares).await.map(|handles| handles.into_iter().collect())
}

/// Stops tasks started here that will not run (their start failed later).
fn stop_all(tasks: &[LiveTask]) {
    for t in tasks {
        t.addr.do_send(crate::messages::Shutdown);
    }
}

/// Starts `to_start`'s actors into `tasks`, each with the partitions it
/// owns. On an error, the caller stops those already started: none may run
/// outside the job's roster.
#[allow(clippy::too_many_arguments)]
fn start_tasks(
    input: &JobInput,
    io: &KafkaIo,
    to_start: &[TaskId],
    txns: &HashMap<u32, TxnHandle>,
    restored: &mut HashMap<TaskId, Restored>,
    starts: &HashMap<TopicPartition, i64>,
    consumer: Arc<JobConsumer>,
    producer: Arc<KafkaProducer>,
    events: mpsc::UnboundedSender<TaskEvent>,
    (assignment, seen): (Arc<Assignment>, u64),
    tasks: &mut Vec<LiveTask>,
) -> Result<(), String> {
    let opts = &input.options;
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
                    let start = starts.get(&TopicPartition::new(i.topic.clone(), task.partition as i32)).copied();
                    Some(SourceRoute::new(src.clone(), shared, opts.read_idle_timeout_ms as i64, start))
                }
                None => {
                    upstreams.push(upstream_key(&i.topic, &i.upstream));
                    None
                }
            };
            inputs.insert(
                i.topic.clone(),
                InputRoute {
                    source_transform: i.source_transform.clone(),
                    gbk,
                    source,
                    window_coder: i.window_coder.clone(),
                    allowed_lateness: i.allowed_lateness,
                    expiry: i.expiry.clone(),
                    time_sorted: i.time_sorted,
                    window_fns: match (&i.window_fns, &i.gbk) {
                        (Some(d), Some((spec, _))) => Some(Arc::new(WindowFnClient::new(
                            input.harnesses.lease(&d.environment_id)?,
                            d.clone(),
                            spec.window_coder.clone(),
                        ))),
                        _ => None,
                    },
                },
            );
        }
        let mut targets: Vec<WatermarkTarget> = Vec::new();
        for o in &sub.outputs {
            if !targets.iter().any(|t| t.topic == o.topic) {
                targets.push(WatermarkTarget { topic: o.topic.clone(), partitions: o.partitions });
            }
        }
        let txn = txns.get(&task.sub_topology);
        let task_producer = txn.map(|t| t.producer.clone()).unwrap_or_else(|| ProducerSlot::new(producer.clone()));
        let transactional = txn.is_some();
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
        let Restored { store, entries, user_state_as_used, next } =
            restored.remove(&task).ok_or_else(|| format!("task {task} has no state store"))?;
        let store = Arc::new(store);
        let mut watermark_snapshot = Vec::new();
        let mut held = Vec::new();
        let mut deferred = Vec::new();
        let mut user = if user_state_as_used && sub.stateful {
            UserState::lazy(&(store.clone() as Arc<dyn beam_kafka_runtime::state::user_state::StoredCells>))
                .map_err(|e| format!("task {task}: unreadable user state: {e}"))?
        } else {
            UserState::default()
        };
        user.set_map_value_coders(sub.multimap_values.clone());
        let mut timers = Timers::default();
        timers.set_expiry_families(
            sub.timers.iter().filter(|t| t.on_window_expiration).map(|t| (t.transform.clone(), t.family.clone())).collect(),
        );
        let mut gbk_entries: HashMap<String, Entries> = HashMap::new();
        for (k, v) in entries {
            match task_state::split(&k).map_err(|e| format!("task {task}: unreadable state: {e}"))? {
                task_state::Store::Watermark => watermark_snapshot = v,
                task_state::Store::GroupByKey { topic, key } => gbk_entries.entry(topic.to_string()).or_default().push((key.to_vec(), v)),
                task_state::Store::Timer(id) => {
                    let id = TimerId::decode(id).map_err(|e| format!("task {task}: unreadable timer: {e}"))?;
                    let t = PendingTimer::decode(&v).map_err(|e| format!("task {task}: unreadable timer: {e}"))?;
                    timers.restore(id, t);
                }
                task_state::Store::UserState(cell) => {
                    let cell = StateCell::decode(cell).map_err(|e| format!("task {task}: unreadable user state: {e}"))?;
                    user.restore(cell, v);
                }
                task_state::Store::UserStateChunk { cell, seq } => {
                    let cell = StateCell::decode(cell).map_err(|e| format!("task {task}: unreadable user state: {e}"))?;
                    user.restore_chunk(cell, seq, v);
                }
                task_state::Store::UserCellChunk { cell, seq } => {
                    let cell = StateCell::decode_grouped(cell).map_err(|e| format!("task {task}: unreadable user state: {e}"))?;
                    user.restore_cell_chunk(cell, seq, v);
                }
                task_state::Store::Held(seq) => {
                    let (source, element) =
                        beam_kafka_runtime::state::held::decode(&v).map_err(|e| format!("task {task}: unreadable held element: {e}"))?;
                    held.push((seq, source, element));
                }
                task_state::Store::Deferred(seq) => {
                    let d = beam_kafka_runtime::state::deferred::decode(&v)
                        .map_err(|e| format!("task {task}: unreadable deferred element: {e}"))?;
                    deferred.push((seq, d));
                }
            }
        }
        user.finish_restore().map_err(|e| format!("task {task}: unreadable user state: {e}"))?;
        for (topic, route) in inputs.iter_mut() {
            if let Some(gbk) = route.gbk.as_mut() {
                gbk.spill_to(Arc::new(GbkStoreView::new(store.clone(), topic)));
            }
            if let (Some(gbk), Some(entries)) = (route.gbk.as_mut(), gbk_entries.get(topic)) {
                gbk.restore(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
                    .map_err(|e| format!("task {task}: the saved state of the GroupByKey reading {topic} is unreadable: {e}"))?;
                if gbk.spilled_windows() > 0 {
                    tracing::info!(task = %task, "the GroupByKey reading {topic} restored panes kept in the state store");
                }
            }
        }
        let mut input_watermark = InputWatermark::new(upstreams);
        if !watermark_snapshot.is_empty() {
            input_watermark.restore(&watermark_snapshot).map_err(|e| format!("task {task}: its saved watermark is unreadable: {e}"))?;
        }
        let restored_state = RestoredState { input_watermark, watermark_snapshot, store, changelog_next: next, held, deferred, timers };
        let side_data = if sub.side_inputs.is_empty() {
            None
        } else {
            Some(Arc::new(SideInputs::new(&sub.side_inputs).map_err(|e| format!("task {task}: {e}"))?))
        };
        let user_state = if sub.stateful { Some(Arc::new(Mutex::new(user))) } else { None };
        let bundle_state: Option<Arc<dyn StateHandler>> = if side_data.is_some() || user_state.is_some() {
            Some(Arc::new(BundleState { side: side_data.clone(), user: user_state.clone() }))
        } else {
            None
        };
        let incarnation = NEXT_INCARNATION.fetch_add(1, Ordering::Relaxed);
        let mailbox = Arc::new(crate::poller::Mailbox::default());
        let cfg = TaskConfig {
            task,
            incarnation,
            mailbox: mailbox.clone(),
            report_source: sub_topology_source(sub.id),
            total_partitions: sub.partitions,
            inputs,
            targets,
            commit_interval: Duration::from_millis(opts.commit_interval_ms),
            group_by_key_memory: (opts.group_by_key_memory_mb as usize) << 20,
            flow: FlowLimits::for_bundles(opts.max_bundle_size, opts.read_max_elements_per_poll),
            state_topic: changelog_topic(&opts.application_id, sub.id),
            transactional,
            txn: txn.cloned(),
            starts: task_partitions(input, task).into_iter().filter_map(|k| starts.get(&k).map(|o| (k, *o))).collect(),
            side_inputs: sub.side_inputs.clone(),
            side_data: side_data.clone(),
            side_mapper: sub
                .side_inputs
                .iter()
                .any(|s| s.mapping.is_some())
                .then(|| input.harnesses.lease(&sub.environment_id).map(|lease| Arc::new(crate::window_fns::HelperBundles::new(lease))))
                .transpose()?,
            user_state: user_state.clone(),
            timer_specs: sub.timers.clone(),
            assignment: AssignmentSeen::new(assignment.clone(), seen, task_partitions(input, task)),
            progress_board: input.test_stream.as_ref().map(|t| t.board.clone()),
            board: input.board.clone(),
            meters: input.board.register(task, incarnation),
        };
        let spec = StageSpec {
            display_name: sub.display_name.clone(),
            descriptor_id: sub.descriptor_id.clone(),
            drain_descriptor_id: sub.drain_descriptor_id.clone(),
            sources: sub.inputs.iter().map(|i| i.source_transform.clone()).collect::<std::collections::BTreeSet<_>>().into_iter().collect(),
            sinks: sub.sinks.clone(),
            outputs: sub.outputs.clone(),
            kafka_sinks,
            producer: task_producer.clone(),
            max_bundle_size: opts.max_bundle_size,
            max_bundle_time: Duration::from_millis(opts.max_bundle_time_ms),
            state: bundle_state,
            timer_families: sub.timers.iter().map(|t| (t.transform.clone(), t.family.clone())).collect(),
            residual_sources: sub.residual_sources.clone(),
            meters: cfg.meters.clone(),
            write_during_bundle: transactional,
        };
        let topics: Vec<String> = cfg.inputs.keys().cloned().collect();
        let (worker, consumer, producer, events) =
            (input.harnesses.lease(&sub.environment_id)?, consumer.clone(), task_producer, events.clone());
        let addr = TaskSupervisor::create(move |ctx| {
            let stage = StageActor::new(spec, worker, ctx.address().recipient()).start();
            TaskSupervisor::new(cfg, stage, consumer, producer, events, restored_state)
        });
        let partitions = topics.into_iter().map(|t| TopicPartition::new(t, task.partition as i32)).collect();
        tasks.push(LiveTask { task, incarnation, addr: addr.clone(), partitions, mailbox });
        // Each task reads its side topics whole, from their start.
        let side_topics: BTreeSet<&String> = sub.side_inputs.iter().map(|s| &s.topic).collect();
        for topic in side_topics {
            read_side_topic(opts, topic, addr.clone().recipient()).map_err(|e| format!("task {task}: {e}"))?;
        }
    }
    Ok(())
}

static NEXT_INCARNATION: AtomicU64 = AtomicU64::new(1);

/// A task running in this process, and the input partitions it owns.
pub(crate) struct LiveTask {
    pub(crate) task: TaskId,
    pub(crate) incarnation: u64,
    pub(crate) addr: Addr<TaskSupervisor>,
    pub(crate) partitions: Vec<TopicPartition>,
    pub(crate) mailbox: Arc<crate::poller::Mailbox>,
}

/// The input partitions task `t` owns: partition p of each input topic that has one.
fn task_partitions(input: &JobInput, t: TaskId) -> Vec<TopicPartition> {
    input
        .sub_topologies
        .iter()
        .filter(|s| s.id == t.sub_topology)
        .flat_map(|s| s.inputs.iter())
        .filter(|i| t.partition < i.partitions)
        .map(|i| TopicPartition::new(i.topic.clone(), t.partition as i32))
        .collect()
}

/// Who runs what in this copy, for the plan's tasks.
pub(crate) fn roster(input: &JobInput) -> Roster<LiveTask> {
    Roster::new(input.plan.tasks().into_iter().map(|t| (t, task_partitions(input, t))))
}

/// Restores, initialises and starts `to_start` (tasks whose partitions are
/// all assigned here); their partitions are resumed, at their last commit,
/// once they run. If any of their partitions changed hands meanwhile,
/// nothing starts: the change's own events decide what runs here.
/// On an error nothing started runs.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn start_assigned(
    input: &JobInput,
    io: &KafkaIo,
    to_start: Vec<TaskId>,
    consumer: &Arc<JobConsumer>,
    producer: &Arc<KafkaProducer>,
    copy_txns: Option<&CopyTransactions>,
    events: &mpsc::UnboundedSender<TaskEvent>,
    assignment: &Arc<Assignment>,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<LiveTask>, Failure> {
    let seen = assignment.now();
    if to_start.is_empty() {
        return Ok(Vec::new());
    }
    let began = Instant::now();
    let opening = open_stores(input, &to_start);
    let txns = prepare_transactions(input, copy_txns, &to_start, consumer, assignment, seen).await;
    // The local stores' errors are the operating system's (a full disk).
    let opened = opening.await.map_err(|e| format!("opening the state stores failed: {e}")).and_then(|o| o).map_err(Failure::local);
    let (txns, (mut opened, warm)) = match (txns, opened) {
        (Ok(txns), Ok(opened)) => (txns, opened),
        (txns, opened) => {
            keep_trusted(opened.as_ref().ok().map(|(o, _)| o));
            return Err(txns.err().or(opened.err()).unwrap_or_else(|| Failure::fatal("a start step failed")));
        }
    };
    // Steps that still report text: the code names rdkafka writes into
    // it, and the wording of the rest, decide (`Failure::from_text`).
    match take_standby_stores(input, &warm, consumer).await {
        Ok(taken) => opened.extend(taken),
        Err(e) => {
            keep_trusted(Some(&opened));
            return Err(Failure::from_text(e));
        }
    }
    tracing::debug!("tasks {to_start:?}: transaction ready, stores opened after {:?}", began.elapsed());
    for t in &to_start {
        input.board.restoring(*t);
    }
    let mut restored = restore_states(input, opened, consumer).await.map_err(Failure::from_text)?;
    tracing::debug!("tasks {to_start:?}: state restored after {:?}", began.elapsed());
    let partitions: Vec<TopicPartition> = to_start.iter().flat_map(|t| task_partitions(input, *t)).collect();
    let starts =
        match crate::start_offsets::seek_to_commits(consumer, &partitions, &io.start_offsets, assignment.clone(), seen, stop.clone()).await
        {
            Ok(s) => s,
            Err(e) => {
                // Restored stores stay trusted for the next try.
                for (task, r) in restored {
                    if let Err(e) = r.store.write_checkpoint(r.next) {
                        tracing::warn!(task = %task, "{e}");
                    }
                }
                return Err(e);
            }
        };
    let Some(starts) = starts.filter(|_| !assignment.any_changed_since(&partitions, seen)) else {
        // Resuming now could resume partitions a newer assignment paused.
        tracing::debug!("the assignment changed while tasks {to_start:?} were being prepared; not starting them");
        for (task, r) in restored {
            if let Err(e) = r.store.write_checkpoint(r.next) {
                tracing::warn!(task = %task, "{e}");
            }
        }
        return Ok(Vec::new());
    };
    tracing::debug!("tasks {to_start:?}: partitions sought after {:?}", began.elapsed());
    let first_offsets: HashMap<TopicPartition, i64> =
        starts.iter().map(|(k, o)| (k.clone(), if let rdkafka::Offset::Offset(n) = o { *n } else { 0 })).collect();
    let mut started = Vec::new();
    let all = start_tasks(
        input,
        io,
        &to_start,
        &txns,
        &mut restored,
        &first_offsets,
        consumer.clone(),
        producer.clone(),
        events.clone(),
        (assignment.clone(), seen),
        &mut started,
    );
    if let Err(e) = all {
        stop_all(&started);
        return Err(Failure::from_text(e));
    }
    let mut resume = TopicPartitionList::new();
    for t in &started {
        for tp in &t.partitions {
            resume.add_partition(&tp.topic, tp.partition);
        }
    }
    if let Err(e) = consumer.resume(&resume) {
        stop_all(&started);
        return Err(failure(&e).within("cannot resume the partitions of started tasks"));
    }
    // librdkafka does not wake a partition's fetcher on resume (it looks
    // again within a second); a seek does, if it moves the fetcher: a
    // partition without a commit is sought to `Beginning`, a logical
    // offset, never to 0 (a seek to where it already is changes nothing,
    // and its task then saw its first records ~1 s late). Asynchronous (no
    // wait), to the same start: anything fetched before it is discarded by
    // its version barrier, and nothing can reach a task before this returns.
    for (tp, start) in &starts {
        let _ = consumer.seek(&tp.topic, tp.partition, *start, Duration::ZERO);
    }
    Ok(started)
}
