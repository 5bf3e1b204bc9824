//! Beam's Expansion API: expands the Python SDK's ReadFromKafka and
//! WriteToKafka into this runner's own Kafka transforms, so users need no
//! Java expansion service. The work is in `runtime::expansion`.
use beam_kafka_proto::expansion;
use beam_kafka_runtime::expansion::expand;

pub struct KafkaExpansion {
    pub auth: crate::auth::Auth,
}

#[tonic::async_trait]
impl expansion::expansion_service_server::ExpansionService for KafkaExpansion {
    async fn expand(
        &self,
        request: tonic::Request<expansion::ExpansionRequest>,
    ) -> Result<tonic::Response<expansion::ExpansionResponse>, tonic::Status> {
        let (metadata, _, mut request) = request.into_parts();
        // Python's expansion client sends the pipeline's options, the token
        // option among them.
        self.auth.check("Expand", &metadata, request.pipeline_options.as_mut())?;
        let name = request.transform.as_ref().map(|t| t.unique_name.clone()).unwrap_or_default();
        // A request that does not decode is refused as such; one that does
        // but cannot be expanded gets its error in the response, which the
        // client raises with this text (Beam's convention).
        if let Some(error) = beam_kafka_runtime::expansion::malformed(&request) {
            return Err(tonic::Status::invalid_argument(format!("cannot expand '{name}': {error}")));
        }
        let response = expand(&request).unwrap_or_else(|error| {
            tracing::info!("cannot expand '{name}': {error}");
            expansion::ExpansionResponse { error, ..Default::default() }
        });
        Ok(tonic::Response::new(response))
    }

    async fn discover_schema_transform(
        &self,
        _: tonic::Request<expansion::DiscoverSchemaTransformRequest>,
    ) -> Result<tonic::Response<expansion::DiscoverSchemaTransformResponse>, tonic::Status> {
        Ok(tonic::Response::new(expansion::DiscoverSchemaTransformResponse::default()))
    }
}
