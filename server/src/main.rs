//! `beam-kafka`: the job server of the beam-kafka runner.
mod artifacts;
mod auth;
mod copy_reporting;
mod copy_view;
mod describe;
mod drain;
mod earlier_run;
mod execution;
mod expansion_backends;
mod expansion_service;
mod job_client;
mod job_events;
mod job_server;
mod job_service;
mod jobs;
mod metrics;
mod options;
mod otel;
mod policy;
mod probes;
mod prometheus;
mod reset;
mod run;
mod status_api;
mod status_cli;
mod status_server;
mod superseded;
mod tls;
mod user_metrics;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc v3's option numbers (`mi_option_e` in its `mimalloc.h`; the
/// sys crate names only some of them).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Commits arena memory as it is used and returns freed pages at once: with
/// mimalloc's defaults the runner's peak RSS on the stateful Kafka-to-Kafka
/// benchmark was 303–331 MB (glibc 183–289), with these 276–278 MB, at no
/// CPU cost (bench/native.py, 1M records). `MIMALLOC_*` settings, when
/// set, win.
fn tune_allocator() {
    for (option, env) in [(MI_OPTION_ARENA_EAGER_COMMIT, "MIMALLOC_ARENA_EAGER_COMMIT"), (MI_OPTION_PURGE_DELAY, "MIMALLOC_PURGE_DELAY")] {
        if std::env::var_os(env).is_none() {
            // SAFETY: a plain setter of a mimalloc global option, called
            // before any other thread starts.
            unsafe { libmimalloc_sys::mi_option_set(option, 0) };
        }
    }
}

#[derive(Parser)]
#[command(name = "beam-kafka", version, about = "Run Apache Beam pipelines on Apache Kafka")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Beam Job API; pipelines submitted to it run on Kafka.
    JobServer(Box<job_server::JobServerArgs>),
    /// Print the Kafka topology a saved pipeline would run as (text, Graphviz
    /// DOT, or an SVG or HTML picture).
    Describe(describe::DescribeArgs),
    /// Run a saved pipeline as a long-running service (no submitting client);
    /// start more copies with the same application id to scale out.
    Run(run::RunArgs),
    /// Drain a running application: its sources stop, every window fires,
    /// and it ends DONE (all its copies, through Kafka).
    Drain(drain::DrainArgs),
    /// List a job server's jobs: id, state, application and name.
    Jobs(job_client::JobsArgs),
    /// Cancel a job a job server runs (by its id or name), and wait until it ended.
    Cancel(job_client::CancelArgs),
    /// Delete what runs of an application left (its runner topics, consumer
    /// group and local task stores), so the next run under its id starts afresh.
    Reset(reset::ResetArgs),
    /// Show every copy of a running application and the tasks each runs
    /// (from the application's copies topic).
    Status(status_cli::StatusArgs),
}

fn main() {
    bound_malloc_arenas();
    tune_allocator();
    if let Err(e) = run() {
        // The message is for the user: the chain of causes, no backtrace.
        eprintln!("beam-kafka: {e:#}");
        std::process::exit(1);
    }
}

/// For the C and C++ libraries (RocksDB, librdkafka), which still allocate
/// through glibc: glibc gives each thread that allocates an arena of its own, up to 8 per
/// core, and a job server runs ~120 threads (librdkafka's two per client,
/// tokio, RocksDB): freed memory stayed in many half-used arenas. Two
/// arenas measured 255-270 MB steady on the 1M-record stateful benchmark
/// against 235-357 MB, at the same throughput. MALLOC_ARENA_MAX, when set,
/// wins. Runs before any thread starts.
fn bound_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a malloc parameter; no thread runs yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

fn run() -> anyhow::Result<()> {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("BEAM_KAFKA_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).init();
    let cli = Cli::parse();
    if let Command::Describe(args) = cli.command {
        return describe::describe(args);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match cli.command {
        Command::JobServer(args) => runtime.block_on(job_server::serve(*args)),
        Command::Run(args) => runtime.block_on(run::run(args)),
        Command::Drain(args) => runtime.block_on(drain::drain(args)),
        Command::Jobs(args) => runtime.block_on(job_client::list(args)),
        Command::Cancel(args) => runtime.block_on(job_client::cancel(args)),
        Command::Reset(args) => runtime.block_on(reset::reset(args)),
        Command::Status(args) => runtime.block_on(status_cli::status(args)),
        Command::Describe(_) => unreachable!("handled above"),
    }
}
