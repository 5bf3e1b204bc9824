//! Lowering a topology plan to what a job runs (`crate::plan::spec`): for each
//! sub-topology, its process bundle descriptor and the specs of its inputs,
//! side inputs, outputs, sinks and timers, with the wire coders the runner
//! reads them with. Pure: the job server registers the descriptors and hands
//! the specs to the actors.
use std::sync::Arc;

use beam_kafka_proto::fn_execution::ProcessBundleDescriptor;
use beam_kafka_proto::pipeline::{Components, ParDoPayload, Schema};
use prost::Message;

use crate::codec::coder::{wire_coders, Coder};
use crate::kafka::sink::SinkCodec;
use crate::kafka::source::ElementEncoder;
use crate::plan::descriptor;
use crate::plan::graph::PipelineGraph;
use crate::plan::spec::{
    InputSpec, KafkaSinkSpec, OutputSink, SideInputSpec, SideMapping, SourceInput, SubTopologySpec, TimerFamilySpec, WindowFnDescriptors,
};
use crate::plan::topology::{InputKind, TopologyPlan};
use crate::plan::validate::{read_spec, write_spec};
use crate::state::side_input::{Access, SideWindowing};
use crate::state::timers::{TimeDomain, TimerCodec};
use crate::window::window_fns;
use crate::window::windowing::WindowingSpec;

/// The pipeline's TestStreams, if it has any, ready to replay.
pub fn test_stream_run(graph: &PipelineGraph, plan: &TopologyPlan) -> Result<Option<crate::plan::spec::TestStreamRun>, String> {
    let mut streams = Vec::new();
    for id in graph.leaves.iter().filter(|id| graph.urn(id) == crate::urns::TEST_STREAM) {
        let spec = crate::test_stream::TestStreamSpec::read(id, graph.transform(id), graph.components())?;
        let topics = spec
            .outputs
            .iter()
            .map(|pc| {
                plan.topics
                    .iter()
                    .find(|t| t.kind == crate::plan::topology::TopicKind::TestStream && &t.pcollection == pc)
                    .map(|t| t.name.clone())
                    .ok_or_else(|| format!("no topic planned for the TestStream output '{pc}'"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        streams.push((spec, topics));
    }
    if streams.is_empty() {
        return Ok(None);
    }
    Ok(Some(crate::plan::spec::TestStreamRun { streams, awaited: plan.test_stream_terminals() }))
}

/// Each sub-topology's spec and the descriptors to register for it (id
/// `<job_id>-<stage>`, and `...-drain` for a stage with splittable DoFns:
/// the one it runs while its job drains), data and state over the Fn API
/// at `fn_url`.
pub fn lower(
    graph: &PipelineGraph,
    plan: &TopologyPlan,
    job_id: &str,
    fn_url: &str,
) -> Result<Vec<(SubTopologySpec, Vec<ProcessBundleDescriptor>)>, String> {
    let components = graph.components();
    let mut sub_topologies = Vec::new();
    for sub in &plan.sub_topologies {
        let id = format!("{}-{}", job_id, sub.stage.id);
        let descriptor = descriptor::build(graph, &sub.stage, &id, fn_url, fn_url);
        let drain = crate::plan::sdf::drain_descriptor(graph, &descriptor, &format!("{id}-drain"));
        let mut inputs = Vec::new();
        let mut helpers = Vec::new();
        for i in &sub.inputs {
            let topic = &plan.topics[i.topic];
            let mut source = None;
            let mut window_fns = None;
            let gbk = match &i.kind {
                InputKind::Direct => None,
                InputKind::Source { transform } => {
                    let t = graph.transform(transform);
                    let (element, _) = wire_coders(components, &topic.pcollection)?;
                    source = Some(Arc::new(SourceInput {
                        transform: transform.clone(),
                        name: t.unique_name.clone(),
                        encoder: ElementEncoder::new(read_spec(t)?, matches!(element, Coder::LengthPrefix(_))),
                    }));
                    None
                }
                InputKind::GroupByKey { .. } => {
                    let pc = &components.pcollections[&topic.pcollection];
                    let ws = &components.windowing_strategies[&pc.windowing_strategy_id];
                    let mut spec = WindowingSpec::from_proto(components, ws)?;
                    spec.bounded_input = pc.is_bounded == beam_kafka_proto::pipeline::is_bounded::Enum::Bounded as i32;
                    if let Some(sdk) = &spec.sdk {
                        let base = format!("{id}-window-fn-{}", inputs.len());
                        let mut helper = |d: ProcessBundleDescriptor| {
                            let id = d.id.clone();
                            helpers.push(d);
                            id
                        };
                        window_fns = Some(WindowFnDescriptors {
                            environment_id: sdk.environment_id.clone(),
                            merge: sdk
                                .merges
                                .then(|| helper(window_fns::merge_descriptor(components, sdk, &format!("{base}-merge"), fn_url))),
                            end: sdk.opaque.then(|| {
                                helper(window_fns::end_descriptor(
                                    components,
                                    &sdk.environment_id,
                                    &sdk.window_coder_id,
                                    &format!("{base}-end"),
                                    fn_url,
                                ))
                            }),
                        });
                    }
                    Some((spec, wire_coders(components, &topic.pcollection)?.0))
                }
            };
            inputs.push(InputSpec {
                topic: topic.name.clone(),
                partitions: topic.partitions,
                upstream: topic.upstream.clone(),
                source_transform: descriptor::source_id(&i.pcollection),
                gbk,
                source,
                window_coder: wire_coders(components, &i.pcollection)?.1,
                allowed_lateness: allowed_lateness(components, &i.pcollection),
                window_fns,
                expiry: expiry_reader(graph, &sub.stage.transforms, &i.pcollection)?,
                time_sorted: reads_time_sorted(graph, &sub.stage.transforms, &i.pcollection),
            });
        }
        let mut side_inputs = Vec::new();
        for si in &sub.side_inputs {
            let topic = &plan.topics[si.topic];
            let t = graph.transform(&si.transform);
            let payload = ParDoPayload::decode(t.spec.as_ref().map(|s| s.payload.as_slice()).unwrap_or_default())
                .map_err(|e| format!("'{}' has an unreadable ParDo payload: {e}", t.unique_name))?;
            let urn =
                payload.side_inputs.get(&si.local_name).and_then(|p| p.access_pattern.as_ref()).map(|a| a.urn.clone()).unwrap_or_default();
            let access = Access::from_urn(&urn).ok_or_else(|| {
                format!(
                    "'{}' reads side input '{}' with access pattern '{urn}', which this runner does not serve",
                    t.unique_name, si.local_name
                )
            })?;
            let pc = &components.pcollections[&si.pcollection];
            let window_fn =
                components.windowing_strategies.get(&pc.windowing_strategy_id).and_then(|w| w.window_fn.clone()).unwrap_or_default();
            let (element_coder, window_coder) = wire_coders(components, &si.pcollection)?;
            let windowing = SideWindowing::from_window_fn(&window_fn);
            let mapping = side_mapping(graph, &sub.stage, si, &payload, windowing, fn_url, &format!("{id}-side-{}", side_inputs.len()))
                .map(|(map, end)| {
                    let ids = SideMapping {
                        map: map.id.clone(),
                        end: end.as_ref().map(|e| e.id.clone()),
                        side_window_coder: window_coder.clone(),
                    };
                    helpers.push(map);
                    helpers.extend(end);
                    ids
                });
            side_inputs.push(SideInputSpec {
                topic: topic.name.clone(),
                upstream: topic.upstream.clone(),
                transform: si.transform.clone(),
                local_name: si.local_name.clone(),
                access,
                windowing,
                element_coder,
                window_coder,
                mapping,
            });
        }
        let mut outputs = Vec::new();
        for o in &sub.outputs {
            let topic = &plan.topics[o.topic];
            let (element_coder, window_coder) = wire_coders(components, &o.pcollection)?;
            outputs.push(OutputSink {
                sink_transform: descriptor::sink_id(&o.pcollection),
                topic: topic.name.clone(),
                partitions: topic.partitions,
                window_coder,
                element_coder,
                spread: feeds_splittable(graph, &o.pcollection),
                in_order: !sub.stage.input_coders.is_empty(),
            });
        }
        let mut kafka_sinks = Vec::new();
        for k in &sub.sinks {
            let t = graph.transform(&k.transform);
            let spec = write_spec(t)?;
            let (element, window) = wire_coders(components, &k.pcollection)?;
            let pc = &components.pcollections[&k.pcollection];
            let row_schema = if spec.with_headers {
                let coder = &components.coders[&pc.coder_id];
                let payload = coder.spec.as_ref().map(|s| s.payload.as_slice()).unwrap_or_default();
                Some(
                    Schema::decode(payload)
                        .map_err(|e| format!("WriteToKafka '{}': its input's row schema is malformed: {e}", t.unique_name))?,
                )
            } else {
                None
            };
            kafka_sinks.push(KafkaSinkSpec {
                sink_transform: descriptor::sink_id(&k.pcollection),
                name: t.unique_name.clone(),
                codec: SinkCodec { spec, element, window, row_schema },
            });
        }
        sub_topologies.push((
            SubTopologySpec {
                id: sub.id,
                partitions: sub.partitions,
                descriptor_id: id,
                environment_id: sub.stage.environment_id.clone(),
                drain_descriptor_id: drain.as_ref().map(|d| d.id.clone()),
                display_name: sub.stage.id.clone(),
                sinks: sub.stage.outputs.iter().map(|pc| descriptor::sink_id(pc)).collect(),
                inputs,
                side_inputs,
                stateful: sub.stage.transforms.iter().any(|t| graph.is_stateful(t)),
                timers: timer_families(graph, &sub.stage.transforms)?,
                multimap_values: crate::state::multimap_state::value_coders(
                    graph.components(),
                    sub.stage.transforms.iter().map(|t| (t, graph.transform(t))),
                )?,
                outputs,
                kafka_sinks,
                residual_sources: sub
                    .stage
                    .transforms
                    .iter()
                    .filter(|t| graph.urn(t) == crate::urns::SDF_PROCESS)
                    .filter_map(|t| graph.main_inputs_of(t).first().map(|pc| (t.clone(), descriptor::source_id(pc))))
                    .collect(),
            },
            std::iter::once(descriptor).chain(drain).chain(helpers).collect(),
        ));
    }

    Ok(sub_topologies)
}

/// The helper descriptors through which the SDK maps main windows onto a
/// side input's windows (and tells their ends), when the runner cannot:
/// the side input's WindowFn, or the main input's window type, is custom.
/// Only where the stage's inputs carry the windows the ParDo sees (no
/// WindowInto fused in between), since those are the windows it maps.
fn side_mapping(
    graph: &PipelineGraph,
    stage: &crate::plan::fusion::Stage,
    si: &crate::plan::topology::SubSideInput,
    payload: &ParDoPayload,
    windowing: SideWindowing,
    fn_url: &str,
    base: &str,
) -> Option<(ProcessBundleDescriptor, Option<ProcessBundleDescriptor>)> {
    let components = graph.components();
    let strategy = |pc: &str| components.pcollections.get(pc).and_then(|p| components.windowing_strategies.get(&p.windowing_strategy_id));
    let main = strategy(graph.main_inputs_of(&si.transform).first()?)?;
    let side = strategy(&si.pcollection)?;
    let readable = |coder: &str| Coder::from_components(components, coder).is_readable();
    if windowing != SideWindowing::Other && readable(&main.window_coder_id) {
        return None;
    }
    if !stage.inputs.iter().all(|pc| strategy(pc) == Some(main)) {
        return None;
    }
    let mapping = payload.side_inputs.get(&si.local_name)?.window_mapping_fn.as_ref()?;
    if mapping.urn != window_fns::PICKLED_WINDOW_MAPPING_FN {
        return None;
    }
    let env = &graph.transform(&si.transform).environment_id;
    let coders = (main.window_coder_id.as_str(), side.window_coder_id.as_str());
    let map = window_fns::side_mapping_descriptor(components, env, mapping, coders, &format!("{base}-map"), fn_url);
    let end = (!readable(&side.window_coder_id))
        .then(|| window_fns::end_descriptor(components, env, &side.window_coder_id, &format!("{base}-end"), fn_url));
    Some((map, end))
}

/// The allowed lateness (ms) of a PCollection's windowing strategy.
fn allowed_lateness(components: &Components, pcollection: &str) -> i64 {
    components
        .pcollections
        .get(pcollection)
        .and_then(|pc| components.windowing_strategies.get(&pc.windowing_strategy_id))
        .map_or(0, |ws| ws.allowed_lateness.max(0))
}

/// Whether `pcollection` is the input of a splittable DoFn's process step.
fn feeds_splittable(graph: &PipelineGraph, pcollection: &str) -> bool {
    graph.consumers.get(pcollection).is_some_and(|cs| cs.iter().any(|c| graph.urn(c) == crate::urns::SDF_PROCESS))
}

/// Whether a ParDo of `transforms` that requires time-sorted input reads
/// `pcollection` (a stateful ParDo: its keyed input comes through a
/// shuffle, straight into its stage).
fn reads_time_sorted(graph: &PipelineGraph, transforms: &[String], pcollection: &str) -> bool {
    graph.consumers.get(pcollection).into_iter().flatten().filter(|c| transforms.contains(c)).any(|id| {
        let spec = graph.transform(id).spec.as_ref().filter(|s| s.urn == crate::urns::PAR_DO);
        spec.and_then(|s| ParDoPayload::decode(s.payload.as_slice()).ok()).is_some_and(|p| p.requires_time_sorted_input)
    })
}

/// The ParDo of `transforms` with an OnWindowExpiration callback that
/// reads `pcollection`, with the key coder of its elements.
fn expiry_reader(graph: &PipelineGraph, transforms: &[String], pcollection: &str) -> Result<Option<(String, Coder)>, String> {
    for id in graph.consumers.get(pcollection).into_iter().flatten().filter(|c| transforms.contains(c)) {
        let Some(spec) = graph.transform(id).spec.as_ref().filter(|s| s.urn == crate::urns::PAR_DO) else { continue };
        let Ok(payload) = ParDoPayload::decode(spec.payload.as_slice()) else { continue };
        if payload.on_window_expiration_timer_family_spec.is_empty() {
            continue;
        }
        return match wire_coders(graph.components(), pcollection)?.0 {
            Coder::Kv(key, _) => Ok(Some((id.clone(), *key))),
            other => Err(format!("'{}': a stateful ParDo's input is not keyed ({other:?})", graph.transform(id).unique_name)),
        };
    }
    Ok(None)
}

/// The timer families of a stage's ParDos, with the coders the runner reads
/// their timers with (keys length-prefixed as in the stage's descriptor).
fn timer_families(graph: &PipelineGraph, transforms: &[String]) -> Result<Vec<TimerFamilySpec>, String> {
    use beam_kafka_proto::pipeline::time_domain::Enum as Domain;
    let components = graph.components();
    let mut out = Vec::new();
    for id in transforms {
        let t = graph.transform(id);
        let Some(spec) = t.spec.as_ref().filter(|s| s.urn == crate::urns::PAR_DO) else { continue };
        let payload =
            ParDoPayload::decode(spec.payload.as_slice()).map_err(|e| format!("'{}': unreadable ParDo payload: {e}", t.unique_name))?;
        for (family, tf) in &payload.timer_family_specs {
            let domain = match Domain::try_from(tf.time_domain) {
                Ok(Domain::ProcessingTime) => TimeDomain::ProcessingTime,
                _ => TimeDomain::EventTime,
            };
            let coder = components
                .coders
                .get(&tf.timer_family_coder_id)
                .ok_or_else(|| format!("'{}': missing timer coder of '{family}'", t.unique_name))?;
            let (key, window) = match coder.component_coder_ids.as_slice() {
                [k, w] => (k, w),
                _ => return Err(format!("'{}': timer coder of '{family}' is not a timer coder", t.unique_name)),
            };
            let mut scratch = Components { coders: components.coders.clone(), ..Default::default() };
            let lp_key = crate::codec::coder::length_prefixed(&mut scratch, key);
            let lp_window = crate::codec::coder::length_prefixed(&mut scratch, window);
            let codec = TimerCodec { key: Coder::from_components(&scratch, &lp_key), window: Coder::from_components(&scratch, &lp_window) };
            let on_window_expiration = payload.on_window_expiration_timer_family_spec == *family;
            out.push(TimerFamilySpec { transform: id.clone(), family: family.clone(), domain, codec, on_window_expiration });
        }
    }
    Ok(out)
}
