//! Artifact staging (the reverse retrieval protocol: we ask the client for
//! each dependency) and retrieval for harnesses. Artifact names come from the
//! client and are never used as paths before they are checked.
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use beam_kafka_proto::job_management as jm;
use beam_kafka_proto::pipeline as pb;
use futures::{Stream, StreamExt};
use prost::Message;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::jobs::Jobs;

pub(crate) const FILE_TYPE: &str = "beam:artifact:type:file:v1";
const STAGING_TO_ROLE: &str = "beam:artifact:role:staging_to:v1";

/// A name safe to use as one file name inside a directory we own.
pub fn check_name(name: &str) -> Result<&str, String> {
    let bad =
        name.is_empty() || name == "." || name == ".." || name.len() > 255 || name.contains(['/', '\\', '\0']) || name.starts_with('~');
    if bad {
        Err(format!("artifact name '{name}' is not a plain file name; refusing to stage it"))
    } else {
        Ok(name)
    }
}

/// A directory name derived from an id we did not choose.
pub(crate) fn safe_dir_name(id: &str) -> String {
    let cleaned: String = id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    if cleaned.is_empty() || cleaned.chars().all(|c| c == '_') {
        "env".to_string()
    } else {
        cleaned
    }
}

fn staged_name(a: &pb::ArtifactInformation, index: usize) -> Result<String, String> {
    if a.role_urn == STAGING_TO_ROLE {
        let p = pb::ArtifactStagingToRolePayload::decode(a.role_payload.as_slice())
            .map_err(|e| format!("undecodable staging role payload: {e}"))?;
        check_name(&p.staged_name).map(str::to_string)
    } else {
        Ok(format!("artifact-{index}"))
    }
}

pub struct Staging {
    pub jobs: Arc<Jobs>,
    pub root: PathBuf,
}

type Requests = Pin<Box<dyn Stream<Item = Result<jm::ArtifactRequestWrapper, Status>> + Send>>;

fn request(r: jm::artifact_request_wrapper::Request) -> Result<jm::ArtifactRequestWrapper, Status> {
    Ok(jm::ArtifactRequestWrapper { request: Some(r) })
}

impl Staging {
    /// Runs the reverse-retrieval conversation for every environment of the
    /// job and replaces its dependencies by the staged files.
    async fn stage(
        jobs: Arc<Jobs>,
        root: PathBuf,
        mut inbound: Streaming<jm::ArtifactResponseWrapper>,
        out: mpsc::Sender<Result<jm::ArtifactRequestWrapper, Status>>,
    ) -> Result<(), Status> {
        let first = inbound.next().await.ok_or_else(|| Status::invalid_argument("empty staging stream"))??;
        let job = jobs.get(&first.staging_token)?;
        // Only a prepared job, and once: a job that runs or ran keeps what
        // it staged, and the byte limit holds per job.
        if !job.id.is_empty() {
            return Err(Status::failed_precondition("the job has already been run; stage before Run"));
        }
        if job.staging_started.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Err(Status::already_exists("the job's artifacts are being or have been staged"));
        }
        let envs: Vec<(String, Vec<pb::ArtifactInformation>)> = {
            let p = job.pipeline.lock().unwrap_or_else(|e| e.into_inner());
            let comps = p.components.clone().unwrap_or_default();
            let mut envs: Vec<_> = comps.environments.into_iter().map(|(id, e)| (id, e.dependencies)).collect();
            envs.sort_by(|a, b| a.0.cmp(&b.0));
            envs
        };
        let send = |r| {
            let out = out.clone();
            async move { out.send(request(r)).await.map_err(|_| Status::cancelled("the client went away")) }
        };
        let dir = root.join(safe_dir_name(&job.staging_token));
        let mut staged_bytes = 0u64;
        for (env_id, deps) in envs {
            send(jm::artifact_request_wrapper::Request::ResolveArtifact(jm::ResolveArtifactsRequest {
                artifacts: deps.clone(),
                preferred_urns: vec![FILE_TYPE.to_string()],
            }))
            .await?;
            let resolved = match inbound.next().await {
                Some(Ok(jm::ArtifactResponseWrapper {
                    response: Some(jm::artifact_response_wrapper::Response::ResolveArtifactResponse(r)),
                    ..
                })) => r.replacements,
                Some(Err(e)) => return Err(e),
                _ => return Err(Status::invalid_argument("expected a resolve_artifact_response")),
            };
            // Check every name before anything is written.
            let names: Vec<String> =
                resolved.iter().enumerate().map(|(i, a)| staged_name(a, i)).collect::<Result<_, _>>().map_err(Status::invalid_argument)?;
            let env_dir = dir.join(safe_dir_name(&env_id));
            let mut staged = Vec::new();
            for (artifact, name) in resolved.into_iter().zip(names) {
                send(jm::artifact_request_wrapper::Request::GetArtifact(jm::GetArtifactRequest { artifact: Some(artifact.clone()) }))
                    .await?;
                let path = env_dir.join(&name);
                receive_file(&mut inbound, &env_dir, &path, &mut staged_bytes).await?;
                staged.push(pb::ArtifactInformation {
                    type_urn: FILE_TYPE.to_string(),
                    type_payload: pb::ArtifactFilePayload { path: path.to_string_lossy().into_owned(), sha256: String::new() }
                        .encode_to_vec(),
                    role_urn: artifact.role_urn,
                    role_payload: artifact.role_payload,
                });
            }
            let mut p = job.pipeline.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(env) = p.components.as_mut().and_then(|c| c.environments.get_mut(&env_id)) {
                env.dependencies = staged;
            }
        }
        Ok(())
    }
}

/// The most a job may stage, all its artifacts together.
pub const MAX_STAGED_BYTES: u64 = 4 << 30;

async fn receive_file(
    inbound: &mut Streaming<jm::ArtifactResponseWrapper>,
    dir: &Path,
    path: &Path,
    staged: &mut u64,
) -> Result<(), Status> {
    beam_kafka_actors::private_dir::create(dir).map_err(|e| Status::internal(format!("cannot create {}: {e}", dir.display())))?;
    let tmp = path.with_extension("partial");
    let mut file = tokio::fs::File::create(&tmp).await.map_err(|e| Status::internal(format!("cannot write {}: {e}", tmp.display())))?;
    loop {
        let msg = inbound.next().await.ok_or_else(|| Status::invalid_argument("the stream ended inside an artifact"))??;
        match msg.response {
            Some(jm::artifact_response_wrapper::Response::GetArtifactResponse(chunk)) => {
                *staged += chunk.data.len() as u64;
                if *staged > MAX_STAGED_BYTES {
                    drop(file);
                    let _ = tokio::fs::remove_file(&tmp).await;
                    return Err(Status::resource_exhausted(format!(
                        "the job's artifacts exceed {} GiB; stage fewer or smaller dependencies",
                        MAX_STAGED_BYTES >> 30
                    )));
                }
                file.write_all(&chunk.data).await.map_err(|e| Status::internal(format!("cannot write {}: {e}", tmp.display())))?;
            }
            _ => return Err(Status::invalid_argument("expected artifact data")),
        }
        if msg.is_last {
            break;
        }
    }
    file.flush().await.map_err(|e| Status::internal(e.to_string()))?;
    tokio::fs::rename(&tmp, path).await.map_err(|e| Status::internal(format!("cannot store {}: {e}", path.display())))
}

#[tonic::async_trait]
impl jm::artifact_staging_service_server::ArtifactStagingService for Staging {
    type ReverseArtifactRetrievalServiceStream = Requests;

    async fn reverse_artifact_retrieval_service(
        &self,
        request: Request<Streaming<jm::ArtifactResponseWrapper>>,
    ) -> Result<Response<Self::ReverseArtifactRetrievalServiceStream>, Status> {
        let (tx, rx) = mpsc::channel(16);
        let (jobs, root) = (self.jobs.clone(), self.root.clone());
        let inbound = request.into_inner();
        tokio::spawn(async move {
            if let Err(status) = Staging::stage(jobs, root, inbound, tx.clone()).await {
                tracing::warn!("artifact staging failed: {}", status.message());
                let _ = tx.send(Err(status)).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Serves a harness the artifacts the runner told it about (its
/// environment's dependencies, as staged), and nothing else: the caller
/// names itself with its worker id, a per-worker secret.
pub struct Retrieval {
    pub fn_api: beam_kafka_fnapi::FnApiServer,
    /// For a job server: only files staged under this (canonical)
    /// directory are served. A client names its dependencies' paths, and an unstaged one
    /// could name any file the server can read.
    pub staged_only: Option<PathBuf>,
}

pub(crate) type Chunks = Pin<Box<dyn Stream<Item = Result<jm::GetArtifactResponse, Status>> + Send>>;

/// A local file as `GetArtifact` answers it, in chunks of 1 MiB; `shown` is
/// how an error names it.
pub(crate) async fn file_chunks(path: &std::path::Path, shown: &str) -> Result<Chunks, Status> {
    let data = tokio::fs::read(path).await.map_err(|e| Status::not_found(format!("artifact {shown}: {e}")))?;
    let chunks: Vec<Result<jm::GetArtifactResponse, Status>> =
        data.chunks(1 << 20).map(|c| Ok(jm::GetArtifactResponse { data: c.to_vec() })).collect();
    Ok(Box::pin(futures::stream::iter(chunks)))
}

impl Retrieval {
    fn dependencies<T>(&self, request: &Request<T>) -> Result<Vec<pb::ArtifactInformation>, Status> {
        let id = request.metadata().get(beam_kafka_fnapi::WORKER_ID_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
        self.fn_api.dependencies_of(id).ok_or_else(|| Status::permission_denied("artifact retrieval is for the runner's SDK harnesses"))
    }
}

#[tonic::async_trait]
impl jm::artifact_retrieval_service_server::ArtifactRetrievalService for Retrieval {
    type GetArtifactStream = Chunks;

    async fn resolve_artifacts(
        &self,
        request: Request<jm::ResolveArtifactsRequest>,
    ) -> Result<Response<jm::ResolveArtifactsResponse>, Status> {
        self.dependencies(&request)?;
        Ok(Response::new(jm::ResolveArtifactsResponse { replacements: request.into_inner().artifacts }))
    }

    async fn get_artifact(&self, request: Request<jm::GetArtifactRequest>) -> Result<Response<Self::GetArtifactStream>, Status> {
        let deps = self.dependencies(&request)?;
        let a = request.into_inner().artifact.ok_or_else(|| Status::invalid_argument("no artifact"))?;
        if a.type_urn != FILE_TYPE {
            return Err(Status::invalid_argument(format!("cannot serve artifacts of type {}", a.type_urn)));
        }
        if !deps.iter().any(|d| d.type_urn == a.type_urn && d.type_payload == a.type_payload) {
            return Err(Status::permission_denied("not an artifact of this harness's environment"));
        }
        let p = pb::ArtifactFilePayload::decode(a.type_payload.as_slice()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let path = match &self.staged_only {
            Some(root) => {
                let path = tokio::fs::canonicalize(&p.path).await.map_err(|_| Status::not_found("no such staged artifact"))?;
                if !path.starts_with(root) {
                    return Err(Status::permission_denied("only staged artifacts are served"));
                }
                path
            }
            None => PathBuf::from(&p.path),
        };
        Ok(Response::new(file_chunks(&path, &p.path).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_names_are_refused() {
        for bad in ["../../x", "..", ".", "", "a/b", "a\\b", "/etc/passwd", "x\0y", "~root"] {
            assert!(check_name(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(check_name("../../x").unwrap_err().contains("../../x"));
        for good in ["requirements.txt", "pickled_main_session", "a..b", "dep-1.0.tar.gz"] {
            assert_eq!(check_name(good), Ok(good));
        }
    }

    #[test]
    fn directory_names_are_cleaned() {
        assert_eq!(safe_dir_name("../x"), "___x");
        assert_eq!(safe_dir_name("ref_Environment_default_environment_1"), "ref_Environment_default_environment_1");
        assert_eq!(safe_dir_name("//"), "env");
    }
}
