//! A copy of an earlier version stops once its application runs another.
//! An update starts only when no copy of another version reports
//! (`earlier_run`), but a copy that started a moment before it had not
//! reported yet: every copy watches the others' reports, and when one runs
//! another version of the pipeline, reads the plan record; once that
//! records another version than its own (and than the one its own update
//! replaces, on record until the update's record is written), this copy's
//! version was replaced, and it stops (its tasks go to the new version's
//! copies).
use std::sync::Arc;
use std::time::{Duration, Instant};

use beam_kafka_actors::status_board::now_ms;
use beam_kafka_proto::job_management::job_message::MessageImportance as Importance;
use beam_kafka_proto::job_management::job_state::Enum as State;
use beam_kafka_runtime::app::copies::{Presence, REPORT_EVERY_MS};
use beam_kafka_runtime::app::identity::Earlier;

use crate::jobs::Job;

/// How often the plan record is read while another version's copy runs.
const RECHECK: Duration = Duration::from_secs(10);

/// Watches while the job runs.
pub fn watch(job: &Arc<Job>) {
    let job = Arc::downgrade(job);
    tokio::spawn(async move {
        let mut checked: Option<Instant> = None;
        loop {
            tokio::time::sleep(Duration::from_millis(REPORT_EVERY_MS as u64)).await;
            let Some(job) = job.upgrade() else { return };
            if crate::jobs::is_terminal(job.state().state) {
                return;
            }
            let Some(own) = job.plan_fingerprint.get().cloned() else { continue };
            let now = now_ms();
            let others: Vec<String> = crate::copy_view::versions(&crate::copy_view::reports(&job))
                .into_iter()
                .filter(|(h, plan)| h.presence(now) == Some(Presence::Running) && plan.as_ref().is_some_and(|p| *p != own))
                .map(|(h, _)| h.copy)
                .collect();
            if others.is_empty() || checked.is_some_and(|t| t.elapsed() < RECHECK) {
                continue;
            }
            checked = Some(Instant::now());
            let Ok(Earlier::Plan { manifest, .. }) = beam_kafka_actors::identity::earlier_run(&job.runner_options).await else { continue };
            // Still the version this copy's update replaces: its own record
            // is on its way (a busy machine may take a while), and the other
            // version's copies are the ones to step down.
            let recorded = crate::earlier_run::fingerprint(&manifest);
            if recorded == own || job.replaces.get() == Some(&recorded) {
                continue;
            }
            let text = format!(
                "application '{}' now runs another version of the pipeline (an update; copies {}): this copy runs the \
                 version before and stops, leaving its tasks to them",
                job.runner_options.application_id,
                others.join(", ")
            );
            tracing::warn!(job = %job.id, "{text}");
            job.message(Importance::JobMessageError, text);
            job.set_state(State::Cancelling);
            job.cancel.send_replace(true);
            return;
        }
    });
}
