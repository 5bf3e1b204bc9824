//! Greedy fusion: SDK-executed leaves connected through PCollections, in the
//! same environment, become one executable stage run as bundles on an SDK
//! harness. Runner-executed transforms (Impulse, and later GroupByKey) break
//! fusion.
use std::collections::{BTreeMap, BTreeSet};

use crate::graph::PipelineGraph;
use crate::urns;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stage {
    pub id: String,
    pub environment_id: String,
    /// Leaf transform ids in topological order.
    pub transforms: Vec<String>,
    /// PCollections read from outside the stage.
    pub inputs: Vec<String>,
    /// PCollections produced here and consumed outside the stage (as a main
    /// or a side input).
    pub outputs: Vec<String>,
    /// The side inputs its ParDos read.
    pub side_inputs: Vec<SideInputRef>,
}

/// A side input of a ParDo in a stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SideInputRef {
    pub transform: String,
    pub local_name: String,
    pub pcollection: String,
}

fn find(parent: &mut Vec<usize>, i: usize) -> usize {
    let mut root = i;
    while parent[root] != root {
        root = parent[root];
    }
    let mut cur = i;
    while parent[cur] != root {
        let next = parent[cur];
        parent[cur] = root;
        cur = next;
    }
    root
}

pub fn is_sdk_executed(graph: &PipelineGraph, id: &str) -> bool {
    urns::SDK_EXECUTED.contains(&graph.urn(id)) && !graph.transform(id).environment_id.is_empty()
}

/// Fuses the graph's SDK-executed leaves into stages, in topological order.
pub fn fuse(graph: &PipelineGraph) -> Vec<Stage> {
    let sdk: Vec<&String> = graph.leaves.iter().filter(|id| is_sdk_executed(graph, id)).collect();
    let index: BTreeMap<&str, usize> = sdk.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
    let mut parent: Vec<usize> = (0..sdk.len()).collect();
    for (i, id) in sdk.iter().enumerate() {
        let env = &graph.transform(id).environment_id;
        // A ParDo with side inputs starts a stage: the runner holds its main
        // input until the side windows it needs are complete, which it can
        // only do where elements enter a stage. So does a stateful ParDo: its
        // input must arrive partitioned by key.
        if !graph.side_inputs_of(id).is_empty() || graph.is_stateful(id) {
            continue;
        }
        for pc in graph.main_inputs_of(id) {
            let Some(prod) = graph.producer.get(&pc) else { continue };
            if let Some(&j) = index.get(prod.as_str()) {
                if &graph.transform(prod).environment_id == env {
                    let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                    parent[a] = b;
                }
            }
        }
    }
    // Siblings reading the same runner-produced PCollection (a GroupByKey's
    // or Impulse's output, a Kafka read) share a stage: a topic partition
    // feeds one task, so two stages could not both read it.
    let mut readers: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, id) in sdk.iter().enumerate() {
        for pc in graph.main_inputs_of(id) {
            let from_sdk = graph.producer.get(&pc).is_some_and(|p| index.contains_key(p.as_str()));
            if !from_sdk {
                readers.entry(pc).or_default().push(i);
            }
        }
    }
    for group in readers.values() {
        for pair in group.windows(2) {
            let (i, j) = (pair[0], pair[1]);
            if graph.transform(sdk[i]).environment_id == graph.transform(sdk[j]).environment_id {
                let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                parent[a] = b;
            }
        }
    }
    // Group in topological order; a stage is numbered by its first transform.
    let mut groups: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut order: Vec<usize> = Vec::new();
    for (i, id) in sdk.iter().enumerate() {
        let root = find(&mut parent, i);
        if !groups.contains_key(&root) {
            order.push(root);
        }
        groups.entry(root).or_default().push((*id).clone());
    }
    order
        .into_iter()
        .enumerate()
        .map(|(n, root)| {
            let transforms = groups.remove(&root).expect("group exists");
            let members: BTreeSet<&String> = transforms.iter().collect();
            let mut inputs = Vec::new();
            let mut outputs = Vec::new();
            let mut side_inputs = Vec::new();
            for id in &transforms {
                for (local_name, pcollection) in graph.side_inputs_of(id) {
                    side_inputs.push(SideInputRef { transform: id.clone(), local_name, pcollection });
                }
                for pc in graph.main_inputs_of(id) {
                    let inside = graph.producer.get(&pc).is_some_and(|p| members.contains(p));
                    if !inside && !inputs.contains(&pc) {
                        inputs.push(pc);
                    }
                }
                for pc in graph.transform(id).outputs.values() {
                    // A side input always leaves its stage: the runner serves it.
                    let read_aside = graph.consumers.get(pc).is_some_and(|cs| {
                        cs.iter().any(|c| graph.side_inputs_of(c).iter().any(|(_, side)| side == pc))
                    });
                    let outside = read_aside || graph.consumers.get(pc).is_some_and(|cs| cs.iter().any(|c| !members.contains(c)));
                    if outside && !outputs.contains(pc) {
                        outputs.push(pc.clone());
                    }
                }
            }
            Stage {
                id: format!("stage-{n}"),
                environment_id: graph.transform(&transforms[0]).environment_id.clone(),
                transforms,
                inputs,
                outputs,
                side_inputs,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::test_pipelines::Builder;
    use crate::urns::*;

    #[test]
    fn a_chain_after_impulse_is_one_stage() {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false)
            .leaf("flatmap", PAR_DO, &["a"], &["b"], true)
            .leaf("map", PAR_DO, &["b"], &["c"], true)
            .leaf("side", PAR_DO, &["b"], &["d"], true);
        let p = b.build();
        let g = PipelineGraph::new(&p).unwrap();
        let stages = fuse(&g);
        assert_eq!(stages.len(), 1);
        assert_eq!(stages[0].transforms.len(), 3);
        assert_eq!(stages[0].transforms[0], "flatmap");
        assert_eq!(stages[0].inputs, ["a"]);
        assert!(stages[0].outputs.is_empty());
    }

    #[test]
    fn a_runner_transform_breaks_fusion() {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false)
            .leaf("pre", PAR_DO, &["a"], &["b"], true)
            .leaf("gbk", GROUP_BY_KEY, &["b"], &["c"], false)
            .leaf("post", PAR_DO, &["c"], &["d"], true);
        let p = b.build();
        let g = PipelineGraph::new(&p).unwrap();
        let stages = fuse(&g);
        assert_eq!(stages.len(), 2);
        assert_eq!((stages[0].inputs.clone(), stages[0].outputs.clone()), (vec!["a".into()], vec!["b".into()]));
        assert_eq!(stages[1].inputs, ["c"]);
        assert_eq!(stages[1].id, "stage-1");
    }

    #[test]
    fn two_readers_of_a_group_by_key_output_share_a_stage() {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false)
            .leaf("pair", PAR_DO, &["a"], &["b"], true)
            .leaf("gbk", GROUP_BY_KEY, &["b"], &["c"], false)
            .leaf("left", PAR_DO, &["c"], &["d"], true)
            .leaf("right", PAR_DO, &["c"], &["e"], true);
        let p = b.build();
        let g = PipelineGraph::new(&p).unwrap();
        let stages = fuse(&g);
        assert_eq!(stages.len(), 2);
        assert_eq!(stages[1].transforms, ["left", "right"]);
        assert_eq!(stages[1].inputs, ["c"]);
    }

    #[test]
    fn two_impulses_flattened_share_a_stage() {
        let mut b = Builder::new();
        b.leaf("i1", IMPULSE, &[], &["a"], false)
            .leaf("i2", IMPULSE, &[], &["b"], false)
            .leaf("flatten", FLATTEN, &["a", "b"], &["c"], true)
            .leaf("map", PAR_DO, &["c"], &["d"], true);
        let p = b.build();
        let g = PipelineGraph::new(&p).unwrap();
        let stages = fuse(&g);
        assert_eq!(stages.len(), 1);
        let mut inputs = stages[0].inputs.clone();
        inputs.sort();
        assert_eq!(inputs, ["a", "b"]);
    }
}
