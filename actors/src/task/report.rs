//! What the task tells its job's status board: a snapshot of its core's
//! state (`runtime::task::status`), taken every second and when its
//! lifecycle changes, and the span and latency of each commit cycle.
use std::sync::atomic::Ordering;

use beam_kafka_runtime::codec::timestamp::Watermark;
use beam_kafka_runtime::task::cycle::Cycle;
use beam_kafka_runtime::task::status::{Hold, InputPosition, TaskStatus};
use opentelemetry::KeyValue;

use super::cycle::now_millis;
use super::TaskSupervisor;
use crate::telemetry::{at_millis, instruments, past_failed_span, past_span};

impl TaskSupervisor {
    fn status(&self) -> TaskStatus {
        let mut s = TaskStatus::new(self.lifecycle.state());
        s.inputs = self
            .received
            .iter()
            .map(|(tp, position)| InputPosition {
                topic: tp.topic.clone(),
                partition: tp.partition,
                position: *position,
                committed: self.committed.get(tp).copied(),
            })
            .collect();
        s.input_watermark = self.input_watermark;
        s.output_watermark = self.reported;
        let gbk = self.gbk_views.values().map(|g| g.output_hold()).min().unwrap_or(Watermark::PosInf);
        s.holds = vec![
            (Hold::GroupByKey, gbk),
            (Hold::SideInput, self.held.hold_watermark()),
            (Hold::Timer, self.timers.hold()),
            (Hold::Deferred, self.deferred.hold_watermark()),
        ];
        let mut sides: Vec<(String, Watermark)> = self.side_watermarks.iter().map(|(t, w)| (t.clone(), *w)).collect();
        sides.sort();
        s.side_watermarks = sides;
        s.last_commit_ms = self.cycles.last_committed_ms;
        let (c, b) = (&self.cycles.durations, &self.bundle_durations);
        (s.commit_p50_ms, s.commit_max_ms) = (c.median(), c.max());
        (s.bundles, s.bundle_p50_ms, s.bundle_max_ms) = (b.count(), b.median(), b.max());
        s.held_elements = self.held.len();
        s.pending_timers = self.timers.len();
        s.deferred = self.deferred.len();
        s.queued_records = self.flow.queued();
        s.in_flight = self.flow.in_flight();
        s.flow_paused = self.flow.is_paused();
        s.gated = self.gate.is_closed();
        s.cycle_open_ms = self.cycles.open().map(|c| now_millis() - c.started_ms());
        s.state_bytes = self.store.approximate_bytes();
        s
    }

    pub(super) fn publish_status(&self) {
        self.cfg.board.publish(self.cfg.task, self.cfg.incarnation, self.status());
    }

    /// A cycle committed: its latency, its span, the counters.
    pub(super) fn cycle_committed(&self, c: &Cycle) {
        let meters = &self.cfg.meters;
        meters.commits.fetch_add(1, Ordering::Relaxed);
        let now = now_millis();
        let took = (now - c.started_ms()).max(0) as f64 / 1000.0;
        instruments().commit_duration.record(took, &meters.attributes);
        let mut attributes = meters.attributes.clone();
        attributes.extend([
            KeyValue::new("beam_kafka.cycle.id", c.id as i64),
            KeyValue::new("beam_kafka.cycle.offsets", c.offsets.len() as i64),
            KeyValue::new("beam_kafka.cycle.state_changes", c.changes.len() as i64),
            KeyValue::new("beam_kafka.cycle.transactional", self.cfg.transactional),
            KeyValue::new("beam_kafka.cycle.output_watermark", beam_kafka_runtime::task::status::watermark_text(c.watermark)),
        ]);
        past_span("beam_kafka.commit_cycle", at_millis(c.started_ms()), at_millis(now), attributes);
    }

    /// The task stops without committing its open cycle: a failed span,
    /// so a slow or stuck cycle shows in the trace with why it ended.
    pub(super) fn cycle_abandoned(&self, reason: &str) {
        let Some(c) = self.cycles.open() else { return };
        let mut attributes = self.cfg.meters.attributes.clone();
        attributes.push(KeyValue::new("beam_kafka.cycle.id", c.id as i64));
        attributes.push(KeyValue::new("beam_kafka.cycle.phase", format!("{:?}", c.phase)));
        past_failed_span("beam_kafka.commit_cycle", at_millis(c.started_ms()), at_millis(now_millis()), attributes, reason);
    }

    /// A commit attempt failed (it may be retried).
    pub(super) fn commit_failed(&self) {
        self.cfg.meters.commit_failures.fetch_add(1, Ordering::Relaxed);
    }
}
