//! Pipeline options over the Job API: the `Struct` an SDK sends, and the
//! descriptors `DescribePipelineOptions` advertises.
use std::collections::BTreeMap;

use beam_kafka_config::{OptionKind, OptionValue, OPTIONS};
use beam_kafka_proto::job_management as jm;
use prost_types::{value::Kind, Struct, Value};

/// `beam:option:<name>:v1` → `<name>`.
fn option_name(key: &str) -> Option<&str> {
    key.strip_prefix("beam:option:").and_then(|k| k.strip_suffix(":v1"))
}

/// The Go SDK's flags inside `beam:option:go_options:v1` (`{"options": {..}}`).
pub fn go_flags_mut(s: &mut Struct) -> Option<&mut Struct> {
    let go = match s.fields.get_mut("beam:option:go_options:v1")?.kind.as_mut()? {
        Kind::StructValue(go) => go,
        _ => return None,
    };
    match go.fields.get_mut("options")?.kind.as_mut()? {
        Kind::StructValue(flags) => Some(flags),
        _ => None,
    }
}

/// The options with secrets hidden: every `--kafka_property` holding one
/// (the runner's client credentials, which no SDK needs) and, when
/// `secret_names`, every option whose name says it holds one (for answers
/// to Job API clients; the harness still gets the user's own options).
pub fn redacted(s: &Struct, secret_names: bool) -> Struct {
    use beam_kafka_config::secrets::{is_secret, redact_entry, REDACTED};
    let hide = |v: &Value| -> Value {
        match &v.kind {
            Some(Kind::StringValue(e)) => Value { kind: Some(Kind::StringValue(redact_entry(e))) },
            Some(Kind::ListValue(l)) => Value {
                kind: Some(Kind::ListValue(prost_types::ListValue {
                    values: l
                        .values
                        .iter()
                        .map(|x| match &x.kind {
                            Some(Kind::StringValue(e)) => Value { kind: Some(Kind::StringValue(redact_entry(e))) },
                            _ => x.clone(),
                        })
                        .collect(),
                })),
            },
            _ => v.clone(),
        }
    };
    let fields = s
        .fields
        .iter()
        .map(|(k, v)| {
            let name = option_name(k).unwrap_or(k);
            let v = if name == "kafka_property" {
                hide(v)
            } else if secret_names && is_secret(name) {
                Value { kind: Some(Kind::StringValue(REDACTED.into())) }
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect();
    let mut out = Struct { fields };
    // The Go SDK's flags are options too.
    if let Some(flags) = go_flags_mut(&mut out) {
        *flags = redacted(flags, secret_names);
    }
    out
}

fn convert(v: &Value) -> OptionValue {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => OptionValue::Null,
        Some(Kind::BoolValue(b)) => OptionValue::Bool(*b),
        Some(Kind::NumberValue(n)) => OptionValue::Number(*n),
        Some(Kind::StringValue(s)) => OptionValue::String(s.clone()),
        Some(Kind::ListValue(l)) => OptionValue::List(l.values.iter().map(convert).collect()),
        Some(Kind::StructValue(s)) => OptionValue::Map(s.fields.iter().map(|(k, v)| (k.clone(), convert(v))).collect()),
    }
}

/// The options of a job by plain name. Keys without the `beam:option:` form
/// (older SDKs) are kept as they are. The Go SDK sends the flags a program
/// defines as texts inside `beam:option:go_options:v1` (`{"options": {..}}`);
/// they count where no option of the same name was sent directly.
pub fn from_struct(s: &Struct) -> BTreeMap<String, OptionValue> {
    let mut out: BTreeMap<String, OptionValue> =
        s.fields.iter().map(|(k, v)| (option_name(k).unwrap_or(k).to_string(), convert(v))).collect();
    let go_flags = s.fields.get("beam:option:go_options:v1").and_then(|v| match &v.kind {
        Some(Kind::StructValue(go)) => go.fields.get("options"),
        _ => None,
    });
    if let Some(Value { kind: Some(Kind::StructValue(flags)) }) = go_flags {
        for (name, v) in &flags.fields {
            out.entry(name.clone()).or_insert_with(|| convert(v));
        }
    }
    out
}

/// A string option as sent, if present.
pub fn text(s: &Struct, name: &str) -> Option<String> {
    from_struct(s).get(name).and_then(OptionValue::as_text)
}

pub fn descriptors() -> Vec<jm::PipelineOptionDescriptor> {
    OPTIONS
        .iter()
        .map(|o| jm::PipelineOptionDescriptor {
            name: o.name.to_string(),
            r#type: match o.kind {
                OptionKind::String => jm::pipeline_option_type::Enum::String,
                OptionKind::Integer => jm::pipeline_option_type::Enum::Integer,
                OptionKind::Boolean => jm::pipeline_option_type::Enum::Boolean,
                OptionKind::Array => jm::pipeline_option_type::Enum::Array,
            } as i32,
            description: o.description.to_string(),
            default_value: o.default.unwrap_or_default().to_string(),
            group: "beam-kafka".to_string(),
        })
        .collect()
}

/// Fills in what a submission left out and this job server can choose: an
/// application id from the job's name, and the server's own Kafka servers
/// (`--default-bootstrap-servers`). Returns what it chose, for the job's
/// log.
pub fn fill_defaults(opts: &mut Struct, job_name: &str, default_bootstrap: Option<&str>) -> Vec<String> {
    let given = from_struct(opts);
    let missing = |name: &str| !matches!(given.get(name), Some(OptionValue::String(v)) if !v.is_empty());
    let mut chosen = Vec::new();
    let mut set = |name: &str, value: String| {
        opts.fields.insert(format!("beam:option:{name}:v1"), Value { kind: Some(Kind::StringValue(value)) });
    };
    if missing("application_id") {
        let id = beam_kafka_config::defaults::application_id_from_job_name(job_name);
        chosen.push(format!(
            "no --application_id was given: the job runs as application '{id}', from its name; only a run given \
             --application_id resumes an earlier run's state and offsets"
        ));
        set("application_id", id);
    }
    if let Some(servers) = default_bootstrap.filter(|_| missing("bootstrap_servers")) {
        chosen.push(format!("no --bootstrap_servers was given: the job uses this job server's Kafka, {servers}"));
        set("bootstrap_servers", servers.to_string());
    }
    chosen
}

/// Whether every SDK environment of the pipeline is Java's: a Java program
/// submitted it (a Python pipeline with Java transforms has Python's too).
pub fn submitted_from_java(pipeline: &beam_kafka_proto::pipeline::Pipeline) -> bool {
    let sdks: Vec<String> = pipeline
        .components
        .iter()
        .flat_map(|c| c.environments.values())
        .filter_map(beam_kafka_runtime::plan::sdk_version::sdk_of)
        .collect();
    !sdks.is_empty() && sdks.iter().all(|s| s == "Java")
}

/// Everything Prepare checks, in one place for the Job API and `run`: the
/// options parse, and the pipeline (combiners lifted first) can run here.
/// Every problem is returned at once.
pub fn check_submission(
    pipeline: &mut beam_kafka_proto::pipeline::Pipeline,
    opts: &Struct,
) -> Result<beam_kafka_config::RunnerOptions, Vec<String>> {
    use beam_kafka_runtime::plan::validate::{validate, validate_kafka_clusters};
    // Nothing below walks a pipeline whose composites or coders loop.
    beam_kafka_runtime::plan::structure::check(pipeline).map_err(|e| vec![format!("malformed pipeline: {e}")])?;
    // Ids that a changed pipeline keeps (state is keyed by them). Java
    // writes its ids so already (by unique name): its pipelines stay as sent.
    if !submitted_from_java(pipeline) {
        beam_kafka_runtime::plan::stable_ids::rename(pipeline);
    }
    // Combine before the shuffle where the client did not (streaming).
    beam_kafka_runtime::plan::lift::lift_combiners(pipeline);
    // Splittable DoFns run as pair → split → (edge topic) → process.
    beam_kafka_runtime::plan::sdf::expand_splittable(pipeline);
    let mut problems = Vec::new();
    let runner_options = match beam_kafka_config::RunnerOptions::parse(&from_struct(opts)) {
        Ok(o) => Some(o),
        Err(errors) => {
            problems.extend(errors.iter().map(|e| e.to_string()));
            None
        }
    };
    problems.extend(validate(pipeline).iter().map(|u| u.to_string()));
    if let Some(o) = &runner_options {
        problems.extend(validate_kafka_clusters(pipeline, &o.bootstrap_servers).iter().map(|u| u.to_string()));
    }
    match runner_options {
        Some(o) if problems.is_empty() => Ok(o),
        _ => Err(problems),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_hidden_from_answers() {
        let text = |s: &str| Value { kind: Some(Kind::StringValue(s.into())) };
        let mut s = Struct::default();
        let list = prost_types::ListValue { values: vec![text("sasl.password=PLANTED"), text("sasl.username=alice")] };
        s.fields.insert("beam:option:kafka_property:v1".into(), Value { kind: Some(Kind::ListValue(list)) });
        s.fields.insert("beam:option:db_password:v1".into(), text("PLANTED"));
        s.fields.insert("beam:option:application_id:v1".into(), text("app"));
        let to_client = format!("{:?}", redacted(&s, true));
        assert!(!to_client.contains("PLANTED") && to_client.contains("alice") && to_client.contains("app"), "{to_client}");
        let to_harness = format!("{:?}", redacted(&s, false));
        assert_eq!(to_harness.matches("PLANTED").count(), 1, "the user's own option stays: {to_harness}");
        // Go flags: nested in go_options.
        let mut go = Struct::default();
        go.fields.insert("options".into(), Value { kind: Some(Kind::StructValue(s.clone())) });
        let mut outer = Struct::default();
        outer.fields.insert("beam:option:go_options:v1".into(), Value { kind: Some(Kind::StructValue(go)) });
        let to_client = format!("{:?}", redacted(&outer, true));
        assert!(!to_client.contains("PLANTED") && to_client.contains("alice"), "{to_client}");
    }

    #[test]
    fn struct_keys_are_unwrapped_and_values_converted() {
        let mut s = Struct::default();
        s.fields.insert("beam:option:application_id:v1".into(), Value { kind: Some(Kind::StringValue("app".into())) });
        s.fields.insert("beam:option:streaming:v1".into(), Value { kind: Some(Kind::BoolValue(true)) });
        let m = from_struct(&s);
        assert_eq!(m["application_id"], OptionValue::String("app".into()));
        assert_eq!(m["streaming"], OptionValue::Bool(true));
        assert_eq!(text(&s, "application_id").as_deref(), Some("app"));
    }

    #[test]
    fn go_flags_count_where_no_option_was_sent_directly() {
        let text_value = |t: &str| Value { kind: Some(Kind::StringValue(t.into())) };
        let mut flags = Struct::default();
        flags.fields.insert("bootstrap_servers".into(), text_value("broker:9092"));
        flags.fields.insert("application_id".into(), text_value("from-go-flags"));
        let mut go = Struct::default();
        go.fields.insert("options".into(), Value { kind: Some(Kind::StructValue(flags)) });
        let mut s = Struct::default();
        s.fields.insert("beam:option:go_options:v1".into(), Value { kind: Some(Kind::StructValue(go)) });
        s.fields.insert("beam:option:application_id:v1".into(), text_value("direct"));
        let m = from_struct(&s);
        assert_eq!(m["bootstrap_servers"], OptionValue::String("broker:9092".into()));
        assert_eq!(m["application_id"], OptionValue::String("direct".into()));
    }

    #[test]
    fn missing_identity_and_servers_are_filled_in_and_given_ones_kept() {
        let text_value = |t: &str| Value { kind: Some(Kind::StringValue(t.into())) };
        let mut empty = Struct::default();
        let chosen = fill_defaults(&mut empty, "go-job-1-42", Some("kafka:9092"));
        assert_eq!(chosen.len(), 2, "{chosen:?}");
        assert_eq!(text(&empty, "application_id").as_deref(), Some("go-job-1-42"));
        assert_eq!(text(&empty, "bootstrap_servers").as_deref(), Some("kafka:9092"));
        // Given ones stay, also as Go flags.
        let mut flags = Struct::default();
        flags.fields.insert("application_id".into(), text_value("mine"));
        let mut go = Struct::default();
        go.fields.insert("options".into(), Value { kind: Some(Kind::StructValue(flags)) });
        let mut given = Struct::default();
        given.fields.insert("beam:option:go_options:v1".into(), Value { kind: Some(Kind::StructValue(go)) });
        given.fields.insert("beam:option:bootstrap_servers:v1".into(), text_value("other:9092"));
        assert!(fill_defaults(&mut given, "job", Some("kafka:9092")).is_empty());
        assert_eq!(from_struct(&given)["application_id"], OptionValue::String("mine".into()));
        assert_eq!(text(&given, "bootstrap_servers").as_deref(), Some("other:9092"));
        // Without a server default, the runner's own default applies later.
        let mut none = Struct::default();
        assert_eq!(fill_defaults(&mut none, "job", None).len(), 1);
        assert_eq!(text(&none, "bootstrap_servers"), None);
    }

    #[test]
    fn every_option_is_advertised_with_its_type() {
        let d = descriptors();
        assert_eq!(d.len(), OPTIONS.len());
        let app = d.iter().find(|o| o.name == "application_id").unwrap();
        assert_eq!(app.default_value, "");
        let par = d.iter().find(|o| o.name == "internal_parallelism").unwrap();
        assert_eq!(par.r#type, jm::pipeline_option_type::Enum::Integer as i32);
        assert_eq!(par.default_value, "1");
    }
}
