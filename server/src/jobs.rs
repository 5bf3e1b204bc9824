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
    history: Mutex<Vec<jm::JobMessagesResponse>>,
    live: broadcast::Sender<jm::JobMessagesResponse>,
    pub metrics: Mutex<JobMetrics>,
    pub cancel: watch::Sender<bool>,
    next_message: std::sync::atomic::AtomicU64,
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
            history: Mutex::new(Vec::new()),
            live,
            metrics: Mutex::new(JobMetrics::default()),
            cancel: watch::channel(false).0,
            next_message: 0.into(),
        }
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
            if is_terminal(cur.state) || cur.state == s as i32 {
                false
            } else {
                *cur = ev;
                true
            }
        });
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
        let mut history = self.history.lock().expect("lock");
        history.push(r.clone());
        let _ = self.live.send(r);
    }

    /// Everything said so far plus a receiver for what comes next, taken
    /// under one lock so nothing is missed or repeated.
    pub fn messages(&self) -> (Vec<jm::JobMessagesResponse>, broadcast::Receiver<jm::JobMessagesResponse>) {
        let history = self.history.lock().expect("lock");
        (history.clone(), self.live.subscribe())
    }
}

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
            let _ = job.cancel.send(true);
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
