//! Builds the `ProcessBundleDescriptor` of a stage: its transforms plus a data
//! source per input and a data sink per output, with every PCollection, coder,
//! windowing strategy and environment they refer to.
use std::collections::HashMap;

use beam_kafka_proto::fn_execution as fn_pb;
use prost::Message;

use crate::pb;
use crate::plan::fusion::Stage;
use crate::plan::graph::PipelineGraph;
use crate::urns;

/// Transform id of the data source feeding `pcollection` into a stage.
pub fn source_id(pcollection: &str) -> String {
    format!("source/{pcollection}")
}

/// Transform id of the data sink taking `pcollection` out of a stage.
pub fn sink_id(pcollection: &str) -> String {
    format!("sink/{pcollection}")
}

fn add_coder(components: &pb::Components, coders: &mut HashMap<String, pb::Coder>, id: &str) {
    if coders.contains_key(id) {
        return;
    }
    if let Some(c) = components.coders.get(id) {
        coders.insert(id.to_string(), c.clone());
        for comp in &c.component_coder_ids {
            add_coder(components, coders, comp);
        }
    }
}

/// The coder used on the wire for `pcollection`: a windowed value of its
/// element coder (or `element_coder`, for a recoding stage's input) and its
/// window coder. Returns the new coder's id.
fn wire_coder(
    components: &pb::Components,
    coders: &mut HashMap<String, pb::Coder>,
    pcollection: &str,
    element_coder: Option<&str>,
) -> String {
    let pc = &components.pcollections[pcollection];
    // Parts the runner cannot read travel length-prefixed (see coder::wire_coders).
    let mut scratch = pb::Components { coders: components.coders.clone(), ..Default::default() };
    let element = crate::codec::coder::length_prefixed(&mut scratch, element_coder.unwrap_or(&pc.coder_id));
    add_coder(&scratch, coders, &element);
    let window_coder =
        components.windowing_strategies.get(&pc.windowing_strategy_id).map(|w| w.window_coder_id.clone()).unwrap_or_default();
    // Windows of custom WindowFns (coders the runner cannot read) travel
    // length-prefixed, so the runner can split values and keep the windows.
    let window_coder = crate::codec::coder::length_prefixed(&mut scratch, &window_coder);
    add_coder(&scratch, coders, &window_coder);
    let id = match element_coder {
        None => format!("wire/{pcollection}"),
        Some(_) => format!("wire-in/{pcollection}"),
    };
    coders.insert(
        id.clone(),
        pb::Coder {
            spec: Some(pb::FunctionSpec { urn: urns::CODER_WINDOWED_VALUE.into(), payload: vec![] }),
            component_coder_ids: vec![element, window_coder],
        },
    );
    id
}

/// Builds the descriptor; `data_url` and `state_url` are the runner's Fn API endpoints.
pub fn build(graph: &PipelineGraph, stage: &Stage, descriptor_id: &str, data_url: &str, state_url: &str) -> fn_pb::ProcessBundleDescriptor {
    let components = graph.components();
    let mut d = fn_pb::ProcessBundleDescriptor { id: descriptor_id.to_string(), ..Default::default() };
    let mut pcollections: Vec<String> = Vec::new();
    for id in &stage.transforms {
        let mut t = graph.transform(id).clone();
        // Point inputs past skipped identity leaves at the real PCollections.
        let traced = graph.inputs_of(id);
        for (slot, pc) in t.inputs.values_mut().zip(traced) {
            *slot = pc;
        }
        t.subtransforms.clear();
        pcollections.extend(t.inputs.values().cloned());
        pcollections.extend(t.outputs.values().cloned());
        d.transforms.insert(id.clone(), t);
    }
    let endpoint = |url: &str| pb::ApiServiceDescriptor { url: url.to_string(), ..Default::default() };
    let mut coders = HashMap::new();
    // A data channel endpoint: a source feeding `pc` into the stage, or a sink taking it out.
    let mut channel = |id: String, urn: &str, pc: &String, is_source: bool| {
        let recoded = stage.input_coders.iter().find(|(p, _)| p == pc && is_source).map(|(_, c)| c.as_str());
        let coder_id = wire_coder(components, &mut coders, pc, recoded);
        let port = fn_pb::RemoteGrpcPort { api_service_descriptor: Some(endpoint(data_url)), coder_id };
        let ends: HashMap<String, String> = [(if is_source { "out" } else { "in" }.to_string(), pc.clone())].into();
        let (inputs, outputs) = if is_source { (HashMap::new(), ends) } else { (ends, HashMap::new()) };
        let t = pb::PTransform {
            unique_name: id.clone(),
            spec: Some(pb::FunctionSpec { urn: urn.into(), payload: port.encode_to_vec() }),
            inputs,
            outputs,
            ..Default::default()
        };
        d.transforms.insert(id, t);
    };
    // A stage without transforms (a TestStream recoder, a side-input relay)
    // still names what its channels carry: Java's harness looks each up.
    pcollections.extend(stage.inputs.iter().chain(&stage.outputs).cloned());
    for pc in &stage.inputs {
        channel(source_id(pc), urns::DATA_INPUT, pc, true);
    }
    for pc in &stage.outputs {
        channel(sink_id(pc), urns::DATA_OUTPUT, pc, false);
    }
    pcollections.sort();
    pcollections.dedup();
    for pc_id in pcollections {
        let Some(pc) = components.pcollections.get(&pc_id) else { continue };
        add_coder(components, &mut coders, &pc.coder_id);
        if let Some(ws) = components.windowing_strategies.get(&pc.windowing_strategy_id) {
            add_coder(components, &mut coders, &ws.window_coder_id);
            d.windowing_strategies.insert(pc.windowing_strategy_id.clone(), ws.clone());
        }
        d.pcollections.insert(pc_id, pc.clone());
    }
    // Side inputs are served as the producing stage wrote them: with the
    // element coder the runner reads (unreadable parts length-prefixed).
    for si in &stage.side_inputs {
        let Some(pc) = d.pcollections.get_mut(&si.pcollection) else { continue };
        let mut scratch = pb::Components { coders: components.coders.clone(), ..Default::default() };
        let element = crate::codec::coder::length_prefixed(&mut scratch, &pc.coder_id);
        add_coder(&scratch, &mut coders, &element);
        pc.coder_id = element;
    }
    // A splittable DoFn's process step encodes the residuals it returns with
    // its input's coder: give it the wire coder the runner reads and sends,
    // so a residual goes back to the data source as it came.
    for id in stage.transforms.iter().filter(|id| graph.urn(id) == urns::SDF_PROCESS) {
        let Some(main) = graph.main_inputs_of(id).into_iter().next() else { continue };
        let Some(pc) = d.pcollections.get_mut(&main) else { continue };
        let mut scratch = pb::Components { coders: components.coders.clone(), ..Default::default() };
        let element = crate::codec::coder::length_prefixed(&mut scratch, &pc.coder_id);
        add_coder(&scratch, &mut coders, &element);
        pc.coder_id = element;
    }
    // Java's and Python's harnesses read a PCollection coder that is a
    // windowed_value coder as the coder of the windowed value, not of the
    // element: a PCollection whose elements are windowed values (Java's
    // Create.windowedValues, a metadata-preserving Reshuffle) is described
    // wrapped once more, as it travels.
    for pc in d.pcollections.values_mut() {
        let windowed = coders.get(&pc.coder_id).and_then(|c| c.spec.as_ref()).is_some_and(|s| s.urn == urns::CODER_WINDOWED_VALUE);
        let Some(ws) = components.windowing_strategies.get(&pc.windowing_strategy_id).filter(|_| windowed) else { continue };
        let id = format!("{}/as-element", pc.coder_id);
        let wrapped = pb::Coder {
            spec: Some(pb::FunctionSpec { urn: urns::CODER_WINDOWED_VALUE.into(), payload: vec![] }),
            component_coder_ids: vec![pc.coder_id.clone(), ws.window_coder_id.clone()],
        };
        coders.insert(id.clone(), wrapped);
        pc.coder_id = id;
    }
    // Map and multimap values the runner counts (see multimap_state).
    let mut scratch = pb::Components { coders: components.coders.clone(), ..Default::default() };
    for id in &stage.transforms {
        let Some(spec) = d.transforms.get_mut(id).and_then(|t| t.spec.as_mut()).filter(|s| s.urn == urns::PAR_DO) else { continue };
        let Ok(mut payload) = pb::ParDoPayload::decode(spec.payload.as_slice()) else { continue };
        if crate::state::multimap_state::length_prefix_values(&mut payload, &mut scratch) {
            for spec in payload.state_specs.values().filter_map(|s| s.spec.as_ref()) {
                if let pb::state_spec::Spec::MultimapSpec(pb::MultimapStateSpec { value_coder_id, .. })
                | pb::state_spec::Spec::MapSpec(pb::MapStateSpec { value_coder_id, .. }) = spec
                {
                    add_coder(&scratch, &mut coders, value_coder_id);
                }
            }
            spec.payload = payload.encode_to_vec();
        }
    }
    // Timers travel with keys the runner can split (length-prefixed where
    // their coder is not one it reads), as for data.
    let mut has_timers = false;
    for id in &stage.transforms {
        let Some(t) = d.transforms.get_mut(id) else { continue };
        let Some(spec) = t.spec.as_mut().filter(|s| s.urn == urns::PAR_DO) else { continue };
        let Ok(mut payload) = pb::ParDoPayload::decode(spec.payload.as_slice()) else { continue };
        if payload.timer_family_specs.is_empty() {
            continue;
        }
        has_timers = true;
        for (family, tf) in payload.timer_family_specs.iter_mut() {
            let Some(timer) = components.coders.get(&tf.timer_family_coder_id) else { continue };
            let mut scratch = pb::Components { coders: components.coders.clone(), ..Default::default() };
            // Timer<key> is (key, window): both as the runner reads them.
            let mut parts = timer.component_coder_ids.clone();
            for part in parts.iter_mut().take(2) {
                *part = crate::codec::coder::length_prefixed(&mut scratch, part);
                add_coder(&scratch, &mut coders, part);
            }
            let new_id = format!("timer/{id}/{family}");
            coders.insert(new_id.clone(), pb::Coder { spec: timer.spec.clone(), component_coder_ids: parts });
            tf.timer_family_coder_id = new_id;
        }
        spec.payload = payload.encode_to_vec();
    }
    if has_timers {
        d.timer_api_service_descriptor = Some(endpoint(data_url));
    }
    // Coders referenced from payloads (e.g. a ParDo's) may be needed too: carry all.
    for id in components.coders.keys() {
        add_coder(components, &mut coders, id);
    }
    d.coders = coders;
    if let Some(env) = components.environments.get(&stage.environment_id) {
        d.environments.insert(stage.environment_id.clone(), env.clone());
    }
    d.state_api_service_descriptor = Some(endpoint(state_url));
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fusion::fuse;
    use crate::plan::graph::test_pipelines::Builder;
    use crate::urns::*;

    #[test]
    fn the_descriptor_wires_sources_and_sinks_with_wire_coders() {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("map", PAR_DO, &["a"], &["b"], true).leaf(
            "gbk",
            GROUP_BY_KEY,
            &["b"],
            &["c"],
            false,
        );
        let p = b.build();
        let g = PipelineGraph::new(&p).unwrap();
        let stage = &fuse(&g)[0];
        let d = build(&g, stage, "pbd-1", "localhost:1", "localhost:2");
        assert_eq!(d.id, "pbd-1");
        let src = &d.transforms[&source_id("a")];
        assert_eq!(src.spec.as_ref().unwrap().urn, DATA_INPUT);
        let port = fn_pb::RemoteGrpcPort::decode(src.spec.as_ref().unwrap().payload.as_slice()).unwrap();
        assert_eq!(port.api_service_descriptor.unwrap().url, "localhost:1");
        let wire = &d.coders[&port.coder_id];
        assert_eq!(wire.spec.as_ref().unwrap().urn, CODER_WINDOWED_VALUE);
        assert_eq!(wire.component_coder_ids, ["bytes", "gw"]);
        assert!(d.transforms.contains_key(&sink_id("b")));
        assert!(d.transforms.contains_key("map"));
        assert!(!d.transforms.contains_key("gbk"));
        assert!(d.pcollections.contains_key("a") && d.pcollections.contains_key("b"));
        assert!(d.windowing_strategies.contains_key("global"));
        assert!(d.environments.contains_key("py"));
        assert_eq!(d.state_api_service_descriptor.unwrap().url, "localhost:2");
    }

    #[test]
    fn a_stage_without_transforms_still_describes_what_its_channels_carry() {
        // A relay (TestStream recoder, side-input copy): source → sink of one
        // PCollection. Java's harness looks the PCollection up by id.
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false);
        let p = b.build();
        let g = PipelineGraph::new(&p).unwrap();
        let stage = Stage {
            id: "relay-0".into(),
            environment_id: "py".into(),
            transforms: vec![],
            inputs: vec!["a".into()],
            outputs: vec!["a".into()],
            side_inputs: vec![],
            input_coders: vec![],
        };
        let d = build(&g, &stage, "pbd-2", "localhost:1", "localhost:2");
        assert!(d.transforms.contains_key(&source_id("a")) && d.transforms.contains_key(&sink_id("a")));
        let pc = &d.pcollections["a"];
        assert!(d.coders.contains_key(&pc.coder_id) && d.windowing_strategies.contains_key(&pc.windowing_strategy_id));
    }

    #[test]
    fn a_pcollection_of_windowed_values_is_described_wrapped_once_more() {
        // Java's Create.windowedValues and a metadata-preserving Reshuffle:
        // the PCollection's own coder is windowed_value(bytes, gw).
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("map", PAR_DO, &["a"], &["b"], true);
        let comps = b.p.components.as_mut().unwrap();
        let spec = Some(pb::FunctionSpec { urn: CODER_WINDOWED_VALUE.into(), payload: vec![] });
        comps.coders.insert("wv".into(), pb::Coder { spec, component_coder_ids: vec!["bytes".into(), "gw".into()] });
        comps.pcollections.get_mut("b").unwrap().coder_id = "wv".into();
        let p = b.build();
        let g = PipelineGraph::new(&p).unwrap();
        let stage = &fuse(&g)[0];
        let d = build(&g, stage, "pbd-3", "localhost:1", "localhost:2");
        let described = &d.coders[&d.pcollections["b"].coder_id];
        assert_eq!(described.spec.as_ref().unwrap().urn, CODER_WINDOWED_VALUE);
        assert_eq!(described.component_coder_ids, ["wv", "gw"]);
        assert!(d.coders.contains_key("wv") && d.coders.contains_key("gw"));
        // Plain element coders are left as they are.
        assert_eq!(d.pcollections["a"].coder_id, "bytes");
    }
}
