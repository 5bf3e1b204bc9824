//! Warm-up (Kafka Streams' warm-up replicas, without its probing
//! rebalances): a copy joining an application whose other copies already
//! run tasks first tails those tasks' changelogs into its standby stores,
//! and joins the consumer group only once every store is within the
//! acceptable recovery lag of its changelog's end (or the warm-up ran for
//! its limit). The brokers' assignor, not the runner, picks what the new
//! copy gets, so it warms every task the others run: whatever moves to it
//! starts from a store that is current, and scaling out does not stall the
//! tasks that move. What this decides: which tasks to warm, and when the
//! warm-up is over.
use std::collections::{BTreeMap, BTreeSet};

use crate::plan::topology::TaskId;

/// How long a copy warms up at most before it joins anyway: a changelog
/// written faster than it can be read must not keep a copy out forever.
pub const WARM_UP_LIMIT_MS: i64 = 600_000;

/// The tasks to warm: every task a running copy other than `me` runs.
pub fn tasks_to_warm(owners: &BTreeMap<TaskId, String>, me: &str) -> BTreeSet<TaskId> {
    owners.iter().filter(|(_, owner)| owner.as_str() != me).map(|(t, _)| *t).collect()
}

/// Where a warm-up stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WarmUpStep {
    /// Keep tailing: `behind` tasks are not yet within the acceptable lag
    /// (a task whose lag is unknown, its store not yet opened or its end
    /// not yet read, counts as behind).
    Wait { behind: usize, of: usize },
    /// Every task to warm is within the acceptable lag: join.
    Warm { tasks: usize },
    /// The limit passed with tasks behind (their lags): join anyway.
    GaveUp { behind: Vec<(TaskId, Option<i64>)> },
}

/// One copy's warm-up, begun at `began_ms`.
#[derive(Debug, Clone)]
pub struct WarmUp {
    pub began_ms: i64,
    /// Records a store may be behind its changelog's end and count as warm.
    pub acceptable_lag: i64,
}

impl WarmUp {
    /// `wanted`: the tasks to warm now (`None`: the copies' reports are not
    /// read yet, so not known); `lags`: each kept store's records behind its
    /// changelog's end.
    pub fn step(&self, wanted: Option<&BTreeSet<TaskId>>, lags: &BTreeMap<TaskId, i64>, now_ms: i64) -> WarmUpStep {
        let over = now_ms - self.began_ms >= WARM_UP_LIMIT_MS;
        let Some(wanted) = wanted else {
            return if over { WarmUpStep::GaveUp { behind: Vec::new() } } else { WarmUpStep::Wait { behind: 0, of: 0 } };
        };
        let behind: Vec<(TaskId, Option<i64>)> =
            wanted.iter().map(|t| (*t, lags.get(t).copied())).filter(|(_, lag)| lag.is_none_or(|l| l > self.acceptable_lag)).collect();
        match (behind.is_empty(), over) {
            (true, _) => WarmUpStep::Warm { tasks: wanted.len() },
            (false, true) => WarmUpStep::GaveUp { behind },
            (false, false) => WarmUpStep::Wait { behind: behind.len(), of: wanted.len() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(partition: u32) -> TaskId {
        TaskId { sub_topology: 0, partition }
    }

    #[test]
    fn warms_every_task_another_copy_runs() {
        let owners: BTreeMap<TaskId, String> = [(t(0), "a".to_string()), (t(1), "b".to_string()), (t(2), "me".to_string())].into();
        assert_eq!(tasks_to_warm(&owners, "me"), [t(0), t(1)].into());
        assert!(tasks_to_warm(&BTreeMap::new(), "me").is_empty(), "the first copy warms nothing");
    }

    #[test]
    fn joins_once_every_store_is_within_the_acceptable_lag() {
        let w = WarmUp { began_ms: 0, acceptable_lag: 100 };
        let wanted: BTreeSet<TaskId> = [t(0), t(1)].into();
        assert_eq!(w.step(Some(&wanted), &BTreeMap::new(), 10), WarmUpStep::Wait { behind: 2, of: 2 }, "no store open yet");
        assert_eq!(w.step(Some(&wanted), &[(t(0), 5), (t(1), 5_000)].into(), 20), WarmUpStep::Wait { behind: 1, of: 2 });
        assert_eq!(w.step(Some(&wanted), &[(t(0), 5), (t(1), 100)].into(), 30), WarmUpStep::Warm { tasks: 2 });
        // A store of a task no longer wanted does not hold the copy back.
        assert_eq!(w.step(Some(&[t(0)].into()), &[(t(0), 0), (t(9), 1 << 40)].into(), 40), WarmUpStep::Warm { tasks: 1 });
    }

    #[test]
    fn nothing_to_warm_joins_at_once_but_not_before_the_reports_are_read() {
        let w = WarmUp { began_ms: 0, acceptable_lag: 0 };
        assert_eq!(w.step(None, &BTreeMap::new(), 10), WarmUpStep::Wait { behind: 0, of: 0 });
        assert_eq!(w.step(Some(&BTreeSet::new()), &BTreeMap::new(), 20), WarmUpStep::Warm { tasks: 0 });
    }

    #[test]
    fn gives_up_at_the_limit_naming_what_is_behind() {
        let w = WarmUp { began_ms: 1_000, acceptable_lag: 10 };
        let wanted: BTreeSet<TaskId> = [t(0), t(1)].into();
        let lags: BTreeMap<TaskId, i64> = [(t(0), 50)].into();
        assert_eq!(w.step(Some(&wanted), &lags, 1_000 + WARM_UP_LIMIT_MS - 1), WarmUpStep::Wait { behind: 2, of: 2 });
        assert_eq!(
            w.step(Some(&wanted), &lags, 1_000 + WARM_UP_LIMIT_MS),
            WarmUpStep::GaveUp { behind: vec![(t(0), Some(50)), (t(1), None)] }
        );
        assert_eq!(w.step(None, &lags, 1_000 + WARM_UP_LIMIT_MS), WarmUpStep::GaveUp { behind: vec![] });
    }
}
