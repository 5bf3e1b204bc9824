//! A task's changelog partition changes hands only once the writes of its
//! previous owner in this process landed.
//!
//! Under at_least_once the changelog is written outside transactions, by a
//! producer shared with every task. A stopped incarnation (fenced, failed,
//! revoked) can leave changelog records in that producer's queue; were its
//! successor to restore before they land, they would sit in the changelog
//! after the successor's restore point: its own store would lack them, yet a
//! later restore from the changelog would apply them (a timer fired again, a
//! chunk of an old value). Kafka Streams avoids this by flushing a task's
//! producer before its partitions are handed over; the producer here is
//! shared, so the wait is per changelog partition instead. (Under
//! exactly_once the successor's producer fences the old one first, which
//! aborts its open transaction: nothing of it is ever read.)
use std::collections::BTreeMap;

use crate::kafka::topic_partition::TopicPartition;

/// Writes in flight that can tell whether they all landed (or failed).
pub trait Landing {
    fn landed(&self) -> bool;
}

/// The changelog writes in flight per (changelog topic, partition).
#[derive(Debug)]
pub struct InFlightWrites<W> {
    by_partition: BTreeMap<TopicPartition, Vec<W>>,
}

impl<W> Default for InFlightWrites<W> {
    fn default() -> Self {
        InFlightWrites { by_partition: BTreeMap::new() }
    }
}

impl<W: Landing> InFlightWrites<W> {
    /// A group of writes to `topic[partition]` is under way.
    pub fn add(&mut self, topic: &str, partition: i32, writes: W) {
        let groups = self.by_partition.entry(TopicPartition::new(topic, partition)).or_default();
        groups.retain(|w| !w.landed());
        groups.push(writes);
    }

    /// Whether every write to `topic[partition]` landed, so its changelog
    /// may be read to its end by a new owner.
    pub fn settled(&mut self, topic: &str, partition: i32) -> bool {
        let key = TopicPartition::new(topic, partition);
        let Some(groups) = self.by_partition.get_mut(&key) else { return true };
        groups.retain(|w| !w.landed());
        if groups.is_empty() {
            self.by_partition.remove(&key);
            return true;
        }
        false
    }

    /// Whether every write to any partition of a topic `is_ours` says is
    /// ours landed (a rebalance hands over all of a job's partitions).
    pub fn all_settled(&mut self, is_ours: impl Fn(&str) -> bool) -> bool {
        self.by_partition.retain(|_, groups| {
            groups.retain(|w| !w.landed());
            !groups.is_empty()
        });
        !self.by_partition.keys().any(|tp| is_ours(&tp.topic))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// Records in flight, delivered by the test.
    #[derive(Clone)]
    struct Pending(Rc<Cell<u32>>);

    impl Landing for Pending {
        fn landed(&self) -> bool {
            self.0.get() == 0
        }
    }

    fn pending(n: u32) -> Pending {
        Pending(Rc::new(Cell::new(n)))
    }

    #[test]
    fn a_successor_restores_only_once_its_predecessor_writes_landed() {
        let mut h = InFlightWrites::default();
        assert!(h.settled("app-changelog-1", 0), "nothing ever written");
        let stopped = pending(3); // a stopped incarnation's cycle, cut short
        h.add("app-changelog-1", 0, stopped.clone());
        assert!(!h.settled("app-changelog-1", 0));
        assert!(h.settled("app-changelog-1", 1), "another task's partition");
        assert!(h.settled("app-changelog-2", 0), "another sub-topology's");
        stopped.0.set(1);
        assert!(!h.settled("app-changelog-1", 0));
        stopped.0.set(0);
        assert!(h.settled("app-changelog-1", 0));
    }

    #[test]
    fn a_rebalance_waits_for_every_partition_of_the_job() {
        let mut h = InFlightWrites::default();
        let (a, b, other) = (pending(1), pending(2), pending(5));
        h.add("app-changelog-1", 0, a.clone());
        h.add("app-changelog-2", 3, b.clone());
        h.add("other-app-changelog-1", 0, other.clone());
        let ours = |t: &str| t.starts_with("app-");
        assert!(!h.all_settled(ours));
        a.0.set(0);
        assert!(!h.all_settled(ours));
        b.0.set(0);
        assert!(h.all_settled(ours), "another job's writes are not waited for");
        assert!(!h.all_settled(|_| true));
    }

    #[test]
    fn landed_groups_are_dropped_as_new_ones_come() {
        let mut h = InFlightWrites::default();
        for _ in 0..100 {
            h.add("t", 0, pending(0));
        }
        h.add("t", 0, pending(1));
        assert_eq!(h.by_partition[&TopicPartition::new("t", 0)].len(), 1);
    }
}
