//! The watchdog's decision: which task has had work and made no progress
//! for longer than the operator allows, told once per stall (and again when
//! it moves), with what the task's status says it waits for.
//!
//! Progress is anything a task does on its own: records received or
//! committed, a bundle finished, a commit, its output watermark moving, its
//! lifecycle changing. A task with nothing to do (no lag, nothing queued or
//! in its stage, no open cycle) is idle, not stalled.
use std::collections::BTreeMap;

use crate::codec::timestamp::Watermark;
use crate::plan::topology::TaskId;
use crate::task::lifecycle::TaskState;
use crate::task::status::{watermark_text, TaskStatus};

/// What changes when a task makes progress.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Footprint {
    state: TaskState,
    received: i64,
    committed: i64,
    bundles: u64,
    last_commit_ms: Option<i64>,
    output_watermark: Watermark,
}

impl Footprint {
    fn of(s: &TaskStatus) -> Footprint {
        Footprint {
            state: s.state,
            received: s.inputs.iter().map(|i| i.position).sum(),
            committed: s.inputs.iter().filter_map(|i| i.committed).sum(),
            bundles: s.bundles,
            last_commit_ms: s.last_commit_ms,
            output_watermark: s.output_watermark,
        }
    }
}

/// Whether the task has something to do: records behind (`lag`), queued
/// or in its stage, an open cycle, or state still being restored. A
/// finished task has none, and neither has one at most a record behind on
/// each input partition: under exactly_once a partition ends with a
/// transaction's commit marker, an offset the consumer never delivers, so
/// a task that read everything is one behind on each (a 30M-element batch
/// job warned of every finished and waiting task as stalled).
fn has_work(s: &TaskStatus, lag: Option<i64>) -> bool {
    if matches!(s.state, TaskState::Finished | TaskState::Suspended | TaskState::Closed) {
        return false;
    }
    matches!(s.state, TaskState::Created | TaskState::Restoring)
        || lag.unwrap_or(0) > s.inputs.len() as i64
        || s.queued_records > 0
        || s.in_flight > 0
        || s.cycle_open_ms.is_some()
}

#[derive(Debug)]
struct Watched {
    footprint: Footprint,
    /// Since when (ms) it has had work without progress.
    since_ms: Option<i64>,
    told: bool,
}

/// One job's watchdog over its tasks in this copy.
#[derive(Debug)]
pub struct StallWatch {
    after_ms: i64,
    tasks: BTreeMap<TaskId, Watched>,
}

impl StallWatch {
    /// Tells of a task stalled `after_ms` (0: never).
    pub fn new(after_ms: u64) -> StallWatch {
        StallWatch { after_ms: after_ms as i64, tasks: BTreeMap::new() }
    }

    /// Looks at every task's latest status (`lag`: records behind its
    /// inputs' ends, if known) at `now_ms`; returns what to tell the operator.
    pub fn observe<'a>(&mut self, now_ms: i64, tasks: impl IntoIterator<Item = (TaskId, &'a TaskStatus, Option<i64>)>) -> Vec<String> {
        if self.after_ms == 0 {
            return Vec::new();
        }
        let mut said = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (task, status, lag) in tasks {
            seen.insert(task);
            let footprint = Footprint::of(status);
            let w = self.tasks.entry(task).or_insert_with(|| Watched { footprint: footprint.clone(), since_ms: None, told: false });
            if w.footprint != footprint {
                if w.told {
                    let stalled = w.since_ms.map_or(0, |s| now_ms - s);
                    said.push(format!("task {task} progresses again after {:.0} s without", stalled as f64 / 1000.0));
                }
                *w = Watched { footprint, since_ms: None, told: false };
            }
            if !has_work(status, lag) {
                w.since_ms = None;
                w.told = false;
                continue;
            }
            let since = *w.since_ms.get_or_insert(now_ms);
            if !w.told && now_ms - since >= self.after_ms {
                w.told = true;
                said.push(stalled_message(task, status, lag, now_ms - since));
            }
        }
        // A task gone from this copy is no longer watched here.
        self.tasks.retain(|t, _| seen.contains(t));
        said
    }
}

fn stalled_message(task: TaskId, s: &TaskStatus, lag: Option<i64>, for_ms: i64) -> String {
    let mut work = Vec::new();
    if let Some(l) = lag.filter(|l| *l > 0) {
        work.push(format!("{l} record(s) behind"));
    }
    if s.queued_records > 0 {
        work.push(format!("{} record(s) queued", s.queued_records));
    }
    if s.in_flight > 0 {
        work.push(format!("{} element(s) in a bundle that has not finished", s.in_flight));
    }
    if let Some(ms) = s.cycle_open_ms {
        work.push(format!("a commit cycle open for {:.0} s", ms as f64 / 1000.0));
    }
    let mut why = s.waiting();
    if why.is_empty() {
        why.push("nothing in its status explains it: its bundle may be stuck in user code (see the SDK worker's log)".into());
    }
    format!(
        "task {task} has made no progress for {:.0} s ({}; output watermark {}): {}",
        for_ms as f64 / 1000.0,
        if work.is_empty() { "restoring".to_string() } else { work.join(", ") },
        watermark_text(s.output_watermark),
        why.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::status::InputPosition;

    fn task() -> TaskId {
        TaskId { sub_topology: 2, partition: 1 }
    }

    fn running(position: i64, in_flight: u64) -> TaskStatus {
        let mut s = TaskStatus::new(TaskState::Running);
        s.inputs = vec![InputPosition { topic: "t".into(), partition: 1, position, committed: Some(position) }];
        s.input_watermark = Watermark::At(5);
        s.in_flight = in_flight;
        s
    }

    #[test]
    fn a_task_stuck_in_a_bundle_is_named_once_then_again_when_it_moves() {
        let mut w = StallWatch::new(60_000);
        let stuck = running(10, 3);
        assert!(w.observe(0, [(task(), &stuck, Some(0))]).is_empty());
        assert!(w.observe(59_999, [(task(), &stuck, Some(0))]).is_empty());
        let said = w.observe(60_000, [(task(), &stuck, Some(0))]);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].contains("task 2_1") && said[0].contains("60 s") && said[0].contains("3 element(s) in a bundle"), "{}", said[0]);
        assert!(said[0].contains("user code"), "no status reason: the bundle itself: {}", said[0]);
        assert!(w.observe(120_000, [(task(), &stuck, Some(0))]).is_empty(), "told once per stall");
        let moved = running(11, 0);
        let said = w.observe(125_000, [(task(), &moved, Some(0))]);
        assert_eq!(said.len(), 1);
        assert!(said[0].contains("progresses again after 125 s"), "{}", said[0]);
    }

    #[test]
    fn an_idle_task_is_not_stalled() {
        let mut w = StallWatch::new(1_000);
        let idle = running(10, 0);
        for now in [0, 5_000, 50_000] {
            assert!(w.observe(now, [(task(), &idle, Some(0))]).is_empty());
        }
        assert!(w.observe(60_000, [(task(), &idle, None)]).is_empty(), "no end known: no lag");
    }

    #[test]
    fn commit_markers_and_finished_tasks_are_not_work() {
        let mut w = StallWatch::new(1_000);
        let mut read_all = running(10, 0);
        read_all.inputs.push(InputPosition { topic: "t".into(), partition: 2, position: 7, committed: Some(7) });
        for now in [0, 5_000, 50_000] {
            assert!(w.observe(now, [(task(), &read_all, Some(2))]).is_empty(), "a marker ends each of its 2 partitions");
        }
        assert_eq!(w.observe(51_000, [(task(), &read_all, Some(3))]).len(), 0, "the clock starts");
        assert_eq!(w.observe(52_000, [(task(), &read_all, Some(3))]).len(), 1, "3 behind on 2 partitions is a record");
        let mut done = running(10, 0);
        done.state = TaskState::Finished;
        let mut w = StallWatch::new(1_000);
        for now in [0, 5_000] {
            assert!(w.observe(now, [(task(), &done, Some(1))]).is_empty());
        }
    }

    #[test]
    fn a_task_behind_that_reads_nothing_says_why() {
        let mut w = StallWatch::new(1_000);
        let mut paused = running(10, 0);
        paused.flow_paused = true;
        paused.queued_records = 4;
        assert!(w.observe(0, [(task(), &paused, Some(90))]).is_empty());
        let said = w.observe(1_000, [(task(), &paused, Some(90))]);
        assert!(said[0].contains("90 record(s) behind") && said[0].contains("flow control"), "{}", said[0]);
    }

    #[test]
    fn progress_restarts_the_clock_and_zero_disables() {
        let mut w = StallWatch::new(1_000);
        for (now, position) in [(0, 1), (900, 2), (1_800, 3), (2_700, 4)] {
            assert!(w.observe(now, [(task(), &running(position, 5), Some(9))]).is_empty(), "moving at {now}");
        }
        let restoring = TaskStatus::new(TaskState::Restoring);
        let mut off = StallWatch::new(0);
        assert!(off.observe(1_000_000, [(task(), &restoring, None)]).is_empty());
        assert!(w.observe(10_000, [(task(), &restoring, None)]).is_empty(), "a lifecycle change is progress");
        let said = w.observe(11_000, [(task(), &restoring, None)]);
        assert!(said[0].contains("restoring"), "{said:?}");
    }

    #[test]
    fn a_task_that_left_is_forgotten() {
        let mut w = StallWatch::new(1_000);
        let stuck = running(1, 1);
        w.observe(0, [(task(), &stuck, None)]);
        w.observe(500, []);
        assert!(w.observe(1_000, [(task(), &stuck, None)]).is_empty(), "watched anew");
    }
}
