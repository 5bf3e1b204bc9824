//! The topology plan: which runner-owned topics exist, which
//! sub-topologies read and write them, and so which tasks (sub-topology,
//! partition) run.
//!
//! A sub-topology is one fused stage with what feeds it: impulse topics read
//! directly, and shuffle topics read through a GroupByKey. Its outputs that
//! feed a GroupByKey are written to that GroupByKey's shuffle topic.
use std::collections::HashMap;
use std::fmt::Write as _;

mod check;
pub mod names;
pub mod picture;
mod reach;
mod task_id;

pub use task_id::TaskId;

use crate::plan::fusion::{fuse, Stage};
use crate::plan::graph::PipelineGraph;
use crate::urns;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopicKind {
    /// Carries one Impulse element and a final watermark; always 1 partition
    /// (more would fire the impulse once per partition).
    Impulse,
    /// The output of a Flatten of no inputs: no element, only a final
    /// watermark, written at the start like an impulse; 1 partition.
    Empty,
    /// The input of a GroupByKey, partitioned by key.
    Shuffle,
    /// A user's topic read by ReadFromKafka: never created or deleted by the
    /// runner; its partition count is learnt from the broker at start.
    Source,
    /// A PCollection passed between two fused stages without a runner
    /// transform between them (a fusion break before a ParDo with side
    /// inputs); spread over its partitions.
    Edge,
    /// A side-input PCollection; one partition, read whole by every task of
    /// every sub-topology that reads the side input (not through the group).
    Side,
    /// An output of a TestStream, written by the job's TestStream driver
    /// step by step, coded as the TestStream's payload codes elements; one
    /// partition, read by a relay stage that recodes them for the rest of
    /// the pipeline.
    TestStream,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPlan {
    pub name: String,
    pub kind: TopicKind,
    pub partitions: u32,
    /// The PCollection the topic carries.
    pub pcollection: String,
    /// Who reports watermarks on the topic: the Impulse transform, or the
    /// sub-topology writing it (`sub-<id>`).
    pub upstream: String,
    /// How many partitions (tasks) that upstream has.
    pub upstream_partitions: u32,
}

impl TopicPlan {
    /// A one-partition topic the job writes at its start for transform
    /// `upstream` (an impulse, or the end of event time of an empty Flatten).
    fn written_at_start(name: String, kind: TopicKind, pcollection: &str, upstream: &str) -> TopicPlan {
        TopicPlan {
            name,
            kind,
            partitions: 1,
            pcollection: pcollection.to_string(),
            upstream: upstream.to_string(),
            upstream_partitions: 1,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// Records go to the stage as they are.
    Direct,
    /// Records go through this GroupByKey transform first.
    GroupByKey { transform: String },
    /// Kafka records of a user topic, turned into elements by this
    /// ReadFromKafka transform.
    Source { transform: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubInput {
    pub topic: usize,
    pub kind: InputKind,
    /// The stage input this input feeds (the Impulse's or GroupByKey's output).
    pub pcollection: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubOutput {
    /// The stage output written.
    pub pcollection: String,
    pub topic: usize,
}

/// A side input of a sub-topology's stage and the topic it is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubSideInput {
    pub topic: usize,
    pub transform: String,
    pub local_name: String,
    pub pcollection: String,
}

/// A stage output written to a user topic by a WriteToKafka transform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubSink {
    pub pcollection: String,
    pub transform: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubTopology {
    pub id: u32,
    pub stage: Stage,
    pub inputs: Vec<SubInput>,
    pub side_inputs: Vec<SubSideInput>,
    pub outputs: Vec<SubOutput>,
    pub sinks: Vec<SubSink>,
    pub partitions: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologyPlan {
    pub application_id: String,
    pub topics: Vec<TopicPlan>,
    pub sub_topologies: Vec<SubTopology>,
}

pub fn topic_prefix(application_id: &str) -> String {
    format!("__beam_{application_id}_")
}

/// The compacted topic holding the durable state of a sub-topology's tasks
/// (task p writes partition p): GroupByKey buffers and watermark progress.
pub fn changelog_topic(application_id: &str, sub_topology: u32) -> String {
    format!("{}state_{sub_topology}-changelog", topic_prefix(application_id))
}

pub fn sub_topology_source(id: u32) -> String {
    format!("sub-{id}")
}

pub(crate) fn name_of(graph: &PipelineGraph, id: &str) -> String {
    let n = &graph.transform(id).unique_name;
    if n.is_empty() {
        id.to_string()
    } else {
        n.clone()
    }
}

impl TopologyPlan {
    /// Plans a validated pipeline; `parallelism` is the partition count of
    /// shuffle topics.
    pub fn plan(graph: &PipelineGraph, application_id: &str, parallelism: u32) -> Result<TopologyPlan, String> {
        let prefix = topic_prefix(application_id);
        let mut topics: Vec<TopicPlan> = Vec::new();
        // Output PCollection of a runner transform → the topics feeding it.
        let mut fed_by: HashMap<String, Vec<(usize, InputKind)>> = HashMap::new();
        let (mut impulses, mut shuffles, mut test_streams, mut empties) = (0, 0, 0, 0);
        for id in &graph.leaves {
            let t = graph.transform(id);
            match graph.urn(id) {
                urns::IMPULSE => {
                    let out = t.outputs.values().next().ok_or_else(|| format!("Impulse '{}' has no output", name_of(graph, id)))?;
                    let name = format!("{prefix}impulse_{impulses}");
                    fed_by.entry(out.clone()).or_default().push((topics.len(), InputKind::Direct));
                    topics.push(TopicPlan::written_at_start(name, TopicKind::Impulse, out, id));
                    impulses += 1;
                }
                // Nothing flows into a Flatten of no inputs: it is a topic
                // holding only the end of event time (else no task would
                // run it, and its readers would wait forever).
                urns::FLATTEN if graph.inputs_of(id).is_empty() => {
                    let out = t.outputs.values().next().ok_or_else(|| format!("Flatten '{}' has no output", name_of(graph, id)))?;
                    let name = format!("{prefix}empty_{empties}");
                    fed_by.entry(out.clone()).or_default().push((topics.len(), InputKind::Direct));
                    topics.push(TopicPlan::written_at_start(name, TopicKind::Empty, out, id));
                    empties += 1;
                }
                urns::TEST_STREAM => {
                    let mut outs: Vec<(&String, &String)> = t.outputs.iter().collect();
                    outs.sort();
                    for (_, out) in outs {
                        fed_by.entry(out.clone()).or_default().push((topics.len(), InputKind::Direct));
                        topics.push(TopicPlan {
                            name: format!("{prefix}teststream_{test_streams}"),
                            kind: TopicKind::TestStream,
                            partitions: 1,
                            pcollection: out.clone(),
                            upstream: id.clone(),
                            upstream_partitions: 1,
                        });
                        test_streams += 1;
                    }
                }
                urns::GROUP_BY_KEY => {
                    let input = graph
                        .inputs_of(id)
                        .into_iter()
                        .next()
                        .ok_or_else(|| format!("GroupByKey '{}' has no input", name_of(graph, id)))?;
                    let out = t.outputs.values().next().ok_or_else(|| format!("GroupByKey '{}' has no output", name_of(graph, id)))?;
                    fed_by.entry(out.clone()).or_default().push((topics.len(), InputKind::GroupByKey { transform: id.clone() }));
                    topics.push(TopicPlan {
                        name: format!("{prefix}shuffle_{shuffles}"),
                        kind: TopicKind::Shuffle,
                        partitions: parallelism.max(1),
                        pcollection: input,
                        upstream: String::new(), // set once its producer is known
                        upstream_partitions: 0,
                    });
                    shuffles += 1;
                }
                urns::KAFKA_READ => {
                    let spec = crate::plan::validate::read_spec(t)?;
                    let out = t.outputs.values().next().ok_or_else(|| format!("ReadFromKafka '{}' has no output", name_of(graph, id)))?;
                    for topic in spec.topics {
                        if let Some(other) = topics.iter().find(|p| p.kind == TopicKind::Source && p.name == topic) {
                            return Err(format!(
                                "topic '{topic}' is read by both '{}' and '{}'; read it once and use the PCollection twice",
                                name_of(graph, &other.upstream),
                                name_of(graph, id)
                            ));
                        }
                        fed_by.entry(out.clone()).or_default().push((topics.len(), InputKind::Source { transform: id.clone() }));
                        topics.push(TopicPlan {
                            name: topic,
                            kind: TopicKind::Source,
                            partitions: 0,
                            pcollection: out.clone(),
                            upstream: id.clone(),
                            upstream_partitions: 0,
                        });
                    }
                }
                _ => {}
            }
        }
        let mut stages = fuse(graph);
        // Each TestStream output is recoded by a relay stage of its own (the
        // SDK decodes with the payload's coder and encodes with the
        // PCollection's); every other reader gets it from that relay.
        let mut recoders = Vec::new();
        for t in topics.iter().filter(|t| t.kind == TopicKind::TestStream) {
            let payload = crate::test_stream::payload_coder(graph.transform(&t.upstream))?;
            recoders.push(Stage {
                id: format!("recode-{}", recoders.len()),
                environment_id: stages.first().map(|st| st.environment_id.clone()).unwrap_or_default(),
                transforms: Vec::new(),
                inputs: vec![t.pcollection.clone()],
                outputs: vec![t.pcollection.clone()],
                side_inputs: Vec::new(),
                input_coders: vec![(t.pcollection.clone(), payload)],
            });
        }
        let recoded: Vec<String> = recoders.iter().map(|r| r.inputs[0].clone()).collect();
        stages.splice(0..0, recoders);
        // Side inputs: one topic per side-input PCollection. One produced by
        // a runner transform (a GroupByKey, an Impulse, a read) is copied to
        // its topic by a relay stage with no transforms of its own.
        let mut side_topic: HashMap<String, usize> = HashMap::new();
        let mut relays = Vec::new();
        for si in stages.iter().flat_map(|st| st.side_inputs.iter()) {
            if side_topic.contains_key(&si.pcollection) {
                continue;
            }
            side_topic.insert(si.pcollection.clone(), topics.len());
            topics.push(TopicPlan {
                name: format!("{prefix}side_{}", side_topic.len() - 1),
                kind: TopicKind::Side,
                partitions: 1,
                pcollection: si.pcollection.clone(),
                upstream: String::new(),
                upstream_partitions: 0,
            });
            if fed_by.contains_key(&si.pcollection) {
                relays.push(si.pcollection.clone());
            }
        }
        // A stage that reads the PCollection anyway copies it out itself (a
        // topic partition can feed only one task, so no second reader).
        relays.retain(|pc| match stages.iter_mut().find(|st| st.inputs.contains(pc)) {
            Some(reader) => {
                // (A TestStream's recoder already writes it out.)
                if !reader.outputs.contains(pc) {
                    reader.outputs.push(pc.clone());
                }
                false
            }
            None => true,
        });
        let env = stages.first().map(|st| st.environment_id.clone()).unwrap_or_default();
        for (n, pc) in relays.into_iter().enumerate() {
            let id = format!("relay-{n}");
            stages.push(Stage {
                id,
                environment_id: env.clone(),
                transforms: Vec::new(),
                inputs: vec![pc.clone()],
                outputs: vec![pc],
                side_inputs: Vec::new(),
                input_coders: Vec::new(),
            });
        }
        // Flattens the runner does itself: their inputs' records all feed
        // the data source of their output.
        let flattened = crate::plan::runner_flatten::take(graph, &mut stages);
        let mut edges = 0;
        let mut sub_topologies = Vec::new();
        for stage in &stages {
            let id = sub_topologies.len() as u32;
            let mut inputs = Vec::new();
            for pc in &stage.inputs {
                for read in flattened.get(pc).cloned().unwrap_or_else(|| vec![pc.clone()]) {
                    let recoder = !stage.input_coders.is_empty();
                    if let Some(feeds) = fed_by.get(&read).filter(|_| recoder || !recoded.contains(&read)) {
                        for (topic, kind) in feeds.clone() {
                            inputs.push(SubInput { topic, kind, pcollection: pc.clone() });
                        }
                        continue;
                    }
                    let from_stage = recoded.contains(&read)
                        || graph.producer.get(&read).is_some_and(|p| stages.iter().any(|st| st.transforms.contains(p)));
                    if !from_stage {
                        let producer = graph.producer.get(&read).map(|p| name_of(graph, p)).unwrap_or_default();
                        return Err(format!("stage {} reads '{read}' from '{producer}', which this runner cannot connect yet", stage.id));
                    }
                    // Another stage's output, past a fusion break: an edge topic
                    // per reading stage (a topic's partitions go to one task each).
                    inputs.push(SubInput { topic: topics.len(), kind: InputKind::Direct, pcollection: pc.clone() });
                    topics.push(TopicPlan {
                        name: format!("{prefix}edge_{edges}"),
                        kind: TopicKind::Edge,
                        partitions: parallelism.max(1),
                        pcollection: read,
                        upstream: String::new(),
                        upstream_partitions: 0,
                    });
                    edges += 1;
                }
            }
            // A stateful ParDo keeps state per key in the task owning the key:
            // its input must arrive partitioned by key (a shuffle or an edge).
            if let Some(t) = stage.transforms.iter().find(|t| graph.is_stateful(t)) {
                let own = graph.main_inputs_of(t);
                if let Some(i) = inputs.iter().find(|i| {
                    own.contains(&i.pcollection)
                        && matches!(topics[i.topic].kind, TopicKind::Source | TopicKind::Impulse | TopicKind::Empty)
                }) {
                    return Err(format!(
                        "stateful '{}' reads '{}' straight from {}, which is not partitioned by key; \
                         put a step between them, e.g. beam.Map(lambda kv: kv)",
                        name_of(graph, t),
                        i.pcollection,
                        topics[i.topic].name
                    ));
                }
            }
            for si in &stage.side_inputs {
                let member = stage.transforms.iter().position(|t| t == &si.transform);
                let produced_here = graph.producer.get(&si.pcollection).is_some_and(|p| stage.transforms.contains(p));
                let main_here =
                    graph.main_inputs_of(&si.transform).iter().any(|m| graph.producer.get(m).is_some_and(|p| stage.transforms.contains(p)));
                let gated_at_entry = crate::plan::fusion::reads_sides_its_producer_held(graph, &si.transform);
                if member.is_some() && (produced_here || (main_here && !gated_at_entry)) {
                    return Err(format!(
                        "'{}' reads a side input in the middle of a fused stage ({}), which this runner cannot plan yet",
                        name_of(graph, &si.transform),
                        stage.id
                    ));
                }
            }
            let side_inputs = stage
                .side_inputs
                .iter()
                .map(|si| SubSideInput {
                    topic: side_topic[&si.pcollection],
                    transform: si.transform.clone(),
                    local_name: si.local_name.clone(),
                    pcollection: si.pcollection.clone(),
                })
                .collect();
            let partitions = inputs.iter().map(|i| topics[i.topic].partitions).max().unwrap_or(1).max(1);
            sub_topologies.push(SubTopology {
                id,
                stage: stage.clone(),
                inputs,
                side_inputs,
                outputs: Vec::new(),
                sinks: Vec::new(),
                partitions,
            });
        }
        // Outputs: what each stage writes to shuffle, edge and side topics,
        // and to WriteToKafka sinks.
        for sub in &mut sub_topologies {
            let mut outputs = Vec::new();
            let mut sinks = Vec::new();
            for pc in &sub.stage.outputs {
                for consumer in graph.consumers.get(pc).into_iter().flatten() {
                    if graph.urn(consumer) == urns::KAFKA_WRITE && !sub.stage.transforms.is_empty() {
                        sinks.push(SubSink { pcollection: pc.clone(), transform: consumer.clone() });
                    }
                }
                for (i, t) in topics.iter().enumerate() {
                    // A stage of no transforms writes shuffle and edge topics
                    // when it recodes or flattens (else it relays a side input).
                    let moves = !sub.stage.transforms.is_empty()
                        || !sub.stage.input_coders.is_empty()
                        || sub.stage.inputs.iter().any(|i| flattened.contains_key(i));
                    let fed = match t.kind {
                        TopicKind::Shuffle | TopicKind::Edge => moves,
                        TopicKind::Side => true,
                        TopicKind::Impulse | TopicKind::Empty | TopicKind::Source | TopicKind::TestStream => false,
                    };
                    if fed && &t.pcollection == pc {
                        outputs.push(SubOutput { pcollection: pc.clone(), topic: i });
                    }
                }
            }
            sub.outputs = outputs;
            sub.sinks = sinks;
        }
        for id in &graph.leaves {
            if graph.urn(id) != urns::KAFKA_WRITE {
                continue;
            }
            let written = sub_topologies.iter().any(|s| s.sinks.iter().any(|k| &k.transform == id));
            if !written {
                let input = graph.inputs_of(id).into_iter().next().unwrap_or_default();
                let producer = graph.producer.get(&input).map(|p| name_of(graph, p)).unwrap_or_default();
                return Err(format!(
                    "WriteToKafka '{}' reads '{input}' straight from '{producer}', which this runner cannot connect yet; \
                     put a step between them, e.g. beam.Map(lambda kv: kv)",
                    name_of(graph, id)
                ));
            }
        }
        for s in &sub_topologies {
            for o in &s.outputs {
                topics[o.topic].upstream = sub_topology_source(s.id);
                topics[o.topic].upstream_partitions = s.partitions;
            }
        }
        if let Some(t) =
            topics.iter().find(|t| matches!(t.kind, TopicKind::Shuffle | TopicKind::Edge | TopicKind::Side) && t.upstream.is_empty())
        {
            let producer = graph.producer.get(&t.pcollection).map(|p| name_of(graph, p)).unwrap_or_default();
            return Err(format!("a GroupByKey reads '{}' from '{producer}', which this runner cannot connect yet", t.pcollection));
        }
        // A topic partition feeds one task: two stages cannot share an input topic.
        for (i, t) in topics.iter().enumerate() {
            let readers: Vec<&str> =
                sub_topologies.iter().filter(|s| s.inputs.iter().any(|inp| inp.topic == i)).map(|s| s.stage.id.as_str()).collect();
            if readers.len() > 1 {
                return Err(format!(
                    "'{}' is read by two stages ({}), which this runner cannot connect yet; \
                     a beam.Reshuffle() before one of them separates them",
                    t.pcollection,
                    readers.join(", ")
                ));
            }
        }
        // A shuffle nobody reads is not created (its GroupByKey's output is unused).
        let read: Vec<bool> = (0..topics.len())
            .map(|i| {
                sub_topologies.iter().any(|s| s.inputs.iter().any(|inp| inp.topic == i) || s.side_inputs.iter().any(|si| si.topic == i))
            })
            .collect();
        for s in &mut sub_topologies {
            s.outputs.retain(|o| read[o.topic]);
        }
        let plan = TopologyPlan { application_id: application_id.to_string(), topics, sub_topologies }.without_unread_topics(&read);
        plan.check_acyclic(graph)?;
        Ok(plan)
    }

    fn without_unread_topics(mut self, read: &[bool]) -> TopologyPlan {
        let mut new_index = vec![usize::MAX; self.topics.len()];
        let mut kept = Vec::new();
        for (i, t) in self.topics.drain(..).enumerate() {
            if read[i] {
                new_index[i] = kept.len();
                kept.push(t);
            }
        }
        for s in &mut self.sub_topologies {
            for i in &mut s.inputs {
                i.topic = new_index[i.topic];
            }
            for o in &mut s.outputs {
                o.topic = new_index[o.topic];
            }
            for si in &mut s.side_inputs {
                si.topic = new_index[si.topic];
            }
        }
        self.topics = kept;
        self
    }

    /// Sets the partition counts of source topics, learnt from the broker,
    /// and with them the task counts of the sub-topologies that read them.
    pub fn resolve_source_partitions(&mut self, partitions_of: &dyn Fn(&str) -> Option<u32>) -> Result<(), String> {
        for t in self.topics.iter_mut().filter(|t| t.kind == TopicKind::Source) {
            t.partitions = partitions_of(&t.name).ok_or_else(|| format!("no partition count for topic '{}'", t.name))?;
            t.upstream_partitions = t.partitions;
        }
        for s in &mut self.sub_topologies {
            s.partitions = s.inputs.iter().map(|i| self.topics[i.topic].partitions).max().unwrap_or(1).max(1);
        }
        let parts: Vec<u32> = self.sub_topologies.iter().map(|s| s.partitions).collect();
        for (s, p) in self.sub_topologies.iter().zip(parts) {
            for o in &s.outputs {
                self.topics[o.topic].upstream_partitions = p;
            }
        }
        Ok(())
    }

    /// Topics the runner creates and deletes (not the user's).
    pub fn runner_topics(&self) -> impl Iterator<Item = &TopicPlan> {
        self.topics.iter().filter(|t| t.kind != TopicKind::Source)
    }

    pub fn tasks(&self) -> Vec<TaskId> {
        self.sub_topologies.iter().flat_map(|s| (0..s.partitions).map(move |p| TaskId { sub_topology: s.id, partition: p })).collect()
    }

    /// Tasks whose output reaches no topic: the job is done when all of them
    /// have reached +∞.
    pub fn terminal_tasks(&self) -> Vec<TaskId> {
        let ends: Vec<u32> = self.sub_topologies.iter().filter(|s| s.outputs.is_empty()).map(|s| s.id).collect();
        self.tasks().into_iter().filter(|t| ends.contains(&t.sub_topology)).collect()
    }

    /// A human-readable description of the plan.
    pub fn describe(&self, graph: &PipelineGraph) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "application {}", self.application_id);
        for t in &self.topics {
            let _ = writeln!(
                out,
                "topic {} ({:?}, {} partition(s)) carries {} from {}",
                t.name, t.kind, t.partitions, t.pcollection, t.upstream
            );
        }
        for s in &self.sub_topologies {
            let inputs: Vec<String> = s
                .inputs
                .iter()
                .map(|i| match &i.kind {
                    InputKind::Direct => self.topics[i.topic].name.clone(),
                    InputKind::GroupByKey { transform } => format!("{} via {}", self.topics[i.topic].name, name_of(graph, transform)),
                    InputKind::Source { transform } => format!("topic {} via {}", self.topics[i.topic].name, name_of(graph, transform)),
                })
                .collect();
            let names: Vec<String> = s.stage.transforms.iter().map(|t| name_of(graph, t)).collect();
            let mut outputs: Vec<String> = s.outputs.iter().map(|o| self.topics[o.topic].name.clone()).collect();
            outputs.extend(s.sinks.iter().map(|k| format!("{} (WriteToKafka)", name_of(graph, &k.transform))));
            let _ = writeln!(
                out,
                "sub-topology {} [{} task(s)] reads {} runs {}: {} writes {}",
                s.id,
                s.partitions,
                inputs.join(", "),
                s.stage.id,
                names.join(" -> "),
                if outputs.is_empty() { "nothing".to_string() } else { outputs.join(", ") }
            );
        }
        out
    }
}

impl TopologyPlan {
    /// The plan as a Graphviz digraph: topics are boxes, sub-topologies ellipses.
    pub fn to_dot(&self, graph: &PipelineGraph) -> String {
        let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        let mut out = String::from("digraph topology {\n  rankdir=LR;\n");
        for (i, t) in self.topics.iter().enumerate() {
            let _ = writeln!(out, "  t{i} [shape=box, label=\"{}\\n{} partition(s)\"];", esc(&t.name), t.partitions);
        }
        for s in &self.sub_topologies {
            let names: Vec<String> = s.stage.transforms.iter().map(|t| esc(&name_of(graph, t))).collect();
            let _ = writeln!(out, "  s{} [label=\"sub-topology {} ({} task(s))\\n{}\"];", s.id, s.id, s.partitions, names.join("\\n"));
            for i in &s.inputs {
                let label = match &i.kind {
                    InputKind::Direct => String::new(),
                    InputKind::GroupByKey { transform } | InputKind::Source { transform } => esc(&name_of(graph, transform)),
                };
                let _ = writeln!(out, "  t{} -> s{} [label=\"{label}\"];", i.topic, s.id);
            }
            for o in &s.outputs {
                let _ = writeln!(out, "  s{} -> t{};", s.id, o.topic);
            }
            for k in &s.sinks {
                let _ = writeln!(out, "  s{} -> \"{}\";", s.id, esc(&name_of(graph, &k.transform)));
            }
        }
        out.push_str("}\n");
        out
    }
}

#[cfg(test)]
mod tests;
