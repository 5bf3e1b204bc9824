//! `beam-kafka describe`: prints the topology plan of a saved pipeline, so a
//! user can see what will run before submitting it.
use std::path::PathBuf;

use anyhow::Context as _;
use beam_kafka_proto::pipeline::Pipeline;
use beam_kafka_runtime::plan::graph::PipelineGraph;
use beam_kafka_runtime::plan::lift::lift_combiners;
use beam_kafka_runtime::plan::topology::picture::escape;
use beam_kafka_runtime::plan::topology::TopologyPlan;
use beam_kafka_runtime::plan::validate::validate_topology;
use prost::Message;

#[derive(clap::Args)]
pub struct DescribeArgs {
    /// A pipeline proto (binary `Pipeline`, e.g. Python's
    /// `p.to_runner_api().SerializeToString()`).
    #[arg(long)]
    pipeline: PathBuf,
    /// The application id the topic names are derived from.
    #[arg(long, default_value = "my-pipeline")]
    application_id: String,
    /// Partitions of shuffle topics.
    #[arg(long, default_value_t = 1)]
    internal_parallelism: u32,
    /// `text`, `dot` (Graphviz), `svg` (the status page's picture) or
    /// `html` (that picture in a page of its own).
    #[arg(long, default_value = "text")]
    format: String,
}

pub fn describe(args: DescribeArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.pipeline).with_context(|| format!("cannot read {}", args.pipeline.display()))?;
    let mut pipeline =
        Pipeline::decode(bytes.as_slice()).with_context(|| format!("{} is not a binary Beam Pipeline proto", args.pipeline.display()))?;
    if !crate::options::submitted_from_java(&pipeline) {
        beam_kafka_runtime::plan::stable_ids::rename(&mut pipeline);
    }
    lift_combiners(&mut pipeline);
    beam_kafka_runtime::plan::sdf::expand_splittable(&mut pipeline);
    let problems = validate_topology(&pipeline);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
        anyhow::bail!("beam-kafka cannot run this pipeline:\n{}", list.join("\n"));
    }
    let graph = PipelineGraph::new(&pipeline).map_err(anyhow::Error::msg)?;
    let plan = TopologyPlan::plan(&graph, &args.application_id, args.internal_parallelism).map_err(anyhow::Error::msg)?;
    match args.format.as_str() {
        "text" => print!("{}", plan.describe(&graph)),
        "dot" => print!("{}", plan.to_dot(&graph)),
        "svg" => print!("{}", plan.to_svg(&graph)),
        "html" => print!(
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>\n<body style=\"font-family:sans-serif\">\n<h1>{title}</h1>\n<pre>{text}</pre>\n{svg}</body></html>\n",
            title = escape(&format!("topology of application {}", args.application_id)),
            text = escape(&plan.describe(&graph)),
            svg = plan.to_svg(&graph)
        ),
        other => anyhow::bail!("--format must be text, dot, svg or html, not '{other}'"),
    }
    Ok(())
}
