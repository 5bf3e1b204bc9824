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
use beam_kafka_runtime::kafka::failure::{Failure, Recovery};
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

/// Whether the producer is dead because a newer incarnation fenced it (its
/// pending writes then fail as purged, whatever their own error says).
pub fn producer_fenced(producer: &KafkaProducer) -> bool {
    use rdkafka::types::RDKafkaErrorCode as Code;
    matches!(producer.client().fatal_error(), Some((Code::Fenced | Code::ProducerFenced | Code::InvalidProducerEpoch, _)))
}

/// The error with its code name: a transaction error shows only librdkafka's
/// description ("Broker: Not coordinator"); the name tells the user (and
/// `Failure::from_text`, where the error goes on as text) which it is.
pub fn describe(e: &KafkaError) -> String {
    match e.rdkafka_error_code() {
        Some(code) => format!("{e} [{code:?}]"),
        None => e.to_string(),
    }
}

/// `e` judged by its code, worded with its code name after `context`.
fn judged(e: &KafkaError, context: std::fmt::Arguments<'_>) -> Failure {
    let recovery = super::failure::failure(e).recovery;
    Failure { message: format!("{context}: {}", describe(e)), recovery }
}

/// A transactional call's error with Kafka Streams' recovery meanings:
/// fenced (another copy took the task over: stop), retriable (the same
/// call again), abortable (Kafka aborted the transaction: its outputs are
/// gone and its inputs are processed again from the last commit), else
/// what its code says.
fn txn_failure(e: KafkaError) -> Failure {
    let judged = super::failure::failure(&e);
    let text = describe(&e);
    match &e {
        _ if judged.recovery == Recovery::Migrated => {
            Failure::migrated(format!("another copy of the application took this task over (fenced): {text}"))
        }
        KafkaError::Transaction(t) if t.is_retriable() => Failure::retry(format!("the commit can be retried: {text}")),
        KafkaError::Transaction(t) if t.txn_requires_abort() => Failure::aborted(format!("Kafka aborted the transaction: {text}")),
        _ => Failure { message: format!("the transactional producer failed: {text}"), recovery: judged.recovery },
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
pub fn fence(opts: &RunnerOptions, task: TaskId) -> Result<(), Failure> {
    let producer = start_producer(opts, task)?;
    crate::kafka::close_in_background(producer);
    Ok(())
}

/// Creates a producer with `task`'s transactional id, fences earlier
/// holders of the id and opens the first transaction. Blocks: call off the
/// actor thread.
pub fn start(opts: &RunnerOptions, task: TaskId) -> Result<Arc<KafkaProducer>, Failure> {
    let producer = start_producer(opts, task)?;
    producer.begin_transaction().map_err(|e| judged(&e, format_args!("task {task}: cannot begin a transaction")))?;
    Ok(Arc::new(producer))
}

/// A client of this process reached `cluster` for the first time after
/// `took`: the quick initialisations' pacing until one is timed.
pub fn first_contact(cluster: &str, took: Duration) {
    INIT_PACING.entry(cluster.to_string()).or_default().first_contact(took);
}

fn start_producer(opts: &RunnerOptions, task: TaskId) -> Result<KafkaProducer, Failure> {
    let id = transactional_id(&opts.application_id, task);
    let mut c = config::producer(opts);
    c.set("transactional.id", &id).set("transaction.timeout.ms", opts.transaction_timeout_ms.to_string());
    // librdkafka refuses a delivery timeout longer than the transaction's.
    let delivery: u64 = c.get("message.timeout.ms").and_then(|v| v.parse().ok()).unwrap_or(30_000);
    c.set("message.timeout.ms", delivery.min(opts.transaction_timeout_ms).to_string());
    let create = || producer::create(&c).map_err(|e| judged(&e, format_args!("task {task}: cannot create its transactional producer")));
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
            Err(e) => return Err(judged(&e, format_args!("task {task}: cannot initialise transactions ({id})"))),
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
) -> Result<(), Failure> {
    tokio::task::spawn_blocking(move || {
        if offsets.count() > 0 {
            let group = group.ok_or_else(|| Failure::retry("the consumer has not joined its group yet"))?;
            producer.send_offsets_to_transaction(&offsets, &group, API_TIMEOUT).map_err(txn_failure)?;
        }
        producer.commit_transaction(API_TIMEOUT).map_err(txn_failure)?;
        producer.begin_transaction().map_err(txn_failure)
    })
    .await
    .map_err(|e| Failure::fatal(format!("the commit task panicked: {e}")))?
}
