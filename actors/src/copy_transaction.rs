//! A copy's transaction of one sub-topology (exactly_once): one
//! transactional producer that the sub-topology's tasks in this copy write
//! through, and the rounds that commit their cycles together
//! (`runtime::task::shared_txn` decides; this actor does the Kafka calls).
//! One transaction for several tasks instead of one each cuts the broker's
//! work per commit (transaction markers, coordinator requests, one
//! producer's batches instead of one per task).
//!
//! Fencing stays per task: the producer's transactional id is that of one
//! task the copy owns (`transaction::transactional_id`), and whoever starts
//! a task first initialises that task's id (`Prepare`). So the next owner
//! of any task fences an earlier owner whose producer carried that task's
//! id, and aborts its open transaction at once instead of readers waiting
//! for it to time out.
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use actix::prelude::*;
use beam_kafka_config::RunnerOptions;
use beam_kafka_runtime::plan::topology::TaskId;
use beam_kafka_runtime::task::cycle::{Offsets, COMMIT_ATTEMPTS};
use beam_kafka_runtime::task::shared_txn::{Action, MemberId, Phase, Refusal, SharedTransaction};
use beam_kafka_runtime::task::txn_ids::{self, Current, IdPlan};
use rdkafka::consumer::Consumer;
use rdkafka::producer::Producer;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::oneshot;

use crate::kafka::producer::{KafkaProducer, ProducerSlot};
use crate::kafka::rebalance::{Assignment, JobConsumer};
use crate::kafka::transaction;
use crate::status_board::now_ms;
use beam_kafka_runtime::kafka::failure::{Failure, Recovery};
use beam_kafka_runtime::kafka::topic_partition::TopicPartition;

const RETRY_EVERY: Duration = Duration::from_millis(200);
const ABORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The copy's transaction of each sub-topology (by id).
pub type CopyTransactions = HashMap<u32, Addr<CopyTransaction>>;

/// One transaction per sub-topology: tasks of one stage commit together,
/// while each stage's rounds go at their own pace (a round waits for every
/// member, and a stage that got a large batch from upstream must not hold
/// the upstream stage's tasks idle meanwhile).
pub fn start_all(opts: &RunnerOptions, consumer: &Arc<JobConsumer>, sub_topologies: impl Iterator<Item = u32>) -> CopyTransactions {
    sub_topologies.map(|sub| (sub, CopyTransaction::new(opts.clone(), consumer.clone()).start())).collect()
}

/// What the copy's transaction tells a member task.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub enum TxnNotice {
    /// A round began: close a cycle now.
    Flush,
    /// The transaction cannot commit: stop without committing.
    Abandon(String),
}

/// The producer tasks started now write through, and its generation (a
/// member joins with it; a replaced producer's tasks are refused).
#[derive(Clone)]
pub struct TxnHandle {
    pub addr: Addr<CopyTransaction>,
    pub producer: Arc<ProducerSlot>,
    pub generation: u64,
}

/// Before tasks start here: fence earlier owners of their transactional
/// ids, and have a producer. `owned`: every task assigned to this copy.
#[derive(Message)]
#[rtype(result = "Result<TxnHandle, Failure>")]
pub struct Prepare {
    pub tasks: Vec<TaskId>,
    /// The input partitions of each of `tasks`.
    pub partitions: HashMap<TaskId, Vec<TopicPartition>>,
    pub owned: BTreeSet<TaskId>,
    /// When the copy's partitions changed hands, and the tick the tasks
    /// start under.
    pub assignment: Arc<Assignment>,
    pub seen: u64,
}

/// A started task joins before it writes (answered once no commit or abort
/// is under way).
#[derive(Message)]
#[rtype(result = "Result<(), String>")]
pub struct Join {
    pub member: MemberId,
    pub generation: u64,
    pub notices: Recipient<TxnNotice>,
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct WantRound {
    pub member: MemberId,
    /// Start the round without waiting for the commit interval.
    pub urgent: bool,
}

/// A member's cycle, its later writes held: answered with the round's commit.
#[derive(Message)]
#[rtype(result = "Result<(), Failure>")]
pub struct Ready {
    pub member: MemberId,
    pub offsets: Offsets,
    /// Its last cycle: the task hands over to another copy after the commit.
    pub last: bool,
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct Leave {
    pub member: MemberId,
    /// Its last cycle committed: nothing of it is in the transaction.
    pub finished: bool,
}

pub struct CopyTransaction {
    opts: RunnerOptions,
    /// The job's consumer (for its group metadata), not kept alive here:
    /// the copy leaves the group when the job drops it.
    consumer: Weak<JobConsumer>,
    core: SharedTransaction,
    /// The producer, the task whose id it carries, and its generation.
    producer: Option<(Arc<ProducerSlot>, TaskId)>,
    /// The assignment tick the producer's id was initialised under.
    producer_since: u64,
    generation: u64,
    notices: HashMap<TaskId, Recipient<TxnNotice>>,
    waiting: HashMap<MemberId, oneshot::Sender<Result<(), Failure>>>,
    /// Joins that came during a commit or an abort.
    joins: Vec<(Join, oneshot::Sender<Result<(), String>>)>,
    /// Starts that wait for a doomed transaction's members to leave.
    prepares: Vec<(Prepare, oneshot::Sender<Result<TxnHandle, Failure>>)>,
    /// Members whose cycle in the round under way is their last here.
    leaving: BTreeSet<TaskId>,
    /// When the copy's partitions changed hands (from the first start).
    assignment: Option<Arc<Assignment>>,
}

impl CopyTransaction {
    pub fn new(opts: RunnerOptions, consumer: Arc<JobConsumer>) -> Self {
        CopyTransaction {
            consumer: Arc::downgrade(&consumer),
            core: SharedTransaction::new(opts.commit_interval_ms as i64),
            producer: None,
            producer_since: 0,
            generation: 0,
            notices: HashMap::new(),
            waiting: HashMap::new(),
            joins: Vec::new(),
            prepares: Vec::new(),
            leaving: BTreeSet::new(),
            assignment: None,
            opts,
        }
    }

    fn carry_out(&mut self, actions: Vec<Action>, ctx: &mut Context<Self>) {
        for action in actions {
            match action {
                Action::Flush(members) => {
                    for (task, _) in members {
                        if let Some(n) = self.notices.get(&task) {
                            n.do_send(TxnNotice::Flush);
                        }
                    }
                }
                Action::Abandon(members) => {
                    for member @ (task, _) in members {
                        if let Some(n) = self.notices.get(&task) {
                            n.do_send(TxnNotice::Abandon(
                                "another task of this copy stopped with writes in the copy's shared transaction, which is aborted".into(),
                            ));
                        }
                        if let Some(w) = self.waiting.remove(&member) {
                            let _ = w.send(Err(Failure::aborted("another task of this copy stopped; the shared transaction is aborted")));
                        }
                    }
                }
                Action::Commit { offsets, members } => self.commit(offsets, members, 1, ctx),
                Action::Abort => self.abort(ctx),
                Action::WakeAt(at) => {
                    let wait = Duration::from_millis((at - now_ms()).max(0) as u64);
                    ctx.run_later(wait, |act, ctx| {
                        let actions = act.core.tick(now_ms());
                        act.carry_out(actions, ctx);
                    });
                }
            }
        }
    }

    fn commit(&mut self, offsets: Offsets, members: Vec<MemberId>, attempt: u32, ctx: &mut Context<Self>) {
        let Some(producer) = self.producer.as_ref().map(|(slot, _)| slot.current()) else {
            return self.commit_ended(members, Err(Failure::fatal("the copy's transactional producer is gone")), ctx);
        };
        let mut tpl = TopicPartitionList::new();
        for (tp, next) in &offsets {
            let (topic, partition) = (&tp.topic, tp.partition);
            if let Err(e) = tpl.add_partition_offset(topic, partition, Offset::Offset(*next)) {
                return self.commit_ended(members, Err(Failure::fatal(format!("bad offset for {topic}[{partition}]: {e}"))), ctx);
            }
        }
        let group = self.consumer.upgrade().and_then(|c| c.group_metadata());
        let commit = transaction::commit(producer, tpl, group);
        let began = std::time::Instant::now();
        ctx.spawn(commit.into_actor(self).map(move |result, act, ctx| match result {
            Ok(()) => {
                tracing::debug!("the copy's transaction committed {} task(s)' cycles in {:?}", members.len(), began.elapsed());
                if let Some(to) = act.rehome_to() {
                    return act.rehome(to, members, ctx);
                }
                act.commit_ended(members, Ok(()), ctx);
                tracing::debug!(
                    "the round took {} ms; the next starts {} ms after it began",
                    act.core.last_round_took_ms(),
                    act.core.gap_ms()
                );
            }
            Err(e) if e.recovery == Recovery::Retry && attempt < COMMIT_ATTEMPTS => {
                tracing::debug!("the copy's transaction commit failed, retrying: {e}");
                ctx.run_later(RETRY_EVERY, move |act, ctx| act.commit(offsets, members, attempt + 1, ctx));
            }
            result => act.commit_ended(members, result, ctx),
        }));
    }

    /// The task whose id the producer should carry after this round
    /// (`runtime::task::txn_ids::rehome`).
    fn rehome_to(&self) -> Option<TaskId> {
        let (_, id_task) = self.producer.as_ref()?;
        let staying: BTreeSet<TaskId> = self.core.members().iter().map(|(t, _)| *t).filter(|t| !self.leaving.contains(t)).collect();
        txn_ids::rehome(*id_task, &self.leaving, &staying)
    }

    /// Between the commit and the members' next writes: a new producer
    /// carrying `to`'s id takes the place of the one whose task moves, so
    /// the members write on without being fenced by that task's next owner.
    /// If it cannot be made, they go on with the old one (and restart when
    /// it is fenced).
    fn rehome(&mut self, to: TaskId, members: Vec<MemberId>, ctx: &mut Context<Self>) {
        let opts = self.opts.clone();
        let began = std::time::Instant::now();
        let work = tokio::task::spawn_blocking(move || transaction::start(&opts, to));
        ctx.spawn(work.into_actor(self).map(move |made, act, ctx| {
            match made.map_err(|e| Failure::fatal(e.to_string())).and_then(|r| r) {
                Ok(new) => {
                    if let Some((slot, id_task)) = act.producer.as_mut() {
                        let old = slot.replace(new);
                        tracing::info!(
                            "task {id_task} handed over: the copy's transactional producer now carries task {to}'s id ({:?})",
                            began.elapsed()
                        );
                        *id_task = to;
                        act.producer_since = act.assignment.as_ref().map_or(0, |a| a.now());
                        // Its transaction, just begun, holds nothing.
                        std::thread::spawn(move || {
                            let _ = old.abort_transaction(ABORT_TIMEOUT);
                        });
                    }
                }
                Err(e) => {
                    tracing::warn!("cannot give the copy's producer task {to}'s id ({e}); its tasks restart once the old one is fenced")
                }
            }
            act.commit_ended(members, Ok(()), ctx);
        }));
    }

    fn commit_ended(&mut self, members: Vec<MemberId>, result: Result<(), Failure>, ctx: &mut Context<Self>) {
        self.leaving.clear();
        for m in members {
            if let Some(w) = self.waiting.remove(&m) {
                let _ = w.send(member_outcome(&result));
            }
        }
        let actions = self.core.committed(result.is_ok(), now_ms());
        self.carry_out(actions, ctx);
        self.admit_joins(ctx);
    }

    /// Aborts the doomed transaction and opens the next; a producer that
    /// cannot (fenced, fatal) is dropped, and the next start creates one.
    fn abort(&mut self, ctx: &mut Context<Self>) {
        self.leaving.clear();
        let Some(producer) = self.producer.as_ref().map(|(slot, _)| slot.current()) else {
            self.core.aborted();
            return self.admit_joins(ctx);
        };
        let generation = self.generation;
        let abort = tokio::task::spawn_blocking(move || {
            producer.abort_transaction(ABORT_TIMEOUT).map_err(|e| transaction::describe(&e))?;
            producer.begin_transaction().map_err(|e| transaction::describe(&e))
        });
        ctx.spawn(abort.into_actor(self).map(move |result, act, ctx| {
            let failed = match result {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(e) => Some(format!("the abort panicked: {e}")),
            };
            if let Some(e) = failed {
                tracing::debug!("the copy's transactional producer could not abort ({e}); the next start creates another");
                if act.generation == generation {
                    act.drop_producer();
                }
            }
            act.core.aborted();
            act.admit_joins(ctx);
        }));
    }

    fn drop_producer(&mut self) {
        if let Some((p, _)) = self.producer.take() {
            crate::kafka::close_in_background(p.current());
        }
        self.generation += 1;
    }

    /// Answers the joins and starts that waited for a commit or an abort to end.
    fn admit_joins(&mut self, ctx: &mut Context<Self>) {
        for (join, reply) in std::mem::take(&mut self.joins) {
            self.join(join, reply, ctx);
        }
        for (prepare, reply) in std::mem::take(&mut self.prepares) {
            self.prepare(prepare, reply, ctx);
        }
    }

    /// Fences the earlier owners of the tasks about to start and makes sure
    /// there is a producer. One that failed, that carries the id of a task
    /// this copy no longer owns (another copy will fence it), or of a task
    /// starting again here after a rebalance (`runtime::task::txn_ids`), is
    /// replaced, but only once its members left: they are told to stop.
    fn prepare(&mut self, msg: Prepare, reply: oneshot::Sender<Result<TxnHandle, Failure>>, ctx: &mut Context<Self>) {
        self.assignment.get_or_insert_with(|| msg.assignment.clone());
        let current = self.producer.as_ref().map(|(p, id_task)| Current {
            id_task: *id_task,
            usable: !transaction::producer_fatal(&p.current()),
            moved: msg.partitions.get(id_task).is_some_and(|parts| msg.assignment.any_changed_since(parts, self.producer_since)),
        });
        let IdPlan { replace, new_id, fence: to_fence } = txn_ids::plan(current, &msg.tasks, &msg.owned);
        let since = msg.seen;
        if replace && (!self.core.is_empty() || self.core.phase() != Phase::Open) {
            let actions = self.core.doom();
            self.prepares.push((msg, reply));
            return self.carry_out(actions, ctx);
        }
        let opts = self.opts.clone();
        let work = tokio::task::spawn_blocking(move || -> Result<Option<(Arc<KafkaProducer>, TaskId)>, Failure> {
            std::thread::scope(|scope| {
                let opts = &opts;
                let fences: Vec<_> = to_fence.iter().map(|&t| scope.spawn(move || transaction::fence(opts, t))).collect();
                let created = new_id.map(|t| transaction::start(opts, t).map(|p| (p, t))).transpose();
                for f in fences {
                    f.join().map_err(|_| Failure::fatal("fencing a task's earlier owner panicked"))??;
                }
                created
            })
        });
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            let result = (|| {
                let created = result.map_err(|e| Failure::fatal(format!("preparing the copy's transaction panicked: {e}")))??;
                if let Some(new) = created {
                    if let Some((old, _)) = act.producer.replace((ProducerSlot::new(new.0), new.1)) {
                        crate::kafka::close_in_background(old.current());
                    }
                    act.producer_since = since;
                    act.generation += 1;
                }
                let (producer, _) = act.producer.clone().ok_or_else(|| Failure::fatal("the copy has no transactional producer"))?;
                Ok(TxnHandle { addr: ctx.address(), producer, generation: act.generation })
            })();
            let _ = reply.send(result);
        }));
    }

    fn join(&mut self, join: Join, reply: oneshot::Sender<Result<(), String>>, ctx: &mut Context<Self>) {
        if join.generation != self.generation || self.producer.is_none() {
            let _ = reply.send(Err("the copy's transactional producer was replaced while the task started".into()));
            return;
        }
        let (task, incarnation) = join.member;
        let (admitted, actions) = self.core.join(task, incarnation);
        match admitted {
            Ok(()) => {
                self.notices.insert(task, join.notices.clone());
                let _ = reply.send(Ok(()));
            }
            // It wrote nothing yet: it waits for the commit or abort to end.
            Err(Refusal::Busy | Refusal::Doomed) => self.joins.push((join, reply)),
            Err(Refusal::Unknown) => {
                let _ = reply.send(Err("the copy's transaction does not know the task".into()));
            }
        }
        self.carry_out(actions, ctx);
    }
}

impl Actor for CopyTransaction {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        // Whatever is open never commits: readers need not wait for its timeout.
        if let Some((p, _)) = self.producer.take() {
            let p = p.current();
            std::thread::spawn(move || {
                let _ = p.abort_transaction(ABORT_TIMEOUT);
            });
        }
    }
}

impl Handler<Prepare> for CopyTransaction {
    type Result = ResponseFuture<Result<TxnHandle, Failure>>;

    fn handle(&mut self, msg: Prepare, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.prepare(msg, tx, ctx);
        Box::pin(async move { rx.await.unwrap_or_else(|_| Err(Failure::fatal("the copy's transaction stopped"))) })
    }
}

impl Handler<Join> for CopyTransaction {
    type Result = ResponseFuture<Result<(), String>>;

    fn handle(&mut self, msg: Join, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.join(msg, tx, ctx);
        Box::pin(async move { rx.await.unwrap_or_else(|_| Err("the copy's transaction stopped".into())) })
    }
}

impl Handler<WantRound> for CopyTransaction {
    type Result = ();

    fn handle(&mut self, WantRound { member: (task, incarnation), urgent }: WantRound, ctx: &mut Context<Self>) {
        let actions = self.core.want_round(task, incarnation, urgent, now_ms());
        self.carry_out(actions, ctx);
    }
}

impl Handler<Ready> for CopyTransaction {
    type Result = ResponseFuture<Result<(), Failure>>;

    fn handle(&mut self, msg: Ready, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        let (task, incarnation) = msg.member;
        match self.core.ready(task, incarnation, msg.offsets, now_ms()) {
            Ok(actions) => {
                if msg.last {
                    self.leaving.insert(task);
                }
                self.waiting.insert(msg.member, tx);
                self.carry_out(actions, ctx);
            }
            Err(refusal) => {
                let _ = tx.send(Err(Failure::aborted(format!("the copy's shared transaction refused the cycle ({refusal:?})"))));
            }
        }
        Box::pin(async move { rx.await.unwrap_or_else(|_| Err(Failure::fatal("the copy's transaction stopped"))) })
    }
}

impl Handler<Leave> for CopyTransaction {
    type Result = ();

    fn handle(&mut self, msg: Leave, ctx: &mut Context<Self>) {
        let (task, incarnation) = msg.member;
        self.waiting.remove(&msg.member);
        let actions = self.core.leave(task, incarnation, msg.finished);
        if !self.core.members().iter().any(|(t, _)| *t == task) {
            self.notices.remove(&task);
        }
        self.carry_out(actions, ctx);
    }
}

/// A member's copy of its round's outcome: a retriable error that outlasted
/// its retries aborted the round.
fn member_outcome(result: &Result<(), Failure>) -> Result<(), Failure> {
    let Err(e) = result else { return Ok(()) };
    let mut e = e.clone();
    if e.recovery == Recovery::Retry {
        e.recovery = Recovery::Aborted;
    }
    Err(e)
}
