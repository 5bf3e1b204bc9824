//! Running one job: topics, bootstrap records, the actor topology, and the
//! end of a bounded job (every terminal task at +∞).
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use beam_kafka_config::ProcessingGuarantee;
use beam_kafka_proto::pipeline::MonitoringInfo;
use beam_kafka_runtime::kafka::io::same_cluster;
use beam_kafka_runtime::kafka::source_growth;
use beam_kafka_runtime::kafka::topic_partition::TopicPartition;
use beam_kafka_runtime::plan::topology::{TaskId, TopicKind};
use beam_kafka_runtime::task::membership::{Command, Event, Membership};
use beam_kafka_runtime::task::stall::StallWatch;
use rdkafka::consumer::Consumer;
use rdkafka::producer::Producer;
use tokio::sync::{mpsc, watch};

use crate::control::{self, Control};
use crate::impulse;
use crate::kafka::admin::Admin;
use crate::kafka::config;
use crate::kafka::producer::{self as kafka_producer, KafkaProducer};
use crate::kafka::rebalance::{Assignment, JobConsumer, JobContext, Membership as Kafka};
use crate::messages::{Drain, Shutdown};
use crate::poller::{poll_loop, PollSettings, Routes};
use crate::status_board::now_ms;

pub use crate::job_input::JobInput;
use crate::job_messages::{running_message, slow_join_hint};
use crate::job_topics::create_topics;
use crate::source_watch::{source_partitions, watch_growth};
use crate::task::TaskEvent;
use crate::task_start::{start_assigned, LiveTask};
use crate::user_io::{consumer_properties, resolve_sources, start_kafka_io, KafkaIo};

/// What a running job reports as it goes.
#[derive(Debug)]
pub enum JobEvent {
    Info(String),
    /// The job started draining (a request through its control topic), and why.
    Draining(String),
    /// Metrics of finished bundles.
    Metrics(Vec<MonitoringInfo>),
    /// Metrics of bundles whose task has since committed its progress.
    CommittedMetrics(Vec<MonitoringInfo>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobOutcome {
    Done,
    Failed(String),
    Cancelled,
}

/// Runs a job to its end on the calling thread, inside an actix system of its
/// own. Blocking: call it from a dedicated thread. `decided` gets the
/// outcome as soon as it is final (outputs committed; a drained job's
/// sources' positions kept), before the job's topics are deleted and its
/// Kafka clients closed, which takes a while and need not keep a client
/// waiting for the job's state. Every event sent before it was sent first.
pub fn run_job(
    input: JobInput,
    events: mpsc::UnboundedSender<JobEvent>,
    cancel: watch::Receiver<bool>,
    decided: tokio::sync::oneshot::Sender<JobOutcome>,
) -> JobOutcome {
    let system = actix::System::new();
    let mut decided = Some(decided);
    let (_watch, mut panics) = crate::supervision::watch_this_thread();
    // A panic in the job's own code (not an actor's: the hook reports those)
    // fails the job with what it said, where it said it.
    let mut input = input;
    let first_run = input.plan_record.as_ref().is_some_and(|r| r.previous.is_none());
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        system.block_on(async {
            let mut next = Some(events);
            let mut first = first_run;
            // Each pass runs one plan; a source that gained partitions ends
            // it, and the next pass plans with their new counts.
            loop {
                let events = next.take().expect("the job's events go on to each plan");
                match drive(&mut input, events, cancel.clone(), &mut decided, &mut panics, first).await {
                    Driven::Over(outcome) => break outcome,
                    Driven::Again(events) => {
                        next = Some(events);
                        first = false;
                    }
                }
            }
        })
    }));
    let outcome = ran.unwrap_or_else(|payload| {
        let what = panics
            .try_recv()
            .ok()
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| payload.downcast_ref::<&str>().map_or_else(|| "a panic".to_string(), |s| s.to_string()));
        JobOutcome::Failed(format!("internal error of the runner (please report it): {what}"))
    });
    if let Some(tx) = decided {
        let _ = tx.send(outcome.clone());
    }
    System::current().stop();
    let _ = system.run();
    outcome
}

/// Runs the job under its current plan: to its outcome, or until a source
/// gained partitions and the job must plan again (`first_run`: the
/// application's first run, `runtime::kafka::source_growth`).
async fn drive(
    input: &mut JobInput,
    events: mpsc::UnboundedSender<JobEvent>,
    mut cancel: watch::Receiver<bool>,
    decided: &mut Option<tokio::sync::oneshot::Sender<JobOutcome>>,
    panics: &mut mpsc::UnboundedReceiver<String>,
    first_run: bool,
) -> Driven {
    if *cancel.borrow_and_update() {
        return Driven::Over(JobOutcome::Cancelled);
    }
    let began = std::time::Instant::now();
    let began_at = std::time::SystemTime::now();
    let mut start_traced = false;
    // The admin first: an unreachable cluster or refused credentials are
    // reported as such before any transform's client tries.
    let admin = match consumer_properties(input).and_then(|props| Admin::connect_with(&input.options, &props)) {
        Ok(a) => a,
        Err(e) => return Driven::Over(JobOutcome::Failed(e)),
    };
    // Whether a drain was asked before this run: known before a task starts.
    let drain_check = actix_rt::spawn(control::drain_requested(input.options.clone()));
    // An idempotent producer asks for its producer id on a 500 ms retry
    // timer when no connection is up yet: created first, its id is ready
    // by the time the plan record is written.
    let mut producer: Arc<KafkaProducer> = match kafka_producer::create(&config::producer(&input.options)) {
        Ok(p) => Arc::new(p),
        Err(e) => return Driven::Over(JobOutcome::Failed(format!("cannot create the Kafka producer: {e}"))),
    };
    // The brokers' request limit bounds the records of the runner's topics
    // (a GroupByKey key, a state entry): learned before they are created.
    let (request_max, resolved) = tokio::join!(admin.socket_request_max_bytes(), resolve_sources(&admin, input, first_run));
    let start_offsets = match resolved {
        Ok(s) => s,
        Err(e) => return Driven::Over(JobOutcome::Failed(e)),
    };
    if let Some(request_max) = request_max {
        input.options.record_max_bytes = Some(config::record_max_for_requests(request_max));
    }
    let io = match start_kafka_io(input) {
        Ok(io) => KafkaIo { start_offsets, ..io },
        Err(e) => return Driven::Over(JobOutcome::Failed(e)),
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
    tracing::debug!("start-up: sources resolved after {:?}", began.elapsed());
    // The group's consumer is created now, though it subscribes only once
    // the topics exist and the harnesses are up: its connection and
    // coordinator lookup run meanwhile, behind topic creation.
    let mut consumer_config = config::job_consumer(opts);
    for (k, v) in &io.consumer_properties {
        consumer_config.set(k, v);
    }
    let (membership_tx, mut membership_rx) = mpsc::unbounded_channel();
    let assignment = Arc::new(Assignment::default());
    let consumer: Arc<JobConsumer> =
        match consumer_config.create_with_context(JobContext::new(membership_tx, assignment.clone(), input.board.clone(), opts)) {
            Ok(c) => Arc::new(c),
            Err(e) => return Driven::Over(JobOutcome::Failed(format!("cannot create the Kafka consumer: {e}"))),
        };
    // One transaction per sub-topology carries the writes and offsets of
    // all its tasks in this copy (exactly_once).
    let copy_txns = (opts.processing_guarantee == ProcessingGuarantee::ExactlyOnce)
        .then(|| crate::copy_transaction::start_all(opts, &consumer, input.plan.sub_topologies.iter().map(|s| s.id)));
    // The impulse's transaction is set up (~0.1 s) while the topics are
    // created; its records are written while the group join runs, and the
    // tasks start without waiting for them.
    let begun = match tokio::join!(create_topics(&admin, input), impulse::begin(&admin, input)) {
        (Ok(()), Ok(begun)) => begun,
        (Err(e), _) | (_, Err(e)) => return Driven::Over(JobOutcome::Failed(e)),
    };
    let mut impulses = actix_rt::spawn(impulse::write(begun));
    let mut impulses_written = false;
    tracing::debug!("start-up: topics ready after {:?}", began.elapsed());
    // A copy joins the group only with harnesses to run what it is given.
    if let Some(ready) = input.harnesses_ready.take() {
        tokio::select! {
            said = ready => match said {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Driven::Over(JobOutcome::Failed(e)),
                Err(_) => return Driven::Over(JobOutcome::Failed("the job's SDK harnesses were never started".into())),
            },
            _ = cancel.changed() => return Driven::Over(JobOutcome::Cancelled),
        }
        tracing::debug!("start-up: harnesses connected after {:?}", began.elapsed());
    }
    let opts = &input.options;
    crate::standby::warmed(&opts.application_id, || *cancel.borrow()).await;
    if *cancel.borrow() {
        return Driven::Over(JobOutcome::Cancelled);
    }
    // Side topics are read whole by each task, not through the group.
    let topic_names: Vec<&str> = input.plan.topics.iter().filter(|t| t.kind != TopicKind::Side).map(|t| t.name.as_str()).collect();
    if let Err(e) = consumer.subscribe(&topic_names) {
        return Driven::Over(JobOutcome::Failed(format!("cannot subscribe to {}: {e}", topic_names.join(", "))));
    }
    let mut subscribed = Some(std::time::Instant::now());
    // The plan record is written while the group join runs; no task starts
    // before it is on record (a restart after a crash before that is
    // refused: work a task committed meanwhile would be done twice).
    if !input.retired_sub_topologies.is_empty() {
        let (fencing_opts, retired) = (opts.clone(), std::mem::take(&mut input.retired_sub_topologies));
        actix_rt::spawn(async move {
            let _ = tokio::task::spawn_blocking(move || crate::identity::fence_retired(&fencing_opts, &retired)).await;
        });
    }
    let (plan_producer, plan_app, plan) = (producer.clone(), opts.application_id.clone(), input.plan_record.clone());
    let mut plan_write = actix_rt::spawn(async move {
        match plan {
            Some(record) => crate::identity::record_plan(&plan_producer, &plan_app, &record).await,
            None => Ok(()),
        }
    });
    let (task_tx, mut task_rx) = mpsc::unbounded_channel();
    if let Err(e) = crate::test_stream::start(&admin, input.test_stream.clone(), &input.options, {
        let failed = task_tx.clone();
        move |e| {
            let _ = failed.send(TaskEvent::Failed(e));
        }
    })
    .await
    {
        return Driven::Over(JobOutcome::Failed(e));
    }
    let routes = Arc::new(Routes::default());
    let settings =
        PollSettings { max_records: opts.read_max_elements_per_poll as usize, max_wait: Duration::from_millis(opts.read_max_poll_time_ms) };
    let (poll_consumer, poll_routes, poll_events, poll_assignment) =
        (consumer.clone(), routes.clone(), task_tx.clone(), assignment.clone());
    let poller = actix_rt::spawn(async move {
        let reason = poll_loop(poll_consumer, poll_routes, settings, poll_assignment).await;
        let _ = poll_events.send(TaskEvent::Failed(reason));
    });
    // A drain asked on the control topic (before the start, or while it runs).
    let watch_stop = Arc::new(AtomicBool::new(false));
    let mut control_rx = control::watch(opts, watch_stop.clone());
    // Tasks come and go with the partitions the group gives this process;
    // `membership` decides, this loop carries out.
    let mut membership = Membership::new(crate::task_start::roster(input), input.plan.terminal_tasks());
    let mut pending: VecDeque<Command<LiveTask>> = VecDeque::new();
    if drain_check.await.unwrap_or(false) {
        pending.extend(membership.on(Event::Drain, 0, 0.0));
    }
    let mut stalls = StallWatch::new(opts.stall_warning_ms);
    let clock = Clock(tokio::time::Instant::now());
    let mut reconcile = tokio::time::interval(RECONCILE_EVERY);
    reconcile.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::select! {
        written = &mut plan_write => if let Err(e) = joined(written, "recording the plan") {
            return Driven::Over(JobOutcome::Failed(e));
        },
        _ = cancel.changed() => return Driven::Over(JobOutcome::Cancelled),
    }
    tracing::debug!("start-up: plan recorded after {:?}", began.elapsed());
    // A source that gains partitions makes the job plan again.
    let (growth_tx, mut growth_rx) = mpsc::unbounded_channel();
    let growth = actix_rt::spawn(watch_growth(consumer.clone(), source_partitions(input), growth_tx));
    // The partitions an incremental revocation asks back, given up once
    // their tasks handed over.
    let mut revocation = None;
    let ended = 'job: loop {
        while let Some(command) = pending.pop_front() {
            match command {
                Command::Start(tasks) => {
                    let started = tokio::select! {
                        s = start_assigned(input, &io, tasks.clone(), &consumer, &producer, copy_txns.as_ref(), &task_tx, &assignment, &watch_stop) => s,
                        _ = cancel.changed() => break 'job Ended::Outcome(JobOutcome::Cancelled),
                    };
                    let event = match started {
                        Ok(started) => Event::Started(started.into_iter().map(|t| (t.task, t.incarnation, t)).collect()),
                        Err(error) => Event::StartFailed { tasks, error },
                    };
                    pending.extend(membership.on(event, clock.now_ms(), jitter()));
                }
                Command::Run { task, drain } => {
                    let Some(t) = membership.roster().running().get(&task).map(|r| &r.handle) else { continue };
                    for p in &t.partitions {
                        routes.set(p.clone(), t.addr.clone().recipient(), t.mailbox.clone());
                    }
                    if drain {
                        t.addr.do_send(Drain);
                    }
                }
                Command::Stop(tasks) => {
                    for t in tasks {
                        unroute(&routes, &t.partitions);
                        t.addr.do_send(Shutdown);
                    }
                }
                Command::Refuse(t) => t.addr.do_send(Shutdown),
                Command::Pause(partitions) => {
                    unroute(&routes, &partitions);
                    pause(&consumer, &partitions);
                }
                Command::HandOver(tasks) => {
                    tasks.iter().for_each(|t| unroute(&routes, &t.partitions));
                    if let Some(r) = revocation.take() {
                        crate::job_revocation::hand_over(r, tasks, consumer.clone(), assignment.clone(), opts);
                    }
                }
                Command::Owned { tasks, revoked } => {
                    input.board.set_owned(tasks);
                    if revoked {
                        input.board.keep_only(|t| membership.roster().running().contains_key(t));
                    }
                }
                Command::RunningChanged => {
                    // The first time tasks run here (before that, none did).
                    if !start_traced && !membership.roster().running().is_empty() {
                        tracing::debug!("start-up: tasks started after {:?}", began.elapsed());
                        start_traced = true;
                        let mut a = input.board.attributes.clone();
                        a.push(opentelemetry::KeyValue::new("beam_kafka.tasks", membership.roster().running().len() as i64));
                        crate::telemetry::past_span("beam_kafka.job.start", began_at, std::time::SystemTime::now(), a);
                    }
                    let _ = events.send(JobEvent::Info(running_message(opts, membership.roster())));
                }
                Command::StartDrain(tasks) => start_drain(&io, &membership, &tasks, &events),
                Command::AnnounceFinished(task) => {
                    let opts = opts.clone();
                    actix_rt::spawn(async move {
                        if let Err(e) = control::announce_finished(&opts, task).await {
                            tracing::warn!("other copies will not hear that task {task} finished: {e}");
                        }
                    });
                }
                Command::Warn(text) => {
                    tracing::warn!("{text}");
                    let _ = events.send(JobEvent::Info(text));
                }
                Command::Say(text) => {
                    tracing::info!("{text}");
                    let _ = events.send(JobEvent::Info(text));
                }
                Command::End(None) => {
                    tracing::debug!("every terminal task finished after {:?}", began.elapsed());
                    break 'job Ended::Outcome(JobOutcome::Done);
                }
                Command::End(Some(error)) => break 'job Ended::Outcome(JobOutcome::Failed(error)),
            }
        }
        let next_restart = membership.next_restart().map(|ms| clock.at(ms));
        let event = tokio::select! {
            // A bug of ours: the job fails with what it said, never hangs.
            Some(panic) = panics.recv() => Event::Failed(format!("internal error of the runner (please report it): {panic}")),
            m = membership_rx.recv() => match m {
                Some(Kafka::Revoked(parts)) => Event::Revoked(parts),
                Some(Kafka::Revoking(r)) => {
                    let parts = r.partitions.clone();
                    revocation = Some(r);
                    Event::Revoking(parts)
                }
                Some(Kafka::RevokedAll) => Event::RevokedAll,
                Some(Kafka::Assigned(partitions)) => {
                    tracing::debug!("start-up: {} partition(s) assigned after {:?}", partitions.len(), began.elapsed());
                    if let Some(text) = subscribed.take().and_then(|at| slow_join_hint(at.elapsed())) {
                        let _ = events.send(JobEvent::Info(text));
                    }
                    Event::Assigned { partitions, held: real_assignment(&consumer).unwrap_or_default() }
                }
                None => Event::Failed("the consumer stopped reporting its group membership".into()),
            },
            ev = task_rx.recv() => match ev {
                Some(TaskEvent::Finished(task)) => Event::Finished(task),
                Some(TaskEvent::Failed(error)) => Event::Failed(error),
                Some(TaskEvent::Stopped { task, incarnation, reason }) => Event::Stopped { task, incarnation, reason },
                Some(TaskEvent::Committed { task, incarnation }) => Event::Committed { task, incarnation },
                Some(TaskEvent::Metrics(m)) => { let _ = events.send(JobEvent::Metrics(m)); continue }
                Some(TaskEvent::CommittedMetrics(m)) => { let _ = events.send(JobEvent::CommittedMetrics(m)); continue }
                Some(TaskEvent::Info(text)) => { let _ = events.send(JobEvent::Info(text)); continue }
                None => Event::Failed("every task stopped before the job finished".into()),
            },
            _ = tokio::time::sleep_until(next_restart.unwrap_or_else(|| clock.at(0))), if next_restart.is_some() => {
                // An idempotent producer the broker reset (a fatal error)
                // never writes again: the restarted tasks get a new one.
                if let Some((code, reason)) = producer.client().fatal_error() {
                    tracing::warn!("replacing the shared producer after its fatal error {code:?}: {reason}");
                    match kafka_producer::create(&config::producer(opts)) {
                        Ok(p) => producer = Arc::new(p),
                        Err(e) => break 'job Ended::Outcome(JobOutcome::Failed(format!("cannot create the Kafka producer: {e}"))),
                    }
                }
                // Pending membership events decide first (the reconcile
                // tick starts what is still startable after them).
                if !membership_rx.is_empty() {
                    continue;
                }
                Event::RestartDue { held: real_assignment(&consumer).unwrap_or_default() }
            }
            _ = reconcile.tick() => {
                for said in stalls.observe(now_ms(), input.board.tasks().iter().map(|(t, e)| (*t, &e.status, input.board.task_lag(&e.status)))) {
                    tracing::warn!("{said}");
                    input.board.event(crate::status_board::Level::Warning, said.clone());
                    let _ = events.send(JobEvent::Info(said));
                }
                if !membership_rx.is_empty() {
                    continue; // pending events decide first
                }
                let Some(held) = real_assignment(&consumer) else { continue };
                Event::Reconcile { held }
            }
            Some(said) = control_rx.recv() => match said {
                Control::Drain => Event::Drain,
                // A terminal task that finished in another copy.
                Control::Finished(task) => Event::FinishedElsewhere(task),
            },
            written = &mut impulses, if !impulses_written => {
                impulses_written = true;
                match written {
                    Ok(Ok(())) => { tracing::debug!("start-up: impulses written after {:?}", began.elapsed()); continue }
                    Ok(Err(e)) => Event::Failed(e),
                    Err(e) => Event::Failed(format!("writing the impulse failed: {e}")),
                }
            }
            Some(grown) = growth_rx.recv() => break 'job Ended::Replan(source_growth::describe(&grown)),
            _ = cancel.changed() => break 'job Ended::Outcome(JobOutcome::Cancelled),
        };
        pending.extend(membership.on(event, clock.now_ms(), jitter()));
    };
    growth.abort();
    if !impulses_written {
        impulses.abort();
    }
    watch_stop.store(true, Ordering::Release);
    poller.abort();
    let running = membership.stop_all();
    if matches!(ended, Ended::Outcome(JobOutcome::Cancelled) | Ended::Replan(_)) {
        crate::job_revocation::commit_before_stopping(&running).await;
    }
    for t in running {
        t.addr.do_send(Shutdown);
    }
    // Nobody hands tasks over now: a revocation gives its partitions up at
    // once (`JobContext::rebalance`), so leaving the group does not wait.
    drop(membership_rx);
    consumer.unsubscribe();
    drop(consumer);
    let outcome = match ended {
        Ended::Outcome(outcome) => outcome,
        Ended::Replan(why) => {
            tracing::info!("{why}");
            let _ = events.send(JobEvent::Info(why));
            return Driven::Again(events);
        }
    };
    // A finished job's outcome is final before its topics are deleted: no
    // client needs to wait for that (a new run of the application in this
    // process waits for it instead: see the job server's execution). A
    // drained job's outcome waits, because the deletion also keeps where its
    // sources stopped for the next run, which may come from anywhere.
    let draining = membership.draining();
    if !draining {
        if let Some(tx) = decided.take() {
            let _ = tx.send(outcome.clone());
        }
    }
    // A drained job always cleans up: its kept state would say event time
    // ended, and a restart must start from the sources' positions instead.
    if outcome == JobOutcome::Done && (!opts.keep_runner_topics || draining) {
        if opts.keep_runner_topics {
            let _ = events.send(JobEvent::Info(
                "keep_runner_topics does not apply to a drained job: its topics and state are deleted, its sources' positions kept".into(),
            ));
        }
        let info = |m: String| {
            let _ = events.send(JobEvent::Info(m));
        };
        crate::cleanup::cleanup(&admin, input, &info, draining).await;
    } else if outcome == JobOutcome::Done {
        // A later run would find every input consumed: it is refused instead.
        if let Err(e) = crate::identity::record_finished(opts).await {
            let _ = events.send(JobEvent::Info(format!("could not record that the application finished: {e}")));
        }
    }
    tracing::debug!("job ended after {:?}", began.elapsed());
    // Everything the job said is sent: the caller's forwarding may end.
    drop(events);
    if let Some(tx) = decided.take() {
        let _ = tx.send(outcome.clone());
    }
    Driven::Over(outcome)
}

/// How the job's loop under one plan ended.
enum Ended {
    Outcome(JobOutcome),
    /// A source gained partitions (what to tell the user).
    Replan(String),
}

/// What [`drive`] hands back: the job's outcome, or a job to drive again
/// under a new plan, with the sender its events go on through.
enum Driven {
    Over(JobOutcome),
    Again(mpsc::UnboundedSender<JobEvent>),
}

/// A spawned start-up step's result, its panic an error about `what`.
fn joined(result: Result<Result<(), String>, tokio::task::JoinError>, what: &str) -> Result<(), String> {
    result.unwrap_or_else(|e| Err(format!("{what} failed: {e}")))
}

/// Drains the job: its sources' reads end where they are and the running
/// `tasks` are told (tasks started later are told as they start).
fn start_drain(io: &KafkaIo, membership: &Membership<LiveTask>, tasks: &[TaskId], events: &mpsc::UnboundedSender<JobEvent>) {
    for s in io.sources.values() {
        s.drain();
    }
    for t in tasks.iter().filter_map(|t| membership.roster().running().get(t)) {
        t.handle.addr.do_send(Drain);
    }
    let _ = events.send(JobEvent::Draining(
        "draining: sources stop where they are, splittable DoFns truncate their work, and event time moves to the end \
         so every window and timer fires; the job then ends DONE"
            .into(),
    ));
}

/// How often the job compares its view of the assignment with librdkafka's.
const RECONCILE_EVERY: Duration = Duration::from_secs(1);

/// The partitions librdkafka has assigned to this process now.
fn real_assignment(consumer: &JobConsumer) -> Option<BTreeSet<TopicPartition>> {
    let tpl = consumer.assignment().ok()?;
    Some(tpl.elements().iter().map(|e| TopicPartition::new(e.topic(), e.partition())).collect())
}

/// Stops routing these partitions' records.
fn unroute(routes: &Routes, partitions: &[TopicPartition]) {
    for p in partitions {
        routes.remove(p);
    }
}

/// Pauses `partitions` in the consumer (a task stopped in place).
fn pause(consumer: &JobConsumer, partitions: &[TopicPartition]) {
    let mut tpl = rdkafka::TopicPartitionList::new();
    for tp in partitions {
        tpl.add_partition(&tp.topic, tp.partition);
    }
    if let Err(e) = consumer.pause(&tpl) {
        tracing::debug!("cannot pause {partitions:?}: {e}");
    }
}

/// A number in [0, 1) from the clock: copies restarting together spread out.
fn jitter() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.5, |d| d.subsec_nanos() as f64 / 1e9)
}

/// The roster's clock: ms since the job began.
struct Clock(tokio::time::Instant);

impl Clock {
    fn now_ms(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }

    fn at(&self, ms: u64) -> tokio::time::Instant {
        self.0 + Duration::from_millis(ms)
    }
}
