//! The task's GroupByKey actors and its watermark aggregator: starting and
//! stopping them, their answers, and the alignment of a cycle's barrier.
//!
//! Data of shuffle topics goes from the task to its GroupByKey; watermark
//! reports go to the aggregator, which passes each advance to the
//! GroupByKeys and then to the task. A cycle's barrier goes to the
//! aggregator, which answers and sends it on to the GroupByKeys; the stage
//! is flushed once all of them answered, and input waits meanwhile, so the
//! state changes they answer with are exactly those of the offsets the
//! cycle commits.
use std::time::Duration;

use actix::prelude::*;
use beam_kafka_runtime::codec::packed::Pack;
use beam_kafka_runtime::codec::timestamp::Watermark;
use beam_kafka_runtime::state::changelog::ChangelogStore;
use beam_kafka_runtime::state::task_state;

use super::cycle::now_millis;
use super::input::ToStage;
use super::TaskSupervisor;
use crate::group_by_key::GroupByKeyActor;
use crate::messages::{Flush, GbkCommand, GbkEvent, Shutdown, WatermarkCommand, WatermarkEvent, WatermarkInput, WatermarkReport};
use crate::watermark_aggregator::WatermarkAggregator;

/// How the watermark aggregator is named in a cycle's alignment.
const AGGREGATOR: &str = "watermarks";

/// How a GroupByKey actor is named in a cycle's alignment.
fn gbk_name(topic: &str) -> String {
    format!("group-by-key {topic}")
}

impl TaskSupervisor {
    /// Moves the restored GroupByKeys and input watermark into actors of
    /// their own (on this task's thread).
    pub(super) fn start_children(&mut self, ctx: &mut Context<Self>) {
        let me = ctx.address();
        for (topic, route) in self.cfg.inputs.iter_mut() {
            if let Some(gbk) = route.gbk.take() {
                let bound = self.cfg.group_by_key_memory;
                let actor = GroupByKeyActor::new(topic.clone(), gbk, me.clone().recipient(), route.window_fns.take(), bound).start();
                self.gbk_actors.insert(topic.clone(), actor);
            }
        }
        let (main, sides) = self.to_aggregate.take().expect("children start once");
        let gbks = self.gbk_actors.values().map(|a| a.clone().recipient()).collect();
        self.watermarks = Some(WatermarkAggregator::new(main, sides, gbks, me.recipient()).start());
    }

    pub(super) fn stop_children(&mut self) {
        if let Some(w) = self.watermarks.take() {
            w.do_send(Shutdown);
        }
        for (_, g) in self.gbk_actors.drain() {
            g.do_send(Shutdown);
        }
    }

    /// Who must answer a cycle's barrier before the stage is flushed.
    pub(super) fn barrier_participants(&self) -> Vec<String> {
        std::iter::once(AGGREGATOR.to_string()).chain(self.gbk_actors.keys().map(|t| gbk_name(t))).collect()
    }

    /// Sends cycle `id`'s barrier on its way.
    pub(super) fn send_barrier(&self, id: u64) {
        if let Some(w) = &self.watermarks {
            w.do_send(WatermarkCommand::Barrier { id });
        }
    }

    /// Watermark reports for the aggregator.
    pub(super) fn report_watermarks(&self, reports: Vec<WatermarkReport>) {
        if let (Some(w), false) = (&self.watermarks, reports.is_empty()) {
            w.do_send(WatermarkCommand::Reports(reports));
        }
    }

    /// Values of a shuffle topic for its GroupByKey; they count as in flight
    /// until it answers.
    pub(super) fn send_to_gbk(&mut self, topic: &str, values: Vec<Pack>) {
        let count: usize = values.iter().map(Pack::len).sum();
        if count == 0 {
            return;
        }
        if let Some(g) = self.gbk_actors.get(topic) {
            let bytes: usize = values.iter().map(|p| p.data.len()).sum();
            self.flow.sent_bytes(count as u64, bytes as u64);
            g.do_send(GbkCommand::Data(values));
        }
    }

    /// Asks GroupByKeys holding closed panes to fire as many as the stage
    /// has room for (one request each at a time); whether any was asked.
    pub(super) fn fire_closed_windows(&mut self) -> bool {
        let limit = self.flow.room().max(1);
        let mut asked = false;
        for (topic, view) in self.gbk_views.iter_mut().filter(|(_, v)| v.wants_firing()) {
            let Some(g) = self.gbk_actors.get(topic) else { continue };
            view.firing = true;
            self.flow.sent(limit);
            g.do_send(GbkCommand::Fire { limit: limit as usize });
            asked = true;
        }
        asked
    }

    /// Whether a GroupByKey is firing closed panes: they go to the stage
    /// before queued records.
    pub(super) fn firing(&self) -> bool {
        self.gbk_views.values().any(|v| v.has_closed())
    }

    pub(super) fn on_gbk_event(&mut self, ev: GbkEvent, ctx: &mut Context<Self>) {
        if !self.lifecycle.is_running() {
            return;
        }
        match ev {
            GbkEvent::Failed { error } => self.fail(ctx, format!("task {}: {error}", self.cfg.task)),
            GbkEvent::Output { topic, credit, panes, fired, report, commit_wanted } => {
                self.flow.processed(credit);
                if commit_wanted {
                    self.request_flush();
                }
                let Some(view) = self.gbk_views.get_mut(&topic) else { return };
                if fired {
                    view.firing = false;
                }
                let drained = view.update(&report);
                let source = view.source_transform.clone();
                if !panes.is_empty() {
                    self.requests.panes_fired();
                    // Panes of the next cycle, or fired while input is gated,
                    // wait (`runtime::task::gate`).
                    let after_barrier = self.cycles.after_barrier(&gbk_name(&topic));
                    if let Some((source, panes)) = self.gate.panes((source, panes), after_barrier) {
                        self.panes_to_stage(source, panes, ctx);
                    }
                }
                self.wake_for_triggers(ctx);
                if drained {
                    // The watermark the closed panes held may move on now.
                    self.request_flush();
                }
                self.pump(ctx);
            }
            GbkEvent::Barrier { topic, id, changes, report } => {
                let who = gbk_name(&topic);
                let view = self.gbk_views.get_mut(&topic);
                let Some(c) = self.cycles.barrier_answered(id, &who) else { return };
                c.changes.extend(changes);
                if let Some(view) = view {
                    view.update(&report);
                    c.barrier_hold = c.barrier_hold.min(view.output_hold());
                }
                if self.cycles.aligned(&who) {
                    self.on_aligned(ctx);
                }
            }
        }
    }

    pub(super) fn on_watermark_event(&mut self, ev: WatermarkEvent, ctx: &mut Context<Self>) {
        if !self.lifecycle.is_running() {
            return;
        }
        match ev {
            WatermarkEvent::Advanced { input: WatermarkInput::Main, wm } => self.on_input_watermark(wm, ctx),
            WatermarkEvent::Advanced { input: WatermarkInput::Side(topic), wm } => {
                self.side_watermarks.insert(topic, wm);
                self.held.recheck();
                self.pump(ctx);
            }
            WatermarkEvent::Progress(p) => {
                // A TestStream step (or the test clock) moved: a cycle fires
                // what is due and passes the step on once the task is idle.
                self.progress = p;
                self.request_flush();
            }
            WatermarkEvent::Barrier { id, snapshot, current } => {
                let Some(c) = self.cycles.barrier_answered(id, AGGREGATOR) else { return };
                if snapshot != self.written_watermark_state {
                    c.changes.push((task_state::watermark_key(), Some(snapshot.clone())));
                    self.written_watermark_state = snapshot;
                }
                self.barrier_watermark = current;
                self.input_watermark = self.input_watermark.max(current);
                if !self.time_sorted.is_empty() {
                    self.held.recheck();
                }
                if self.cycles.aligned(AGGREGATOR) {
                    self.on_aligned(ctx);
                }
            }
        }
    }

    /// Every actor answered the open cycle's barrier: its output watermark
    /// is known, and the stage is flushed. Panes that came back before the
    /// answers were handed over; those held for side inputs are state of
    /// this cycle (the GroupByKey's answer no longer has them). Panes a
    /// GroupByKey fired after its answer go to the stage behind the flush.
    fn on_aligned(&mut self, ctx: &mut Context<Self>) {
        let gbk_hold = self.cycles.open().map_or(Watermark::PosInf, |c| c.barrier_hold);
        let watermark = self.output_watermark_with(self.barrier_watermark, gbk_hold);
        let held = self.held.take_entries();
        // Every actor answered: what the TestStream step brought was handed
        // over and is flushed by this cycle, unless work still waits.
        let epoch = if self.is_idle() { self.progress.epoch } else { self.reported_progress.epoch };
        let Some(c) = self.cycles.open_mut() else { return };
        c.changes.extend(held);
        c.watermark = watermark;
        c.epoch = epoch;
        let id = c.id;
        // Which timers are due is decided when the flush completed, from the
        // settings of every bundle before it and the input watermark of the
        // snapshot; input arriving meanwhile waits, so the stage runs no
        // bundle between the flush and the timers (a bundle of later data
        // could re-set a timer about to fire, which would then fire twice).
        self.stage.do_send(Flush { id, hold: self.cfg.transactional });
        for (source, panes) in self.gate.flush_sent(!self.cfg.timer_specs.is_empty()) {
            self.panes_to_stage(source, panes, ctx);
        }
        self.pump(ctx);
    }

    /// Tells each GroupByKey whose trigger deadline passed the processing
    /// time, and sets a wake-up for the earliest deadline still ahead.
    pub(super) fn wake_for_triggers(&mut self, ctx: &mut Context<Self>) {
        if self.progress.clock > 0 {
            // The test clock moves with TestStream steps only; the
            // GroupByKeys hear of it from the aggregator.
            return;
        }
        let now = now_millis();
        for (topic, view) in self.gbk_views.iter_mut() {
            if view.take_due_deadline(now) {
                if let Some(g) = self.gbk_actors.get(topic) {
                    g.do_send(GbkCommand::ProcessingTime(now));
                }
            }
        }
        let Some(next) = self.gbk_views.values().filter_map(|v| v.deadline).min() else { return };
        if self.trigger_wake.is_some_and(|w| w <= next && w > now) {
            return;
        }
        self.trigger_wake = Some(next);
        ctx.run_later(Duration::from_millis(next.saturating_sub(now).max(0) as u64), |act, ctx| {
            act.trigger_wake = None;
            if act.lifecycle.is_running() {
                act.wake_for_triggers(ctx);
            }
        });
    }

    /// Whether nothing the task received waits to be handed to the stage:
    /// no queued input, no panes kept aside or still to fire, no deferred
    /// work. (Elements held for side inputs wait for a later step.)
    pub(super) fn is_idle(&self) -> bool {
        self.busy_with().is_empty()
    }

    /// What keeps the task from being idle, in words (empty when idle):
    /// what a stuck TestStream step is reported waiting for.
    pub(super) fn busy_with(&self) -> String {
        let mut busy = Vec::new();
        if !self.queue.is_empty() {
            busy.push(format!("{} batch(es) of input queued", self.queue.len()));
        }
        if self.gate.has_parked_panes() || self.firing() {
            busy.push("GroupByKey panes to fire".to_string());
        }
        if !self.deferred.is_empty() {
            busy.push(format!("{} deferred element(s)", self.deferred.len()));
        }
        busy.join(", ")
    }

    /// Panes for the stage, now (the gate let them through).
    pub(super) fn panes_to_stage(&mut self, source: String, panes: Vec<Vec<u8>>, ctx: &mut Context<Self>) {
        let mut out = ToStage::default();
        if let Err(e) = self.hand_to_stage(&mut out, &source, panes) {
            return self.fail(ctx, format!("task {}: {e}", self.cfg.task));
        }
        self.send(out);
    }

    /// The main input watermark moved (the GroupByKeys were told first):
    /// closed windows fire as far as the stage has room (asked for before
    /// the cycle's barrier, so the cycle covers them), and a cycle starts
    /// (which drops the state of expired windows once what came before the
    /// step ran).
    pub(super) fn on_input_watermark(&mut self, wm: Watermark, ctx: &mut Context<Self>) {
        tracing::debug!(task = %self.cfg.task, "input watermark {wm:?}");
        self.input_watermark = self.input_watermark.max(wm);
        // Held elements of time-sorted inputs may be due.
        if !self.time_sorted.is_empty() {
            self.held.recheck();
        }
        if !self.input_blocked() && self.flow.has_room() {
            // The GroupByKeys' reports of what the step closed are on their
            // way: ask each at once.
            self.gbk_views.values_mut().for_each(|v| v.watermark_moved());
            self.fire_closed_windows();
        }
        self.request_flush();
        self.pump(ctx);
    }
}
