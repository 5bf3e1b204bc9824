//! A task's input: records queue in the task and reach the stage only as
//! fast as its bundles finish (`runtime::task::flow`); past a high mark the
//! task's partitions are paused. Side-input records and held elements are
//! handled here too.
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use actix::prelude::*;
use beam_kafka_runtime::codec::coder::Coder;
use beam_kafka_runtime::codec::packed::Pack;
use beam_kafka_runtime::codec::timestamp::Watermark;
use beam_kafka_runtime::codec::windowed::{self, Window};
use beam_kafka_runtime::kafka::topic_partition::TopicPartition;
use beam_kafka_runtime::state::deferred::Deferred;
use beam_kafka_runtime::state::held::{self, Admission, Held};
use beam_kafka_runtime::task::flow::FlowCommand;
use beam_kafka_runtime::task::pump::{next_step, PumpState, Step};
use rdkafka::consumer::Consumer;
use rdkafka::TopicPartitionList;

use super::cycle::now_millis;
use super::{upstream_key, TaskSupervisor};
use crate::messages::{payload_bytes, Elements, InputRecord, StageResidual, WatermarkInput, WatermarkReport};
use crate::side_inputs::SideRecord;
use beam_kafka_runtime::codec::envelope::{self, Record};

/// Elements for the stage, kept per data source in one message.
#[derive(Default)]
pub(super) struct ToStage {
    message: Option<Elements>,
}

impl TaskSupervisor {
    /// Takes records from the poll loop: drops copies of records already
    /// received (or before the task's start), queues the rest and hands over
    /// what the stage has room for.
    pub(super) fn enqueue(&mut self, records: Vec<InputRecord>, ctx: &mut Context<Self>) {
        if !self.lifecycle.is_running() {
            return;
        }
        let mut fresh = Vec::with_capacity(records.len());
        // A batch is one partition's run of records (the poll loop groups
        // them): its position is looked up once per run, not per record.
        let mut run: Option<(TopicPartition, i64)> = None;
        for r in records {
            if run.as_ref().is_none_or(|(tp, _)| tp.partition != r.partition || tp.topic != r.topic) {
                self.note_received(run.take());
                let key = TopicPartition::new(r.topic.clone(), r.partition);
                let next = self.received.get(&key).copied().unwrap_or(0);
                run = Some((key, next));
            }
            let next = &mut run.as_mut().expect("set above").1;
            if r.offset < *next {
                tracing::debug!(task = %self.cfg.task, "skipping {}[{}] offset {}: before {next}", r.topic, r.partition, r.offset);
                continue;
            }
            *next = r.offset + 1;
            fresh.push(r);
        }
        self.note_received(run);
        if fresh.is_empty() {
            return;
        }
        self.flow.enqueued(fresh.len() as u64, payload_bytes(&fresh));
        self.queue.push_back(fresh.into());
        self.pump(ctx);
    }

    /// Records where a partition's received records end.
    fn note_received(&mut self, run: Option<(TopicPartition, i64)>) {
        if let Some((key, next)) = run {
            self.received.insert(key, next);
        }
    }

    /// Hands the stage work while it has room, oldest first, in the order
    /// `runtime::task::pump` decides.
    pub(super) fn pump(&mut self, ctx: &mut Context<Self>) {
        self.ask_side_maps(ctx);
        loop {
            match next_step(self.pump_state()) {
                Step::Wait => break,
                Step::ReleaseDeferred => self.release_deferred(),
                Step::ReleaseHeld => self.release_held(),
                Step::FireClosedWindows => {
                    self.fire_closed_windows();
                }
                Step::HandRecords => {
                    let Some(mut records) = self.queue.pop_front() else { break };
                    // What the stage had no room for (packed records hold many
                    // elements each) waits at the front of the queue.
                    self.handle_records(&mut records, ctx);
                    if !records.is_empty() {
                        self.queue.push_front(records);
                    }
                }
            }
        }
        self.apply_flow();
        self.wake_for_deferred(ctx);
    }

    /// What the pump decides from.
    fn pump_state(&self) -> PumpState {
        PumpState {
            running: self.lifecycle.is_running(),
            blocked: self.input_blocked(),
            room: self.flow.has_room(),
            // Delayed residuals not yet due do not hold up other input.
            deferred_due: self.deferred.has_due(now_millis()),
            cycle_open: self.cycles.is_open(),
            releasing: self.held.may_release(),
            closed_to_ask: self.gbk_views.iter().any(|(t, v)| v.wants_firing() && self.gbk_actors.contains_key(t)),
            firing: self.firing(),
            queued: !self.queue.is_empty(),
        }
    }

    /// Sets a wake-up for the earliest delayed residual, so it runs when due
    /// even if no other input arrives.
    fn wake_for_deferred(&mut self, ctx: &mut Context<Self>) {
        let now = now_millis();
        let Some(due) = self.deferred.next_due(now) else { return };
        if self.deferred_wake.is_some_and(|w| w <= due && w > now) {
            return;
        }
        self.deferred_wake = Some(due);
        ctx.run_later(Duration::from_millis((due - now) as u64), |act, ctx| {
            act.deferred_wake = None;
            act.pump(ctx);
        });
    }

    /// Whether input waits: a cycle's barrier is aligning, or its timers
    /// are being decided.
    pub(super) fn input_blocked(&self) -> bool {
        self.gate.is_closed() || self.cycles.is_aligning()
    }

    /// Pauses or resumes the task's partitions as flow control decides.
    fn apply_flow(&mut self) {
        // A task stopping, or one whose partitions the group is moving, leaves
        // their fetch positions alone: they belong to the next incarnation.
        if !self.lifecycle.is_running() || !self.cfg.assignment.current() {
            return;
        }
        if self.cfg.mailbox.take_pause() {
            // The poll loop paused them: resumed like the task's own pauses.
            self.flow.paused_elsewhere();
        }
        let Some(command) = self.flow.decide() else { return };
        let mut tpl = TopicPartitionList::new();
        let partition = self.cfg.task.partition as i32;
        for topic in self.cfg.inputs.keys() {
            tpl.add_partition(topic, partition);
        }
        match command {
            FlowCommand::Pause => {
                tracing::debug!(task = %self.cfg.task, "pausing input: {} record(s) queued, {} in the stage", self.flow.queued(), self.flow.in_flight());
                if let Err(e) = self.consumer.pause(&tpl) {
                    tracing::warn!(task = %self.cfg.task, "cannot pause its partitions: {e}");
                }
            }
            FlowCommand::Resume => {
                tracing::debug!(task = %self.cfg.task, "resuming input");
                if let Err(e) = self.consumer.resume(&tpl) {
                    tracing::warn!(task = %self.cfg.task, "cannot resume its partitions: {e}");
                }
                // A pause dropped what librdkafka had fetched; fetching
                // restarts at the last record received, and only a seek
                // wakes the fetcher at once (else it looks within a second).
                for topic in self.cfg.inputs.keys() {
                    if let Some(next) = self.received.get(&TopicPartition::new(topic.clone(), partition)) {
                        let _ = self.consumer.seek(topic, partition, rdkafka::Offset::Offset(*next), Duration::ZERO);
                    }
                }
            }
        }
    }

    /// Forgets queued input (the task stops; its next owner reads it again).
    pub(super) fn drop_input(&mut self) {
        for records in self.queue.drain(..) {
            self.flow.dequeued(records.len() as u64, payload_bytes(&records));
        }
        self.gate.drop_side();
    }

    /// Handles records in offset order while the stage has room: source
    /// records become elements, runner records are data (to a GroupByKey or
    /// the stage) or watermarks. Leaves the records not handled in `records`
    /// (still queued, for flow control).
    fn handle_records(&mut self, records: &mut VecDeque<InputRecord>, ctx: &mut Context<Self>) {
        let mut out = ToStage::default();
        // Values for GroupByKeys count as in flight once sent, below.
        let mut handed = 0u64;
        let mut kafka_records = 0u64;
        let mut from_sources = false;
        // Values per GroupByKey input topic, and watermark reports: sent
        // once the batch is read, the values first.
        let mut to_gbks: HashMap<String, Vec<Pack>> = HashMap::new();
        let mut reports = Vec::new();
        while handed < self.flow.room() {
            let Some(r) = records.pop_front() else { break };
            kafka_records += 1;
            self.flow.dequeued(1, payload_bytes([&r]));
            let Some(route) = self.cfg.inputs.get_mut(&r.topic) else {
                return self.fail(ctx, format!("task {} got a record of unexpected topic {}", self.cfg.task, r.topic));
            };
            if let Some(src) = route.source.as_mut() {
                match src.element(&r) {
                    Err(e) => return self.fail(ctx, e),
                    // The bounded read is over: neither processed nor committed.
                    Ok(None) => continue,
                    Ok(Some(element)) => {
                        from_sources = true;
                        let source = route.source_transform.clone();
                        if let Err(e) = self.hand_to_stage(&mut out, &source, vec![element]) {
                            return self.fail(ctx, e);
                        }
                    }
                }
                self.handed.insert(TopicPartition::new(r.topic, r.partition), r.offset + 1);
                continue;
            }
            let record = match envelope::decode_at(r.payload.as_deref().unwrap_or_default(), &r.topic, r.partition, r.offset) {
                Ok(rec) => rec,
                Err(e) => return self.fail(ctx, e),
            };
            match record {
                Record::Data(values) => {
                    if self.gbk_actors.contains_key(&r.topic) {
                        // The GroupByKey reads the packed elements in place.
                        handed += values.len() as u64;
                        to_gbks.entry(r.topic.clone()).or_default().push(values);
                    } else {
                        let source = route.source_transform.clone();
                        if let Err(e) = self.hand_to_stage(&mut out, &source, values.iter().map(<[u8]>::to_vec).collect()) {
                            return self.fail(ctx, e);
                        }
                    }
                }
                Record::Watermark { wm, source, partition, total, progress } => {
                    // Upstreams are told apart per topic: one sub-topology may
                    // write several topics this task reads.
                    let upstream = upstream_key(&r.topic, &source);
                    reports.push(WatermarkReport { input: WatermarkInput::Main, upstream, partition, total, wm, progress });
                }
            }
            self.handed.insert(TopicPartition::new(r.topic, r.partition), r.offset + 1);
        }
        self.send(out);
        for (topic, values) in to_gbks {
            self.send_to_gbk(&topic, values);
        }
        self.report_watermarks(reports);
        if from_sources {
            self.update_source_watermarks();
        }
        self.cfg.meters.records_read.fetch_add(kafka_records, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sends what was collected for the stage.
    pub(super) fn send(&mut self, out: ToStage) {
        if let Some(e) = out.message {
            self.stage.do_send(e);
        }
    }

    /// Adds elements for the stage: at once, or held: for a stage with side
    /// inputs, until the side windows each element needs are complete; for
    /// a time-sorted input, until the input watermark passed the element
    /// (one that arrives past it is dropped, and said so).
    pub(super) fn hand_to_stage(&mut self, out: &mut ToStage, source: &str, elements: Vec<Vec<u8>>) -> Result<(), String> {
        let sorted = self.time_sorted.get(source).copied();
        if self.cfg.side_inputs.is_empty() && sorted.is_none() {
            self.arm_expiries_of(source, &elements)?;
            self.push(out, source, elements);
            return Ok(());
        }
        let coder = self.window_coders.get(source).ok_or_else(|| format!("no window coder for {source}"))?.clone();
        let (mut ready, mut late) = (Vec::new(), 0u64);
        for element in elements {
            let h = held_element(&coder, source.to_string(), element)?;
            match held::admit(&h, sorted, self.input_watermark, |w| self.side_ready(w)) {
                Admission::Late => late += 1,
                Admission::Ready => {
                    self.arm_expiries_of(source, std::slice::from_ref(&h.element))?;
                    ready.push(h.element);
                }
                Admission::Hold { side_missing } => {
                    self.arm_expiries_of(source, std::slice::from_ref(&h.element))?;
                    if side_missing {
                        self.want_side_maps(&h.windows);
                    }
                    self.held.hold(h);
                }
            }
        }
        if late > 0 {
            crate::telemetry::instruments().late_dropped.add(late, &[]);
            tracing::warn!(
                task = %self.cfg.task,
                "dropped {late} element(s) of {source} that arrived after the watermark passed them (time-sorted input, allowed lateness {} ms)",
                sorted.unwrap_or_default()
            );
        }
        self.push(out, source, ready);
        Ok(())
    }

    /// Appends elements, keeping consecutive elements of one data source in
    /// one message; counts them as in flight.
    fn push(&mut self, out: &mut ToStage, source: &str, ready: Vec<Vec<u8>>) {
        if ready.is_empty() {
            return;
        }
        let bytes: usize = ready.iter().map(Vec::len).sum();
        self.flow.sent_bytes(ready.len() as u64, bytes as u64);
        match &mut out.message {
            Some(e) if e.source_transform == source => e.elements.extend(ready),
            _ => {
                if let Some(e) = out.message.take() {
                    self.stage.do_send(e);
                }
                out.message = Some(Elements { source_transform: source.to_string(), elements: ready });
            }
        }
    }

    /// Whether every side input is complete for main-input window `w`.
    fn side_ready(&self, w: &Window) -> bool {
        self.cfg.side_inputs.iter().enumerate().all(|(i, s)| {
            let wm = self.side_watermarks.get(&s.topic).copied().unwrap_or(Watermark::NegInf);
            super::side_maps::side_ready(&self.side_maps, i, s, w, wm)
        })
    }

    /// Sends the stage held elements whose side windows are now complete, as
    /// many as it has room for.
    fn release_held(&mut self) {
        let limit = (self.flow.room() as usize).max(1);
        let (specs, wms, maps) = (&self.cfg.side_inputs, &self.side_watermarks, &self.side_maps);
        let side_ready = |w: &Window| {
            specs
                .iter()
                .enumerate()
                .all(|(i, s)| super::side_maps::side_ready(maps, i, s, w, wms.get(&s.topic).copied().unwrap_or(Watermark::NegInf)))
        };
        let (sorted, input) = (&self.time_sorted, self.input_watermark);
        let ready = |h: &Held| held::releasable(h, sorted.get(&h.source).copied(), input, side_ready);
        let released = self.held.release(ready, limit);
        if !self.held.may_release() {
            self.forget_ended_side_maps();
        }
        let mut out = ToStage::default();
        for h in released {
            self.push(&mut out, &h.source, vec![h.element]);
        }
        self.send(out);
    }

    /// Work a bundle handed back: elements a split left unprocessed (they
    /// were in flight) and splittable DoFn residuals (new work). Durable
    /// state of the cycle that takes them (the open one's flush, or the
    /// next), handed over again once it committed.
    pub(super) fn take_deferred(&mut self, unprocessed: Vec<(String, Vec<Vec<u8>>)>, residuals: Vec<StageResidual>) -> Result<(), String> {
        for (source, elements) in unprocessed {
            let coder = self.window_coders.get(&source).ok_or_else(|| format!("no window coder for {source}"))?.clone();
            self.flow.processed(elements.len() as u64);
            self.deferred_total += elements.len() as u64;
            for element in elements {
                let hold = windowed::split(&element, &coder)?.timestamp;
                self.deferred.defer(Deferred { source: source.clone(), element, hold, not_before: 0 });
            }
        }
        let now = now_millis();
        for r in residuals {
            let coder = self.window_coders.get(&r.source).ok_or_else(|| format!("no window coder for {}", r.source))?;
            // Without an estimate, outputs are held at the element's time.
            let hold = match r.output_watermark {
                Some(w) => w,
                None => windowed::split(&r.element, coder)?.timestamp,
            };
            self.residuals_total += 1;
            // A draining job waits for nothing: the work is truncated.
            let delay = if self.lifecycle.is_draining() { 0 } else { r.delay_ms.min(i64::MAX as u64) as i64 };
            let not_before = now.saturating_add(delay);
            self.deferred.defer(Deferred { source: r.source, element: r.element, hold, not_before });
        }
        Ok(())
    }

    /// Hands the stage deferred elements, as many as it has room for. Only
    /// between cycles: a release inside one would commit their removal
    /// with a flush that does not cover them.
    fn release_deferred(&mut self) {
        let limit = (self.flow.room() as usize).max(1);
        let released = self.deferred.release(now_millis(), limit);
        let mut out = ToStage::default();
        for h in released {
            self.push(&mut out, &h.source, vec![h.element]);
        }
        self.send(out);
    }

    /// A record of a side topic: contents, or its watermark.
    pub(super) fn side_record(&mut self, r: SideRecord, ctx: &mut Context<Self>) {
        let record = match envelope::decode(&r.payload) {
            Ok(rec) => rec,
            Err(e) => return self.fail(ctx, format!("{e} (side input topic {})", r.topic)),
        };
        match record {
            Record::Data(values) => {
                if let Some(data) = &self.cfg.side_data {
                    for value in values.iter() {
                        if let Err(e) = data.add(&r.topic, value) {
                            return self.fail(ctx, format!("task {}: {e}", self.cfg.task));
                        }
                    }
                }
            }
            Record::Watermark { wm, source, partition, total, progress } => {
                let report = WatermarkReport { input: WatermarkInput::Side(r.topic), upstream: source, partition, total, wm, progress };
                self.report_watermarks(vec![report]);
            }
        }
    }

    /// Opens the input again once a cycle's timers fired: panes and side
    /// records put aside first, then queued records as room allows.
    pub(super) fn ungate(&mut self, ctx: &mut Context<Self>) {
        if !self.gate.is_closed() {
            return;
        }
        let opened = self.gate.open();
        for (source, panes) in opened.panes {
            self.panes_to_stage(source, panes, ctx);
        }
        for r in opened.side {
            if !self.lifecycle.is_running() {
                return;
            }
            self.side_record(r, ctx);
        }
        self.pump(ctx);
    }
}

/// A held element: its windows and timestamp read with `coder`.
pub(super) fn held_element(coder: &Coder, source: String, element: Vec<u8>) -> Result<Held, String> {
    let h = windowed::split(&element, coder)?;
    let windows = h.windows.iter().map(|w| Window::decode(w, coder)).collect::<Result<Vec<_>, _>>()?;
    let timestamp = h.timestamp;
    Ok(Held { source, element, timestamp, windows })
}
