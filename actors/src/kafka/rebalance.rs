//! The job consumer's group membership: partitions assigned to and revoked
//! from this process as copies of the application come and go.
//!
//! librdkafka calls these hooks inside a poll, on the actor thread, so they
//! only pause and report: newly assigned partitions stay paused until the
//! job has restored their tasks' state and started them.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::status_board::StatusBoard;
use beam_kafka_config::{ProcessingGuarantee, RunnerOptions};

use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::{ClientContext, TopicPartitionList};
use tokio::sync::mpsc::UnboundedSender;

/// A change of this process's share of the group's partitions.
#[derive(Debug)]
pub enum Membership {
    Assigned(Vec<(String, i32)>),
    Revoked(Vec<(String, i32)>),
    /// Every partition went (a failed rebalance unassigns them all).
    RevokedAll,
}

pub struct JobContext {
    events: UnboundedSender<Membership>,
    /// Bumped at every change of assignment: records the
    /// poll loop took before a bump belong to an assignment that is gone and
    /// must not reach a task (its new owner reads them again from the commit).
    pub generation: Arc<AtomicU64>,
    /// Where partition ends (for lag) and rebalances are told.
    board: Arc<StatusBoard>,
    application_id: String,
    /// exactly_once: a new owner fences this copy's writes, no need to wait.
    transactional: bool,
}

impl JobContext {
    pub fn new(events: UnboundedSender<Membership>, generation: Arc<AtomicU64>, board: Arc<StatusBoard>, opts: &RunnerOptions) -> Self {
        let transactional = opts.processing_guarantee == ProcessingGuarantee::ExactlyOnce;
        JobContext { events, generation, board, application_id: opts.application_id.clone(), transactional }
    }
}

pub type JobConsumer = StreamConsumer<JobContext>;

fn list(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect()
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
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        match rebalance {
            Rebalance::Revoke(tpl) => {
                tracing::debug!("group rebalance: revoking {:?}", list(tpl));
                let _ = self.events.send(Membership::Revoked(list(tpl)));
                // The rebalance completes, and the partitions' next owners
                // restore, only once the changelog writes of this copy's
                // tasks landed (the bump above stops new ones; this runs on
                // the job's thread, so no task queues any meanwhile).
                if !self.transactional {
                    if let Err(e) = crate::state::wait_for_changelog_writes(&self.application_id) {
                        tracing::warn!("handing partitions over without waiting further: {e}");
                    }
                }
            }
            Rebalance::Assign(tpl) => {
                self.board.rebalances.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("group rebalance: assigning {:?}", list(tpl))
            }
            // A safety net: rust-rdkafka 0.39 calls this hook only for
            // assignments and revocations, but on an error it would
            // unassign everything.
            Rebalance::Error(e) => {
                tracing::warn!("group rebalance failed ({e}); giving up every partition until the next assignment");
                let _ = self.events.send(Membership::RevokedAll);
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Rebalance::Assign(tpl) = rebalance {
            if tpl.count() == 0 {
                return;
            }
            // Nothing is fetched for a partition until its task is running.
            use rdkafka::consumer::Consumer;
            if let Err(e) = consumer.pause(tpl) {
                tracing::warn!("cannot pause newly assigned partitions: {e}");
            }
            let _ = self.events.send(Membership::Assigned(list(tpl)));
        }
    }
}
