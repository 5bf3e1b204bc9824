//! Beam's Expansion API. Beam's ReadFromKafka and WriteToKafka are expanded
//! here into this runner's own Kafka transforms (the work is in
//! `runtime::plan::expansion`), so users need no Java for Kafka; any other
//! transform goes to Beam's Java or Python expansion service, which the job
//! server starts on demand (`expansion_backends`; `runtime::plan::expansion_route`
//! says which). The same port serves the files those services named as
//! their environments' dependencies: the client fetches them from here to
//! stage them with its job.
use std::sync::Arc;

use beam_kafka_proto::{expansion, job_management as jm, pipeline as pb};
use beam_kafka_runtime::plan::expansion::expand;
use beam_kafka_runtime::plan::expansion_route::{backend_of, deferred_dependencies, file_dependencies, files_of, Backend};
use prost::Message;
use tonic::{Request, Response, Status};

use crate::artifacts::{file_chunks, Chunks, FILE_TYPE};
use crate::expansion_backends::{not_configured, ExpansionBackends};

pub struct Expansion {
    pub auth: crate::auth::Auth,
    pub backends: Arc<ExpansionBackends>,
}

#[tonic::async_trait]
impl expansion::expansion_service_server::ExpansionService for Expansion {
    async fn expand(&self, request: Request<expansion::ExpansionRequest>) -> Result<Response<expansion::ExpansionResponse>, Status> {
        let (metadata, _, mut request) = request.into_parts();
        // Python's expansion client sends the pipeline's options, the token
        // option among them (removed here: it goes no further).
        self.auth.check("Expand", &metadata, request.pipeline_options.as_mut())?;
        let name = request.transform.as_ref().map(|t| t.unique_name.clone()).unwrap_or_default();
        // A request that does not decode is refused as such; one that does
        // but cannot be expanded gets its error in the response, which the
        // client raises with this text (Beam's convention).
        if let Some(error) = beam_kafka_runtime::plan::expansion::malformed(&request) {
            return Err(Status::invalid_argument(format!("cannot expand '{name}': {error}")));
        }
        let urn = request.transform.as_ref().and_then(|t| t.spec.as_ref()).map(|s| s.urn.clone()).unwrap_or_default();
        let backend = backend_of(&urn);
        let response = if backend == Backend::Kafka {
            expand(&request).unwrap_or_else(|error| failed(&name, error))
        } else {
            self.forward(backend, &name, &urn, request).await
        };
        Ok(Response::new(response))
    }

    async fn discover_schema_transform(
        &self,
        request: Request<expansion::DiscoverSchemaTransformRequest>,
    ) -> Result<Response<expansion::DiscoverSchemaTransformResponse>, Status> {
        // Schema transforms are Java's.
        if !self.backends.can_start(Backend::Java) {
            return Ok(Response::new(expansion::DiscoverSchemaTransformResponse::default()));
        }
        let mut client = self.backends.client(Backend::Java).await.map_err(Status::unavailable)?;
        client.discover_schema_transform(request.into_inner()).await
    }
}

impl Expansion {
    /// Has `backend`'s expansion service expand the request, and remembers
    /// the files its answer names.
    async fn forward(&self, backend: Backend, name: &str, urn: &str, request: expansion::ExpansionRequest) -> expansion::ExpansionResponse {
        let language = backend.language();
        if !self.backends.can_start(backend) {
            return failed(name, format!("beam-kafka's expansion service cannot expand '{urn}': {}", not_configured(backend)));
        }
        let mut client = match self.backends.client(backend).await {
            Ok(c) => c,
            Err(e) => return failed(name, format!("cannot expand '{urn}': {e}")),
        };
        match client.expand(request).await {
            Ok(r) => {
                let r = r.into_inner();
                if r.error.is_empty() {
                    tracing::info!("'{name}' ({urn}) expanded by the {language} expansion service");
                    self.backends.allow_files(file_dependencies(&r));
                    self.backends.remember_deferred(backend, deferred_dependencies(&r));
                }
                r
            }
            Err(s) => failed(name, format!("the {language} expansion service could not expand '{urn}': {}", s.message())),
        }
    }
}

fn failed(name: &str, error: String) -> expansion::ExpansionResponse {
    tracing::info!("cannot expand '{name}': {error}");
    expansion::ExpansionResponse { error, ..Default::default() }
}

/// The files expansions named as dependencies, for the client that stages
/// them with its job (Python's and Go's expansion clients fetch them from
/// the expansion service's address), and nothing else.
pub struct ExpansionArtifacts {
    pub backends: Arc<ExpansionBackends>,
}

#[tonic::async_trait]
impl jm::artifact_retrieval_service_server::ArtifactRetrievalService for ExpansionArtifacts {
    type GetArtifactStream = Chunks;

    /// Artifacts an expansion service named are resolved by it (Java's
    /// deferred jars become their files); the files are then served here.
    async fn resolve_artifacts(
        &self,
        request: Request<jm::ResolveArtifactsRequest>,
    ) -> Result<Response<jm::ResolveArtifactsResponse>, Status> {
        let request = request.into_inner();
        let Some(backend) = request.artifacts.iter().find_map(|a| self.backends.resolver_of(&a.type_payload)) else {
            return Ok(Response::new(jm::ResolveArtifactsResponse { replacements: request.artifacts }));
        };
        let mut client = self.backends.artifacts(backend).await.map_err(Status::unavailable)?;
        let resolved = client.resolve_artifacts(request).await?.into_inner();
        self.backends.allow_files(files_of(&resolved.replacements));
        Ok(Response::new(resolved))
    }

    async fn get_artifact(&self, request: Request<jm::GetArtifactRequest>) -> Result<Response<Self::GetArtifactStream>, Status> {
        let a = request.into_inner().artifact.ok_or_else(|| Status::invalid_argument("no artifact"))?;
        if a.type_urn != FILE_TYPE {
            return Err(Status::invalid_argument(format!("cannot serve artifacts of type {}", a.type_urn)));
        }
        let p = pb::ArtifactFilePayload::decode(a.type_payload.as_slice()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        if !self.backends.may_serve(&p.path) {
            return Err(Status::permission_denied("only the dependencies of an expansion made here are served"));
        }
        Ok(Response::new(file_chunks(std::path::Path::new(&p.path), &p.path).await?))
    }
}
