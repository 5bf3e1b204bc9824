//! Client configuration shared by every Kafka client of a job. Every client
//! the runner creates starts from [`base`], so the user's `--kafka_property`
//! settings (TLS, SASL, timeouts) reach all of them. The runner's own
//! defaults give way to the user's; only the properties it owns (refused at
//! option parsing: `group.id`, `isolation.level`, …) are always its own.
use beam_kafka_config::{GroupProtocol, ProcessingGuarantee, RunnerOptions};
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
    // Static membership: only the group's member carries the name (the
    // admin's consumer of the same group must not, or it would fence it).
    if let Some(id) = &opts.group_instance_id {
        c.set("group.instance.id", id);
    }
    if opts.group_protocol == GroupProtocol::Consumer {
        // KIP-848: the brokers assign (their range assignor gives a copy
        // partition p of every topic of equal size, a task's
        // inputs), and the session is the group's, so librdkafka refuses
        // the classic protocol's membership settings.
        for key in ["session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"] {
            c.remove(key);
        }
        c.set("group.protocol", "consumer").set("group.remote.assignor", "range");
    }
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
    default(&mut c, opts, "receive.message.max.bytes", receive_max_bytes(opts).to_string());
    c
}

/// librdkafka's defaults for what a fetch answer may hold.
const FETCH_MAX_BYTES: u64 = 52_428_800;
const RECEIVE_MAX_BYTES: u64 = 100_000_000;

/// The largest answer a client takes: a fetch holds up to `fetch.max.bytes`
/// and one batch beyond it, which may hold a record of the job's limit.
fn receive_max_bytes(opts: &RunnerOptions) -> u64 {
    let fetch =
        opts.kafka_properties.iter().find(|(k, _)| k == "fetch.max.bytes").and_then(|(_, v)| v.parse().ok()).unwrap_or(FETCH_MAX_BYTES);
    (fetch + batch_max_bytes(opts) as u64 + REQUEST_FRAMING_BYTES).clamp(RECEIVE_MAX_BYTES, i32::MAX as u64)
}

/// A reader of one of the application's own one-partition topics (control,
/// copies), assigned rather than subscribed: `role` names its client and
/// its group (`<application id>-<role>`), which never commits. Asked before
/// the job creates the topic, so a metadata request never creates it.
pub fn topic_reader(opts: &RunnerOptions, role: &str) -> ClientConfig {
    let mut c = base(opts, role);
    c.set("group.id", format!("{}-{role}", opts.application_id))
        .set("enable.auto.commit", "false")
        .set("allow.auto.create.topics", "false");
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
        // Eager rebalancing with range assignment, unless the job's consumer
        // uses KIP-848 (`job_consumer`): every task reads partition p of
        // each of its topics, and range keeps those on one copy.
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

/// A standby's changelog consumer. The brokers hold a read_committed fetch
/// for its whole wait when all that arrived is a commit or abort marker
/// (measured: 500 ms after a fencing's abort with librdkafka's default, 3 ms
/// at 20), so without a short wait a standby stays a marker behind for
/// that long, and the task taking its store over reads the rest itself.
pub fn standby(opts: &RunnerOptions) -> ClientConfig {
    let mut c = base(opts, "standby");
    default(&mut c, opts, "fetch.wait.max.ms", "20");
    c
}

/// The largest record the runner writes to its own topics when the
/// brokers' request limit is unknown: a GroupByKey key, a side input
/// element or a state entry may exceed Kafka's 1 MB default.
pub const DEFAULT_RECORD_MAX_BYTES: usize = 64 << 20;

/// Room a produce request needs beside its one record (headers, batch
/// framing): the record limit is the request limit less this.
const REQUEST_FRAMING_BYTES: u64 = 1 << 20;

/// librdkafka's ceiling for `message.max.bytes`.
const LIBRDKAFKA_MESSAGE_MAX_BYTES: u64 = 1_000_000_000;

/// Room for a batch header around one record of the limit.
const BATCH_HEADER_BYTES: usize = 64 << 10;

/// The largest record that fits a produce request the brokers take (their
/// `socket.request.max.bytes`: a larger request closes the connection and
/// is retried until it times out, so the producer must refuse it first).
pub fn record_max_for_requests(socket_request_max_bytes: u64) -> usize {
    let cap = LIBRDKAFKA_MESSAGE_MAX_BYTES - BATCH_HEADER_BYTES as u64;
    socket_request_max_bytes.saturating_sub(REQUEST_FRAMING_BYTES).clamp(1 << 20, cap) as usize
}

/// The largest record of the job's runner topics: learned from the brokers
/// at the job's start, else [`DEFAULT_RECORD_MAX_BYTES`].
pub fn record_max_bytes(opts: &RunnerOptions) -> usize {
    opts.record_max_bytes.unwrap_or(DEFAULT_RECORD_MAX_BYTES)
}

/// A batch of one record of the limit: the runner topics' `max.message.bytes`
/// and its producers' `message.max.bytes`.
pub fn batch_max_bytes(opts: &RunnerOptions) -> usize {
    record_max_bytes(opts) + BATCH_HEADER_BYTES
}

/// The idempotent producer of bootstrap records (and, with a transactional
/// id, of a task).
pub fn producer(opts: &RunnerOptions) -> ClientConfig {
    let mut c = base(opts, "producer");
    c.set("enable.idempotence", "true");
    default(&mut c, opts, "message.max.bytes", batch_max_bytes(opts).to_string());
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
            ("standby", standby(&opts)),
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
        assert_eq!(standby(&opts).get("fetch.wait.max.ms"), Some("20"), "a standby sees a marker soon");
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
    fn records_are_sized_to_the_brokers_request_limit() {
        let mut opts = options(&[]);
        let number = |c: &ClientConfig, k: &str| -> u64 { c.get(k).unwrap_or_else(|| panic!("{k} unset")).parse().unwrap() };
        assert_eq!(number(&producer(&opts), "message.max.bytes"), (DEFAULT_RECORD_MAX_BYTES + (64 << 10)) as u64, "unknown: the default");
        // Kafka's default request limit, 100 MiB: records up to 99 MiB.
        assert_eq!(record_max_for_requests(100 << 20), 99 << 20);
        assert!(record_max_for_requests(u64::MAX) as u64 + (64 << 10) <= 1_000_000_000, "librdkafka's ceiling");
        assert_eq!(record_max_for_requests(0), 1 << 20);
        opts.record_max_bytes = Some(record_max_for_requests(300 << 20));
        let batch = number(&producer(&opts), "message.max.bytes");
        assert_eq!(batch, (299 << 20) + (64 << 10));
        // A fetch answer holds up to fetch.max.bytes and one batch beyond it.
        assert!(number(&consumer(&opts), "receive.message.max.bytes") >= 52_428_800 + batch);
        let user = options(&["fetch.max.bytes=200000000"]);
        assert!(number(&consumer(&user), "receive.message.max.bytes") >= 200_000_000 + number(&producer(&user), "message.max.bytes"));
        let user = options(&["message.max.bytes=2000000", "receive.message.max.bytes=300000000"]);
        assert_eq!(
            (number(&producer(&user), "message.max.bytes"), number(&consumer(&user), "receive.message.max.bytes")),
            (2_000_000, 300_000_000)
        );
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

    #[test]
    fn the_consumer_protocol_leaves_membership_settings_to_the_group() {
        let mut opts = options(&[]);
        let classic = job_consumer(&opts);
        assert_eq!(classic.get("group.protocol"), Some("classic"));
        assert!(classic.get("session.timeout.ms").is_some() && classic.get("heartbeat.interval.ms").is_some());
        opts.group_protocol = GroupProtocol::Consumer;
        let kip848 = job_consumer(&opts);
        assert_eq!((kip848.get("group.protocol"), kip848.get("group.remote.assignor")), (Some("consumer"), Some("range")));
        for key in ["session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"] {
            assert_eq!(kip848.get(key), None, "{key}: librdkafka refuses it under KIP-848");
        }
        // Other clients of the group never join it: they stay classic.
        assert_eq!(consumer(&opts).get("group.protocol"), Some("classic"));
    }
}
