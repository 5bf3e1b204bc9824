//! Splittable DoFns, expanded the way portable runners run them: a ParDo
//! with a restriction coder becomes
//!
//! ```text
//! PairWithRestriction → SplitAndSizeRestrictions ─(edge topic)─► ProcessSizedElementsAndRestrictions
//! ```
//!
//! The first two fuse with what comes before; the third starts a stage of
//! its own (`fusion`), so the initial splits of one element (the bundles of
//! a large file) cross an edge topic and spread over the tasks. What a
//! bundle leaves of a restriction (a checkpoint, a runner-initiated split)
//! comes back as residual work of the process stage's task.
use prost::Message;

use crate::codec::coder::{DOUBLE, KV};
use crate::pb;
use crate::urns;

/// The element paired with its restriction (and watermark-estimator state).
fn paired_coder(c: &mut pb::Components, element: &str, restriction: &str) -> String {
    let id = format!("sdf/paired/{element}/{restriction}");
    c.coders.entry(id.clone()).or_insert_with(|| coder(KV, vec![element.into(), restriction.into()]));
    id
}

/// The paired element with its size, as split-and-size emits it.
fn sized_coder(c: &mut pb::Components, paired: &str) -> String {
    let double = "sdf/double".to_string();
    c.coders.entry(double.clone()).or_insert_with(|| coder(DOUBLE, vec![]));
    let id = format!("sdf/sized/{paired}");
    c.coders.entry(id.clone()).or_insert_with(|| coder(KV, vec![paired.into(), double]));
    id
}

fn coder(urn: &str, parts: Vec<String>) -> pb::Coder {
    pb::Coder { spec: Some(pb::FunctionSpec { urn: urn.into(), payload: vec![] }), component_coder_ids: parts }
}

/// Whether `t` is a splittable ParDo leaf (not expanded yet).
fn is_splittable(t: &pb::PTransform) -> Option<pb::ParDoPayload> {
    let spec = t.spec.as_ref().filter(|s| s.urn == urns::PAR_DO)?;
    if !t.subtransforms.is_empty() {
        return None;
    }
    pb::ParDoPayload::decode(spec.payload.as_slice()).ok().filter(|p| !p.restriction_coder_id.is_empty())
}

/// Expands every splittable ParDo; returns how many were expanded. The
/// ParDo becomes a composite of the three steps, so names and metrics still
/// read as the user's transform.
pub fn expand_splittable(pipeline: &mut pb::Pipeline) -> usize {
    let Some(c) = pipeline.components.as_mut() else { return 0 };
    let mut ids: Vec<String> = c.transforms.iter().filter(|(_, t)| is_splittable(t).is_some()).map(|(id, _)| id.clone()).collect();
    ids.sort();
    ids.iter().filter(|id| expand_one(c, id).is_some()).count()
}

fn expand_one(c: &mut pb::Components, id: &str) -> Option<()> {
    let t = c.transforms.get(id)?.clone();
    let payload = is_splittable(&t)?;
    let main_tag = t.inputs.keys().find(|k| !payload.side_inputs.contains_key(*k))?.clone();
    let main = t.inputs[&main_tag].clone();
    let input = c.pcollections.get(&main)?.clone();
    let paired = paired_coder(c, &input.coder_id, &payload.restriction_coder_id);
    let sized = sized_coder(c, &paired);
    let pcoll = |suffix: &str, coder_id: &str| pb::PCollection {
        unique_name: format!("{}/{suffix}", input.unique_name),
        coder_id: coder_id.to_string(),
        ..input.clone()
    };
    let (paired_pc, sized_pc) = (format!("{id}/sdf/paired"), format!("{id}/sdf/sized"));
    c.pcollections.insert(paired_pc.clone(), pcoll("Paired", &paired));
    c.pcollections.insert(sized_pc.clone(), pcoll("Sized", &sized));
    // Pairing and splitting call only the restriction provider. Java's may
    // read side inputs (@GetInitialRestriction can take them), so there the
    // steps get them too; Python's and Go's never do, and a side input
    // would only gate their stage. State and finalization belong to the
    // process step, where the user's DoFn runs.
    let helpers_read_sides = restriction_methods_read_side_inputs(c, &t.environment_id);
    let helper_payload = pb::ParDoPayload {
        side_inputs: if helpers_read_sides { payload.side_inputs.clone() } else { Default::default() },
        state_specs: Default::default(),
        timer_family_specs: Default::default(),
        requests_finalization: false,
        ..payload.clone()
    }
    .encode_to_vec();
    let step = |name: &str, urn: &str, payload: Vec<u8>, inputs, output: &str| pb::PTransform {
        unique_name: format!("{}/{name}", t.unique_name),
        spec: Some(pb::FunctionSpec { urn: urn.into(), payload }),
        inputs,
        outputs: [("out".to_string(), output.to_string())].into(),
        environment_id: t.environment_id.clone(),
        ..Default::default()
    };
    // The ParDo's inputs with `pc` as the main one, with or without the
    // side inputs.
    let with_main = |pc: &str, sides: bool| {
        let mut inputs = if sides { t.inputs.clone() } else { Default::default() };
        inputs.insert(main_tag.clone(), pc.to_string());
        inputs
    };
    let pair_inputs = with_main(&main, helpers_read_sides);
    let pair = step("PairWithRestriction", urns::SDF_PAIR_WITH_RESTRICTION, helper_payload.clone(), pair_inputs, &paired_pc);
    let split_inputs = with_main(&paired_pc, helpers_read_sides);
    let split = step("SplitAndSizeRestrictions", urns::SDF_SPLIT_AND_SIZE, helper_payload, split_inputs, &sized_pc);
    let process_inputs = with_main(&sized_pc, true);
    let process = pb::PTransform {
        unique_name: format!("{}/Process", t.unique_name),
        spec: Some(pb::FunctionSpec { urn: urns::SDF_PROCESS.into(), payload: payload.encode_to_vec() }),
        inputs: process_inputs,
        outputs: t.outputs.clone(),
        environment_id: t.environment_id.clone(),
        ..Default::default()
    };
    let steps = [("PairWithRestriction", pair), ("SplitAndSizeRestrictions", split), ("Process", process)];
    let mut sub_ids = Vec::new();
    for (name, s) in steps {
        let sid = format!("{id}/sdf/{name}");
        c.transforms.insert(sid.clone(), s);
        sub_ids.push(sid);
    }
    c.transforms.get_mut(id)?.subtransforms = sub_ids;
    Some(())
}

/// Whether the SDK of `environment` lets restriction methods read side
/// inputs (Java's does).
fn restriction_methods_read_side_inputs(c: &pb::Components, environment: &str) -> bool {
    crate::plan::sdk_version::is_sdk(c, environment, "Java")
}

/// The descriptor a stage runs with while its job drains: each splittable
/// DoFn's restrictions pass through `TruncateSizedRestrictions` before they
/// are processed, so the SDK cuts them to what must still be done (by
/// default nothing of an unbounded one, all of a bounded one). Its data
/// sources keep their ids, so input and residuals go where they went.
/// `None` for a stage without splittable DoFns.
pub fn drain_descriptor(
    graph: &crate::plan::graph::PipelineGraph,
    descriptor: &beam_kafka_proto::fn_execution::ProcessBundleDescriptor,
    drain_id: &str,
) -> Option<beam_kafka_proto::fn_execution::ProcessBundleDescriptor> {
    let process: Vec<String> = descriptor
        .transforms
        .iter()
        .filter(|(_, t)| t.spec.as_ref().is_some_and(|s| s.urn == urns::SDF_PROCESS))
        .map(|(id, _)| id.clone())
        .collect();
    if process.is_empty() {
        return None;
    }
    let mut d = descriptor.clone();
    d.id = drain_id.to_string();
    for id in process {
        let t = d.transforms[&id].clone();
        let Some(main) = graph.main_inputs_of(&id).into_iter().next() else { continue };
        let Some(pc) = d.pcollections.get(&main).cloned() else { continue };
        let untruncated = format!("{main}/untruncated");
        d.pcollections.insert(untruncated.clone(), pb::PCollection { unique_name: format!("{}/Untruncated", pc.unique_name), ..pc });
        let source = crate::plan::descriptor::source_id(&main);
        if let Some(src) = d.transforms.get_mut(&source) {
            for out in src.outputs.values_mut() {
                *out = untruncated.clone();
            }
        }
        let mut inputs = t.inputs.clone();
        for v in inputs.values_mut().filter(|v| **v == main) {
            *v = untruncated.clone();
        }
        let truncate = pb::PTransform {
            unique_name: format!("{}/TruncateSizedRestrictions", t.unique_name.strip_suffix("/Process").unwrap_or(&t.unique_name)),
            spec: t.spec.as_ref().map(|s| pb::FunctionSpec { urn: urns::SDF_TRUNCATE.into(), payload: s.payload.clone() }),
            inputs,
            outputs: [("out".to_string(), main.clone())].into(),
            environment_id: t.environment_id.clone(),
            ..Default::default()
        };
        d.transforms.insert(format!("{id}/truncate"), truncate);
    }
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::graph::test_pipelines::Builder;
    use crate::plan::graph::PipelineGraph;
    use crate::urns::*;

    fn sdf_pipeline(side_input: bool) -> pb::Pipeline {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("read", PAR_DO, &["a"], &["b"], true).leaf("map", PAR_DO, &["b"], &["c"], true);
        if side_input {
            b.leaf("side", PAR_DO, &["a"], &["s"], true).side_input("read", "side0", "s");
        }
        let mut p = b.build();
        let c = p.components.as_mut().unwrap();
        c.coders.insert("restriction".into(), coder("beam:coder:pickled_python:v1", vec![]));
        let t = c.transforms.get_mut("read").unwrap();
        let mut payload = pb::ParDoPayload::decode(t.spec.as_ref().unwrap().payload.as_slice()).unwrap();
        payload.restriction_coder_id = "restriction".into();
        t.spec.as_mut().unwrap().payload = payload.encode_to_vec();
        p
    }

    #[test]
    fn a_splittable_pardo_becomes_pair_split_and_process() {
        let mut p = sdf_pipeline(false);
        assert_eq!(expand_splittable(&mut p), 1);
        let g = PipelineGraph::new(&p).unwrap();
        let urns: Vec<&str> = g.leaves.iter().map(|l| g.urn(l)).collect();
        assert_eq!(urns, [IMPULSE, SDF_PAIR_WITH_RESTRICTION, SDF_SPLIT_AND_SIZE, SDF_PROCESS, PAR_DO]);
        let c = p.components.as_ref().unwrap();
        let sized = &c.pcollections["read/sdf/sized"];
        let kv = &c.coders[&sized.coder_id];
        assert_eq!(kv.spec.as_ref().unwrap().urn, KV);
        let paired = &c.coders[&kv.component_coder_ids[0]];
        assert_eq!(paired.component_coder_ids, ["bytes", "restriction"]);
        assert_eq!(c.coders[&kv.component_coder_ids[1]].spec.as_ref().unwrap().urn, DOUBLE);
        let process = &c.transforms["read/sdf/Process"];
        assert_eq!(process.outputs.values().next().unwrap(), "b", "the process step writes the ParDo's outputs");
        assert!(crate::plan::validate::validate(&p).is_empty(), "{:?}", crate::plan::validate::validate(&p));
        // Expanding twice changes nothing.
        assert_eq!(expand_splittable(&mut p), 0);
    }

    #[test]
    fn a_draining_stage_truncates_restrictions_before_processing_them() {
        let mut p = sdf_pipeline(false);
        expand_splittable(&mut p);
        let g = PipelineGraph::new(&p).unwrap();
        let stages = crate::plan::fusion::fuse(&g);
        let process_stage = stages.iter().find(|s| s.transforms.iter().any(|t| g.urn(t) == SDF_PROCESS)).unwrap();
        assert_eq!(process_stage.inputs, ["read/sdf/sized"], "the process step starts a stage");
        let d = crate::plan::descriptor::build(&g, process_stage, "pbd", "data", "state");
        let drain = drain_descriptor(&g, &d, "pbd-drain").unwrap();
        assert_eq!(drain.id, "pbd-drain");
        let truncate = &drain.transforms["read/sdf/Process/truncate"];
        assert_eq!(truncate.spec.as_ref().unwrap().urn, SDF_TRUNCATE);
        assert_eq!(truncate.outputs.values().next().unwrap(), "read/sdf/sized");
        let source = &drain.transforms[&crate::plan::descriptor::source_id("read/sdf/sized")];
        assert_eq!(source.outputs.values().next(), truncate.inputs.values().next(), "the data source feeds the truncation");
        assert_eq!(drain.transforms["read/sdf/Process"].inputs, d.transforms["read/sdf/Process"].inputs);
        let first = stages.iter().find(|s| s.transforms.iter().any(|t| g.urn(t) == SDF_PAIR_WITH_RESTRICTION)).unwrap();
        assert!(drain_descriptor(&g, &crate::plan::descriptor::build(&g, first, "x", "d", "s"), "y").is_none());
    }

    #[test]
    fn the_process_stage_reads_spread_restrictions_and_knows_where_residuals_go() {
        let mut p = sdf_pipeline(false);
        expand_splittable(&mut p);
        let g = PipelineGraph::new(&p).unwrap();
        let plan = crate::plan::topology::TopologyPlan::plan(&g, "app", 4).unwrap();
        let lowered = crate::plan::lower::lower(&g, &plan, "job", "localhost:1").unwrap();
        let (process, descriptors) =
            lowered.iter().find(|(s, _)| !s.residual_sources.is_empty()).expect("a sub-topology runs the process step");
        let source = crate::plan::descriptor::source_id("read/sdf/sized");
        assert_eq!(process.residual_sources["read/sdf/Process"], source);
        assert_eq!(process.partitions, 4, "one task per edge partition");
        assert_eq!(descriptors.len(), 2, "its descriptor and its drain descriptor");
        assert_eq!(process.drain_descriptor_id.as_deref(), Some(descriptors[1].id.as_str()));
        // The SDK encodes residuals with the PCollection's coder: the wire
        // coder, whose pickled restriction is length-prefixed.
        let d = &descriptors[0];
        let sized = &d.pcollections["read/sdf/sized"];
        let port = beam_kafka_proto::fn_execution::RemoteGrpcPort::decode(d.transforms[&source].spec.as_ref().unwrap().payload.as_slice())
            .unwrap();
        assert_eq!(d.coders[&port.coder_id].component_coder_ids[0], sized.coder_id);
        let (upstream, _) = lowered.iter().find(|(s, _)| s.residual_sources.is_empty() && !s.outputs.is_empty()).unwrap();
        assert!(upstream.outputs.iter().all(|o| o.spread), "split restrictions spread over the partitions");
    }

    #[test]
    fn pythons_restriction_steps_get_no_side_inputs() {
        let mut p = sdf_pipeline(true);
        assert_eq!(expand_splittable(&mut p), 1);
        let c = p.components.as_ref().unwrap();
        let pair = &c.transforms["read/sdf/PairWithRestriction"];
        assert_eq!(pair.inputs.len(), 1);
        let payload = pb::ParDoPayload::decode(pair.spec.as_ref().unwrap().payload.as_slice()).unwrap();
        assert!(payload.side_inputs.is_empty());
        assert_eq!(c.transforms["read/sdf/Process"].inputs["side0"], "s");
        let g = PipelineGraph::new(&p).unwrap();
        assert!(crate::plan::topology::TopologyPlan::plan(&g, "app", 2).is_ok());
    }

    #[test]
    fn javas_restriction_steps_read_the_side_inputs_and_pairing_and_splitting_share_a_stage() {
        let mut p = sdf_pipeline(true);
        let c = p.components.as_mut().unwrap();
        c.environments.get_mut("py").unwrap().capabilities.push("beam:version:sdk_base:apache/beam_java17_sdk:2.73.0".into());
        // The side input comes from elsewhere than the main input (else the
        // two would share a stage: a side input the stage itself produces).
        c.transforms.get_mut("side").unwrap().inputs = [("in".to_string(), "a2".to_string())].into();
        c.pcollections.insert("a2".into(), c.pcollections["a"].clone());
        c.transforms.insert(
            "impulse2".into(),
            pb::PTransform {
                unique_name: "impulse2".into(),
                spec: Some(pb::FunctionSpec { urn: IMPULSE.into(), payload: vec![] }),
                outputs: [("out".to_string(), "a2".to_string())].into(),
                ..Default::default()
            },
        );
        p.root_transform_ids.push("impulse2".into());
        assert_eq!(expand_splittable(&mut p), 1);
        let c = p.components.as_ref().unwrap();
        for step in ["PairWithRestriction", "SplitAndSizeRestrictions", "Process"] {
            let t = &c.transforms[&format!("read/sdf/{step}")];
            assert_eq!((t.inputs.len(), t.inputs["side0"].as_str()), (2, "s"), "{step}");
            let payload = pb::ParDoPayload::decode(t.spec.as_ref().unwrap().payload.as_slice()).unwrap();
            assert!(payload.side_inputs.contains_key("side0"), "{step}");
        }
        let g = PipelineGraph::new(&p).unwrap();
        let stages = crate::plan::fusion::fuse(&g);
        let pair = stages.iter().find(|s| s.transforms.iter().any(|t| t == "read/sdf/PairWithRestriction")).unwrap();
        assert!(pair.transforms.iter().any(|t| t == "read/sdf/SplitAndSizeRestrictions"), "{:?}", pair.transforms);
        assert_eq!(pair.side_inputs.len(), 2, "both steps' side inputs are served");
        let plan = crate::plan::topology::TopologyPlan::plan(&g, "app", 2);
        assert!(plan.is_ok(), "{:?}", plan.err());
    }
}
