//! Standby stores (`--num_standby_replicas`; which tasks is
//! `runtime::app::standby`'s decision): a thread per job tails the changelog
//! partitions of the tasks this copy stands by for into their local stores,
//! the directories the tasks themselves use, and gives a store up the
//! moment its task starts here (`claim`), open and current to the offset
//! it read to, so the task's restore reads only what followed; a start
//! that fenced the earlier owner first lets it read to the changelog's end
//! (`claim_when_current`: the abort marker that fencing wrote). A copy
//! joining while others run warms up first (`runtime::app::warm_up`): the job
//! waits in `warmed` before it joins the group.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex};
use std::time::{Duration, Instant};

use beam_kafka_config::RunnerOptions;
use beam_kafka_runtime::app::standby::Standing;
use beam_kafka_runtime::app::warm_up::{WarmUp, WarmUpStep, WARM_UP_LIMIT_MS};
use beam_kafka_runtime::kafka::topic_partition::TopicPartition;
use beam_kafka_runtime::plan::topology::{changelog_topic, TaskId};
use beam_kafka_runtime::task::cycle::Changes;
use dashmap::DashMap;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::kafka::config;
use crate::status_board::now_ms;
use crate::store::{task_dir, TaskStore};

/// How often the placement is asked again.
const PLACEMENT_EVERY: Duration = Duration::from_secs(1);
const UNKNOWN_PLACEMENT_EVERY: Duration = Duration::from_millis(100);
/// A task claimed for a start counts as this copy's for this long: until
/// the start opened (and locked) the store, a moment later. A standby
/// opens only a store no one holds, so a task that stops here is stood by
/// for again as soon as it closed its store.
const CLAIM_HOLDS: Duration = Duration::from_secs(5);
/// How long a poll waits for records: a start that begins waiting for a
/// store meanwhile waits at least this long.
const IDLE_POLL: Duration = Duration::from_millis(20);
/// The most records applied to the stores at once.
const BATCH: usize = 5_000;

/// A store kept warm: current to changelog offset `next`.
struct Warm {
    store: TaskStore,
    next: i64,
}

struct Shared {
    /// While warming up: what it began with.
    warming: Mutex<Option<WarmUp>>,
    stores: Mutex<BTreeMap<TaskId, Warm>>,
    claimed: Mutex<HashMap<TaskId, Instant>>,
    /// Starts waiting for a store to be current to an offset: the thread
    /// polls briefly meanwhile and keeps their stores.
    catching_up: Mutex<BTreeMap<TaskId, i64>>,
    /// Told (with `stores`' lock) after each batch while starts wait.
    caught_up: Condvar,
    stop: AtomicBool,
}

/// The running standbys, by application id (a job server may run several).
static STANDBYS: LazyLock<DashMap<String, Arc<Shared>>> = LazyLock::new(DashMap::new);

/// A task of `application_id` starts in this copy: if a standby keeps its
/// store, the store is handed over open (no flush, no reopening) with the
/// changelog offset it is current to; and no standby opens it meanwhile.
pub fn claim(application_id: &str, task: TaskId) -> Option<(TaskStore, i64)> {
    let shared = STANDBYS.get(application_id)?.clone();
    // Locks in the order `place` takes them: stores, then claims.
    let mut stores = shared.stores.lock().expect("standby stores lock");
    shared.claimed.lock().expect("claims lock").insert(task, Instant::now());
    let warm = stores.remove(&task)?;
    tracing::info!(task = %task, "task {task} starts from this copy's standby store, current to changelog offset {}", warm.next);
    Some((warm.store, warm.next))
}

/// Whether a standby of this copy keeps `task`'s store.
pub fn keeps(application_id: &str, task: TaskId) -> bool {
    STANDBYS.get(application_id).is_some_and(|s| s.stores.lock().expect("standby stores lock").contains_key(&task))
}

/// `claim`, once the standby read `task`'s changelog up to `end` (its end
/// after the start fenced the earlier owner, whose open transaction's abort
/// marker is the usual last record), or after `wait`: a few milliseconds
/// of the standby's reading spare the start a restore consumer of its own.
pub fn claim_when_current(application_id: &str, task: TaskId, end: i64, wait: Duration) -> Option<(TaskStore, i64)> {
    let shared = STANDBYS.get(application_id)?.clone();
    let deadline = Instant::now() + wait;
    let mut stores = shared.stores.lock().expect("standby stores lock");
    if stores.get(&task).is_some_and(|w| w.next < end) {
        shared.catching_up.lock().expect("catch-up lock").insert(task, end);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if stores.get(&task).is_none_or(|w| w.next >= end) {
                break;
            }
            stores = shared.caught_up.wait_timeout(stores, left).expect("standby stores lock").0;
        }
        shared.catching_up.lock().expect("catch-up lock").remove(&task);
    }
    drop(stores);
    claim(application_id, task)
}

/// The job of `application_id` finished and deletes its local state:
/// its standby stops and drops its stores without a checkpoint (a later
/// run's changelogs are new topics).
pub fn close(application_id: &str) {
    let Some(shared) = STANDBYS.get(application_id).map(|s| s.clone()) else { return };
    let mut stores = shared.stores.lock().expect("standby stores lock");
    shared.stop.store(true, Ordering::Relaxed);
    stores.clear();
}

/// Which tasks to stand by for, and which this copy runs, given whether the
/// copy is warming up (then: every task another copy runs); `None` while
/// the copies' reports are not read yet.
pub type Placement = Box<dyn Fn(bool) -> Option<(BTreeSet<TaskId>, BTreeSet<TaskId>)> + Send>;

/// Waits until the standby of `application_id`'s job, if any, warmed up
/// (or `cancelled` says so): the job joins the group after it.
pub async fn warmed(application_id: &str, cancelled: impl Fn() -> bool) {
    let Some(shared) = STANDBYS.get(application_id).map(|s| s.clone()) else { return };
    let mut said = false;
    // The limit holds here too: a standby thread that died ends nothing.
    let warming =
        || shared.warming.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|w| now_ms() - w.began_ms < WARM_UP_LIMIT_MS);
    while warming() && !shared.stop.load(Ordering::Relaxed) && !cancelled() {
        if !said {
            tracing::info!("warming up: this copy joins the group once its standby stores caught up with the tasks other copies run");
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A job's standby thread; stops when dropped.
pub struct Standby {
    application_id: String,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Standby {
    /// `warm_up`: the job waits for the standby stores to catch up before
    /// it joins the group.
    pub fn start(opts: &RunnerOptions, placement: Placement, warm_up: bool) -> Result<Standby, String> {
        let consumer: BaseConsumer = config::standby(opts)
            .set("group.id", format!("{}-standby", opts.application_id))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            // A store's offset outside its changelog (the topic was made
            // anew) must not be read on from elsewhere: the partition stops,
            // and the task's restore rebuilds the store from the start.
            .set("auto.offset.reset", "error")
            .create()
            .map_err(|e| format!("cannot create the standby consumer: {e}"))?;
        let warming =
            warm_up.then(|| WarmUp { began_ms: now_ms(), acceptable_lag: opts.acceptable_recovery_lag.min(i64::MAX as u64) as i64 });
        let shared = Arc::new(Shared {
            warming: Mutex::new(warming),
            stores: Mutex::default(),
            claimed: Mutex::default(),
            catching_up: Mutex::default(),
            caught_up: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        STANDBYS.insert(opts.application_id.clone(), shared.clone());
        let tailer = Tailer {
            opts: opts.clone(),
            shared: shared.clone(),
            consumer,
            placement,
            standing: Standing::default(),
            assigned: BTreeSet::new(),
            reassign: false,
            trusted: BTreeSet::new(),
            placement_known: false,
        };
        let thread = std::thread::Builder::new().name("standby".into()).spawn(move || tailer.run()).map_err(|e| {
            STANDBYS.remove_if(&opts.application_id, |_, s| Arc::ptr_eq(s, &shared));
            format!("cannot start the standby thread: {e}")
        })?;
        Ok(Standby { application_id: opts.application_id.clone(), shared, thread: Some(thread) })
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        STANDBYS.remove_if(&self.application_id, |_, s| Arc::ptr_eq(s, &self.shared));
    }
}

struct EndsWarmUp(Arc<Shared>);

impl Drop for EndsWarmUp {
    fn drop(&mut self) {
        *self.0.warming.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

struct Tailer {
    opts: RunnerOptions,
    shared: Arc<Shared>,
    consumer: BaseConsumer,
    placement: Placement,
    standing: Standing,
    /// The tasks whose changelog partitions the consumer is assigned.
    assigned: BTreeSet<TaskId>,
    /// A store was opened or dropped here: every partition is sought
    /// again to where its store is current (one opened anew may be behind
    /// where the consumer is).
    reassign: bool,
    /// The tasks whose consumer position is of the current assignment: a
    /// record of theirs arrived since it (librdkafka resets a position
    /// only as the assignment is carried out).
    trusted: BTreeSet<TaskId>,
    /// Whether the placement answered at its last asking.
    placement_known: bool,
}

impl Tailer {
    fn run(mut self) {
        // However the thread ends, the job does not wait for its warm-up.
        let _ends_warm_up = EndsWarmUp(self.shared.clone());
        let mut placed = Instant::now() - PLACEMENT_EVERY;
        while !self.shared.stop.load(Ordering::Relaxed) {
            // Until the copies' reports are read, a warming copy (its job
            // waiting to join) asks again soon: the first copy has none.
            let every = if self.placement_known { PLACEMENT_EVERY } else { UNKNOWN_PLACEMENT_EVERY };
            if placed.elapsed() >= every {
                placed = Instant::now();
                self.place();
            }
            if let Err(e) = self.follow_stores() {
                tracing::warn!("standby stores: {e}");
            }
            if self.assigned.is_empty() {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            self.apply_batch();
        }
        // A clean close: every store keeps what it read.
        for (task, warm) in std::mem::take(&mut *self.shared.stores.lock().expect("standby stores lock")) {
            if let Err(e) = warm.store.write_checkpoint(warm.next) {
                tracing::warn!(task = %task, "the standby store: {e}");
            }
        }
    }

    /// Asks the placement, keeps the stores it names, and steps the
    /// warm-up.
    fn place(&mut self) {
        let warming = self.shared.warming.lock().expect("warm-up lock").clone();
        let placed = (self.placement)(warming.is_some());
        self.placement_known = placed.is_some();
        let Some((wanted, running)) = placed else {
            if let Some(w) = warming {
                self.warm_up_step(&w, None);
            }
            return;
        };
        self.place_stores(&wanted, &running);
        if let Some(w) = warming {
            self.warm_up_step(&w, Some(&wanted));
        }
    }

    /// Whether the warm-up is over; ends it if so.
    fn warm_up_step(&self, warm_up: &WarmUp, wanted: Option<&BTreeSet<TaskId>>) {
        let lags = wanted.map(|w| self.lags(w)).unwrap_or_default();
        let ended = match warm_up.step(wanted, &lags, now_ms()) {
            WarmUpStep::Wait { behind, of } => {
                tracing::debug!("warming up: {behind} of {of} standby store(s) behind");
                return;
            }
            WarmUpStep::Warm { tasks } => format!(
                "warmed up in {:.1} s: {tasks} standby store(s) within {} records of their changelogs' ends",
                (now_ms() - warm_up.began_ms) as f64 / 1000.0,
                warm_up.acceptable_lag
            ),
            WarmUpStep::GaveUp { behind } => format!(
                "warm-up ended at its limit with standby stores behind (task: records, or unknown): {}",
                behind.iter().map(|(t, l)| format!("{t}: {}", l.map_or("?".to_string(), |l| l.to_string()))).collect::<Vec<_>>().join(", ")
            ),
        };
        tracing::info!("{ended}; joining the group");
        *self.shared.warming.lock().expect("warm-up lock") = None;
    }

    /// How many records each kept store of `tasks` is behind its
    /// changelog's end (the last stable offset: the consumer reads
    /// committed records, and so asks for their end), all asked at once.
    fn lags(&self, tasks: &BTreeSet<TaskId>) -> BTreeMap<TaskId, i64> {
        let next: BTreeMap<TopicPartition, (TaskId, i64)> = {
            let stores = self.shared.stores.lock().expect("standby stores lock");
            tasks
                .iter()
                .filter_map(|t| stores.get(t).map(|w| (*t, w.next)))
                .map(|(t, next)| {
                    (TopicPartition::new(changelog_topic(&self.opts.application_id, t.sub_topology), t.partition as i32), (t, next))
                })
                .collect()
        };
        if next.is_empty() {
            return BTreeMap::new();
        }
        let mut ask = TopicPartitionList::new();
        for tp in next.keys() {
            // Cannot fail for `End`.
            let _ = ask.add_partition_offset(&tp.topic, tp.partition, Offset::End);
        }
        let Ok(ends) = self.consumer.offsets_for_times(ask, Duration::from_secs(5)) else { return BTreeMap::new() };
        ends.elements()
            .iter()
            .filter_map(|e| match (next.get(&TopicPartition::new(e.topic(), e.partition())), e.offset()) {
                (Some((task, next)), Offset::Offset(end)) if e.error().is_ok() => Some((*task, (end - next).max(0))),
                _ => None,
            })
            .collect()
    }

    /// Opens the stores of tasks to stand by for, closes the others.
    fn place_stores(&mut self, wanted: &BTreeSet<TaskId>, running: &BTreeSet<TaskId>) {
        // The claims are read under the stores' lock: a task claimed after
        // this is not opened here before its start has its store.
        let mut stores = self.shared.stores.lock().expect("standby stores lock");
        if self.shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let claimed: BTreeSet<TaskId> = {
            let mut claims = self.shared.claimed.lock().expect("claims lock");
            claims.retain(|_, at| at.elapsed() < CLAIM_HOLDS);
            claims.keys().copied().collect()
        };
        let here: BTreeSet<TaskId> = running.union(&claimed).copied().collect();
        let tail = self.standing.update(wanted, &here, now_ms());
        // A store a start waits for stays until the start claims it.
        let awaited = self.shared.catching_up.lock().expect("catch-up lock").clone();
        let gone: Vec<TaskId> = stores.keys().filter(|t| !tail.contains(t) && !awaited.contains_key(t)).copied().collect();
        for task in gone {
            if let Some(warm) = stores.remove(&task) {
                if let Err(e) = warm.store.write_checkpoint(warm.next) {
                    tracing::warn!(task = %task, "the standby store: {e}");
                }
                tracing::info!(task = %task, "no longer standing by for task {task}");
                self.reassign = true;
            }
        }
        for task in tail {
            if stores.contains_key(&task) {
                continue;
            }
            let dir = task_dir(&self.opts.state_dir, &self.opts.application_id, task);
            match TaskStore::open_if_free(dir, self.opts.state_store_memory_mb) {
                Ok(Some((store, next))) => {
                    tracing::info!(task = %task, "standing by for task {task} from changelog offset {next}");
                    stores.insert(task, Warm { store, next });
                    self.reassign = true;
                }
                // A task (here, starting or stopping) has it: try again later.
                Ok(None) => {}
                Err(e) => tracing::warn!(task = %task, "cannot keep a standby store: {e}"),
            }
        }
    }

    /// Assigns the consumer the changelog partitions of the stores kept,
    /// each from where its store is current to.
    fn follow_stores(&mut self) -> Result<(), String> {
        let wanted: BTreeMap<TaskId, i64> =
            self.shared.stores.lock().expect("standby stores lock").iter().map(|(t, w)| (*t, w.next)).collect();
        if !self.reassign && wanted.keys().eq(self.assigned.iter()) {
            return Ok(());
        }
        self.reassign = false;
        let mut tpl = TopicPartitionList::new();
        for (task, next) in &wanted {
            let topic = changelog_topic(&self.opts.application_id, task.sub_topology);
            let offset = if *next > 0 { Offset::Offset(*next) } else { Offset::Beginning };
            tpl.add_partition_offset(&topic, task.partition as i32, offset).map_err(|e| e.to_string())?;
        }
        self.consumer.assign(&tpl).map_err(|e| format!("cannot follow the changelogs: {e}"))?;
        self.assigned = wanted.into_keys().collect();
        self.trusted.clear();
        Ok(())
    }

    /// Reads what the changelogs have and applies it to the stores.
    fn apply_batch(&mut self) {
        let subs: HashMap<String, u32> =
            self.assigned.iter().map(|t| (changelog_topic(&self.opts.application_id, t.sub_topology), t.sub_topology)).collect();
        let mut changes: BTreeMap<TaskId, (Changes, i64)> = BTreeMap::new();
        // A waiting start sees the consumer's position soon after it moves
        // (past a marker: no record returns from the poll).
        let awaited = !self.shared.catching_up.lock().expect("catch-up lock").is_empty();
        let mut wait = if awaited { Duration::from_millis(2) } else { IDLE_POLL };
        for _ in 0..BATCH {
            match self.consumer.poll(wait) {
                None => break,
                Some(Err(e)) => {
                    tracing::warn!("standby consumer: {e}");
                    break;
                }
                Some(Ok(m)) => {
                    let Some(sub) = subs.get(m.topic()) else { continue };
                    let task = TaskId { sub_topology: *sub, partition: m.partition() as u32 };
                    self.trusted.insert(task);
                    let entry = changes.entry(task).or_default();
                    if let Some(key) = m.key() {
                        entry.0.push((key.to_vec(), m.payload().map(<[u8]>::to_vec)));
                    }
                    entry.1 = m.offset() + 1;
                }
            }
            wait = Duration::ZERO;
        }
        // Where the consumer reads next, past commit markers and aborted
        // records too: every record before it is applied below, so a store
        // whose changelog ends in a marker is current to the end, and the
        // task taking it over reads nothing. Only a position of the current
        // assignment counts: an earlier one could be past what a store
        // reopened empty holds.
        let positions: HashMap<TaskId, i64> = match self.consumer.position() {
            Ok(tpl) => tpl
                .elements()
                .iter()
                .filter_map(|e| match (subs.get(e.topic()), e.offset()) {
                    (Some(sub), Offset::Offset(n)) => Some((TaskId { sub_topology: *sub, partition: e.partition() as u32 }, n)),
                    _ => None,
                })
                .filter(|(task, _)| self.trusted.contains(task))
                .collect(),
            Err(_) => HashMap::new(),
        };
        let mut stores = self.shared.stores.lock().expect("standby stores lock");
        for (task, (entries, next)) in changes {
            // A store claimed meanwhile is the task's now.
            let Some(warm) = stores.get_mut(&task) else { continue };
            if next <= warm.next {
                continue;
            }
            match warm.store.apply(&entries) {
                Ok(()) => warm.next = next,
                Err(e) => {
                    tracing::warn!(task = %task, "the standby store: {e}; dropping it");
                    stores.remove(&task);
                    self.reassign = true;
                }
            }
        }
        for (task, position) in positions {
            if let Some(warm) = stores.get_mut(&task) {
                warm.next = warm.next.max(position);
            }
        }
        // A start may have begun waiting during the poll.
        self.shared.caught_up.notify_all();
    }
}
