//! The poll loop: takes records from Kafka in batches and routes each batch to
//! the mailbox of the task that owns its partition (routes change as the
//! group moves partitions between copies of the application).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::Recipient;
use dashmap::DashMap;
use futures::FutureExt;

use crate::kafka::rebalance::JobConsumer;
use beam_kafka_runtime::failure;
use rdkafka::message::{Headers, Message};

use crate::messages::{InputRecord, RecordBatch};

/// How long one wait for the first record of a batch may last.
const IDLE_REPOLL: Duration = Duration::from_millis(500);

pub struct PollSettings {
    pub max_records: usize,
    pub max_wait: Duration,
}

/// Routes until the consumer fails fatally; transient errors are logged and
/// retried by librdkafka itself.
pub async fn poll_loop(
    consumer: Arc<JobConsumer>,
    routes: Arc<DashMap<(String, i32), Recipient<RecordBatch>>>,
    settings: PollSettings,
    generation: Arc<AtomicU64>,
) -> String {
    loop {
        // A bounded wait, then a fresh recv: a StreamConsumer can miss a
        // wake-up (rust-rdkafka #665, #848), and that must not stall a job.
        let first = match tokio::time::timeout(IDLE_REPOLL, consumer.recv()).await {
            Err(_) => continue,
            Ok(Ok(m)) => input_record(&m),
            Ok(Err(e)) => {
                // Refused credentials or permissions end the job with their
                // fix; anything else librdkafka retries on its own.
                let text = format!("the job's Kafka consumer failed: {e}");
                if failure::is_access_denied(&text) {
                    return failure::explain(&text);
                }
                tracing::warn!("Kafka consumer: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        // A record returned after an assignment change is current: the
        // change purged what librdkafka had queued for the old assignment.
        let mut seen = generation.load(Ordering::Acquire);
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + settings.max_wait;
        while batch.len() < settings.max_records {
            // Records already queued are taken without arming a timer (one
            // per record cost more than the rest of the loop); the bounded
            // wait is only for when none is ready.
            let next = match consumer.recv().now_or_never() {
                Some(r) => r,
                None => match tokio::time::timeout_at(deadline, consumer.recv()).await {
                    Ok(r) => r,
                    Err(_) => break,
                },
            };
            match next {
                Ok(m) => {
                    // The assignment changed while this batch was collected
                    // (eager rebalancing revokes every partition): what came
                    // before is stale, what came with or after it is current.
                    let now = generation.load(Ordering::Acquire);
                    if now != seen {
                        tracing::debug!("dropping {} record(s) taken before an assignment change", batch.len());
                        batch.clear();
                        seen = now;
                    }
                    batch.push(input_record(&m))
                }
                Err(e) => {
                    tracing::warn!("Kafka consumer: {e}");
                    break;
                }
            }
        }
        if generation.load(Ordering::Acquire) != seen {
            // Changed during the last wait: nothing taken so far is current.
            continue;
        }
        tracing::debug!("polled {} record(s)", batch.len());
        // Few partitions per batch: a list beats hashing every record's topic.
        let mut per_task: Vec<Vec<InputRecord>> = Vec::new();
        for r in batch {
            match per_task.iter_mut().find(|g| g[0].partition == r.partition && g[0].topic == r.topic) {
                Some(g) => g.push(r),
                None => per_task.push(vec![r]),
            }
        }
        for records in per_task {
            let key = (records[0].topic.clone(), records[0].partition);
            match routes.get(&key) {
                Some(task) => task.do_send(RecordBatch { records }),
                // Revoked while in flight: its new owner reads it again from
                // the last commit.
                None => tracing::debug!("dropping {} record(s) of {}[{}]: no task owns it here now", records.len(), key.0, key.1),
            }
        }
    }
}

/// Copies a record out of librdkafka's buffer (once).
fn input_record<M: Message>(m: &M) -> InputRecord {
    let headers = m.headers().map(|hs| hs.iter().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec))).collect()).unwrap_or_default();
    InputRecord {
        topic: m.topic().to_string(),
        partition: m.partition(),
        offset: m.offset(),
        key: m.key().map(<[u8]>::to_vec),
        payload: m.payload().map(<[u8]>::to_vec),
        timestamp: m.timestamp(),
        headers,
    }
}
