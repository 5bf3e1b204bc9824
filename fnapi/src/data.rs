//! BeamFnData: one bidirectional element stream per harness.
use std::pin::Pin;
use std::sync::Arc;

use beam_kafka_proto::fn_execution as fn_pb;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::registry::Registry;

pub(crate) struct DataService {
    registry: Arc<Registry>,
}

impl DataService {
    pub fn new(registry: Arc<Registry>) -> Self {
        DataService { registry }
    }
}

type ElementStream = Pin<Box<dyn Stream<Item = Result<fn_pb::Elements, Status>> + Send>>;

#[tonic::async_trait]
impl fn_pb::beam_fn_data_server::BeamFnData for DataService {
    type DataStream = ElementStream;

    async fn data(&self, request: Request<Streaming<fn_pb::Elements>>) -> Result<Response<Self::DataStream>, Status> {
        let id = crate::worker_id(&request)?;
        let worker = self.registry.worker(&id).ok_or_else(|| Status::not_found("the worker is not connected"))?;
        let (tx, rx) = mpsc::unbounded_channel();
        if !worker.set_data_stream(tx) {
            tracing::warn!(worker = %worker.name, "refused a second data stream claiming this worker");
            return Err(Status::already_exists(format!("worker '{}' already has a data stream", worker.name)));
        }
        let mut inbound = request.into_inner();
        tokio::spawn(async move {
            while let Some(msg) = inbound.next().await {
                match msg {
                    Ok(elements) => worker.on_data(elements),
                    Err(e) => {
                        worker.disconnect(&format!("data stream failed: {}", e.message()));
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }
}
