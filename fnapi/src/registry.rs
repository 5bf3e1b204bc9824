//! Workers known to this process: those expected (an environment is starting
//! them) and those connected.
use std::sync::Arc;

use beam_kafka_proto::fn_execution as fn_pb;
use dashmap::DashMap;
use tokio::sync::{mpsc, oneshot};

use crate::worker::SdkWorker;

/// A log line from an SDK harness.
#[derive(Clone, Debug)]
pub struct SdkLog {
    pub worker_id: String,
    pub severity: i32,
    pub message: String,
    pub trace: String,
    pub transform_id: String,
}

pub type LogSink = mpsc::UnboundedSender<SdkLog>;

/// What the runner knows about a worker before it connects.
pub struct WorkerSpec {
    pub worker_id: String,
    pub provision_info: fn_pb::ProvisionInfo,
    /// Where the worker's log lines go (the job's message stream).
    pub logs: LogSink,
}

pub(crate) struct Expected {
    pub spec: Arc<WorkerSpec>,
    pub on_connect: Option<oneshot::Sender<Arc<SdkWorker>>>,
}

#[derive(Default)]
pub(crate) struct Registry {
    pub expected: DashMap<String, Expected>,
    pub connected: DashMap<String, Arc<SdkWorker>>,
}

impl Registry {
    pub fn spec(&self, worker_id: &str) -> Option<Arc<WorkerSpec>> {
        self.expected.get(worker_id).map(|e| e.spec.clone())
    }

    pub fn worker(&self, worker_id: &str) -> Option<Arc<SdkWorker>> {
        self.connected.get(worker_id).map(|w| w.clone())
    }
}
