//! Starting the Fn API server and registering expected workers.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use beam_kafka_proto::fn_execution as fn_pb;
use tokio::sync::oneshot;
use tokio_stream::wrappers::TcpListenerStream;

use crate::registry::{Expected, Registry, WorkerSpec};
use crate::worker::SdkWorker;
use crate::{control, data, logging, provision, state_service};

/// The process-wide Fn API server.
#[derive(Clone)]
pub struct FnApiServer {
    addr: SocketAddr,
    /// The State API's plain socket (`state_socket`), on the same host.
    state_addr: SocketAddr,
    registry: Arc<Registry>,
}

/// The connections a gRPC server accepts on `listener`, with Nagle's
/// algorithm off. Small messages (a bundle request, its last data frame, a
/// response) otherwise wait for the peer's delayed ACK: ~40 ms per bundle.
/// (tonic's `tcp_nodelay` covers only listeners it binds itself.)
pub fn incoming(listener: tokio::net::TcpListener) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        conn.set_nodelay(true)?;
        Ok(conn)
    })
}

/// Generous gRPC message limit: bundles of large elements travel in one message.
const MAX_MESSAGE_BYTES: usize = 256 << 20;

impl FnApiServer {
    /// Binds `host:0` and serves in the background.
    pub async fn start(host: &str) -> std::io::Result<FnApiServer> {
        let listener = tokio::net::TcpListener::bind((host, 0)).await?;
        let addr = listener.local_addr()?;
        let registry = Arc::new(Registry::default());
        let state_listener = tokio::net::TcpListener::bind((host, 0)).await?;
        let state_addr = state_listener.local_addr()?;
        tokio::spawn(crate::state_socket::serve(state_listener, registry.clone()));
        let router = tonic::transport::Server::builder()
            .add_service(
                fn_pb::beam_fn_control_server::BeamFnControlServer::new(control::ControlService::new(registry.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .add_service(
                fn_pb::beam_fn_data_server::BeamFnDataServer::new(data::DataService::new(registry.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            // One limit for every service: a state append or a log line
            // as large as a data message must not fail the job.
            .add_service(
                fn_pb::beam_fn_state_server::BeamFnStateServer::new(state_service::StateService::new(registry.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .add_service(
                fn_pb::beam_fn_logging_server::BeamFnLoggingServer::new(logging::LoggingService::new(registry.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            )
            .add_service(
                fn_pb::provision_service_server::ProvisionServiceServer::new(provision::ProvisionSvc::new(registry.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            );
        tokio::spawn(async move {
            if let Err(e) = router.serve_with_incoming(incoming(listener)).await {
                tracing::error!("Fn API server stopped: {e}");
            }
        });
        tracing::info!("Fn API server listening on {addr}");
        Ok(FnApiServer { addr, state_addr, registry })
    }

    /// The URL SDK harnesses connect to (`host:port`).
    pub fn url(&self) -> String {
        self.addr.to_string()
    }

    /// Where harnesses this runner starts may send state requests instead
    /// of the gRPC State API (`host:port`; `state_socket`).
    pub fn state_socket_url(&self) -> String {
        self.state_addr.to_string()
    }

    /// Registers a worker that an environment is about to start. The returned
    /// receiver yields the worker once its control stream is connected.
    pub fn expect_worker(&self, spec: WorkerSpec) -> oneshot::Receiver<Arc<SdkWorker>> {
        let (tx, rx) = oneshot::channel();
        let id = spec.worker_id.clone();
        self.registry.expected.insert(id, Expected { spec: Arc::new(spec), on_connect: Some(tx) });
        rx
    }

    /// Waits for a registered worker to connect, up to `timeout`.
    pub async fn await_worker(rx: oneshot::Receiver<Arc<SdkWorker>>, timeout: Duration) -> Result<Arc<SdkWorker>, String> {
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(w)) => Ok(w),
            Ok(Err(_)) => Err("the worker registration was dropped".into()),
            Err(_) => Err(format!("the SDK harness did not connect to the Fn API within {} s", timeout.as_secs())),
        }
    }

    /// The artifacts worker `worker_id` was told about (its environment's
    /// dependencies), if the id is one this server expects.
    pub fn dependencies_of(&self, worker_id: &str) -> Option<Vec<beam_kafka_proto::pipeline::ArtifactInformation>> {
        self.registry.spec(worker_id).map(|s| s.provision_info.dependencies.clone())
    }

    /// Forgets a worker and fails its in-flight bundles.
    pub fn release_worker(&self, worker_id: &str) {
        self.registry.expected.remove(worker_id);
        if let Some((_, w)) = self.registry.connected.remove(worker_id) {
            w.disconnect("the job released its worker");
        }
    }
}
