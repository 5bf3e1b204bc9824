//! The stage actor: runs a fused stage's bundles on an SDK harness.
//!
//! Bundles close on `max_bundle_size`, on `max_bundle_time_ms` (an actor timer,
//! so closing never races with processing) and on a flush from the supervisor.
//! One bundle is processed at a time and its outputs are queued on the
//! producer before the next starts, so outputs keep their order (under
//! exactly_once, large outputs are queued while the bundle runs: `early`); Kafka's
//! acknowledgements are awaited beside the next bundles. An unheld flush
//! (at_least_once) waits for them; a held one (exactly_once) does not: the
//! commit waits for them instead (`Settle`), after the flush's changes are
//! taken, so the next bundle runs meanwhile.
//! A flush that waited `max_bundle_time_ms` on a running bundle splits it
//! (`split`).
use beam_kafka_runtime::kafka::failure::Failure;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use beam_kafka_fnapi::{BundleError, BundleInput, SdkWorker, StateHandler, TimerFamily};
use beam_kafka_runtime::task::acks::Acknowledgements;
use beam_kafka_runtime::task::bundle::{OpenBundle, SealedBundle};
use tokio::sync::{oneshot, watch};

use crate::harnesses::HarnessLease;
use crate::kafka::producer::ProducerSlot;

use crate::messages::{Committed, Drain, Elements, FireTimers, Flush, Release, Resume, Settle, Shutdown, StageEvent};
use crate::output::{queue_kafka_sinks, queue_outputs, KafkaSink, OutputSink, Queued};

pub struct StageSpec {
    /// For messages: the stage's transforms, by user name.
    pub display_name: String,
    pub descriptor_id: String,
    /// The descriptor used once the job drains (restrictions truncated).
    pub drain_descriptor_id: Option<String>,
    /// Every data source of the descriptor: each gets its end-of-stream in
    /// every bundle, with or without elements, or the harness waits forever.
    pub sources: Vec<String>,
    pub sinks: Vec<String>,
    /// Where each sink's elements are written.
    pub outputs: Vec<OutputSink>,
    /// Sinks written to user topics by WriteToKafka.
    pub kafka_sinks: Vec<KafkaSink>,
    pub producer: Arc<ProducerSlot>,
    pub max_bundle_size: u64,
    pub max_bundle_time: Duration,
    /// Answers the State API requests of its bundles (side inputs).
    pub state: Option<Arc<dyn StateHandler>>,
    /// The timer families of its stateful ParDos: each gets its
    /// end-of-stream in every bundle, and is awaited from the harness.
    pub timer_families: Vec<TimerFamily>,
    /// Its splittable DoFns' process steps → the data source their residuals
    /// go back to.
    pub residual_sources: BTreeMap<String, String>,
    /// The task's counters (records written).
    pub meters: Arc<crate::status_board::TaskMeters>,
    /// Write outputs while a bundle runs (`early`): under exactly_once,
    /// where a failed bundle's writes are aborted with its transaction.
    pub write_during_bundle: bool,
}

mod early;
mod finalize;
mod report;
mod split;

/// A sealed bundle waiting to run.
struct Sealed {
    seq: u64,
    inputs: Vec<BundleInput>,
    /// Timers to fire.
    timers: HashMap<TimerFamily, Vec<u8>>,
    /// How many data elements it holds.
    elements: u64,
}

/// The bundle the harness is running.
struct Running {
    seq: u64,
    started: Instant,
    inputs: Arc<Vec<BundleInput>>,
    fires_timers: bool,
    elements: u64,
    /// Sent to split the bundle (taken once).
    split: Option<oneshot::Sender<()>>,
    split_asked: Arc<AtomicBool>,
    /// The harness finished it: only its writes are left (they may wait
    /// for a commit), so there is nothing to split.
    processed: Arc<AtomicBool>,
}

/// What a finished bundle brought back besides its outputs.
struct Done {
    monitoring_infos: Vec<beam_kafka_proto::pipeline::MonitoringInfo>,
    timers: HashMap<TimerFamily, Vec<u8>>,
    splits: beam_kafka_fnapi::SplitResult,
    residuals: Vec<beam_kafka_fnapi::Residual>,
}

pub struct StageActor {
    spec: StageSpec,
    worker: Arc<SdkWorker>,
    /// Holds this stage's place on its harness while it lives.
    _harness: HarnessLease,
    supervisor: Recipient<StageEvent>,
    /// What the next bundle collects (never sealed empty).
    open: OpenBundle,
    /// The open bundle's `max_bundle_time_ms` timer, cancelled when it is
    /// sealed sooner: actix polls every pending timer of an actor on each
    /// of its messages, and a timer left behind by each of ten bundles a
    /// second (for 5 s each) took the runner's time in `Sleep::poll` from
    /// 2.8% to 4.7% at 1,000 records/s.
    open_timer: Option<SpawnHandle>,
    queue: VecDeque<Sealed>,
    next_seq: u64,
    /// Which bundles are processed, and which Kafka acknowledged.
    acks: Acknowledgements,
    /// Whether flushes wait for the acknowledgements (unheld flushes).
    flush_awaits_acks: bool,
    /// `Settle` requests: answered once bundles through this one are acknowledged.
    settling: Vec<(u64, oneshot::Sender<Option<Failure>>)>,
    running: Option<Running>,
    waiters: Vec<(u64, u64)>,
    /// Bundles after this one wait for a Release (a cycle is flushing).
    hold_after: Option<u64>,
    /// Bundles up to this one may write their outputs; later ones ran
    /// during a commit and write once it finished (Resume).
    writes_through: watch::Sender<u64>,
    failed: bool,
    /// Finished bundles that asked for finalization: (sequence, instruction id).
    to_finalize: Vec<(u64, String)>,
    /// The last bundle each answered flush covered, until its cycle committed.
    flushed: BTreeMap<u64, u64>,
    /// Finalizations running: bundles wait for them, and so does a stop.
    finalizing: usize,
    stopping: bool,
    /// The last split deferred a whole bundle of restrictions (split before
    /// its first began): the next one keeps the first element.
    whole_bundle_deferred: bool,
}

impl StageActor {
    pub fn new(spec: StageSpec, harness: HarnessLease, supervisor: Recipient<StageEvent>) -> Self {
        StageActor {
            spec,
            worker: harness.worker().clone(),
            _harness: harness,
            supervisor,
            open: OpenBundle::default(),
            open_timer: None,
            queue: VecDeque::new(),
            next_seq: 1,
            acks: Acknowledgements::default(),
            flush_awaits_acks: true,
            settling: Vec::new(),
            running: None,
            waiters: Vec::new(),
            hold_after: None,
            writes_through: watch::channel(u64::MAX).0,
            failed: false,
            to_finalize: Vec::new(),
            flushed: BTreeMap::new(),
            finalizing: 0,
            stopping: false,
            whole_bundle_deferred: false,
        }
    }

    fn seal(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.open_timer.take() {
            ctx.cancel_future(timer);
        }
        if let Some(SealedBundle { inputs, timers, elements }) = self.open.seal(&self.spec.sources) {
            let inputs = inputs.into_iter().map(|(transform_id, data, ends)| BundleInput { transform_id, data, ends }).collect();
            self.queue.push_back(Sealed { seq: self.next_seq, inputs, timers, elements });
            self.next_seq += 1;
        }
        self.start_next(ctx);
    }

    /// Closes the bundle now opening after `max_bundle_time_ms`, unless it
    /// was sealed before.
    fn bound_open_bundle(&mut self, ctx: &mut Context<Self>) {
        let generation = self.open.generation();
        let timer = ctx.run_later(self.spec.max_bundle_time, move |act, ctx| {
            act.open_timer = None;
            if act.open.generation() == generation {
                act.seal(ctx);
            }
        });
        if let Some(earlier) = self.open_timer.replace(timer) {
            ctx.cancel_future(earlier);
        }
    }

    fn start_next(&mut self, ctx: &mut Context<Self>) {
        if self.running.is_some() || self.failed || self.finalizing > 0 || self.acks.full() {
            return;
        }
        if let (Some(limit), Some(next)) = (self.hold_after, self.queue.front()) {
            if next.seq > limit {
                return;
            }
        }
        let Some(Sealed { seq, inputs, timers, elements }) = self.queue.pop_front() else { return };
        let families = self.spec.timer_families.clone();
        let worker = self.worker.clone();
        let bundle_id = worker.next_instruction_id("bundle");
        let descriptor = self.spec.descriptor_id.clone();
        let sinks = self.spec.sinks.clone();
        let outputs = self.spec.outputs.clone();
        let kafka_sinks = self.spec.kafka_sinks.clone();
        let slot = self.spec.producer.clone();
        let pack_elements = self.spec.max_bundle_size as usize;
        let write_during_bundle = self.spec.write_during_bundle;
        let meters = self.spec.meters.clone();
        let state = self.spec.state.clone();
        // A slow start_bundle could see every split cut before the first
        // restriction began; after one such split, the next keeps it.
        let splittable: Vec<String> =
            if self.whole_bundle_deferred { Vec::new() } else { self.spec.residual_sources.values().cloned().collect() };
        let started = Instant::now();
        let inputs = Arc::new(inputs);
        let (split_tx, split_rx) = oneshot::channel();
        let mut may_write = self.writes_through.subscribe();
        let split_asked = Arc::new(AtomicBool::new(false));
        let processed = Arc::new(AtomicBool::new(false));
        self.running = Some(Running {
            seq,
            started,
            inputs: inputs.clone(),
            fires_timers: timers.values().any(|t| !t.is_empty()),
            elements,
            split: Some(split_tx),
            split_asked: split_asked.clone(),
            processed: processed.clone(),
        });
        let sizes: Vec<(String, usize)> = inputs.iter().map(|i: &BundleInput| (i.transform_id.clone(), i.data.len())).collect();
        tracing::debug!(stage = %self.spec.display_name, "bundle {seq} inputs (bytes): {sizes:?}");
        let instruction = bundle_id.clone();
        let run = async move {
            let sources: Vec<(String, usize)> = inputs.iter().map(|i| (i.transform_id.clone(), i.ends.len())).collect();
            let (early, chunks) = early::channel(&outputs, write_during_bundle);
            let bundle = worker.process_bundle(&bundle_id, &descriptor, &inputs, timers, &families, &sinks, state, early);
            let split = async {
                split_rx.await.ok()?;
                Some(worker.split_bundle(&bundle_id, &sources, &splittable).await)
            };
            let written_early = early::write(chunks, may_write.clone(), seq, &slot, &outputs, pack_elements);
            let ((result, splits), written_early) = tokio::join!(split::run_with_split(bundle, split, &split_asked), written_early);
            processed.store(true, std::sync::atomic::Ordering::SeqCst);
            let result = result.map_err(|e| match e {
                BundleError::User(text) => Failure::fatal(text),
                other => Failure::fatal(other.to_string()),
            })?;
            let splits = splits.map_err(|e| Failure::fatal(e.to_string()))?;
            let mut written_early = written_early?;
            let out: Vec<(String, usize)> = result.outputs.iter().map(|(k, v)| (k.clone(), v.len())).collect();
            tracing::debug!("bundle {seq} outputs (bytes): {out:?}, {} written while it ran", written_early.bytes);
            // A bundle run during a commit writes in the next transaction.
            may_write.wait_for(|&through| seq <= through).await.map_err(|_| Failure::fatal("the stage stopped"))?;
            let producer = slot.current();
            let mut written = result.outputs;
            written_early.prepend_carry(&mut written);
            let mut queued = std::mem::take(&mut written_early.queued);
            queue_kafka_sinks(&mut queued, &kafka_sinks, &mut written).await?;
            queue_outputs(&mut queued, &producer, &outputs, written, pack_elements).await?;
            meters.records_written.fetch_add(queued.records, std::sync::atomic::Ordering::Relaxed);
            let done = Done { monitoring_infos: result.monitoring_infos, timers: result.timers, splits, residuals: result.residuals };
            Ok::<_, Failure>((done, result.requires_finalization, queued))
        };
        ctx.spawn(run.into_actor(self).map(move |result, act, ctx| {
            let Some(running) = act.running.take() else { return };
            match result {
                Ok((Done { monitoring_infos, timers, splits, residuals }, requires_finalization, queued)) => {
                    let took = started.elapsed();
                    let millis = took.as_millis() as u64;
                    act.bundle_finished(&running, took);
                    if !monitoring_infos.is_empty() {
                        act.supervisor.do_send(StageEvent::Metrics(monitoring_infos));
                    }
                    // Before the bundle counts as flushed: its timers join the cycle.
                    if timers.values().any(|t| !t.is_empty()) {
                        act.supervisor.do_send(StageEvent::TimersSet(timers));
                    }
                    // What it did not process, and (if a flush waited too
                    // long) the bundles queued before that flush, go back
                    // to the task before the bundle counts as processed.
                    let (processed, through) = match act.defer(&running, splits, residuals) {
                        Ok(done) => done,
                        Err(e) => {
                            act.failed = true;
                            let error = Failure::fatal(format!("Error in {}: {e}", act.spec.display_name));
                            return act.supervisor.do_send(StageEvent::Failed(error));
                        }
                    };
                    if requires_finalization {
                        act.to_finalize.push((running.seq, instruction));
                    }
                    act.await_acknowledgements(running.seq, through, queued, ctx);
                    act.supervisor.do_send(StageEvent::Processed { elements: processed, millis });
                    act.answer_waiters();
                    act.start_next(ctx);
                }
                Err(e) => {
                    act.failed = true;
                    act.supervisor.do_send(StageEvent::Failed(e.within(format_args!("Error in {}", act.spec.display_name))));
                }
            }
        }));
        self.check_split(ctx);
    }

    /// Waits beside the next bundles until Kafka acknowledged what bundle
    /// `seq` queued; a failed write fails the stage (its cycle never commits).
    /// Bundle `seq` (and the bundles up to `through`) processed: waits
    /// beside the next bundles until Kafka acknowledged what it queued; a
    /// refused write fails the stage (its cycle never commits).
    fn await_acknowledgements(&mut self, seq: u64, through: u64, queued: Queued, ctx: &mut Context<Self>) {
        self.acks.processed(seq, through, !queued.is_empty());
        if queued.is_empty() {
            return;
        }
        let name = self.spec.display_name.clone();
        let answered = async move { queued.acknowledged().await.map_err(|e| e.within(format_args!("Error in {name}"))) };
        ctx.spawn(answered.into_actor(self).map(move |result, act, ctx| {
            let refused = result.as_ref().err().cloned();
            let first = act.acks.answered(seq, result);
            match refused {
                None => act.answer_waiters(),
                Some(error) if first && !act.failed => {
                    act.failed = true;
                    act.supervisor.do_send(StageEvent::Failed(error));
                }
                Some(_) => {}
            }
            act.answer_settling();
            act.start_next(ctx);
        }));
    }

    fn answer_settling(&mut self) {
        for (target, tx) in std::mem::take(&mut self.settling) {
            match self.acks.answer_for(target) {
                Ok(answer) => {
                    let _ = tx.send(answer);
                }
                Err(_) => self.settling.push((target, tx)),
            }
        }
    }

    fn answer_waiters(&mut self) {
        let done = self.acks.complete_through(self.flush_awaits_acks);
        let supervisor = self.supervisor.clone();
        let flushed = &mut self.flushed;
        self.waiters.retain(|&(id, target)| {
            if target <= done {
                let covered = flushed.entry(id).or_default();
                *covered = (*covered).max(target);
                supervisor.do_send(StageEvent::Flushed { id });
                false
            } else {
                true
            }
        });
    }
}

impl Actor for StageActor {
    type Context = Context<Self>;
}

impl Handler<Elements> for StageActor {
    type Result = ();

    fn handle(&mut self, msg: Elements, ctx: &mut Context<Self>) {
        if self.failed || msg.elements.is_empty() {
            return;
        }
        for element in msg.elements {
            if self.open.is_empty() {
                self.bound_open_bundle(ctx);
            }
            self.open.add_element(&msg.source_transform, &element);
            if self.open.items() >= self.spec.max_bundle_size {
                self.seal(ctx);
            }
        }
    }
}

impl Handler<FireTimers> for StageActor {
    type Result = ();

    fn handle(&mut self, msg: FireTimers, ctx: &mut Context<Self>) {
        if self.failed || msg.timers.is_empty() {
            return;
        }
        if self.open.is_empty() {
            self.bound_open_bundle(ctx);
        }
        for (family, bytes) in msg.timers {
            self.open.add_timers(family, &bytes);
        }
    }
}

impl Handler<Flush> for StageActor {
    type Result = ();

    fn handle(&mut self, msg: Flush, ctx: &mut Context<Self>) {
        self.flush_awaits_acks = !msg.hold;
        self.seal(ctx);
        let target = self.next_seq - 1;
        if msg.hold {
            // A flush within a held cycle (timers fired after the first one)
            // moves the hold past the bundle it just sealed: start it.
            self.hold_after = Some(target);
            self.start_next(ctx);
        }
        self.waiters.push((msg.id, target));
        self.answer_waiters();
        self.check_split(ctx);
    }
}

impl Handler<Settle> for StageActor {
    type Result = ResponseFuture<Option<Failure>>;

    fn handle(&mut self, _: Settle, _: &mut Context<Self>) -> Self::Result {
        match self.acks.settled() {
            Ok(answer) => Box::pin(async move { answer }),
            Err(target) => {
                let (tx, rx) = oneshot::channel();
                self.settling.push((target, tx));
                Box::pin(async move { rx.await.ok().flatten() })
            }
        }
    }
}

impl Handler<Release> for StageActor {
    type Result = ();

    fn handle(&mut self, _: Release, ctx: &mut Context<Self>) {
        if let Some(flushed) = self.hold_after.take() {
            self.writes_through.send_replace(flushed);
        }
        self.start_next(ctx);
    }
}

impl Handler<Resume> for StageActor {
    type Result = ();

    fn handle(&mut self, _: Resume, ctx: &mut Context<Self>) {
        self.hold_after = None;
        self.writes_through.send_replace(u64::MAX);
        self.start_next(ctx);
    }
}

impl Handler<Drain> for StageActor {
    type Result = ();

    fn handle(&mut self, _: Drain, _: &mut Context<Self>) {
        // Bundles started from now on truncate what they process (and what
        // their residuals bring back) first.
        if let Some(d) = self.spec.drain_descriptor_id.take() {
            self.spec.descriptor_id = d;
        }
    }
}

impl Handler<Committed> for StageActor {
    type Result = ();

    fn handle(&mut self, msg: Committed, ctx: &mut Context<Self>) {
        self.finalize_committed(msg.id, msg.finalized, ctx);
    }
}

impl Handler<Shutdown> for StageActor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        // Callbacks of committed bundles run first (each waits at most a minute).
        self.stopping = true;
        if self.finalizing == 0 {
            ctx.stop();
        }
    }
}
