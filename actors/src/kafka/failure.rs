//! librdkafka's errors as failures that carry their recovery
//! (`runtime::kafka::failure`), judged by their error code.
use beam_kafka_runtime::kafka::failure::Failure;
use rdkafka::error::KafkaError;

/// `e` as a failure, judged by its librdkafka error code; an error without
/// one (a client that could not be created) by the code names its text
/// carries.
pub fn failure(e: &KafkaError) -> Failure {
    match e.rdkafka_error_code() {
        Some(code) => Failure::kafka(&code_name(code), e.to_string()),
        None => Failure::from_text(e.to_string()),
    }
}

/// The code's name as rdkafka spells it (`NotCoordinator`), which is how
/// the runtime's tables name codes.
pub fn code_name(code: rdkafka::types::RDKafkaErrorCode) -> String {
    format!("{code:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use beam_kafka_runtime::kafka::failure::Recovery;
    use rdkafka::types::RDKafkaErrorCode as Code;

    #[test]
    fn the_code_decides_not_the_text() {
        let timed_out = failure(&KafkaError::MessageProduction(Code::MessageTimedOut));
        assert!(matches!(timed_out.recovery, Recovery::Transient { .. }), "{timed_out:?}");
        assert!(timed_out.message.contains("timed out"), "{}", timed_out.message);
        assert_eq!(failure(&KafkaError::MessageProduction(Code::ProducerFenced)).recovery, Recovery::Migrated);
        assert!(failure(&KafkaError::MessageProduction(Code::TopicAuthorizationFailed)).stops_a_reader());
        assert!(failure(&KafkaError::MessageProduction(Code::InvalidRecord)).is_fatal());
        // No code: the client's own words.
        assert!(failure(&KafkaError::ClientCreation("bad config".into())).is_fatal());
    }
}
