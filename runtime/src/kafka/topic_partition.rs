//! One partition of one topic: what a task owns, what an offset belongs to.
use std::fmt;

/// A topic and one of its partitions. Ordered by topic, then partition;
/// shown as Kafka's tools show it, `topic[partition]`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition { topic: topic.into(), partition }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.topic, self.partition)
    }
}

/// As shown: logs list partitions in `{:?}` of their collections.
impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_order_by_topic_then_number_and_show_as_kafka_does() {
        let mut ps = vec![TopicPartition::new("b", 0), TopicPartition::new("a", 10), TopicPartition::new("a", 2)];
        ps.sort();
        assert_eq!(format!("{ps:?}"), "[a[2], a[10], b[0]]");
        assert_eq!(TopicPartition::new("t", 3).to_string(), "t[3]");
    }
}
