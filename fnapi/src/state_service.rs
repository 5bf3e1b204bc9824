//! The BeamFnState service: a harness's state stream, each request answered
//! by the handler its bundle registered (`crate::state::StateHandler`).
use std::pin::Pin;
use std::sync::Arc;

use beam_kafka_proto::fn_execution as fn_pb;
use futures::{Stream, StreamExt};
use tonic::{Request, Status, Streaming};

use crate::registry::Registry;
use crate::state::kind_of;

pub(crate) struct StateService {
    registry: Arc<Registry>,
}

impl StateService {
    pub fn new(registry: Arc<Registry>) -> Self {
        StateService { registry }
    }
}

type StateStream = Pin<Box<dyn Stream<Item = Result<fn_pb::StateResponse, Status>> + Send>>;

/// Marks the worker's state stream closed when dropped.
struct StreamOpen(std::sync::Arc<crate::worker::SdkWorker>);

impl Drop for StreamOpen {
    fn drop(&mut self) {
        self.0.state_connected.store(false, std::sync::atomic::Ordering::Release);
    }
}

#[tonic::async_trait]
impl fn_pb::beam_fn_state_server::BeamFnState for StateService {
    type StateStream = StateStream;

    async fn state(&self, request: Request<Streaming<fn_pb::StateRequest>>) -> Result<tonic::Response<Self::StateStream>, Status> {
        let id = crate::worker_id(&request)?;
        let worker = self.registry.worker(&id).ok_or_else(|| Status::permission_denied("unknown or unconnected worker id"))?;
        if worker.state_connected.swap(true, std::sync::atomic::Ordering::AcqRel) {
            tracing::warn!(worker = %worker.name, "refused a second state stream claiming this worker");
            return Err(Status::already_exists(format!("worker '{}' already has a state stream", worker.name)));
        }
        // Each request is answered as the response stream polls for it, on
        // the connection's own task: a Python harness waits for most of
        // these answers (a read, a commit), so a hop through another task
        // would add a thread wake-up to every round trip.
        let requests = tokio_stream::StreamExt::map_while(request.into_inner(), |req| req.ok());
        // When the stream ends the worker may open another (only two at
        // once are refused).
        let open = StreamOpen(worker.clone());
        let answers = requests.map(move |req| Ok(answer(&open.0, req)));
        Ok(tonic::Response::new(Box::pin(answers)))
    }
}

/// The answer to one request of `worker`, by the handler of its bundle.
pub(crate) fn answer(worker: &crate::worker::SdkWorker, req: fn_pb::StateRequest) -> fn_pb::StateResponse {
    let answer = match worker.state_handler(&req.instruction_id) {
        Some(h) => h.handle(&req),
        None => Err(format!("the runner has no state for bundle '{}' ({} request)", req.instruction_id, kind_of(&req))),
    };
    match answer {
        Ok(r) => fn_pb::StateResponse { id: req.id, error: String::new(), response: Some(r) },
        Err(error) => fn_pb::StateResponse { id: req.id, error, response: None },
    }
}
