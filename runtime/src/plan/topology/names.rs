//! Names that outlive a version of the pipeline.
//!
//! A plan numbers its topics and sub-topologies as it meets them, so a
//! changed pipeline would number them differently: a GroupByKey's shuffle
//! topic, or the changelog and transactional ids of the sub-topology that
//! reads it, would change with a step added elsewhere. Every topic and
//! sub-topology has an *identity* instead, said in the pipeline's own
//! terms (the GroupByKey a shuffle feeds, the topics a sub-topology reads),
//! and the plan record keeps which name each identity got. A later version
//! takes the recorded names for the identities it still has and new
//! numbers, never used before, for the others; those it no longer has are
//! retired, their numbers never given again (their topics may still hold
//! what the earlier version left).
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{InputKind, SubTopology, TopicKind, TopologyPlan};
use crate::plan::graph::PipelineGraph;

/// Which name each identity has, and the names no identity has any more.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    pub topics: BTreeMap<String, String>,
    pub sub_topologies: BTreeMap<String, u32>,
    pub retired_topics: BTreeSet<String>,
    pub retired_sub_topologies: BTreeSet<u32>,
    /// Transform ids a version runs under other names
    /// (`stable_ids::alias`): a name, or what is under it, → the id.
    pub aliases: BTreeMap<String, String>,
    /// Ids of stateful transforms whose state an update dropped: a later
    /// transform of that name gets another id (its state is still in the
    /// changelog).
    pub retired_transforms: BTreeSet<String>,
}

impl TopologyPlan {
    /// What topic `i` is for: an Impulse's or a GroupByKey's by transform,
    /// a side input's by PCollection, an edge's by PCollection and the
    /// transform reading it.
    pub fn topic_identity(&self, graph: &PipelineGraph, i: usize) -> String {
        let t = &self.topics[i];
        let reader = self.sub_topologies.iter().find_map(|s| s.inputs.iter().find(|x| x.topic == i).map(|x| (s, x)));
        match t.kind {
            TopicKind::Impulse => format!("impulse {}", t.upstream),
            TopicKind::Empty => format!("empty {}", t.upstream),
            TopicKind::TestStream => format!("teststream {}", t.pcollection),
            TopicKind::Source => format!("source {}", t.name),
            TopicKind::Side => format!("side {}", t.pcollection),
            TopicKind::Shuffle => match reader.map(|(_, x)| &x.kind) {
                Some(InputKind::GroupByKey { transform }) => format!("shuffle {transform}"),
                _ => format!("shuffle of {}", t.pcollection),
            },
            TopicKind::Edge => {
                // By the transform reading it, not by the PCollection: a step
                // added before the reader keeps the topic (and the records in
                // flight on it, coded alike, go to the reader as before).
                let base = self.edge_reader(graph, i);
                let shared = (0..self.topics.len())
                    .filter(|j| self.topics[*j].kind == TopicKind::Edge && self.edge_reader(graph, *j) == base)
                    .count();
                if shared > 1 {
                    format!("{base} from {}", t.pcollection)
                } else {
                    base
                }
            }
        }
    }

    /// "edge to <transform> input <tag>": the transform reading edge topic
    /// `i` in its sub-topology (or the stage's first output, for a stage of
    /// no transforms).
    fn edge_reader(&self, graph: &PipelineGraph, i: usize) -> String {
        let reader = self.sub_topologies.iter().find_map(|s| s.inputs.iter().find(|x| x.topic == i).map(|x| (s, x)));
        let Some((s, x)) = reader else { return format!("edge of {}", self.topics[i].pcollection) };
        let consumer = s.stage.transforms.iter().find_map(|tr| {
            let t = graph.transform(tr);
            let mut tags: Vec<&String> = t.inputs.iter().filter(|(_, pc)| **pc == x.pcollection).map(|(tag, _)| tag).collect();
            tags.sort();
            tags.first().map(|tag| format!("edge to {tr} input {tag}"))
        });
        consumer.unwrap_or_else(|| {
            format!("edge to {} of {}", s.stage.outputs.first().map_or(s.stage.id.as_str(), String::as_str), x.pcollection)
        })
    }

    /// What a sub-topology is: the reader of its input topics (a topic
    /// partition feeds one task, so no two sub-topologies read the same).
    pub fn sub_topology_identity(&self, graph: &PipelineGraph, s: &SubTopology) -> String {
        let mut reads: Vec<String> = s.inputs.iter().map(|x| self.topic_identity(graph, x.topic)).collect();
        reads.sort();
        reads.dedup();
        format!("reader of {}", reads.join(" + "))
    }

    /// This plan's names, nothing retired.
    pub fn names(&self, graph: &PipelineGraph) -> Names {
        let topics = (0..self.topics.len())
            .filter(|i| self.topics[*i].kind != TopicKind::Source)
            .map(|i| (self.topic_identity(graph, i), self.topics[i].name.clone()))
            .collect();
        let sub_topologies = self.sub_topologies.iter().map(|s| (self.sub_topology_identity(graph, s), s.id)).collect();
        Names { topics, sub_topologies, ..Names::default() }
    }

    /// Renames this plan's topics and renumbers its sub-topologies after
    /// `earlier`'s (a first run, `earlier` empty, keeps its own); returns
    /// the names to record, with what `earlier` had and this plan has not
    /// retired.
    pub fn inherit(&mut self, graph: &PipelineGraph, earlier: &Names) -> Names {
        let mine = self.names(graph);
        if earlier.topics.is_empty() && earlier.sub_topologies.is_empty() {
            return Names { aliases: earlier.aliases.clone(), retired_transforms: earlier.retired_transforms.clone(), ..mine };
        }
        // Topics: recorded names, then new numbers per kind past every
        // number the application ever used.
        let mut used: HashMap<String, u64> = HashMap::new();
        for name in earlier.topics.values().chain(&earlier.retired_topics) {
            if let Some((kind, n)) = numbered(name) {
                let next = used.entry(kind).or_default();
                *next = (*next).max(n + 1);
            }
        }
        let identities: Vec<Option<String>> =
            (0..self.topics.len()).map(|i| (self.topics[i].kind != TopicKind::Source).then(|| self.topic_identity(graph, i))).collect();
        for (t, identity) in self.topics.iter_mut().zip(identities) {
            let Some(identity) = identity else { continue };
            t.name = match earlier.topics.get(&identity) {
                Some(name) => name.clone(),
                None => match numbered(&t.name) {
                    Some((kind, _)) => {
                        let next = used.entry(kind.clone()).or_default();
                        *next += 1;
                        format!("{kind}{}", *next - 1)
                    }
                    None => t.name.clone(),
                },
            };
        }
        // Sub-topologies, the same way.
        let mut next_id = earlier.sub_topologies.values().chain(&earlier.retired_sub_topologies).map(|n| n + 1).max().unwrap_or(0);
        let identities: Vec<String> = self.sub_topologies.iter().map(|s| self.sub_topology_identity(graph, s)).collect();
        let mut new_id: HashMap<u32, u32> = HashMap::new();
        for (s, identity) in self.sub_topologies.iter_mut().zip(identities) {
            let id = earlier.sub_topologies.get(&identity).copied().unwrap_or_else(|| {
                next_id += 1;
                next_id - 1
            });
            new_id.insert(s.id, id);
            s.id = id;
        }
        // The writers of shuffle, edge and side topics are sub-topologies
        // (an impulse's is its transform, whatever its name).
        for t in self.topics.iter_mut().filter(|t| matches!(t.kind, TopicKind::Shuffle | TopicKind::Edge | TopicKind::Side)) {
            let upstream = t.upstream.strip_prefix("sub-").and_then(|n| n.parse::<u32>().ok());
            if let Some(id) = upstream.and_then(|old| new_id.get(&old)) {
                t.upstream = super::sub_topology_source(*id);
            }
        }
        let now = self.names(graph);
        let mut retired_topics = earlier.retired_topics.clone();
        retired_topics.extend(earlier.topics.iter().filter(|(i, _)| !now.topics.contains_key(*i)).map(|(_, n)| n.clone()));
        let mut retired_sub_topologies = earlier.retired_sub_topologies.clone();
        retired_sub_topologies.extend(earlier.sub_topologies.iter().filter(|(i, _)| !now.sub_topologies.contains_key(*i)).map(|(_, n)| *n));
        Names {
            retired_topics,
            retired_sub_topologies,
            aliases: earlier.aliases.clone(),
            retired_transforms: earlier.retired_transforms.clone(),
            ..now
        }
    }
}

/// A name or identity as a record's line holds it: no line break, and no
/// `=` (the lines split at " = ").
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n").replace('=', "\\e")
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('e') => out.push('='),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// A runner topic's name as its kind's prefix and number.
fn numbered(name: &str) -> Option<(String, u64)> {
    let digits = name.len() - name.bytes().rev().take_while(u8::is_ascii_digit).count();
    let (kind, n) = name.split_at(digits);
    Some((kind.to_string(), n.parse().ok()?)).filter(|(k, _)| k.ends_with('_'))
}

impl Names {
    /// The table as lines of the plan record (identities and aliases
    /// escaped: they may hold any text).
    pub fn to_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(self.topics.iter().map(|(i, n)| format!("name topic {n} = {}", escape(i))));
        out.extend(self.sub_topologies.iter().map(|(i, n)| format!("name sub-topology {n} = {}", escape(i))));
        out.extend(self.retired_topics.iter().map(|n| format!("retired topic {n}")));
        out.extend(self.retired_sub_topologies.iter().map(|n| format!("retired sub-topology {n}")));
        out.extend(self.aliases.iter().map(|(n, id)| format!("alias {} = {}", escape(n), escape(id))));
        out.extend(self.retired_transforms.iter().map(|id| format!("retired transform {}", escape(id))));
        out
    }

    /// The table in a plan record's lines (other lines are skipped).
    pub fn from_lines(lines: &[String]) -> Names {
        let mut names = Names::default();
        for l in lines {
            if let Some((n, i)) = l.strip_prefix("name topic ").and_then(|r| r.split_once(" = ")) {
                names.topics.insert(unescape(i), n.to_string());
            } else if let Some((n, i)) = l.strip_prefix("name sub-topology ").and_then(|r| r.split_once(" = ")) {
                if let Ok(n) = n.parse() {
                    names.sub_topologies.insert(unescape(i), n);
                }
            } else if let Some(n) = l.strip_prefix("retired topic ") {
                names.retired_topics.insert(n.to_string());
            } else if let Some(n) = l.strip_prefix("retired sub-topology ").and_then(|n| n.parse().ok()) {
                names.retired_sub_topologies.insert(n);
            } else if let Some((n, id)) = l.strip_prefix("alias ").and_then(|r| r.split_once(" = ")) {
                names.aliases.insert(unescape(n), unescape(id));
            } else if let Some(id) = l.strip_prefix("retired transform ") {
                names.retired_transforms.insert(unescape(id));
            }
        }
        names
    }
}

#[cfg(test)]
mod tests;
