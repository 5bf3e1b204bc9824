//! Writing a stage's outputs (to shuffle topics and, through WriteToKafka,
//! to user topics) and a task's watermark reports. Records are keyed by the element's key bytes and partitioned with
//! Kafka's murmur2, so every element of a key meets at one task.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use beam_kafka_runtime::coder::Coder;
use beam_kafka_runtime::partition::partition_for;
use beam_kafka_runtime::timestamp::Watermark;
use beam_kafka_runtime::windowed;
use futures::future::try_join_all;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use beam_kafka_runtime::kafka_sink::SinkCodec;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};

use crate::envelope;

/// One stage output and the topic it goes to.
#[derive(Clone, Debug)]
pub struct OutputSink {
    pub sink_transform: String,
    pub topic: String,
    pub partitions: u32,
    pub window_coder: Coder,
    pub element_coder: Coder,
}

/// A stage output written to a user's topic by WriteToKafka.
#[derive(Clone)]
pub struct KafkaSink {
    pub sink_transform: String,
    /// The WriteToKafka transform's user-visible name.
    pub name: String,
    pub codec: SinkCodec,
    pub producer: Arc<FutureProducer>,
}

const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// Queues one record (a `None` payload is a tombstone), waiting for room
/// when the producer's queue is full.
pub async fn enqueue(
    producer: &FutureProducer,
    topic: &str,
    partition: u32,
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    pending: &mut Vec<DeliveryFuture>,
) -> Result<(), String> {
    loop {
        let mut record = FutureRecord::<[u8], [u8]>::to(topic).partition(partition as i32);
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(p) = payload {
            record = record.payload(p);
        }
        match producer.send_result(record) {
            Ok(f) => {
                pending.push(f);
                return Ok(());
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                // Let deliveries drain before queueing more.
                await_all(std::mem::take(pending)).await?;
            }
            Err((e, _)) => return Err(format!("cannot write to {topic}: {e}")),
        }
    }
}

pub async fn await_all(pending: Vec<DeliveryFuture>) -> Result<(), String> {
    await_last_offset(pending).await.map(|_| ())
}

/// Waits for every delivery; returns the highest offset written, if any.
pub async fn await_last_offset(pending: Vec<DeliveryFuture>) -> Result<Option<i64>, String> {
    let results = tokio::time::timeout(DELIVERY_TIMEOUT, try_join_all(pending))
        .await
        .map_err(|_| format!("Kafka did not acknowledge writes within {} s", DELIVERY_TIMEOUT.as_secs()))?
        .map_err(|_| "a write to Kafka was cancelled".to_string())?;
    let mut last = None;
    for r in results {
        match r {
            Ok(delivery) => last = last.max(Some(delivery.offset)),
            Err((e, _)) => return Err(format!("a write to Kafka failed: {e}")),
        }
    }
    Ok(last)
}

/// Splits each sink's encoded elements and writes them; returns once Kafka
/// acknowledged every record.
pub async fn write_outputs(
    producer: &FutureProducer,
    sinks: &[OutputSink],
    outputs: HashMap<String, Vec<u8>>,
) -> Result<(), String> {
    let mut pending = Vec::new();
    let mut spread = rand_start();
    for sink in sinks {
        // One PCollection can go to several topics (an edge and a side topic).
        let Some(data) = outputs.get(&sink.sink_transform) else { continue };
        let mut at = 0;
        while at < data.len() {
            let rest = &data[at..];
            let h = windowed::split(rest, &sink.window_coder)?;
            let (key, value_len) = match &sink.element_coder {
                Coder::Kv(k, v) => {
                    let kl = k.skip(&rest[h.value_offset..])?;
                    let vl = v.skip(&rest[h.value_offset + kl..])?;
                    (&rest[h.value_offset..h.value_offset + kl], kl + vl)
                }
                other => (&rest[..0], other.skip(&rest[h.value_offset..])?),
            };
            let len = h.value_offset + value_len;
            // Keyless elements (an edge between stages) are spread evenly.
            let partition = if key.is_empty() {
                spread = spread.wrapping_add(1);
                spread % sink.partitions.max(1)
            } else {
                partition_for(key, sink.partitions)
            };
            let payload = envelope::data(rest[..len].to_vec());
            enqueue(producer, &sink.topic, partition, Some(key), Some(&payload), &mut pending).await?;
            at += len;
        }
    }
    await_all(pending).await
}

/// Where a bundle starts spreading keyless elements, so small bundles do not
/// all start at partition 0.
fn rand_start() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
}

/// Writes each Kafka sink's elements to its topic; returns once Kafka
/// acknowledged every record.
pub async fn write_kafka_sinks(sinks: &[KafkaSink], outputs: &mut HashMap<String, Vec<u8>>) -> Result<(), String> {
    let mut pending = Vec::new();
    for sink in sinks {
        let Some(data) = outputs.remove(&sink.sink_transform) else { continue };
        let default_topic = sink.codec.spec.topic.as_str();
        let mut at = 0;
        while at < data.len() {
            let (rec, len) = sink.codec.decode(&data[at..]).map_err(|e| format!("WriteToKafka '{}': {e}", sink.name))?;
            at += len;
            let topic = rec.topic.as_deref().unwrap_or(default_topic);
            let mut headers = OwnedHeaders::new();
            for (k, v) in &rec.headers {
                headers = headers.insert(Header { key: k, value: v.as_deref() });
            }
            loop {
                let mut record = FutureRecord::<[u8], [u8]>::to(topic).headers(headers.clone());
                if let Some(k) = rec.key.as_deref() {
                    record = record.key(k);
                }
                if let Some(v) = rec.value.as_deref() {
                    record = record.payload(v);
                }
                if let Some(p) = rec.partition {
                    record = record.partition(p);
                }
                if let Some(ts) = rec.timestamp {
                    record = record.timestamp(ts);
                }
                match sink.producer.send_result(record) {
                    Ok(f) => {
                        pending.push(f);
                        break;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => await_all(std::mem::take(&mut pending)).await?,
                    Err((e, _)) => return Err(format!("WriteToKafka '{}' cannot write to {topic}: {e}", sink.name)),
                }
            }
        }
    }
    await_all(pending).await.map_err(|e| format!("WriteToKafka: {e}"))
}

/// Broadcasts a watermark report to every partition of `topic`.
pub async fn report_watermark(
    producer: &FutureProducer,
    topic: &str,
    partitions: u32,
    wm: Watermark,
    source: &str,
    source_partition: u32,
    source_total: u32,
) -> Result<(), String> {
    let payload = envelope::watermark(wm, source, source_partition, source_total);
    let mut pending = Vec::new();
    for p in 0..partitions {
        enqueue(producer, topic, p, None, Some(&payload), &mut pending).await?;
    }
    await_all(pending).await
}
