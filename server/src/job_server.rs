//! `beam-kafka job-server`: the Job API, artifact staging and retrieval, and
//! the expansion service, in front of the jobs this process runs.
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use beam_kafka_fnapi::java_harness::JavaHarnessSetup;
use beam_kafka_fnapi::FnApiServer;
use beam_kafka_proto::expansion;
use beam_kafka_proto::job_management as jm;

use crate::expansion_backends::{ExpansionBackends, Launch};
use crate::{artifacts, auth, execution, expansion_service, job_service, jobs, otel, policy, status_server, tls};

#[derive(clap::Args)]
pub struct JobServerArgs {
    /// Port of the Job API (0 picks a free one).
    #[arg(long, default_value_t = 8099)]
    job_port: u16,
    /// Port of artifact staging and retrieval (0 picks a free one).
    #[arg(long, default_value_t = 8098)]
    artifact_port: u16,
    /// Port of the expansion service (0 picks a free one): expands Beam's
    /// ReadFromKafka and WriteToKafka into the runner's own Kafka transforms.
    #[arg(long, default_value_t = 8097)]
    expansion_port: u16,
    /// Where staged artifacts are kept.
    #[arg(long, default_value_os_t = std::env::temp_dir().join("beam-kafka-artifacts"))]
    artifacts_dir: PathBuf,
    /// Address to bind. Localhost unless you mean to expose the job server
    /// (then also pass --auth-token-file).
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    /// A file holding the token clients must present (gRPC metadata
    /// `authorization: Bearer <token>`, or the pipeline option
    /// --job_server_token). Without it, any client that can connect may run code.
    #[arg(long)]
    auth_token_file: Option<PathBuf>,
    /// Serve on a non-loopback --bind without --auth-token-file.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Where jobs keep their local state; a client's --state_dir may only
    /// name a directory inside it.
    #[arg(long, default_value_os_t = std::env::temp_dir().join("beam-kafka"))]
    state_root: PathBuf,
    /// SDK environments clients may ask for: loopback (a worker pool on this
    /// machine), external (a worker pool anywhere), process (runs the
    /// client's command here), docker (runs the client's image here), java
    /// (Beam's Java SDK image, run here as a Java process with the client's
    /// staged jars: cross-language Java transforms and Java pipelines),
    /// python (Beam's Python SDK image, run here as --python-harness-command),
    /// go (Beam's Go SDK image: the client's staged worker binary, run here).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "loopback")]
    allow_environments: Vec<policy::EnvKind>,
    /// A directory of the jars of Beam's Java SDK harness
    /// (scripts/java-harness.sh fills one): environments naming Beam's Java
    /// SDK image run as Java processes with them, without Docker.
    #[arg(long, env = "BEAM_KAFKA_JAVA_HARNESS_DIR")]
    java_harness_dir: Option<PathBuf>,
    /// The command that runs Beam's Python SDK harness here, e.g. "python -m
    /// beam_kafka.boot": environments naming Beam's Python SDK image (what
    /// Python's expansion services name by default) run as that process.
    #[arg(long, env = "BEAM_KAFKA_PYTHON_HARNESS_COMMAND")]
    python_harness_command: Option<String>,
    /// A directory of the jars of Beam's Java expansion service
    /// (scripts/java-harness.sh --expansion-service fills one): Java
    /// transforms sent to this job server's expansion service are expanded
    /// by it, started on demand (their harnesses need --java-harness-dir).
    #[arg(long, env = "BEAM_KAFKA_JAVA_EXPANSION_DIR")]
    java_expansion_dir: Option<PathBuf>,
    /// Java classes clients may name for that service to look up
    /// (JavaExternalTransform): a file in the format of Beam's
    /// --javaClassLookupAllowlistFile, or `*` for any class (the default
    /// with --trust-clients; otherwise none).
    #[arg(long)]
    java_class_lookup_allowlist: Option<String>,
    /// The command that runs Beam's Python expansion service here, e.g.
    /// "python -m apache_beam.runners.portability.expansion_service_main
    /// --fully_qualified_name_glob=*" (`--port` is added): Python
    /// transforms sent to this job server's expansion service are expanded
    /// by it, started on demand.
    #[arg(long, env = "BEAM_KAFKA_PYTHON_EXPANSION_COMMAND")]
    python_expansion_command: Option<String>,
    /// The Kafka servers of jobs that name none (--bootstrap_servers), so a
    /// Beam example that cannot pass runner options runs unmodified.
    #[arg(long, env = "BEAM_KAFKA_BOOTSTRAP_SERVERS")]
    default_bootstrap_servers: Option<String>,
    /// Trust every client as much as the server's own user: any SDK
    /// environment, any Kafka client property (also those that read local
    /// files or load code), any --state_dir. For a job server private to one
    /// user, such as the one KafkaStreamsRunner starts for its own process.
    #[arg(long)]
    trust_clients: bool,
    /// The most tasks per sub-topology (--internal_parallelism) a job may ask for.
    #[arg(long, default_value_t = 64)]
    max_parallelism: u32,
    /// How long a finished job (and a prepared one never run) stays listed
    /// before it is forgotten, in seconds.
    #[arg(long, default_value_t = 3600)]
    job_ttl_secs: u64,
    #[command(flatten)]
    tls: tls::TlsArgs,
    #[command(flatten)]
    otel: otel::OtelArgs,
    #[command(flatten)]
    ui: status_server::UiArgs,
}

/// The Java and Python expansion services this job server may start.
fn expansion_backends(args: &JobServerArgs) -> anyhow::Result<ExpansionBackends> {
    let allowlist = args.java_class_lookup_allowlist.clone().or_else(|| args.trust_clients.then(|| "*".to_string()));
    let java = args.java_expansion_dir.as_deref().map(|d| Launch::java(d, allowlist.as_deref())).transpose().map_err(anyhow::Error::msg)?;
    let python = args.python_expansion_command.as_deref().map(Launch::python).transpose().map_err(anyhow::Error::msg)?;
    if java.is_some() {
        tracing::info!("Java transforms are expanded by Beam's Java expansion service, started on demand");
    }
    if python.is_some() {
        tracing::info!("Python transforms are expanded by Beam's Python expansion service, started on demand");
    }
    Ok(ExpansionBackends::new(java, python))
}

async fn bind(host: &str, port: u16, what: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind((host, port)).await.with_context(|| format!("cannot listen on {host}:{port} for the {what}"))
}

pub async fn serve(args: JobServerArgs) -> anyhow::Result<()> {
    let auth = match &args.auth_token_file {
        Some(path) => auth::Auth::from_file(path)?,
        None => auth::Auth::default(),
    };
    if !auth.is_enabled() && !auth::is_loopback(&args.bind) && !args.insecure_no_auth {
        anyhow::bail!(
            "--bind {} accepts connections from other machines, and without --auth-token-file anyone who can connect \
             could run code here; pass --auth-token-file (or --insecure-no-auth if the network is yours alone)",
            args.bind
        );
    }
    let tls = args.tls.config()?;
    auth::announce(&auth, &args.bind);
    if tls.is_some() {
        tracing::info!("the Job API, artifact and expansion services are served over TLS");
    }
    if args.trust_clients {
        tracing::info!("--trust-clients: clients may start any SDK environment, set any Kafka property and choose any state_dir");
    }
    for dir in [&args.artifacts_dir, &args.state_root] {
        beam_kafka_actors::private_dir::create(dir).with_context(|| format!("cannot use the directory {}", dir.display()))?;
    }
    let policy = policy::Policy {
        state_root: args.state_root.clone(),
        environments: args.allow_environments.clone(),
        trusted: args.trust_clients,
        max_parallelism: args.max_parallelism,
    };
    let fn_api = FnApiServer::start(&args.bind).await.context("cannot start the Fn API server")?;
    let job_listener = bind(&args.bind, args.job_port, "Job API").await?;
    let artifact_listener = bind(&args.bind, args.artifact_port, "artifact service").await?;
    let expansion_listener = bind(&args.bind, args.expansion_port, "expansion service").await?;
    let artifact_url = artifact_listener.local_addr()?.to_string();
    // Harnesses fetch artifacts from a listener of their own, beside the Fn
    // API: plain gRPC (as every SDK's boot speaks), whatever clients use.
    let retrieval_listener = bind(&args.bind, 0, "artifact retrieval service").await?;
    let retrieval_url = retrieval_listener.local_addr()?.to_string();
    tracing::info!("artifact retrieval for SDK harnesses listening on {retrieval_url}");
    let retrieval = tonic::transport::Server::builder()
        .add_service(jm::artifact_retrieval_service_server::ArtifactRetrievalServiceServer::new(artifacts::Retrieval {
            fn_api: fn_api.clone(),
            // Canonical once here, so each request only resolves its own path.
            staged_only: Some(std::fs::canonicalize(&args.artifacts_dir)?),
        }))
        .serve_with_incoming(beam_kafka_fnapi::incoming(retrieval_listener));
    let jobs = Arc::new(jobs::Jobs::default());
    let exporting = otel::install(&args.otel, Vec::new()).await?;
    if exporting.is_some() {
        crate::user_metrics::enable();
    }
    status_server::start(&args.ui, jobs.clone(), auth.clone()).await?;
    let java_harness = args.java_harness_dir.as_deref().map(JavaHarnessSetup::from_dir).transpose().map_err(anyhow::Error::msg)?;
    if let Some(setup) = &java_harness {
        tracing::info!("Java SDK environments run as Java processes ({}, {} harness jars)", setup.java.display(), setup.jars.len());
    }
    let services = execution::Services {
        fn_api: fn_api.clone(),
        artifact_url: retrieval_url,
        artifacts_dir: Some(args.artifacts_dir.clone()),
        java_harness,
        python_harness_command: args.python_harness_command.clone(),
    };

    let artifacts = tls::builder(&tls)?
        .add_service(
            jm::artifact_staging_service_server::ArtifactStagingServiceServer::new(artifacts::Staging {
                jobs: jobs.clone(),
                root: args.artifacts_dir.clone(),
            })
            .max_decoding_message_size(64 << 20),
        )
        .serve_with_incoming(beam_kafka_fnapi::incoming(artifact_listener));
    let job_api = tls::builder(&tls)?
        .add_service(
            jm::job_service_server::JobServiceServer::new(job_service::JobService {
                jobs: jobs.clone(),
                auth: auth.clone(),
                policy,
                services,
                staging_url: artifact_url.clone(),
                default_bootstrap_servers: args.default_bootstrap_servers.clone(),
            })
            .max_decoding_message_size(256 << 20)
            .max_encoding_message_size(256 << 20),
        )
        .serve_with_incoming(beam_kafka_fnapi::incoming(job_listener));
    let expansion_addr = expansion_listener.local_addr()?;
    let backends = std::sync::Arc::new(expansion_backends(&args)?);
    let expansion = tls::builder(&tls)?
        .add_service(
            expansion::expansion_service_server::ExpansionServiceServer::new(expansion_service::Expansion {
                auth,
                backends: backends.clone(),
            })
            .max_decoding_message_size(256 << 20)
            .max_encoding_message_size(256 << 20),
        )
        .add_service(
            jm::artifact_retrieval_service_server::ArtifactRetrievalServiceServer::new(expansion_service::ExpansionArtifacts { backends })
                .max_encoding_message_size(64 << 20),
        )
        .serve_with_incoming(beam_kafka_fnapi::incoming(expansion_listener));
    // Finished and abandoned jobs are forgotten after --job-ttl-secs, and
    // what abandoned ones staged is deleted.
    let ttl = std::time::Duration::from_secs(args.job_ttl_secs);
    let (evicting, artifacts_root) = (jobs.clone(), args.artifacts_dir.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(ttl.clamp(std::time::Duration::from_secs(1), std::time::Duration::from_secs(60)));
        loop {
            tick.tick().await;
            for token in evicting.evict(ttl) {
                let _ = tokio::fs::remove_dir_all(artifacts_root.join(artifacts::safe_dir_name(&token))).await;
            }
        }
    });
    tracing::info!("artifact service listening on {artifact_url}");
    tracing::info!("expansion service listening on {expansion_addr}");
    tracing::info!("beam-kafka job server listening on {}:{}", args.bind, args.job_port);
    tokio::select! {
        r = job_api => r.context("the Job API server failed")?,
        r = artifacts => r.context("the artifact server failed")?,
        r = expansion => r.context("the expansion server failed")?,
        r = retrieval => r.context("the artifact retrieval server failed")?,
        _ = shutdown_signal() => {
            tracing::info!("shutting down: cancelling running jobs");
            // Running jobs are cancelled: their tasks commit, write clean
            // checkpoints of their stores and leave their groups, so a new
            // run of the same application restores from disk. Finished
            // ones first delete their topics.
            jobs.cancel_all(SHUTDOWN_DEADLINE).await;
            execution::await_ending_jobs().await;
        }
    }
    // The last metrics and spans go out before the process ends.
    let _ = tokio::task::spawn_blocking(move || drop(exporting)).await;
    Ok(())
}

/// How long a stopping job server waits for its jobs to cancel.
const SHUTDOWN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
