//! Client configuration shared by every Kafka client of a job.
use beam_kafka_config::{ProcessingGuarantee, RunnerOptions};
use rdkafka::ClientConfig;

/// The base configuration: brokers, client id and the user's extra properties.
pub fn base(opts: &RunnerOptions, role: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &opts.bootstrap_servers)
        .set("client.id", format!("{}-{role}", opts.application_id))
        // Fail fast on an unreachable broker instead of retrying forever.
        .set("socket.connection.setup.timeout.ms", "10000")
        .set("log_level", "3");
    for (k, v) in &opts.kafka_properties {
        c.set(k, v);
    }
    c
}

/// The consumer of a job's input topics; offsets are committed by the tasks.
pub fn consumer(opts: &RunnerOptions) -> ClientConfig {
    let mut c = base(opts, "consumer");
    c.set("group.id", &opts.application_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", opts.session_timeout_ms.to_string())
        // A survivor learns of a rebalance at its next heartbeat: frequent
        // heartbeats make a dead copy's work move soon after its session
        // ends (one small request per copy every 100 ms).
        .set("heartbeat.interval.ms", (opts.session_timeout_ms / 3).min(100).to_string())
        .set(
            "isolation.level",
            match opts.processing_guarantee {
                ProcessingGuarantee::ExactlyOnce => "read_committed",
                ProcessingGuarantee::AtLeastOnce => "read_uncommitted",
            },
        );
    // librdkafka keeps one fetch in flight per broker: a partition resumed
    // while a long-poll for idle partitions waits (500 ms by default) is
    // fetched only when that returns, so this bounds how soon a started task
    // sees its input. A user's own value wins.
    if !opts.kafka_properties.iter().any(|(k, _)| k == "fetch.wait.max.ms") {
        c.set("fetch.wait.max.ms", "50");
    }
    c
}

/// The idempotent producer of bootstrap records.
pub fn producer(opts: &RunnerOptions) -> ClientConfig {
    let mut c = base(opts, "producer");
    c.set("enable.idempotence", "true").set("message.timeout.ms", "30000");
    // An idempotent or transactional producer gets its producer id only from
    // a broker it learned from metadata; with sparse connections librdkafka
    // connects to one lazily and retries on a 500 ms timer, which measured as
    // ~0.5 s on most task starts. A user's own value wins.
    if !opts.kafka_properties.iter().any(|(k, _)| k == "enable.sparse.connections") {
        c.set("enable.sparse.connections", "false");
    }
    c
}
