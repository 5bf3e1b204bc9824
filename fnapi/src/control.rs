//! BeamFnControl: the instruction stream of each harness, and its descriptors.
use std::pin::Pin;
use std::sync::Arc;

use beam_kafka_proto::fn_execution as fn_pb;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::registry::Registry;
use crate::worker::SdkWorker;

pub(crate) struct ControlService {
    registry: Arc<Registry>,
}

impl ControlService {
    pub fn new(registry: Arc<Registry>) -> Self {
        ControlService { registry }
    }
}

type InstructionStream = Pin<Box<dyn Stream<Item = Result<fn_pb::InstructionRequest, Status>> + Send>>;

#[tonic::async_trait]
impl fn_pb::beam_fn_control_server::BeamFnControl for ControlService {
    type ControlStream = InstructionStream;

    async fn control(&self, request: Request<Streaming<fn_pb::InstructionResponse>>) -> Result<Response<Self::ControlStream>, Status> {
        let id = crate::worker_id(&request)?;
        let name = crate::public_name(&id).to_string();
        let mut expected = self.registry.expected.get_mut(&id).ok_or_else(|| Status::permission_denied("unknown worker id"))?;
        // Registration is one-shot: a second control stream claiming a
        // worker is refused, and the worker keeps its first one.
        let Some(on_connect) = expected.on_connect.take() else {
            drop(expected);
            tracing::warn!(worker = %name, "refused a second control stream claiming this worker");
            return Err(Status::already_exists(format!("worker '{name}' is already connected")));
        };
        drop(expected);
        let (tx, rx) = mpsc::unbounded_channel();
        let worker = Arc::new(SdkWorker::new(id.clone(), tx));
        self.registry.connected.insert(id.clone(), worker.clone());
        let _ = on_connect.send(worker.clone());
        tracing::info!(worker = %name, "SDK harness connected");
        let mut inbound = request.into_inner();
        let registry = self.registry.clone();
        tokio::spawn(async move {
            let reason = loop {
                match inbound.next().await {
                    Some(Ok(resp)) => worker.on_response(resp),
                    Some(Err(e)) => break format!("control stream failed: {}", e.message()),
                    None => break "the SDK harness closed its control stream".to_string(),
                }
            };
            tracing::info!(worker = %worker.name, "{reason}");
            worker.disconnect(&reason);
            registry.connected.remove_if(&worker.id, |_, w| Arc::ptr_eq(w, &worker));
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }

    async fn get_process_bundle_descriptor(
        &self,
        request: Request<fn_pb::GetProcessBundleDescriptorRequest>,
    ) -> Result<Response<fn_pb::ProcessBundleDescriptor>, Status> {
        let id = crate::worker_id(&request)?;
        let worker = self.registry.worker(&id).ok_or_else(|| Status::not_found("the worker is not connected"))?;
        let pbd_id = &request.get_ref().process_bundle_descriptor_id;
        worker.descriptor(pbd_id).map(Response::new).ok_or_else(|| Status::not_found(format!("no process bundle descriptor '{pbd_id}'")))
    }
}
