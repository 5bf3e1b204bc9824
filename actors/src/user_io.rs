//! The user's topics: ReadFromKafka sources and WriteToKafka sinks, made
//! ready before a job's tasks start. Missing topics are errors (the runner
//! never creates a user's topic); a first run's source offsets are seeded
//! where the user asked to start.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::kafka::producer::{self, KafkaProducer, ProducerSlot};
use rdkafka::consumer::BaseConsumer;

use beam_kafka_runtime::kafka::io::same_cluster;
use beam_kafka_runtime::kafka::topic_partition::TopicPartition;

use crate::job_input::JobInput;
use crate::kafka::admin::{Admin, StartAt};
use crate::kafka::config;
use crate::output::KafkaSink;
use crate::source::SourceShared;
use beam_kafka_runtime::kafka::source_growth::{unseeded_start, Unseeded};

/// Consumer properties the runner manages itself; a ReadFromKafka's values
/// for them are read as intentions (where to start, which group to mirror
/// commits to), not copied onto the runner's consumer.
const MANAGED_CONSUMER_KEYS: &[&str] = &[
    "bootstrap.servers",
    // librdkafka's other name for it.
    "metadata.broker.list",
    // The runner's consumers ask for topics that may not exist yet.
    "allow.auto.create.topics",
    "group.id",
    "auto.offset.reset",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "isolation.level",
    "client.id",
    "key.deserializer",
    "value.deserializer",
    "session.timeout.ms",
    // The runner's group keeps a task's partitions together (see
    // `kafka::config::consumer`); its protocol is --group_protocol.
    "partition.assignment.strategy",
    "group.protocol",
    "group.remote.assignor",
];

/// Java client settings that name Java classes; librdkafka has no use for them.
const JAVA_ONLY_PRODUCER_KEYS: &[&str] = &["key.serializer", "value.serializer"];

const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// Sources and sinks of a job, ready to run.
pub struct KafkaIo {
    /// User consumer_config properties added to the runner's consumer.
    pub consumer_properties: Vec<(String, String)>,
    /// By ReadFromKafka transform id.
    pub sources: HashMap<String, Arc<SourceShared>>,
    /// By sub-topology id.
    pub sinks: HashMap<u32, Vec<KafkaSink>>,
    /// Where each source partition starts reading.
    pub start_offsets: HashMap<TopicPartition, i64>,
}

/// Learns the partition counts of source topics (a missing topic is an
/// error), sizes the tasks by them, and seeds first-run offsets. Returns
/// where each source partition starts.
/// `first_run`: the application's first run (only it starts partitions
/// without a commit where the user asked; `runtime::kafka::source_growth`).
pub async fn resolve_sources(admin: &Admin, input: &mut JobInput, first_run: bool) -> Result<HashMap<TopicPartition, i64>, String> {
    let mut counts: HashMap<String, u32> = HashMap::new();
    let mut starts: Vec<(String, StartAt)> = Vec::new();
    for sub in &input.sub_topologies {
        for i in &sub.inputs {
            let Some(src) = &i.source else { continue };
            if counts.contains_key(&i.topic) {
                continue;
            }
            let n = admin.user_topic_partitions(&i.topic).await?.ok_or_else(|| {
                format!(
                    "ReadFromKafka '{}': topic '{}' does not exist on {}; beam-kafka never creates a user's topic, create it first \
                     (e.g. kafka-topics.sh --create --topic {} --partitions N)",
                    src.name, i.topic, input.options.bootstrap_servers, i.topic
                )
            })?;
            counts.insert(i.topic.clone(), n);
            let spec = src.spec();
            let start = match (spec.start_read_time_millis, spec.consumer_config.get("auto.offset.reset").map(String::as_str)) {
                (Some(t), _) => StartAt::Time(t),
                (None, Some("earliest" | "smallest")) => StartAt::Earliest,
                // Kafka's default, as for Beam's Java reader.
                _ => StartAt::Latest,
            };
            starts.push((i.topic.clone(), start));
        }
    }
    let mut start_offsets = HashMap::new();
    if counts.is_empty() {
        return Ok(start_offsets);
    }
    input.plan.resolve_source_partitions(&|t| counts.get(t).copied())?;
    for sub in &mut input.sub_topologies {
        sub.partitions = input.plan.sub_topologies.iter().find(|s| s.id == sub.id).map_or(sub.partitions, |s| s.partitions);
        for i in &mut sub.inputs {
            if let Some(n) = counts.get(&i.topic).filter(|_| i.source.is_some()) {
                i.partitions = *n;
            }
        }
    }
    for (topic, start) in starts {
        // A partition added since the first run: all of it is new.
        let start_for = |has_commits| match unseeded_start(first_run, has_commits) {
            Unseeded::AsAsked => start,
            Unseeded::FromStart => StartAt::Earliest,
        };
        for (p, offset) in admin.seed_offsets(&topic, counts[&topic], start_for).await? {
            start_offsets.insert(TopicPartition::new(topic.clone(), p), offset);
        }
    }
    Ok(start_offsets)
}

/// The client properties ReadFromKafka transforms set for the job's one
/// consumer of their topics (their consumer_config, without what the runner
/// manages); two transforms, or a transform and --kafka_property, that
/// disagree are an error naming both.
pub fn consumer_properties(input: &JobInput) -> Result<Vec<(String, String)>, String> {
    let opts = &input.options;
    let mut out = Vec::new();
    let mut set_by: HashMap<String, (String, String)> = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    for src in input.sub_topologies.iter().flat_map(|s| &s.inputs).filter_map(|i| i.source.as_ref()) {
        if !seen.insert(&src.transform) {
            continue;
        }
        for (k, v) in &src.spec().consumer_config {
            if MANAGED_CONSUMER_KEYS.contains(&k.as_str()) {
                continue;
            }
            let shown = |value: &str| beam_kafka_config::secrets::shown(k, value).to_string();
            if let Some((who, old)) = set_by.get(k).filter(|(_, old)| old != v) {
                return Err(format!(
                    "ReadFromKafka '{}' sets consumer_config '{k}'='{}', but '{who}' sets it to '{}'; \
                     the runner reads every topic with one consumer",
                    src.name,
                    shown(v),
                    shown(old)
                ));
            }
            if opts.kafka_properties.iter().any(|(pk, pv)| pk == k && pv != v) {
                return Err(format!(
                    "ReadFromKafka '{}' sets consumer_config '{k}'='{}', which --kafka_property sets differently",
                    src.name,
                    shown(v)
                ));
            }
            if set_by.insert(k.clone(), (src.name.clone(), v.clone())).is_none() {
                out.push((k.clone(), v.clone()));
            }
        }
    }
    Ok(out)
}

/// Builds the shared state of every source and a producer for every sink.
pub fn start_kafka_io(input: &JobInput) -> Result<KafkaIo, String> {
    let opts = &input.options;
    let mut io = KafkaIo {
        consumer_properties: consumer_properties(input)?,
        sources: HashMap::new(),
        sinks: HashMap::new(),
        start_offsets: HashMap::new(),
    };
    for sub in &input.sub_topologies {
        for i in &sub.inputs {
            let Some(src) = &i.source else { continue };
            if io.sources.contains_key(&src.transform) {
                continue;
            }
            let finalize = if src.spec().commit_offset_in_finalize {
                let group = src.spec().consumer_config.get("group.id").cloned().unwrap_or_default();
                let client: BaseConsumer = config::base(opts, "finalize")
                    .set("group.id", &group)
                    .set("enable.auto.commit", "false")
                    .create()
                    .map_err(|e| format!("ReadFromKafka '{}': cannot create a client of group '{group}': {e}", src.name))?;
                Some(client)
            } else {
                None
            };
            io.sources.insert(src.transform.clone(), Arc::new(SourceShared::new(src.spec(), finalize)));
        }
        let mut sinks = Vec::new();
        for k in &sub.kafka_sinks {
            let producer = sink_producer(opts, k)?;
            check_sink_topic(&producer, &k.name, &k.codec.spec.topic)?;
            sinks.push(KafkaSink {
                sink_transform: k.sink_transform.clone(),
                name: k.name.clone(),
                codec: k.codec.clone(),
                producer: ProducerSlot::new(Arc::new(producer)),
            });
        }
        io.sinks.insert(sub.id, sinks);
    }
    Ok(io)
}

fn sink_producer(
    opts: &beam_kafka_config::RunnerOptions,
    sink: &beam_kafka_runtime::plan::spec::KafkaSinkSpec,
) -> Result<KafkaProducer, String> {
    let own: Vec<(&str, &str)> = sink
        .codec
        .spec
        .producer_config
        .iter()
        .filter(|(k, _)| !JAVA_ONLY_PRODUCER_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let servers = sink.codec.spec.producer_config.get("bootstrap.servers").map(String::as_str).unwrap_or_default();
    let c = config::sink_producer(opts, same_cluster(servers, &opts.bootstrap_servers), &own);
    producer::create(&c).map_err(|e| format!("WriteToKafka '{}': producer_config is not usable: {e}", sink.name))
}

fn check_sink_topic(producer: &KafkaProducer, name: &str, topic: &str) -> Result<(), String> {
    use rdkafka::producer::Producer;
    let md = producer
        .client()
        .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        .map_err(|e| format!("WriteToKafka '{name}': cannot reach the brokers of producer_config to look up topic '{topic}': {e}"))?;
    let exists = md.topics().iter().any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty());
    if !exists {
        return Err(format!(
            "WriteToKafka '{name}': topic '{topic}' does not exist; beam-kafka never creates a user's topic, create it first \
             (e.g. kafka-topics.sh --create --topic {topic} --partitions N)"
        ));
    }
    Ok(())
}
