//! The task supervisor: owns one partition of its sub-topology's input topics,
//! runs the GroupByKeys in front of its stage, tracks the input watermark, and
//! owns the commit: it asks the stage to flush, and only after every bundle
//! before that point finished (its outputs acknowledged by Kafka) does it
//! report its output watermark downstream and commit the offsets it had
//! handed over.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use beam_kafka_proto::pipeline::MonitoringInfo;
use beam_kafka_runtime::gbk::GroupByKey;
use beam_kafka_runtime::timestamp::Watermark;
use beam_kafka_runtime::topology::TaskId;
use beam_kafka_runtime::watermark::InputWatermark;
use rdkafka::consumer::{CommitMode, Consumer};

use crate::kafka::rebalance::JobConsumer;
use crate::kafka::producer::KafkaProducer;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc::UnboundedSender;

use crate::envelope::{self, Record};
use crate::kafka::transaction::{self, TxnError};
use crate::messages::{Elements, Flush, RecordBatch, Resume, Shutdown, StageEvent};
use crate::output::report_watermark;
use crate::kafka::cached_high_watermark;
use crate::source::SourceRoute;
use crate::state::{write_changelog, Changes};
use crate::store::TaskStore;
use beam_kafka_runtime::task_state;
use crate::stage::StageActor;
use crate::telemetry::instruments;
use crate::side_inputs::{SideInputSpec, SideInputs, SideRecord};
use beam_kafka_runtime::coder::Coder;
use beam_kafka_runtime::held::{Held, HeldElements};
use beam_kafka_runtime::user_state::UserState;
use beam_kafka_runtime::timers::{TimerCodec, Timers};
use beam_kafka_fnapi::TimerFamily;
use crate::job::TimerFamilySpec;
use crate::messages::FireTimers;
use beam_kafka_runtime::windowed::{self, Window};

/// What tasks report to the job.
#[derive(Debug)]
pub enum TaskEvent {
    Finished(TaskId),
    /// The task stopped without finishing: fenced by another owner, or its
    /// transaction aborted. What it did not commit must be read again; the
    /// job restarts it from its last commit if its partitions are still here.
    Stopped { task: TaskId, incarnation: u64, reason: String },
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
    /// The GroupByKey the records pass through first, if any.
    pub gbk: Option<GroupByKey>,
    /// Set for a user topic read by ReadFromKafka: its records are Kafka
    /// records, not envelopes, and the task keeps their watermark itself.
    pub source: Option<SourceRoute>,
    /// How the windows of its elements (as they reach the stage) are encoded.
    pub window_coder: Coder,
    /// Its windowing's allowed lateness: state of a window is dropped once
    /// the input watermark passed the window's end by this much.
    pub allowed_lateness: i64,
}

/// The upstream name under which a task reports a source partition's
/// watermark to its own input watermark.
pub const SOURCE_UPSTREAM: &str = "source";

/// How often source partitions check their bounds and idle clocks.
const SOURCE_TICK: Duration = Duration::from_millis(200);

/// Appends elements for the stage, keeping consecutive elements of one data
/// source in one message.
fn push_elements(direct: &mut Option<Elements>, stage: &Addr<StageActor>, source: &str, ready: Vec<Vec<u8>>) {
    if ready.is_empty() {
        return;
    }
    match direct {
        Some(e) if e.source_transform == source => e.elements.extend(ready),
        _ => {
            if let Some(e) = direct.take() {
                stage.do_send(e);
            }
            *direct = Some(Elements { source_transform: source.to_string(), elements: ready });
        }
    }
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
    pub store: TaskStore,
    pub changelog_next: i64,
    /// Main-input elements that were waiting for side inputs: (sequence,
    /// data source, element).
    pub held: Vec<(u64, String, Vec<u8>)>,
    /// Pending timers of its stateful ParDos.
    pub timers: Timers,
}

pub struct TaskConfig {
    pub task: TaskId,
    /// Which start of the task this is in this process (a restarted or
    /// reassigned task is a new incarnation; stale events are ignored).
    pub incarnation: u64,
    /// This task's identity in its watermark reports, and its sub-topology's size.
    pub report_source: String,
    pub total_partitions: u32,
    pub inputs: HashMap<String, InputRoute>,
    pub targets: Vec<WatermarkTarget>,
    pub commit_interval: Duration,
    /// The changelog topic of the task's durable state (partition = task's).
    pub state_topic: String,
    /// exactly_once: the task's producer is transactional, and a cycle ends
    /// with a transaction commit instead of a consumer offset commit.
    pub transactional: bool,
    /// Where the task starts reading each input partition (its last commit).
    pub starts: BTreeMap<(String, i32), i64>,
    /// The side inputs of its stage, and their contents (read by its own
    /// side-topic readers, served to its bundles).
    pub side_inputs: Vec<SideInputSpec>,
    pub side_data: Option<Arc<SideInputs>>,
    /// The user state of its stateful ParDos (changed by its bundles).
    pub user_state: Option<Arc<Mutex<UserState>>>,
    /// Their timer families.
    pub timer_specs: Vec<TimerFamilySpec>,
}

#[derive(Clone)]
struct PendingFlush {
    id: u64,
    /// How many of the uncommitted metrics the flush covers.
    metrics: usize,
    offsets: BTreeMap<(String, i32), i64>,
    /// The output watermark when the flush was requested: everything it
    /// covers had been handed to the stage before the flush.
    watermark: Watermark,
    /// State changes up to the flush, written before the commit (`None`
    /// deletes a key), and the changelog offset of the last one written.
    changes: Changes,
    changelog_last: Option<i64>,
    /// How many times timers fired within this cycle.
    timer_rounds: u32,
}

pub struct TaskSupervisor {
    cfg: TaskConfig,
    stage: Addr<StageActor>,
    input_watermark: InputWatermark,
    reported: Watermark,
    consumer: Arc<JobConsumer>,
    producer: Arc<KafkaProducer>,
    events: UnboundedSender<TaskEvent>,
    /// Next offset to commit per (topic, partition): handed to the stage or a GroupByKey.
    handed: BTreeMap<(String, i32), i64>,
    committed: BTreeMap<(String, i32), i64>,
    /// Metrics of finished bundles not yet covered by a commit.
    uncommitted_metrics: Vec<MonitoringInfo>,
    /// A flush, report and commit cycle is under way.
    pending: Option<PendingFlush>,
    next_flush: u64,
    done: bool,
    /// The watermark state last written to the changelog.
    written_watermark_state: Vec<u8>,
    store: TaskStore,
    /// The changelog offset after the last committed state change.
    changelog_next: i64,
    /// Late drops already warned about, per GroupByKey input topic.
    dropped_warned: HashMap<String, u64>,
    /// Main-input elements waiting for side-input windows.
    held: HeldElements,
    /// The watermark of each side topic.
    side_watermarks: HashMap<String, InputWatermark>,
    /// The window coder of each stage data source, to read element windows.
    window_coders: HashMap<String, Coder>,
    /// Pending timers; fired when a commit cycle's flush completed.
    timers: Timers,
    /// Input that arrived while a cycle of a stage with timers was being
    /// flushed, handled once the cycle's timers have fired (see `defer`).
    deferred: Option<VecDeque<Deferred>>,
}

/// Input put aside while timers are being decided.
enum Deferred {
    Batch(RecordBatch),
    Side(SideRecord),
}

impl TaskSupervisor {
    pub fn new(
        cfg: TaskConfig,
        stage: Addr<StageActor>,
        consumer: Arc<JobConsumer>,
        producer: Arc<KafkaProducer>,
        events: UnboundedSender<TaskEvent>,
        restored: RestoredState,
    ) -> Self {
        let dropped_warned = cfg_dropped(&cfg);
        let window_coders: HashMap<String, Coder> =
            cfg.inputs.values().map(|r| (r.source_transform.clone(), r.window_coder.clone())).collect();
        let mut side_watermarks = HashMap::new();
        for s in &cfg.side_inputs {
            side_watermarks.entry(s.topic.clone()).or_insert_with(|| InputWatermark::new([s.upstream.clone()]));
        }
        let mut held = HeldElements::default();
        for (seq, source, element) in restored.held {
            // Unreadable ones were refused when the task's state was restored.
            if let Some(h) = window_coders.get(&source).and_then(|c| held_element(c, source.clone(), element).ok()) {
                held.restore(seq, h);
            }
        }
        let timers = restored.timers;
        TaskSupervisor {
            timers,
            deferred: None,
            input_watermark: restored.input_watermark,
            written_watermark_state: restored.watermark_snapshot,
            store: restored.store,
            changelog_next: restored.changelog_next,
            cfg,
            stage,
            reported: Watermark::NegInf,
            consumer,
            producer,
            events,
            handed: BTreeMap::new(),
            committed: BTreeMap::new(),
            uncommitted_metrics: Vec::new(),
            pending: None,
            next_flush: 1,
            done: false,
            // Drops of earlier incarnations were warned about by them.
            dropped_warned,
            held,
            side_watermarks,
            window_coders,
        }
    }

    /// Stops without committing: aborts the open transaction, gives back
    /// bounded-read budget taken since the last commit, and tells the job.
    fn stop_uncommitted(&mut self, ctx: &mut Context<Self>, reason: String) {
        if self.done {
            return;
        }
        self.done = true;
        self.refund_sources();
        if self.cfg.transactional {
            let producer = self.producer.clone();
            tokio::task::spawn_blocking(move || {
                use rdkafka::producer::Producer;
                let _ = producer.abort_transaction(Duration::from_secs(10));
            });
        }
        let _ = self.events.send(TaskEvent::Stopped { task: self.cfg.task, incarnation: self.cfg.incarnation, reason });
        ctx.stop();
    }

    /// Whether an error comes from this task's producer having been fenced.
    fn fenced(&self, error: &str) -> bool {
        self.cfg.transactional && (transaction::is_fenced(error) || transaction::producer_fenced(&self.producer))
    }

    fn refund_sources(&mut self) {
        for route in self.cfg.inputs.values_mut() {
            if let Some(src) = route.source.as_mut() {
                src.refund_uncommitted();
            }
        }
    }

    fn fail(&mut self, ctx: &mut Context<Self>, error: String) {
        if !self.done {
            self.done = true;
            let _ = self.events.send(TaskEvent::Failed(error));
        }
        ctx.stop();
    }

    /// The output watermark: the input watermark, held back by data buffered
    /// in GroupByKeys.
    fn output_watermark(&self) -> Watermark {
        let hold = self.cfg.inputs.values().filter_map(|r| r.gbk.as_ref()).map(|g| g.hold()).min().unwrap_or(Watermark::PosInf);
        self.input_watermark.current().min(hold).min(self.held.hold_watermark()).min(self.timers.hold())
    }

    /// Sends the stage every timer now due (in fire-time order). Called when
    /// a flush completed, so every timer the bundles before it set or
    /// cleared is known (a timer decided on earlier could fire twice); the
    /// cycle then flushes again, and the timers' removal commits with what
    /// their firing produced. At the end of input every timer fires.
    fn fire_due_timers(&mut self) -> bool {
        if self.timers.is_empty() {
            return false;
        }
        let input = self.input_watermark.current();
        let now = if input == Watermark::PosInf { i64::MAX } else { now_millis() };
        let due = self.timers.take_due(input, now);
        if due.is_empty() {
            return false;
        }
        let mut per_family: Vec<(TimerFamily, Vec<u8>)> = Vec::new();
        for (id, t) in due {
            let family = (id.transform.clone(), id.family.clone());
            let mut bytes = Vec::new();
            TimerCodec::encode_firing(&id, &t.times, &mut bytes);
            match per_family.last_mut() {
                Some((f, b)) if *f == family => b.extend_from_slice(&bytes),
                _ => per_family.push((family, bytes)),
            }
        }
        tracing::debug!(task = %self.cfg.task, "firing timers at input watermark {input:?}: {:?}", per_family.iter().map(|(f, b)| (f, b.len())).collect::<Vec<_>>());
        self.stage.do_send(FireTimers { timers: per_family });
        true
    }

    /// Whether a timer is due now (to start a cycle that fires it).
    fn timers_due(&self) -> bool {
        let input = self.input_watermark.current();
        let hold = self.timers.hold();
        let event_due = match (input, hold) {
            (Watermark::PosInf, _) => !self.timers.is_empty(),
            (Watermark::At(w), Watermark::At(h)) => h < w,
            _ => false,
        };
        event_due || self.timers.next_processing_time().is_some_and(|t| t <= now_millis())
    }

    /// Applies the timers a bundle set or cleared.
    fn apply_timers(&mut self, set: HashMap<TimerFamily, Vec<u8>>) -> Result<(), String> {
        for ((transform, family), bytes) in set {
            let spec = self
                .cfg
                .timer_specs
                .iter()
                .find(|t| t.transform == transform && t.family == family)
                .ok_or_else(|| format!("the harness set timers of an unknown family {family} of {transform}"))?;
            let settings = spec.codec.decode_all(&bytes).map_err(|e| format!("timers of {family} of {transform}: {e}"))?;
            tracing::debug!(task = %self.cfg.task, "timers set: {:?}", settings.iter().map(|s| (&s.tag, s.set.as_ref().map(|t| (t.fire, t.hold)))).collect::<Vec<_>>());
            self.timers.apply(&transform, &family, spec.domain, settings);
        }
        Ok(())
    }

    /// Sends elements to the stage: at once, or, for a stage with side
    /// inputs, once the side windows each element needs are complete.
    fn to_stage(&mut self, direct: &mut Option<Elements>, source: &str, elements: Vec<Vec<u8>>) -> Result<(), String> {
        if self.cfg.side_inputs.is_empty() {
            push_elements(direct, &self.stage, source, elements);
            return Ok(());
        }
        let coder = self.window_coders.get(source).ok_or_else(|| format!("no window coder for {source}"))?.clone();
        let mut ready = Vec::new();
        for element in elements {
            let h = held_element(&coder, source.to_string(), element)?;
            if h.windows.iter().all(|w| self.side_ready(w)) {
                ready.push(h.element);
            } else {
                self.held.hold(h);
            }
        }
        push_elements(direct, &self.stage, source, ready);
        Ok(())
    }

    /// Whether every side input is complete for main-input window `w`.
    fn side_ready(&self, w: &Window) -> bool {
        self.cfg.side_inputs.iter().all(|s| {
            let wm = self.side_watermarks.get(&s.topic).map_or(Watermark::NegInf, |m| m.current());
            s.windowing.ready(w, wm)
        })
    }

    /// Drops user state of windows the input watermark has passed (end of
    /// window plus allowed lateness), except where a timer of the window is
    /// still to fire and read it. At the end of input nothing is dropped:
    /// the last timers fire after it.
    fn expire_user_state(&self, wm: Watermark) {
        let (Some(user), Some(route)) = (&self.cfg.user_state, self.cfg.inputs.values().next()) else { return };
        let Watermark::At(w) = wm else { return };
        let (coder, lateness) = (&route.window_coder, route.allowed_lateness);
        let timers = &self.timers;
        user.lock().expect("user state lock").expire(|cell| {
            !timers.pending_in(&cell.transform, &cell.window)
                && Window::decode(&cell.window, coder).is_ok_and(|win| win.max_timestamp().saturating_add(lateness) < w)
        });
    }

    /// Sends the stage every held element whose side windows are now complete.
    fn release_held(&mut self) {
        let (specs, wms) = (&self.cfg.side_inputs, &self.side_watermarks);
        let ready = |w: &Window| {
            specs.iter().all(|s| s.windowing.ready(w, wms.get(&s.topic).map_or(Watermark::NegInf, |m| m.current())))
        };
        let released = self.held.release(ready);
        let mut direct = None;
        for h in released {
            push_elements(&mut direct, &self.stage, &h.source, vec![h.element]);
        }
        if let Some(e) = direct {
            self.stage.do_send(e);
        }
    }

    fn request_flush(&mut self) {
        if self.pending.is_some() || self.done {
            return;
        }
        let id = self.next_flush;
        self.next_flush += 1;
        let mut p = PendingFlush {
            id,
            offsets: BTreeMap::new(),
            watermark: Watermark::NegInf,
            metrics: usize::MAX,
            changes: Vec::new(),
            changelog_last: None,
            timer_rounds: 0,
        };
        self.snapshot_into(&mut p);
        self.pending = Some(p);
        // Which timers are due is decided when the flush completed, from the
        // settings of every bundle before it and the input watermark of the
        // snapshot; input arriving meanwhile waits, so the stage runs no
        // bundle between the flush and the timers (a bundle of later data
        // could re-set a timer about to fire, which would then fire twice).
        if !self.cfg.timer_specs.is_empty() {
            self.deferred = Some(VecDeque::new());
        }
        self.stage.do_send(Flush { id, hold: self.cfg.transactional });
    }

    /// Handles the input put aside during the cycle's flush.
    fn replay_deferred(&mut self, ctx: &mut Context<Self>) {
        for d in self.deferred.take().unwrap_or_default() {
            match d {
                Deferred::Batch(b) => Handler::handle(self, b, ctx),
                Deferred::Side(r) => Handler::handle(self, r, ctx),
            }
        }
    }

    /// What a flush covers: every offset handed over so far (what a
    /// GroupByKey or the side-input gate still holds is committed with it, as
    /// state changes in the task's changelog) and the output watermark now.
    /// Taken again when timers fire within the cycle (a second flush then
    /// covers what was handed meanwhile).
    fn snapshot_into(&mut self, p: &mut PendingFlush) {
        p.offsets = self.handed.clone();
        for route in self.cfg.inputs.values_mut() {
            if let Some(src) = route.source.as_mut() {
                src.mark_flush(p.id);
            }
        }
        for (topic, route) in self.cfg.inputs.iter_mut() {
            if let Some(gbk) = route.gbk.as_mut() {
                p.changes.extend(gbk.take_changes().into_iter().map(|(k, v)| (task_state::group_by_key_key(topic, &k), v)));
            }
        }
        p.changes.extend(self.held.take_changes().into_iter().map(|(seq, v)| (task_state::held_key(seq), v)));
        let snapshot = self.input_watermark.snapshot();
        if snapshot != self.written_watermark_state {
            p.changes.push((task_state::watermark_key(), Some(snapshot.clone())));
            self.written_watermark_state = snapshot;
        }
        p.watermark = self.output_watermark();
    }

    fn commit(&mut self, offsets: &BTreeMap<(String, i32), i64>, mode: CommitMode) -> Result<(), String> {
        let changed: Vec<_> = offsets.iter().filter(|(k, v)| self.committed.get(*k) != Some(v)).collect();
        if changed.is_empty() {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), next) in &changed {
            tpl.add_partition_offset(topic, *partition, Offset::Offset(**next))
                .map_err(|e| format!("bad offset for {topic}[{partition}]: {e}"))?;
        }
        self.consumer.commit(&tpl, mode).map_err(|e| format!("task {} could not commit offsets: {e}", self.cfg.task))?;
        instruments().commits.add(1, &[]);
        for (k, v) in changed {
            self.committed.insert(k.clone(), *v);
        }
        Ok(())
    }

    /// Runs GroupByKeys up to the new input watermark and starts a cycle.
    fn on_input_watermark(&mut self, wm: Watermark) {
        tracing::debug!(task = %self.cfg.task, "input watermark {wm:?}");
        self.expire_user_state(wm);
        let mut panes = Vec::new();
        for route in self.cfg.inputs.values_mut() {
            if let Some(gbk) = route.gbk.as_mut() {
                let mut fired = Vec::new();
                gbk.advance(wm, &mut fired);
                if !fired.is_empty() {
                    panes.push((route.source_transform.clone(), fired));
                }
            }
        }
        let mut direct = None;
        for (source, fired) in panes {
            if let Err(e) = self.to_stage(&mut direct, &source, fired) {
                tracing::error!(task = %self.cfg.task, "{e}");
            }
        }
        if let Some(e) = direct {
            self.stage.do_send(e);
        }
        self.request_flush();
    }

    /// After a flush: report the output watermark downstream, then commit.
    fn after_flush(&mut self, mut p: PendingFlush, ctx: &mut Context<Self>) {
        let wm = p.watermark;
        tracing::debug!(task = %self.cfg.task, "flushed; output watermark {wm:?}");
        let reports: Vec<(String, u32)> =
            if wm > self.reported { self.cfg.targets.iter().map(|t| (t.topic.clone(), t.partitions)).collect() } else { Vec::new() };
        let producer = self.producer.clone();
        let (source, partition, total) = (self.cfg.report_source.clone(), self.cfg.task.partition, self.cfg.total_partitions);
        let state_topic = self.cfg.state_topic.clone();
        let changes = p.changes.clone();
        let send = async move {
            for (topic, partitions) in reports {
                report_watermark(&producer, &topic, partitions, wm, &source, partition, total).await?;
            }
            write_changelog(&producer, &state_topic, partition, &changes).await
        };
        ctx.spawn(send.into_actor(self).map(move |result, act, ctx| {
            match result {
                Err(e) if act.fenced(&e) => return act.stop_uncommitted(ctx, e),
                Err(e) => return act.fail(ctx, e),
                Ok(last) => p.changelog_last = last,
            }
            act.reported = act.reported.max(wm);
            act.finish_cycle(p, ctx, 0);
        }));
    }
}

impl TaskSupervisor {
    /// Commits the cycle's offsets and moves its metrics to committed. A
    /// failed commit (typically the group coordinator moving) is retried for
    /// a while before it fails the job.
    fn finish_cycle(&mut self, p: PendingFlush, ctx: &mut Context<Self>, attempt: u32) {
        const RETRY_EVERY: Duration = Duration::from_millis(200);
        const ATTEMPTS: u32 = 100;
        let finished = p.watermark == Watermark::PosInf;
        if self.cfg.transactional {
            let mut tpl = TopicPartitionList::new();
            for ((topic, partition), next) in &p.offsets {
                if let Err(e) = tpl.add_partition_offset(topic, *partition, Offset::Offset(*next)) {
                    return self.fail(ctx, format!("bad offset for {topic}[{partition}]: {e}"));
                }
            }
            let commit = transaction::commit(self.producer.clone(), tpl, self.consumer.group_metadata());
            ctx.spawn(commit.into_actor(self).map(move |result, act, ctx| match result {
                Ok(()) => {
                    instruments().commits.add(1, &[]);
                    act.committed.extend(p.offsets.iter().map(|(k, v)| (k.clone(), *v)));
                    act.after_commit(p, ctx);
                }
                Err(TxnError::Retriable(e)) if attempt + 1 < ATTEMPTS => {
                    tracing::debug!(task = %act.cfg.task, "transaction commit failed, retrying: {e}");
                    ctx.run_later(RETRY_EVERY, move |act, ctx| act.finish_cycle(p, ctx, attempt + 1));
                }
                Err(e @ (TxnError::TaskMigrated(_) | TxnError::Aborted(_))) => {
                    // Fenced by a new owner, or aborted: this incarnation stops
                    // and whoever owns the task next redoes what it did not commit.
                    act.stop_uncommitted(ctx, e.to_string());
                }
                Err(e) => act.fail(ctx, format!("task {}: {e}", act.cfg.task)),
            }));
            return;
        }
        let mode = if finished { CommitMode::Sync } else { CommitMode::Async };
        if let Err(e) = self.commit(&p.offsets, mode) {
            if attempt + 1 >= ATTEMPTS {
                return self.fail(ctx, e);
            }
            tracing::debug!(task = %self.cfg.task, "commit failed, retrying: {e}");
            ctx.run_later(RETRY_EVERY, move |act, ctx| act.finish_cycle(p, ctx, attempt + 1));
            return;
        }
        self.after_commit(p, ctx);
    }

    /// Post-commit work: committed metrics, the user's group, the next cycle.
    fn after_commit(&mut self, p: PendingFlush, _ctx: &mut Context<Self>) {
        let finished = p.watermark == Watermark::PosInf;
        if self.cfg.transactional {
            self.stage.do_send(Resume);
        }
        for route in self.cfg.inputs.values_mut() {
            if let Some(src) = route.source.as_mut() {
                src.committed_through(p.id);
            }
        }
        // The changes are committed: the local store may have them now.
        if let Err(e) = self.store.apply(&p.changes) {
            return self.fail(_ctx, format!("task {}: {e}", self.cfg.task));
        }
        if let Some(last) = p.changelog_last {
            self.changelog_next = last + 1;
        }
        tracing::debug!(
            task = %self.cfg.task, incarnation = self.cfg.incarnation,
            "committed cycle {}: offsets {:?}, {} state change(s), changelog next {}, output watermark {:?}",
            p.id, p.offsets, p.changes.len(), self.changelog_next, p.watermark
        );
        self.warn_dropped();
        self.commit_to_user_groups(&p.offsets);
        let covered: Vec<MonitoringInfo> = self.uncommitted_metrics.drain(..p.metrics.min(self.uncommitted_metrics.len())).collect();
        if !covered.is_empty() {
            let _ = self.events.send(TaskEvent::CommittedMetrics(covered));
        }
        self.pending = None;
        if finished {
            self.done = true;
            self.report_dropped();
            self.report_sources();
            let _ = self.events.send(TaskEvent::Finished(self.cfg.task));
        } else if self.output_watermark() > self.reported || self.timers_due() {
            // The watermark moved on while this cycle ran, or timers are due.
            self.request_flush();
        }
    }
}

impl TaskSupervisor {
    /// Says, as it happens, that a GroupByKey dropped late elements (they
    /// were committed as processed: the user must hear of them).
    fn warn_dropped(&mut self) {
        for (topic, route) in &self.cfg.inputs {
            let Some(gbk) = route.gbk.as_ref() else { continue };
            let seen = self.dropped_warned.entry(topic.clone()).or_insert(0);
            if gbk.dropped_late > *seen {
                tracing::warn!(
                    task = %self.cfg.task,
                    "dropped {} late element(s) of {topic} (window expired, allowed lateness {} ms); {} in all",
                    gbk.dropped_late - *seen, gbk.spec_allowed_lateness(), gbk.dropped_late
                );
                *seen = gbk.dropped_late;
            }
        }
    }

    /// Late elements a GroupByKey dropped are reported, never silently lost.
    fn report_dropped(&self) {
        for (topic, route) in &self.cfg.inputs {
            let Some(gbk) = route.gbk.as_ref().filter(|g| g.dropped_late > 0) else { continue };
            instruments().late_dropped.add(gbk.dropped_late, &[]);
            let _ = self.events.send(TaskEvent::Info(format!(
                "task {} dropped {} element(s) of {topic} that arrived after their window expired (allowed lateness)",
                self.cfg.task, gbk.dropped_late
            )));
        }
    }
}

/// Late drops each GroupByKey input had already counted when restored.
fn cfg_dropped(cfg: &TaskConfig) -> HashMap<String, u64> {
    cfg.inputs.iter().filter_map(|(t, r)| r.gbk.as_ref().map(|g| (t.clone(), g.dropped_late))).collect()
}

/// The name under which a task expects watermark reports of `source` on `topic`.
pub fn upstream_key(topic: &str, source: &str) -> String {
    format!("{topic}/{source}")
}

impl TaskSupervisor {
    /// Feeds the source partitions' clocks into the input watermark.
    fn update_source_watermarks(&mut self) {
        let mut advanced = None;
        for (topic, route) in &self.cfg.inputs {
            if let Some(src) = &route.source {
                if let Some(new) = self.input_watermark.report(&upstream_key(topic, SOURCE_UPSTREAM), 0, 1, src.clock.watermark()) {
                    advanced = Some(new);
                }
            }
        }
        if let Some(wm) = advanced {
            self.on_input_watermark(wm);
        }
    }

    fn tick_sources(&mut self) {
        if self.done {
            return;
        }
        let partition = self.cfg.task.partition as i32;
        let (consumer, handed) = (&self.consumer, &self.handed);
        for (topic, route) in self.cfg.inputs.iter_mut() {
            let Some(src) = route.source.as_mut() else { continue };
            let start = src.start_offset;
            src.tick(|| {
                // Caught up: everything up to the partition's end was handed over.
                let Some(high) = cached_high_watermark(consumer, topic, partition) else { return true };
                let next = handed.get(&(topic.clone(), partition)).copied().or(start);
                next.is_some_and(|n| n >= high)
            });
        }
        self.update_source_watermarks();
    }

    /// Also commits source offsets to the user's group.id
    /// (commit_offset_in_finalize), for tools that watch that group's lag.
    fn commit_to_user_groups(&self, offsets: &BTreeMap<(String, i32), i64>) {
        for (topic, route) in &self.cfg.inputs {
            let Some(src) = &route.source else { continue };
            let Some(finalize) = &src.shared.finalize else { continue };
            let mut tpl = TopicPartitionList::new();
            for ((t, p), next) in offsets.iter().filter(|((t, _), _)| t == topic) {
                let _ = tpl.add_partition_offset(t, *p, Offset::Offset(*next));
            }
            if tpl.count() > 0 {
                if let Err(e) = finalize.commit(&tpl, CommitMode::Async) {
                    tracing::warn!(task = %self.cfg.task, "could not commit offsets of {topic} to the user's group: {e}");
                }
            }
        }
    }

    /// What each source partition of this task read, for the job's messages.
    fn report_sources(&self) {
        for (topic, route) in &self.cfg.inputs {
            if let Some(src) = &route.source {
                let _ = self.events.send(TaskEvent::Info(format!(
                    "task {} read {} record(s) of {topic}[{}] for ReadFromKafka '{}'",
                    self.cfg.task, src.read, self.cfg.task.partition, src.input.name
                )));
            }
        }
    }
}

impl Actor for TaskSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.cfg.inputs.values().any(|r| r.source.is_some()) {
            ctx.run_interval(SOURCE_TICK, |act, _| act.tick_sources());
        }
        ctx.run_interval(self.cfg.commit_interval, |act, _| {
            if act.handed != act.committed || act.output_watermark() > act.reported || act.timers_due() {
                act.request_flush();
            }
        });
    }
}

impl Handler<RecordBatch> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, batch: RecordBatch, ctx: &mut Context<Self>) {
        if self.done {
            return;
        }
        if let Some(d) = self.deferred.as_mut() {
            return d.push_back(Deferred::Batch(batch));
        }
        let mut direct: Option<Elements> = None;
        let mut data_records = 0u64;
        let mut from_sources = false;
        for r in batch.records {
            // Read before this task's start (a stale fetch): not ours to process.
            if self.cfg.starts.get(&(r.topic.clone(), r.partition)).is_some_and(|start| r.offset < *start) {
                tracing::debug!(task = %self.cfg.task, "skipping {}[{}] offset {} before the task's start", r.topic, r.partition, r.offset);
                continue;
            }
            let Some(route) = self.cfg.inputs.get_mut(&r.topic) else {
                return self.fail(ctx, format!("task {} got a record of unexpected topic {}", self.cfg.task, r.topic));
            };
            if let Some(src) = route.source.as_mut() {
                match src.element(&r) {
                    Err(e) => return self.fail(ctx, e),
                    // The bounded read is over: neither processed nor committed.
                    Ok(None) => continue,
                    Ok(Some(element)) => {
                        data_records += 1;
                        from_sources = true;
                        let source = route.source_transform.clone();
                        if let Err(e) = self.to_stage(&mut direct, &source, vec![element]) {
                            return self.fail(ctx, e);
                        }
                    }
                }
                self.handed.insert((r.topic, r.partition), r.offset + 1);
                continue;
            }
            let record = match envelope::decode(r.payload.as_deref().unwrap_or_default()) {
                Ok(rec) => rec,
                Err(e) => return self.fail(ctx, format!("{e} ({}[{}] offset {})", r.topic, r.partition, r.offset)),
            };
            match record {
                Record::Data(value) => {
                    data_records += 1;
                    let mut ready = Vec::new();
                    match route.gbk.as_mut() {
                        Some(gbk) => {
                            if let Err(e) = gbk.add(&value, &mut ready) {
                                return self.fail(ctx, format!("GroupByKey in task {}: {e}", self.cfg.task));
                            }
                        }
                        None => ready.push(value),
                    }
                    let source = route.source_transform.clone();
                    if let Err(e) = self.to_stage(&mut direct, &source, ready) {
                        return self.fail(ctx, e);
                    }
                }
                Record::Watermark { wm, source, partition, total } => {
                    if let Some(e) = direct.take() {
                        self.stage.do_send(e);
                    }
                    self.handed.insert((r.topic.clone(), r.partition), r.offset + 1);
                    // Upstreams are told apart per topic: one sub-topology may
                    // write several topics this task reads.
                    let upstream = upstream_key(&r.topic, &source);
                    if let Some(new) = self.input_watermark.report(&upstream, partition, total, wm) {
                        self.on_input_watermark(new);
                    }
                }
            }
            self.handed.insert((r.topic, r.partition), r.offset + 1);
        }
        if let Some(e) = direct {
            self.stage.do_send(e);
        }
        if from_sources {
            self.update_source_watermarks();
        }
        instruments().elements_in.add(data_records, &[]);
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
            // A write refused because a newer owner fenced this task is a
            // move, not a failure.
            StageEvent::Failed { error } if self.fenced(&error) => self.stop_uncommitted(ctx, error),
            StageEvent::Failed { error } => self.fail(ctx, error),
            StageEvent::TimersSet(set) => {
                if let Err(e) = self.apply_timers(set) {
                    self.fail(ctx, format!("task {}: {e}", self.cfg.task));
                }
            }
            StageEvent::Flushed { id } => {
                // The cycle stays pending until its commit, so no second one starts.
                if let Some(mut p) = self.pending.clone().filter(|p| p.id == id) {
                    // Every bundle before the flush is done: fire the timers now
                    // due inside this cycle, and flush again (bounded, in case
                    // timers keep setting due timers; the rest waits a cycle).
                    const TIMER_ROUNDS: u32 = 100;
                    if p.timer_rounds < TIMER_ROUNDS && self.fire_due_timers() {
                        p.timer_rounds += 1;
                        self.snapshot_into(&mut p);
                        self.pending = Some(p);
                        self.stage.do_send(Flush { id, hold: self.cfg.transactional });
                        return;
                    }
                    // Every bundle before the flush has reported its metrics by now.
                    p.metrics = self.uncommitted_metrics.len();
                    // ... and made its user state changes (later bundles wait
                    // for the commit under exactly_once).
                    if let Some(user) = &self.cfg.user_state {
                        let changes = user.lock().expect("user state lock").take_changes();
                        p.changes.extend(changes.into_iter().map(|(cell, v)| (task_state::user_state_key(&cell.encode()), v)));
                    }
                    // Timers fired at the cycle's start and set by its bundles;
                    // a timer set meanwhile holds the reported watermark.
                    let changes = self.timers.take_changes();
                    p.changes.extend(changes.into_iter().map(|(id, t)| (task_state::timer_key(&id.encode()), t.map(|t| t.encode()))));
                    p.watermark = p.watermark.min(self.timers.hold());
                    self.after_flush(p, ctx);
                    self.replay_deferred(ctx);
                }
            }
        }
    }
}

impl Handler<Shutdown> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        self.stage.do_send(Shutdown);
        if !self.done {
            self.refund_sources();
        }
        // A clean close: the store holds exactly the committed changes.
        if let Err(e) = self.store.write_checkpoint(self.changelog_next) {
            tracing::warn!(task = %self.cfg.task, "{e}; the next start rebuilds the store from the changelog");
        }
        ctx.stop();
    }
}

impl Handler<SideRecord> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, r: SideRecord, ctx: &mut Context<Self>) {
        if self.done {
            return;
        }
        if let Some(d) = self.deferred.as_mut() {
            return d.push_back(Deferred::Side(r));
        }
        let record = match envelope::decode(&r.payload) {
            Ok(rec) => rec,
            Err(e) => return self.fail(ctx, format!("{e} (side input topic {})", r.topic)),
        };
        match record {
            Record::Data(value) => {
                if let Some(data) = &self.cfg.side_data {
                    if let Err(e) = data.add(&r.topic, &value) {
                        return self.fail(ctx, format!("task {}: {e}", self.cfg.task));
                    }
                }
            }
            Record::Watermark { wm, source, partition, total } => {
                let advanced = self.side_watermarks.get_mut(&r.topic).and_then(|m| m.report(&source, partition, total, wm));
                if advanced.is_some() {
                    self.release_held();
                }
            }
        }
    }
}

/// A held element: its windows and timestamp read with `coder`.
fn held_element(coder: &Coder, source: String, element: Vec<u8>) -> Result<Held, String> {
    let h = windowed::split(&element, coder)?;
    let windows = h.windows.iter().map(|w| Window::decode(w, coder)).collect::<Result<Vec<_>, _>>()?;
    let timestamp = h.timestamp;
    Ok(Held { source, element, timestamp, windows })
}

fn now_millis() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

