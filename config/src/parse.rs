//! Parsing and validating the options of one job. Every problem is reported at
//! once, each naming its option, so a user can fix them in one go.
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use crate::options::spec;
use crate::value::OptionValue;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessingGuarantee {
    ExactlyOnce,
    AtLeastOnce,
}

/// How the application's consumer group hands partitions between copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupProtocol {
    /// Kafka's classic protocol, eagerly: every change of membership stops
    /// every task of every copy (range assignment).
    Classic,
    /// KIP-848 (brokers 4.0 and later), with the brokers' sticky range
    /// assignor: only the tasks whose partitions move stop.
    Consumer,
}

/// The validated options of one job.
#[derive(Clone, Debug, PartialEq)]
pub struct RunnerOptions {
    pub bootstrap_servers: String,
    pub application_id: String,
    pub internal_parallelism: u32,
    pub topic_replication_factor: u32,
    pub max_bundle_size: u64,
    pub max_bundle_time_ms: u64,
    pub read_max_elements_per_poll: u64,
    pub read_max_poll_time_ms: u64,
    pub read_idle_timeout_ms: u64,
    pub read_checkpoint_num_bundles: u64,
    pub session_timeout_ms: u64,
    pub group_protocol: GroupProtocol,
    /// Copies that keep a warm store of each task they do not run.
    pub num_standby_replicas: u32,
    /// How far behind its changelog a warming store may be and count as warm.
    pub acceptable_recovery_lag: u64,
    /// This copy's static group membership (`group.instance.id`), if any.
    pub group_instance_id: Option<String>,
    pub state_dir: PathBuf,
    pub state_store_memory_mb: u64,
    pub group_by_key_memory_mb: u64,
    pub processing_guarantee: ProcessingGuarantee,
    pub commit_interval_ms: u64,
    /// The watchdog names a task with work and no progress this long (0: never).
    pub stall_warning_ms: u64,
    pub transaction_timeout_ms: u64,
    /// Extra client properties, in the order given.
    pub kafka_properties: Vec<(String, String)>,
    pub keep_runner_topics: bool,
    /// `--update`: take over an earlier version's state.
    pub update: bool,
    /// `--transform_name_mapping`: earlier name → new name ("" drops it).
    pub transform_name_mapping: std::collections::BTreeMap<String, String>,
    /// SDK harnesses per copy; 0: one per core (`harness_count`).
    pub sdk_worker_parallelism: u32,
    /// Beam's own `--streaming` flag.
    pub streaming: bool,
    /// Not an option: the largest record the runner's topics take, learned
    /// from the brokers as a job starts (`None` before: the runner's default).
    pub record_max_bytes: Option<usize>,
}

/// One invalid or missing option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError {
    pub option: String,
    pub message: String,
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--{}: {}", self.option, self.message)
    }
}

/// Client properties the runner sets itself, with what to use instead: a
/// user value would break the runner's guarantees, so it is refused rather
/// than silently overridden.
const RUNNER_OWNED_PROPERTIES: &[(&str, &str)] = &[
    ("partition.assignment.strategy", ASSIGNORS),
    ("group.remote.assignor", ASSIGNORS),
    ("group.protocol", "use --group_protocol"),
    ("bootstrap.servers", "use --bootstrap_servers"),
    ("group.id", "the group is the application id (--application_id)"),
    ("transactional.id", "each task has its own, derived from the application id"),
    ("enable.auto.commit", "tasks commit their offsets with their outputs"),
    ("isolation.level", "it follows --processing_guarantee"),
    ("enable.idempotence", "it follows --processing_guarantee"),
    ("session.timeout.ms", "use --session_timeout_ms"),
    ("group.instance.id", "use --group_instance_id (it names the job's group member; the runner's other clients must not share it)"),
    (
        "auto.offset.reset",
        "runner topics are always read from their start; for a source, set auto.offset.reset in ReadFromKafka's consumer_config",
    ),
];

/// Why the group's assignor is the runner's.
const ASSIGNORS: &str = "a task reads partition p of each of its topics, so the group must assign them together: the runner \
                         uses range assignment (the brokers' range assignor under --group_protocol=consumer); \
                         cooperative-sticky and uniform split a task's partitions between copies";

struct Reader<'a> {
    values: &'a BTreeMap<String, OptionValue>,
    errors: Vec<OptionError>,
}

impl Reader<'_> {
    fn fail(&mut self, option: &str, message: impl Into<String>) {
        self.errors.push(OptionError { option: option.to_string(), message: message.into() });
    }

    fn raw(&self, name: &str) -> Option<&OptionValue> {
        match self.values.get(name) {
            None | Some(OptionValue::Null) => None,
            Some(v) => Some(v),
        }
    }

    fn text(&mut self, name: &str) -> Option<String> {
        let spec = spec(name).expect("known option");
        match self.raw(name) {
            None => spec.default.map(str::to_string),
            Some(v) => match v.as_text() {
                Some(t) => Some(t),
                None => {
                    self.fail(name, format!("expected a {:?} value, got {v:?}", spec.kind));
                    None
                }
            },
        }
    }

    /// An integer in `min..=max`; returns the default (or `min`) after an error
    /// so parsing can go on and report every problem.
    fn int(&mut self, name: &str, min: u64, max: u64) -> u64 {
        let Some(text) = self.text(name) else { return min };
        match text.trim().parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => n,
            Ok(n) => {
                self.fail(name, format!("{n} is out of range: must be between {min} and {max}"));
                min
            }
            Err(_) => {
                self.fail(name, format!("'{text}' is not a whole number"));
                min
            }
        }
    }

    fn bool(&mut self, name: &str) -> bool {
        match self.raw(name) {
            None => spec(name).and_then(|s| s.default) == Some("true"),
            Some(OptionValue::Bool(b)) => *b,
            Some(OptionValue::String(s)) if s == "true" || s == "false" => s == "true",
            Some(v) => {
                self.fail(name, format!("expected true or false, got {v:?}"));
                false
            }
        }
    }

    fn list(&mut self, name: &str) -> Vec<String> {
        match self.raw(name) {
            None => Vec::new(),
            Some(OptionValue::List(items)) => {
                let mut out = Vec::new();
                for item in items.clone() {
                    match item.as_text() {
                        Some(t) => out.push(t),
                        None => self.fail(name, format!("list items must be text, got {item:?}")),
                    }
                }
                out
            }
            // Go sends a repeated flag as a JSON list, one value as itself.
            Some(OptionValue::String(s)) => crate::text_list::json_strings(s).unwrap_or_else(|| vec![s.clone()]),
            Some(v) => {
                self.fail(name, format!("expected a list of key=value texts, got {v:?}"));
                Vec::new()
            }
        }
    }
}

fn check_bootstrap_servers(r: &mut Reader, servers: &str) {
    if servers.trim().is_empty() {
        r.fail("bootstrap_servers", "must name at least one broker as host:port");
        return;
    }
    for entry in servers.split(',').map(str::trim) {
        let ok = entry.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            r.fail("bootstrap_servers", format!("'{entry}' is not host:port"));
        }
    }
}

fn check_application_id(r: &mut Reader, id: Option<&str>) {
    match id {
        None | Some("") => r.fail(
            "application_id",
            "is required: it names the pipeline's consumer group and topics on Kafka; \
             pass e.g. --application_id=my-pipeline",
        ),
        Some(id) if id.len() > 180 => r.fail("application_id", "must be at most 180 characters (topic names derive from it)"),
        // It also names the job's directory under state_dir: "." or ".."
        // would put the job's state (and its deletion) outside it.
        Some(id) if !id.starts_with(|c: char| c.is_ascii_alphanumeric()) => {
            r.fail("application_id", format!("'{id}' must start with a letter or digit"))
        }
        Some(id) if !id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) => r.fail(
            "application_id",
            format!("'{id}' may only contain letters, digits, '.', '_' and '-' (it becomes part of Kafka topic names)"),
        ),
        Some(_) => {}
    }
}

/// Kafka's limits on a group member's name: what a broker would refuse
/// (or a copy would collide on) fails the submission instead.
fn check_group_instance_id(r: &mut Reader, id: Option<&str>) {
    let Some(id) = id else { return };
    if id.is_empty() || id.len() > 249 || !id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
        r.fail("group_instance_id", format!("'{id}' must be 1 to 249 letters, digits, '.', '_' or '-'"));
    }
}

fn parse_properties(r: &mut Reader, entries: Vec<String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in entries {
        match entry.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                let key = k.trim().to_string();
                if let Some((_, instead)) = RUNNER_OWNED_PROPERTIES.iter().find(|(k, _)| *k == key) {
                    r.fail("kafka_property", format!("'{key}' is set by the runner and cannot be overridden: {instead}"));
                } else {
                    out.push((key, v.to_string()));
                }
            }
            _ => r.fail("kafka_property", format!("'{entry}' is not key=value")),
        }
    }
    out
}

impl RunnerOptions {
    /// Parses the options of a job. `values` maps Python option names (without
    /// the `beam:option:` prefix) to their values; unknown names are ignored,
    /// since every SDK sends many options of its own.
    pub fn parse(values: &BTreeMap<String, OptionValue>) -> Result<RunnerOptions, Vec<OptionError>> {
        let mut r = Reader { values, errors: Vec::new() };
        let bootstrap_servers = r.text("bootstrap_servers").unwrap_or_default();
        check_bootstrap_servers(&mut r, &bootstrap_servers);
        let application_id = r.text("application_id");
        check_application_id(&mut r, application_id.as_deref());
        let internal_parallelism = r.int("internal_parallelism", 1, 10_000) as u32;
        let topic_replication_factor = r.int("topic_replication_factor", 1, 32) as u32;
        let max_bundle_size = r.int("max_bundle_size", 1, 100_000_000);
        let max_bundle_time_ms = r.int("max_bundle_time_ms", 1, 86_400_000);
        let read_max_elements_per_poll = r.int("read_max_elements_per_poll", 1, 100_000_000);
        let read_max_poll_time_ms = r.int("read_max_poll_time_ms", 0, 60_000);
        let read_idle_timeout_ms = r.int("read_idle_timeout_ms", 1, 3_600_000);
        let read_checkpoint_num_bundles = r.int("read_checkpoint_num_bundles", 1, 1_000_000);
        let session_timeout_ms = r.int("session_timeout_ms", 1_000, 3_600_000);
        let group_protocol = match r.text("group_protocol").as_deref() {
            Some("classic") | None => GroupProtocol::Classic,
            Some("consumer") => GroupProtocol::Consumer,
            Some(other) => {
                r.fail("group_protocol", format!("'{other}' is not one of classic, consumer"));
                GroupProtocol::Classic
            }
        };
        // (SDKs send the default along, so only another value is the user's.)
        if group_protocol == GroupProtocol::Consumer && session_timeout_ms != 45_000 {
            r.fail(
                "session_timeout_ms",
                "under --group_protocol=consumer the session timeout is the group's, not a client's: set the brokers' \
                 group.consumer.session.timeout.ms (or the group's consumer.session.timeout.ms) instead",
            );
        }
        let num_standby_replicas = r.int("num_standby_replicas", 0, 16) as u32;
        let acceptable_recovery_lag = r.int("acceptable_recovery_lag", 0, i64::MAX as u64);
        let group_instance_id = r.text("group_instance_id");
        check_group_instance_id(&mut r, group_instance_id.as_deref());
        let commit_interval_ms = r.int("commit_interval_ms", 1, 3_600_000);
        let stall_warning_ms = r.int("stall_warning_ms", 0, 86_400_000);
        let transaction_timeout_ms = r.int("transaction_timeout_ms", 1_000, 3_600_000);
        let state_dir = match r.text("state_dir") {
            Some(d) if !d.trim().is_empty() => PathBuf::from(d),
            Some(_) => {
                r.fail("state_dir", "must not be empty");
                PathBuf::new()
            }
            None => std::env::temp_dir().join("beam-kafka"),
        };
        let state_store_memory_mb = r.int("state_store_memory_mb", 8, 1 << 20);
        let group_by_key_memory_mb = r.int("group_by_key_memory_mb", 1, 1 << 20);
        let processing_guarantee = match r.text("processing_guarantee").as_deref() {
            Some("exactly_once") | Some("exactly_once_v2") | None => ProcessingGuarantee::ExactlyOnce,
            Some("at_least_once") => ProcessingGuarantee::AtLeastOnce,
            Some(other) => {
                r.fail("processing_guarantee", format!("'{other}' is not one of exactly_once, at_least_once"));
                ProcessingGuarantee::ExactlyOnce
            }
        };
        let entries = r.list("kafka_property");
        let kafka_properties = parse_properties(&mut r, entries);
        let keep_runner_topics = r.bool("keep_runner_topics");
        let update = r.bool("update");
        let transform_name_mapping = match crate::name_mapping::parse(r.raw("transform_name_mapping")) {
            Ok(m) => m,
            Err(e) => {
                r.fail("transform_name_mapping", e);
                Default::default()
            }
        };
        let sdk_worker_parallelism = r.int("sdk_worker_parallelism", 0, 256) as u32;
        let streaming = matches!(values.get("streaming"), Some(OptionValue::Bool(true)));
        if !r.errors.is_empty() {
            return Err(r.errors);
        }
        Ok(RunnerOptions {
            bootstrap_servers,
            application_id: application_id.unwrap_or_default(),
            internal_parallelism,
            topic_replication_factor,
            max_bundle_size,
            max_bundle_time_ms,
            read_max_elements_per_poll,
            read_max_poll_time_ms,
            read_idle_timeout_ms,
            read_checkpoint_num_bundles,
            session_timeout_ms,
            group_protocol,
            num_standby_replicas,
            acceptable_recovery_lag,
            group_instance_id,
            state_dir,
            state_store_memory_mb,
            group_by_key_memory_mb,
            processing_guarantee,
            commit_interval_ms,
            stall_warning_ms,
            transaction_timeout_ms,
            kafka_properties,
            keep_runner_topics,
            update,
            transform_name_mapping,
            sdk_worker_parallelism,
            streaming,
            record_max_bytes: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{OptionKind, OPTIONS};

    fn opts(pairs: &[(&str, OptionValue)]) -> BTreeMap<String, OptionValue> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }
    fn s(v: &str) -> OptionValue {
        OptionValue::String(v.to_string())
    }
    fn errors_for(pairs: &[(&str, OptionValue)]) -> Vec<OptionError> {
        RunnerOptions::parse(&opts(pairs)).expect_err("should fail")
    }

    #[test]
    fn defaults_apply_when_only_application_id_is_given() {
        let o = RunnerOptions::parse(&opts(&[("application_id", s("app-1"))])).unwrap();
        assert_eq!(o.bootstrap_servers, "localhost:9092");
        assert_eq!(o.application_id, "app-1");
        assert_eq!(o.internal_parallelism, 1);
        assert_eq!(o.max_bundle_size, 10_000);
        assert_eq!(o.max_bundle_time_ms, 5_000);
        assert_eq!(o.read_max_poll_time_ms, 0);
        assert_eq!(o.session_timeout_ms, 45000);
        assert_eq!(o.processing_guarantee, ProcessingGuarantee::ExactlyOnce);
        assert!(o.kafka_properties.is_empty());
        assert!(!o.keep_runner_topics);
        assert!(!o.streaming);
        assert!(o.state_dir.ends_with("beam-kafka"));
        assert_eq!(o.sdk_worker_parallelism, 0, "no client value: one harness per core");
    }

    #[test]
    fn sdk_worker_parallelism_takes_the_clients_value_as_python_sends_it() {
        let o = RunnerOptions::parse(&opts(&[("application_id", s("a")), ("sdk_worker_parallelism", s("3"))])).unwrap();
        assert_eq!(o.sdk_worker_parallelism, 3);
        let errs = errors_for(&[("application_id", s("a")), ("sdk_worker_parallelism", s("1000"))]);
        assert_eq!(errs[0].option, "sdk_worker_parallelism");
    }

    #[test]
    fn missing_application_id_names_the_option() {
        let errs = errors_for(&[]);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].option, "application_id");
        assert!(errs[0].to_string().contains("--application_id"));
    }

    #[test]
    fn integers_arrive_as_strings_from_python() {
        let o = RunnerOptions::parse(&opts(&[
            ("application_id", s("a")),
            ("internal_parallelism", s("4")),
            ("max_bundle_size", OptionValue::Number(7.0)),
        ]))
        .unwrap();
        assert_eq!(o.internal_parallelism, 4);
        assert_eq!(o.max_bundle_size, 7);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let errs = errors_for(&[
            ("internal_parallelism", s("zero")),
            ("max_bundle_size", s("0")),
            ("bootstrap_servers", s("broker-without-port")),
            ("processing_guarantee", s("maybe")),
        ]);
        let names: Vec<_> = errs.iter().map(|e| e.option.as_str()).collect();
        assert_eq!(names, ["bootstrap_servers", "application_id", "internal_parallelism", "max_bundle_size", "processing_guarantee"]);
        assert!(errs[0].message.contains("broker-without-port"));
        assert!(errs[2].message.contains("zero"));
        assert!(errs[3].message.contains("out of range"));
    }

    #[test]
    fn application_id_must_be_usable_in_topic_names() {
        let errs = errors_for(&[("application_id", s("my app/1"))]);
        assert_eq!(errs[0].option, "application_id");
        assert!(errs[0].message.contains("my app/1"));
        assert!(RunnerOptions::parse(&opts(&[("application_id", s("a.b_c-1"))])).is_ok());
    }

    #[test]
    fn a_group_instance_id_is_a_kafka_member_name_and_not_a_client_property() {
        let ok = RunnerOptions::parse(&opts(&[("application_id", s("a")), ("group_instance_id", s("copy-0.beam_1"))])).unwrap();
        assert_eq!(ok.group_instance_id.as_deref(), Some("copy-0.beam_1"));
        for bad in ["", "pod 1", "a/b"] {
            let errs = errors_for(&[("application_id", s("a")), ("group_instance_id", s(bad))]);
            assert_eq!(errs[0].option, "group_instance_id", "{bad}");
        }
        let errs = errors_for(&[("application_id", s("a")), ("kafka_property", OptionValue::List(vec![s("group.instance.id=x")]))]);
        assert!(errs[0].message.contains("--group_instance_id"), "{}", errs[0].message);
    }

    #[test]
    fn application_id_cannot_name_a_directory_outside_the_state_dir() {
        for id in ["..", ".", ".hidden", "-x", "_x"] {
            let errs = errors_for(&[("application_id", s(id))]);
            assert_eq!(errs.len(), 1, "{id}");
            assert!(errs[0].message.contains("must start with a letter or digit"), "{id}: {}", errs[0].message);
        }
        assert!(RunnerOptions::parse(&opts(&[("application_id", s("9lives..x"))])).is_ok());
    }

    #[test]
    fn several_bootstrap_servers_are_checked_one_by_one() {
        let ok = RunnerOptions::parse(&opts(&[("application_id", s("a")), ("bootstrap_servers", s("k1:9092, k2:9093"))]));
        assert!(ok.is_ok());
        let errs = errors_for(&[("application_id", s("a")), ("bootstrap_servers", s("k1:9092,k2:x"))]);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.contains("k2:x"));
    }

    #[test]
    fn kafka_properties_pass_through_but_runner_owned_ones_are_refused() {
        let o = RunnerOptions::parse(&opts(&[
            ("application_id", s("a")),
            ("kafka_property", OptionValue::List(vec![s("security.protocol=SASL_SSL"), s("sasl.jaas.config=a=b")])),
        ]))
        .unwrap();
        assert_eq!(
            o.kafka_properties,
            vec![("security.protocol".to_string(), "SASL_SSL".to_string()), ("sasl.jaas.config".to_string(), "a=b".to_string())]
        );
        let errs = errors_for(&[("application_id", s("a")), ("kafka_property", OptionValue::List(vec![s("group.id=x"), s("novalue")]))]);
        assert_eq!(errs.len(), 2);
        assert!(errs[0].message.contains("group.id"));
        assert!(errs[1].message.contains("novalue"));
        // Go sends a repeated flag as one text, a JSON list.
        let go = RunnerOptions::parse(&opts(&[("application_id", s("a")), ("kafka_property", s(r#"["security.protocol=SSL","b=c=d"]"#))]))
            .unwrap();
        assert_eq!(go.kafka_properties, vec![("security.protocol".into(), "SSL".into()), ("b".to_string(), "c=d".to_string())]);
        let one = RunnerOptions::parse(&opts(&[("application_id", s("a")), ("kafka_property", s("security.protocol=SSL"))])).unwrap();
        assert_eq!(one.kafka_properties, vec![("security.protocol".to_string(), "SSL".to_string())]);
        let errs = errors_for(&[("application_id", s("a")), ("kafka_property", s(r#"["group.id=x","novalue"]"#))]);
        assert_eq!(errs.len(), 2, "{errs:?}");
        let errs = errors_for(&[
            ("application_id", s("a")),
            (
                "kafka_property",
                OptionValue::List(vec![s("partition.assignment.strategy=cooperative-sticky"), s("group.protocol=consumer")]),
            ),
        ]);
        assert_eq!(errs.len(), 2, "the protocol is an option, and the assignor keeps a task's partitions together");
        assert!(errs[0].message.contains("range assignment"), "{errs:?}");
        assert!(errs[1].message.contains("--group_protocol"), "{errs:?}");
    }

    #[test]
    fn the_group_protocol_is_classic_unless_asked_and_its_session_is_the_groups() {
        let classic = RunnerOptions::parse(&opts(&[("application_id", s("a"))])).unwrap();
        assert_eq!(classic.group_protocol, GroupProtocol::Classic);
        let kip848 = RunnerOptions::parse(&opts(&[("application_id", s("a")), ("group_protocol", s("consumer"))])).unwrap();
        assert_eq!(kip848.group_protocol, GroupProtocol::Consumer);
        let errs = errors_for(&[("application_id", s("a")), ("group_protocol", s("cooperative"))]);
        assert!(errs[0].option == "group_protocol" && errs[0].message.contains("classic, consumer"), "{errs:?}");
        let errs = errors_for(&[
            ("application_id", s("a")),
            ("group_protocol", s("consumer")),
            ("session_timeout_ms", OptionValue::Number(10_000.0)),
        ]);
        assert!(errs[0].option == "session_timeout_ms" && errs[0].message.contains("group.consumer.session.timeout.ms"), "{errs:?}");
    }

    #[test]
    fn booleans_and_streaming() {
        let o = RunnerOptions::parse(&opts(&[
            ("application_id", s("a")),
            ("keep_runner_topics", OptionValue::Bool(true)),
            ("streaming", OptionValue::Bool(true)),
            ("processing_guarantee", s("at_least_once")),
        ]))
        .unwrap();
        assert!(o.keep_runner_topics);
        assert!(o.streaming);
        assert_eq!(o.processing_guarantee, ProcessingGuarantee::AtLeastOnce);
        let errs = errors_for(&[("application_id", s("a")), ("keep_runner_topics", s("yes"))]);
        assert_eq!(errs[0].option, "keep_runner_topics");
    }

    #[test]
    fn the_table_is_consistent() {
        let mut names: Vec<_> = OPTIONS.iter().map(|o| o.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), OPTIONS.len(), "duplicate option names");
        for o in OPTIONS {
            assert!(!o.description.is_empty(), "{} lacks a description", o.name);
            if o.kind == OptionKind::Integer {
                let d = o.default.expect("integer options have defaults");
                assert!(d.parse::<u64>().is_ok(), "{}: default {d}", o.name);
            }
        }
        // Every default must itself pass validation.
        assert!(RunnerOptions::parse(&opts(&[("application_id", s("a"))])).is_ok());
    }
}
