//! What a running job tells its user: the job's events become its messages,
//! state and metrics; its SDK harnesses' warnings and errors become warning
//! messages (less the ones that are no news to the user).
use std::sync::Arc;

use beam_kafka_actors::JobEvent;
use beam_kafka_fnapi::SdkLog;
use beam_kafka_proto::fn_execution as fn_pb;
use beam_kafka_proto::job_management as jm;
use jm::job_message::MessageImportance as Importance;
use jm::job_state::Enum as State;
use tokio::sync::{mpsc, oneshot};

use crate::jobs::Job;
use crate::user_metrics;

/// Hands the job's events to its clients until the job's thread ends; on
/// `flush`, handles every event already sent, then acknowledges.
pub async fn forward_events(job: Arc<Job>, mut rx: mpsc::UnboundedReceiver<JobEvent>, mut flush: oneshot::Receiver<oneshot::Sender<()>>) {
    let mut flush_pending = true;
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(ev) => forward_event(&job, ev),
                None => return,
            },
            asked = &mut flush, if flush_pending => {
                flush_pending = false;
                if let Ok(ack) = asked {
                    while let Ok(ev) = rx.try_recv() {
                        forward_event(&job, ev);
                    }
                    let _ = ack.send(());
                }
            }
        }
    }
}

fn forward_event(job: &Job, ev: JobEvent) {
    match ev {
        JobEvent::Info(text) => {
            tracing::info!(job = %job.id, "{text}");
            job.message(Importance::JobMessageBasic, text);
        }
        JobEvent::Draining(text) => {
            tracing::info!(job = %job.id, "{text}");
            job.message(Importance::JobMessageBasic, text);
            job.set_state(State::Draining);
        }
        JobEvent::Metrics(infos) => {
            let mut metrics = job.metrics.lock().unwrap_or_else(|e| e.into_inner());
            metrics.attempted.add(infos.clone());
            user_metrics::export(&infos, "attempted", &job.attributes(), &metrics.attempted);
        }
        JobEvent::CommittedMetrics(infos) => {
            let mut metrics = job.metrics.lock().unwrap_or_else(|e| e.into_inner());
            metrics.committed.add(infos.clone());
            user_metrics::export(&infos, "committed", &job.attributes(), &metrics.committed);
        }
    }
}

/// SDK warnings and errors reach the user's console through the job's
/// messages, as warnings: the client raises the text of the last
/// JOB_MESSAGE_ERROR, which must be the job's own failure.
pub async fn forward_logs(job: Arc<Job>, mut rx: mpsc::UnboundedReceiver<SdkLog>) {
    use fn_pb::log_entry::severity::Enum as Severity;
    while let Some(log) = rx.recv().await {
        let importance = match Severity::try_from(log.severity).unwrap_or(Severity::Unspecified) {
            Severity::Error | Severity::Critical => Importance::JobMessageWarning,
            Severity::Warn => Importance::JobMessageWarning,
            _ => continue,
        };
        if echoes_a_job_message(&log.message, &job.id) {
            continue;
        }
        if reports_the_harness_own_channels(&log.message) {
            tracing::debug!(job = %job.id, "SDK harness: {}", log.message);
            continue;
        }
        let text = if log.trace.is_empty() { log.message } else { format!("{}\n{}", log.message, log.trace) };
        job.message(importance, text);
    }
}

/// A LOOPBACK Go program prints each job message it receives with Beam's
/// logger, `(time=…)(id=<message id>)<text>`, and in LOOPBACK that logger is
/// the harness's: the line comes back as an SDK log. Forwarding it again
/// would echo forever, each time one prefix deeper.
fn echoes_a_job_message(line: &str, job_id: &str) -> bool {
    line.contains(&format!("(id={job_id}-"))
}

/// gRPC's report that Beam's Java harness left one of its own channels to
/// the garbage collector: a leak of the SDK, nothing about the pipeline, and
/// it came with a stack trace on every Java job.
fn reports_the_harness_own_channels(line: &str) -> bool {
    line.contains("was garbage collected without being shut down")
}

#[cfg(test)]
mod tests {
    use super::{echoes_a_job_message, reports_the_harness_own_channels};

    #[test]
    fn grpc_reports_of_the_harness_own_channels_are_not_job_messages() {
        let report = "*~*~*~ Previous channel ManagedChannelImpl{logId=9, target=127.0.0.1:42709} was garbage collected \
                      without being shut down! ~*~*~*";
        assert!(reports_the_harness_own_channels(report));
        assert!(!reports_the_harness_own_channels("user code failed: NullPointerException"));
    }

    #[test]
    fn a_job_message_printed_back_by_the_harness_is_an_echo() {
        let job = "go-testpardo-735-f58b";
        assert!(echoes_a_job_message("(time=2026-12-03T06:40:00Z)(id=go-testpardo-735-f58b-17)SDK warning: slow", job));
        assert!(!echoes_a_job_message("a user's warning about id=7", job));
        assert!(!echoes_a_job_message("(id=other-job-3)text", job));
    }
}
