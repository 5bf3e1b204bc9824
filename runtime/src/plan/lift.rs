//! Combiner lifting: a CombinePerKey the client did not lift (Python does not
//! in streaming) becomes precombine → GroupByKey → merge accumulators →
//! extract outputs, so values are combined before the shuffle instead of
//! every value crossing Kafka.
use prost::Message;

use crate::codec::coder::{ITERABLE, KV};
use crate::pb;
use crate::urns;

const COMBINE_PER_KEY: &str = "beam:transform:combine_per_key:v1";

/// Triggers that see every element must not be lifted (Beam's rule): the
/// GroupByKey asks triggers after each element (`gbk::add_batch`), so only
/// those that never fire on elements are compatible.
fn liftable_trigger(t: &Option<pb::Trigger>) -> bool {
    use pb::trigger::Trigger as T;
    match t.as_ref().and_then(|t| t.trigger.as_ref()) {
        None | Some(T::Default(_)) | Some(T::Never(_)) => true,
        Some(T::AfterEndOfWindow(a)) => {
            liftable_trigger(&a.early_firings.as_deref().cloned()) && liftable_trigger(&a.late_firings.as_deref().cloned())
        }
        _ => false,
    }
}

/// Lifts every CombinePerKey that can be; returns how many were lifted.
pub fn lift_combiners(pipeline: &mut pb::Pipeline) -> usize {
    let Some(components) = pipeline.components.as_mut() else { return 0 };
    let candidates: Vec<String> = components
        .transforms
        .iter()
        .filter(|(_, t)| t.spec.as_ref().is_some_and(|s| s.urn == COMBINE_PER_KEY))
        .filter(|(_, t)| {
            !t.subtransforms.iter().any(|s| {
                components.transforms.get(s).and_then(|x| x.spec.as_ref()).is_some_and(|x| x.urn == urns::COMBINE_PER_KEY_PRECOMBINE)
            })
        })
        .map(|(id, _)| id.clone())
        .collect();
    let mut lifted = 0;
    for id in candidates {
        if lift_one(components, &id).is_some() {
            lifted += 1;
        }
    }
    lifted
}

fn lift_one(c: &mut pb::Components, id: &str) -> Option<()> {
    let t = c.transforms.get(id)?.clone();
    let payload = pb::CombinePayload::decode(t.spec.as_ref()?.payload.as_slice()).ok()?;
    if t.inputs.len() != 1 || t.outputs.len() != 1 || t.environment_id.is_empty() && env_of(c, &t).is_none() {
        return None;
    }
    let input_id = t.inputs.values().next()?.clone();
    let output_id = t.outputs.values().next()?.clone();
    let input = c.pcollections.get(&input_id)?.clone();
    let ws = c.windowing_strategies.get(&input.windowing_strategy_id)?;
    // An accumulator carries one timestamp (its elements' earliest or
    // latest): elements behind the watermark would then move a pane's
    // output timestamp, which only END_OF_WINDOW is immune to.
    let end_of_window = !matches!(
        pb::output_time::Enum::try_from(ws.output_time),
        Ok(pb::output_time::Enum::EarliestInPane | pb::output_time::Enum::LatestInPane)
    );
    if !liftable_trigger(&ws.trigger) || !end_of_window {
        return None;
    }
    let kv = c.coders.get(&input.coder_id)?;
    if kv.spec.as_ref()?.urn != KV || kv.component_coder_ids.len() != 2 {
        return None;
    }
    let key_coder = kv.component_coder_ids[0].clone();
    let acc = payload.accumulator_coder_id.clone();
    if !c.coders.contains_key(&acc) {
        return None;
    }
    let env = if t.environment_id.is_empty() { env_of(c, &t)? } else { t.environment_id.clone() };
    let coder = |urn: &str, parts: Vec<String>| pb::Coder {
        spec: Some(pb::FunctionSpec { urn: urn.into(), payload: vec![] }),
        component_coder_ids: parts,
    };
    let kv_acc = format!("{id}/lifted/kv_acc");
    let iter_acc = format!("{id}/lifted/iter_acc");
    let kv_iter_acc = format!("{id}/lifted/kv_iter_acc");
    c.coders.insert(kv_acc.clone(), coder(KV, vec![key_coder.clone(), acc.clone()]));
    c.coders.insert(iter_acc.clone(), coder(ITERABLE, vec![acc]));
    c.coders.insert(kv_iter_acc.clone(), coder(KV, vec![key_coder, iter_acc]));
    let pcoll = |name: &str, coder_id: &str| pb::PCollection {
        unique_name: format!("{}/{name}", t.unique_name),
        coder_id: coder_id.to_string(),
        ..input.clone()
    };
    let (pre_out, gbk_out, merge_out) = (format!("{id}/lifted/precombined"), format!("{id}/lifted/grouped"), format!("{id}/lifted/merged"));
    c.pcollections.insert(pre_out.clone(), pcoll("Precombine.out", &kv_acc));
    c.pcollections.insert(gbk_out.clone(), pcoll("Group.out", &kv_iter_acc));
    c.pcollections.insert(merge_out.clone(), pcoll("Merge.out", &kv_acc));
    let combine_spec = |urn: &str| Some(pb::FunctionSpec { urn: urn.into(), payload: payload.encode_to_vec() });
    let step = |name: &str, spec, from: &str, to: &str, env: &str| pb::PTransform {
        unique_name: format!("{}/{name}", t.unique_name),
        spec,
        inputs: [("input".to_string(), from.to_string())].into(),
        outputs: [("output".to_string(), to.to_string())].into(),
        environment_id: env.to_string(),
        ..Default::default()
    };
    let steps = [
        (format!("{id}/lifted/Precombine"), step("Precombine", combine_spec(urns::COMBINE_PER_KEY_PRECOMBINE), &input_id, &pre_out, &env)),
        (
            format!("{id}/lifted/Group"),
            step("Group", Some(pb::FunctionSpec { urn: urns::GROUP_BY_KEY.into(), payload: vec![] }), &pre_out, &gbk_out, ""),
        ),
        (format!("{id}/lifted/Merge"), step("Merge", combine_spec(urns::COMBINE_PER_KEY_MERGE_ACCUMULATORS), &gbk_out, &merge_out, &env)),
        (
            format!("{id}/lifted/ExtractOutputs"),
            step("ExtractOutputs", combine_spec(urns::COMBINE_PER_KEY_EXTRACT_OUTPUTS), &merge_out, &output_id, &env),
        ),
    ];
    let ids: Vec<String> = steps.iter().map(|(sid, _)| sid.clone()).collect();
    for (sid, s) in steps {
        c.transforms.insert(sid, s);
    }
    c.transforms.get_mut(id)?.subtransforms = ids;
    Some(())
}

/// The environment of the first SDK-executed leaf under a composite (in
/// depth-first order), each transform visited once: a composite that
/// contains itself (Prepare refuses those first) cannot loop it.
fn env_of(c: &pb::Components, t: &pb::PTransform) -> Option<String> {
    let mut stack: Vec<&String> = t.subtransforms.iter().rev().collect();
    let mut seen = std::collections::HashSet::new();
    while let Some(s) = stack.pop() {
        if !seen.insert(s) {
            continue;
        }
        let sub = c.transforms.get(s)?;
        if !sub.environment_id.is_empty() {
            return Some(sub.environment_id.clone());
        }
        stack.extend(sub.subtransforms.iter().rev());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::graph::test_pipelines::Builder;
    use crate::plan::graph::PipelineGraph;
    use crate::urns::*;

    fn combine_pipeline(trigger: Option<pb::trigger::Trigger>) -> pb::Pipeline {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false)
            .leaf("pair", PAR_DO, &["a"], &["kv"], true)
            .leaf("gbk", GROUP_BY_KEY, &["kv"], &["grouped"], false)
            .leaf("combine_values", PAR_DO, &["grouped"], &["out"], true);
        let mut p = b.build();
        let c = p.components.as_mut().unwrap();
        let coder = |urn: &str, parts: &[&str]| pb::Coder {
            spec: Some(pb::FunctionSpec { urn: urn.into(), payload: vec![] }),
            component_coder_ids: parts.iter().map(|s| s.to_string()).collect(),
        };
        c.coders.insert("kvc".into(), coder(KV, &["bytes", "bytes"]));
        c.coders.insert("acc".into(), coder("beam:coder:varint:v1", &[]));
        c.pcollections.get_mut("kv").unwrap().coder_id = "kvc".into();
        c.windowing_strategies.get_mut("global").unwrap().trigger = trigger.map(|t| pb::Trigger { trigger: Some(t) });
        let payload = pb::CombinePayload { combine_fn: None, accumulator_coder_id: "acc".into() };
        c.transforms.insert(
            "combine".into(),
            pb::PTransform {
                unique_name: "Sum".into(),
                spec: Some(pb::FunctionSpec { urn: COMBINE_PER_KEY.into(), payload: payload.encode_to_vec() }),
                subtransforms: vec!["gbk".into(), "combine_values".into()],
                inputs: [("in".to_string(), "kv".to_string())].into(),
                outputs: [("out".to_string(), "out".to_string())].into(),
                ..Default::default()
            },
        );
        p.root_transform_ids = vec!["impulse".into(), "pair".into(), "combine".into()];
        p
    }

    #[test]
    fn an_unlifted_combine_becomes_precombine_group_merge_extract() {
        let mut p = combine_pipeline(None);
        assert_eq!(lift_combiners(&mut p), 1);
        let g = PipelineGraph::new(&p).unwrap();
        let urns: Vec<&str> = g.leaves.iter().map(|l| g.urn(l)).collect();
        assert_eq!(
            urns,
            [
                IMPULSE,
                PAR_DO,
                COMBINE_PER_KEY_PRECOMBINE,
                GROUP_BY_KEY,
                COMBINE_PER_KEY_MERGE_ACCUMULATORS,
                COMBINE_PER_KEY_EXTRACT_OUTPUTS
            ]
        );
        let c = p.components.as_ref().unwrap();
        let pre = &c.transforms["combine/lifted/Precombine"];
        assert_eq!(pre.environment_id, "py", "found from the composite's leaves");
        assert_eq!(c.coders["combine/lifted/kv_acc"].component_coder_ids, ["bytes", "acc"]);
        assert_eq!(c.transforms["combine/lifted/ExtractOutputs"].outputs.values().next().unwrap(), "out");
        assert!(crate::plan::validate::validate(&p).is_empty(), "{:?}", crate::plan::validate::validate(&p));
        // Lifting twice changes nothing.
        assert_eq!(lift_combiners(&mut p), 0);
    }

    #[test]
    fn triggers_that_count_elements_are_not_lifted() {
        let count = pb::Trigger { trigger: Some(pb::trigger::Trigger::ElementCount(pb::trigger::ElementCount { element_count: 2 })) };
        let mut p =
            combine_pipeline(Some(pb::trigger::Trigger::Repeat(Box::new(pb::trigger::Repeat { subtrigger: Some(Box::new(count)) }))));
        assert_eq!(lift_combiners(&mut p), 0);
    }
}
