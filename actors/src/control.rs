//! The application's control topic (`__beam_<app>_control`, one partition):
//! how an operator asks every copy of a running application to drain
//! (`beam-kafka drain`). Its last record is what is asked: `drain` (stop
//! the sources where they are, truncate splittable DoFns' restrictions, let
//! event time reach the end so every window fires, end DONE). Kafka
//! carries it, so every copy sees it, including copies started after the
//! request; the drained job deletes the topic with its other topics.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use beam_kafka_config::RunnerOptions;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::sync::mpsc;

use crate::kafka::admin::{Admin, TopicSpec};
use crate::kafka::config;

pub const DRAIN: &[u8] = b"drain";

/// How often a running job looks for a request.
const WATCH_EVERY: Duration = Duration::from_millis(500);
const READ_TIMEOUT: Duration = Duration::from_secs(10);

pub fn control_topic(application_id: &str) -> String {
    format!("{}control", beam_kafka_runtime::topology::topic_prefix(application_id))
}

pub fn topic_spec(application_id: &str) -> TopicSpec {
    TopicSpec { name: control_topic(application_id), partitions: 1, compacted: false, keep_forever: false }
}

/// Writes a request (`DRAIN`), creating the topic if needed.
pub async fn request(opts: &RunnerOptions, what: &[u8]) -> Result<(), String> {
    let admin = Admin::connect(opts)?;
    admin.ensure_topics(&[topic_spec(&opts.application_id)], opts.topic_replication_factor).await?;
    let producer: FutureProducer = config::producer(opts).create().map_err(|e| format!("cannot create a Kafka producer: {e}"))?;
    let topic = control_topic(&opts.application_id);
    producer
        .send(FutureRecord::<(), [u8]>::to(&topic).partition(0).payload(what), READ_TIMEOUT)
        .await
        .map_err(|(e, _)| format!("cannot write to {topic}: {e}"))?;
    Ok(())
}

/// Reads the control topic's last record (`None`: nothing was ever asked).
struct Reader {
    consumer: BaseConsumer,
    topic: String,
    /// The end offset when last read.
    seen: i64,
}

impl Reader {
    fn new(opts: &RunnerOptions) -> Result<Reader, String> {
        let mut c = config::base(opts, "control");
        c.set("group.id", format!("{}-control", opts.application_id)).set("enable.auto.commit", "false");
        let consumer: BaseConsumer = c.create().map_err(|e| format!("cannot create the control topic's consumer: {e}"))?;
        Ok(Reader { consumer, topic: control_topic(&opts.application_id), seen: -1 })
    }

    /// The last record, if the topic grew since the last call.
    fn changed(&mut self) -> Result<Option<Vec<u8>>, String> {
        let (_, high) = self
            .consumer
            .fetch_watermarks(&self.topic, 0, READ_TIMEOUT)
            .map_err(|e| format!("cannot read the end of {}: {e}", self.topic))?;
        if high == self.seen || high == 0 {
            return Ok(None);
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Offset(high - 1)).map_err(|e| e.to_string())?;
        self.consumer.assign(&tpl).map_err(|e| format!("cannot read {}: {e}", self.topic))?;
        let deadline = std::time::Instant::now() + READ_TIMEOUT;
        while std::time::Instant::now() < deadline {
            match self.consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) if m.offset() == high - 1 => {
                    // Only a record read counts as seen: a failed read is tried again.
                    self.seen = high;
                    return Ok(Some(m.payload().unwrap_or_default().to_vec()));
                }
                Some(Ok(_)) | None => {}
                Some(Err(e)) => return Err(format!("cannot read {}: {e}", self.topic)),
            }
        }
        Err(format!("the last record of {} did not arrive within {READ_TIMEOUT:?}", self.topic))
    }
}

/// Whether a drain is asked now (read once, before a job starts its tasks,
/// so a job asked to drain before it ran runs drained from its first
/// element). A topic that cannot be read counts as nothing asked.
pub async fn drain_requested(opts: &RunnerOptions) -> bool {
    let opts = opts.clone();
    let read = tokio::task::spawn_blocking(move || Reader::new(&opts).and_then(|mut r| r.changed()));
    matches!(read.await, Ok(Ok(Some(v))) if v == DRAIN)
}

/// Watches the control topic until `stop`; sends once when a drain is
/// asked (at once if it already was). A topic that cannot be read is
/// retried: a drain is never the reason a job fails.
pub fn watch(opts: &RunnerOptions, stop: Arc<AtomicBool>) -> mpsc::UnboundedReceiver<()> {
    let (tx, rx) = mpsc::unbounded_channel();
    let opts = opts.clone();
    std::thread::spawn(move || {
        let mut reader = None;
        while !stop.load(Ordering::Acquire) {
            if reader.is_none() {
                reader = Reader::new(&opts).map_err(|e| tracing::warn!("{e}")).ok();
            }
            if let Some(r) = reader.as_mut() {
                match r.changed() {
                    Ok(Some(v)) if v == DRAIN => {
                        let _ = tx.send(());
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!("control topic: {e}"),
                }
            }
            std::thread::sleep(WATCH_EVERY);
        }
    });
    rx
}
