//! `beam-kafka jobs`, `cancel` and `drain --endpoint`: a job server's jobs,
//! through its Job API, for a job whose submitting program has exited (a
//! detached Java or Python job, a Go job run with its worker binary).
//!
//!   beam-kafka jobs [--endpoint localhost:8099]
//!   beam-kafka cancel [--endpoint localhost:8099] JOB
//!   beam-kafka drain --endpoint localhost:8099 JOB
//!
//! JOB is a job id, or the name of exactly one job that has not ended.
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use beam_kafka_proto::job_management as jm;
use jm::job_service_client::JobServiceClient;
use jm::job_state::Enum as State;
use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::jobs::is_terminal;

/// How to reach a job server's Job API.
#[derive(clap::Args, Clone, Debug)]
pub struct EndpointArgs {
    /// The job server's Job API (`--job-port` of `beam-kafka job-server`).
    #[arg(long, default_value = "localhost:8099")]
    pub endpoint: String,
    /// The file holding the job server's token (its `--auth-token-file`).
    #[arg(long)]
    pub auth_token_file: Option<PathBuf>,
    /// Connect over TLS, trusting this CA (PEM) for the server's certificate.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) for a job server that requires one (with --tls-client-key).
    #[arg(long, requires_all = ["tls_ca", "tls_client_key"])]
    pub tls_client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, requires = "tls_client_cert")]
    pub tls_client_key: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct JobsArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
}

#[derive(clap::Args)]
pub struct CancelArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// The job: its id, or the name of exactly one job that has not ended.
    job: String,
    /// Return once asked, without waiting for the job to end.
    #[arg(long)]
    no_wait: bool,
}

/// A connected Job API client that sends the token with every call.
pub struct JobApi {
    client: JobServiceClient<Channel>,
    token: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl JobApi {
    pub async fn connect(args: &EndpointArgs) -> anyhow::Result<JobApi> {
        let read = |p: &PathBuf, what: &str| std::fs::read(p).with_context(|| format!("cannot read the {what} {}", p.display()));
        let scheme = if args.tls_ca.is_some() { "https" } else { "http" };
        let address = if args.endpoint.contains("://") { args.endpoint.clone() } else { format!("{scheme}://{}", args.endpoint) };
        let mut endpoint = Endpoint::from_shared(address.clone())
            .with_context(|| format!("--endpoint {} is not an address (host:port)", args.endpoint))?
            .connect_timeout(Duration::from_secs(10));
        if let Some(ca) = &args.tls_ca {
            let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca, "CA certificate")?));
            if let (Some(cert), Some(key)) = (&args.tls_client_cert, &args.tls_client_key) {
                tls = tls.identity(Identity::from_pem(read(cert, "client certificate")?, read(key, "client key")?));
            }
            endpoint = endpoint.tls_config(tls).context("invalid TLS configuration")?;
        }
        let channel = endpoint
            .connect()
            .await
            .with_context(|| format!("no job server answers at {address} (is `beam-kafka job-server` running there?)"))?;
        let token = match &args.auth_token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the auth token file {}", path.display()))?;
                Some(
                    format!("Bearer {}", text.trim())
                        .parse()
                        .map_err(|_| anyhow!("the token in {} is not printable text", path.display()))?,
                )
            }
            None => None,
        };
        Ok(JobApi { client: JobServiceClient::new(channel), token })
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(t) = &self.token {
            request.metadata_mut().insert("authorization", t.clone());
        }
        request
    }

    pub async fn jobs(&mut self) -> anyhow::Result<Vec<jm::JobInfo>> {
        let request = self.request(jm::GetJobsRequest {});
        Ok(self.client.get_jobs(request).await.map_err(status)?.into_inner().job_info)
    }

    /// The id of the job `which` names (see `resolve`).
    pub async fn resolve(&mut self, which: &str) -> anyhow::Result<String> {
        resolve(&self.jobs().await?, which).map_err(|e| anyhow!(e))
    }

    pub async fn state(&mut self, job_id: &str) -> anyhow::Result<i32> {
        let request = self.request(jm::GetJobStateRequest { job_id: job_id.into() });
        Ok(self.client.get_state(request).await.map_err(status)?.into_inner().state)
    }

    pub async fn cancel(&mut self, job_id: &str) -> anyhow::Result<i32> {
        let request = self.request(jm::CancelJobRequest { job_id: job_id.into() });
        Ok(self.client.cancel(request).await.map_err(status)?.into_inner().state)
    }

    pub async fn drain(&mut self, job_id: &str) -> anyhow::Result<i32> {
        let request = self.request(jm::DrainJobRequest { job_id: job_id.into() });
        Ok(self.client.drain(request).await.map_err(status)?.into_inner().state)
    }
}

/// A refusal as the job server worded it.
fn status(s: tonic::Status) -> anyhow::Error {
    anyhow!("the job server answered {:?}: {}", s.code(), s.message())
}

fn state_name(state: i32) -> &'static str {
    State::try_from(state).map_or("UNKNOWN", |s| s.as_str_name())
}

/// The id of the job `which` names: a job id, or else the name of exactly
/// one job that has not ended (a name is reused by every run of a program).
pub fn resolve(jobs: &[jm::JobInfo], which: &str) -> Result<String, String> {
    if let Some(j) = jobs.iter().find(|j| j.job_id == which) {
        return Ok(j.job_id.clone());
    }
    let named: Vec<&jm::JobInfo> = jobs.iter().filter(|j| j.job_name == which).collect();
    let live: Vec<&&jm::JobInfo> = named.iter().filter(|j| !is_terminal(j.state)).collect();
    match (live.as_slice(), named.as_slice()) {
        ([one], _) => Ok(one.job_id.clone()),
        ([], []) => Err(format!("the job server has no job with id or name '{which}' (`beam-kafka jobs` lists them)")),
        ([], [.., last]) => Err(format!("every job named '{which}' has ended (the last, {}, is {})", last.job_id, state_name(last.state))),
        (many, _) => Err(format!(
            "{} running jobs are named '{which}': name one by its id ({})",
            many.len(),
            many.iter().map(|j| j.job_id.as_str()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The application a job runs as, from its listed options.
fn application(job: &jm::JobInfo) -> String {
    let fields = job.pipeline_options.as_ref().map(|o| &o.fields);
    let value = fields.and_then(|f| f.get("beam:option:application_id:v1").or_else(|| f.get("application_id")));
    match value.and_then(|v| v.kind.as_ref()) {
        Some(prost_types::value::Kind::StringValue(s)) => s.clone(),
        _ => "-".into(),
    }
}

/// The jobs as a table: id, state, application, name.
pub fn table(jobs: &[jm::JobInfo]) -> String {
    let rows: Vec<[String; 4]> =
        jobs.iter().map(|j| [j.job_id.clone(), state_name(j.state).to_string(), application(j), j.job_name.clone()]).collect();
    let header = ["JOB ID", "STATE", "APPLICATION", "NAME"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    std::iter::once(&header)
        .chain(&rows)
        .map(|row| {
            let cells: Vec<String> = row.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub async fn list(args: JobsArgs) -> anyhow::Result<()> {
    let mut api = JobApi::connect(&args.endpoint).await?;
    let mut jobs = api.jobs().await?;
    jobs.sort_by(|a, b| a.job_name.cmp(&b.job_name).then(a.job_id.cmp(&b.job_id)));
    println!("{}", table(&jobs));
    Ok(())
}

pub async fn cancel(args: CancelArgs) -> anyhow::Result<()> {
    let mut api = JobApi::connect(&args.endpoint).await?;
    let id = api.resolve(&args.job).await?;
    let mut state = api.cancel(&id).await?;
    if !args.no_wait {
        // The job's tasks stop and its harnesses end before it is CANCELLED.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while !is_terminal(state) {
            if tokio::time::Instant::now() > deadline {
                bail!("job {id} is still {} two minutes after it was asked to cancel", state_name(state));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            state = api.state(&id).await?;
        }
    }
    println!("job {id}: {}", state_name(state));
    Ok(())
}

/// Drains the job a job server runs (the Job API's Drain).
pub async fn drain(endpoint: &EndpointArgs, which: &str) -> anyhow::Result<()> {
    let mut api = JobApi::connect(endpoint).await?;
    let id = api.resolve(which).await?;
    let state = api.drain(&id).await?;
    println!("job {id}: {} (its sources stop where they are, every window fires, and it ends DONE)", state_name(state));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str, name: &str, state: State, app: &str) -> jm::JobInfo {
        let value = prost_types::Value { kind: Some(prost_types::value::Kind::StringValue(app.into())) };
        let options = prost_types::Struct { fields: [("beam:option:application_id:v1".to_string(), value)].into() };
        jm::JobInfo { job_id: id.into(), job_name: name.into(), pipeline_options: Some(options), state: state as i32 }
    }

    #[test]
    fn a_job_is_named_by_its_id_or_by_the_name_of_the_one_running_job() {
        let jobs = [
            info("wc-1", "wc", State::Done, "wc"),
            info("wc-2", "wc", State::Running, "wc"),
            info("etl-1", "etl", State::Running, "etl"),
            info("etl-2", "etl", State::Draining, "etl"),
            info("old-1", "old", State::Cancelled, "old"),
        ];
        assert_eq!(resolve(&jobs, "wc-1").unwrap(), "wc-1", "an id names even an ended job");
        assert_eq!(resolve(&jobs, "wc").unwrap(), "wc-2", "the one that has not ended");
        let two = resolve(&jobs, "etl").unwrap_err();
        assert!(two.contains("etl-1, etl-2"), "{two}");
        let ended = resolve(&jobs, "old").unwrap_err();
        assert!(ended.contains("old-1") && ended.contains("CANCELLED"), "{ended}");
        assert!(resolve(&jobs, "nope").unwrap_err().contains("beam-kafka jobs"));
    }

    #[test]
    fn the_table_lines_up_and_shows_each_application() {
        let jobs = [info("a-1", "alpha", State::Running, "orders"), info("bb-22", "b", State::Done, "clicks")];
        let t = table(&jobs);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("JOB ID  STATE"), "{t}");
        assert!(lines[1].starts_with("a-1     RUNNING  orders"), "{t}");
        assert!(lines[2].starts_with("bb-22   DONE     clicks"), "{t}");
        let no_app = jm::JobInfo { job_id: "x".into(), ..Default::default() };
        assert_eq!(application(&no_app), "-");
    }
}
