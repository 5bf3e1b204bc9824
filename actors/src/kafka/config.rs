//! Client configuration shared by every Kafka client of a job. Every client
//! the runner creates starts from [`base`], so the user's `--kafka_property`
//! settings (TLS, SASL, timeouts) reach all of them. The runner's own
//! defaults give way to the user's; only the properties it owns (refused at
//! option parsing: `group.id`, `isolation.level`, …) are always its own.
use beam_kafka_config::{ProcessingGuarantee, RunnerOptions};
use rdkafka::ClientConfig;

/// Sets `key` unless the user's properties did.
fn default(c: &mut ClientConfig, opts: &RunnerOptions, key: &str, value: impl Into<String>) {
    if !opts.kafka_properties.iter().any(|(k, _)| k == key) {
        c.set(key, value);
    }
}

/// The job consumer's: a consumer's, plus librdkafka's statistics every 5 s
/// (`JobContext::stats` takes the partitions' ends from them, for lag;
/// other clients would only log them).
pub fn job_consumer(opts: &RunnerOptions) -> ClientConfig {
    let mut c = consumer(opts);
    default(&mut c, opts, "statistics.interval.ms", "5000");
    c
}

/// The base configuration: brokers, client id, the runner's defaults and the
/// user's extra properties.
pub fn base(opts: &RunnerOptions, role: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &opts.bootstrap_servers).set("client.id", format!("{}-{role}", opts.application_id));
    for (k, v) in &opts.kafka_properties {
        c.set(k, v);
    }
    // Fail fast on an unreachable broker instead of retrying forever.
    default(&mut c, opts, "socket.connection.setup.timeout.ms", "10000");
    default(&mut c, opts, "log_level", "3");
    // Every client connects to the brokers as it is created. With sparse
    // connections librdkafka connects lazily, on timers: a new client's
    // first metadata answer took ~53 ms on localhost instead of ~5, a
    // group join ~50 ms instead of ~15, and an idempotent producer's id
    // ~0.5 s (it retries on a 500 ms timer).
    default(&mut c, opts, "enable.sparse.connections", "false");
    // The first wait before a request is retried, doubling up to
    // retry.backoff.max.ms (1 s). librdkafka's 100 ms made one cycle in
    // three of a new transactional producer wait ~100 ms for its first
    // writes' acknowledgements (a retried transaction or metadata request).
    default(&mut c, opts, "retry.backoff.ms", "10");
    c
}

/// The consumer of a job's input topics; offsets are committed by the tasks.
pub fn consumer(opts: &RunnerOptions) -> ClientConfig {
    let mut c = base(opts, "consumer");
    c.set("group.id", &opts.application_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // Runner topics are read from their start; sources start where
        // their offsets were seeded or committed.
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", opts.session_timeout_ms.to_string())
        // Eager rebalancing: a change revokes every partition, so every task
        // restarts from its commit, and the poll loop may drop what it took
        // before the change (incremental protocols would keep tasks running
        // across it, and those records would be skipped).
        .set("group.protocol", "classic")
        .set("partition.assignment.strategy", "range,roundrobin")
        .set(
            "isolation.level",
            match opts.processing_guarantee {
                ProcessingGuarantee::ExactlyOnce => "read_committed",
                ProcessingGuarantee::AtLeastOnce => "read_uncommitted",
            },
        );
    // A survivor learns of a rebalance at its next heartbeat: frequent
    // heartbeats make a dead copy's work move soon after its session ends
    // (one small request per copy every 100 ms).
    default(&mut c, opts, "heartbeat.interval.ms", (opts.session_timeout_ms / 3).min(100).to_string());
    // librdkafka keeps one fetch in flight per broker: a partition resumed
    // while a long-poll for idle partitions waits (500 ms by default) is
    // fetched only when that returns, so this bounds how soon a started task
    // sees its input (up to 50 ms of a batch job's start-up at 50). An idle
    // copy asks each broker 50 times a second.
    default(&mut c, opts, "fetch.wait.max.ms", "20");
    c
}

/// The largest record the runner writes to its own topics (their
/// `max.message.bytes`, and its producers' `message.max.bytes`): a
/// GroupByKey key, a side input element or a state entry may exceed Kafka's
/// 1 MB default. Consumers take a larger record whole (librdkafka returns
/// a first batch over `fetch.max.bytes` anyway).
pub const RUNNER_RECORD_MAX_BYTES: usize = 64 << 20;

/// The idempotent producer of bootstrap records (and, with a transactional
/// id, of a task).
pub fn producer(opts: &RunnerOptions) -> ClientConfig {
    let mut c = base(opts, "producer");
    c.set("enable.idempotence", "true");
    // Room for one record of RUNNER_RECORD_MAX_BYTES and its batch header.
    default(&mut c, opts, "message.max.bytes", (RUNNER_RECORD_MAX_BYTES + (64 << 10)).to_string());
    default(&mut c, opts, "message.timeout.ms", "30000");
    c
}

/// A WriteToKafka producer: the runner's client properties when it writes
/// to the runner's own cluster (they are that cluster's credentials), then
/// the transform's `producer_config`, which wins.
pub fn sink_producer(opts: &RunnerOptions, same_cluster: bool, producer_config: &[(&str, &str)]) -> ClientConfig {
    let mut c = if same_cluster {
        base(opts, "sink")
    } else {
        let mut c = ClientConfig::new();
        c.set("client.id", format!("{}-sink", opts.application_id))
            .set("socket.connection.setup.timeout.ms", "10000")
            .set("log_level", "3");
        c
    };
    // Java-compatible key partitioning: a key lands where a Java producer puts it.
    c.set("partitioner", "murmur2_random").set("enable.idempotence", "true");
    if c.get("message.timeout.ms").is_none() {
        c.set("message.timeout.ms", "30000");
    }
    for (k, v) in producer_config {
        c.set(*k, *v);
    }
    // A missing topic must be an error, never created by a metadata request.
    c.set("allow.auto.create.topics", "false");
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use beam_kafka_config::OptionValue;

    fn options(properties: &[&str]) -> RunnerOptions {
        let list = OptionValue::List(properties.iter().map(|p| OptionValue::String(p.to_string())).collect());
        let values = [
            ("application_id".to_string(), OptionValue::String("app".into())),
            ("bootstrap_servers".to_string(), OptionValue::String("broker:9093".into())),
            ("kafka_property".to_string(), list),
        ]
        .into();
        RunnerOptions::parse(&values).expect("valid options")
    }

    const USER: &[&str] = &[
        "security.protocol=SASL_SSL",
        "sasl.mechanism=SCRAM-SHA-512",
        "sasl.username=alice",
        "sasl.password=s3cret",
        "message.timeout.ms=120000",
        "fetch.wait.max.ms=200",
        "heartbeat.interval.ms=1000",
        "socket.connection.setup.timeout.ms=30000",
        "retry.backoff.ms=250",
        "enable.sparse.connections=true",
    ];

    #[test]
    fn every_client_gets_the_users_properties_and_they_win_over_defaults() {
        let opts = options(USER);
        let clients = [
            ("base", base(&opts, "x")),
            ("consumer", consumer(&opts)),
            ("producer", producer(&opts)),
            ("sink on the runner's cluster", sink_producer(&opts, true, &[])),
        ];
        for (name, c) in &clients {
            for p in USER {
                let (k, v) = p.split_once('=').unwrap();
                // A property only one kind of client knows still reaches all.
                assert_eq!(c.get(k), Some(v), "{name}: {k}");
            }
            assert_eq!(c.get("bootstrap.servers"), Some("broker:9093"), "{name}");
        }
        let c = consumer(&opts);
        assert_eq!((c.get("group.id"), c.get("isolation.level")), (Some("app"), Some("read_committed")), "owned ones stay");
    }

    #[test]
    fn runner_clients_connect_at_once_and_retry_soon_unless_the_user_says_otherwise() {
        let opts = options(&[]);
        for (name, c) in [("base", base(&opts, "x")), ("consumer", consumer(&opts)), ("producer", producer(&opts))] {
            assert_eq!(c.get("enable.sparse.connections"), Some("false"), "{name}");
            assert_eq!(c.get("retry.backoff.ms"), Some("10"), "{name}");
        }
        assert_eq!(consumer(&opts).get("fetch.wait.max.ms"), Some("20"));
    }

    #[test]
    fn a_sink_layers_its_own_config_on_top_and_elsewhere_gets_none_of_the_runners() {
        let opts = options(USER);
        let c = sink_producer(&opts, true, &[("sasl.username", "bob"), ("linger.ms", "5")]);
        assert_eq!((c.get("sasl.username"), c.get("linger.ms")), (Some("bob"), Some("5")));
        assert_eq!(c.get("allow.auto.create.topics"), Some("false"));
        let other = sink_producer(&opts, false, &[("bootstrap.servers", "other:9092")]);
        assert_eq!(other.get("sasl.password"), None, "another cluster's credentials are its own");
        assert_eq!(other.get("bootstrap.servers"), Some("other:9092"));
    }

    #[test]
    fn runner_owned_properties_are_refused_with_what_to_use_instead() {
        for (p, hint) in [
            ("group.id=g", "application id"),
            ("session.timeout.ms=1", "--session_timeout_ms"),
            ("auto.offset.reset=latest", "consumer_config"),
        ] {
            let list = OptionValue::List(vec![OptionValue::String(p.into())]);
            let values = [("application_id".to_string(), OptionValue::String("app".into())), ("kafka_property".to_string(), list)].into();
            let errors = RunnerOptions::parse(&values).unwrap_err();
            assert!(errors.iter().any(|e| e.to_string().contains(hint)), "{p}: {errors:?}");
        }
    }
}
