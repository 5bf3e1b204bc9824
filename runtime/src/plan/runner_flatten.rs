//! Flattens the runner does itself, for an SDK harness that reads one data
//! input per bundle: Go's runs a bundle's data sources one after another
//! and keeps only the last one as its source (its plan holds one), so a
//! stage fed through two data sources stalls or loses its timers. For Go,
//! a Flatten of several inputs is not fused with what produces them
//! (`fusion`); its stage then reads every input from outside, and the
//! runner feeds all their records to one data source of the Flatten's
//! output, in place of the Flatten (as Prism does).
use std::collections::BTreeMap;

use crate::pb;
use crate::plan::fusion::Stage;
use crate::plan::graph::PipelineGraph;

/// Whether two coders are the same (same spec, same parts).
fn same_coder(components: &pb::Components, a: &str, b: &str, depth: usize) -> bool {
    if a == b {
        return true;
    }
    let (Some(x), Some(y)) = (components.coders.get(a), components.coders.get(b)) else { return false };
    depth < crate::codec::coder::MAX_CODER_NESTING
        && x.spec == y.spec
        && x.component_coder_ids.len() == y.component_coder_ids.len()
        && x.component_coder_ids.iter().zip(&y.component_coder_ids).all(|(p, q)| same_coder(components, p, q, depth + 1))
}

/// Whether elements of `input` read as elements of `output`: the same
/// element and window coders.
fn same_wire_form(components: &pb::Components, input: &str, output: &str) -> bool {
    let (Some(i), Some(o)) = (components.pcollections.get(input), components.pcollections.get(output)) else { return false };
    let window = |pc: &pb::PCollection| components.windowing_strategies.get(&pc.windowing_strategy_id).map(|w| w.window_coder_id.clone());
    let (Some(wi), Some(wo)) = (window(i), window(o)) else { return false };
    same_coder(components, &i.coder_id, &o.coder_id, 0) && same_coder(components, &wi, &wo, 0)
}

/// Takes the runner's Flattens out of their stages: each such stage reads
/// the Flatten's output instead of its inputs. Returns, per Flatten output,
/// the inputs whose records feed it.
pub fn take(graph: &PipelineGraph, stages: &mut [Stage]) -> BTreeMap<String, Vec<String>> {
    let side_inputs: Vec<String> = stages.iter().flat_map(|s| s.side_inputs.iter().map(|si| si.pcollection.clone())).collect();
    let mut taken = BTreeMap::new();
    for stage in stages.iter_mut().filter(|s| s.input_coders.is_empty()) {
        let flattens: Vec<String> = stage.transforms.iter().filter(|t| graph.is_runner_flatten(t)).cloned().collect();
        for id in flattens {
            let inputs = graph.inputs_of(&id);
            let Some(output) = graph.transform(&id).outputs.values().next().cloned() else { continue };
            let only_here = inputs.iter().all(|pc| {
                stage.inputs.contains(pc)
                    && !side_inputs.contains(pc)
                    && stage.transforms.iter().all(|t| t == &id || !graph.main_inputs_of(t).contains(pc))
            });
            if !only_here || !inputs.iter().all(|pc| same_wire_form(graph.components(), pc, &output)) {
                continue;
            }
            stage.transforms.retain(|t| t != &id);
            let at = stage.inputs.iter().position(|pc| inputs.contains(pc)).unwrap_or(stage.inputs.len());
            stage.inputs.retain(|pc| !inputs.contains(pc));
            stage.inputs.insert(at.min(stage.inputs.len()), output.clone());
            taken.insert(output, inputs);
        }
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fusion::fuse;
    use crate::plan::graph::test_pipelines::{in_go as go, two_branches_flattened, Builder};
    use crate::urns::*;

    /// Two impulses, a ParDo each, flattened, then a ParDo.
    fn two_branches(go_sdk: bool) -> pb::Pipeline {
        let mut b = two_branches_flattened();
        b.leaf("after", PAR_DO, &["f"], &["out"], true);
        if go_sdk {
            go(&mut b);
        }
        b.build()
    }

    #[test]
    fn a_go_flatten_becomes_the_runners_and_its_stage_reads_one_input() {
        let p = two_branches(true);
        let g = PipelineGraph::new(&p).unwrap();
        let mut stages = fuse(&g);
        assert_eq!(stages.len(), 3, "the Flatten is not fused with its producers: {stages:?}");
        let taken = take(&g, &mut stages);
        let mut inputs = taken["f"].clone();
        inputs.sort();
        assert_eq!(inputs, ["l", "r"]);
        let last = stages.iter().find(|s| s.transforms.contains(&"after".to_string())).unwrap();
        assert_eq!(last.transforms, ["after"]);
        assert_eq!(last.inputs, ["f"]);
        assert!(stages.iter().all(|s| s.inputs.len() == 1), "{stages:?}");
    }

    #[test]
    fn other_sdks_keep_their_flattens() {
        let p = two_branches(false);
        let g = PipelineGraph::new(&p).unwrap();
        let mut stages = fuse(&g);
        assert!(take(&g, &mut stages).is_empty());
    }

    #[test]
    fn an_input_named_twice_is_fed_twice_unless_a_runner_transform_makes_it() {
        let mut b = Builder::new();
        b.leaf("imp", IMPULSE, &[], &["i"], false)
            .leaf("a", PAR_DO, &["i"], &["pa"], true)
            .leaf("b", PAR_DO, &["i"], &["pb"], true)
            .leaf("dup", FLATTEN, &["pa", "pb", "pa"], &["f"], true)
            .leaf("twice_from_impulse", FLATTEN, &["i", "pb", "i"], &["g"], true);
        go(&mut b);
        let p = b.build();
        let g = PipelineGraph::new(&p).unwrap();
        assert!(g.is_runner_flatten("dup"));
        assert!(!g.is_runner_flatten("twice_from_impulse"), "one topic cannot feed a stage twice");
        let mut stages = fuse(&g);
        let taken = take(&g, &mut stages);
        assert_eq!(taken["f"].iter().filter(|pc| *pc == "pa").count(), 2, "one edge topic each time");
    }

    #[test]
    fn inputs_of_another_coder_keep_the_flatten_in_the_sdk() {
        let mut p = two_branches(true);
        let c = p.components.as_mut().unwrap();
        c.coders.insert(
            "other".into(),
            pb::Coder { spec: Some(pb::FunctionSpec { urn: "beam:coder:varint:v1".into(), payload: vec![] }), ..Default::default() },
        );
        c.pcollections.get_mut("r").unwrap().coder_id = "other".into();
        let g = PipelineGraph::new(&p).unwrap();
        let mut stages = fuse(&g);
        assert!(take(&g, &mut stages).is_empty());
    }
}
