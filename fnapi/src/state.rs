//! BeamFnState. This runner version offers no user state or side inputs
//! (validation refuses pipelines that need them), so every request gets an
//! error the harness reports with the failing bundle.
use std::pin::Pin;
use std::sync::Arc;

use beam_kafka_proto::fn_execution as fn_pb;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::registry::Registry;

pub(crate) struct StateService {
    #[allow(dead_code)] // state stores attach here with user state and side inputs
    registry: Arc<Registry>,
}

impl StateService {
    pub fn new(registry: Arc<Registry>) -> Self {
        StateService { registry }
    }
}

type StateStream = Pin<Box<dyn Stream<Item = Result<fn_pb::StateResponse, Status>> + Send>>;

#[tonic::async_trait]
impl fn_pb::beam_fn_state_server::BeamFnState for StateService {
    type StateStream = StateStream;

    async fn state(&self, request: Request<Streaming<fn_pb::StateRequest>>) -> Result<Response<Self::StateStream>, Status> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut inbound = request.into_inner();
        tokio::spawn(async move {
            while let Some(Ok(req)) = inbound.next().await {
                let kind = req.state_key.as_ref().and_then(|k| k.r#type.as_ref()).map(|t| format!("{t:?}")).unwrap_or_default();
                let kind = kind.split('(').next().unwrap_or("unknown").to_string();
                let resp = fn_pb::StateResponse {
                    id: req.id,
                    error: format!("the runner does not support state requests of kind {kind} yet"),
                    response: None,
                };
                if tx.send(Ok(resp)).is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }
}
