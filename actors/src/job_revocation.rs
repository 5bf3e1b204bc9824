//! Partitions taken from this copy. Eagerly, their tasks stop at once
//! (`runtime::task::membership`). An incremental revocation (`--group_protocol=consumer`): the tasks of
//! the partitions the group asks back commit a last cycle and stop
//! (`task::HandOver`), and only then does the copy give the partitions up,
//! which is when the group hands them to their next owner. Tasks whose
//! partitions stay keep running and committing throughout, as Kafka
//! Streams commits every task in its revocation callback.
use std::sync::Arc;
use std::time::{Duration, Instant};

use beam_kafka_config::{ProcessingGuarantee, RunnerOptions};

use crate::kafka::rebalance::{Assignment, JobConsumer, Revocation};
use crate::messages::Shutdown;
use crate::task::HandOver;
use crate::task_start::LiveTask;

/// How long the moving tasks may take to commit before they are stopped
/// without committing (their next owner redoes what they did since their
/// last commit) and the partitions given up anyway: well within the
/// group's rebalance timeout, after which the brokers would drop the copy.
const PATIENCE: Duration = Duration::from_secs(30);

/// Hands `moving` (the tasks of `revocation`'s partitions) over, then gives
/// the partitions up. Runs on its own: the job goes on meanwhile.
pub(crate) fn hand_over(
    revocation: Revocation,
    moving: Vec<LiveTask>,
    consumer: Arc<JobConsumer>,
    assignment: Arc<Assignment>,
    opts: &RunnerOptions,
) {
    let began = Instant::now();
    let at_least_once = opts.processing_guarantee == ProcessingGuarantee::AtLeastOnce;
    let application_id = opts.application_id.clone();
    actix_rt::spawn(async move {
        commit_and_stop(&moving, PATIENCE, "of their partitions being asked back").await;
        // Without transactions the next owner must find every changelog
        // write of theirs when it restores.
        if at_least_once {
            let waited = tokio::task::spawn_blocking(move || crate::state::wait_for_changelog_writes(&application_id)).await;
            if let Ok(Err(e)) = waited {
                tracing::warn!("handing partitions over without waiting further: {e}");
            }
        }
        tracing::debug!("handed over tasks {:?} after {:?}", moving.iter().map(|t| t.task).collect::<Vec<_>>(), began.elapsed());
        revocation.complete(&consumer, &assignment);
    });
}

/// A copy stopping (SIGTERM, a cancel) or planning again: its running
/// tasks commit what they did before it leaves the group, so their next
/// owners (or their next incarnations here) redo nothing and no
/// transaction is aborted. Bounded: a stop is never held long.
pub(crate) async fn commit_before_stopping(running: &[LiveTask]) {
    commit_and_stop(running, STOP_PATIENCE, "of the copy stopping").await;
}

/// How long a stopping copy waits for its tasks' last commits.
const STOP_PATIENCE: Duration = Duration::from_secs(10);

/// Asks each task to commit a last cycle and stop; those that have not
/// within `patience` are stopped without committing.
async fn commit_and_stop(tasks: &[LiveTask], patience: Duration, why: &str) {
    let waits: Vec<_> = tasks
        .iter()
        .map(|t| {
            let (done, said) = tokio::sync::oneshot::channel();
            t.addr.do_send(HandOver { done });
            said
        })
        .collect();
    // A task that stops another way drops its sender: that ends its wait too.
    if tokio::time::timeout(patience, futures::future::join_all(waits)).await.is_err() {
        tracing::warn!(
            "tasks {:?} did not commit within {patience:?} {why}; stopping them without committing",
            tasks.iter().map(|t| t.task).collect::<Vec<_>>()
        );
        for t in tasks {
            t.addr.do_send(Shutdown);
        }
    }
}
