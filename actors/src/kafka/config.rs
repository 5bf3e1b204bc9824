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
    c
}

/// The idempotent producer of bootstrap records.
pub fn producer(opts: &RunnerOptions) -> ClientConfig {
    let mut c = base(opts, "producer");
    c.set("enable.idempotence", "true").set("message.timeout.ms", "30000");
    c
}
