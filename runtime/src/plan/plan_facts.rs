//! What decides how stored bytes are read, said so that two versions of a
//! pipeline can be compared: coders by structure (their ids are numbered
//! by the SDK), windowing strategies by what they do, and the state each
//! stateful transform keeps. Pickled user code is left out (a DoFn whose
//! code changed reads its state as before); a coder's payload (a custom
//! or pickled coder, a row's schema) is kept as a fingerprint, so a
//! changed one counts as changed.
use prost::Message;

use crate::pb;
use crate::plan::graph::PipelineGraph;
use crate::plan::topology::{InputKind, TopologyPlan};

/// A coder as its structure: `urn(component, …)`, with a fingerprint of
/// its payload when it has one.
pub fn coder(c: &pb::Components, id: &str) -> String {
    coder_at(c, id, 0)
}

fn coder_at(c: &pb::Components, id: &str, depth: usize) -> String {
    let Some(coder) = c.coders.get(id) else { return format!("missing coder {id}") };
    let Some(spec) = coder.spec.as_ref() else { return "coder without a spec".into() };
    let mut out = spec.urn.trim_start_matches("beam:coder:").to_string();
    // A payload (a row's schema, a pickled Python or serialized Java coder)
    // is part of what the coder reads.
    if !spec.payload.is_empty() {
        out.push_str(&format!("#{:016x}", fingerprint(&spec.payload)));
    }
    if !coder.component_coder_ids.is_empty() && depth < 32 {
        let parts: Vec<String> = coder.component_coder_ids.iter().map(|p| coder_at(c, p, depth + 1)).collect();
        out.push_str(&format!("({})", parts.join(", ")));
    }
    out
}

/// FNV-1a: stable across builds and platforms, unlike std's hasher.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// A windowing strategy as what it does to elements and panes.
pub fn windowing(c: &pb::Components, id: &str) -> String {
    let Some(ws) = c.windowing_strategies.get(id) else { return format!("missing windowing strategy {id}") };
    let window_fn = ws.window_fn.as_ref().map_or("none".to_string(), |f| format!("{}#{:016x}", f.urn, fingerprint(&f.payload)));
    let trigger = ws.trigger.as_ref().map_or("default".to_string(), |t| format!("#{:016x}", fingerprint(&t.encode_to_vec())));
    format!(
        "windows {window_fn} coded {}, trigger {trigger}, accumulation {}, allowed lateness {} ms, output time {}, closing {}",
        coder(c, &ws.window_coder_id),
        ws.accumulation_mode,
        ws.allowed_lateness,
        ws.output_time,
        ws.closing_behavior
    )
}

fn pcollection_coder(graph: &PipelineGraph, pc: &str) -> String {
    let c = graph.components();
    c.pcollections.get(pc).map_or(format!("missing PCollection {pc}"), |p| coder(c, &p.coder_id))
}

fn pcollection_windowing(graph: &PipelineGraph, pc: &str) -> String {
    let c = graph.components();
    c.pcollections.get(pc).map_or(format!("missing PCollection {pc}"), |p| windowing(c, &p.windowing_strategy_id))
}

/// A user state cell's kind and coders.
fn state_spec(c: &pb::Components, spec: &pb::StateSpec) -> String {
    use pb::state_spec::Spec;
    match &spec.spec {
        Some(Spec::ReadModifyWriteSpec(s)) => format!("value of {}", coder(c, &s.coder_id)),
        Some(Spec::BagSpec(s)) => format!("bag of {}", coder(c, &s.element_coder_id)),
        Some(Spec::CombiningSpec(s)) => format!("combining into {}", coder(c, &s.accumulator_coder_id)),
        Some(Spec::MapSpec(s)) => format!("map of {} to {}", coder(c, &s.key_coder_id), coder(c, &s.value_coder_id)),
        Some(Spec::SetSpec(s)) => format!("set of {}", coder(c, &s.element_coder_id)),
        Some(Spec::OrderedListSpec(s)) => format!("ordered list of {}", coder(c, &s.element_coder_id)),
        Some(Spec::MultimapSpec(s)) => format!("multimap of {} to {}", coder(c, &s.key_coder_id), coder(c, &s.value_coder_id)),
        None => spec.protocol.as_ref().map_or("unknown".into(), |p| p.urn.clone()),
    }
}

/// One line per stateful transform of the plan: where its state lives
/// (which sub-topology's changelog) and what decides how it is read.
pub fn state_lines(graph: &PipelineGraph, plan: &TopologyPlan) -> Vec<String> {
    let c = graph.components();
    let mut out = Vec::new();
    for s in &plan.sub_topologies {
        for i in &s.inputs {
            if let InputKind::GroupByKey { transform } = &i.kind {
                let input = &plan.topics[i.topic].pcollection;
                out.push(format!(
                    "state {}: GroupByKey in sub-topology {}; input {}; {}",
                    one_line(transform),
                    s.id,
                    pcollection_coder(graph, input),
                    pcollection_windowing(graph, input)
                ));
            }
        }
        for t in s.stage.transforms.iter().filter(|t| graph.is_stateful(t)) {
            let Some(spec) = graph.transform(t).spec.as_ref() else { continue };
            let Ok(payload) = pb::ParDoPayload::decode(spec.payload.as_slice()) else { continue };
            let main = graph.main_inputs_of(t).into_iter().next().unwrap_or_default();
            let mut cells: Vec<String> =
                payload.state_specs.iter().map(|(id, spec)| format!("state {id}: {}", state_spec(c, spec))).collect();
            cells.extend(
                payload
                    .timer_family_specs
                    .iter()
                    .map(|(id, spec)| format!("timers {id}: domain {} coded {}", spec.time_domain, coder(c, &spec.timer_family_coder_id))),
            );
            cells.sort();
            out.push(format!(
                "state {}: user state in sub-topology {}; input {}; {}; {}",
                one_line(t),
                s.id,
                pcollection_coder(graph, &main),
                pcollection_windowing(graph, &main),
                cells.join("; ")
            ));
        }
    }
    out
}

/// An id as it goes on a manifest's line (a line break in a unique name
/// would split it).
pub fn one_line(id: &str) -> String {
    id.replace('\n', "\\n")
}

/// The coder of what a runner topic carries.
pub fn topic_coder(graph: &PipelineGraph, pcollection: &str) -> String {
    pcollection_coder(graph, pcollection)
}
