//! The records of a job's impulse topics: one impulse element and a +∞
//! watermark report each, written once per application (an earlier run or
//! copy that wrote them leaves its tasks to resume from their commits).
//!
//! In one transaction, so an impulse topic holds both of its records or
//! neither. (A transactional producer also gets its producer id sooner than
//! a merely idempotent one: librdkafka retries that on a 500 ms timer.) The
//! transaction is set up while the job creates its topics (`begin`), and
//! written and committed while the group join runs (`write`).
use std::time::Duration;

use beam_kafka_runtime::codec::coders::impulse_element;
use beam_kafka_runtime::codec::timestamp::Watermark;
use beam_kafka_runtime::plan::topology::{TopicKind, TopicPlan};
use rdkafka::producer::Producer;

use crate::job_input::JobInput;
use crate::kafka::admin::Admin;
use crate::kafka::config;
use crate::kafka::producer::{self as kafka_producer, KafkaProducer, Writes};
use beam_kafka_runtime::codec::envelope;

/// An impulse transaction begun, and the topics it is for.
pub struct Begun {
    producer: Option<KafkaProducer>,
    topics: Vec<TopicPlan>,
}

/// Finds the impulse topics no run wrote yet (a topic not created yet is
/// one) and, if any, begins their transaction.
pub async fn begin(admin: &Admin, input: &JobInput) -> Result<Begun, String> {
    let mut fresh = Vec::new();
    for topic in input.plan.topics.iter().filter(|t| matches!(t.kind, TopicKind::Impulse | TopicKind::Empty)) {
        let written = match admin.partitions(&topic.name)? {
            Some(_) => admin.end_offset(&topic.name, 0).await? > 0,
            None => false,
        };
        if !written {
            fresh.push(topic.clone());
        }
    }
    if fresh.is_empty() {
        return Ok(Begun { producer: None, topics: fresh });
    }
    let opts = &input.options;
    let mut config = config::producer(opts);
    config.set("transactional.id", format!("{}-bootstrap", opts.application_id));
    let producer = kafka_producer::create(&config).map_err(|e| format!("cannot create a Kafka producer: {e}"))?;
    let began = std::time::Instant::now();
    let producer = tokio::task::spawn_blocking(move || {
        producer.init_transactions(Duration::from_secs(30)).and_then(|_| producer.begin_transaction()).map(|_| producer)
    })
    .await
    .map_err(|e| format!("writing the impulse failed: {e}"))?
    .map_err(|e| format!("cannot start the impulse transaction: {e}"))?;
    tracing::debug!("the impulse's transaction began after {:?}", began.elapsed());
    Ok(Begun { producer: Some(producer), topics: fresh })
}

/// Writes the begun impulses (the topics exist by now) and commits them.
pub async fn write(begun: Begun) -> Result<(), String> {
    let Some(producer) = begun.producer else { return Ok(()) };
    let writes = Writes::new();
    for topic in &begun.topics {
        let end = envelope::watermark(Watermark::PosInf, &topic.upstream, 0, 1);
        // An empty Flatten's topic holds the end of event time alone.
        let records = if topic.kind == TopicKind::Empty { vec![end] } else { vec![envelope::data(impulse_element()), end] };
        for payload in records {
            writes.send(&producer, &topic.name, 0, None, Some(&payload)).await?;
        }
    }
    writes.wait().await?;
    tokio::task::spawn_blocking(move || producer.commit_transaction(Duration::from_secs(30)))
        .await
        .map_err(|e| format!("writing the impulse failed: {e}"))?
        .map_err(|e| format!("cannot commit the impulse: {e}"))
}
