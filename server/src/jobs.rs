//! Jobs known to the job service: prepared, running and finished, with their
//! state history and messages for the streaming Job API calls.
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use beam_kafka_proto::job_management as jm;
use beam_kafka_proto::pipeline::Pipeline;
use dashmap::DashMap;
use jm::job_state::Enum as State;
use tokio::sync::{broadcast, watch};

use crate::metrics::JobMetrics;

pub struct Job {
    pub id: String,
    pub name: String,
    pub staging_token: String,
    pub pipeline: Mutex<Pipeline>,
    pub options: prost_types::Struct,
    pub runner_options: beam_kafka_config::RunnerOptions,
    state: watch::Sender<jm::JobStateEvent>,
    /// The latest messages and states, oldest dropped past `MAX_HISTORY`.
    history: Mutex<std::collections::VecDeque<jm::JobMessagesResponse>>,
    /// When the job was prepared, and when it ended: for eviction.
    created: std::time::Instant,
    ended: Mutex<Option<std::time::Instant>>,
    live: broadcast::Sender<jm::JobMessagesResponse>,
    pub metrics: Mutex<JobMetrics>,
    pub cancel: watch::Sender<bool>,
    next_message: std::sync::atomic::AtomicU64,
    /// Artifact staging has begun (it may happen once per job).
    pub staging_started: std::sync::atomic::AtomicBool,
    /// Once planned: what this process knows of its tasks, and the picture
    /// of its topology (for the status page).
    pub board: std::sync::OnceLock<Arc<beam_kafka_actors::status_board::StatusBoard>>,
    pub topology_svg: std::sync::OnceLock<String>,
    /// Once judged: a fingerprint of the plan this copy runs (its
    /// manifest), in its reports, so an update can tell the copies of
    /// another version from this one's (`earlier_run`).
    pub plan_fingerprint: std::sync::OnceLock<String>,
    /// Once judged an update: the fingerprint of the version on record it
    /// replaces, still on record until this copy records its own
    /// (`superseded` must not take that for a newer version).
    pub replaces: std::sync::OnceLock<String>,
    /// Once planned: this copy's reports to the application's copies topic,
    /// and the other copies' it read.
    pub copies: std::sync::OnceLock<Arc<beam_kafka_actors::copies::Reporting>>,
    /// The job's standby stores (`--num_standby_replicas`).
    pub standby: std::sync::Mutex<Option<beam_kafka_actors::standby::Standby>>,
}

fn now() -> prost_types::Timestamp {
    prost_types::Timestamp::from(SystemTime::now())
}

pub fn is_terminal(s: i32) -> bool {
    [State::Done, State::Failed, State::Cancelled, State::Drained, State::Updated].iter().any(|t| *t as i32 == s)
}

impl Job {
    pub fn new(
        id: String,
        name: String,
        staging_token: String,
        pipeline: Pipeline,
        options: prost_types::Struct,
        runner_options: beam_kafka_config::RunnerOptions,
    ) -> Job {
        let (live, _) = broadcast::channel(1024);
        Job {
            id,
            name,
            staging_token,
            pipeline: Mutex::new(pipeline),
            options,
            runner_options,
            state: watch::channel(jm::JobStateEvent { state: State::Stopped as i32, timestamp: Some(now()) }).0,
            history: Mutex::new(std::collections::VecDeque::new()),
            created: std::time::Instant::now(),
            ended: Mutex::new(None),
            live,
            metrics: Mutex::new(JobMetrics::default()),
            cancel: watch::channel(false).0,
            next_message: 0.into(),
            staging_started: false.into(),
            board: Default::default(),
            topology_svg: Default::default(),
            plan_fingerprint: Default::default(),
            replaces: Default::default(),
            copies: Default::default(),
            standby: Default::default(),
        }
    }

    /// The attributes of the job's exported data points.
    pub fn attributes(&self) -> Vec<opentelemetry::KeyValue> {
        match self.board.get() {
            Some(b) => b.attributes.clone(),
            None => vec![
                opentelemetry::KeyValue::new("beam_kafka.application.id", self.runner_options.application_id.clone()),
                opentelemetry::KeyValue::new("beam_kafka.job.id", self.id.clone()),
            ],
        }
    }

    /// How long since the job was prepared.
    pub fn age_s(&self) -> f64 {
        self.created.elapsed().as_secs_f64()
    }

    pub fn state(&self) -> jm::JobStateEvent {
        *self.state.borrow()
    }

    pub fn subscribe_state(&self) -> watch::Receiver<jm::JobStateEvent> {
        self.state.subscribe()
    }

    /// Moves to `s` unless the job already ended.
    pub fn set_state(&self, s: State) {
        let ev = jm::JobStateEvent { state: s as i32, timestamp: Some(now()) };
        let changed = self.state.send_if_modified(|cur| {
            // A job being cancelled ends CANCELLED (or FAILED, DONE if it
            // got there first), never RUNNING again; a draining one is
            // never RUNNING again either.
            let cancelling = cur.state == State::Cancelling as i32 && !is_terminal(s as i32);
            let draining = cur.state == State::Draining as i32 && s == State::Running;
            if is_terminal(cur.state) || cur.state == s as i32 || cancelling || draining {
                false
            } else {
                *cur = ev;
                true
            }
        });
        if let (true, Some(board)) = (changed, self.board.get()) {
            board.set_state(s.as_str_name());
        }
        if changed && is_terminal(s as i32) {
            *self.ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
        }
        if changed {
            self.publish(jm::JobMessagesResponse { response: Some(jm::job_messages_response::Response::StateResponse(ev)) });
        }
    }

    pub fn message(&self, importance: jm::job_message::MessageImportance, text: impl Into<String>) {
        let id = self.next_message.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let msg = jm::JobMessage {
            message_id: format!("{}-{id}", self.id),
            time: humantime(SystemTime::now()),
            importance: importance as i32,
            message_text: text.into(),
        };
        self.publish(jm::JobMessagesResponse { response: Some(jm::job_messages_response::Response::MessageResponse(msg)) });
    }

    fn publish(&self, r: jm::JobMessagesResponse) {
        let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if history.len() >= MAX_HISTORY {
            history.pop_front();
        }
        history.push_back(r.clone());
        let _ = self.live.send(r);
    }

    /// Everything said so far plus a receiver for what comes next, taken
    /// under one lock so nothing is missed or repeated.
    pub fn messages(&self) -> (Vec<jm::JobMessagesResponse>, broadcast::Receiver<jm::JobMessagesResponse>) {
        let history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        (history.iter().cloned().collect(), self.live.subscribe())
    }
}

/// Messages a job keeps for clients that connect later (SDK warnings of a
/// long-running job would otherwise grow without end).
const MAX_HISTORY: usize = 10_000;

fn humantime(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:03}", d.as_secs(), d.subsec_millis())
}

#[derive(Default)]
pub struct Jobs {
    /// By preparation id until Run, then also by job id.
    pub by_id: DashMap<String, Arc<Job>>,
}

impl Jobs {
    /// The jobs that were run (once each: a run job is also kept under its
    /// preparation id; prepared ones not run yet have no job id).
    pub fn run_jobs(&self) -> Vec<Arc<Job>> {
        self.by_id.iter().filter(|e| !e.id.is_empty() && e.key() == &e.id).map(|e| e.value().clone()).collect()
    }

    /// Forgets jobs that ended, and prepared jobs never run, more than `ttl`
    /// ago; returns the staging tokens of the forgotten prepared jobs.
    pub fn evict(&self, ttl: std::time::Duration) -> Vec<String> {
        let now = std::time::Instant::now();
        let old = |t: std::time::Instant| now.duration_since(t) > ttl;
        let mut abandoned = Vec::new();
        self.by_id.retain(|_, job| {
            let keep = if job.id.is_empty() {
                !old(job.created)
            } else {
                job.ended.lock().unwrap_or_else(|e| e.into_inner()).is_none_or(|t| !old(t))
            };
            if !keep && job.id.is_empty() {
                abandoned.push(job.staging_token.clone());
            }
            keep
        });
        abandoned
    }

    /// Cancels every job that has not ended and waits (at most `deadline`)
    /// until each has.
    pub async fn cancel_all(&self, deadline: std::time::Duration) {
        let running: Vec<Arc<Job>> =
            self.by_id.iter().filter(|j| !j.id.is_empty() && !is_terminal(j.state().state)).map(|j| j.clone()).collect();
        if running.is_empty() {
            return;
        }
        tracing::info!("cancelling {} running job(s)", running.len());
        let waits = running.iter().map(|job| {
            let mut state = job.subscribe_state();
            job.set_state(State::Cancelling);
            job.cancel.send_replace(true);
            async move {
                while !is_terminal(state.borrow_and_update().state) {
                    if state.changed().await.is_err() {
                        return;
                    }
                }
            }
        });
        if tokio::time::timeout(deadline, futures::future::join_all(waits)).await.is_err() {
            tracing::warn!("some jobs did not finish cancelling within {} s", deadline.as_secs());
        }
    }

    pub fn get(&self, id: &str) -> Result<Arc<Job>, tonic::Status> {
        self.by_id.get(id).map(|j| j.clone()).ok_or_else(|| tonic::Status::not_found(format!("no job '{id}'")))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use beam_kafka_config::OptionValue;
    use jm::job_message::MessageImportance as Importance;

    pub(crate) fn job(id: &str, token: &str) -> Arc<Job> {
        let values = std::collections::BTreeMap::from([
            ("application_id".to_string(), OptionValue::String("app".into())),
            ("bootstrap_servers".to_string(), OptionValue::String("localhost:9092".into())),
        ]);
        let opts = beam_kafka_config::RunnerOptions::parse(&values).expect("valid options");
        Arc::new(Job::new(id.into(), "name".into(), token.into(), Pipeline::default(), prost_types::Struct::default(), opts))
    }

    #[test]
    fn the_message_history_keeps_the_latest() {
        let j = job("j", "t");
        for i in 0..MAX_HISTORY + 5 {
            j.message(Importance::JobMessageBasic, format!("m{i}"));
        }
        let (history, _) = j.messages();
        assert_eq!(history.len(), MAX_HISTORY);
        assert!(format!("{:?}", history.last().unwrap()).contains(&format!("m{}", MAX_HISTORY + 4)));
        assert!(!format!("{:?}", history.first().unwrap()).contains("\"m0\""));
    }

    #[test]
    fn finished_and_abandoned_jobs_are_evicted_running_ones_kept() {
        let jobs = Jobs::default();
        jobs.by_id.insert("prep-1".into(), job("", "prep-1"));
        let running = job("running", "prep-2");
        running.set_state(State::Running);
        jobs.by_id.insert("running".into(), running);
        let done = job("done", "prep-3");
        done.set_state(State::Done);
        jobs.by_id.insert("done".into(), done);
        assert!(jobs.evict(std::time::Duration::from_secs(3600)).is_empty());
        assert_eq!(jobs.by_id.len(), 3, "nothing is old yet");
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(jobs.evict(std::time::Duration::from_millis(1)), vec!["prep-1".to_string()]);
        let left: Vec<String> = jobs.by_id.iter().map(|e| e.key().clone()).collect();
        assert_eq!(left, ["running"]);
    }
}
