//! The task supervisor: owns one partition of its sub-topology's input topics,
//! runs the GroupByKeys in front of its stage, tracks the input watermark, and
//! owns the commit: it asks the stage to flush, and only after every bundle
//! before that point finished (its outputs acknowledged by Kafka) does it
//! report its output watermark downstream and commit the offsets it had
//! handed over.
//!
//! The decisions live in `beam_kafka_runtime::task` (lifecycle, commit
//! cycle, flow control); this actor feeds them events and does the I/O.
//! Its GroupByKeys and its watermark aggregator are actors of their own
//! (`children`), which a cycle's barrier passes through before the stage
//! is flushed. Its handlers are split by concern: `input` (records, flow
//! control, side inputs), `children`, `cycle` (flush, write, commit),
//! `timers` and `sources`.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use beam_kafka_proto::pipeline::MonitoringInfo;
use beam_kafka_runtime::codec::coder::Coder;
use beam_kafka_runtime::codec::timestamp::Watermark;
use beam_kafka_runtime::gbk::GroupByKey;
use beam_kafka_runtime::kafka::failure::{Failure, Recovery};
use beam_kafka_runtime::kafka::topic_partition::TopicPartition;
use beam_kafka_runtime::plan::topology::TaskId;
use beam_kafka_runtime::state::deferred::{Deferred, DeferredWork};
use beam_kafka_runtime::state::held::HeldElements;
use beam_kafka_runtime::state::timers::Timers;
use beam_kafka_runtime::state::user_state::UserState;
use beam_kafka_runtime::task::cycle::Cycles;
use beam_kafka_runtime::task::cycle_requests::{CycleRequests, Uncommitted};
use beam_kafka_runtime::task::flow::{FlowControl, FlowLimits};
use beam_kafka_runtime::task::gate::InputGate;
use beam_kafka_runtime::task::gbk_view::GbkView;
use beam_kafka_runtime::task::leaving::Leaving;
use beam_kafka_runtime::task::lifecycle::{Lifecycle, TaskState};
use beam_kafka_runtime::task::stats::DurationStats;
use beam_kafka_runtime::test_stream::progress::Progress;
use beam_kafka_runtime::window::watermark::InputWatermark;
use tokio::sync::mpsc::UnboundedSender;

use crate::copy_transaction::TxnHandle;
use crate::group_by_key::GroupByKeyActor;
use crate::kafka::producer::ProducerSlot;
use crate::kafka::rebalance::JobConsumer;
use crate::kafka::transaction;
use crate::messages::{Drain, GbkEvent, InputRecord, RecordBatch, Shutdown, StageEvent, WatermarkEvent};
use crate::side_inputs::{SideInputSpec, SideInputs, SideRecord};
use crate::source::SourceRoute;
use crate::stage::StageActor;
use crate::status_board::{Level, StatusBoard, TaskMeters};
use crate::store::TaskStore;
use crate::test_stream::ProgressBoard;
use crate::watermark_aggregator::WatermarkAggregator;
use beam_kafka_runtime::plan::spec::TimerFamilySpec;

mod children;
mod cycle;
mod hand_over;
mod input;
mod report;
mod shared;
mod side_maps;
mod sources;
mod timers;

pub use hand_over::HandOver;
pub use sources::{upstream_key, SOURCE_UPSTREAM};

/// How often a task publishes its status (the page and the metrics read it).
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// How often a task in the copy's transaction looks whether it has
/// something to commit: the transaction paces rounds, so a record waits
/// for the next round, not for its task's commit interval to come round.
const WANT_ROUND_EVERY: Duration = Duration::from_millis(10);

/// What tasks report to the job.
#[derive(Debug)]
pub enum TaskEvent {
    Finished(TaskId),
    /// The task stopped without finishing: fenced by another owner, or its
    /// transaction aborted. What it did not commit must be read again; the
    /// job restarts it from its last commit if its partitions are still here.
    Stopped {
        task: TaskId,
        incarnation: u64,
        reason: String,
    },
    /// The incarnation committed its first cycle.
    Committed {
        task: TaskId,
        incarnation: u64,
    },
    /// The job cannot go on; the text is for the user.
    Failed(String),
    Metrics(Vec<MonitoringInfo>),
    CommittedMetrics(Vec<MonitoringInfo>),
    /// Something the user should hear about.
    Info(String),
}

/// How records of one input topic reach the stage.
pub struct InputRoute {
    /// The stage's data source for this input.
    pub source_transform: String,
    /// The GroupByKey the records pass through first, if any (moved into
    /// an actor of its own when the task starts).
    pub gbk: Option<GroupByKey>,
    /// Set for a user topic read by ReadFromKafka: its records are Kafka
    /// records, not envelopes, and the task keeps their watermark itself.
    pub source: Option<SourceRoute>,
    /// How the windows of its elements (as they reach the stage) are encoded.
    pub window_coder: Coder,
    /// Its windowing's allowed lateness: state of a window is dropped once
    /// the input watermark passed the window's end by this much.
    pub allowed_lateness: i64,
    /// Runs the GroupByKey's custom WindowFn in the SDK, if it has one.
    pub window_fns: Option<std::sync::Arc<crate::window_fns::WindowFnClient>>,
    /// The ParDo with an OnWindowExpiration callback reading it, and the
    /// key coder of its elements.
    pub expiry: Option<(String, Coder)>,
    /// The stateful ParDo reading it requires time-sorted input.
    pub time_sorted: bool,
}

/// A topic this task reports its output watermark to.
pub struct WatermarkTarget {
    pub topic: String,
    pub partitions: u32,
}

/// A task's state as restored from its changelog before it starts.
pub struct RestoredState {
    pub input_watermark: InputWatermark,
    /// The watermark entry as stored (empty if none).
    pub watermark_snapshot: Vec<u8>,
    /// The local copy of the task's state, current to `changelog_next`.
    pub store: Arc<TaskStore>,
    pub changelog_next: i64,
    /// Main-input elements that were waiting for side inputs: (sequence,
    /// data source, element).
    pub held: Vec<(u64, String, Vec<u8>)>,
    /// Work the stage handed back (split bundles, splittable DoFn
    /// residuals), by sequence.
    pub deferred: Vec<(u64, Deferred)>,
    /// Pending timers of its stateful ParDos.
    pub timers: Timers,
}

pub struct TaskConfig {
    pub task: TaskId,
    /// Which start of the task this is in this process (a restarted or
    /// reassigned task is a new incarnation; stale events are ignored).
    pub incarnation: u64,
    /// What the poll loop sent this task that it has not taken yet.
    pub mailbox: Arc<crate::poller::Mailbox>,
    /// This task's identity in its watermark reports, and its sub-topology's size.
    pub report_source: String,
    pub total_partitions: u32,
    pub inputs: HashMap<String, InputRoute>,
    pub targets: Vec<WatermarkTarget>,
    pub commit_interval: Duration,
    /// Bytes the GroupByKeys of the process may hold before committed
    /// panes of batch GroupByKeys leave memory (`group_by_key_memory_mb`).
    pub group_by_key_memory: usize,
    /// How much work may wait in the stage and in the task.
    pub flow: FlowLimits,
    /// The changelog topic of the task's durable state (partition = task's).
    pub state_topic: String,
    /// exactly_once: the task's producer is transactional, and a cycle ends
    /// with a transaction commit instead of a consumer offset commit.
    pub transactional: bool,
    /// Under exactly_once: the copy's transaction, which commits the task's
    /// cycles together with the other tasks' (`shared`).
    pub txn: Option<TxnHandle>,
    /// Where the task starts reading each input partition (its last commit).
    pub starts: BTreeMap<TopicPartition, i64>,
    /// The side inputs of its stage, and their contents (read by its own
    /// side-topic readers, served to its bundles).
    pub side_inputs: Vec<SideInputSpec>,
    pub side_data: Option<Arc<SideInputs>>,
    /// Runs the SDK's side window mappings, if a side input needs them.
    pub side_mapper: Option<Arc<crate::window_fns::HelperBundles>>,
    /// The user state of its stateful ParDos (changed by its bundles).
    pub user_state: Option<Arc<Mutex<UserState>>>,
    /// Their timer families.
    pub timer_specs: Vec<TimerFamilySpec>,
    /// The group assignment the task started in: once it changed, the task
    /// is about to be stopped and must not move its partitions' fetch
    /// positions (a late seek would skip records for their next owner).
    pub assignment: AssignmentSeen,
    /// Under a TestStream: where the task tells the driver which step it
    /// has processed in full (committed).
    pub progress_board: Option<ProgressBoard>,
    /// Where the task publishes its status, and its counters there.
    pub board: Arc<StatusBoard>,
    pub meters: Arc<TaskMeters>,
}

/// The group's assignment of a task's partitions as seen when it started.
#[derive(Clone)]
pub struct AssignmentSeen {
    pub assignment: Arc<crate::kafka::rebalance::Assignment>,
    pub seen: u64,
    pub partitions: Vec<TopicPartition>,
    /// The assignment clock at which the partitions were last found
    /// unchanged: asked per changelog entry, the answer is a load until
    /// the clock moves again (any change in the copy, not only the task's).
    pub confirmed: Arc<std::sync::atomic::AtomicU64>,
}

impl AssignmentSeen {
    pub fn new(assignment: Arc<crate::kafka::rebalance::Assignment>, seen: u64, partitions: Vec<TopicPartition>) -> Self {
        AssignmentSeen { assignment, seen, partitions, confirmed: Arc::new(std::sync::atomic::AtomicU64::new(seen)) }
    }

    /// Whether the task's partitions are still assigned as when it started.
    pub fn current(&self) -> bool {
        use std::sync::atomic::Ordering;
        let now = self.assignment.now();
        if now == self.confirmed.load(Ordering::Acquire) {
            return true;
        }
        let current = !self.assignment.any_changed_since(&self.partitions, self.seen);
        if current {
            self.confirmed.store(now, Ordering::Release);
        }
        current
    }
}

pub struct TaskSupervisor {
    cfg: TaskConfig,
    stage: Addr<StageActor>,
    lifecycle: Lifecycle,
    cycles: Cycles,
    flow: FlowControl,
    /// The input watermark, as the aggregator last said.
    input_watermark: Watermark,
    /// The aggregator's state and side watermarks until it starts.
    to_aggregate: Option<(InputWatermark, HashMap<String, InputWatermark>)>,
    watermarks: Option<Addr<WatermarkAggregator>>,
    /// The input watermark the open cycle's barrier passed at.
    barrier_watermark: Watermark,
    /// Per GroupByKey input topic: its actor, and what it last reported.
    gbk_actors: HashMap<String, Addr<GroupByKeyActor>>,
    gbk_views: BTreeMap<String, GbkView>,
    reported: Watermark,
    consumer: Arc<JobConsumer>,
    producer: Arc<ProducerSlot>,
    events: UnboundedSender<TaskEvent>,
    /// Records taken from Kafka, waiting for room in the stage.
    queue: VecDeque<VecDeque<InputRecord>>,
    /// The offset after the last record received per partition: later
    /// copies of a record (a pause can deliver one twice) are dropped, and a
    /// resumed partition is sought here.
    received: BTreeMap<TopicPartition, i64>,
    /// Next offset to commit per (topic, partition): handed to the stage or a GroupByKey.
    handed: BTreeMap<TopicPartition, i64>,
    committed: BTreeMap<TopicPartition, i64>,
    /// Metrics of finished bundles not yet covered by a commit.
    uncommitted_metrics: Vec<MonitoringInfo>,
    /// The watermark state last written to the changelog.
    written_watermark_state: Vec<u8>,
    store: Arc<TaskStore>,
    /// The changelog offset after the last committed state change.
    changelog_next: i64,
    /// Late drops already warned about, per GroupByKey input topic.
    dropped_warned: HashMap<String, u64>,
    /// Main-input elements waiting for side-input windows.
    held: HeldElements,
    /// Work the stage handed back (elements of split bundles, residuals of
    /// splittable DoFns); handed to it again once the cycle it was deferred
    /// in committed, and not before the time a residual asked for.
    deferred: DeferredWork,
    /// Whether the task's partitions move to another copy: it stops once
    /// its last cycle committed, and then says so (`hand_over`).
    leaving: Leaving<tokio::sync::oneshot::Sender<()>>,
    /// A wake-up is set for the earliest delayed residual (ms).
    deferred_wake: Option<i64>,
    /// When the wake-up for the GroupByKeys' trigger deadlines is set for.
    trigger_wake: Option<i64>,
    /// How many elements split bundles handed back, in all.
    deferred_total: u64,
    /// How many residuals splittable DoFns handed back, in all.
    residuals_total: u64,
    /// The watermark of each side topic, as the aggregator last said.
    side_watermarks: HashMap<String, Watermark>,
    /// What each source partition's clock last reported.
    source_reported: HashMap<String, Watermark>,
    /// The window coder of each stage data source, to read element windows.
    window_coders: HashMap<String, Coder>,
    /// Stage data sources read by a ParDo with an OnWindowExpiration callback.
    expiry_inputs: HashMap<String, timers::ExpiryInput>,
    /// Stage data sources that go in timestamp order, with their allowed
    /// lateness: their elements are held until the watermark passed them.
    time_sorted: HashMap<String, i64>,
    /// Pending timers; fired when a commit cycle's flush completed.
    timers: Timers,
    /// What waits while a cycle closes (`runtime::task::gate`): input while
    /// a stage with timers decides which fire, side records meanwhile, and
    /// panes of the next cycle: (data source, panes).
    gate: InputGate<SideRecord, (String, Vec<Vec<u8>>)>,
    /// Side windows the SDK told for main windows, and what to ask it.
    side_maps: beam_kafka_runtime::state::side_input::SideMaps,
    side_maps_to_ask: Vec<(usize, beam_kafka_runtime::codec::windowed::Window)>,
    /// What the open cycle queued, whose acknowledgements its commit
    /// (exactly_once) waits for.
    cycle_writes: Option<cycle::CycleWrites>,
    /// TestStream progress of the inputs (see `runtime::test_stream::progress`), and
    /// the last progress the task's reports carried.
    progress: Progress,
    reported_progress: Progress,
    /// Cycles asked for while one is open, and rounds of the copy's
    /// transaction asked for (`runtime::task::cycle_requests`).
    requests: CycleRequests,
    /// How long the stage's bundles took.
    bundle_durations: DurationStats,
}

impl TaskSupervisor {
    pub fn new(
        cfg: TaskConfig,
        stage: Addr<StageActor>,
        consumer: Arc<JobConsumer>,
        producer: Arc<ProducerSlot>,
        events: UnboundedSender<TaskEvent>,
        restored: RestoredState,
    ) -> Self {
        let dropped_warned = sources::cfg_dropped(&cfg);
        let window_coders: HashMap<String, Coder> =
            cfg.inputs.values().map(|r| (r.source_transform.clone(), r.window_coder.clone())).collect();
        let expiry_inputs = timers::expiry_inputs(&cfg.inputs);
        let time_sorted = cfg.inputs.values().filter(|r| r.time_sorted).map(|r| (r.source_transform.clone(), r.allowed_lateness)).collect();
        let mut side_aggregates = HashMap::new();
        for s in &cfg.side_inputs {
            side_aggregates.entry(s.topic.clone()).or_insert_with(|| InputWatermark::new([s.upstream.clone()]));
        }
        let side_watermarks = side_aggregates.keys().map(|t| (t.clone(), Watermark::NegInf)).collect();
        let gbk_views = cfg
            .inputs
            .iter()
            .filter_map(|(t, r)| r.gbk.as_ref().map(|g| (t.clone(), GbkView::new(r.source_transform.clone(), g))))
            .collect();
        // Unreadable ones were refused when the task's state was restored.
        // An element stored by an earlier version of the pipeline names the
        // data source of the PCollection that then fed the stage; an update
        // that added a step before it feeds the same topic (coded alike, as
        // the update checked) through another: a stage with one data source
        // takes it there.
        let only_source = (window_coders.len() == 1).then(|| window_coders.keys().next().cloned()).flatten();
        let source_now = |source: String| match &only_source {
            Some(only) if !window_coders.contains_key(&source) => {
                tracing::info!(task = %cfg.task, "an element stored for {source} goes to {only}, the stage's data source now");
                only.clone()
            }
            _ => source,
        };
        let restore = |entries: Vec<(u64, String, Vec<u8>)>| {
            let mut held = HeldElements::default();
            for (seq, source, element) in entries {
                let source = source_now(source);
                match window_coders.get(&source).map(|c| input::held_element(c, source.clone(), element)) {
                    Some(Ok(h)) => held.restore(seq, h),
                    Some(Err(e)) => tracing::error!(task = %cfg.task, "a held element for {source} cannot be read: {e}"),
                    None => tracing::error!(task = %cfg.task, "a held element names {source}, which this stage no longer reads"),
                }
            }
            held
        };
        let held = restore(restored.held);
        let (side_maps, side_maps_to_ask) = side_maps::wanted_by_held(&held, &cfg.side_inputs);
        let mut deferred = DeferredWork::default();
        for (seq, mut d) in restored.deferred {
            d.source = source_now(d.source);
            deferred.restore(seq, d);
        }
        // Its state was restored before it was created.
        let mut lifecycle = Lifecycle::new();
        let _ = lifecycle.transition(TaskState::Restoring);
        let _ = lifecycle.transition(TaskState::Running);
        TaskSupervisor {
            timers: restored.timers,
            gate: InputGate::default(),
            side_maps,
            side_maps_to_ask,
            requests: CycleRequests::default(),
            cycle_writes: None,
            progress: Progress::default(),
            reported_progress: Progress::default(),
            input_watermark: restored.input_watermark.current(),
            barrier_watermark: Watermark::NegInf,
            to_aggregate: Some((restored.input_watermark, side_aggregates)),
            watermarks: None,
            gbk_actors: HashMap::new(),
            gbk_views,
            source_reported: HashMap::new(),
            written_watermark_state: restored.watermark_snapshot,
            store: restored.store,
            changelog_next: restored.changelog_next,
            flow: FlowControl::new(cfg.flow),
            received: cfg.starts.clone(),
            cfg,
            stage,
            lifecycle,
            cycles: Cycles::new(),
            reported: Watermark::NegInf,
            consumer,
            producer,
            events,
            queue: VecDeque::new(),
            handed: BTreeMap::new(),
            committed: BTreeMap::new(),
            uncommitted_metrics: Vec::new(),
            // Drops of earlier incarnations were warned about by them.
            dropped_warned,
            held,
            deferred,
            leaving: Leaving::Staying,
            deferred_wake: None,
            trigger_wake: None,
            deferred_total: 0,
            residuals_total: 0,
            side_watermarks,
            window_coders,
            expiry_inputs,
            time_sorted,
            bundle_durations: DurationStats::default(),
        }
    }

    /// Stops without committing: aborts the open transaction, gives back
    /// bounded-read budget taken since the last commit, and tells the job.
    fn stop_uncommitted(&mut self, ctx: &mut Context<Self>, reason: String) {
        if !self.lifecycle.stop(TaskState::Suspended) {
            return;
        }
        self.drop_input();
        self.refund_sources();
        self.publish_status();
        self.cycle_abandoned(&reason);
        self.cfg.board.event(Level::Warning, format!("task {} stopped: {reason}", self.cfg.task));
        // What it wrote since the last round dooms the copy's transaction.
        self.leave_transaction(false);
        let _ = self.events.send(TaskEvent::Stopped { task: self.cfg.task, incarnation: self.cfg.incarnation, reason });
        ctx.stop();
    }

    /// Whether this task's producer was fenced by a newer owner: then its
    /// pending writes fail as purged, whatever their own error says.
    fn fenced(&self) -> bool {
        self.cfg.transactional && transaction::producer_fenced(&self.producer.current())
    }

    /// Does what a failure's recovery says: another owner has the task, or
    /// the transaction was aborted (stop without committing); a transient
    /// cause (restart from the last commit once it passed); anything else
    /// fails the job with what to fix.
    fn failed(&mut self, ctx: &mut Context<Self>, failure: Failure) {
        if self.fenced() {
            return self.stop_uncommitted(ctx, failure.message);
        }
        match failure.recovery {
            Recovery::Migrated | Recovery::Aborted => self.stop_uncommitted(ctx, failure.message),
            // A retriable commit that outlasted its retries.
            Recovery::Retry => self.stop_uncommitted(ctx, failure.message),
            Recovery::Transient { waiting_for } => {
                let error = failure.message;
                tracing::warn!(task = %self.cfg.task, "{error}; restarting from the last commit once it can (waiting for {waiting_for})");
                self.stop_uncommitted(ctx, format!("{error}; waiting for {waiting_for}"))
            }
            Recovery::Fatal { .. } => self.fail(ctx, failure.explain()),
        }
    }

    fn refund_sources(&mut self) {
        for route in self.cfg.inputs.values_mut() {
            if let Some(src) = route.source.as_mut() {
                src.refund_uncommitted();
            }
        }
    }

    fn fail(&mut self, ctx: &mut Context<Self>, error: String) {
        if self.lifecycle.stop(TaskState::Closed) {
            self.drop_input();
            self.publish_status();
            self.cycle_abandoned(&error);
            self.cfg.board.event(Level::Error, format!("task {}: {error}", self.cfg.task));
            let _ = self.events.send(TaskEvent::Failed(error));
        }
        ctx.stop();
    }

    /// The output watermark: the input watermark, held back by data buffered
    /// in GroupByKeys, elements waiting for side inputs and pending timers.
    fn output_watermark(&self) -> Watermark {
        self.output_watermark_at(self.input_watermark)
    }

    /// The output watermark had the input watermark been `input`.
    fn output_watermark_at(&self, input: Watermark) -> Watermark {
        let hold = self.gbk_views.values().map(|g| g.output_hold()).min().unwrap_or(Watermark::PosInf);
        self.output_watermark_with(input, hold)
    }

    /// The output watermark with the GroupByKeys holding it at `gbk_hold`.
    fn output_watermark_with(&self, input: Watermark, gbk_hold: Watermark) -> Watermark {
        input.min(gbk_hold).min(self.held.hold_watermark()).min(self.deferred.hold_watermark()).min(self.timers.hold())
    }

    /// What a task says about itself when it ends: how its cycles and
    /// bundles went and how often its input was paused.
    fn report_flow(&self, how: &str) {
        let (c, b) = (&self.cycles.durations, &self.bundle_durations);
        tracing::info!(
            task = %self.cfg.task,
            "task {how}: {} commit cycle(s), longest {} ms, p99 {} ms, median {} ms; {} bundle(s), longest {} ms, p99 {} ms, median {} ms; input paused {} time(s) ({} by the poll loop); {} element(s) deferred from split bundles; {} splittable DoFn residual(s)",
            c.count(), c.max(), c.quantile(0.99), c.median(), b.count(), b.max(), b.quantile(0.99), b.median(), self.flow.pauses, self.flow.pauses_elsewhere, self.deferred_total, self.residuals_total
        );
    }
}

impl Actor for TaskSupervisor {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.leave_transaction(false);
        self.stop_children();
        // However the task ended (fenced, failed): a bundle of its stage
        // waiting to write after a commit that never came must not keep the
        // stage, its harness lease and its producer alive.
        self.stage.do_send(Shutdown);
    }

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Nothing is written before the task is a member of the copy's transaction.
        match self.cfg.txn.clone() {
            Some(txn) => self.join_transaction(txn, ctx),
            None => self.begin(ctx),
        }
    }
}

impl TaskSupervisor {
    /// Starts working: children, status, ticks, the commit interval.
    fn begin(&mut self, ctx: &mut Context<Self>) {
        self.start_children(ctx);
        self.publish_status();
        ctx.run_interval(STATUS_EVERY, |act, _| act.publish_status());
        if self.cfg.inputs.values().any(|r| r.source.is_some()) {
            ctx.run_interval(sources::SOURCE_TICK, |act, _| act.tick_sources());
        }
        let every = if self.cfg.txn.is_some() { self.cfg.commit_interval.min(WANT_ROUND_EVERY) } else { self.cfg.commit_interval };
        ctx.run_interval(every, |act, _| {
            let uncommitted = Uncommitted {
                offsets: act.handed != act.committed,
                watermark: act.output_watermark() > act.reported,
                timers_due: act.timers_due(),
                deferred: act.deferred.has_changes(),
                progress: act.progress.epoch > act.reported_progress.epoch,
            };
            if act.requests.worth_a_cycle(uncommitted) {
                act.request_flush();
            }
        });
        // Closed windows of a restored GroupByKey fire as room allows, and
        // its triggers' processing-time deadlines are waited for.
        self.pump(ctx);
        self.wake_for_triggers(ctx);
    }
}

impl Handler<RecordBatch> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, batch: RecordBatch, ctx: &mut Context<Self>) {
        self.cfg.mailbox.taken(batch.records.len() as u64, batch.bytes);
        // Handing over: what is not in the last cycle is its next owner's.
        if self.is_handing_over() {
            return;
        }
        self.enqueue(batch.records, ctx);
    }
}

impl Handler<SideRecord> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, r: SideRecord, ctx: &mut Context<Self>) {
        if !self.lifecycle.is_running() {
            return;
        }
        if let Some(e) = r.failed {
            return self.failed(ctx, e.within(format_args!("task {}: reading side input topic {}", self.cfg.task, r.topic)));
        }
        if let Some(r) = self.gate.side(r) {
            self.side_record(r, ctx);
        }
    }
}

impl Handler<StageEvent> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, ev: StageEvent, ctx: &mut Context<Self>) {
        match ev {
            StageEvent::Metrics(infos) => {
                self.uncommitted_metrics.extend(infos.iter().cloned());
                let _ = self.events.send(TaskEvent::Metrics(infos));
            }
            StageEvent::Processed { elements, millis } => {
                self.bundle_durations.record(millis);
                self.flow.processed(elements);
                self.pump(ctx);
            }
            // A write refused because a newer owner fenced this task is a
            // move, not a failure.
            StageEvent::Failed(failure) => self.failed(ctx, failure),
            StageEvent::TimersSet(set) => {
                if let Err(e) = self.apply_timers(set) {
                    self.fail(ctx, format!("task {}: {e}", self.cfg.task));
                }
            }
            StageEvent::Flushed { id } => self.on_flushed(id, ctx),
            StageEvent::Deferred { unprocessed, residuals } => {
                if let Err(e) = self.take_deferred(unprocessed, residuals) {
                    self.fail(ctx, format!("task {}: {e}", self.cfg.task));
                }
            }
        }
    }
}

impl Handler<GbkEvent> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, ev: GbkEvent, ctx: &mut Context<Self>) {
        self.on_gbk_event(ev, ctx);
    }
}

impl Handler<WatermarkEvent> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, ev: WatermarkEvent, ctx: &mut Context<Self>) {
        self.on_watermark_event(ev, ctx);
    }
}

impl Handler<Drain> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, _: Drain, ctx: &mut Context<Self>) {
        self.stage.do_send(Drain);
        // Delayed residuals run now: they are truncated, not waited for.
        self.lifecycle.drain();
        self.deferred.all_due();
        // The sources' bound ended the reads: their clocks go to the end now.
        self.tick_sources();
        self.pump(ctx);
    }
}

impl Handler<Shutdown> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        self.stage.do_send(Shutdown);
        if self.lifecycle.is_running() {
            self.refund_sources();
            self.report_flow("shut down");
        }
        // What this incarnation wrote since its last commit will never
        // commit: the copy's transaction is aborted (unless the task's
        // cycle was handed in, or it finished).
        self.leave_transaction(false);
        let _ = self.lifecycle.transition(TaskState::Closed);
        self.publish_status();
        // A clean close: the store holds exactly the committed changes.
        if let Err(e) = self.store.write_checkpoint(self.changelog_next) {
            tracing::warn!(task = %self.cfg.task, "{e}; the next start rebuilds the store from the changelog");
        }
        ctx.stop();
    }
}
