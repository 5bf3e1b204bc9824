//! Beam's Expansion API: expands the Python SDK's ReadFromKafka and
//! WriteToKafka into this runner's own Kafka transforms, so users need no
//! Java expansion service. The work is in `runtime::expansion`.
use beam_kafka_proto::expansion;
use beam_kafka_runtime::expansion::expand;

pub struct KafkaExpansion;

#[tonic::async_trait]
impl expansion::expansion_service_server::ExpansionService for KafkaExpansion {
    async fn expand(
        &self,
        request: tonic::Request<expansion::ExpansionRequest>,
    ) -> Result<tonic::Response<expansion::ExpansionResponse>, tonic::Status> {
        let request = request.into_inner();
        let name = request.transform.as_ref().map(|t| t.unique_name.clone()).unwrap_or_default();
        // Errors go in the response: the client raises them with this text.
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
