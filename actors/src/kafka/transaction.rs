//! Kafka transactions (processing_guarantee=exactly_once): every record the
//! tasks of a copy write (shuffle outputs, watermark reports, WriteToKafka
//! records on the runner's cluster) and the input offsets they consumed
//! commit together, or not at all (`copy_transaction` runs the rounds).
//!
//! Transactional ids are stable per (application, task): the copy's
//! producer carries the id of one task it owns, and a copy starting a task
//! initialises that task's id first, so it fences whichever earlier
//! producer carried it (a zombie) and aborts what that one left open.
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use beam_kafka_config::RunnerOptions;
use beam_kafka_runtime::plan::topology::TaskId;
use beam_kafka_runtime::task::txn_init::InitPacing;
use dashmap::DashMap;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::TopicPartitionList;

use crate::kafka::config;
use crate::kafka::producer::{self, KafkaProducer};

/// How long one call of the transactional API may block (not the
/// transaction's own timeout, which is `transaction_timeout_ms`).
const API_TIMEOUT: Duration = Duration::from_secs(60);

/// How long initialising a transactional id takes, per cluster (by its
/// bootstrap servers): the first attempts' deadlines follow it.
static INIT_PACING: LazyLock<DashMap<String, InitPacing>> = LazyLock::new(DashMap::new);

/// Why a commit failed, with Kafka Streams' recovery meanings.
#[derive(Debug)]
pub enum TxnError {
    /// Try the same commit again (a coordinator moved, a request timed out).
    Retriable(String),
    /// Another process took the task over (fenced): this one must stop.
    TaskMigrated(String),
    /// The transaction was aborted: its outputs are gone and its inputs must
    /// be processed again from the last commit.
    Aborted(String),
    Fatal(String),
}

impl std::fmt::Display for TxnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TxnError::Retriable(e) => write!(f, "the commit can be retried: {e}"),
            TxnError::TaskMigrated(e) => write!(f, "another copy of the application took this task over (fenced): {e}"),
            TxnError::Aborted(e) => write!(f, "Kafka aborted the transaction ({e}); restart the job to resume from its last commit"),
            TxnError::Fatal(e) => write!(f, "the transactional producer failed: {e}"),
        }
    }
}

/// Whether an error (as text, after it travelled through a write path) says
/// this producer was fenced by a newer incarnation of its task: librdkafka
/// reports `_FENCED` ("fenced by a newer instance") or the broker's
/// `PRODUCER_FENCED` / `INVALID_PRODUCER_EPOCH` ("old epoch").
pub fn is_fenced(error: &str) -> bool {
    let e = error.to_ascii_lowercase();
    e.contains("fenced") || e.contains("old epoch") || e.contains("producer epoch")
}

/// Whether the producer is dead because a newer incarnation fenced it (its
/// pending writes then fail as purged, whatever their own error says).
pub fn producer_fenced(producer: &KafkaProducer) -> bool {
    use rdkafka::types::RDKafkaErrorCode as Code;
    matches!(producer.client().fatal_error(), Some((Code::Fenced | Code::ProducerFenced | Code::InvalidProducerEpoch, _)))
}

/// The error with its code name: a transaction error shows only librdkafka's
/// description ("Broker: Not coordinator"), and `failure::classify` reads
/// code names.
pub fn describe(e: &KafkaError) -> String {
    match e.rdkafka_error_code() {
        Some(code) => format!("{e} [{code:?}]"),
        None => e.to_string(),
    }
}

fn classify(e: KafkaError) -> TxnError {
    let text = describe(&e);
    match &e {
        _ if is_fenced(&text) => TxnError::TaskMigrated(text),
        KafkaError::Transaction(t) if t.is_retriable() => TxnError::Retriable(text),
        KafkaError::Transaction(t) if t.txn_requires_abort() => TxnError::Aborted(text),
        _ => TxnError::Fatal(text),
    }
}

fn init_may_be_retried(e: &KafkaError) -> bool {
    match e {
        KafkaError::Transaction(t) => {
            t.is_retriable() || matches!(t.code(), RDKafkaErrorCode::OperationTimedOut | RDKafkaErrorCode::ConcurrentTransactions)
        }
        _ => false,
    }
}

pub fn transactional_id(application_id: &str, task: TaskId) -> String {
    format!("{application_id}-task-{task}")
}

/// Whether the producer can no longer write (fenced, or a fatal error).
pub fn producer_fatal(producer: &KafkaProducer) -> bool {
    producer.client().fatal_error().is_some()
}

/// Fences whichever producer last carried `task`'s transactional id and
/// aborts what it left open. Blocks: call off the actor thread.
pub fn fence(opts: &RunnerOptions, task: TaskId) -> Result<(), String> {
    let producer = start_producer(opts, task)?;
    crate::kafka::close_in_background(producer);
    Ok(())
}

/// Creates a producer with `task`'s transactional id, fences earlier
/// holders of the id and opens the first transaction. Blocks: call off the
/// actor thread.
pub fn start(opts: &RunnerOptions, task: TaskId) -> Result<Arc<KafkaProducer>, String> {
    let producer = start_producer(opts, task)?;
    producer.begin_transaction().map_err(|e| format!("task {task}: cannot begin a transaction: {}", describe(&e)))?;
    Ok(Arc::new(producer))
}

/// A client of this process reached `cluster` for the first time after
/// `took`: the quick initialisations' pacing until one is timed.
pub fn first_contact(cluster: &str, took: Duration) {
    INIT_PACING.entry(cluster.to_string()).or_default().first_contact(took);
}

fn start_producer(opts: &RunnerOptions, task: TaskId) -> Result<KafkaProducer, String> {
    let id = transactional_id(&opts.application_id, task);
    let mut c = config::producer(opts);
    c.set("transactional.id", &id).set("transaction.timeout.ms", opts.transaction_timeout_ms.to_string());
    // librdkafka refuses a delivery timeout longer than the transaction's.
    let delivery: u64 = c.get("message.timeout.ms").and_then(|v| v.parse().ok()).unwrap_or(30_000);
    c.set("message.timeout.ms", delivery.min(opts.transaction_timeout_ms).to_string());
    let create = || producer::create(&c).map_err(|e| format!("task {task}: cannot create its transactional producer: {}", describe(&e)));
    let cluster = opts.bootstrap_servers.clone();
    let quick = INIT_PACING.get(&cluster).map(|p| p.deadlines()).unwrap_or_else(|| InitPacing::default().deadlines());
    let began = Instant::now();
    let mut left = quick.len();
    // The quick attempts, then one that waits as long as the API allows.
    for deadline in quick.into_iter().chain([API_TIMEOUT]) {
        let producer = create()?;
        let attempt = Instant::now();
        match producer.init_transactions(deadline) {
            Ok(()) => {
                INIT_PACING.entry(cluster).or_default().succeeded(attempt.elapsed());
                tracing::debug!(task = %task, "transactions of {id} initialised in {:?}", began.elapsed());
                return Ok(producer);
            }
            // At its deadline librdkafka reports the last refusal it is
            // waiting out (CONCURRENT_TRANSACTIONS while the coordinator
            // aborts what the id's last holder left open): a fresh producer
            // asks again now (`txn_init`).
            Err(e) if left > 0 && init_may_be_retried(&e) => {
                tracing::debug!(task = %task, "initialising {id}: an attempt with {deadline:?} ended after {:?} ({e}); asking again", attempt.elapsed());
                crate::kafka::close_in_background(producer)
            }
            Err(e) => return Err(format!("task {task}: cannot initialise transactions ({id}): {}", describe(&e))),
        }
        left -= 1;
    }
    unreachable!("the last attempt returns")
}

/// Commits the open transaction with `offsets` as the consumed input, then
/// opens the next one. Runs on the blocking pool.
pub async fn commit(
    producer: Arc<KafkaProducer>,
    offsets: TopicPartitionList,
    group: Option<ConsumerGroupMetadata>,
) -> Result<(), TxnError> {
    tokio::task::spawn_blocking(move || {
        if offsets.count() > 0 {
            let group = group.ok_or_else(|| TxnError::Retriable("the consumer has not joined its group yet".into()))?;
            producer.send_offsets_to_transaction(&offsets, &group, API_TIMEOUT).map_err(classify)?;
        }
        producer.commit_transaction(API_TIMEOUT).map_err(classify)?;
        producer.begin_transaction().map_err(classify)
    })
    .await
    .map_err(|e| TxnError::Fatal(format!("the commit task panicked: {e}")))?
}
