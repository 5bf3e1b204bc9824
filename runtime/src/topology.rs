//! The topology plan (DESIGN.md §3): which runner-owned topics exist, which
//! sub-topologies read them, and so which tasks (sub-topology, partition) run.
use std::fmt::Write as _;

use crate::fusion::{fuse, Stage};
use crate::graph::PipelineGraph;
use crate::urns;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopicKind {
    /// Carries one Impulse element and a final watermark; always 1 partition
    /// (more would fire the impulse once per partition).
    Impulse,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPlan {
    pub name: String,
    pub kind: TopicKind,
    pub partitions: u32,
    /// The transform whose output the topic carries.
    pub producer_transform: String,
    /// The PCollection the topic carries.
    pub pcollection: String,
}

/// A connected set of stages between topics; one task per partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubTopology {
    pub id: u32,
    pub stage: Stage,
    /// Indexes into `TopologyPlan::topics`, one per stage input.
    pub input_topics: Vec<usize>,
    pub partitions: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologyPlan {
    pub application_id: String,
    pub topics: Vec<TopicPlan>,
    pub sub_topologies: Vec<SubTopology>,
}

/// Identifies a task: the unit that owns one partition of a sub-topology's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    pub sub_topology: u32,
    pub partition: u32,
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}_{}", self.sub_topology, self.partition)
    }
}

pub fn topic_prefix(application_id: &str) -> String {
    format!("__beam_{application_id}_")
}

impl TopologyPlan {
    /// Plans a validated pipeline.
    pub fn plan(graph: &PipelineGraph, application_id: &str) -> Result<TopologyPlan, String> {
        let prefix = topic_prefix(application_id);
        let mut topics = Vec::new();
        for id in graph.leaves.iter().filter(|id| graph.urn(id) == urns::IMPULSE) {
            let pcollection = graph.transform(id).outputs.values().next().ok_or_else(|| format!("Impulse '{id}' has no output"))?;
            topics.push(TopicPlan {
                name: format!("{prefix}impulse_{}", topics.len()),
                kind: TopicKind::Impulse,
                partitions: 1,
                producer_transform: id.clone(),
                pcollection: pcollection.clone(),
            });
        }
        let mut sub_topologies = Vec::new();
        for stage in fuse(graph) {
            let mut input_topics = Vec::new();
            for pc in &stage.inputs {
                let t = topics.iter().position(|t| &t.pcollection == pc).ok_or_else(|| {
                    let producer = graph.producer.get(pc).map(|p| graph.transform(p).unique_name.clone()).unwrap_or_default();
                    format!("stage {} reads '{pc}' from '{producer}', which this runner cannot connect yet", stage.id)
                })?;
                input_topics.push(t);
            }
            let partitions = input_topics.iter().map(|&t| topics[t].partitions).max().unwrap_or(1);
            sub_topologies.push(SubTopology { id: sub_topologies.len() as u32, stage, input_topics, partitions });
        }
        Ok(TopologyPlan { application_id: application_id.to_string(), topics, sub_topologies })
    }

    pub fn tasks(&self) -> Vec<TaskId> {
        self.sub_topologies
            .iter()
            .flat_map(|s| (0..s.partitions).map(move |p| TaskId { sub_topology: s.id, partition: p }))
            .collect()
    }

    /// Tasks whose output reaches no topic: the job is done when all of them
    /// have reached +∞.
    pub fn terminal_tasks(&self) -> Vec<TaskId> {
        // No sub-topology writes a topic yet, so every task is terminal.
        self.tasks()
    }

    /// A human-readable description of the plan.
    pub fn describe(&self, graph: &PipelineGraph) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "application {}", self.application_id);
        for t in &self.topics {
            let _ = writeln!(out, "topic {} ({:?}, {} partition(s)) <- {}", t.name, t.kind, t.partitions, graph.transform(&t.producer_transform).unique_name);
        }
        for s in &self.sub_topologies {
            let inputs: Vec<_> = s.input_topics.iter().map(|&t| self.topics[t].name.as_str()).collect();
            let names: Vec<_> = s.stage.transforms.iter().map(|t| graph.transform(t).unique_name.as_str()).collect();
            let _ = writeln!(out, "sub-topology {} [{} task(s)] reads {} runs {}: {}", s.id, s.partitions, inputs.join(", "), s.stage.id, names.join(" -> "));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::test_pipelines::Builder;
    use crate::urns::*;

    #[test]
    fn impulse_feeds_a_one_partition_topic_read_by_one_task() {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("map", PAR_DO, &["a"], &["b"], true);
        let p = b.build();
        let g = PipelineGraph::new(&p).unwrap();
        let plan = TopologyPlan::plan(&g, "app").unwrap();
        assert_eq!(plan.topics.len(), 1);
        assert_eq!(plan.topics[0].name, "__beam_app_impulse_0");
        assert_eq!(plan.topics[0].partitions, 1);
        assert_eq!(plan.sub_topologies[0].input_topics, [0]);
        assert_eq!(plan.tasks(), [TaskId { sub_topology: 0, partition: 0 }]);
        assert_eq!(plan.terminal_tasks(), plan.tasks());
        let text = plan.describe(&g);
        assert!(text.contains("__beam_app_impulse_0") && text.contains("map"), "{text}");
    }

    #[test]
    fn each_impulse_gets_its_own_topic() {
        let mut b = Builder::new();
        b.leaf("i1", IMPULSE, &[], &["a"], false)
            .leaf("i2", IMPULSE, &[], &["b"], false)
            .leaf("flatten", FLATTEN, &["a", "b"], &["c"], true);
        let p = b.build();
        let g = PipelineGraph::new(&p).unwrap();
        let plan = TopologyPlan::plan(&g, "x").unwrap();
        let names: Vec<_> = plan.topics.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["__beam_x_impulse_0", "__beam_x_impulse_1"]);
        assert_eq!(plan.sub_topologies[0].input_topics.len(), 2);
    }

    #[test]
    fn a_stage_fed_by_a_runner_transform_without_topic_is_an_error() {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false)
            .leaf("gbk", GROUP_BY_KEY, &["a"], &["c"], false)
            .leaf("post", PAR_DO, &["c"], &["d"], true);
        let p = b.build();
        let g = PipelineGraph::new(&p).unwrap();
        assert!(TopologyPlan::plan(&g, "x").unwrap_err().contains("gbk"));
    }
}
