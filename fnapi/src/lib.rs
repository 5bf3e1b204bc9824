//! The Fn API side of the runner: one tonic server per process for Control,
//! Data, State, Logging and Provision, routed by the `worker_id` metadata and
//! by instruction id; and the environments that start SDK harnesses.
//!
//! Nothing is processed on a gRPC thread: bundle results are handed back to
//! the caller (an actor) through channels.
mod control;
mod data;
pub mod environment;
mod finalize;
pub mod go_harness;
mod harness_process;
pub mod java_harness;
mod logging;
mod provision;
mod registry;
mod server;
pub mod split;
pub mod state;
mod state_service;
mod state_socket;
pub mod worker;

pub use registry::{LogSink, SdkLog, WorkerSpec};
pub use server::{incoming, FnApiServer};
pub use split::{ChannelSplit, Residual, SplitResult};
pub use state::StateHandler;
pub use state_socket::STATE_SOCKET_ENV;
pub use worker::{element_chunks, BundleError, BundleInput, BundleResult, EarlyOutputs, SdkWorker, TimerFamily};

/// gRPC metadata key the SDK harness identifies itself with.
pub const WORKER_ID_HEADER: &str = "worker_id";

/// Separates a worker id's readable name from its secret part.
pub const SECRET_SEPARATOR: &str = ".";

/// The part of a worker id that may be logged or shown (the rest is the
/// worker's secret).
pub fn public_name(worker_id: &str) -> &str {
    worker_id.split(SECRET_SEPARATOR).next().unwrap_or("")
}

fn worker_id<T>(req: &tonic::Request<T>) -> Result<String, tonic::Status> {
    req.metadata()
        .get(WORKER_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .ok_or_else(|| tonic::Status::invalid_argument("missing worker_id metadata"))
}
