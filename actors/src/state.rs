//! A task's durable state on Kafka: its sub-topology's compacted changelog
//! topic, partition = the task's partition. Written in the task's commit
//! cycle (inside its transaction under exactly_once), applied to the task's
//! local store, which a starting task reads (its user state as bundles use
//! it), so a restarted job resumes its GroupByKey buffers, user state and
//! watermark progress where it committed.
use std::sync::{LazyLock, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use beam_kafka_config::RunnerOptions;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::ClientContext;
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka::config;
use crate::kafka::producer::{Group, KafkaProducer, Writes};
use crate::store::{task_dir, Entries, TaskStore};
use beam_kafka_runtime::kafka::failure::{Failure, Recovery};
use beam_kafka_runtime::plan::topology::{changelog_topic, topic_prefix, TaskId};
use beam_kafka_runtime::state::task_state;
use beam_kafka_runtime::state::user_state::StoredCells;
use beam_kafka_runtime::task::cycle::Changes;
use beam_kafka_runtime::task::handover::{InFlightWrites, Landing};

const RESTORE_TIMEOUT: Duration = Duration::from_secs(120);

/// The restore consumer reads to the end of a partition on purpose: reaching
/// it is not an error worth logging.
struct QuietEof;

impl ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(error, KafkaError::PartitionEOF(_)) {
            tracing::warn!("state restore consumer: {error}: {reason}");
        }
    }
}

impl ConsumerContext for QuietEof {}

/// How much of a changelog a restore holds before applying it.
const RESTORE_BATCH_RECORDS: usize = 4_096;
const RESTORE_BATCH_BYTES: usize = 32 << 20;

/// Hands a changelog partition's committed records from offset `from` on
/// to `apply`, in order (`None`: a tombstone) and in batches (a restore
/// holds a batch, not the partition); returns the offset after the last
/// one. Blocks: call off the actor thread. A `from` outside the partition
/// (the topic was recreated) is an error: the caller rebuilds from the
/// start.
pub fn read_changelog(
    opts: &RunnerOptions,
    topic: &str,
    partition: i32,
    from: i64,
    known: Option<(i64, i64)>,
    apply: &mut dyn FnMut(Changes) -> Result<(), String>,
) -> Result<i64, String> {
    // The partition's ends as a connected client saw them (its high end at
    // least the last stable offset): nothing to read needs no consumer of
    // its own, whose connecting is most of a fresh task's start.
    if let Some((low, high)) = known {
        if task_state::changelog_to_read(from, low, high) == Ok(None) {
            return Ok(high);
        }
    }
    let consumer: BaseConsumer<QuietEof> = config::base(opts, "restore")
        .set("group.id", format!("{}-restore", opts.application_id))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        // The end shows as an empty fetch: do not let the broker hold it.
        .set("fetch.wait.max.ms", "10")
        .create_with_context(QuietEof)
        .map_err(|e| format!("cannot create the state restore consumer: {e}"))?;
    let mut changes = Vec::new();
    let mut bytes = 0;
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, Duration::from_secs(10))
        .map_err(|e| format!("cannot read the offsets of {topic}[{partition}]: {e}"))?;
    let Some(from) = task_state::changelog_to_read(from, low, high).map_err(|e| format!("{topic}[{partition}]: {e}"))? else {
        crate::kafka::close_in_background(consumer);
        return Ok(high);
    };
    let mut tpl = TopicPartitionList::new();
    let start = if from > 0 { Offset::Offset(from) } else { Offset::Beginning };
    tpl.add_partition_offset(topic, partition, start).map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| format!("cannot read {topic}[{partition}]: {e}"))?;
    let deadline = Instant::now() + RESTORE_TIMEOUT;
    loop {
        if Instant::now() > deadline {
            return Err(format!("restoring state from {topic}[{partition}] took longer than {} s", RESTORE_TIMEOUT.as_secs()));
        }
        match consumer.poll(Duration::from_millis(500)) {
            None => continue,
            Some(Err(KafkaError::PartitionEOF(_))) => {
                crate::kafka::close_in_background(consumer);
                apply(changes)?;
                return Ok(high);
            }
            Some(Err(e)) => return Err(format!("cannot read {topic}[{partition}]: {e}")),
            Some(Ok(m)) => {
                let Some(key) = m.key() else { continue };
                bytes += key.len() + m.payload().map_or(0, <[u8]>::len);
                changes.push((key.to_vec(), m.payload().map(<[u8]>::to_vec)));
                if changes.len() >= RESTORE_BATCH_RECORDS || bytes >= RESTORE_BATCH_BYTES {
                    apply(std::mem::take(&mut changes))?;
                    bytes = 0;
                }
            }
        }
    }
}

/// Queues state changes for the task's changelog partition; the group's
/// `wait` gives the offset of the last one once Kafka acknowledged them.
/// Stops queueing (a `Migrated` failure) once `owner` says the task's
/// partitions are being handed over: what it queued after that could land
/// after the new owner read the changelog.
pub async fn queue_changelog(
    producer: &KafkaProducer,
    topic: &str,
    partition: u32,
    changes: &Changes,
    owner: impl Fn() -> bool,
) -> Result<Writes, Failure> {
    let writes = Writes::new();
    in_flight().add(topic, partition as i32, Watched(writes.watch()));
    for (k, v) in changes {
        if !owner() {
            return Err(Failure::migrated(HANDED_OVER));
        }
        writes.send(producer, topic, partition, Some(k), v.as_deref()).await?;
    }
    Ok(writes)
}

/// Why a changelog write stopped half-way (the task is about to stop).
const HANDED_OVER: &str = "its partitions are being handed over to another owner";

/// A group of changelog writes, watched until its records landed.
struct Watched(Weak<Group>);

impl Landing for Watched {
    fn landed(&self) -> bool {
        self.0.upgrade().is_none_or(|g| g.pending() == 0)
    }
}

/// This process's changelog writes in flight (every job's: a partition's
/// name says whose it is).
fn in_flight() -> MutexGuard<'static, InFlightWrites<Watched>> {
    static IN_FLIGHT: LazyLock<Mutex<InFlightWrites<Watched>>> = LazyLock::new(Default::default);
    IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long a new owner waits for its predecessor's writes: longer than
/// a write may take to be acknowledged or to fail.
const HANDOVER_WAIT: Duration = Duration::from_secs(90);

/// Blocks until `done` says every watched write landed, or `HANDOVER_WAIT`.
fn wait_for_writes(what: &str, done: impl Fn(&mut InFlightWrites<Watched>) -> bool) -> Result<(), String> {
    let deadline = Instant::now() + HANDOVER_WAIT;
    while !done(&mut in_flight()) {
        if Instant::now() > deadline {
            return Err(format!(
                "Kafka did not acknowledge writes within {} s (the changelog writes to {what} of a stopped task)",
                HANDOVER_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Blocks until every changelog write of the application's tasks in this
/// process landed: called when the group takes partitions away, before their
/// next owner may read the changelogs.
pub fn wait_for_changelog_writes(application_id: &str) -> Result<(), String> {
    let prefix = topic_prefix(application_id);
    wait_for_writes(&format!("{prefix}*-changelog"), |w| w.all_settled(|t| t.starts_with(&prefix) && t.ends_with("-changelog")))
}

/// A partition's low and high offsets, as a connected client can tell them.
pub type PartitionEnds<'a> = dyn Fn(&str, i32) -> Option<(i64, i64)> + 'a;

/// Opens a task's local store (waiting for its lock): returns the store
/// and the changelog offset it is current to. Local work only, so it runs
/// while the task's earlier owners are fenced.
pub fn open_task_store(opts: &RunnerOptions, task: TaskId) -> Result<(TaskStore, i64), String> {
    // A standby of this copy may keep it open: it hands it over.
    if let Some(warm) = crate::standby::claim(&opts.application_id, task) {
        return Ok(warm);
    }
    TaskStore::open(task_dir(&opts.state_dir, &opts.application_id, task), opts.state_store_memory_mb)
}

/// A task's store brought up to date with its changelog.
pub struct Restored {
    pub store: TaskStore,
    /// What the task reads whole as it starts: everything but user state,
    /// and user state too when the store holds it in an older layout.
    pub entries: Entries,
    /// User state is read from the store as bundles use it.
    pub user_state_as_used: bool,
    /// The changelog offset the store is current to.
    pub next: i64,
}

/// Brings a task's opened store up to date with its changelog (its earlier
/// owners fenced by now) and reads what the task reads whole as it starts.
/// `ends` tells a changelog partition's ends through a client already
/// connected, when it can.
pub fn restore_task(
    opts: &RunnerOptions,
    task: TaskId,
    (store, from): (TaskStore, i64),
    ends: &PartitionEnds<'_>,
) -> Result<Restored, String> {
    let topic = changelog_topic(&opts.application_id, task.sub_topology);
    let dir = task_dir(&opts.state_dir, &opts.application_id, task);
    // A stopped incarnation's writes land before this one reads to the end.
    wait_for_writes(&format!("{topic}[{}]", task.partition), |w| w.settled(&topic, task.partition as i32))?;
    let known = ends(&topic, task.partition as i32);
    // Applied as read: a read cut short leaves the store past `from`, and
    // replaying the changelog from `from` later ends in the same state.
    let read = read_changelog(opts, &topic, task.partition as i32, from, known, &mut |batch| store.apply(&batch));
    let (store, next) = match read {
        Ok(next) => (store, next),
        // The brokers are away for a while: the store is still current up
        // to `from`, and a later start reads on from there.
        Err(e) if from > 0 && matches!(Failure::from_text(e.as_str()).recovery, Recovery::Transient { .. }) => {
            store.write_checkpoint(from)?;
            return Err(e);
        }
        Err(e) if from > 0 => {
            tracing::info!(task = %task, "rebuilding the state store: {e}");
            drop(store);
            // The store files only: the directory and its lock file stay.
            let _ = std::fs::remove_dir_all(dir.join("rocksdb"));
            let (store, _) = TaskStore::open(dir, opts.state_store_memory_mb)?;
            let next = read_changelog(opts, &topic, task.partition as i32, 0, known, &mut |batch| store.apply(&batch))?;
            (store, next)
        }
        Err(e) => return Err(e),
    };
    let older = task_state::older_user_state_prefixes();
    let mut whole = task_state::read_whole_prefixes();
    let mut user_state_as_used = true;
    for prefix in &older {
        user_state_as_used &= !store.has_prefix(prefix)?;
    }
    if !user_state_as_used {
        whole.extend(older);
        whole.push(task_state::user_cells_prefix(&[]));
    }
    let mut entries = Vec::new();
    for prefix in whole {
        store.scan_prefix(&prefix, &mut |k, v| entries.push((k.to_vec(), v.to_vec())))?;
    }
    Ok(Restored { store, entries, user_state_as_used, next })
}
