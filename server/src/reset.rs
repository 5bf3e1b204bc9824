//! `beam-kafka reset`: deletes what runs of an application left on Kafka
//! and on this machine, so the next run under its id starts afresh (as
//! Kafka Streams' application reset tool does).
//!
//!   beam-kafka reset --application_id=wordcount --bootstrap_servers=kafka:9092 [--state_dir=DIR]
//!
//! Deletes every runner topic of the application (`__beam_<id>_…`: its
//! shuffles, edges, changelogs, control and plan record), its consumer
//! group (committed offsets: the next run starts its sources as a first
//! run does, from `start_read_time` or `auto.offset.reset`), and its task
//! stores under `--state_dir` here. Refuses while a copy is running. The
//! user's own topics, and their ReadFromKafka `group.id`, are untouched.
use anyhow::{anyhow, bail};

use crate::{options, run};

#[derive(clap::Args)]
pub struct ResetArgs {
    /// Only print what would be deleted.
    #[arg(long)]
    dry_run: bool,
    /// Runner options (after `--` or not): --application_id and
    /// --bootstrap_servers (and --kafka_property for a secured cluster,
    /// --state_dir where the runs kept their local state), as the job was given.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    options: Vec<String>,
}

pub async fn reset(args: ResetArgs) -> anyhow::Result<()> {
    let given: Vec<String> = args.options.into_iter().filter(|a| a != "--").collect();
    let values = options::from_struct(&run::parse_options(&given)?);
    if !values.contains_key("application_id") {
        bail!("--application_id is needed: the application to reset");
    }
    let opts = beam_kafka_config::RunnerOptions::parse(&values)
        .map_err(|errors| anyhow!("{}", errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")))?;
    let report = beam_kafka_actors::identity::reset(&opts, &opts.state_dir, args.dry_run).await.map_err(anyhow::Error::msg)?;
    let app = &opts.application_id;
    let verb = if args.dry_run { "would delete" } else { "deleted" };
    if report.topics.is_empty() {
        println!("application '{app}' has no runner topics");
    } else {
        println!("{verb} {} runner topic(s) of application '{app}': {}", report.topics.len(), report.topics.join(", "));
    }
    println!(
        "{verb} its consumer group '{app}' (the next run starts its sources as a first run does) and {} local task store(s) under {}",
        report.stores,
        opts.state_dir.join(app).display()
    );
    Ok(())
}
