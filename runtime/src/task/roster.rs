//! Which tasks run in this copy, and when a stopped one starts again: the
//! job's decisions on its share of the group's partitions, apart from the
//! Kafka clients and actors that carry them out (`actors::job`).
//!
//! A task runs here only while every one of its input partitions is
//! assigned here. A task that stopped (fenced, aborted) or could not start
//! waits a backoff of its own before it starts again; its backoff grows
//! until one of its incarnations commits a cycle, so a task that starts and
//! fails at once (a broker still coming back) does not spin. Nothing a
//! start skipped is forgotten: `startable` lists every task whose partitions
//! are here and that is neither running nor cooling down, whatever happened
//! to the start that was meant to start it.
use std::collections::{BTreeMap, BTreeSet};

use crate::kafka::failure::Backoff;
use crate::kafka::topic_partition::TopicPartition;
use crate::plan::topology::TaskId;

/// A task running here, with `H`, what the job holds to talk to it.
#[derive(Debug)]
pub struct Running<H> {
    pub incarnation: u64,
    pub handle: H,
}

#[derive(Debug)]
pub struct Roster<H> {
    /// Each task's input partitions, from the plan.
    partitions: BTreeMap<TaskId, Vec<TopicPartition>>,
    assigned: BTreeSet<TopicPartition>,
    running: BTreeMap<TaskId, Running<H>>,
    /// Tasks that may not start before this time (ms, the caller's clock).
    cooling: BTreeMap<TaskId, u64>,
    /// Each task's backoff since its last incarnation that committed.
    backoff: BTreeMap<TaskId, Backoff>,
}

impl<H> Roster<H> {
    /// `partitions`: each task of the plan with its input partitions.
    pub fn new(partitions: impl IntoIterator<Item = (TaskId, Vec<TopicPartition>)>) -> Roster<H> {
        Roster {
            partitions: partitions.into_iter().filter(|(_, p)| !p.is_empty()).collect(),
            assigned: BTreeSet::new(),
            running: BTreeMap::new(),
            cooling: BTreeMap::new(),
            backoff: BTreeMap::new(),
        }
    }

    pub fn assigned(&self) -> &BTreeSet<TopicPartition> {
        &self.assigned
    }

    pub fn running(&self) -> &BTreeMap<TaskId, Running<H>> {
        &self.running
    }

    pub fn partitions_of(&self, task: TaskId) -> &[TopicPartition] {
        self.partitions.get(&task).map_or(&[], Vec::as_slice)
    }

    /// The tasks every partition of which the group gave this copy.
    pub fn owned(&self) -> BTreeSet<TaskId> {
        self.partitions.keys().filter(|t| self.all_here(**t)).copied().collect()
    }

    /// The group gave these partitions to this copy.
    pub fn assign(&mut self, parts: impl IntoIterator<Item = TopicPartition>) {
        self.assigned.extend(parts);
    }

    /// The group took these partitions away: the tasks running here that
    /// own any of them, to be stopped (they are no longer running here).
    pub fn revoke(&mut self, parts: &[TopicPartition]) -> Vec<(TaskId, H)> {
        for p in parts {
            self.assigned.remove(p);
        }
        let moving: Vec<TaskId> =
            self.running.keys().filter(|t| self.partitions_of(**t).iter().any(|p| parts.contains(p))).copied().collect();
        moving.into_iter().filter_map(|t| self.running.remove(&t).map(|r| (t, r.handle))).collect()
    }

    /// Assigned partitions the consumer no longer holds (`held`: what it
    /// holds now), learnt of late or lost in a rebalance that crossed a start.
    pub fn lost(&self, held: &BTreeSet<TopicPartition>) -> Vec<TopicPartition> {
        self.assigned.difference(held).cloned().collect()
    }

    /// The tasks to start now: every partition of theirs assigned here (and
    /// held by the consumer, `held`), not running, not cooling down at `now_ms`.
    pub fn startable(&self, now_ms: u64, held: impl Fn(&TopicPartition) -> bool) -> Vec<TaskId> {
        self.partitions
            .iter()
            .filter(|(t, _)| !self.running.contains_key(t))
            .filter(|(t, _)| self.cooling.get(t).is_none_or(|due| *due <= now_ms))
            .filter(|(_, parts)| parts.iter().all(|p| self.assigned.contains(p) && held(p)))
            .map(|(t, _)| *t)
            .collect()
    }

    /// When the next cooling task whose partitions are here may start, if any.
    pub fn next_due(&self) -> Option<u64> {
        self.cooling.iter().filter(|(t, _)| !self.running.contains_key(t) && self.all_here(**t)).map(|(_, due)| *due).min()
    }

    /// A task started; `Some(handle)` back if it must be stopped at once (a
    /// partition of its left meanwhile, or it already runs here).
    pub fn started(&mut self, task: TaskId, incarnation: u64, handle: H) -> Option<H> {
        if !self.all_here(task) || self.running.contains_key(&task) {
            return Some(handle);
        }
        self.cooling.remove(&task);
        self.running.insert(task, Running { incarnation, handle });
        None
    }

    /// Starting `tasks` failed for a cause a wait may cure: each cools down
    /// for its backoff (`jitter` in [0, 1) spreads copies apart); the
    /// shortest wait, in ms.
    pub fn start_failed(&mut self, tasks: &[TaskId], now_ms: u64, jitter: f64) -> u64 {
        tasks.iter().map(|t| self.cool(*t, now_ms, jitter)).min().unwrap_or(0)
    }

    /// Incarnation `incarnation` of `task` stopped on its own (fenced,
    /// aborted): its handle and the wait (ms) before it starts again from
    /// its last commit. `None` for an incarnation already replaced or
    /// stopped by a revocation: old news. (A running task's partitions are
    /// all here: a revocation stops the task as it removes one.)
    pub fn stopped(&mut self, task: TaskId, incarnation: u64, now_ms: u64, jitter: f64) -> Option<(H, u64)> {
        if self.running.get(&task).is_none_or(|r| r.incarnation != incarnation) {
            return None;
        }
        let gone = self.running.remove(&task)?.handle;
        Some((gone, self.cool(task, now_ms, jitter)))
    }

    /// An incarnation committed a cycle: its task's backoff starts over.
    pub fn committed(&mut self, task: TaskId, incarnation: u64) {
        if self.running.get(&task).is_some_and(|r| r.incarnation == incarnation) {
            self.backoff.remove(&task);
        }
    }

    /// Every running task's handle, leaving none running (the job ends).
    pub fn stop_all(&mut self) -> Vec<H> {
        std::mem::take(&mut self.running).into_values().map(|r| r.handle).collect()
    }

    /// Whether `task` is one of the plan's and all its partitions are here.
    fn all_here(&self, task: TaskId) -> bool {
        self.partitions.get(&task).is_some_and(|parts| parts.iter().all(|p| self.assigned.contains(p)))
    }

    fn cool(&mut self, task: TaskId, now_ms: u64, jitter: f64) -> u64 {
        let wait = self.backoff.entry(task).or_default().next_delay_ms(jitter);
        self.cooling.insert(task, now_ms + wait);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(p: u32) -> TaskId {
        TaskId { sub_topology: 0, partition: p }
    }

    fn part(p: i32) -> TopicPartition {
        TopicPartition::new("in", p)
    }

    /// Tasks 0_0 and 0_1 reading partitions 0 and 1 of "in"; task 1_0
    /// reading partition 0 of "in" and of "edge".
    fn roster() -> Roster<&'static str> {
        Roster::new([
            (t(0), vec![part(0)]),
            (t(1), vec![part(1)]),
            (TaskId { sub_topology: 1, partition: 0 }, vec![part(0), TopicPartition::new("edge", 0)]),
        ])
    }

    const ALL: fn(&TopicPartition) -> bool = |_| true;

    #[test]
    fn a_task_starts_once_all_its_partitions_are_here() {
        let mut r = roster();
        assert!(r.startable(0, ALL).is_empty());
        r.assign([part(0)]);
        assert_eq!(r.startable(0, ALL), vec![t(0)], "1_0 also needs edge-0");
        assert_eq!(r.startable(0, |p| *p != part(0)), Vec::<TaskId>::new(), "the consumer must hold it too");
        r.assign([TopicPartition::new("edge", 0), part(1)]);
        assert_eq!(r.startable(0, ALL).len(), 3);
        assert_eq!(r.started(t(0), 1, "a"), None);
        assert!(!r.startable(0, ALL).contains(&t(0)), "running");
    }

    #[test]
    fn a_copy_owns_the_tasks_all_of_whose_partitions_it_was_given() {
        let mut r = roster();
        assert!(r.owned().is_empty());
        r.assign([part(0)]);
        assert_eq!(r.owned(), [t(0)].into_iter().collect(), "1_0 also needs edge-0");
        r.assign([TopicPartition::new("edge", 0)]);
        assert_eq!(r.owned().len(), 2);
        r.revoke(&[part(0)]);
        assert!(r.owned().is_empty());
    }

    #[test]
    fn a_revoked_partition_stops_every_task_reading_it() {
        let mut r = roster();
        r.assign([part(0), part(1), TopicPartition::new("edge", 0)]);
        for (task, h) in [(t(0), "a"), (t(1), "b"), (TaskId { sub_topology: 1, partition: 0 }, "c")] {
            assert_eq!(r.started(task, 1, h), None);
        }
        let mut stopped: Vec<&str> = r.revoke(&[part(0)]).into_iter().map(|(_, h)| h).collect();
        stopped.sort();
        assert_eq!(stopped, vec!["a", "c"]);
        assert_eq!(r.running().keys().copied().collect::<Vec<_>>(), vec![t(1)]);
        assert!(r.startable(0, ALL).is_empty());
    }

    #[test]
    fn a_task_started_after_its_partition_left_is_stopped_at_once() {
        let mut r = roster();
        r.assign([part(0)]);
        let to_start = r.startable(0, ALL);
        r.revoke(&[part(0)]);
        assert_eq!(r.started(to_start[0], 7, "late"), Some("late"));
        assert!(r.running().is_empty());
        assert_eq!(r.started(t(9), 1, "unknown"), Some("unknown"), "a task of no partition here never runs");
    }

    #[test]
    fn a_stopped_task_restarts_after_its_backoff_and_only_then() {
        let mut r = roster();
        r.assign([part(0)]);
        r.started(t(0), 1, "a");
        assert_eq!(r.stopped(t(0), 2, 0, 0.0), None, "another incarnation");
        let (gone, after_ms) = r.stopped(t(0), 1, 1_000, 0.0).expect("a restart");
        assert_eq!(gone, "a");
        assert_eq!(after_ms, Backoff::FIRST_MS / 2);
        assert_eq!(r.stopped(t(0), 1, 1_000, 0.0), None, "stopping twice");
        assert!(r.startable(1_000, ALL).is_empty(), "cooling");
        assert_eq!(r.next_due(), Some(1_000 + after_ms));
        assert_eq!(r.startable(1_000 + after_ms, ALL), vec![t(0)]);
    }

    /// The review's lost restart: a restart is prepared, the assignment
    /// moves meanwhile (the start is abandoned), and the partition comes
    /// back. The task must still be startable; nothing waits for an event
    /// that already passed.
    #[test]
    fn a_restart_abandoned_while_the_assignment_moved_is_not_lost() {
        let mut r = roster();
        r.assign([part(0)]);
        r.started(t(0), 1, "a");
        let (_, after_ms) = r.stopped(t(0), 1, 0, 0.0).expect("a restart");
        let due = r.startable(after_ms, ALL);
        assert_eq!(due, vec![t(0)], "the restart is prepared");
        // While it is prepared the partition is revoked and assigned again;
        // the start is abandoned and starts nothing.
        assert!(r.revoke(&[part(0)]).is_empty());
        assert!(r.startable(after_ms, ALL).is_empty());
        assert_eq!(r.next_due(), None, "nothing to wake for while the partition is away");
        r.assign([part(0)]);
        assert_eq!(r.startable(after_ms, ALL), vec![t(0)], "startable again without a new stop");
        // A task stopped once its partitions moved is someone else's.
        r.started(t(0), 2, "b");
        r.revoke(&[part(0)]);
        assert_eq!(r.stopped(t(0), 2, 0, 0.0), None, "the revocation stopped it already");
    }

    /// The review's backoff reset: it used to restart at the shortest wait
    /// after every start, so a task failing right after each start spun.
    #[test]
    fn the_backoff_grows_until_an_incarnation_commits() {
        let mut r = roster();
        r.assign([part(0)]);
        let mut waits = Vec::new();
        for incarnation in 1..=4 {
            assert_eq!(r.started(t(0), incarnation, "a"), None);
            waits.push(r.stopped(t(0), incarnation, 0, 0.0).expect("a restart").1);
        }
        assert_eq!(waits, vec![250, 500, 1_000, 2_000], "starting is not succeeding");
        r.started(t(0), 5, "a");
        r.committed(t(0), 4);
        assert_eq!(r.stopped(t(0), 5, 0, 0.0), Some(("a", 4_000)), "a stale commit counts for nothing");
        r.started(t(0), 6, "a");
        r.committed(t(0), 6);
        assert_eq!(r.stopped(t(0), 6, 0, 0.0), Some(("a", 250)));
    }

    #[test]
    fn a_failed_start_cools_each_task_on_its_own_backoff() {
        let mut r = roster();
        r.assign([part(0), part(1)]);
        r.started(t(1), 1, "b");
        r.stopped(t(1), 1, 0, 0.0);
        let wait = r.start_failed(&[t(0), t(1)], 100, 0.0);
        assert_eq!(wait, 250, "0_0's first wait; 0_1 waits its second");
        assert_eq!(r.startable(350, ALL), vec![t(0)]);
        assert_eq!(r.next_due(), Some(350));
        assert_eq!(r.startable(600, ALL), vec![t(0), t(1)]);
    }

    #[test]
    fn partitions_lost_by_the_consumer_are_named() {
        let mut r = roster();
        r.assign([part(0), part(1)]);
        let held: BTreeSet<TopicPartition> = [part(1)].into();
        assert_eq!(r.lost(&held), vec![part(0)]);
        r.started(t(1), 1, "b");
        assert_eq!(r.stop_all(), vec!["b"]);
        assert!(r.running().is_empty());
    }
}
