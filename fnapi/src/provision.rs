//! ProvisionService: what a harness started by PROCESS or DOCKER asks for first.
use std::sync::Arc;

use beam_kafka_proto::fn_execution as fn_pb;
use tonic::{Request, Response, Status};

use crate::registry::Registry;

pub(crate) struct ProvisionSvc {
    registry: Arc<Registry>,
}

impl ProvisionSvc {
    pub fn new(registry: Arc<Registry>) -> Self {
        ProvisionSvc { registry }
    }
}

#[tonic::async_trait]
impl fn_pb::provision_service_server::ProvisionService for ProvisionSvc {
    async fn get_provision_info(
        &self,
        request: Request<fn_pb::GetProvisionInfoRequest>,
    ) -> Result<Response<fn_pb::GetProvisionInfoResponse>, Status> {
        let id = crate::worker_id(&request)?;
        let spec = self.registry.spec(&id).ok_or_else(|| Status::permission_denied("unknown worker id"))?;
        Ok(Response::new(fn_pb::GetProvisionInfoResponse { info: Some(spec.provision_info.clone()) }))
    }
}
