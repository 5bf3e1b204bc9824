//! An incremental revocation (`--group_protocol=consumer`): the tasks of
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
pub(crate) fn hand_over(revocation: Revocation, moving: Vec<LiveTask>, consumer: Arc<JobConsumer>, assignment: Arc<Assignment>, opts: &RunnerOptions) {
    let began = Instant::now();
    let at_least_once = opts.processing_guarantee == ProcessingGuarantee::AtLeastOnce;
    let application_id = opts.application_id.clone();
    let waits: Vec<_> = moving
        .iter()
        .map(|t| {
            let (done, said) = tokio::sync::oneshot::channel();
            t.addr.do_send(HandOver { done });
            said
        })
        .collect();
    actix_rt::spawn(async move {
        // A task that stops another way drops its sender: that ends its wait too.
        if tokio::time::timeout(PATIENCE, futures::future::join_all(waits)).await.is_err() {
            tracing::warn!(
                "tasks {:?} did not commit within {PATIENCE:?} of their partitions being asked back; stopping them without committing",
                moving.iter().map(|t| t.task).collect::<Vec<_>>()
            );
            for t in &moving {
                t.addr.do_send(Shutdown);
            }
        }
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
