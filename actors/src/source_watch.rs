//! Whether a running job's source topics gained partitions: asked of the
//! brokers every [`GROWTH_CHECK_EVERY`]; what follows is
//! `runtime::kafka::source_growth`'s (the job plans again).
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use beam_kafka_runtime::kafka::source_growth;
use beam_kafka_runtime::plan::topology::TopicKind;
use tokio::sync::mpsc;

use crate::job_input::JobInput;
use crate::kafka::rebalance::JobConsumer;

/// How often a running job asks whether its sources gained partitions.
pub const GROWTH_CHECK_EVERY: Duration = Duration::from_secs(10);

/// Each source topic's partition count in the plan.
pub fn source_partitions(input: &JobInput) -> BTreeMap<String, u32> {
    input.plan.topics.iter().filter(|t| t.kind == TopicKind::Source).map(|t| (t.name.clone(), t.partitions)).collect()
}

/// Says once which source topics have more partitions than `planned` (a
/// topic whose metadata cannot be read now is asked again next time).
pub async fn watch_growth(
    consumer: Arc<JobConsumer>,
    planned: BTreeMap<String, u32>,
    grown: mpsc::UnboundedSender<Vec<(String, u32, u32)>>,
) {
    if planned.is_empty() {
        return;
    }
    loop {
        tokio::time::sleep(GROWTH_CHECK_EVERY).await;
        let (asking, topics) = (consumer.clone(), planned.keys().cloned().collect::<Vec<_>>());
        let counts = tokio::task::spawn_blocking(move || {
            topics
                .into_iter()
                .filter_map(|t| Some((t.clone(), crate::kafka::partition_count(&*asking, &t, Duration::from_secs(10)).ok()??)))
                .collect::<BTreeMap<String, u32>>()
        })
        .await
        .unwrap_or_default();
        let now = source_growth::grown(&planned, &counts);
        if !now.is_empty() {
            let _ = grown.send(now);
            return;
        }
    }
}
