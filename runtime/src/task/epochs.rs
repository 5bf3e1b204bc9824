//! When each input partition last changed hands in this copy.
//!
//! A clock ticks at every change of the group's assignment, and each
//! partition remembers the tick of its last change (assigned here, or
//! revoked). Something taken under the assignment at tick `seen` (a batch
//! of polled records, a task start, a running task) is still good for a
//! partition as long as that partition has not changed since: under eager
//! rebalancing every change lists every partition, so everything goes
//! stale at once; under incremental rebalancing only what moves does, and
//! the tasks of partitions that stay keep running.
use std::collections::HashMap;

use crate::kafka::topic_partition::TopicPartition;

#[derive(Debug, Default)]
pub struct Epochs {
    clock: u64,
    /// The tick of each partition's last change.
    changed: HashMap<TopicPartition, u64>,
    /// The last tick at which every partition changed (everything given up).
    all_changed: u64,
}

impl Epochs {
    /// The tick now: what is taken now is current as of it.
    pub fn now(&self) -> u64 {
        self.clock
    }

    /// These partitions changed hands; returns the new tick.
    pub fn change<'a>(&mut self, parts: impl IntoIterator<Item = &'a TopicPartition>) -> u64 {
        self.clock += 1;
        for p in parts {
            self.changed.insert(p.clone(), self.clock);
        }
        self.clock
    }

    /// Every partition changed (librdkafka gave up the whole assignment).
    pub fn change_all(&mut self) -> u64 {
        self.clock += 1;
        self.all_changed = self.clock;
        self.changed.clear();
        self.clock
    }

    /// Whether `partition` changed hands after tick `seen`.
    pub fn changed_since(&self, partition: &TopicPartition, seen: u64) -> bool {
        self.all_changed > seen || self.changed.get(partition).is_some_and(|at| *at > seen)
    }

    /// Whether any of `parts` changed hands after tick `seen`.
    pub fn any_changed_since<'a>(&self, parts: impl IntoIterator<Item = &'a TopicPartition>, seen: u64) -> bool {
        self.all_changed > seen || parts.into_iter().any(|p| self.changed_since(p, seen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(topic: &str, n: i32) -> TopicPartition {
        TopicPartition::new(topic, n)
    }

    #[test]
    fn only_what_moved_goes_stale() {
        let mut e = Epochs::default();
        e.change(&[p("a", 0), p("a", 1), p("b", 0)]);
        let seen = e.now();
        assert!(!e.any_changed_since(&[p("a", 0), p("b", 0)], seen));
        // An incremental revocation of a[1]: a task on a[0] and b[0] runs on.
        e.change(&[p("a", 1)]);
        assert!(e.changed_since(&p("a", 1), seen));
        assert!(!e.any_changed_since(&[p("a", 0), p("b", 0)], seen));
        // Taken after the change, a[1] is current again.
        assert!(!e.changed_since(&p("a", 1), e.now()));
    }

    #[test]
    fn an_eager_change_or_a_lost_assignment_makes_everything_stale() {
        let mut e = Epochs::default();
        e.change(&[p("a", 0)]);
        let seen = e.now();
        e.change_all();
        assert!(e.changed_since(&p("a", 0), seen), "given up");
        assert!(e.changed_since(&p("never", 9), seen), "even a partition never listed");
        let after = e.now();
        assert!(!e.changed_since(&p("a", 0), after));
        e.change(&[p("a", 0)]);
        assert!(e.changed_since(&p("a", 0), after) && !e.changed_since(&p("b", 0), after));
    }
}
