//! Whether a copy is ready to count as serving (an orchestrator's readiness
//! probe, `/readyz`): every job it runs has had its share of the group's
//! partitions and runs every task it owns, restored. A rolling restart waits
//! for this before it stops the next copy, so at most one copy's tasks are
//! ever moving.
use std::collections::{BTreeMap, BTreeSet};

use super::lifecycle::TaskState;
use crate::plan::topology::TaskId;

/// Where a job of this process is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobPhase {
    /// Over: nothing to wait for.
    Idle,
    /// Run, and not running yet (its harnesses or clients are starting).
    Starting,
    Running,
}

/// What readiness needs to know of one job.
#[derive(Clone, Debug)]
pub struct JobView {
    pub job: String,
    pub phase: JobPhase,
    /// The tasks whose partitions the group gave this copy; `None` before
    /// its first assignment.
    pub owned: Option<BTreeSet<TaskId>>,
    /// The state of each task started here.
    pub tasks: BTreeMap<TaskId, TaskState>,
}

/// `Ok` when every job is ready; else why not, one reason per job.
pub fn readiness(jobs: &[JobView]) -> Result<(), Vec<String>> {
    let reasons: Vec<String> = jobs.iter().filter_map(not_ready).collect();
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(reasons)
    }
}

fn not_ready(view: &JobView) -> Option<String> {
    let job = &view.job;
    match view.phase {
        JobPhase::Idle => None,
        JobPhase::Starting => Some(format!("job {job}: starting")),
        JobPhase::Running => {
            let Some(owned) = &view.owned else {
                return Some(format!("job {job}: waiting for its share of the group's partitions"));
            };
            let waiting: Vec<String> = owned
                .iter()
                .filter_map(|t| match view.tasks.get(t) {
                    Some(TaskState::Running | TaskState::Finished) => None,
                    Some(TaskState::Restoring) => Some(format!("{t} restoring")),
                    Some(_) | None => Some(format!("{t} not started")),
                })
                .collect();
            (!waiting.is_empty()).then(|| format!("job {job}: {}", waiting.join(", ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(sub: u32, partition: u32) -> TaskId {
        TaskId { sub_topology: sub, partition }
    }

    fn view(phase: JobPhase, owned: Option<&[TaskId]>, tasks: &[(TaskId, TaskState)]) -> JobView {
        JobView { job: "j".into(), phase, owned: owned.map(|o| o.iter().copied().collect()), tasks: tasks.iter().copied().collect() }
    }

    #[test]
    fn a_process_without_running_jobs_is_ready() {
        assert_eq!(readiness(&[]), Ok(()));
        assert_eq!(readiness(&[view(JobPhase::Idle, None, &[])]), Ok(()));
    }

    #[test]
    fn a_job_is_ready_once_every_task_it_owns_runs() {
        let (a, b) = (task(0, 0), task(1, 0));
        let not = |v: JobView| readiness(&[v]).unwrap_err().join("; ");
        assert!(not(view(JobPhase::Starting, None, &[])).contains("starting"));
        assert!(not(view(JobPhase::Running, None, &[])).contains("share of the group's partitions"));
        let restoring = not(view(JobPhase::Running, Some(&[a, b]), &[(a, TaskState::Running), (b, TaskState::Restoring)]));
        assert!(restoring.contains("1_0 restoring") && !restoring.contains("0_0"), "{restoring}");
        assert!(not(view(JobPhase::Running, Some(&[a, b]), &[(a, TaskState::Running)])).contains("1_0 not started"));
        assert!(not(view(JobPhase::Running, Some(&[a]), &[(a, TaskState::Suspended)])).contains("0_0 not started"));
        let done = view(JobPhase::Running, Some(&[a, b]), &[(a, TaskState::Running), (b, TaskState::Finished)]);
        assert_eq!(readiness(&[done]), Ok(()));
        // A copy the group gave nothing (more copies than tasks) serves.
        assert_eq!(readiness(&[view(JobPhase::Running, Some(&[]), &[])]), Ok(()));
        // A task still shown here but no longer owned does not count.
        assert_eq!(readiness(&[view(JobPhase::Running, Some(&[a]), &[(a, TaskState::Running), (b, TaskState::Restoring)])]), Ok(()));
    }

    #[test]
    fn every_job_not_ready_is_named() {
        let a = task(0, 0);
        let mut second = view(JobPhase::Running, Some(&[a]), &[]);
        second.job = "k".into();
        let reasons = readiness(&[view(JobPhase::Starting, None, &[]), second]).unwrap_err();
        assert_eq!(reasons.len(), 2);
        assert!(reasons[0].starts_with("job j") && reasons[1].starts_with("job k"), "{reasons:?}");
    }
}
