//! TestStream progress as a task sees it: the last TestStream step (epoch)
//! every upstream partition processed in full, and the test clock. Reports
//! carry both (see `test_stream`); a task passes an epoch on once it has
//! processed everything before it, so an epoch reaching a task means every
//! task between it and the TestStream is done with that step.
use std::collections::BTreeMap;

use crate::codec::timestamp::Millis;

/// What a report carries: 0 for none (a pipeline without a TestStream, or
/// an upstream it does not reach).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub epoch: u64,
    pub clock: Millis,
}

#[derive(Debug, Default)]
struct Upstream {
    total: u32,
    epochs: BTreeMap<u32, u64>,
}

/// The progress of a task's inputs: per upstream the lowest epoch of its
/// partitions (a partition not heard from yet counts as none done), the
/// lowest of the upstreams that carry epochs at all, and the latest clock.
#[derive(Debug, Default)]
pub struct ProgressTracker {
    upstreams: BTreeMap<String, Upstream>,
    current: Progress,
}

impl ProgressTracker {
    pub fn current(&self) -> Progress {
        self.current
    }

    /// Takes in one report; returns the task's progress if it changed.
    pub fn report(&mut self, source: &str, partition: u32, total: u32, p: Progress) -> Option<Progress> {
        if p == Progress::default() || partition >= total {
            return None;
        }
        let before = self.current;
        self.current.clock = self.current.clock.max(p.clock);
        if p.epoch > 0 {
            let up = self.upstreams.entry(source.to_string()).or_default();
            up.total = up.total.max(total);
            let e = up.epochs.entry(partition).or_insert(0);
            *e = (*e).max(p.epoch);
            let epoch = self
                .upstreams
                .values()
                .map(|u| if u.epochs.len() < u.total as usize { 0 } else { u.epochs.values().copied().min().unwrap_or(0) })
                .min()
                .unwrap_or(0);
            self.current.epoch = self.current.epoch.max(epoch);
        }
        (self.current != before).then_some(self.current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_counts_once_every_partition_of_every_carrying_upstream_reached_it() {
        let mut t = ProgressTracker::default();
        let p = |epoch, clock| Progress { epoch, clock };
        assert_eq!(t.report("impulse", 0, 1, p(0, 0)), None, "no progress carried: ignored");
        assert_eq!(t.report("a", 0, 2, p(1, 100)), Some(p(0, 100)), "the clock moves; partition 1 of 'a' is behind");
        assert_eq!(t.report("a", 1, 2, p(2, 100)), Some(p(1, 100)));
        assert_eq!(t.report("b", 0, 1, p(1, 50)), None, "'b' at 1 too; clocks never go back");
        assert_eq!(t.report("a", 0, 2, p(3, 200)), Some(p(1, 200)), "'b' still holds epoch 1");
        assert_eq!(t.report("b", 0, 1, p(4, 200)), Some(p(2, 200)), "the lowest partition of 'a' is at 2");
        assert_eq!(t.report("a", 0, 2, p(1, 0)), None, "a partition never goes back");
        assert_eq!(t.current(), p(2, 200));
    }
}
