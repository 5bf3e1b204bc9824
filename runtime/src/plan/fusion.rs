//! Greedy fusion: SDK-executed leaves connected through PCollections, in the
//! same environment, become one executable stage run as bundles on an SDK
//! harness. Runner-executed transforms (Impulse, and later GroupByKey) break
//! fusion.
use std::collections::{BTreeMap, BTreeSet};

use crate::plan::graph::PipelineGraph;
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
    /// Inputs whose records are coded with another element coder than their
    /// PCollection's (pcollection, coder id): the TestStream recoders.
    pub input_coders: Vec<(String, String)>,
}

/// A side input of a ParDo in a stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SideInputRef {
    pub transform: String,
    pub local_name: String,
    pub pcollection: String,
}

fn find(parent: &mut [usize], i: usize) -> usize {
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

/// The fusion groups being built, over every leaf (runner-executed leaves
/// stay alone), with the leaf graph that keeps them acyclic.
struct Groups {
    parent: Vec<usize>,
    /// Leaf → the leaves reading one of its outputs (as a main or side input).
    readers: Vec<Vec<usize>>,
}

impl Groups {
    fn new(graph: &PipelineGraph, index: &BTreeMap<&str, usize>) -> Self {
        let mut readers = vec![Vec::new(); graph.leaves.len()];
        for (i, id) in graph.leaves.iter().enumerate() {
            for pc in graph.inputs_of(id) {
                if let Some(&p) = graph.producer.get(&pc).and_then(|p| index.get(p.as_str())) {
                    readers[p].push(i);
                }
            }
        }
        Groups { parent: (0..graph.leaves.len()).collect(), readers }
    }

    /// Merges the groups of leaves `i` and `j` unless that would make a path
    /// leave the merged group and come back (e.g. through a GroupByKey): the
    /// stage would then read a topic it writes and wait on its own watermark.
    fn union(&mut self, i: usize, j: usize) {
        let (a, b) = (find(&mut self.parent, i), find(&mut self.parent, j));
        if a != b && !self.cycles_through(a, b) {
            self.parent[a] = b;
        }
    }

    /// Whether the group graph, with groups `a` and `b` as one, has a cycle
    /// through them. The graph without the merge is acyclic (the leaf graph
    /// is, and every merge was checked), so any new cycle passes through it.
    fn cycles_through(&mut self, a: usize, b: usize) -> bool {
        let n = self.parent.len();
        let group: Vec<usize> = (0..n).map(|i| find(&mut self.parent, i)).map(|r| if r == b { a } else { r }).collect();
        let mut members = vec![Vec::new(); n];
        for (i, &g) in group.iter().enumerate() {
            members[g].push(i);
        }
        let next = |g: usize| members[g].iter().flat_map(|&i| self.readers[i].iter().map(|&r| group[r])).filter(move |&h| h != g);
        let mut stack: Vec<usize> = next(a).collect();
        let mut seen = vec![false; n];
        while let Some(g) = stack.pop() {
            if g == a {
                return true;
            }
            if !std::mem::replace(&mut seen[g], true) {
                stack.extend(next(g));
            }
        }
        false
    }
}

/// A splittable DoFn's split step reads the side inputs its pairing step
/// read, for the same elements: the pairing step's stage already held them
/// until their side windows were complete, so the two may share a stage.
pub(crate) fn reads_sides_its_producer_held(graph: &PipelineGraph, id: &str) -> bool {
    graph.urn(id) == urns::SDF_SPLIT_AND_SIZE
        && graph.main_inputs_of(id).iter().all(|pc| graph.producer.get(pc).is_some_and(|p| graph.urn(p) == urns::SDF_PAIR_WITH_RESTRICTION))
}

/// Fuses the graph's SDK-executed leaves into stages, in topological order.
/// No stage reaches itself through another stage or a runner transform.
pub fn fuse(graph: &PipelineGraph) -> Vec<Stage> {
    let index: BTreeMap<&str, usize> = graph.leaves.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
    let sdk: Vec<usize> = (0..graph.leaves.len()).filter(|&i| graph.is_sdk_executed(&graph.leaves[i])).collect();
    let env = |i: usize| &graph.transform(&graph.leaves[i]).environment_id;
    let mut groups = Groups::new(graph, &index);
    // Siblings reading the same runner-produced PCollection (a GroupByKey's
    // or Impulse's output, a Kafka read) share a stage: a topic partition
    // feeds one task, so two stages could not both read it. Merged first, as
    // the plan needs them; a refused one is reported by the topology plan.
    let mut readers: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    // A Flatten the runner does itself (`runner_flatten`) stays apart from
    // what produces its inputs, and from other readers of them.
    let runner_flatten = |i: usize| graph.is_runner_flatten(&graph.leaves[i]);
    for &i in sdk.iter().filter(|&&i| !runner_flatten(i)) {
        for pc in graph.main_inputs_of(&graph.leaves[i]) {
            let from_sdk = graph.producer.get(&pc).is_some_and(|p| graph.is_sdk_executed(p));
            if !from_sdk {
                readers.entry(pc).or_default().push(i);
            }
        }
    }
    for group in readers.values() {
        for pair in group.windows(2) {
            if env(pair[0]) == env(pair[1]) {
                groups.union(pair[0], pair[1]);
            }
        }
    }
    for &i in &sdk {
        let id = &graph.leaves[i];
        // A ParDo with side inputs starts a stage: the runner holds its main
        // input until the side windows it needs are complete, which it can
        // only do where elements enter a stage. So does a stateful ParDo: its
        // input must arrive partitioned by key. So does a splittable DoFn's
        // process step: the restrictions its input was split into cross an
        // edge topic, spreading over the tasks.
        let gated = !graph.side_inputs_of(id).is_empty() && !reads_sides_its_producer_held(graph, id);
        if gated || graph.is_stateful(id) || graph.urn(id) == urns::SDF_PROCESS || runner_flatten(i) {
            continue;
        }
        for pc in graph.main_inputs_of(id) {
            let Some(prod) = graph.producer.get(&pc) else { continue };
            if graph.is_sdk_executed(prod) && env(index[prod.as_str()]) == env(i) {
                // A refused merge leaves `pc` on an edge topic between stages.
                groups.union(i, index[prod.as_str()]);
            }
        }
    }
    // Group in topological order; a stage is numbered by its first transform.
    let mut stages: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut order: Vec<usize> = Vec::new();
    for &i in &sdk {
        let root = find(&mut groups.parent, i);
        if !stages.contains_key(&root) {
            order.push(root);
        }
        stages.entry(root).or_default().push(graph.leaves[i].clone());
    }
    order
        .into_iter()
        .enumerate()
        .map(|(n, root)| {
            let transforms = stages.remove(&root).expect("group exists");
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
                    let read_aside = graph
                        .consumers
                        .get(pc)
                        .is_some_and(|cs| cs.iter().any(|c| graph.side_inputs_of(c).iter().any(|(_, side)| side == pc)));
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
                input_coders: Vec::new(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::graph::test_pipelines::Builder;
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

    /// The shape of Python's `CombinePerKey(...).with_hot_key_fanout(n)`,
    /// lifted: the cold output of SplitHotCold meets the hot one, combined
    /// through a first GroupByKey, in a Flatten before the second one.
    fn hot_key_fanout() -> crate::pb::Pipeline {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false)
            .leaf("split", PAR_DO, &["a"], &["cold", "hot"], true)
            .leaf("pre1", COMBINE_PER_KEY_PRECOMBINE, &["hot"], &["p1"], true)
            .leaf("gbk1", GROUP_BY_KEY, &["p1"], &["g1"], false)
            .leaf("merge1", COMBINE_PER_KEY_MERGE_ACCUMULATORS, &["g1"], &["m1"], true)
            .leaf("extract1", COMBINE_PER_KEY_EXTRACT_OUTPUTS, &["m1"], &["e1"], true)
            .leaf("strip", PAR_DO, &["e1"], &["s1"], true)
            .leaf("flatten", FLATTEN, &["cold", "s1"], &["f"], true)
            .leaf("pre2", COMBINE_PER_KEY_PRECOMBINE, &["f"], &["p2"], true)
            .leaf("gbk2", GROUP_BY_KEY, &["p2"], &["g2"], false)
            .leaf("merge2", COMBINE_PER_KEY_MERGE_ACCUMULATORS, &["g2"], &["m2"], true)
            .leaf("extract2", COMBINE_PER_KEY_EXTRACT_OUTPUTS, &["m2"], &["out"], true);
        b.build()
    }

    #[test]
    fn a_flatten_is_not_fused_across_a_group_by_key_into_a_cycle() {
        let p = hot_key_fanout();
        let g = PipelineGraph::new(&p).unwrap();
        let stages = fuse(&g);
        let transforms: Vec<_> = stages.iter().map(|s| s.transforms.clone()).collect();
        // Fusing the Flatten with `split` too would make one stage write
        // gbk1's input and read its output.
        assert_eq!(transforms, [vec!["split", "pre1"], vec!["merge1", "extract1", "strip", "flatten", "pre2"], vec!["merge2", "extract2"]]);
        let mut outputs = stages[0].outputs.clone();
        outputs.sort();
        assert_eq!(outputs, ["cold", "p1"], "the cold values leave through an edge");
        assert_eq!(stages[1].inputs, ["g1", "cold"]);
        assert_eq!(stages[1].outputs, ["p2"]);
    }

    #[test]
    fn fusion_is_the_same_whichever_flatten_input_comes_first() {
        let mut p = hot_key_fanout();
        let flatten = p.components.as_mut().unwrap().transforms.get_mut("flatten").unwrap();
        flatten.inputs = [("i0".to_string(), "s1".to_string()), ("i1".to_string(), "cold".to_string())].into();
        let g = PipelineGraph::new(&p).unwrap();
        let stages = fuse(&g);
        assert_eq!(stages[1].transforms, ["merge1", "extract1", "strip", "flatten", "pre2"]);
        assert_eq!(stages[1].inputs, ["g1", "cold"]);
    }

    #[test]
    fn siblings_of_a_runner_output_are_not_fused_into_a_cycle() {
        // One stage would read its own shuffle, so they stay apart (the plan
        // then reports the two readers).
        let p = crate::plan::graph::test_pipelines::siblings_through_a_shuffle();
        let g = PipelineGraph::new(&p).unwrap();
        let transforms: Vec<_> = fuse(&g).into_iter().map(|s| s.transforms).collect();
        assert_eq!(transforms, [vec!["pair"], vec!["left"], vec!["flatten"]]);
    }
}
