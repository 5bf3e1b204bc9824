//! `beam-kafka drain`: asks every copy of a running application to drain.
//!
//!   beam-kafka drain -- --application_id=wordcount --bootstrap_servers=kafka:9092
//!   beam-kafka drain --endpoint localhost:8099 JOB
//!
//! Its sources stop where they are, splittable DoFns truncate their work,
//! event time moves to the end so every window and timer fires, and the job
//! ends DONE with everything committed; a later run of the application
//! reads on from where the drain stopped. The request goes through Kafka
//! (the application's control topic), so it reaches job-server jobs and
//! `beam-kafka run` copies alike, and copies started later too. Given a
//! job server's `--endpoint` and a job (id or name), the job server sends it
//! (the Job API's Drain), with the job's own Kafka settings.
use anyhow::{anyhow, bail};

use crate::job_client::{self, EndpointArgs};
use crate::{options, run};

#[derive(clap::Args)]
pub struct DrainArgs {
    /// The job to drain, by its id or name, on the job server at --endpoint.
    #[arg(requires = "endpoint")]
    job: Option<String>,
    #[command(flatten)]
    endpoint: Option<EndpointArgs>,
    /// Runner options, after `--`: --application_id and --bootstrap_servers
    /// (and --kafka_property for a secured cluster), as the job was given.
    #[arg(last = true, conflicts_with = "job")]
    options: Vec<String>,
}

pub async fn drain(args: DrainArgs) -> anyhow::Result<()> {
    if let (Some(job), Some(endpoint)) = (&args.job, &args.endpoint) {
        return job_client::drain(endpoint, job).await;
    }
    let values = options::from_struct(&run::parse_options(&args.options)?);
    if !values.contains_key("application_id") {
        bail!("--application_id is needed (or --endpoint and a job): the application to drain");
    }
    let opts = beam_kafka_config::RunnerOptions::parse(&values)
        .map_err(|errors| anyhow!("{}", errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")))?;
    beam_kafka_actors::control::request(&opts, beam_kafka_actors::control::DRAIN).await.map_err(anyhow::Error::msg)?;
    println!(
        "drain requested for application '{}': its sources stop where they are, every window fires, and the job ends DONE",
        opts.application_id
    );
    Ok(())
}
