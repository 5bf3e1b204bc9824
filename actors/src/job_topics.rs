//! The runner-owned topics a job creates before its tasks start (those
//! that exist are kept; a changelog grows with its source).
use beam_kafka_runtime::plan::topology::{changelog_topic, TopicKind};

use crate::control;
use crate::job_input::JobInput;
use crate::kafka::admin::{Admin, TopicSpec};
use crate::kafka::config;

/// Creates the runner-owned topics (those that exist are kept).
pub async fn create_topics(admin: &Admin, input: &JobInput) -> Result<(), String> {
    let opts = &input.options;
    let specs: Vec<TopicSpec> = input
        .plan
        .runner_topics()
        .map(|t| TopicSpec {
            name: t.name.clone(),
            partitions: t.partitions,
            compacted: false,
            keep_forever: t.kind == TopicKind::Side,
            segment_ms: None,
            grows: false,
        })
        .chain(input.plan.sub_topologies.iter().map(|s| TopicSpec {
            name: changelog_topic(&opts.application_id, s.id),
            partitions: s.partitions,
            compacted: true,
            keep_forever: false,
            segment_ms: None,
            // A source's sub-topology has a task per source partition.
            grows: true,
        }))
        .chain(std::iter::once(control::topic_spec(&opts.application_id)))
        .chain(std::iter::once(crate::copies::topic_spec(&opts.application_id)))
        .chain(input.plan_record.as_ref().map(|_| crate::identity::topic_spec(&opts.application_id)))
        .collect();
    admin.ensure_topics(&specs, opts.topic_replication_factor, config::batch_max_bytes(opts)).await.map(|_| ())
}
