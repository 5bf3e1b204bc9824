//! The table of options. Names are the Python (snake case) spelling, which is
//! how options arrive over the Job API (`beam:option:<name>:v1`); the seed's Java
//! spelling is kept beside each for the docs.

/// The type an option is advertised with; the Python client turns it into an
/// argparse flag (BOOLEAN → store_true, INTEGER → int, ARRAY → append).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionKind {
    String,
    Integer,
    Boolean,
    Array,
}

#[derive(Debug)]
pub struct OptionSpec {
    pub name: &'static str,
    pub java_name: &'static str,
    pub kind: OptionKind,
    /// Default as text; `None` for required options and for defaults computed at
    /// run time (see the description).
    pub default: Option<&'static str>,
    pub description: &'static str,
}

pub static OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "bootstrap_servers",
        java_name: "bootstrapServers",
        kind: OptionKind::String,
        default: Some("localhost:9092"),
        description: "Kafka brokers the application connects to (host:port, comma separated).",
    },
    OptionSpec {
        name: "application_id",
        java_name: "applicationId",
        kind: OptionKind::String,
        default: None,
        description: "Identity of the pipeline on Kafka: the consumer group id, the prefix of every \
                      runner-owned topic (__beam_<id>_...) and of transactional ids. Must be unique per pipeline. \
                      Letters, digits, '.', '_' and '-' only. Without it the job server names the application \
                      after the job, and only a run given it resumes an earlier run.",
    },
    OptionSpec {
        name: "internal_parallelism",
        java_name: "internalParallelism",
        kind: OptionKind::Integer,
        default: Some("1"),
        description: "Partitions of the shuffle topics the runner creates: the parallelism the shuffled parts of \
                      a pipeline can reach.",
    },
    OptionSpec {
        name: "topic_replication_factor",
        java_name: "topicReplicationFactor",
        kind: OptionKind::Integer,
        default: Some("1"),
        description: "Replication factor of the topics the runner creates.",
    },
    OptionSpec {
        name: "max_bundle_size",
        java_name: "maxBundleSize",
        kind: OptionKind::Integer,
        default: Some("10000"),
        description: "Most elements in a bundle sent to the SDK harness. A bundle fills up to it only under a \
                      backlog (a commit's flush closes it sooner otherwise), where large bundles cost the harness \
                      far less per element; a task keeps two bundles (and at most 64 MiB) in flight.",
    },
    OptionSpec {
        name: "max_bundle_time_ms",
        java_name: "maxBundleTimeMs",
        kind: OptionKind::Integer,
        default: Some("5000"),
        description: "Longest time a bundle stays open, in milliseconds (closed by the task's own timer, never by \
                      a racing thread), and how long a commit waits on a running bundle before asking the SDK to \
                      stop it after its current element (the rest is processed after the commit).",
    },
    OptionSpec {
        name: "read_max_elements_per_poll",
        java_name: "readMaxElementsPerPoll",
        kind: OptionKind::Integer,
        default: Some("1000"),
        description: "Records a source task takes from Kafka per poll, separate from max_bundle_size.",
    },
    OptionSpec {
        name: "read_max_poll_time_ms",
        java_name: "readMaxPollTimeMs",
        kind: OptionKind::Integer,
        default: Some("0"),
        description: "Longest time one poll may wait for more records to fill its batch, in milliseconds (0: it takes what \
                      has arrived and hands it over at once).",
    },
    OptionSpec {
        name: "read_idle_timeout_ms",
        java_name: "readIdleTimeoutMs",
        kind: OptionKind::Integer,
        default: Some("1000"),
        description: "A ReadFromKafka partition that is caught up and silent this long moves its event-time watermark to now minus this timeout, so idle partitions do not hold windows back.",
    },
    OptionSpec {
        name: "read_checkpoint_num_bundles",
        java_name: "readCheckpointNumBundles",
        kind: OptionKind::Integer,
        default: Some("10"),
        description: "Bundles of an unbounded source between stores of its checkpoint mark; larger values replay \
                      more after a restart.",
    },
    OptionSpec {
        name: "session_timeout_ms",
        java_name: "sessionTimeoutMs",
        kind: OptionKind::Integer,
        default: Some("45000"),
        description: "Consumer group session timeout in milliseconds: how long the group waits before deciding an \
                      instance has gone. A broker refuses values below its group.min.session.timeout.ms.",
    },
    OptionSpec {
        name: "group_protocol",
        java_name: "groupProtocol",
        kind: OptionKind::String,
        default: Some("classic"),
        description: "How the application's consumer group moves partitions between copies. classic: Kafka's classic \
                      protocol, eagerly (any copy joining or leaving stops every task of every copy for the \
                      rebalance). consumer: KIP-848 (brokers 4.0 or later) with the brokers' range assignor: \
                      only the tasks whose partitions move stop, handing over after committing; the session \
                      timeout and heartbeat interval are then the brokers' group.consumer.* settings.",
    },
    OptionSpec {
        name: "acceptable_recovery_lag",
        java_name: "acceptableRecoveryLag",
        kind: OptionKind::Integer,
        default: Some("10000"),
        description: "With standby replicas, a copy joining an application whose other copies run tasks first \
                      warms a store of each of those tasks from its changelog, and joins the consumer group once \
                      every store is within this many records of its changelog's end (or after 10 minutes), so \
                      a task that moves to it starts at once (Kafka Streams' acceptable.recovery.lag).",
    },
    OptionSpec {
        name: "num_standby_replicas",
        java_name: "numStandbyReplicas",
        kind: OptionKind::Integer,
        default: Some("0"),
        description: "How many other copies keep a warm copy of each task's state, tailing its changelog into their \
                      local state directory, so a task that moves to one of them (its copy killed, stopped or \
                      scaled in) reads only the changelog's last records. The brokers' assignor, not the runner, \
                      picks a task's next copy: with copies - 1 every copy holds every task.",
    },
    OptionSpec {
        name: "group_instance_id",
        java_name: "groupInstanceId",
        kind: OptionKind::String,
        default: None,
        description: "This copy's static membership of the application's consumer group (Kafka's group.instance.id; \
                      one name per copy, e.g. a Kubernetes pod's). A copy restarted under the same name within \
                      session_timeout_ms gets its partitions back without a rebalance, so the other copies' tasks \
                      never stop (a rolling restart); a copy stopped for good hands its partitions over only once \
                      its session times out.",
    },
    OptionSpec {
        name: "state_dir",
        java_name: "stateDir",
        kind: OptionKind::String,
        default: None,
        description: "Directory for local state (RocksDB stores). Default: <system temp dir>/beam-kafka.",
    },
    OptionSpec {
        name: "state_store_memory_mb",
        java_name: "stateStoreMemoryMb",
        kind: OptionKind::Integer,
        default: Some("128"),
        description: "Memory the RocksDB state stores of one process share, in MiB: a block cache, with the \
                      stores' write buffers (at most half of it, flushed when over) charged to it. The first job \
                      of a process sets it.",
    },
    OptionSpec {
        name: "group_by_key_memory_mb",
        java_name: "groupByKeyMemoryMb",
        kind: OptionKind::Integer,
        default: Some("128"),
        description: "Memory the GroupByKeys of a batch job (a bounded input, fired once at the end of each \
                      window) hold in one process, in MiB: above it, panes already committed to the state \
                      store leave memory and are read back from the store when their window closes.",
    },
    OptionSpec {
        name: "processing_guarantee",
        java_name: "processingGuarantee",
        kind: OptionKind::String,
        default: Some("exactly_once"),
        description: "exactly_once (Kafka transactions, read_committed) or at_least_once (lower latency, may \
                      duplicate after a failure).",
    },
    OptionSpec {
        name: "commit_interval_ms",
        java_name: "commitIntervalMs",
        kind: OptionKind::Integer,
        default: Some("100"),
        description: "How often a task commits its progress, in milliseconds (under exactly_once, one Kafka transaction commits a cycle of \
                      every task of a stage in the copy, as often as every half of it while commits are quick).",
    },
    OptionSpec {
        name: "transaction_timeout_ms",
        java_name: "transactionTimeoutMs",
        kind: OptionKind::Integer,
        default: Some("60000"),
        description: "Under exactly_once: how long a copy's transaction may stay open before the broker aborts it \
                      (Kafka's transaction.timeout.ms; the broker caps it at transaction.max.timeout.ms). A cycle \
                      commits every commit_interval_ms whatever the backlog, so a healthy job stays far below it.",
    },
    OptionSpec {
        name: "stall_warning_ms",
        java_name: "stallWarningMs",
        kind: OptionKind::Integer,
        default: Some("120000"),
        description: "A task that has work (records behind, a bundle running, a commit open) and makes no progress \
                      this long is named in the job's messages and log, with what it waits for; 0 turns the \
                      watchdog off.",
    },
    OptionSpec {
        name: "kafka_property",
        java_name: "kafkaProperties",
        kind: OptionKind::Array,
        default: None,
        description: "Extra Kafka client property as key=value, passed to every client the runner creates \
                      (repeatable), e.g. security.protocol=SASL_SSL, sasl.mechanism=PLAIN.",
    },
    OptionSpec {
        name: "job_server_token",
        java_name: "jobServerToken",
        kind: OptionKind::String,
        default: None,
        description: "The job server's token, for clients that cannot send it as gRPC metadata (Python's PortableRunner): \
                      checked at Prepare and expansion, then removed from the job's options.",
    },
    OptionSpec {
        name: "keep_runner_topics",
        java_name: "keepRunnerTopics",
        kind: OptionKind::Boolean,
        default: Some("false"),
        description: "Keep the runner-owned topics of a finished bounded job instead of deleting them.",
    },
    OptionSpec {
        name: "update",
        java_name: "update",
        kind: OptionKind::Boolean,
        default: Some("false"),
        description: "Dataflow's option: this job is a new version of the pipeline running (or stopped) under its \
                      --application_id, and takes over its state where compatible; an incompatible one is refused \
                      naming each transform and why, before anything changes. Stop every copy of the earlier version \
                      first.",
    },
    OptionSpec {
        name: "transform_name_mapping",
        java_name: "transformNameMapping",
        kind: OptionKind::String,
        default: None,
        description: "Dataflow's option, with --update: a JSON object of earlier transform names to new ones, \
                      {\"oldName\":\"newName\"}; a name mapped to \"\" is dropped with its state.",
    },
    OptionSpec {
        name: "sdk_worker_parallelism",
        java_name: "sdkWorkerParallelism",
        kind: OptionKind::Integer,
        default: Some("0"),
        description: "Beam's option: SDK harnesses each copy starts for the job; its tasks are spread over them. \
                      0 means one per core of the machine. The Python SDK sends 1 unless told otherwise, and a \
                      LOOPBACK worker pool runs its harnesses as threads of one process (one core): for more, use \
                      a PROCESS environment (python -m beam_kafka.boot) or KafkaStreamsRunner, whose LOOPBACK \
                      pool starts a process per harness when this is not 1.",
    },
];

/// Looks an option up by its Python name.
pub fn spec(name: &str) -> Option<&'static OptionSpec> {
    OPTIONS.iter().find(|o| o.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Go package's and the Java module's options, as compiled in.
    const GO_OPTIONS: &str = include_str!("../../go/beamkafka/options.go");
    const JAVA_OPTIONS: &str = include_str!("../../java/src/main/java/dev/beamkafka/runner/BeamKafkaPipelineOptions.java");

    fn camel(name: &str) -> String {
        name.split('_').map(|w| w[..1].to_uppercase() + &w[1..]).collect()
    }

    #[test]
    fn the_go_package_and_the_java_module_define_every_option_with_its_kind() {
        for o in OPTIONS {
            let go_kind = match o.kind {
                OptionKind::String => "String",
                OptionKind::Integer => "Integer",
                OptionKind::Boolean => "Boolean",
                OptionKind::Array => "List",
            };
            let go = format!("{{\"{}\", {go_kind}, ", o.name);
            assert!(GO_OPTIONS.contains(&go), "go/beamkafka/options.go lacks {go}");
            // Beam Java sends a getter's property in snake case: getMaxBundleSize → max_bundle_size.
            // sdk_worker_parallelism is PortablePipelineOptions' own.
            if o.name == "sdk_worker_parallelism" {
                continue;
            }
            let java_type = match o.kind {
                OptionKind::String => "String",
                OptionKind::Integer => "Integer",
                OptionKind::Boolean => "Boolean",
                OptionKind::Array => "List<String>",
            };
            let getter = format!("{java_type} get{}();", camel(o.name));
            assert!(JAVA_OPTIONS.contains(&getter), "BeamKafkaPipelineOptions lacks {getter}");
        }
        assert_eq!(GO_OPTIONS.matches("{\"").count(), OPTIONS.len(), "the Go package defines an option the job server lacks");
    }
}
