//! Where a starting task's partitions begin: each is paused and sought to
//! its last commit, read only after the task's producer fenced earlier
//! owners (so it is final). A task never starts from where the job's
//! shared consumer happens to be.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use beam_kafka_runtime::kafka::failure::Failure;
use beam_kafka_runtime::kafka::topic_partition::TopicPartition;
use rdkafka::consumer::Consumer;
use rdkafka::TopicPartitionList;

use crate::kafka::failure::failure;
use crate::kafka::rebalance::{Assignment, JobConsumer};

/// Puts the consumer of `partitions` at their last commit, paused, and
/// returns each partition's start. A task always starts from its commit:
/// never from where the shared consumer happened to be, which is past any
/// record the poll loop took and dropped while no task owned the partition
/// (librdkafka counts those as consumed). Called after the task's producer
/// fenced earlier owners, so the commit read is final (read_committed asks
/// the coordinator for stable offsets). A partition without a commit starts
/// at `fallback` (a source's first-run offset) or at its beginning.
/// `None`: one of the partitions changed hands meanwhile.
pub(crate) async fn seek_to_commits(
    consumer: &Arc<JobConsumer>,
    partitions: &[TopicPartition],
    fallback: &HashMap<TopicPartition, i64>,
    assignment: Arc<Assignment>,
    seen: u64,
    stop: Arc<AtomicBool>,
) -> Result<Option<HashMap<TopicPartition, rdkafka::Offset>>, Failure> {
    // Fetchers start within milliseconds of their assignment; the patience
    // covers a broker that is slow to answer the fetcher's first offset
    // request (a restart, a leader moving).
    const PATIENCE: Duration = Duration::from_secs(150);
    const WARN_AFTER: Duration = Duration::from_secs(10);
    let mut tpl = TopicPartitionList::new();
    for tp in partitions {
        tpl.add_partition(&tp.topic, tp.partition);
    }
    consumer.pause(&tpl).map_err(|e| failure(&e).within(format_args!("cannot pause {partitions:?}")))?;
    let consumer = consumer.clone();
    let fallback: HashMap<TopicPartition, i64> = partitions.iter().filter_map(|k| fallback.get(k).map(|o| (k.clone(), *o))).collect();
    let watched = partitions.to_vec();
    let moved = move || assignment.any_changed_since(&watched, seen) || stop.load(Ordering::Acquire);
    tokio::task::spawn_blocking(move || {
        let committed =
            consumer.committed_offsets(tpl, Duration::from_secs(30)).map_err(|e| failure(&e).within("cannot read committed offsets"))?;
        let mut starts = HashMap::new();
        let began = Instant::now();
        let deadline = began + PATIENCE;
        let mut warned = false;
        for e in committed.elements() {
            let key = TopicPartition::new(e.topic(), e.partition());
            let to = match e.offset() {
                rdkafka::Offset::Offset(o) if o >= 0 => Some(o),
                _ => fallback.get(&key).copied(),
            };
            let offset = to.map_or(rdkafka::Offset::Beginning, rdkafka::Offset::Offset);
            // A partition can be sought only once its fetcher started, which
            // librdkafka does just after the assignment (kafka::rebalance
            // assigns at an explicit offset, so it looks no commit up).
            loop {
                match consumer.seek(e.topic(), e.partition(), offset, Duration::from_secs(30)) {
                    Ok(()) => break,
                    // Moved, ending, or no longer this process's: a
                    // partition's fetcher never starts where librdkafka
                    // does not own it.
                    Err(_) if moved() || !is_assigned(&consumer, &key) => return Ok(None),
                    Err(err) if fetcher_not_started(&err) && Instant::now() < deadline => {
                        if !warned && began.elapsed() > WARN_AFTER {
                            warned = true;
                            tracing::warn!(
                                "{}[{}]: librdkafka has not started fetching it after {:?} ({err}); still waiting",
                                e.topic(),
                                e.partition(),
                                began.elapsed()
                            );
                        }
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    Err(err) => {
                        return Err(failure(&err).within(format_args!(
                            "cannot move to the last commit of {}[{}]",
                            e.topic(),
                            e.partition()
                        )))
                    }
                }
            }
            starts.insert(key, offset);
        }
        Ok(if moved() { None } else { Some(starts) })
    })
    .await
    .map_err(|e| Failure::fatal(format!("moving to the last commits failed: {e}")))?
}

/// Whether librdkafka has `partition` assigned to this process now.
fn is_assigned(consumer: &JobConsumer, partition: &TopicPartition) -> bool {
    consumer
        .assignment()
        .is_ok_and(|tpl| tpl.elements().iter().any(|e| e.partition() == partition.partition && e.topic() == partition.topic))
}

/// librdkafka's answer to a seek on a partition whose fetcher is not
/// running yet (or is stopping).
fn fetcher_not_started(err: &rdkafka::error::KafkaError) -> bool {
    let text = err.to_string();
    text.contains("Erroneous state") || text.contains("Previous operation in progress")
}
