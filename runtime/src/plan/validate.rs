//! Prepare-time validation: every transform, feature and requirement the
//! runner cannot execute is reported at once, each naming its transform.
use beam_kafka_proto::envelope::{KafkaReadSpec, KafkaWriteSpec};
use prost::Message;

use crate::codec::coder::{self, Coder};
use crate::pb;
use crate::plan::graph::PipelineGraph;
use crate::urns::{self, friendly_name};
use crate::window::windowing::WindowingSpec;

/// One thing the runner cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// The transform's user-visible name, empty for pipeline-wide problems.
    pub transform: String,
    pub reason: String,
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.transform.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "transform '{}': {}", self.transform, self.reason)
        }
    }
}

/// Requirements (`Pipeline.requirements`) this runner honours.
const SUPPORTED_REQUIREMENTS: &[&str] = &[
    urns::REQUIREMENT_STATEFUL,
    urns::REQUIREMENT_SPLITTABLE,
    urns::REQUIREMENT_FINALIZATION,
    urns::REQUIREMENT_ON_WINDOW_EXPIRATION,
    urns::REQUIREMENT_TIME_SORTED,
];

/// Checks the whole pipeline; an empty result means it can run.
pub fn validate(pipeline: &pb::Pipeline) -> Vec<Unsupported> {
    check(pipeline, true)
}

/// Like [`validate`], without asking whether its SDK environments can be
/// started here: for planning a pipeline saved without a runner.
pub fn validate_topology(pipeline: &pb::Pipeline) -> Vec<Unsupported> {
    check(pipeline, false)
}

fn check(pipeline: &pb::Pipeline, environments: bool) -> Vec<Unsupported> {
    if let Err(e) = crate::plan::structure::check(pipeline) {
        return vec![Unsupported { transform: String::new(), reason: format!("malformed pipeline: {e}") }];
    }
    let graph = match PipelineGraph::new(pipeline) {
        Ok(g) => g,
        Err(e) => return vec![Unsupported { transform: String::new(), reason: format!("malformed pipeline: {e}") }],
    };
    let mut problems = Vec::new();
    for req in &pipeline.requirements {
        if !SUPPORTED_REQUIREMENTS.contains(&req.as_str()) {
            problems.push(Unsupported {
                transform: String::new(),
                reason: format!("the pipeline requires '{req}' ({}), which this runner does not support yet", requirement_name(req)),
            });
        }
    }
    if environments {
        problems.extend(sdk_release_problems(&graph));
    }
    for id in &graph.leaves {
        let t = graph.transform(id);
        let urn = graph.urn(id);
        let name = if t.unique_name.is_empty() { id.clone() } else { t.unique_name.clone() };
        let mut fail = |reason: String| problems.push(Unsupported { transform: name.clone(), reason });
        if urn == urns::IMPULSE {
            continue;
        }
        if urns::SDK_EXECUTED.contains(&urn) {
            if t.environment_id.is_empty() {
                fail(format!("{} has no environment to execute it in", friendly_name(urn)));
                continue;
            }
            match graph.components().environments.get(&t.environment_id) {
                None => fail(format!("refers to a missing environment '{}'", t.environment_id)),
                Some(env) if environments => {
                    if let Some(reason) = environment_problem(env) {
                        fail(reason);
                    }
                }
                Some(_) => {}
            }
            if urns::has_pardo_payload(urn) {
                for reason in pardo_problems(t) {
                    fail(reason);
                }
            }
            continue;
        }
        match urn {
            "" => fail("is a leaf transform without a URN".to_string()),
            urns::GROUP_BY_KEY => {
                for reason in group_by_key_problems(&graph, id) {
                    fail(reason);
                }
            }
            urns::TEST_STREAM => {
                if let Err(e) = crate::test_stream::TestStreamSpec::read(id, t, graph.components()) {
                    fail(e);
                }
            }
            urns::KAFKA_READ => {
                if let Err(e) = read_spec(t) {
                    fail(e);
                }
            }
            urns::KAFKA_WRITE => {
                let checked = write_spec(t).and_then(|spec| {
                    let input = graph.inputs_of(id).into_iter().next().ok_or("WriteToKafka has no input")?;
                    crate::plan::expansion::check_write_input(graph.components(), &input, &spec)
                });
                if let Err(e) = checked {
                    fail(e);
                }
            }
            u if crate::plan::expansion::EXPANDABLE.contains(&u) => fail(format!(
                "{u} was expanded by another expansion service; let beam-kafka expand it (KafkaStreamsRunner does by default, \
                 or pass expansion_service='localhost:<job server's --expansion-port>')"
            )),
            _ => fail(format!("{} is not supported by this runner", describe_urn(urn))),
        }
    }
    problems
}

/// The spec of one of our Kafka read transforms.
pub fn read_spec(t: &pb::PTransform) -> Result<KafkaReadSpec, String> {
    KafkaReadSpec::decode(t.spec.as_ref().map(|s| s.payload.as_slice()).unwrap_or_default())
        .map_err(|e| format!("ReadFromKafka payload is malformed: {e}"))
}

/// The spec of one of our Kafka write transforms.
pub fn write_spec(t: &pb::PTransform) -> Result<KafkaWriteSpec, String> {
    KafkaWriteSpec::decode(t.spec.as_ref().map(|s| s.payload.as_slice()).unwrap_or_default())
        .map_err(|e| format!("WriteToKafka payload is malformed: {e}"))
}

/// Kafka reads must be on the runner's own cluster: its consumer group owns
/// their partitions and commits their offsets with the rest of a task's work.
pub fn validate_kafka_clusters(pipeline: &pb::Pipeline, bootstrap_servers: &str) -> Vec<Unsupported> {
    let mut problems = Vec::new();
    for (id, t) in pipeline.components.iter().flat_map(|c| c.transforms.iter()) {
        if t.spec.as_ref().is_none_or(|s| s.urn != urns::KAFKA_READ) {
            continue;
        }
        let Ok(spec) = read_spec(t) else { continue };
        let servers = spec.consumer_config.get("bootstrap.servers").cloned().unwrap_or_default();
        if !crate::kafka::io::same_cluster(&servers, bootstrap_servers) {
            problems.push(Unsupported {
                transform: if t.unique_name.is_empty() { id.clone() } else { t.unique_name.clone() },
                reason: format!(
                    "ReadFromKafka reads from '{servers}', but the runner runs on '{bootstrap_servers}' (--bootstrap_servers); \
                     beam-kafka reads topics of its own cluster only"
                ),
            });
        }
    }
    problems
}

fn group_by_key_problems(graph: &PipelineGraph, id: &str) -> Vec<String> {
    let components = graph.components();
    let Some(input) = graph.inputs_of(id).into_iter().next() else {
        return vec!["GroupByKey has no input".to_string()];
    };
    let Some(pc) = components.pcollections.get(&input) else {
        return vec![format!("GroupByKey reads a missing PCollection '{input}'")];
    };
    let mut out = Vec::new();
    match components.windowing_strategies.get(&pc.windowing_strategy_id) {
        None => out.push(format!("GroupByKey input '{input}' has no windowing strategy")),
        Some(ws) => {
            if let Err(e) = WindowingSpec::from_proto(components, ws) {
                out.push(format!("GroupByKey: {e}"));
            }
        }
    }
    match coder::wire_coders(components, &input) {
        Ok((Coder::Kv(..), _)) => {}
        Ok((other, _)) => out.push(format!("GroupByKey input is not key/value coded ({other:?})")),
        Err(e) => out.push(format!("GroupByKey: {e}")),
    }
    out
}

/// One problem per environment whose SDK release is outside the supported
/// range (`sdk_version`), for the environments that execute transforms.
fn sdk_release_problems(graph: &PipelineGraph) -> Vec<Unsupported> {
    let used: std::collections::BTreeSet<&str> =
        graph.leaves.iter().map(|id| graph.transform(id).environment_id.as_str()).filter(|e| !e.is_empty()).collect();
    used.into_iter()
        .filter_map(|id| graph.components().environments.get(id))
        .filter_map(crate::plan::sdk_version::release_problem)
        .map(|reason| Unsupported { transform: String::new(), reason })
        .collect()
}

fn describe_urn(urn: &str) -> String {
    let name = friendly_name(urn);
    if name == urn {
        format!("'{urn}'")
    } else {
        format!("{name} ({urn})")
    }
}

fn requirement_name(urn: &str) -> &'static str {
    match urn {
        urns::REQUIREMENT_STATEFUL => "stateful ParDo",
        urns::REQUIREMENT_SPLITTABLE => "splittable DoFn",
        urns::REQUIREMENT_FINALIZATION => "bundle finalization",
        urns::REQUIREMENT_ON_WINDOW_EXPIRATION => "OnWindowExpiration",
        urns::REQUIREMENT_TIME_SORTED => "time-sorted input",
        urns::REQUIREMENT_STABLE_INPUT => "stable input",
        _ => "unknown requirement",
    }
}

fn environment_problem(env: &pb::Environment) -> Option<String> {
    match env.urn.as_str() {
        urns::ENV_EXTERNAL | urns::ENV_PROCESS | urns::ENV_DOCKER => None,
        urns::ENV_EMBEDDED_PYTHON => Some(
            "runs in the embedded Python environment, which only Beam's in-process Python runner has; \
             use --environment_type=LOOPBACK (the default of beam_kafka.KafkaStreamsRunner), EXTERNAL or PROCESS"
                .to_string(),
        ),
        other => Some(format!("runs in environment '{other}', which this runner cannot start")),
    }
}

/// Why this runner cannot serve a user state spec, if it cannot.
fn unsupported_state(spec: &pb::StateSpec) -> Option<String> {
    use crate::state::user_state::{BAG_PROTOCOL, MULTIMAP_PROTOCOL, ORDERED_LIST_PROTOCOL};
    // What matters is the protocol the SDK speaks for it: Python's bag,
    // combining, value and set state all use the bag protocol; Go's map and
    // set state the multimap protocol.
    match spec.protocol.as_ref().map(|p| p.urn.as_str()) {
        Some(BAG_PROTOCOL | ORDERED_LIST_PROTOCOL | MULTIMAP_PROTOCOL) => None,
        Some(other) => Some(format!("speaks state protocol '{other}', which this runner does not serve (bag, ordered list and multimap)")),
        None if spec.spec.is_none() => Some("uses user state of an unknown kind".to_string()),
        None => None,
    }
}

fn pardo_problems(t: &pb::PTransform) -> Vec<String> {
    let payload = t.spec.as_ref().map(|s| s.payload.as_slice()).unwrap_or_default();
    let Ok(p) = pb::ParDoPayload::decode(payload) else {
        return vec!["has a ParDo payload that cannot be decoded".to_string()];
    };
    let mut out = Vec::new();
    for (name, si) in &p.side_inputs {
        let urn = si.access_pattern.as_ref().map(|a| a.urn.as_str()).unwrap_or_default();
        if crate::state::side_input::Access::from_urn(urn).is_none() {
            out.push(format!(
                "reads side input '{name}' with access pattern '{urn}', which this runner does not serve (iterable and multimap only)"
            ));
        }
    }
    for (name, spec) in &p.state_specs {
        if let Some(why) = unsupported_state(spec) {
            out.push(format!("{why} (user state '{name}')"));
        }
    }
    for (name, tf) in &p.timer_family_specs {
        if !matches!(
            pb::time_domain::Enum::try_from(tf.time_domain),
            Ok(pb::time_domain::Enum::EventTime | pb::time_domain::Enum::ProcessingTime)
        ) {
            out.push(format!("uses timer family '{name}' in a time domain this runner does not serve (event and processing time only)"));
        }
    }
    let expiry = &p.on_window_expiration_timer_family_spec;
    if !expiry.is_empty() && p.timer_family_specs.get(expiry).is_none_or(|tf| tf.time_domain != pb::time_domain::Enum::EventTime as i32) {
        out.push(format!("asks for OnWindowExpiration through '{expiry}', which is not one of its event-time timer families"));
    }
    // A splittable ParDo runs as the steps `sdf::expand_splittable` makes.
    if !p.restriction_coder_id.is_empty() && t.spec.as_ref().is_some_and(|s| s.urn == urns::PAR_DO) {
        out.push("is a splittable DoFn that was not expanded into its steps (sdf::expand_splittable)".to_string());
    }
    // The runner sorts a stateful ParDo's keyed input (see `held`).
    if p.requires_time_sorted_input && p.state_specs.is_empty() && p.timer_family_specs.is_empty() {
        out.push("requires time-sorted input but has no state or timers: time-sorted input is for a stateful ParDo".to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::graph::test_pipelines::Builder;
    use crate::urns::*;

    #[test]
    fn impulse_and_pardos_are_supported() {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("map", PAR_DO, &["a"], &["b"], true);
        assert_eq!(validate(&b.build()), vec![]);
    }

    #[test]
    fn every_unsupported_transform_is_named_at_once() {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false)
            .leaf("ts", "beam:transform:teststream:v0", &[], &["t"], false)
            .leaf("gbk", GROUP_BY_KEY, &["a"], &["g"], false)
            .leaf("odd", "beam:transform:odd:v1", &["g"], &["o"], true);
        let mut p = b.build();
        p.components.as_mut().unwrap().transforms.get_mut("ts").unwrap().unique_name = "MyTestStream".into();
        let problems = validate(&p);
        let text: Vec<_> = problems.iter().map(|u| u.to_string()).collect();
        assert_eq!(problems.len(), 3, "{text:?}");
        assert!(text.iter().any(|t| t.contains("'MyTestStream'") && t.contains("teststream:v0")));
        assert!(text.iter().any(|t| t.contains("'gbk'") && t.contains("GroupByKey")));
        assert!(text.iter().any(|t| t.contains("'odd'") && t.contains("beam:transform:odd:v1")));
    }

    #[test]
    fn pardo_features_are_named() {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("stateful", PAR_DO, &["a"], &["b"], true);
        let mut p = b.build();
        let payload = pb::ParDoPayload {
            state_specs: [("s".to_string(), pb::StateSpec::default())].into(),
            restriction_coder_id: "r".into(),
            ..Default::default()
        };
        p.components.as_mut().unwrap().transforms.get_mut("stateful").unwrap().spec.as_mut().unwrap().payload = payload.encode_to_vec();
        p.requirements.push(REQUIREMENT_STATEFUL.into());
        let text: Vec<_> = validate(&p).iter().map(|u| u.to_string()).collect();
        // Stateful ParDos run; a state spec of unknown kind does not.
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text.iter().any(|t| t.contains("'stateful'") && t.contains("user state of an unknown kind")));
        assert!(text.iter().any(|t| t.contains("splittable")));
    }

    #[test]
    fn time_sorted_input_runs_for_stateful_pardos_only() {
        let bag = pb::StateSpec {
            protocol: Some(pb::FunctionSpec { urn: crate::state::user_state::BAG_PROTOCOL.into(), payload: vec![] }),
            ..Default::default()
        };
        let with = |state: Vec<(String, pb::StateSpec)>| {
            let mut b = Builder::new();
            b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("sorted", PAR_DO, &["a"], &["b"], true);
            let mut p = b.build();
            let payload =
                pb::ParDoPayload { state_specs: state.into_iter().collect(), requires_time_sorted_input: true, ..Default::default() };
            p.components.as_mut().unwrap().transforms.get_mut("sorted").unwrap().spec.as_mut().unwrap().payload = payload.encode_to_vec();
            p.requirements.push(REQUIREMENT_TIME_SORTED.into());
            validate(&p).iter().map(|u| u.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(with(vec![("last".into(), bag)]), Vec::<String>::new());
        let text = with(vec![]);
        assert!(text.len() == 1 && text[0].contains("'sorted'") && text[0].contains("stateful ParDo"), "{text:?}");
    }

    #[test]
    fn the_embedded_environment_is_refused_with_advice() {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("map", PAR_DO, &["a"], &["b"], true);
        let mut p = b.build();
        p.components.as_mut().unwrap().environments.get_mut("py").unwrap().urn = ENV_EMBEDDED_PYTHON.into();
        let text = validate(&p)[0].to_string();
        assert!(text.contains("LOOPBACK"), "{text}");
    }

    #[test]
    fn an_sdk_release_outside_the_range_is_refused_once_per_environment() {
        let mut b = Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("map", PAR_DO, &["a"], &["b"], true).leaf("map2", PAR_DO, &["b"], &["c"], true);
        let mut p = b.build();
        let env = p.components.as_mut().unwrap().environments.get_mut("py").unwrap();
        env.capabilities.push("beam:version:sdk_base:apache/beam_python3.11_sdk:2.99.0".into());
        let problems = validate(&p);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].to_string().contains("Python SDK 2.99.0, which is newer"), "{}", problems[0]);
        // Planning a saved pipeline (describe) does not ask.
        assert!(validate_topology(&p).is_empty());
    }

    #[test]
    fn a_malformed_pipeline_is_reported_not_panicked_on() {
        let p = pb::Pipeline::default();
        let text = validate(&p)[0].to_string();
        assert!(text.contains("malformed"));
    }
}
