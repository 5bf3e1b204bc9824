//! Source topics that gain partitions while an application runs (Kafka only
//! ever adds them). A sub-topology has a task per partition of its source,
//! so the plan grows: each copy that sees the new count plans again in
//! place (its tasks restart from their commits, the new partitions get
//! tasks of their own, the sub-topology's changelog grows to match), and a
//! new partition is read from its start, since every record on it is input
//! the job has not seen. Downstream tasks need no telling: each watermark
//! report carries its upstream's task count, and they wait for the new
//! tasks' reports once one names the larger count.
use std::collections::BTreeMap;

/// Where a source partition the group has no committed offset for starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unseeded {
    /// Where the ReadFromKafka asked (its start time or auto.offset.reset).
    AsAsked,
    /// At the partition's first record.
    FromStart,
}

/// The application's first run gives every partition of its sources a
/// starting offset (where the user asked) before any task runs; a
/// partition without one in a later run, or once a running job planned
/// again, was added since, so none of its records were read yet. A topic
/// none of whose partitions has one is new to the application (a source
/// an update added): it starts where the user asked.
pub fn unseeded_start(first_run: bool, topic_has_commits: bool) -> Unseeded {
    if first_run || !topic_has_commits {
        Unseeded::AsAsked
    } else {
        Unseeded::FromStart
    }
}

/// The source topics with more partitions now than the plan has:
/// `(topic, planned, now)`. A topic whose count is unknown now (its
/// metadata could not be read) has not grown as far as this knows.
pub fn grown(planned: &BTreeMap<String, u32>, now: &BTreeMap<String, u32>) -> Vec<(String, u32, u32)> {
    planned.iter().filter_map(|(topic, &was)| now.get(topic).filter(|&&n| n > was).map(|&n| (topic.clone(), was, n))).collect()
}

/// What the job says when it plans again for grown sources.
pub fn describe(grown: &[(String, u32, u32)]) -> String {
    let each: Vec<String> = grown.iter().map(|(t, was, now)| format!("'{t}' from {was} to {now}")).collect();
    format!(
        "source partitions were added ({}): this copy plans again with a task per partition, restarting its tasks from \
         their last commits; the new partitions are read from their start",
        each.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
        pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    #[test]
    fn only_topics_with_more_partitions_than_planned_have_grown() {
        let planned = counts(&[("a", 2), ("b", 4), ("c", 1)]);
        let now = counts(&[("a", 5), ("b", 4)]);
        assert_eq!(grown(&planned, &now), vec![("a".to_string(), 2, 5)]);
        assert!(grown(&planned, &counts(&[("a", 2), ("b", 3)])).is_empty(), "fewer is never growth (metadata lagging)");
    }

    #[test]
    fn only_a_first_run_starts_unseeded_partitions_where_the_user_asked() {
        assert_eq!(unseeded_start(true, false), Unseeded::AsAsked);
        assert_eq!(unseeded_start(false, true), Unseeded::FromStart);
        assert_eq!(unseeded_start(false, false), Unseeded::AsAsked, "a source topic an update added");
    }

    #[test]
    fn the_message_names_each_topic_and_its_counts() {
        let text = describe(&[("orders".into(), 2, 4)]);
        assert!(text.contains("'orders' from 2 to 4"), "{text}");
    }
}
