//! Standby replicas (`--num_standby_replicas`): copies that keep a warm
//! store of tasks they do not run, tailing the tasks' changelogs into their
//! local state directory, so a task that moves to one of them reads only
//! the changelog's last records. What this decides: which copy stands by
//! for which task, from the tasks every running copy reports (the copies
//! topic), and how long a standby outlives its reason.
use std::collections::{BTreeMap, BTreeSet};

use crate::plan::topology::TaskId;

/// How long a copy keeps tailing a task after the placement stopped
/// naming it: the placement forgets a task the moment its owner goes
/// silent (killed), which is when its standby is needed.
pub const LINGER_MS: i64 = 120_000;

/// The tasks `me` stands by for. Each task's standbys are `replicas` of the
/// running copies other than its owner, taken in copy order from a place
/// that turns with the task's partition (so one copy's tasks spread their
/// standbys over the others). `owners` maps each running task to its copy;
/// `running` lists the running copies; a copy never stands by for a task
/// it runs.
pub fn standby_tasks(owners: &BTreeMap<TaskId, String>, running: &BTreeSet<String>, me: &str, replicas: usize) -> BTreeSet<TaskId> {
    let mut mine = BTreeSet::new();
    if replicas == 0 {
        return mine;
    }
    for (task, owner) in owners {
        let others: Vec<&String> = running.iter().filter(|c| *c != owner).collect();
        if others.is_empty() || owner == me {
            continue;
        }
        let start = task.partition as usize % others.len();
        let chosen = (0..replicas.min(others.len())).map(|i| others[(start + i) % others.len()]);
        if chosen.into_iter().any(|c| c == me) {
            mine.insert(*task);
        }
    }
    mine
}

/// What a copy does with its standby stores as the placement changes: the
/// tasks it tails, each with when the placement last named it.
#[derive(Debug, Default)]
pub struct Standing {
    named_ms: BTreeMap<TaskId, i64>,
}

impl Standing {
    /// The placement names `wanted` at `now_ms`; `running_here` are the
    /// tasks this copy runs or is starting (their stores are theirs).
    /// Returns the tasks to tail now: those named, and those named within
    /// [`LINGER_MS`].
    pub fn update(&mut self, wanted: &BTreeSet<TaskId>, running_here: &BTreeSet<TaskId>, now_ms: i64) -> BTreeSet<TaskId> {
        for t in wanted {
            self.named_ms.insert(*t, now_ms);
        }
        self.named_ms.retain(|t, named| !running_here.contains(t) && now_ms - *named < LINGER_MS);
        self.named_ms.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(partition: u32) -> TaskId {
        TaskId { sub_topology: 0, partition }
    }

    fn copies(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_task_has_its_replicas_on_other_copies_spread_over_them() {
        let running = copies(&["a", "b", "c"]);
        let owners: BTreeMap<TaskId, String> = (0..6).map(|p| (t(p), ["a", "b", "c"][p as usize % 3].to_string())).collect();
        for replicas in 1..=2 {
            let per_copy: Vec<BTreeSet<TaskId>> = ["a", "b", "c"].iter().map(|c| standby_tasks(&owners, &running, c, replicas)).collect();
            for (task, owner) in &owners {
                let holders: Vec<usize> = (0..3).filter(|i| per_copy[*i].contains(task)).collect();
                assert_eq!(holders.len(), replicas, "task {task}: {holders:?}");
                assert!(holders.iter().all(|i| ["a", "b", "c"][*i] != owner), "never its owner");
            }
            // Spread: every copy stands by for some task.
            assert!(per_copy.iter().all(|s| s.len() == 2 * replicas), "{per_copy:?}");
        }
        // More replicas than other copies: every other copy.
        assert_eq!(standby_tasks(&owners, &running, "a", 5).len(), 4);
        assert!(standby_tasks(&owners, &running, "a", 0).is_empty());
        // A lone copy stands by for nothing.
        let alone: BTreeMap<TaskId, String> = (0..3).map(|p| (t(p), "a".to_string())).collect();
        assert!(standby_tasks(&alone, &copies(&["a"]), "a", 1).is_empty());
    }

    #[test]
    fn a_standby_lingers_after_the_placement_forgets_it_and_ends_when_its_task_starts_here() {
        let mut s = Standing::default();
        let none = BTreeSet::new();
        assert_eq!(s.update(&[t(0), t(1)].into(), &none, 0), [t(0), t(1)].into());
        // t(1)'s owner went silent: the placement no longer names it.
        assert_eq!(s.update(&[t(0)].into(), &none, 10_000), [t(0), t(1)].into());
        assert_eq!(s.update(&[t(0)].into(), &none, LINGER_MS), [t(0)].into(), "lingered long enough");
        // t(0) starts here: its store is the task's now.
        assert_eq!(s.update(&[t(0)].into(), &[t(0)].into(), LINGER_MS + 1), BTreeSet::new());
    }
}
