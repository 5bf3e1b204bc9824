//! The job consumer's group membership: partitions assigned to and revoked
//! from this process as copies of the application come and go.
//!
//! librdkafka calls these hooks inside a poll, on the actor thread, so they
//! only pause and report: newly assigned partitions stay paused until the
//! job has restored their tasks' state and started them. Under incremental
//! rebalancing (`--group_protocol=consumer`) a revocation is only reported:
//! the job hands the moving tasks over (each commits a last cycle) and then
//! gives the partitions up itself (`Revocation::complete`), which is when
//! the group moves them.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::status_board::StatusBoard;
use beam_kafka_config::{ProcessingGuarantee, RunnerOptions};
use beam_kafka_runtime::kafka::topic_partition::TopicPartition;
use beam_kafka_runtime::task::epochs::Epochs;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, RebalanceProtocol, StreamConsumer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::mpsc::UnboundedSender;

/// A change of this process's share of the group's partitions.
#[derive(Debug)]
pub enum Membership {
    Assigned(Vec<TopicPartition>),
    /// Taken away (eagerly: librdkafka gave them up already).
    Revoked(Vec<TopicPartition>),
    /// Asked back incrementally: the job hands their tasks over, then
    /// gives the partitions up (`Revocation::complete`).
    Revoking(Revocation),
    /// Every partition went (a failed rebalance unassigns them all).
    RevokedAll,
}

/// Partitions the group asked back, still this copy's until given up.
#[derive(Debug)]
pub struct Revocation {
    pub partitions: Vec<TopicPartition>,
}

impl Revocation {
    /// Gives the partitions up: the group hands them to their next owner.
    /// Their epochs move only now, so the tasks handing them over wrote
    /// their last cycle as owners.
    pub fn complete(self, consumer: &JobConsumer, assignment: &Assignment) {
        assignment.change(&self.partitions);
        let mut tpl = TopicPartitionList::new();
        for tp in &self.partitions {
            tpl.add_partition(&tp.topic, tp.partition);
        }
        if let Err(e) = consumer.incremental_unassign(&tpl) {
            tracing::warn!("cannot give up partitions {:?}: {e}", self.partitions);
        }
    }
}

/// When each partition last changed hands in this copy (`runtime::task::epochs`),
/// shared by the consumer's hooks, the poll loop and the tasks; the clock
/// alone answers "did anything change" without a lock.
#[derive(Default)]
pub struct Assignment {
    clock: AtomicU64,
    epochs: Mutex<Epochs>,
}

impl Assignment {
    pub fn now(&self) -> u64 {
        self.clock.load(Ordering::Acquire)
    }

    pub fn change(&self, parts: &[TopicPartition]) {
        let mut e = self.epochs.lock().expect("epochs lock");
        self.clock.store(e.change(parts), Ordering::Release);
    }

    fn change_all(&self) {
        let mut e = self.epochs.lock().expect("epochs lock");
        self.clock.store(e.change_all(), Ordering::Release);
    }

    /// Whether `partition` changed hands after tick `seen`.
    pub fn changed_since(&self, partition: &TopicPartition, seen: u64) -> bool {
        self.now() != seen && self.epochs.lock().expect("epochs lock").changed_since(partition, seen)
    }

    /// Whether any of `parts` changed hands after tick `seen`.
    pub fn any_changed_since(&self, parts: &[TopicPartition], seen: u64) -> bool {
        self.now() != seen && self.epochs.lock().expect("epochs lock").any_changed_since(parts, seen)
    }
}

pub struct JobContext {
    events: UnboundedSender<Membership>,
    /// When each partition changed hands: records the poll loop took
    /// before their partition's change belong to an assignment that is gone
    /// and must not reach a task (its next owner reads them again from the
    /// commit).
    pub assignment: Arc<Assignment>,
    /// Where partition ends (for lag) and rebalances are told.
    board: Arc<StatusBoard>,
    application_id: String,
    /// exactly_once: a new owner fences this copy's writes, no need to wait.
    transactional: bool,
}

impl JobContext {
    pub fn new(events: UnboundedSender<Membership>, assignment: Arc<Assignment>, board: Arc<StatusBoard>, opts: &RunnerOptions) -> Self {
        let transactional = opts.processing_guarantee == ProcessingGuarantee::ExactlyOnce;
        JobContext { events, assignment, board, application_id: opts.application_id.clone(), transactional }
    }
}

pub type JobConsumer = StreamConsumer<JobContext>;

fn list(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements().iter().map(|e| TopicPartition::new(e.topic(), e.partition())).collect()
}

impl ClientContext for JobContext {
    /// Every `statistics.interval.ms`: the end of each partition fetched,
    /// the last stable one under read_committed (what a task can read).
    fn stats(&self, stats: rdkafka::Statistics) {
        for (topic, t) in &stats.topics {
            for (partition, p) in &t.partitions {
                let end = if p.ls_offset >= 0 { p.ls_offset } else { p.hi_offset };
                if *partition >= 0 && end >= 0 {
                    self.board.set_end(topic, *partition, end);
                }
            }
        }
    }
}

impl ConsumerContext for JobContext {
    /// rust-rdkafka's own, but an incremental revocation is not given up
    /// here: the job does it once the moving tasks handed over.
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let incremental = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        if !(incremental && err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
            return self.rebalance_now(consumer, err, tpl);
        }
        let partitions = list(tpl);
        // Lost (already someone else's: nothing of theirs may commit here),
        // or the consumer is closing (the job ended: no task runs to hand
        // over, and the close waits for the partitions to be given up).
        if consumer.assignment_lost() || consumer.closed() {
            return self.rebalance_now(consumer, err, tpl);
        }
        tracing::debug!("group rebalance: handing over {partitions:?}");
        if let Err(unheard) = self.events.send(Membership::Revoking(Revocation { partitions })) {
            tracing::debug!("the job no longer runs tasks: giving {:?} up at once", unheard);
            self.rebalance_now(consumer, err, tpl);
        }
    }

    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let parts = list(tpl);
                tracing::debug!("group rebalance: revoking {parts:?}");
                self.assignment.change(&parts);
                let _ = self.events.send(Membership::Revoked(parts));
                // The rebalance completes, and the partitions' next owners
                // restore, only once the changelog writes of this copy's
                // tasks landed (the change above stops new ones; this runs
                // on the job's thread, so no task queues any meanwhile).
                if !self.transactional {
                    if let Err(e) = crate::state::wait_for_changelog_writes(&self.application_id) {
                        tracing::warn!("handing partitions over without waiting further: {e}");
                    }
                }
            }
            Rebalance::Assign(tpl) => {
                let parts = list(tpl);
                self.assignment.change(&parts);
                self.board.rebalances.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("group rebalance: assigning {parts:?}")
            }
            // A safety net: rust-rdkafka 0.39 calls this hook only for
            // assignments and revocations, but on an error it would
            // unassign everything.
            Rebalance::Error(e) => {
                self.assignment.change_all();
                tracing::warn!("group rebalance failed ({e}); giving up every partition until the next assignment");
                let _ = self.events.send(Membership::RevokedAll);
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            if tpl.count() == 0 {
                return;
            }
            let parts = list(tpl);
            self.assignment.change(&parts);
            // Nothing is fetched for a partition until its task is running.
            if let Err(e) = consumer.pause(tpl) {
                tracing::warn!("cannot pause newly assigned partitions: {e}");
            }
            let _ = self.events.send(Membership::Assigned(parts));
        }
    }
}

impl JobContext {
    /// rust-rdkafka's default rebalance: the hooks around librdkafka's
    /// (incremental) assign or unassign.
    fn rebalance_now(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let incremental = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        if err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS {
            // Each task reads its own commit and seeks there once it fenced
            // the earlier owners (task_start::seek_to_commits), so librdkafka
            // must not look the commits up itself: its lookup asks for stable
            // offsets of every new partition in one request, retried whole
            // while any of them has a transactional commit pending, which the
            // copy's running tasks keep for theirs most of the time. Under
            // load that held a fetcher unstarted past 150 s and failed the
            // start. An explicit start (the end: nothing to fetch before the
            // pause below lands) starts the fetcher at once.
            if let Err(e) = tpl.set_all_offsets(Offset::End) {
                tracing::warn!("group rebalance: cannot set the start of the new partitions: {e}");
            }
        }
        let rebalance = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => Rebalance::Assign(tpl),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => Rebalance::Revoke(tpl),
            other => Rebalance::Error(rdkafka::error::KafkaError::Rebalance(other.into())),
        };
        self.pre_rebalance(consumer, &rebalance);
        let done = match (&rebalance, incremental) {
            (Rebalance::Assign(tpl), true) => consumer.incremental_assign(tpl),
            (Rebalance::Assign(tpl), false) => consumer.assign(tpl),
            (Rebalance::Revoke(tpl), true) => consumer.incremental_unassign(tpl),
            _ => consumer.unassign(),
        };
        if let Err(e) = done {
            tracing::warn!("group rebalance: librdkafka refused the change: {e}");
        }
        self.post_rebalance(consumer, &rebalance);
    }
}
