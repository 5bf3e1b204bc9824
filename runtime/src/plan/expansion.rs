//! Expansion of Beam's standard Kafka transforms into this runner's own
//! primitives (Beam's Expansion API, answered without Java).
//!
//! A client sends `beam:transform:org.apache.beam:kafka_read_*` or
//! `..._kafka_write*` with its configuration as a schema'd row; we answer with
//! one runner-executed transform (`KAFKA_READ` / `KAFKA_WRITE`) whose payload is
//! our checked spec, plus the coders, windowing strategy and PCollection of
//! its output. Every new component id starts with the request's namespace, as
//! the client requires.
use beam_kafka_proto::envelope::{KafkaFormat, KafkaReadSpec, KafkaWriteSpec};
use beam_kafka_proto::expansion::{ExpansionRequest, ExpansionResponse};
use prost::Message;

use crate::codec::coder::{Coder, KV, NULLABLE};
use crate::codec::row::{self, schema};
use crate::kafka::io::{self as kafka_io, JAVA_READ_WITHOUT_METADATA, JAVA_READ_WITH_METADATA, JAVA_WRITE, JAVA_WRITE_WITH_HEADERS};
use crate::pb;
use crate::urns;

pub const ROW_CODER: &str = "beam:coder:row:v1";

/// The transforms this expansion service knows.
pub const EXPANDABLE: &[&str] = &[JAVA_READ_WITHOUT_METADATA, JAVA_READ_WITH_METADATA, JAVA_WRITE, JAVA_WRITE_WITH_HEADERS];

/// What makes a request unreadable, as opposed to one this service reads
/// but cannot expand: no transform or spec, or a configuration (payload
/// and row) that does not decode.
pub fn malformed(request: &ExpansionRequest) -> Option<String> {
    let Some(spec) = request.transform.as_ref().and_then(|t| t.spec.as_ref()) else {
        return Some("the expansion request has no transform spec".into());
    };
    if !EXPANDABLE.contains(&spec.urn.as_str()) {
        return None;
    }
    let config = match pb::ExternalConfigurationPayload::decode(spec.payload.as_slice()) {
        Ok(c) => c,
        Err(e) => return Some(format!("{}: the configuration is not an ExternalConfigurationPayload: {e}", spec.urn)),
    };
    let schema = config.schema.unwrap_or_default();
    row::decode(&schema, &config.payload).err().map(|e| format!("{}: cannot read the configuration row: {e}", spec.urn))
}

/// Expands one transform; an `Err` is the text the client shows its user.
pub fn expand(request: &ExpansionRequest) -> Result<ExpansionResponse, String> {
    let transform = request.transform.as_ref().ok_or("the expansion request has no transform")?;
    let spec = transform.spec.as_ref().ok_or("the transform has no spec")?;
    if !EXPANDABLE.contains(&spec.urn.as_str()) {
        return Err(format!("beam-kafka's expansion service cannot expand '{}'; it expands {}", spec.urn, EXPANDABLE.join(", ")));
    }
    let config = pb::ExternalConfigurationPayload::decode(spec.payload.as_slice())
        .map_err(|e| format!("{}: the configuration is not an ExternalConfigurationPayload: {e}", spec.urn))?;
    let schema = config.schema.as_ref().ok_or("the configuration has no schema")?;
    let row = row::decode(schema, &config.payload).map_err(|e| format!("{}: cannot read the configuration row: {e}", spec.urn))?;
    let mut components = request.components.clone().unwrap_or_default();
    let ns = &request.namespace;
    let transform = match spec.urn.as_str() {
        JAVA_READ_WITHOUT_METADATA | JAVA_READ_WITH_METADATA => {
            let read = kafka_io::read_spec(&row, spec.urn == JAVA_READ_WITH_METADATA)?;
            expand_read(&mut components, ns, &transform.unique_name, read)
        }
        JAVA_WRITE | JAVA_WRITE_WITH_HEADERS => {
            let write = kafka_io::write_spec(&row, spec.urn == JAVA_WRITE_WITH_HEADERS)?;
            let input = transform.inputs.values().next().ok_or("WriteToKafka has no input")?;
            check_write_input(&components, input, &write)?;
            // A primitive without an output is dropped by the Python SDK's
            // pre-run optimisation, so for Python the write has one that
            // stays empty; Go (like Java's KafkaIO) expects none.
            let mut outputs = std::collections::HashMap::new();
            if asked_by_python(request, &components) {
                let bytes = add_coder(&mut components, format!("{ns}_kafka_written_coder"), urns::CODER_BYTES, &[], Vec::new());
                let written = add_pcollection(&mut components, ns, "written", &transform.unique_name, bytes, true);
                outputs.insert("written".to_string(), written);
            }
            pb::PTransform {
                unique_name: transform.unique_name.clone(),
                spec: Some(pb::FunctionSpec { urn: urns::KAFKA_WRITE.into(), payload: write.encode_to_vec() }),
                inputs: transform.inputs.clone(),
                outputs,
                ..Default::default()
            }
        }
        _ => unreachable!("checked above"),
    };
    Ok(ExpansionResponse { components: Some(components), transform: Some(transform), ..Default::default() })
}

/// Whether the expansion is for Python's SDK: it names Python's environment,
/// or no SDK but sends pipeline options (Python's always does; Go's request
/// has neither an environment nor options).
fn asked_by_python(request: &ExpansionRequest, components: &pb::Components) -> bool {
    let known = ["Python", "Go", "Java"];
    let sdk = components.environments.values().filter_map(crate::plan::sdk_version::sdk_of).find(|s| known.contains(&s.as_str()));
    match sdk {
        Some(sdk) => sdk == "Python",
        None => request.pipeline_options.is_some() || !components.environments.is_empty(),
    }
}

fn add_coder(components: &mut pb::Components, id: String, urn: &str, parts: &[&str], payload: Vec<u8>) -> String {
    components.coders.insert(
        id.clone(),
        pb::Coder {
            spec: Some(pb::FunctionSpec { urn: urn.into(), payload }),
            component_coder_ids: parts.iter().map(|s| s.to_string()).collect(),
        },
    );
    id
}

/// The schema of a record read with metadata, field names as Java's KafkaIO.
pub fn record_schema(key: KafkaFormat, value: KafkaFormat) -> pb::Schema {
    use pb::AtomicType as A;
    let atomic_of = |f: KafkaFormat| match f {
        KafkaFormat::String => A::String,
        KafkaFormat::Long | KafkaFormat::Integer => A::Int64,
        _ => A::Bytes,
    };
    let header =
        schema::new("beam-kafka-header-v1", vec![("key", schema::atomic(A::String, false)), ("value", schema::atomic(A::Bytes, true))]);
    schema::new(
        "beam-kafka-record-v1",
        vec![
            ("topic", schema::atomic(A::String, false)),
            ("partition", schema::atomic(A::Int32, false)),
            ("offset", schema::atomic(A::Int64, false)),
            ("timestamp", schema::atomic(A::Int64, false)),
            ("timestampTypeId", schema::atomic(A::Int32, false)),
            ("timestampTypeName", schema::atomic(A::String, false)),
            ("key", schema::atomic(atomic_of(key), true)),
            ("value", schema::atomic(atomic_of(value), true)),
            ("headers", schema::array(schema::row(header, false), true)),
        ],
    )
}

fn expand_read(components: &mut pb::Components, ns: &str, name: &str, read: KafkaReadSpec) -> pb::PTransform {
    let element_coder = if read.with_metadata {
        let schema = record_schema(read.key_format(), read.value_format());
        add_coder(components, format!("{ns}_kafka_record"), ROW_CODER, &[], schema.encode_to_vec())
    } else {
        let mut side = |which: &str, format: KafkaFormat| {
            let inner = add_coder(components, format!("{ns}_kafka_{which}"), kafka_io::coder_urn(format), &[], Vec::new());
            add_coder(components, format!("{ns}_kafka_nullable_{which}"), NULLABLE, &[&inner], Vec::new())
        };
        let (k, v) = (side("key", read.key_format()), side("value", read.value_format()));
        add_coder(components, format!("{ns}_kafka_kv"), KV, &[&k, &v], Vec::new())
    };
    let bounded = read.max_num_records.is_some() || read.max_read_time_secs.is_some();
    let output = add_pcollection(components, ns, "records", name, element_coder, bounded);
    pb::PTransform {
        unique_name: name.to_string(),
        spec: Some(pb::FunctionSpec { urn: urns::KAFKA_READ.into(), payload: read.encode_to_vec() }),
        outputs: [("records".to_string(), output)].into_iter().collect(),
        ..Default::default()
    }
}

/// A new PCollection `{ns}_kafka_{tag}` in the global window.
fn add_pcollection(components: &mut pb::Components, ns: &str, tag: &str, name: &str, coder: String, bounded: bool) -> String {
    let window_coder = add_coder(components, format!("{ns}_kafka_global_window"), urns::CODER_GLOBAL_WINDOW, &[], Vec::new());
    let windowing = format!("{ns}_kafka_windowing");
    components.windowing_strategies.insert(windowing.clone(), global_windowing(&window_coder));
    let id = format!("{ns}_kafka_{tag}");
    components.pcollections.insert(
        id.clone(),
        pb::PCollection {
            unique_name: format!("{name}.{tag}"),
            coder_id: coder,
            is_bounded: if bounded { pb::is_bounded::Enum::Bounded } else { pb::is_bounded::Enum::Unbounded } as i32,
            windowing_strategy_id: windowing,
            ..Default::default()
        },
    );
    id
}

/// A global windowing strategy with the default trigger.
pub(crate) fn global_windowing(window_coder: &str) -> pb::WindowingStrategy {
    pb::WindowingStrategy {
        window_fn: Some(pb::FunctionSpec { urn: "beam:window_fn:global_windows:v1".into(), payload: Vec::new() }),
        merge_status: pb::merge_status::Enum::NonMerging as i32,
        window_coder_id: window_coder.to_string(),
        trigger: Some(pb::Trigger { trigger: Some(pb::trigger::Trigger::Default(pb::trigger::Default {})) }),
        accumulation_mode: pb::accumulation_mode::Enum::Discarding as i32,
        output_time: pb::output_time::Enum::EndOfWindow as i32,
        closing_behavior: pb::closing_behavior::Enum::EmitIfNonempty as i32,
        on_time_behavior: pb::on_time_behavior::Enum::FireIfNonempty as i32,
        allowed_lateness: 0,
        assigns_to_one_window: true,
        environment_id: String::new(),
    }
}

fn matches_format(coder: &Coder, format: KafkaFormat) -> bool {
    match coder {
        Coder::Nullable(inner) | Coder::LengthPrefix(inner) => matches_format(inner, format),
        Coder::Bytes => format == KafkaFormat::Bytes,
        Coder::StringUtf8 => format == KafkaFormat::String,
        Coder::Varint => matches!(format, KafkaFormat::Long | KafkaFormat::Integer),
        _ => false,
    }
}

/// The sink reads its input's elements itself, so their coder must be one it
/// can turn into Kafka bytes.
pub fn check_write_input(components: &pb::Components, pcollection: &str, write: &KafkaWriteSpec) -> Result<(), String> {
    let pc =
        components.pcollections.get(pcollection).ok_or_else(|| format!("WriteToKafka's input '{pcollection}' is not in the pipeline"))?;
    if write.with_headers {
        let c = components.coders.get(&pc.coder_id);
        let schema = c
            .filter(|c| c.spec.as_ref().is_some_and(|s| s.urn == ROW_CODER))
            .and_then(|c| pb::Schema::decode(c.spec.as_ref().expect("spec").payload.as_slice()).ok());
        let has = |n: &str| schema.as_ref().is_some_and(|s| s.fields.iter().any(|f| f.name == n));
        if !(has("key") && has("value")) {
            return Err("WriteToKafka(with_headers=True) needs beam.Row elements with fields key (bytes) and value (bytes) \
                        and optionally headers, topic, partition, timestamp; declare the type, e.g. .with_output_types(MyRowType)"
                .into());
        }
        return Ok(());
    }
    let coder = Coder::from_components(components, &pc.coder_id);
    let ok = match &coder {
        Coder::Kv(k, v) => matches_format(k, write.key_format()) && matches_format(v, write.value_format()),
        _ => false,
    };
    if ok {
        return Ok(());
    }
    let want = |f: KafkaFormat| match f {
        KafkaFormat::String => "str",
        KafkaFormat::Long | KafkaFormat::Integer => "int",
        _ => "bytes",
    };
    let got = components.coders.get(&pc.coder_id).and_then(|c| c.spec.as_ref()).map(|s| s.urn.clone()).unwrap_or_default();
    Err(format!(
        "WriteToKafka needs (key, value) pairs of ({k}, {v}) for its serializers, but its input is coded as {got} ({coder:?}); \
         declare the element type before the write, e.g. beam.Map(...).with_output_types(typing.Tuple[{k}, {v}])",
        k = want(write.key_format()),
        v = want(write.value_format()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::row::Value;
    use pb::AtomicType as A;

    fn request(
        urn: &str,
        fields: Vec<(&str, pb::FieldType, Value)>,
        inputs: &[(&str, &str)],
        components: pb::Components,
    ) -> ExpansionRequest {
        let schema = schema::new("cfg", fields.iter().map(|(n, t, _)| (*n, t.clone())).collect());
        let values: Vec<Value> = fields.into_iter().map(|(_, _, v)| v).collect();
        let mut payload = Vec::new();
        row::encode(&schema, &values, &mut payload).unwrap();
        let config = pb::ExternalConfigurationPayload { schema: Some(schema), payload };
        ExpansionRequest {
            components: Some(components),
            transform: Some(pb::PTransform {
                unique_name: "Read".into(),
                spec: Some(pb::FunctionSpec { urn: urn.into(), payload: config.encode_to_vec() }),
                inputs: inputs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
                ..Default::default()
            }),
            namespace: "external_1".into(),
            // As Python's SDK sends them.
            pipeline_options: Some(Default::default()),
            ..Default::default()
        }
    }

    fn strings() -> pb::FieldType {
        schema::map(schema::atomic(A::String, false), schema::atomic(A::String, false), false)
    }

    fn config(key: &str) -> Value {
        Value::Map(vec![(Value::String(key.into()), Value::String("localhost:9092".into()))])
    }

    #[test]
    fn a_read_expands_to_our_primitive_with_a_nullable_kv_output() {
        let req = request(
            JAVA_READ_WITHOUT_METADATA,
            vec![
                ("consumer_config", strings(), config("bootstrap.servers")),
                ("topics", schema::array(schema::atomic(A::String, false), false), Value::List(vec![Value::String("in".into())])),
                ("max_num_records", schema::atomic(A::Int64, true), Value::Int(5)),
            ],
            &[],
            pb::Components::default(),
        );
        let resp = expand(&req).unwrap();
        let t = resp.transform.unwrap();
        assert_eq!(t.spec.as_ref().unwrap().urn, urns::KAFKA_READ);
        let spec = KafkaReadSpec::decode(t.spec.unwrap().payload.as_slice()).unwrap();
        assert_eq!(spec.topics, ["in"]);
        let components = resp.components.unwrap();
        let out = &components.pcollections[t.outputs.values().next().unwrap()];
        assert_eq!(out.is_bounded, pb::is_bounded::Enum::Bounded as i32);
        let coder = Coder::from_components(&components, &out.coder_id);
        assert_eq!(coder, Coder::Kv(Box::new(Coder::Nullable(Box::new(Coder::Bytes))), Box::new(Coder::Nullable(Box::new(Coder::Bytes)))));
        assert!(components.coders.keys().chain(components.pcollections.keys()).all(|id| id.starts_with("external_1")));
    }

    #[test]
    fn a_write_checks_its_input_coder() {
        let mut components = pb::Components::default();
        add_coder(&mut components, "b".into(), urns::CODER_BYTES, &[], vec![]);
        add_coder(&mut components, "kv".into(), KV, &["b", "b"], vec![]);
        add_coder(&mut components, "pickled".into(), "beam:coder:pickled_python:v1", &[], vec![]);
        for (id, coder) in [("good", "kv"), ("bad", "pickled")] {
            components.pcollections.insert(id.into(), pb::PCollection { coder_id: coder.into(), ..Default::default() });
        }
        let fields = || {
            vec![
                ("producer_config", strings(), config("bootstrap.servers")),
                ("topic", schema::atomic(A::String, false), Value::String("out".into())),
            ]
        };
        let resp = expand(&request(JAVA_WRITE, fields(), &[("input", "good")], components.clone())).unwrap();
        let t = resp.transform.unwrap();
        assert_eq!(t.spec.unwrap().urn, urns::KAFKA_WRITE);
        assert_eq!(t.inputs["input"], "good");
        assert_eq!(t.outputs.len(), 1, "Python's SDK would drop a primitive of no output");
        let err = expand(&request(JAVA_WRITE, fields(), &[("input", "bad")], components.clone())).unwrap_err();
        assert!(err.contains("with_output_types") && err.contains("pickled_python"), "{err}");
        // Go's SDK expects a write of no output.
        let go = pb::Environment {
            capabilities: vec![format!("{}apache/beam_go_sdk:2.73.0", crate::plan::sdk_version::SDK_BASE_PREFIX)],
            ..Default::default()
        };
        let mut from_go = components.clone();
        from_go.environments.insert("go".into(), go);
        let t = expand(&request(JAVA_WRITE, fields(), &[("input", "good")], from_go)).unwrap().transform.unwrap();
        assert!(t.outputs.is_empty());
        // Go's request as its SDK sends it: no environment, no options.
        let bare = ExpansionRequest { pipeline_options: None, ..request(JAVA_WRITE, fields(), &[("input", "good")], components) };
        assert!(expand(&bare).unwrap().transform.unwrap().outputs.is_empty());
    }

    #[test]
    fn an_unknown_transform_is_refused_by_name() {
        let req = request("beam:transform:org.apache.beam:pubsub_read:v1", vec![], &[], pb::Components::default());
        assert!(expand(&req).unwrap_err().contains("pubsub_read"));
    }
}
