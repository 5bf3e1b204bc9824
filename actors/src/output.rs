//! Writing a stage's outputs (to shuffle topics and, through WriteToKafka,
//! to user topics) and a task's watermark reports. Elements are partitioned
//! by their key bytes with Kafka's murmur2, so every element of a key meets
//! at one task, and travel packed, many to a record.
use beam_kafka_runtime::kafka::failure::Failure;
use std::collections::HashMap;
use std::sync::Arc;

use beam_kafka_runtime::codec::packed::{Packer, PACK_BYTES};
use beam_kafka_runtime::codec::windowed;
use beam_kafka_runtime::kafka::partition::partition_for;
use beam_kafka_runtime::kafka::sink::SinkCodec;

use crate::kafka::producer::{self, KafkaProducer, ProducerSlot, Writes};
use beam_kafka_runtime::codec::envelope;
pub use beam_kafka_runtime::plan::spec::OutputSink;

/// A stage output written to a user's topic by WriteToKafka.
#[derive(Clone)]
pub struct KafkaSink {
    pub sink_transform: String,
    /// The WriteToKafka transform's user-visible name.
    pub name: String,
    pub codec: SinkCodec,
    pub producer: Arc<ProducerSlot>,
}

/// Records queued on producers, not yet acknowledged: the stage runs its
/// next bundle meanwhile (the producer keeps their order); a flush
/// (at_least_once) or the commit (exactly_once) waits for them.
#[derive(Default)]
pub struct Queued {
    pub records: u64,
    /// Each group with what its errors are prefixed with.
    groups: Vec<(&'static str, Writes)>,
}

impl Queued {
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Waits until Kafka acknowledged every record (or one write failed).
    pub async fn acknowledged(self) -> Result<(), Failure> {
        for (prefix, writes) in self.groups {
            writes.wait().await.map_err(|e| e.map_message(|m| format!("{prefix}{m}")))?;
        }
        Ok(())
    }
}

/// Splits each sink's encoded elements, packs them per partition
/// (`runtime::codec::packed`) and queues the packed records on `producer`.
/// A pack holds at most `pack_elements` elements (the job's bundle size).
pub async fn queue_outputs(
    queued: &mut Queued,
    producer: &KafkaProducer,
    sinks: &[OutputSink],
    outputs: HashMap<String, Vec<u8>>,
    pack_elements: usize,
) -> Result<(), Failure> {
    for (transform, data) in &outputs {
        queue_elements(queued, producer, sinks, transform, data, pack_elements, false).await?;
    }
    Ok(())
}

/// Queues `data`, encoded elements of sink transform `transform`, on every
/// sink of it (one PCollection can go to several topics: an edge and a side
/// topic). With `whole_only` the data may end mid-element, and only the
/// whole elements at its start are queued. Returns how many bytes were
/// (the same for every sink: they share the PCollection's coders).
pub async fn queue_elements(
    queued: &mut Queued,
    producer: &KafkaProducer,
    sinks: &[OutputSink],
    transform: &str,
    data: &[u8],
    pack_elements: usize,
    whole_only: bool,
) -> Result<usize, Failure> {
    let writes = Writes::new();
    let mut records = 0u64;
    let mut spread = rand_start();
    let mut taken = 0;
    for sink in sinks.iter().filter(|s| s.sink_transform == transform) {
        let mut packer = Packer::new(PACK_BYTES, pack_elements);
        let mut at = 0;
        while at < data.len() {
            let rest = &data[at..];
            let extent = match windowed::extent(rest, &sink.window_coder, &sink.element_coder) {
                Ok(e) => e,
                Err(_) if whole_only => break,
                Err(e) => return Err(Failure::fatal(e)),
            };
            let key = &rest[extent.key];
            // Keyless elements (an edge between stages) and split
            // restrictions are spread evenly.
            let partition = if key.is_empty() && sink.in_order {
                0
            } else if key.is_empty() || sink.spread {
                spread = spread.wrapping_add(1);
                spread % sink.partitions.max(1)
            } else {
                partition_for(key, sink.partitions)
            };
            if let Some((partition, pack)) = packer.push(partition, &rest[..extent.len]) {
                writes.send(producer, &sink.topic, partition, None, Some(&envelope::batch(pack))).await?;
                records += 1;
            }
            at += extent.len;
        }
        for (partition, pack) in packer.finish() {
            writes.send(producer, &sink.topic, partition, None, Some(&envelope::batch(pack))).await?;
            records += 1;
        }
        taken = at;
    }
    queued.records += records;
    if records > 0 {
        queued.groups.push(("", writes));
    }
    Ok(taken)
}

/// Where a bundle starts spreading keyless elements, so small bundles do not
/// all start at partition 0.
fn rand_start() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
}

/// Queues each Kafka sink's elements on its producer, for its topic.
pub async fn queue_kafka_sinks(queued: &mut Queued, sinks: &[KafkaSink], outputs: &mut HashMap<String, Vec<u8>>) -> Result<(), Failure> {
    for sink in sinks {
        let Some(data) = outputs.remove(&sink.sink_transform) else { continue };
        let writes = Writes::new();
        let producer = sink.producer.current();
        let default_topic = sink.codec.spec.topic.as_str();
        let mut at = 0;
        while at < data.len() {
            let (rec, len) = sink.codec.decode(&data[at..]).map_err(|e| Failure::fatal(format!("WriteToKafka '{}': {e}", sink.name)))?;
            at += len;
            let topic = rec.topic.as_deref().unwrap_or(default_topic);
            let headers = (!rec.headers.is_empty()).then(|| producer::headers(&rec.headers));
            writes
                .send_record(&producer, topic, rec.key.as_deref(), rec.value.as_deref(), |mut r| {
                    if let Some(h) = &headers {
                        r = r.headers(h.clone());
                    }
                    if let Some(p) = rec.partition {
                        r = r.partition(p);
                    }
                    if let Some(ts) = rec.timestamp {
                        r = r.timestamp(ts);
                    }
                    r
                })
                .await
                .map_err(|e| e.within(format_args!("WriteToKafka '{}'", sink.name)))?;
            queued.records += 1;
        }
        queued.groups.push(("WriteToKafka: ", writes));
    }
    Ok(())
}

/// Queues a watermark report (an encoded envelope) to every partition of
/// `topic`.
pub async fn queue_watermark_report(
    queued: &mut Queued,
    producer: &KafkaProducer,
    topic: &str,
    partitions: u32,
    payload: &[u8],
) -> Result<(), Failure> {
    let writes = Writes::new();
    for p in 0..partitions {
        writes.send(producer, topic, p, None, Some(payload)).await?;
    }
    queued.records += partitions as u64;
    queued.groups.push(("", writes));
    Ok(())
}
