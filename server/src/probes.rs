//! What an orchestrator's probes ask of this process (`/healthz`,
//! `/readyz` on the status port): the jobs seen as readiness sees them.
use beam_kafka_proto::job_management as jm;
use beam_kafka_runtime::task::readiness::{readiness, JobPhase, JobView};
use jm::job_state::Enum as State;

use crate::jobs::{Job, Jobs};

/// `Ok` when every job this process runs runs every task the group gave
/// it, restored; else why not.
pub fn ready(jobs: &Jobs) -> Result<(), Vec<String>> {
    let views: Vec<JobView> = jobs.run_jobs().iter().map(|j| view(j)).collect();
    readiness(&views)
}

fn view(job: &Job) -> JobView {
    // A job run but not begun yet is STOPPED (`beam-kafka run` serves its
    // status before its one job begins): it is starting.
    let phase = match State::try_from(job.state().state) {
        Ok(State::Running | State::Draining | State::Cancelling) => JobPhase::Running,
        Ok(State::Done | State::Failed | State::Cancelled | State::Updated | State::Drained) => JobPhase::Idle,
        _ => JobPhase::Starting,
    };
    let board = job.board.get();
    JobView {
        job: job.id.clone(),
        phase,
        owned: board.and_then(|b| b.owned()),
        tasks: board.map(|b| b.tasks().into_iter().map(|(t, e)| (t, e.status.state)).collect()).unwrap_or_default(),
    }
}
