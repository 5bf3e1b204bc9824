//! When a stage splits a running bundle, and what the split leaves over.
//!
//! A commit cycle's flush waits for the bundles before it. A bundle of slow
//! elements could keep it waiting past the transaction timeout, so once a
//! flush has waited on a bundle running for `max_bundle_time_ms`, the stage
//! asks the harness to stop it after its current element
//! (`ProcessBundleSplit`). What it did not process, and the bundles queued
//! before the flush, are deferred: they go back to the task, become durable
//! state of the cycle, and are processed after its commit. A bundle that
//! fires timers is never split (its timers were taken out of the task's
//! state for it). A bundle of splittable DoFn restrictions is split even
//! when it holds one: the harness checkpoints the restriction where it got
//! to, and the rest comes back as a residual.
use std::ops::Range;

/// What to do about the running bundle a flush waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitDecision {
    Now,
    /// Look again after this many milliseconds.
    Later(u64),
    Never,
}

/// Whether a bundle running for `running_ms`, with `elements` data elements
/// and timers to fire or not, should be split now (`after_ms`: how long a
/// waiting flush lets a bundle run); `restrictions`: its elements are
/// splittable DoFn restrictions, which split inside.
pub fn decide(after_ms: u64, running_ms: u64, elements: usize, fires_timers: bool, restrictions: bool) -> SplitDecision {
    let least = if restrictions { 1 } else { 2 };
    if fires_timers || elements < least {
        return SplitDecision::Never;
    }
    if running_ms >= after_ms {
        SplitDecision::Now
    } else {
        SplitDecision::Later(after_ms - running_ms)
    }
}

/// The elements from index `first` on, as byte ranges of the data whose
/// element ends are `ends`.
pub fn residual(ends: &[usize], first: usize) -> Vec<Range<usize>> {
    let start = |i: usize| if i == 0 { 0 } else { ends[i - 1] };
    (first.min(ends.len())..ends.len()).map(|i| start(i)..ends[i]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_is_split_once_a_flush_waited_long_enough_and_never_with_timers() {
        assert_eq!(decide(1_000, 1_500, 10, false, false), SplitDecision::Now);
        assert_eq!(decide(1_000, 1_000, 10, false, false), SplitDecision::Now);
        assert_eq!(decide(1_000, 200, 10, false, false), SplitDecision::Later(800));
        assert_eq!(decide(1_000, 5_000, 10, true, false), SplitDecision::Never, "its timers were taken for it");
        assert_eq!(decide(1_000, 5_000, 1, false, false), SplitDecision::Never, "one element is never split");
        assert_eq!(decide(1_000, 5_000, 1, false, true), SplitDecision::Now, "one restriction is, inside");
        assert_eq!(decide(1_000, 5_000, 0, false, true), SplitDecision::Never);
    }

    #[test]
    fn the_residual_is_every_element_from_the_first_unprocessed_one() {
        let ends = [3, 5, 9];
        assert_eq!(residual(&ends, 1), vec![3..5, 5..9]);
        assert_eq!(residual(&ends, 0), vec![0..3, 3..5, 5..9], "not started: all of it");
        assert!(residual(&ends, 3).is_empty(), "it got to the end");
        assert!(residual(&ends, 7).is_empty(), "past the end: nothing");
    }
}
