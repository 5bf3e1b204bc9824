//! The commit cycle's I/O (its order is `runtime::task::cycle`): flush the
//! stage, fire due timers in rounds, write watermark reports and the
//! changelog, commit the offsets (the transaction under exactly_once), then
//! apply the changes to the local store.
use std::collections::BTreeMap;
use std::time::Duration;

use actix::prelude::*;
use beam_kafka_proto::pipeline::MonitoringInfo;
use beam_kafka_runtime::codec::envelope;
use beam_kafka_runtime::kafka::topic_partition::TopicPartition;
use beam_kafka_runtime::state::changelog::ChangelogStore;
use beam_kafka_runtime::task::cycle::{Cycle, Phase, TIMER_ROUNDS};
use beam_kafka_runtime::task::cycle_requests::{Next, Request};
use beam_kafka_runtime::task::cycle_steps::{self, Committed, FlushStep, Step};
use beam_kafka_runtime::task::lifecycle::TaskState;
use beam_kafka_runtime::test_stream::progress::Progress;

use crate::messages::GbkCommand;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::{TaskEvent, TaskSupervisor};
use crate::copy_transaction::Ready;
use crate::kafka::producer::Writes;
use crate::messages::{Committed as StageCommitted, Flush, Release, Resume, Settle};
use crate::output::{queue_watermark_report, Queued};
use crate::state::queue_changelog;
use beam_kafka_runtime::kafka::failure::{Failure, Recovery};

const RETRY_EVERY: Duration = Duration::from_millis(200);

/// What a cycle queued itself: watermark reports and changelog entries.
pub(super) struct CycleWrites {
    reports: Queued,
    changelog: Writes,
}

impl CycleWrites {
    /// Waits until Kafka acknowledged them; the changelog offset of the last entry.
    async fn acknowledged(self) -> Result<Option<i64>, Failure> {
        self.reports.acknowledged().await?;
        self.changelog.wait().await
    }
}

impl TaskSupervisor {
    /// Asks for a cycle. Under exactly_once the copy's transaction decides
    /// when (its round opens every member's cycle, `TxnNotice::Flush`);
    /// otherwise one opens now unless one is open.
    pub(super) fn request_flush(&mut self) {
        if !self.lifecycle.is_running() || !self.can_commit() {
            return;
        }
        // What changed since an open cycle's snapshot gets a cycle of its own.
        match self.requests.request(self.cycles.is_open(), self.cfg.txn.is_some()) {
            Request::Later => {}
            Request::AskRound => self.want_round(),
            Request::Open => self.open_cycle(),
        }
    }

    /// Opens a cycle unless one is open: snapshots what was handed over and
    /// sends the cycle's barrier through the task's actors; the stage is
    /// flushed once they all answered (`children`).
    pub(super) fn open_cycle(&mut self) {
        if !self.lifecycle.is_running() || !self.can_commit() || self.cycles.is_open() {
            return;
        }
        self.requests.opened();
        let participants = self.barrier_participants();
        let Some(id) = self.cycles.begin(now_millis(), participants).map(|c| c.id) else { return };
        self.snapshot();
        self.send_barrier(id);
    }

    /// What the open cycle covers: every offset handed over so far (what a
    /// GroupByKey or the side-input gate still holds is committed with it, as
    /// state changes in the task's changelog; the GroupByKeys' and the
    /// watermark's come with their barrier answers) and the output
    /// watermark. Taken again when timers fire within the cycle (a second
    /// flush then covers what was handed meanwhile).
    fn snapshot(&mut self) {
        let watermark = self.output_watermark();
        self.requests.snapshot_taken();
        let Some(c) = self.cycles.open_mut() else { return };
        c.offsets = self.handed.clone();
        for route in self.cfg.inputs.values_mut() {
            if let Some(src) = route.source.as_mut() {
                src.mark_flush(c.id);
            }
        }
        c.changes.extend(self.held.take_entries());
        // A timer round only lowers it: the alignment decided it from the
        // barrier's holds, and panes fired since reach the stage after the flush.
        c.watermark = if c.timer_rounds > 0 { c.watermark.min(watermark) } else { watermark };
    }

    /// The stage finished every bundle before flush `id`.
    pub(super) fn on_flushed(&mut self, id: u64, ctx: &mut Context<Self>) {
        if !self.lifecycle.is_running() || self.cycles.flushed(id).is_none() {
            return;
        }
        // Fire the timers now due inside this cycle, and flush again
        // (bounded, in case timers keep setting due timers).
        let rounds_left = self.cycles.open().is_some_and(|c| c.timer_rounds < TIMER_ROUNDS);
        if rounds_left && self.fire_due_timers() {
            self.cycles.next_timer_round();
            self.snapshot();
            self.stage.do_send(Flush { id, hold: self.cfg.transactional });
            return;
        }
        let metrics = self.uncommitted_metrics.len();
        for step in cycle_steps::after_flush(self.cfg.transactional) {
            match step {
                // Now, not when the watermark moved: the elements before the
                // step (an on-time pane at the window's end, say) have run
                // by now, reading the state.
                FlushStep::ExpireUserState => {
                    if let Err(e) = self.expire_user_state(self.barrier_watermark) {
                        let error = format!("task {}: reading its user state from the local store: {e}", self.cfg.task);
                        return self.failed(ctx, Failure::local(error));
                    }
                }
                // Every bundle before the flush made its user state changes
                // by now (later ones wait for the commit under exactly_once).
                FlushStep::ArmWindowExpiries => self.arm_window_expiries(),
                FlushStep::TakeChanges => self.take_cycle_changes(metrics),
                FlushStep::ReleaseStage => self.stage.do_send(Release),
                FlushStep::Write => self.write(ctx),
                FlushStep::OpenGate => self.ungate(ctx),
            }
        }
    }

    /// The stores' changes into the open cycle (`runtime::state::changelog`):
    /// user state; timers fired at the cycle's start and set by its bundles
    /// (a timer set meanwhile holds the reported watermark); elements a split
    /// bundle handed back before the flush completed (and deferred ones
    /// released before the cycle began). `metrics`: how many of the
    /// uncommitted bundle metrics the cycle covers.
    fn take_cycle_changes(&mut self, metrics: usize) {
        let mut changes = self.cfg.user_state.as_ref().map(|u| u.lock().expect("user state lock").take_entries()).unwrap_or_default();
        changes.extend(self.timers.take_entries());
        changes.extend(self.deferred.take_entries());
        let (timer_hold, deferred_hold) = (self.timers.hold(), self.deferred.hold_watermark());
        let Some(c) = self.cycles.open_mut() else { return };
        c.metrics = metrics;
        c.changes.extend(changes);
        c.watermark = c.watermark.min(timer_hold).min(deferred_hold);
    }

    /// Reports the output watermark downstream and writes the changelog,
    /// then commits. The writes are queued; Kafka's acknowledgements are
    /// awaited here under at_least_once, and by the commit (with those of
    /// the stage's bundles) under exactly_once.
    fn write(&mut self, ctx: &mut Context<Self>) {
        let c = match self.cycles.advance(Phase::Writing) {
            Ok(c) => c,
            Err(e) => return self.fail(ctx, format!("task {}: {e}", self.cfg.task)),
        };
        let wm = c.watermark;
        let progress = Progress { epoch: c.epoch, clock: self.progress.clock };
        let changes = c.changes.clone();
        let bytes: usize = changes.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum();
        self.cfg.meters.changelog_bytes.fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(task = %self.cfg.task, "flushed; output watermark {wm:?}");
        let reports: Vec<(String, u32)> = if wm > self.reported || progress != self.reported_progress {
            self.cfg.targets.iter().map(|t| (t.topic.clone(), t.partitions)).collect()
        } else {
            Vec::new()
        };
        let producer = self.producer.current();
        let (source, partition, total) = (self.cfg.report_source.clone(), self.cfg.task.partition, self.cfg.total_partitions);
        let state_topic = self.cfg.state_topic.clone();
        let payload = envelope::watermark_with_progress(wm, &source, partition, total, progress);
        // Under exactly_once the next owner's producer fences this one;
        // without transactions, writing stops when the partitions move.
        let (assignment, transactional) = (self.cfg.assignment.clone(), self.cfg.transactional);
        let send = async move {
            let mut queued = Queued::default();
            for (topic, partitions) in reports {
                queue_watermark_report(&mut queued, &producer, &topic, partitions, &payload).await?;
            }
            let changelog = queue_changelog(&producer, &state_topic, partition, &changes, || transactional || assignment.current()).await?;
            let writes = CycleWrites { reports: queued, changelog };
            if transactional {
                return Ok((None, Some(writes)));
            }
            writes.acknowledged().await.map(|last| (last, None))
        };
        ctx.spawn(send.into_actor(self).map(move |result, act, ctx| {
            if !act.lifecycle.is_running() {
                return;
            }
            match result {
                Err(e) => return act.failed(ctx, e),
                Ok((last, writes)) => {
                    if let Some(c) = act.cycles.open_mut() {
                        c.changelog_last = last;
                    }
                    act.cycle_writes = writes;
                }
            }
            act.reported = act.reported.max(wm);
            act.reported_progress = progress;
            if let Err(e) = act.cycles.advance(Phase::Committing) {
                return act.fail(ctx, format!("task {}: {e}", act.cfg.task));
            }
            act.commit_cycle(ctx);
        }));
    }

    /// Commits the cycle's offsets. A failed commit (typically the group
    /// coordinator moving) is retried for a while before it fails the job.
    fn commit_cycle(&mut self, ctx: &mut Context<Self>) {
        let Some(c) = self.cycles.open() else { return };
        if self.cfg.transactional {
            let Some(txn) = self.cfg.txn.clone() else {
                return self.stop_uncommitted(ctx, "it left the copy's transaction".into());
            };
            let last = self.leaving.hand_in();
            let ready = Ready { member: (self.cfg.task, self.cfg.incarnation), offsets: c.offsets.clone(), last };
            let (writes, stage) = (self.cycle_writes.take(), self.stage.clone());
            // Kafka acknowledged every write of the cycle (its own and its
            // bundles') before it is handed in: a refused write says why
            // better than an aborted commit would, and the commit finds
            // nothing to flush (rdkafka's flush before a commit waits in
            // 100 ms polls). The round commits it with the other tasks'.
            let commit = async move {
                let last = match writes {
                    Some(w) => w.acknowledged().await?,
                    None => None,
                };
                if let Some(e) = stage.send(Settle).await.ok().flatten() {
                    return Err(e);
                }
                let committed =
                    txn.addr.send(ready).await.unwrap_or_else(|e| Err(Failure::fatal(format!("the copy's transaction stopped: {e}"))));
                Ok((last, committed))
            };
            ctx.spawn(commit.into_actor(self).map(move |written, act, ctx| {
                if !act.lifecycle.is_running() {
                    return;
                }
                let result = match written {
                    Err(e) => return act.failed(ctx, e),
                    Ok((last, result)) => {
                        if let Some(c) = act.cycles.open_mut() {
                            c.changelog_last = c.changelog_last.max(last);
                        }
                        result
                    }
                };
                if result.is_err() {
                    act.commit_failed();
                }
                match result {
                    Ok(()) => {
                        if let Some(c) = act.cycles.open() {
                            act.committed.extend(c.offsets.iter().map(|(k, v)| (k.clone(), *v)));
                        }
                        act.after_commit(ctx);
                    }
                    Err(e) if e.recovery == Recovery::Retry && act.cycles.retry() => {
                        tracing::debug!(task = %act.cfg.task, "transaction commit failed, retrying: {e}");
                        ctx.run_later(RETRY_EVERY, |act, ctx| act.commit_cycle(ctx));
                    }
                    // Fenced by a new owner, or aborted: this incarnation stops
                    // and whoever owns the task next redoes what it did not
                    // commit; a transient cause waits, anything else fails.
                    Err(e) => act.failed(ctx, e.within(format_args!("task {}", act.cfg.task))),
                }
            }));
            return;
        }
        // A hand-over gives the partitions up right after: the next owner
        // must find the commit.
        let mode =
            if cycle_steps::commit_synchronously(c.is_final(), self.is_handing_over()) { CommitMode::Sync } else { CommitMode::Async };
        let offsets = c.offsets.clone();
        if let Err(e) = self.commit_offsets(&offsets, mode) {
            self.commit_failed();
            if !self.cycles.retry() {
                return self.failed(ctx, e);
            }
            tracing::debug!(task = %self.cfg.task, "commit failed, retrying: {e}");
            ctx.run_later(RETRY_EVERY, |act, ctx| act.commit_cycle(ctx));
            return;
        }
        self.after_commit(ctx);
    }

    /// Commits consumer offsets (at_least_once).
    fn commit_offsets(&mut self, offsets: &BTreeMap<TopicPartition, i64>, mode: CommitMode) -> Result<(), Failure> {
        let changed: Vec<_> = offsets.iter().filter(|(k, v)| self.committed.get(*k) != Some(v)).collect();
        if changed.is_empty() {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for (tp, next) in &changed {
            let (topic, partition) = (&tp.topic, tp.partition);
            tpl.add_partition_offset(topic, partition, Offset::Offset(**next))
                .map_err(|e| Failure::fatal(format!("bad offset for {topic}[{partition}]: {e}")))?;
        }
        self.consumer
            .commit(&tpl, mode)
            .map_err(|e| crate::kafka::failure::failure(&e).within(format_args!("task {} could not commit offsets", self.cfg.task)))?;
        for (k, v) in changed {
            self.committed.insert(k.clone(), *v);
        }
        Ok(())
    }

    /// Post-commit work, in the order `runtime::task::cycle_steps` gives:
    /// the stage, the local store, the GroupByKeys, committed metrics, the
    /// user's group, then the task's end or the next cycle.
    fn after_commit(&mut self, ctx: &mut Context<Self>) {
        let first = self.cycles.last_committed_ms.is_none();
        let c: Cycle = match self.cycles.committed(now_millis()) {
            Ok(c) => c,
            Err(e) => return self.fail(ctx, format!("task {}: {e}", self.cfg.task)),
        };
        let facts = Committed { first, last: c.is_final(), transactional: self.cfg.transactional, hands_over: self.hands_over_now() };
        let mut finalized = None;
        for step in cycle_steps::after_commit(facts) {
            match step {
                Step::SayWorks => {
                    let _ = self.events.send(TaskEvent::Committed { task: self.cfg.task, incarnation: self.cfg.incarnation });
                }
                Step::RecordCycle => self.cycle_committed(&c),
                Step::LeaveTransaction => self.leave_transaction(true),
                Step::TellStage { await_finalization } => {
                    // A stage that failed or stopped drops the sender: nothing to wait for.
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    finalized = await_finalization.then_some(rx);
                    self.stage.do_send(StageCommitted { id: c.id, finalized: await_finalization.then_some(tx) });
                }
                Step::TellProgress => {
                    if let Some(board) = &self.cfg.progress_board {
                        board.insert(self.cfg.task, (c.epoch, self.busy_with()));
                    }
                }
                Step::ResumeStage => self.stage.do_send(Resume),
                Step::DeferredSaved => self.deferred.saved(),
                Step::SourcesCommitted => {
                    for route in self.cfg.inputs.values_mut() {
                        if let Some(src) = route.source.as_mut() {
                            src.committed_through(c.id);
                        }
                    }
                }
                Step::ApplyToStore => {
                    if let Err(e) = self.store.apply(&c.changes) {
                        // Committed to the changelog already: a restart
                        // rebuilds the local store from it.
                        return self.failed(ctx, Failure::local(format!("task {}: its local state store: {e}", self.cfg.task)));
                    }
                    if let Some(last) = c.changelog_last {
                        self.changelog_next = last + 1;
                    }
                }
                Step::TellGroupByKeys => {
                    for g in self.gbk_actors.values() {
                        g.do_send(GbkCommand::Committed { id: c.id });
                    }
                }
                Step::Report => self.report_commit(&c),
                Step::HandOver => return self.handed_over(ctx),
                Step::Pump => self.pump(ctx),
                Step::FinishOnceFinalized => {
                    let rx = finalized.take();
                    ctx.spawn(
                        async move {
                            if let Some(rx) = rx {
                                let _ = rx.await;
                            }
                        }
                        .into_actor(self)
                        .map(|_, act, ctx| act.finished(ctx)),
                    );
                }
                Step::NextCycle => {
                    // A round began or a cycle was asked for while this one
                    // ran, the watermark moved on, or timers are due.
                    let more = self.is_handing_over() || self.output_watermark() > self.reported || self.timers_due();
                    match self.requests.committed(more) {
                        Next::Open => self.open_cycle(),
                        Next::Ask => self.request_flush(),
                        Next::Nothing => {}
                    }
                }
            }
        }
    }

    /// What a committed cycle reports: a debug line, late drops, offsets
    /// to the user's consumer group, the metrics of the bundles it covered.
    fn report_commit(&mut self, c: &Cycle) {
        tracing::debug!(
            task = %self.cfg.task, incarnation = self.cfg.incarnation,
            "committed cycle {}: offsets {:?}, {} state change(s), changelog next {}, output watermark {:?}",
            c.id, c.offsets, c.changes.len(), self.changelog_next, c.watermark
        );
        self.warn_dropped();
        self.commit_to_user_groups(&c.offsets);
        let covered: Vec<MonitoringInfo> = self.uncommitted_metrics.drain(..c.metrics.min(self.uncommitted_metrics.len())).collect();
        if !covered.is_empty() {
            let _ = self.events.send(TaskEvent::CommittedMetrics(covered));
        }
    }
}

impl TaskSupervisor {
    /// The last cycle committed and its bundles were finalized.
    fn finished(&mut self, ctx: &mut Context<Self>) {
        let _ = self.lifecycle.transition(TaskState::Finished);
        self.publish_status();
        self.report_dropped();
        self.report_sources();
        self.report_flow("finished");
        let _ = self.events.send(TaskEvent::Finished(self.cfg.task));
        if self.is_handing_over() {
            self.handed_over(ctx);
        }
    }
}

/// The time processing-time timers and triggers run on: the test clock
/// under a TestStream, else the wall clock.
pub(super) fn clock_now(progress: &Progress) -> i64 {
    if progress.clock > 0 {
        progress.clock
    } else {
        now_millis()
    }
}

pub(super) fn now_millis() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
