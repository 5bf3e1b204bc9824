//! What this process knows of one running job, for the status page and the
//! exported metrics: each task's latest status (the task publishes a
//! snapshot of its own core's state), its counters, the job's recent
//! warnings and errors, the partitions' end offsets (from librdkafka's
//! statistics, for consumer lag) and how often the group rebalanced.
//!
//! A board covers this copy's tasks only; each copy of an application
//! serves its own page and exports its own metrics (the dashboard adds
//! them up across copies).
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use beam_kafka_runtime::kafka::topic_partition::TopicPartition;
use beam_kafka_runtime::plan::topology::TaskId;
use beam_kafka_runtime::task::status::{ReadRate, TaskStatus};
use dashmap::DashMap;
use opentelemetry::KeyValue;

/// Warnings and errors kept per job.
const MAX_EVENTS: usize = 200;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Warning,
    Error,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warning => "warning",
            Level::Error => "error",
        }
    }
}

#[derive(Clone, Debug)]
pub struct BoardEvent {
    pub time_ms: i64,
    pub level: Level,
    pub text: String,
}

/// Counters a task (and its stage) add to as they go.
pub struct TaskMeters {
    pub records_read: AtomicU64,
    pub records_written: AtomicU64,
    pub commits: AtomicU64,
    pub commit_failures: AtomicU64,
    pub changelog_bytes: AtomicU64,
    /// The attributes of the task's data points.
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone)]
pub struct TaskEntry {
    /// The incarnation of the task that registered last.
    pub incarnation: u64,
    pub status: TaskStatus,
    pub meters: Arc<TaskMeters>,
    pub read_rate: ReadRate,
}

pub struct StatusBoard {
    pub job_id: String,
    pub application_id: String,
    /// This process: host and pid.
    pub copy: String,
    started: Instant,
    tasks: DashMap<TaskId, TaskEntry>,
    events: Mutex<VecDeque<BoardEvent>>,
    pub rebalances: AtomicU64,
    /// The last stable offset of each partition the job reads, as
    /// librdkafka last reported it.
    ends: DashMap<TopicPartition, i64>,
    /// The attributes of the job's data points.
    pub attributes: Vec<KeyValue>,
    ended: OnceLock<Instant>,
    /// The job's state as the Job API names it (RUNNING, DONE, ...).
    state: Mutex<String>,
    /// The tasks the group gave this copy (`None` before its first
    /// assignment): what readiness waits for.
    owned: Mutex<Option<BTreeSet<TaskId>>>,
}

/// This process as a copy of an application: `host:pid`.
pub fn this_copy() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", std::process::id())
}

fn boards() -> &'static Mutex<Vec<Weak<StatusBoard>>> {
    static BOARDS: OnceLock<Mutex<Vec<Weak<StatusBoard>>>> = OnceLock::new();
    BOARDS.get_or_init(Default::default)
}

/// How long an ended job's metrics are still exported: at least one
/// export after its end carries its final counts.
const EXPORTED_AFTER_END: std::time::Duration = std::time::Duration::from_secs(120);

/// Every board of a job running in this process, or ended only recently
/// (for the exported metrics' callbacks).
pub fn live_boards() -> Vec<Arc<StatusBoard>> {
    let mut all = boards().lock().expect("boards lock");
    all.retain(|b| b.upgrade().is_some_and(|b| b.ended_at().is_none_or(|t| t.elapsed() < EXPORTED_AFTER_END)));
    all.iter().filter_map(Weak::upgrade).collect()
}

impl StatusBoard {
    pub fn new(job_id: &str, application_id: &str) -> Arc<StatusBoard> {
        // A job server may run two jobs of one application at once (a new
        // version submitted with --update while the earlier one runs):
        // each is a copy of its own, named apart, or their reports on the
        // copies topic would overwrite each other's.
        // (Numbered once for the process: a name is never given twice.)
        static NEXT: AtomicU64 = AtomicU64::new(2);
        let running = live_boards().iter().any(|b| b.application_id == application_id && b.ended_at().is_none());
        let copy = if running { format!("{}#{}", this_copy(), NEXT.fetch_add(1, Ordering::Relaxed)) } else { this_copy() };
        let attributes = vec![
            KeyValue::new("beam_kafka.application.id", application_id.to_string()),
            KeyValue::new("beam_kafka.job.id", job_id.to_string()),
            KeyValue::new("beam_kafka.copy", copy.clone()),
        ];
        let board = Arc::new(StatusBoard {
            job_id: job_id.into(),
            application_id: application_id.into(),
            copy,
            started: Instant::now(),
            tasks: DashMap::new(),
            events: Mutex::new(VecDeque::new()),
            rebalances: AtomicU64::new(0),
            ends: DashMap::new(),
            attributes,
            ended: OnceLock::new(),
            state: Mutex::new(String::new()),
            owned: Mutex::new(None),
        });
        boards().lock().expect("boards lock").push(Arc::downgrade(&board));
        board
    }

    pub fn uptime_s(&self) -> f64 {
        self.ended_at().map_or_else(|| self.started.elapsed(), |end| end.duration_since(self.started)).as_secs_f64()
    }

    pub fn set_state(&self, state: &str) {
        *self.state.lock().expect("state lock") = state.to_string();
    }

    pub fn state(&self) -> String {
        self.state.lock().expect("state lock").clone()
    }

    /// The group gave this copy these tasks (after each change).
    pub fn set_owned(&self, tasks: BTreeSet<TaskId>) {
        *self.owned.lock().expect("owned lock") = Some(tasks);
    }

    pub fn owned(&self) -> Option<BTreeSet<TaskId>> {
        self.owned.lock().expect("owned lock").clone()
    }

    /// The job ended: its metrics stop being exported a little later.
    pub fn end(&self) {
        let _ = self.ended.set(Instant::now());
    }

    pub fn ended_at(&self) -> Option<Instant> {
        self.ended.get().copied()
    }

    /// A start of `task` in this process: its counters (kept across its
    /// restarts here).
    pub fn register(&self, task: TaskId, incarnation: u64) -> Arc<TaskMeters> {
        if let Some(mut e) = self.tasks.get_mut(&task) {
            e.incarnation = e.incarnation.max(incarnation);
            return e.meters.clone();
        }
        let attributes = self.task_attributes(task);
        let meters = Arc::new(TaskMeters {
            records_read: AtomicU64::new(0),
            records_written: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            commit_failures: AtomicU64::new(0),
            changelog_bytes: AtomicU64::new(0),
            attributes,
        });
        let status = TaskStatus::new(beam_kafka_runtime::task::lifecycle::TaskState::Created);
        self.tasks.entry(task).or_insert(TaskEntry { incarnation, status, meters, read_rate: ReadRate::default() }).meters.clone()
    }

    /// The attributes of `task`'s data points.
    pub fn task_attributes(&self, task: TaskId) -> Vec<KeyValue> {
        let mut attributes = self.attributes.clone();
        attributes.push(KeyValue::new("beam_kafka.task", task.to_string()));
        attributes.push(KeyValue::new("beam_kafka.sub_topology", task.sub_topology.to_string()));
        attributes
    }

    /// `task` is restoring its state here (before it registers).
    pub fn restoring(&self, task: TaskId) {
        self.register(task, 0);
        if let Some(mut e) = self.tasks.get_mut(&task) {
            e.status = TaskStatus::new(beam_kafka_runtime::task::lifecycle::TaskState::Restoring);
        }
    }

    /// The latest status of a registered task (an earlier incarnation's,
    /// or one of a task forgotten since, is ignored).
    pub fn publish(&self, task: TaskId, incarnation: u64, status: TaskStatus) {
        if let Some(mut e) = self.tasks.get_mut(&task).filter(|e| e.incarnation == incarnation) {
            let read = e.meters.records_read.load(Ordering::Relaxed);
            e.read_rate.observe(read, now_ms());
            e.status = status;
        }
    }

    /// The task left this process (its partitions moved).
    pub fn forget(&self, task: TaskId) {
        self.tasks.remove(&task);
    }

    /// Forgets every task but those `live` keeps (after a revocation, or
    /// a start that failed: what is not running here is not shown).
    pub fn keep_only(&self, live: impl Fn(&TaskId) -> bool) {
        self.tasks.retain(|t, _| live(t));
    }

    pub fn tasks(&self) -> Vec<(TaskId, TaskEntry)> {
        let mut all: Vec<_> = self.tasks.iter().map(|e| (*e.key(), e.value().clone())).collect();
        all.sort_by_key(|(t, _)| *t);
        all
    }

    pub fn event(&self, level: Level, text: impl Into<String>) {
        let mut events = self.events.lock().expect("events lock");
        if events.len() >= MAX_EVENTS {
            events.pop_front();
        }
        events.push_back(BoardEvent { time_ms: now_ms(), level, text: text.into() });
    }

    pub fn events(&self) -> Vec<BoardEvent> {
        self.events.lock().expect("events lock").iter().cloned().collect()
    }

    pub fn set_end(&self, topic: &str, partition: i32, end: i64) {
        self.ends.insert(TopicPartition::new(topic, partition), end);
    }

    /// Records between `position` and the partition's end, if known.
    pub fn lag(&self, topic: &str, partition: i32, position: i64) -> Option<i64> {
        self.ends.get(&TopicPartition::new(topic, partition)).map(|end| (*end - position).max(0))
    }

    /// A task's lag over all its input partitions, if any is known.
    pub fn task_lag(&self, status: &TaskStatus) -> Option<i64> {
        let lags: Vec<i64> = status.inputs.iter().filter_map(|i| self.lag(&i.topic, i.partition, i.position)).collect();
        (!lags.is_empty()).then(|| lags.iter().sum())
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use beam_kafka_runtime::task::lifecycle::TaskState;
    use beam_kafka_runtime::task::status::InputPosition;

    fn task(p: u32) -> TaskId {
        TaskId { sub_topology: 1, partition: p }
    }

    fn running_at(position: i64) -> TaskStatus {
        let mut s = TaskStatus::new(TaskState::Running);
        s.inputs = vec![InputPosition { topic: "t".into(), partition: 0, position, committed: None }];
        s
    }

    #[test]
    fn only_the_latest_incarnation_publishes() {
        let board = StatusBoard::new("job", "app");
        let meters = board.register(task(0), 1);
        meters.records_read.fetch_add(5, Ordering::Relaxed);
        board.publish(task(0), 1, running_at(5));
        // A restart in this process keeps the counters.
        assert!(Arc::ptr_eq(&meters, &board.register(task(0), 2)));
        board.publish(task(0), 1, TaskStatus::new(TaskState::Closed));
        assert_eq!(board.tasks()[0].1.status.state, TaskState::Running, "the old incarnation's last word is ignored");
        board.publish(task(0), 2, running_at(7));
        assert_eq!(board.tasks()[0].1.status.inputs[0].position, 7);
        board.forget(task(0));
        board.publish(task(0), 2, running_at(9));
        assert!(board.tasks().is_empty(), "a forgotten task stays forgotten");
    }

    #[test]
    fn a_task_restoring_shows_then_registers() {
        let board = StatusBoard::new("job", "app");
        board.restoring(task(1));
        board.restoring(task(2));
        assert_eq!(board.tasks()[0].1.status.state, TaskState::Restoring);
        assert!(board.tasks()[0].1.status.waiting()[0].contains("restoring"));
        board.register(task(1), 4);
        board.publish(task(1), 4, running_at(0));
        assert_eq!(board.tasks()[0].1.status.state, TaskState::Running);
        // Task 2's start failed: it is not running here.
        board.keep_only(|t| *t == task(1));
        assert_eq!(board.tasks().len(), 1);
    }

    #[test]
    fn lag_is_the_end_minus_the_position() {
        let board = StatusBoard::new("job", "app");
        let status = running_at(40);
        assert_eq!(board.task_lag(&status), None, "no end known yet");
        board.set_end("t", 0, 100);
        assert_eq!(board.task_lag(&status), Some(60));
        assert_eq!(board.lag("t", 0, 120), Some(0), "never negative");
    }

    #[test]
    fn attributes_name_the_application_job_copy_and_task() {
        let board = StatusBoard::new("job-1", "app-1");
        let a = board.task_attributes(task(3));
        let get = |k: &str| a.iter().find(|kv| kv.key.as_str() == k).map(|kv| kv.value.to_string());
        assert_eq!(get("beam_kafka.application.id").as_deref(), Some("app-1"));
        assert_eq!(get("beam_kafka.job.id").as_deref(), Some("job-1"));
        assert_eq!(get("beam_kafka.task").as_deref(), Some("1_3"));
        assert_eq!(get("beam_kafka.sub_topology").as_deref(), Some("1"));
        assert!(get("beam_kafka.copy").is_some_and(|c| c.ends_with(&format!(":{}", std::process::id()))));
    }

    #[test]
    fn an_ended_job_is_exported_a_while_then_dropped() {
        let board = StatusBoard::new("ended-job", "app");
        assert!(live_boards().iter().any(|b| Arc::ptr_eq(b, &board)));
        board.end();
        assert!(live_boards().iter().any(|b| Arc::ptr_eq(b, &board)), "its final counts still go out");
        let id = board.job_id.clone();
        drop(board);
        assert!(!live_boards().iter().any(|b| b.job_id == id), "a dropped board is gone");
    }

    #[test]
    fn events_keep_the_latest() {
        let board = StatusBoard::new("job", "app");
        for i in 0..MAX_EVENTS + 3 {
            board.event(Level::Warning, format!("e{i}"));
        }
        let events = board.events();
        assert_eq!(events.len(), MAX_EVENTS);
        assert_eq!(events.last().unwrap().text, format!("e{}", MAX_EVENTS + 2));
        assert_eq!(events[0].text, "e3");
    }
}
