//! Kafka clients: configuration, topic administration, the producer every
//! write goes through, transactions, group membership, and their errors
//! judged by code (`failure`).
pub mod admin;
pub mod config;
pub mod context;
pub mod failure;
pub mod producer;
mod producer_poll;
pub mod rebalance;
pub mod transaction;

/// The end offset of a partition as the consumer last saw it in a fetch
/// response (librdkafka's cached high watermark; no broker round trip).
/// `None` until a fetch has reported one.
pub fn cached_high_watermark(consumer: &rebalance::JobConsumer, topic: &str, partition: i32) -> Option<i64> {
    use rdkafka::consumer::Consumer;
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is valid while `consumer` lives; librdkafka
    // only reads the topic string and writes the two out-parameters.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(consumer.client().native_ptr(), topic.as_ptr(), partition, &mut low, &mut high)
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}

/// Partition count of `topic` as the brokers answer `client` now (a
/// metadata request, never librdkafka's cache), `None` if it does not exist.
pub fn partition_count<C, K>(client: &K, topic: &str, timeout: std::time::Duration) -> Result<Option<u32>, String>
where
    C: rdkafka::consumer::ConsumerContext,
    K: rdkafka::consumer::Consumer<C>,
{
    let md = client.fetch_metadata(Some(topic), timeout).map_err(|e| format!("cannot read metadata of topic {topic}: {e}"))?;
    Ok(md.topics().iter().find(|t| t.name() == topic && t.error().is_none()).map(|t| t.partitions().len() as u32))
}

/// Closes Kafka clients on a thread of their own: closing one takes ~100 ms
/// (librdkafka stops its broker threads), which a start-up step need not wait.
pub fn close_in_background<T: Send + 'static>(clients: T) {
    std::thread::spawn(move || drop(clients));
}
