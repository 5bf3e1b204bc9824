//! Kafka clients: configuration, topic administration, the producer every
//! write goes through, transactions and group membership.
pub mod admin;
pub mod config;
pub mod context;
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

/// Closes Kafka clients on a thread of their own: closing one takes ~100 ms
/// (librdkafka stops its broker threads), which a start-up step need not wait.
pub fn close_in_background<T: Send + 'static>(clients: T) {
    std::thread::spawn(move || drop(clients));
}
