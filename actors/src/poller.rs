//! The poll loop: takes records from Kafka in batches and routes each batch to
//! the mailbox of the task that owns its partition (routes change as the
//! group moves partitions between copies of the application).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::Recipient;
use dashmap::DashMap;
use futures::FutureExt;

use crate::kafka::rebalance::{Assignment, JobConsumer};
use beam_kafka_runtime::kafka::failure;
use beam_kafka_runtime::kafka::topic_partition::TopicPartition;
use rdkafka::message::{Headers, Message};

use crate::messages::{payload_bytes, InputRecord, RecordBatch};
use beam_kafka_runtime::task::flow::PAUSE_AT_BYTES;

/// Where each input partition's records go: the mailbox of the task that
/// owns it here, and when that route was set.
///
/// A batch the poll loop holds across an await may contain records polled
/// before a task (re)started on their partition: its start sought the
/// partition back to the last commit, and librdkafka delivers everything
/// from there again, but those earlier records are already out of the
/// client. Delivered to the new task first, they would move its position
/// past the records the seek brings back, which it would then skip as
/// already seen, and commit as read: a loss. So every record carries the
/// route clock's reading when it was polled, and a route takes only records
/// polled after it was set (its start's seek came just before, with no
/// await between, so those are of the fresh fetch).
#[derive(Default)]
pub struct Routes {
    routes: DashMap<TopicPartition, Route>,
    clock: AtomicU64,
}

struct Route {
    to: Recipient<RecordBatch>,
    since: u64,
    mailbox: Arc<Mailbox>,
}

/// What the poll loop sent a task and the task has not taken yet. A task
/// pauses its partitions when its own queue is full, but only once it
/// handles its mail: one busy starting would otherwise be sent a backlog's
/// worth (seen: 500k records, 270 MB, in 0.7 s). So past a bound the poll
/// loop pauses the partition itself, and the task resumes it as it resumes
/// its own pauses (seeking back to what it received).
#[derive(Default)]
pub struct Mailbox {
    records: AtomicU64,
    bytes: AtomicU64,
    paused: AtomicBool,
}

impl Mailbox {
    /// The task took a batch of this many records and payload bytes.
    pub fn taken(&self, records: u64, bytes: u64) {
        let _ = self.records.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n.saturating_sub(records)));
        let _ = self.bytes.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n.saturating_sub(bytes)));
    }

    /// Whether the poll loop paused the task's partitions since last asked.
    pub fn take_pause(&self) -> bool {
        self.paused.swap(false, Ordering::AcqRel)
    }

    /// Counts a delivery; true when it takes the mailbox past its bound
    /// for the first time since the task last took a pause.
    fn delivered(&self, records: u64, bytes: u64, max_records: u64) -> bool {
        let n = self.records.fetch_add(records, Ordering::AcqRel) + records;
        let b = self.bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        (n > max_records || b > PAUSE_AT_BYTES) && !self.paused.swap(true, Ordering::AcqRel)
    }
}

impl Routes {
    /// Routes `partition` to `to` (whose untaken mail `mailbox` counts),
    /// for records polled from now on.
    pub fn set(&self, partition: TopicPartition, to: Recipient<RecordBatch>, mailbox: Arc<Mailbox>) {
        let since = self.clock.fetch_add(1, Ordering::AcqRel) + 1;
        self.routes.insert(partition, Route { to, since, mailbox });
    }

    pub fn remove(&self, partition: &TopicPartition) {
        self.routes.remove(partition);
    }

    /// The clock's reading, to stamp a record polled now.
    fn now(&self) -> u64 {
        self.clock.load(Ordering::Acquire)
    }

    /// Sends a partition's `records` (each with its stamp) to its task,
    /// but those polled before its route was set; returns how many went,
    /// and whether the task's mailbox just passed `max_mail` records (or
    /// its bytes bound).
    fn deliver(&self, partition: &TopicPartition, records: Vec<(u64, InputRecord)>, max_mail: u64) -> (usize, bool) {
        let Some(route) = self.routes.get(partition) else {
            // Revoked while in flight: its new owner reads it again from the
            // last commit.
            tracing::debug!(
                "dropping {} record(s) of {}[{}]: no task owns it here now",
                records.len(),
                partition.topic,
                partition.partition
            );
            return (0, false);
        };
        let polled = records.len();
        let records: Vec<InputRecord> = records.into_iter().filter(|(stamp, _)| *stamp >= route.since).map(|(_, r)| r).collect();
        if records.len() < polled {
            tracing::debug!(
                "dropping {} record(s) of {}[{}] polled before its task started (it reads them again from its last commit)",
                polled - records.len(),
                partition.topic,
                partition.partition
            );
        }
        let sent = records.len();
        if sent == 0 {
            return (0, false);
        }
        let bytes = payload_bytes(&records);
        route.to.do_send(RecordBatch { records, bytes });
        (sent, route.mailbox.delivered(sent as u64, bytes, max_mail))
    }
}

/// How long one wait for the first record of a batch may last.
const IDLE_REPOLL: Duration = Duration::from_millis(500);

pub struct PollSettings {
    pub max_records: usize,
    pub max_wait: Duration,
}

/// Routes until the consumer fails fatally; transient errors are logged and
/// retried by librdkafka itself.
pub async fn poll_loop(consumer: Arc<JobConsumer>, routes: Arc<Routes>, settings: PollSettings, assignment: Arc<Assignment>) -> String {
    loop {
        // A bounded wait, then a fresh recv: a StreamConsumer can miss a
        // wake-up (rust-rdkafka #665, #848), and that must not stall a job.
        let first = match tokio::time::timeout(IDLE_REPOLL, consumer.recv()).await {
            Err(_) => continue,
            Ok(Ok(m)) => (routes.now(), input_record(&m)),
            Ok(Err(e)) => {
                // Refused credentials or permissions end the job with their
                // fix; anything else librdkafka retries on its own.
                let refused = e.rdkafka_error_code().map(crate::kafka::failure::code_name).is_some_and(|c| failure::is_access_denied(&c));
                if refused {
                    return crate::kafka::failure::failure(&e).within("the job's Kafka consumer failed").explain();
                }
                tracing::warn!("Kafka consumer: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        // A record returned after an assignment change is current: the
        // change purged what librdkafka had queued for the partitions it moved.
        let mut seen = assignment.now();
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + settings.max_wait;
        while batch.len() < settings.max_records {
            // Records already queued are taken without arming a timer (one
            // per record cost more than the rest of the loop); the bounded
            // wait is only for when none is ready.
            let next = match consumer.recv().now_or_never() {
                Some(r) => r,
                None => match tokio::time::timeout_at(deadline, consumer.recv()).await {
                    Ok(r) => r,
                    Err(_) => break,
                },
            };
            match next {
                Ok(m) => {
                    // The assignment changed while this batch was collected:
                    // what came before of the partitions that changed hands
                    // is stale, what came with or after it is current.
                    seen = drop_stale(&mut batch, &assignment, seen);
                    batch.push((routes.now(), input_record(&m)))
                }
                Err(e) => {
                    tracing::warn!("Kafka consumer: {e}");
                    break;
                }
            }
        }
        // Changed during the last wait: nothing taken so far of the
        // partitions that moved is current.
        drop_stale(&mut batch, &assignment, seen);
        if batch.is_empty() {
            continue;
        }
        tracing::debug!("polled {} record(s)", batch.len());
        // Few partitions per batch: a list beats hashing every record's topic.
        let mut per_task: Vec<Vec<(u64, InputRecord)>> = Vec::new();
        for r in batch {
            match per_task.iter_mut().find(|g| g[0].1.partition == r.1.partition && g[0].1.topic == r.1.topic) {
                Some(g) => g.push(r),
                None => per_task.push(vec![r]),
            }
        }
        // A task's mailbox holds 32 polls' worth at most: a task that
        // resumed gets a fetch or more ahead (a 1 MB fetch of small records
        // is ten polls), and every pause drops what librdkafka had fetched
        // for the partition, so the bound must only catch a task that
        // does not take its mail.
        let max_mail = 32 * settings.max_records as u64;
        for records in per_task {
            let key = TopicPartition::new(records[0].1.topic.clone(), records[0].1.partition);
            if routes.deliver(&key, records, max_mail).1 {
                let mut tpl = rdkafka::TopicPartitionList::new();
                tpl.add_partition(&key.topic, key.partition);
                tracing::debug!("pausing {}[{}]: its task has not taken what it was sent", key.topic, key.partition);
                if let Err(e) = rdkafka::consumer::Consumer::pause(&*consumer, &tpl) {
                    tracing::debug!("cannot pause {}[{}]: {e}", key.topic, key.partition);
                }
            }
        }
    }
}

/// Drops the records of `batch` whose partition changed hands since tick
/// `seen`; returns the tick now.
fn drop_stale(batch: &mut Vec<(u64, InputRecord)>, assignment: &Assignment, seen: u64) -> u64 {
    let now = assignment.now();
    if now != seen {
        let before = batch.len();
        batch.retain(|(_, r)| !assignment.changed_since(&TopicPartition::new(r.topic.clone(), r.partition), seen));
        if batch.len() < before {
            tracing::debug!("dropping {} record(s) taken before their partition changed hands", before - batch.len());
        }
    }
    now
}

/// Copies a record out of librdkafka's buffer (once).
fn input_record<M: Message>(m: &M) -> InputRecord {
    let headers = m.headers().map(|hs| hs.iter().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec))).collect()).unwrap_or_default();
    InputRecord {
        topic: m.topic().to_string(),
        partition: m.partition(),
        offset: m.offset(),
        key: m.key().map(<[u8]>::to_vec),
        payload: m.payload().map(<[u8]>::to_vec),
        timestamp: m.timestamp(),
        headers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix::prelude::*;
    use std::sync::Mutex;

    /// A task that keeps the offsets it was sent.
    struct Keeper(Arc<Mutex<Vec<i64>>>);

    impl Actor for Keeper {
        type Context = Context<Self>;
    }

    impl Handler<RecordBatch> for Keeper {
        type Result = ();
        fn handle(&mut self, batch: RecordBatch, _: &mut Context<Self>) {
            self.0.lock().unwrap().extend(batch.records.iter().map(|r| r.offset));
        }
    }

    fn record(offset: i64) -> InputRecord {
        InputRecord {
            topic: "edge".into(),
            partition: 0,
            offset,
            key: None,
            payload: None,
            timestamp: rdkafka::Timestamp::NotAvailable,
            headers: Vec::new(),
        }
    }

    /// The start-up loss: a batch polled while the task was stopped (its
    /// partition past the last commit) and held across its restart must
    /// not reach the new incarnation, whose seek back to the commit brings
    /// those records again, in order.
    #[test]
    fn records_polled_before_a_task_started_do_not_reach_it() {
        actix::System::new().block_on(records_polled_before_a_task_started());
    }

    async fn records_polled_before_a_task_started() {
        let routes = Routes::default();
        let partition = TopicPartition::new("edge", 0);
        let held = vec![(routes.now(), record(40))];
        let got = Arc::new(Mutex::new(Vec::new()));
        routes.set(partition.clone(), Keeper(got.clone()).start().recipient(), Arc::default());
        assert_eq!(routes.deliver(&partition, held, 10).0, 0, "polled before the route was set");
        let fresh: Vec<(u64, InputRecord)> = (15..17).map(|o| (routes.now(), record(o))).collect();
        assert_eq!(routes.deliver(&partition, fresh, 10).0, 2);
        // A route set later for another partition leaves this one's alone.
        routes.set(TopicPartition::new("edge", 1), Keeper(Arc::default()).start().recipient(), Arc::default());
        assert_eq!(routes.deliver(&partition, vec![(routes.now(), record(17))], 10).0, 1);
        routes.remove(&partition);
        assert_eq!(routes.deliver(&partition, vec![(routes.now(), record(18))], 10).0, 0, "no owner here");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(*got.lock().unwrap(), vec![15, 16, 17]);
    }

    /// Incremental rebalancing: a change of assignment while a batch was
    /// collected makes stale only the records of the partitions that moved.
    #[test]
    fn only_the_records_of_partitions_that_changed_hands_are_dropped() {
        let assignment = Assignment::default();
        let other = |offset| InputRecord { partition: 1, ..record(offset) };
        let seen = assignment.now();
        let mut batch = vec![(0, record(1)), (0, other(1)), (0, record(2))];
        assert_eq!(drop_stale(&mut batch, &assignment, seen), seen, "nothing changed");
        assert_eq!(batch.len(), 3);
        assignment.change(&[TopicPartition::new("edge", 0)]);
        let now = drop_stale(&mut batch, &assignment, seen);
        assert_eq!(batch.iter().map(|(_, r)| (r.partition, r.offset)).collect::<Vec<_>>(), vec![(1, 1)]);
        batch.push((0, record(3)));
        assert_eq!(drop_stale(&mut batch, &assignment, now), now, "taken after the change: current");
        assert_eq!(batch.len(), 2);
    }

    #[test]
    fn a_mailbox_past_its_bound_asks_for_one_pause_until_the_task_took_it() {
        let m = Mailbox::default();
        assert!(!m.delivered(6, 10, 10), "within the bound");
        assert!(m.delivered(6, 10, 10), "past it: pause");
        assert!(!m.delivered(6, 10, 10), "already paused");
        m.taken(18, 30);
        assert!(m.take_pause(), "the task learns of the pause once");
        assert!(!m.take_pause());
        assert!(!m.delivered(1, PAUSE_AT_BYTES, 10), "at the bytes bound");
        assert!(m.delivered(0, 1, 10), "past the bytes bound");
    }
}
