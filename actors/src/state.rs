//! A task's durable state on Kafka: its sub-topology's compacted changelog
//! topic, partition = the task's partition. Written in the task's commit
//! cycle (inside its transaction under exactly_once), read back in full when
//! the task starts, so a restarted job resumes its GroupByKey buffers and
//! watermark progress where it committed.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use beam_kafka_config::RunnerOptions;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::FutureProducer;
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka::config;
use crate::output::{await_all, enqueue_keyed};

const RESTORE_TIMEOUT: Duration = Duration::from_secs(120);

/// The latest value of every key in one changelog partition (tombstones
/// applied). Reads committed data only. Blocks: call off the actor thread.
pub fn read_changelog(opts: &RunnerOptions, topic: &str, partition: i32) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, String> {
    let consumer: BaseConsumer = config::base(opts, "restore")
        .set("group.id", format!("{}-restore", opts.application_id))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .map_err(|e| format!("cannot create the state restore consumer: {e}"))?;
    let mut state = BTreeMap::new();
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, Duration::from_secs(10))
        .map_err(|e| format!("cannot read the offsets of {topic}[{partition}]: {e}"))?;
    if high <= low {
        return Ok(state);
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Beginning).map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| format!("cannot read {topic}[{partition}]: {e}"))?;
    let deadline = Instant::now() + RESTORE_TIMEOUT;
    loop {
        if Instant::now() > deadline {
            return Err(format!("restoring state from {topic}[{partition}] took longer than {} s", RESTORE_TIMEOUT.as_secs()));
        }
        match consumer.poll(Duration::from_millis(500)) {
            None => continue,
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(state),
            Some(Err(e)) => return Err(format!("cannot read {topic}[{partition}]: {e}")),
            Some(Ok(m)) => {
                let Some(key) = m.key() else { continue };
                match m.payload() {
                    Some(v) => state.insert(key.to_vec(), v.to_vec()),
                    None => state.remove(key),
                };
            }
        }
    }
}

/// Writes state changes (a `None` value deletes the key) to the task's
/// changelog partition; returns once Kafka acknowledged them.
pub async fn write_changelog(
    producer: &FutureProducer,
    topic: &str,
    partition: u32,
    changes: &[(Vec<u8>, Option<Vec<u8>>)],
) -> Result<(), String> {
    let mut pending = Vec::new();
    for (k, v) in changes {
        enqueue_keyed(producer, topic, partition, k, v.as_deref(), &mut pending).await?;
    }
    await_all(pending).await
}
