//! The Beam Job API.
use std::pin::Pin;
use std::sync::Arc;

use beam_kafka_proto::job_management as jm;
use futures::{Stream, StreamExt};
use jm::job_state::Enum as State;
use tokio_stream::wrappers::{BroadcastStream, WatchStream};
use tonic::{Request, Response, Status};

use crate::execution::{execute, Services};
use crate::jobs::{is_terminal, Job, Jobs};
use crate::options;

pub struct JobService {
    pub jobs: Arc<Jobs>,
    pub auth: crate::auth::Auth,
    pub policy: crate::policy::Policy,
    pub services: Services,
    /// The artifact staging endpoint returned by Prepare.
    pub staging_url: String,
    /// Kafka servers for submissions that name none.
    pub default_bootstrap_servers: Option<String>,
}

type StateStream = Pin<Box<dyn Stream<Item = Result<jm::JobStateEvent, Status>> + Send>>;
type MessageStream = Pin<Box<dyn Stream<Item = Result<jm::JobMessagesResponse, Status>> + Send>>;

/// Everything wrong with a submission, in one message a user can act on.
fn rejection(problems: Vec<String>) -> Status {
    let list: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
    Status::invalid_argument(format!("beam-kafka cannot run this pipeline:\n{}", list.join("\n")))
}

#[tonic::async_trait]
impl jm::job_service_server::JobService for JobService {
    type GetStateStreamStream = StateStream;
    type GetMessageStreamStream = MessageStream;

    async fn prepare(&self, request: Request<jm::PrepareJobRequest>) -> Result<Response<jm::PrepareJobResponse>, Status> {
        let began = std::time::SystemTime::now();
        let (metadata, _, req) = request.into_parts();
        let mut opts = req.pipeline_options.unwrap_or_default();
        self.auth.check("Prepare", &metadata, Some(&mut opts))?;
        let mut pipeline = req.pipeline.ok_or_else(|| rejection(vec!["the request carries no pipeline".into()]))?;
        let name = options::text(&opts, "job_name").filter(|n| !n.is_empty()).unwrap_or(req.job_name);
        let chosen = options::fill_defaults(&mut opts, &name, self.default_bootstrap_servers.as_deref());
        // A Java program's options are spelled as Java spells them.
        let in_java = options::submitted_from_java(&pipeline);
        let reject = |problems: Vec<String>| {
            rejection(if in_java { problems.iter().map(|p| beam_kafka_config::spelling::in_java_spelling(p)).collect() } else { problems })
        };
        let mut runner_options = options::check_submission(&mut pipeline, &opts).map_err(reject)?;
        let problems = self.policy.apply(&pipeline, options::text(&opts, "state_dir").as_deref(), &mut runner_options);
        if !problems.is_empty() {
            return Err(reject(problems));
        }
        let preparation_id = format!("prep-{}", uuid::Uuid::new_v4());
        let transforms = pipeline.components.as_ref().map_or(0, |c| c.transforms.len());
        let attributes = vec![
            opentelemetry::KeyValue::new("beam_kafka.application.id", runner_options.application_id.clone()),
            opentelemetry::KeyValue::new("beam_kafka.preparation.id", preparation_id.clone()),
            opentelemetry::KeyValue::new("beam_kafka.pipeline.transforms", transforms as i64),
        ];
        tracing::debug!("prepared {preparation_id} in {:?}", began.elapsed().unwrap_or_default());
        let job = Job::new(String::new(), name, preparation_id.clone(), pipeline, opts, runner_options);
        for text in chosen {
            job.message(jm::job_message::MessageImportance::JobMessageBasic, text);
        }
        self.jobs.by_id.insert(preparation_id.clone(), Arc::new(job));
        beam_kafka_actors::telemetry::past_span("beam_kafka.job.prepare", began, std::time::SystemTime::now(), attributes);
        Ok(Response::new(jm::PrepareJobResponse {
            preparation_id: preparation_id.clone(),
            artifact_staging_endpoint: Some(beam_kafka_proto::pipeline::ApiServiceDescriptor {
                url: self.staging_url.clone(),
                ..Default::default()
            }),
            staging_session_token: preparation_id,
        }))
    }

    async fn run(&self, request: Request<jm::RunJobRequest>) -> Result<Response<jm::RunJobResponse>, Status> {
        let prep_id = request.into_inner().preparation_id;
        tracing::debug!("asked to run {prep_id}");
        if !self.jobs.by_id.get(&prep_id).is_some_and(|j| j.id.is_empty()) {
            return Err(Status::not_found(format!("no prepared job '{prep_id}' (it may have been run already)")));
        }
        // Taken only when nothing else holds it: a job still being staged
        // stays prepared, and the client may run it once staging ended.
        let (_, prepared) = self
            .jobs
            .by_id
            .remove_if(&prep_id, |_, j| Arc::strong_count(j) == 1)
            .ok_or_else(|| Status::aborted("the job's artifacts are still being staged; run it once staging has ended"))?;
        let prepared = Arc::try_unwrap(prepared).map_err(|_| Status::aborted("the job is still being staged"))?;
        // Unguessable: a job id is what a client needs to watch or cancel it.
        let job_id = format!("{}-{}", sanitize(&prepared.name), &uuid::Uuid::new_v4().simple().to_string()[..16]);
        // What Prepare said (the defaults it chose) goes to the run's log.
        let said_at_prepare: Vec<jm::JobMessage> = prepared
            .messages()
            .0
            .into_iter()
            .filter_map(|m| match m.response {
                Some(jm::job_messages_response::Response::MessageResponse(m)) => Some(m),
                _ => None,
            })
            .collect();
        let pipeline = prepared.pipeline.into_inner().unwrap_or_else(|e| e.into_inner());
        let job =
            Arc::new(Job::new(job_id.clone(), prepared.name, prepared.staging_token, pipeline, prepared.options, prepared.runner_options));
        for m in said_at_prepare {
            job.message(m.importance(), m.message_text);
        }
        self.jobs.by_id.insert(job_id.clone(), job.clone());
        tokio::spawn(execute(job, self.services.clone()));
        Ok(Response::new(jm::RunJobResponse { job_id }))
    }

    async fn get_jobs(&self, request: Request<jm::GetJobsRequest>) -> Result<Response<jm::GetJobsResponse>, Status> {
        // Lists every job id: only for a client that holds the token.
        self.auth.check_metadata("GetJobs", request.metadata())?;
        let job_info = self
            .jobs
            .by_id
            .iter()
            .filter(|j| !j.id.is_empty())
            .map(|j| jm::JobInfo {
                job_id: j.id.clone(),
                job_name: j.name.clone(),
                pipeline_options: Some(crate::options::redacted(&j.options, true)),
                state: j.state().state,
            })
            .collect();
        Ok(Response::new(jm::GetJobsResponse { job_info }))
    }

    async fn get_state(&self, request: Request<jm::GetJobStateRequest>) -> Result<Response<jm::JobStateEvent>, Status> {
        Ok(Response::new(self.jobs.get(&request.into_inner().job_id)?.state()))
    }

    async fn get_pipeline(&self, request: Request<jm::GetJobPipelineRequest>) -> Result<Response<jm::GetJobPipelineResponse>, Status> {
        let job = self.jobs.get(&request.into_inner().job_id)?;
        let pipeline = Some(job.pipeline.lock().unwrap_or_else(|e| e.into_inner()).clone());
        Ok(Response::new(jm::GetJobPipelineResponse { pipeline }))
    }

    async fn cancel(&self, request: Request<jm::CancelJobRequest>) -> Result<Response<jm::CancelJobResponse>, Status> {
        let job = self.jobs.get(&request.into_inner().job_id)?;
        if !is_terminal(job.state().state) {
            job.set_state(State::Cancelling);
            // Kept even before the job listens (it may still be starting).
            job.cancel.send_replace(true);
        }
        Ok(Response::new(jm::CancelJobResponse { state: job.state().state }))
    }

    /// Drains the job's application through its control topic, as
    /// `beam-kafka drain` does: every copy drains, and the job ends DONE.
    async fn drain(&self, request: Request<jm::DrainJobRequest>) -> Result<Response<jm::DrainJobResponse>, Status> {
        let job = self.jobs.get(&request.into_inner().job_id).and_then(not_prepared)?;
        let state = job.state().state;
        if is_terminal(state) || state == State::Cancelling as i32 {
            return Err(Status::failed_precondition(format!(
                "job '{}' is {}: only a running job can be drained",
                job.id,
                State::try_from(state).map_or("in an unknown state", |s| s.as_str_name())
            )));
        }
        beam_kafka_actors::control::request(&job.runner_options, beam_kafka_actors::control::DRAIN)
            .await
            .map_err(|e| Status::unavailable(format!("could not ask application '{}' to drain: {e}", job.runner_options.application_id)))?;
        job.set_state(State::Draining);
        Ok(Response::new(jm::DrainJobResponse { state: job.state().state }))
    }

    async fn get_state_stream(&self, request: Request<jm::GetJobStateRequest>) -> Result<Response<Self::GetStateStreamStream>, Status> {
        // A preparation id is not a job yet: answering NOT_FOUND makes the
        // Python client open its streams after Run, without a deadline.
        let job = self.jobs.get(&request.into_inner().job_id).and_then(not_prepared)?;
        let stream = until_terminal(WatchStream::new(job.subscribe_state()), |ev| is_terminal(ev.state));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_message_stream(&self, request: Request<jm::JobMessagesRequest>) -> Result<Response<Self::GetMessageStreamStream>, Status> {
        let job = self.jobs.get(&request.into_inner().job_id).and_then(not_prepared)?;
        let (history, live) = job.messages();
        let live = BroadcastStream::new(live).filter_map(|r| futures::future::ready(r.ok()));
        let stream = until_terminal(futures::stream::iter(history).chain(live), is_terminal_message);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_job_metrics(&self, request: Request<jm::GetJobMetricsRequest>) -> Result<Response<jm::GetJobMetricsResponse>, Status> {
        let job = self.jobs.get(&request.into_inner().job_id)?;
        let metrics = job.metrics.lock().unwrap_or_else(|e| e.into_inner());
        let results = jm::MetricResults { attempted: metrics.attempted.all(), committed: metrics.committed.all() };
        Ok(Response::new(jm::GetJobMetricsResponse { metrics: Some(results) }))
    }

    async fn describe_pipeline_options(
        &self,
        _: Request<jm::DescribePipelineOptionsRequest>,
    ) -> Result<Response<jm::DescribePipelineOptionsResponse>, Status> {
        Ok(Response::new(jm::DescribePipelineOptionsResponse { options: options::descriptors() }))
    }
}

/// Yields items up to and including the first terminal one, then ends.
fn until_terminal<T: Send + 'static>(
    items: impl Stream<Item = T> + Send + Unpin + 'static,
    terminal: fn(&T) -> bool,
) -> impl Stream<Item = Result<T, Status>> + Send {
    futures::stream::unfold((items, false), move |(mut items, ended)| async move {
        if ended {
            return None;
        }
        let item = items.next().await?;
        let end = terminal(&item);
        Some((Ok(item), (items, end)))
    })
}

fn not_prepared(job: Arc<Job>) -> Result<Arc<Job>, Status> {
    if job.id.is_empty() {
        Err(Status::not_found("the job has been prepared but not run yet"))
    } else {
        Ok(job)
    }
}

fn is_terminal_message(m: &jm::JobMessagesResponse) -> bool {
    matches!(&m.response, Some(jm::job_messages_response::Response::StateResponse(s)) if is_terminal(s.state))
}

fn sanitize(name: &str) -> String {
    let s: String = name.chars().take(40).map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect();
    if s.is_empty() {
        "job".into()
    } else {
        s
    }
}
