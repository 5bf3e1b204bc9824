//! ReadFromKafka inputs of a task (partition clocks, bounds, the user's
//! group) and what the task tells the user about late drops.
use beam_kafka_runtime::kafka::topic_partition::TopicPartition;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::{TaskConfig, TaskEvent, TaskSupervisor};
use crate::kafka::cached_high_watermark;
use crate::messages::{WatermarkInput, WatermarkReport};
use crate::telemetry::instruments;

/// The upstream name under which a task reports a source partition's
/// watermark to its own input watermark.
pub const SOURCE_UPSTREAM: &str = "source";

/// How often source partitions check their bounds and idle clocks.
pub(super) const SOURCE_TICK: Duration = Duration::from_millis(200);

impl TaskSupervisor {
    /// Says, as it happens, that a GroupByKey dropped late elements (they
    /// were committed as processed: the user must hear of them).
    pub(super) fn warn_dropped(&mut self) {
        for (topic, gbk) in &self.gbk_views {
            let seen = self.dropped_warned.entry(topic.clone()).or_insert(0);
            if gbk.dropped_late > *seen {
                tracing::warn!(
                    task = %self.cfg.task,
                    "dropped {} late element(s) of {topic} (window expired, allowed lateness {} ms); {} in all",
                    gbk.dropped_late - *seen, gbk.allowed_lateness, gbk.dropped_late
                );
                *seen = gbk.dropped_late;
            }
        }
    }

    /// Late elements a GroupByKey dropped are reported, never silently lost.
    pub(super) fn report_dropped(&self) {
        for (topic, gbk) in self.gbk_views.iter().filter(|(_, g)| g.dropped_late > 0) {
            instruments().late_dropped.add(gbk.dropped_late, &[]);
            let _ = self.events.send(TaskEvent::Info(format!(
                "task {} dropped {} element(s) of {topic} that arrived after their window expired (allowed lateness)",
                self.cfg.task, gbk.dropped_late
            )));
        }
    }
}

/// Late drops each GroupByKey input had already counted when restored.
pub(super) fn cfg_dropped(cfg: &TaskConfig) -> HashMap<String, u64> {
    cfg.inputs.iter().filter_map(|(t, r)| r.gbk.as_ref().map(|g| (t.clone(), g.dropped_late))).collect()
}

/// The name under which a task expects watermark reports of `source` on `topic`.
pub fn upstream_key(topic: &str, source: &str) -> String {
    format!("{topic}/{source}")
}

impl TaskSupervisor {
    /// Reports the source partitions' clocks that moved to the input
    /// watermark's aggregator.
    pub(super) fn update_source_watermarks(&mut self) {
        let mut reports = Vec::new();
        for (topic, route) in &self.cfg.inputs {
            let Some(src) = &route.source else { continue };
            let wm = src.clock.watermark();
            if self.source_reported.get(topic) == Some(&wm) {
                continue;
            }
            self.source_reported.insert(topic.clone(), wm);
            let upstream = upstream_key(topic, SOURCE_UPSTREAM);
            reports.push(WatermarkReport {
                input: WatermarkInput::Main,
                upstream,
                partition: 0,
                total: 1,
                wm,
                progress: Default::default(),
            });
        }
        self.report_watermarks(reports);
    }

    pub(super) fn tick_sources(&mut self) {
        if !self.lifecycle.is_running() {
            return;
        }
        let partition = self.cfg.task.partition as i32;
        let (consumer, handed) = (&self.consumer, &self.handed);
        for (topic, route) in self.cfg.inputs.iter_mut() {
            let Some(src) = route.source.as_mut() else { continue };
            let start = src.start_offset;
            src.tick(|| {
                // Caught up: everything up to the partition's end was handed over.
                let Some(high) = cached_high_watermark(consumer, topic, partition) else { return true };
                let next = handed.get(&TopicPartition::new(topic.clone(), partition)).copied().or(start);
                next.is_some_and(|n| n >= high)
            });
        }
        self.update_source_watermarks();
    }

    /// Also commits source offsets to the user's group.id
    /// (commit_offset_in_finalize), for tools that watch that group's lag.
    pub(super) fn commit_to_user_groups(&self, offsets: &BTreeMap<TopicPartition, i64>) {
        for (topic, route) in &self.cfg.inputs {
            let Some(src) = &route.source else { continue };
            let Some(finalize) = &src.shared.finalize else { continue };
            let mut tpl = TopicPartitionList::new();
            for (tp, next) in offsets.iter().filter(|(tp, _)| tp.topic == *topic) {
                let _ = tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(*next));
            }
            if tpl.count() > 0 {
                if let Err(e) = finalize.commit(&tpl, CommitMode::Async) {
                    tracing::warn!(task = %self.cfg.task, "could not commit offsets of {topic} to the user's group: {e}");
                }
            }
        }
    }

    /// What each source partition of this task read, for the job's messages.
    pub(super) fn report_sources(&self) {
        for (topic, route) in &self.cfg.inputs {
            if let Some(src) = &route.source {
                let _ = self.events.send(TaskEvent::Info(format!(
                    "task {} read {} record(s) of {topic}[{}] for ReadFromKafka '{}'",
                    self.cfg.task, src.read, self.cfg.task.partition, src.input.name
                )));
            }
        }
    }
}
