//! BeamFnLogging: SDK log lines go to the runner's log and to the job's sink.
use std::pin::Pin;
use std::sync::Arc;

use beam_kafka_proto::fn_execution as fn_pb;
use fn_pb::log_entry::severity::Enum as Severity;
use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::registry::{Registry, SdkLog};

pub(crate) struct LoggingService {
    registry: Arc<Registry>,
}

impl LoggingService {
    pub fn new(registry: Arc<Registry>) -> Self {
        LoggingService { registry }
    }
}

type LogControlStream = Pin<Box<dyn Stream<Item = Result<fn_pb::LogControl, Status>> + Send>>;

#[tonic::async_trait]
impl fn_pb::beam_fn_logging_server::BeamFnLogging for LoggingService {
    type LoggingStream = LogControlStream;

    async fn logging(&self, request: Request<Streaming<fn_pb::log_entry::List>>) -> Result<Response<Self::LoggingStream>, Status> {
        let id = crate::worker_id(&request)?;
        let sink = self.registry.spec(&id).map(|s| s.logs.clone()).ok_or_else(|| Status::permission_denied("unknown worker id"))?;
        let sink = Some(sink);
        let id = crate::public_name(&id).to_string();
        let mut inbound = request.into_inner();
        tokio::spawn(async move {
            while let Some(Ok(list)) = inbound.next().await {
                for e in list.log_entries {
                    let severity = Severity::try_from(e.severity).unwrap_or(Severity::Unspecified);
                    match severity {
                        Severity::Error | Severity::Critical => tracing::error!(worker = %id, "{}", e.message),
                        Severity::Warn => tracing::warn!(worker = %id, "{}", e.message),
                        Severity::Info | Severity::Notice => tracing::info!(worker = %id, "{}", e.message),
                        _ => tracing::debug!(worker = %id, "{}", e.message),
                    }
                    if let Some(sink) = &sink {
                        let _ = sink.send(SdkLog {
                            worker_id: id.clone(),
                            severity: e.severity,
                            message: e.message,
                            trace: e.trace,
                            transform_id: e.transform_id,
                        });
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(futures::stream::pending())))
    }
}
