//! The producer every task writes with, and a group of writes awaited
//! together.
//!
//! rdkafka's `FutureProducer` gives each record its own boxed one-shot
//! channel and future; at a million records that bookkeeping cost more CPU
//! than producing itself (measured with perf on a GroupByKey of 1M
//! elements). Here a record carries a reference to its group's counter
//! instead: sending costs one atomic increment, a delivery one decrement,
//! and a group is awaited as a whole.
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use beam_kafka_runtime::kafka::failure::{Failure, BROKERS};
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, ProducerContext};
use tokio::sync::Notify;

use super::producer_poll::DeliveryPoller;

/// The runner's producer: deliveries are counted per [`Writes`] group and
/// served by a thread librdkafka wakes (`producer_poll`). It derefs to
/// rdkafka's `BaseProducer` (sending, transactions).
pub struct KafkaProducer {
    // Declared first: the thread stops before the producer is released.
    _poller: DeliveryPoller,
    producer: Arc<BaseProducer<Tracking>>,
}

impl std::ops::Deref for KafkaProducer {
    type Target = BaseProducer<Tracking>;

    fn deref(&self) -> &BaseProducer<Tracking> {
        &self.producer
    }
}

/// Creates a [`KafkaProducer`] from a client configuration.
pub fn create(config: &ClientConfig) -> KafkaResult<KafkaProducer> {
    let producer = Arc::new(BaseProducer::from_config_and_context(config, Tracking)?);
    let poller = DeliveryPoller::start(producer.clone())
        .map_err(|e| KafkaError::ClientCreation(format!("cannot start the producer's delivery thread: {e}")))?;
    Ok(KafkaProducer { _poller: poller, producer })
}

/// How long a group may wait for Kafka to acknowledge its records.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// Routes each delivery report to its record's group.
pub struct Tracking;

impl ClientContext for Tracking {}

impl ProducerContext for Tracking {
    type DeliveryOpaque = Arc<Group>;

    fn delivery(&self, result: &DeliveryResult<'_>, group: Arc<Group>) {
        match result {
            Ok(m) => {
                group.last_offset.fetch_max(m.offset(), Ordering::AcqRel);
            }
            Err((e, _)) => {
                let mut first = group.error.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert_with(|| super::failure::failure(e));
            }
        }
        if group.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            group.drained.notify_one();
        }
    }
}

/// The shared part of a [`Writes`]: records not yet acknowledged, the first
/// failure, the highest offset written.
pub struct Group {
    pending: AtomicUsize,
    error: Mutex<Option<Failure>>,
    last_offset: AtomicI64,
    drained: Notify,
}

/// Records written together and awaited together (a bundle's outputs, a
/// cycle's state changes).
pub struct Writes {
    group: Arc<Group>,
}

impl Default for Writes {
    fn default() -> Self {
        Writes::new()
    }
}

impl Group {
    /// Records queued and not yet acknowledged (or failed).
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }
}

impl Writes {
    /// The group, to know later whether its records landed (held weakly:
    /// the records in flight keep it alive, nothing else need).
    pub fn watch(&self) -> std::sync::Weak<Group> {
        Arc::downgrade(&self.group)
    }

    pub fn new() -> Writes {
        Writes {
            group: Arc::new(Group {
                pending: AtomicUsize::new(0),
                error: Mutex::new(None),
                last_offset: AtomicI64::new(-1),
                drained: Notify::new(),
            }),
        }
    }

    /// Queues one record (a `None` payload is a tombstone), waiting for room
    /// when the producer's queue is full.
    pub async fn send(
        &self,
        producer: &KafkaProducer,
        topic: &str,
        partition: u32,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
    ) -> Result<(), Failure> {
        self.send_record(producer, topic, key, payload, |r| r.partition(partition as i32)).await
    }

    /// Queues one record shaped by `shape` (partition, headers, timestamp).
    pub async fn send_record<'a>(
        &self,
        producer: &KafkaProducer,
        topic: &'a str,
        key: Option<&'a [u8]>,
        payload: Option<&'a [u8]>,
        shape: impl Fn(BaseRecord<'a, [u8], [u8], Arc<Group>>) -> BaseRecord<'a, [u8], [u8], Arc<Group>>,
    ) -> Result<(), Failure> {
        loop {
            let mut record = BaseRecord::with_opaque_to(topic, self.group.clone());
            if let Some(k) = key {
                record = record.key(k);
            }
            if let Some(p) = payload {
                record = record.payload(p);
            }
            self.group.pending.fetch_add(1, Ordering::AcqRel);
            match producer.send(shape(record)) {
                Ok(()) => return Ok(()),
                Err((e, _)) => {
                    // Not queued: no delivery report will come for it.
                    self.group.pending.fetch_sub(1, Ordering::AcqRel);
                    match e {
                        KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull) => self.make_room().await?,
                        e => return Err(super::failure::failure(&e).within(format_args!("cannot write to {topic}"))),
                    }
                }
            }
        }
    }

    /// Waits until some queued records are delivered: ours if any are in
    /// flight, else (another group filled the queue) briefly.
    async fn make_room(&self) -> Result<(), Failure> {
        if self.group.pending.load(Ordering::Acquire) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            return Ok(());
        }
        self.wait().await.map(|_| ())
    }

    /// Waits for every record of the group; returns the highest offset
    /// written, if any.
    pub async fn wait(&self) -> Result<Option<i64>, Failure> {
        let drained = async {
            while self.group.pending.load(Ordering::Acquire) > 0 {
                // A delivery that empties the group between the check and
                // here leaves a permit, so this never misses the wake-up.
                self.group.drained.notified().await;
            }
        };
        tokio::time::timeout(DELIVERY_TIMEOUT, drained).await.map_err(|_| {
            Failure::transient(format!("Kafka did not acknowledge writes within {} s", DELIVERY_TIMEOUT.as_secs()), BROKERS)
        })?;
        if let Some(e) = self.group.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e.within("a write to Kafka failed"));
        }
        let last = self.group.last_offset.load(Ordering::Acquire);
        Ok((last >= 0).then_some(last))
    }
}

/// Headers for a record, copied per send (librdkafka takes ownership).
pub fn headers(pairs: &[(String, Option<Vec<u8>>)]) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new();
    for (k, v) in pairs {
        headers = headers.insert(rdkafka::message::Header { key: k, value: v.as_deref() });
    }
    headers
}

/// The producer a task and its stage write through, looked up at each
/// write: the copy's transaction may give it a new transactional producer
/// between two of its commits (when the task whose id the old one carried
/// moves to another copy, whose start would fence it), and its members
/// write on with the new one without stopping.
pub struct ProducerSlot(std::sync::RwLock<Arc<KafkaProducer>>);

impl ProducerSlot {
    pub fn new(producer: Arc<KafkaProducer>) -> Arc<ProducerSlot> {
        Arc::new(ProducerSlot(std::sync::RwLock::new(producer)))
    }

    /// The producer to write with now. Take it only once writing is
    /// allowed (under exactly_once, after the commit before): a swap
    /// happens between a commit and the members' next writes.
    pub fn current(&self) -> Arc<KafkaProducer> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts `producer` in; returns the one it replaces.
    pub fn replace(&self, producer: Arc<KafkaProducer>) -> Arc<KafkaProducer> {
        std::mem::replace(&mut *self.0.write().unwrap_or_else(|p| p.into_inner()), producer)
    }
}
