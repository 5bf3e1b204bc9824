//! One view of an application across its copies. Every copy writes a report
//! of itself and its tasks to the application's compacted copies topic,
//! keyed by the copy, every [`REPORT_EVERY_MS`], and a last one, marked
//! `left`, when its job ends; every copy (and `beam-kafka status`) reads
//! them all. What this decides: whether a report still describes a running
//! copy, and which copy's row a task shows when two reports name it (a
//! task moving between copies).
use std::collections::BTreeMap;

use crate::plan::topology::TaskId;

/// How often a running copy writes its report.
pub const REPORT_EVERY_MS: i64 = 2_000;

/// A copy not heard from for this long is shown as silent (killed, or cut
/// off from the brokers) and its tasks are no longer shown as its: the
/// group gives them to the others once its session ends.
pub const SILENT_AFTER_MS: i64 = 5 * REPORT_EVERY_MS;

/// A copy silent or gone for this long is left out of the view.
pub const FORGOTTEN_AFTER_MS: i64 = 15 * 60_000;

/// What a reader knows of one copy's last report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heard {
    pub copy: String,
    /// When the copy wrote it, by the copy's clock.
    pub written_ms: i64,
    /// When this reader read it, by its own clock.
    pub received_ms: i64,
    /// The copy's job ended (its last report).
    pub left: bool,
}

/// A copy as the view shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    Running,
    /// No report for [`SILENT_AFTER_MS`]: killed, or cut off.
    Silent,
    /// Its job ended, and it said so.
    Left,
}

impl Presence {
    pub fn as_str(self) -> &'static str {
        match self {
            Presence::Running => "running",
            Presence::Silent => "silent",
            Presence::Left => "left",
        }
    }
}

impl Heard {
    /// How old the report is. A report read long after it was written (the
    /// history a reader finds when it starts) counts from its writing; one
    /// written by a clock ahead of the reader's counts from its reading.
    pub fn age_ms(&self, now_ms: i64) -> i64 {
        (now_ms - self.written_ms.min(self.received_ms)).max(0)
    }

    /// How the copy stands now; `None` once it is forgotten.
    pub fn presence(&self, now_ms: i64) -> Option<Presence> {
        let age = self.age_ms(now_ms);
        if age >= FORGOTTEN_AFTER_MS {
            None
        } else if self.left {
            Some(Presence::Left)
        } else if age >= SILENT_AFTER_MS {
            Some(Presence::Silent)
        } else {
            Some(Presence::Running)
        }
    }
}

/// Copies whose last report says they run another version of the
/// pipeline than `plan` (or do not say which: an older runner) and may
/// still be running: not left, heard within [`SILENT_AFTER_MS`]. A copy
/// killed a moment ago looks the same as a live one; whether it reports
/// again tells them apart (`reported_again`).
pub fn other_versions_maybe_running(reports: &[(Heard, Option<String>)], plan: &str, now_ms: i64) -> Vec<String> {
    reports
        .iter()
        .filter(|(h, p)| p.as_deref() != Some(plan) && h.presence(now_ms) == Some(Presence::Running))
        .map(|(h, _)| h.copy.clone())
        .collect()
}

/// Which of `copies` wrote a report in `later` after the one in `earlier`:
/// they are running. Read [`REPORT_EVERY_MS`] × 2.5 apart, a running
/// copy has reported again; a killed one never will.
pub fn reported_again(earlier: &[(Heard, Option<String>)], later: &[(Heard, Option<String>)], copies: &[String]) -> Vec<String> {
    let written =
        |reports: &[(Heard, Option<String>)], copy: &str| reports.iter().find(|(h, _)| h.copy == copy).map(|(h, _)| (h.written_ms, h.left));
    copies
        .iter()
        .filter(|c| match (written(earlier, c), written(later, c)) {
            (Some((before, _)), Some((after, left))) => after > before && !left,
            (None, Some((_, left))) => !left,
            _ => false,
        })
        .cloned()
        .collect()
}

/// Which copy's row each task shows, from the tasks running copies report
/// (`(copy, written_ms, task)`): this copy's own first (it knows its tasks
/// as they are now), else the copy that reported it last. Tasks only
/// silent or departed copies name are not shown.
pub fn task_owners<'a>(reported: impl IntoIterator<Item = (&'a str, i64, TaskId)>, this_copy: &str) -> BTreeMap<TaskId, String> {
    let mut best: BTreeMap<TaskId, (bool, i64, &'a str)> = BTreeMap::new();
    for (copy, written_ms, task) in reported {
        let rank = (copy == this_copy, written_ms, copy);
        let slot = best.entry(task).or_insert(rank);
        if rank > *slot {
            *slot = rank;
        }
    }
    best.into_iter().map(|(task, (_, _, copy))| (task, copy.to_string())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versioned(copy: &str, written_ms: i64, left: bool, plan: Option<&str>) -> (Heard, Option<String>) {
        (Heard { copy: copy.into(), written_ms, received_ms: written_ms, left }, plan.map(str::to_string))
    }

    #[test]
    fn an_update_waits_for_copies_of_another_version_and_only_a_live_one_stops_it() {
        let now = 100_000;
        let first = [
            versioned("old-live", now - 1_000, false, Some("v1")),
            versioned("old-killed", now - 1_500, false, Some("v1")),
            versioned("old-left", now - 500, true, Some("v1")),
            versioned("old-silent", now - SILENT_AFTER_MS - 1, false, Some("v1")),
            versioned("older-runner", now - 700, false, None),
            versioned("new", now - 300, false, Some("v2")),
        ];
        let maybe = other_versions_maybe_running(&first, "v2", now);
        assert_eq!(maybe, ["old-live", "old-killed", "older-runner"]);
        let later = [
            versioned("old-live", now + 1_000, false, Some("v1")),
            versioned("old-killed", now - 1_500, false, Some("v1")),
            versioned("older-runner", now + 900, true, None),
        ];
        assert_eq!(reported_again(&first, &later, &maybe), ["old-live"]);
    }

    fn heard(written_ms: i64, received_ms: i64, left: bool) -> Heard {
        Heard { copy: "a:1".into(), written_ms, received_ms, left }
    }

    fn t(partition: u32) -> TaskId {
        TaskId { sub_topology: 0, partition }
    }

    #[test]
    fn a_copy_is_running_until_its_reports_stop_then_silent_then_forgotten() {
        let h = heard(100_000, 100_050, false);
        assert_eq!(h.presence(101_000), Some(Presence::Running));
        assert_eq!(h.presence(100_000 + SILENT_AFTER_MS), Some(Presence::Silent));
        assert_eq!(h.presence(100_000 + FORGOTTEN_AFTER_MS), None);
    }

    #[test]
    fn a_copy_that_said_it_left_is_left_at_once() {
        assert_eq!(heard(100_000, 100_000, true).presence(100_500), Some(Presence::Left));
        assert_eq!(heard(100_000, 100_000, true).presence(100_000 + FORGOTTEN_AFTER_MS), None);
    }

    #[test]
    fn history_read_at_start_counts_from_its_writing_and_a_fast_clock_from_its_reading() {
        // Written a minute before this reader started and read its history.
        let old = heard(40_000, 100_000, false);
        assert_eq!(old.age_ms(100_000), 60_000);
        assert_eq!(old.presence(100_000), Some(Presence::Silent));
        // The writer's clock is 30 s ahead: its report is as old as its reading.
        let ahead = heard(130_000, 100_000, false);
        assert_eq!(ahead.age_ms(101_000), 1_000);
        assert_eq!(ahead.presence(101_000), Some(Presence::Running));
    }

    #[test]
    fn a_task_shows_this_copys_row_first_then_the_latest_report() {
        let owners = task_owners(
            [("b:2", 5_000, t(0)), ("a:1", 1_000, t(0)), ("b:2", 5_000, t(1)), ("c:3", 6_000, t(1)), ("c:3", 6_000, t(2))],
            "a:1",
        );
        assert_eq!(owners[&t(0)], "a:1", "this copy's own row, though older");
        assert_eq!(owners[&t(1)], "c:3", "the copy that reported it last");
        assert_eq!(owners[&t(2)], "c:3");
        assert_eq!(owners.len(), 3);
    }
}
