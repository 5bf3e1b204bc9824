//! BeamFnState: the harness reads side inputs (and, with user state, reads
//! and writes state) during a bundle. Each request names its bundle's
//! instruction; the runner registered a handler for that bundle when it
//! started it (`SdkWorker::process_bundle`), and the handler answers. A
//! request of a bundle without a handler, or of a kind its handler does not
//! serve, gets an error the harness reports with the failing bundle.
use beam_kafka_proto::fn_execution as fn_pb;
use fn_pb::state_response::Response;

/// Answers the state requests of one bundle. Called on the gRPC task: it
/// must be quick (lookups in memory), never block on the bundle's owner.
pub trait StateHandler: Send + Sync {
    fn handle(&self, request: &fn_pb::StateRequest) -> Result<Response, String>;

    /// Cache tokens for the bundle's request: while a token stays the same,
    /// the SDK may answer reads of that state from its own cache, across
    /// bundles. A handler must change its token whenever the state changes
    /// other than through the SDK's own writes.
    fn cache_tokens(&self) -> Vec<fn_pb::process_bundle_request::CacheToken> {
        Vec::new()
    }
}

/// A request's kind, for error messages.
pub fn kind_of(request: &fn_pb::StateRequest) -> String {
    let kind = request.state_key.as_ref().and_then(|k| k.r#type.as_ref()).map(|t| format!("{t:?}")).unwrap_or_default();
    kind.split('(').next().unwrap_or("unknown").to_string()
}
