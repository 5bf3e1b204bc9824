//! The application's control topic (`__beam_<app>_control`, one partition):
//! what every copy of a running application must hear. Two kinds of
//! record: a request (`beam-kafka drain`: stop the sources where they are,
//! truncate splittable DoFns' restrictions, let event time reach the end so
//! every window fires, end DONE), and a terminal task's end (key
//! `finished`, the task id): a bounded or drained job run as several copies
//! is DONE in each copy once every terminal task finished in any of them.
//! Kafka carries both, so every copy sees them, including copies started
//! later; the finished job deletes the topic with its other topics.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use beam_kafka_config::RunnerOptions;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::sync::mpsc;

use beam_kafka_runtime::plan::topology::TaskId;

use crate::kafka::admin::{Admin, TopicSpec};
use crate::kafka::config;

pub const DRAIN: &[u8] = b"drain";
const FINISHED_KEY: &[u8] = b"finished";

/// What a copy hears on the control topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Control {
    Drain,
    /// A terminal task finished (in this copy or another).
    Finished(TaskId),
}

/// What one record of the control topic says (`None`: nothing known).
fn read_record(key: Option<&[u8]>, value: &[u8]) -> Option<Control> {
    match key {
        Some(FINISHED_KEY) => std::str::from_utf8(value).ok()?.parse().ok().map(Control::Finished),
        None if value == DRAIN => Some(Control::Drain),
        _ => None,
    }
}

/// How often a running job looks for a request.
const WATCH_EVERY: Duration = Duration::from_millis(500);
const READ_TIMEOUT: Duration = Duration::from_secs(10);

pub fn control_topic(application_id: &str) -> String {
    format!("{}control", beam_kafka_runtime::plan::topology::topic_prefix(application_id))
}

pub fn topic_spec(application_id: &str) -> TopicSpec {
    TopicSpec { name: control_topic(application_id), partitions: 1, compacted: false, keep_forever: false, segment_ms: None, grows: false }
}

/// Writes a request (`DRAIN`), creating the topic if needed.
pub async fn request(opts: &RunnerOptions, what: &[u8]) -> Result<(), String> {
    let admin = Admin::connect(opts)?;
    admin.ensure_topics(&[topic_spec(&opts.application_id)], opts.topic_replication_factor, config::batch_max_bytes(opts)).await?;
    let producer: FutureProducer = config::producer(opts).create().map_err(|e| format!("cannot create a Kafka producer: {e}"))?;
    let topic = control_topic(&opts.application_id);
    producer
        .send(FutureRecord::<(), [u8]>::to(&topic).partition(0).payload(what), READ_TIMEOUT)
        .await
        .map_err(|(e, _)| format!("cannot write to {topic}: {e}"))?;
    Ok(())
}

/// Says on the control topic that a terminal task finished here.
pub async fn announce_finished(opts: &RunnerOptions, task: TaskId) -> Result<(), String> {
    let producer: FutureProducer = config::producer(opts).create().map_err(|e| format!("cannot create a Kafka producer: {e}"))?;
    let topic = control_topic(&opts.application_id);
    let value = task.to_string();
    producer
        .send(FutureRecord::to(&topic).partition(0).key(FINISHED_KEY).payload(value.as_bytes()), READ_TIMEOUT)
        .await
        .map_err(|(e, _)| format!("cannot write to {topic}: {e}"))?;
    Ok(())
}

/// Reads the control topic's records as they come.
struct Reader {
    consumer: BaseConsumer,
    topic: String,
    /// The offset of the next record to read.
    next: i64,
}

impl Reader {
    fn new(opts: &RunnerOptions) -> Result<Reader, String> {
        let consumer: BaseConsumer =
            config::topic_reader(opts, "control").create().map_err(|e| format!("cannot create the control topic's consumer: {e}"))?;
        Ok(Reader { consumer, topic: control_topic(&opts.application_id), next: 0 })
    }

    fn topic_exists(&self) -> Result<bool, String> {
        Ok(crate::kafka::partition_count(&self.consumer, &self.topic, READ_TIMEOUT)?.is_some_and(|n| n > 0))
    }

    /// What the records written since the last call say.
    fn changed(&mut self) -> Result<Vec<Control>, String> {
        let (low, high) = self
            .consumer
            .fetch_watermarks(&self.topic, 0, READ_TIMEOUT)
            .map_err(|e| format!("cannot read the end of {}: {e}", self.topic))?;
        let from = self.next.max(low);
        if high <= from {
            return Ok(Vec::new());
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Offset(from)).map_err(|e| e.to_string())?;
        self.consumer.assign(&tpl).map_err(|e| format!("cannot read {}: {e}", self.topic))?;
        let mut out = Vec::new();
        let deadline = std::time::Instant::now() + READ_TIMEOUT;
        while std::time::Instant::now() < deadline {
            match self.consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    out.extend(read_record(m.key(), m.payload().unwrap_or_default()));
                    if m.offset() + 1 >= high {
                        // Only records read count as seen: a failed read is tried again.
                        self.next = high;
                        return Ok(out);
                    }
                }
                None => {}
                Some(Err(e)) => return Err(format!("cannot read {}: {e}", self.topic)),
            }
        }
        Err(format!("the records of {} up to {high} did not arrive within {READ_TIMEOUT:?}", self.topic))
    }
}

/// Whether a drain is asked now (read once, before a job starts its tasks,
/// so a job asked to drain before it ran runs drained from its first
/// element). A topic that cannot be read counts as nothing asked.
pub async fn drain_requested(opts: RunnerOptions) -> bool {
    let read = tokio::task::spawn_blocking(move || {
        let mut reader = Reader::new(&opts)?;
        // Asked as the job starts, before it creates its topics: a topic
        // missing now had no drain written to it. Reading its end would wait
        // for the topic this job is creating (up to ~0.7 s, seen), and the
        // job's first assignment waits for this answer.
        let said = if reader.topic_exists()? { reader.changed() } else { Ok(Vec::new()) };
        crate::kafka::close_in_background(reader);
        said
    });
    matches!(read.await, Ok(Ok(said)) if said.contains(&Control::Drain))
}

/// Watches the control topic until `stop`, sending what it says: a drain
/// once (at once if it was already asked), and every terminal task that
/// finished (those of earlier copies first). A topic that cannot be read
/// is retried: the control topic is never the reason a job fails.
pub fn watch(opts: &RunnerOptions, stop: Arc<AtomicBool>) -> mpsc::UnboundedReceiver<Control> {
    let (tx, rx) = mpsc::unbounded_channel();
    let opts = opts.clone();
    std::thread::spawn(move || {
        let mut reader = None;
        let mut drain_sent = false;
        while !stop.load(Ordering::Acquire) {
            if reader.is_none() {
                reader = Reader::new(&opts).map_err(|e| tracing::warn!("{e}")).ok();
            }
            if let Some(r) = reader.as_mut() {
                match r.changed() {
                    Ok(said) => {
                        for c in said {
                            if c == Control::Drain && std::mem::replace(&mut drain_sent, true) {
                                continue;
                            }
                            if tx.send(c).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => tracing::debug!("control topic: {e}"),
                }
            }
            std::thread::sleep(WATCH_EVERY);
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_say_a_drain_or_a_finished_task_and_nothing_else() {
        assert_eq!(read_record(None, DRAIN), Some(Control::Drain));
        assert_eq!(read_record(Some(FINISHED_KEY), b"3_1"), Some(Control::Finished(TaskId { sub_topology: 3, partition: 1 })));
        assert_eq!(read_record(Some(FINISHED_KEY), b"junk"), None);
        assert_eq!(read_record(None, b"resume"), None, "an unknown request is not a drain");
        assert_eq!(read_record(Some(b"other"), DRAIN), None);
    }
}
