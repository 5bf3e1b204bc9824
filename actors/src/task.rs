//! The task supervisor: owns one partition of its sub-topology's input topics,
//! feeds the stage, tracks the input watermark, and owns the commit: it asks
//! the stage to flush, and only after every bundle before that point finished
//! does it commit the offsets it had handed over.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use beam_kafka_runtime::timestamp::Watermark;
use beam_kafka_runtime::topology::TaskId;
use beam_kafka_runtime::watermark::InputWatermark;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc::UnboundedSender;

use crate::envelope::{self, Record};
use crate::messages::{Elements, Flush, RecordBatch, Shutdown, StageEvent};
use crate::stage::StageActor;
use crate::telemetry::instruments;

/// What tasks report to the job.
#[derive(Debug)]
pub enum TaskEvent {
    Finished(TaskId),
    /// The job cannot go on; the text is for the user.
    Failed(String),
    Metrics(Vec<beam_kafka_proto::pipeline::MonitoringInfo>),
}

struct PendingFlush {
    id: u64,
    offsets: BTreeMap<(String, i32), i64>,
    is_final: bool,
}

pub struct TaskSupervisor {
    task: TaskId,
    stage: Addr<StageActor>,
    /// Input topic → the data source transform it feeds.
    sources: HashMap<String, String>,
    input_watermark: InputWatermark,
    consumer: Arc<StreamConsumer>,
    events: UnboundedSender<TaskEvent>,
    /// Next offset to commit per (topic, partition): handed to the stage.
    handed: BTreeMap<(String, i32), i64>,
    committed: BTreeMap<(String, i32), i64>,
    pending: Option<PendingFlush>,
    next_flush: u64,
    commit_interval: Duration,
    done: bool,
}

impl TaskSupervisor {
    pub fn new(
        task: TaskId,
        stage: Addr<StageActor>,
        sources: HashMap<String, String>,
        upstreams: Vec<String>,
        consumer: Arc<StreamConsumer>,
        events: UnboundedSender<TaskEvent>,
        commit_interval: Duration,
    ) -> Self {
        TaskSupervisor {
            task,
            stage,
            sources,
            input_watermark: InputWatermark::new(upstreams),
            consumer,
            events,
            handed: BTreeMap::new(),
            committed: BTreeMap::new(),
            pending: None,
            next_flush: 1,
            commit_interval,
            done: false,
        }
    }

    fn fail(&mut self, ctx: &mut Context<Self>, error: String) {
        if !self.done {
            self.done = true;
            let _ = self.events.send(TaskEvent::Failed(error));
        }
        ctx.stop();
    }

    fn request_flush(&mut self, is_final: bool) {
        if self.pending.is_some() {
            return;
        }
        let id = self.next_flush;
        self.next_flush += 1;
        self.pending = Some(PendingFlush { id, offsets: self.handed.clone(), is_final });
        self.stage.do_send(Flush { id });
    }

    fn commit(&mut self, offsets: &BTreeMap<(String, i32), i64>, mode: CommitMode) -> Result<(), String> {
        let changed: Vec<_> = offsets.iter().filter(|(k, v)| self.committed.get(*k) != Some(v)).collect();
        if changed.is_empty() {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), next) in &changed {
            tpl.add_partition_offset(topic, *partition, Offset::Offset(**next))
                .map_err(|e| format!("bad offset for {topic}[{partition}]: {e}"))?;
        }
        self.consumer.commit(&tpl, mode).map_err(|e| format!("task {} could not commit offsets: {e}", self.task))?;
        instruments().commits.add(1, &[]);
        for (k, v) in changed {
            self.committed.insert(k.clone(), *v);
        }
        Ok(())
    }
}

impl Actor for TaskSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.commit_interval, |act, _| {
            if !act.done && act.handed != act.committed {
                act.request_flush(false);
            }
        });
    }
}

impl Handler<RecordBatch> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, batch: RecordBatch, ctx: &mut Context<Self>) {
        if self.done {
            return;
        }
        let mut pending_elements: Option<Elements> = None;
        for r in batch.records {
            let record = match envelope::decode(&r.payload) {
                Ok(rec) => rec,
                Err(e) => return self.fail(ctx, format!("{e} ({}[{}] offset {})", r.topic, r.partition, r.offset)),
            };
            match record {
                Record::Data(value) => {
                    let Some(source) = self.sources.get(&r.topic) else {
                        return self.fail(ctx, format!("task {} got a record of unexpected topic {}", self.task, r.topic));
                    };
                    // Consecutive elements of one source travel in one message.
                    match &mut pending_elements {
                        Some(e) if &e.source_transform == source => e.elements.push(value),
                        _ => {
                            if let Some(e) = pending_elements.take() {
                                self.stage.do_send(e);
                            }
                            pending_elements = Some(Elements { source_transform: source.clone(), elements: vec![value] });
                        }
                    }
                    instruments().elements_in.add(1, &[]);
                }
                Record::Watermark { wm, source, partition, total } => {
                    if let Some(e) = pending_elements.take() {
                        self.stage.do_send(e);
                    }
                    if self.input_watermark.report(&source, partition, total, wm) == Some(Watermark::PosInf) {
                        self.handed.insert((r.topic.clone(), r.partition), r.offset + 1);
                        self.request_flush(true);
                    }
                }
            }
            self.handed.insert((r.topic, r.partition), r.offset + 1);
        }
        if let Some(e) = pending_elements {
            self.stage.do_send(e);
        }
    }
}

impl Handler<StageEvent> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, ev: StageEvent, ctx: &mut Context<Self>) {
        match ev {
            StageEvent::Metrics(infos) => {
                let _ = self.events.send(TaskEvent::Metrics(infos));
            }
            StageEvent::Failed { error } => self.fail(ctx, error),
            StageEvent::Flushed { id } => {
                let Some(p) = self.pending.take().filter(|p| p.id == id) else { return };
                let mode = if p.is_final { CommitMode::Sync } else { CommitMode::Async };
                if let Err(e) = self.commit(&p.offsets, mode) {
                    return self.fail(ctx, e);
                }
                let reached_end = self.input_watermark.current() == Watermark::PosInf;
                if p.is_final || reached_end {
                    if !p.is_final {
                        // +inf arrived while a periodic flush was pending.
                        return self.request_flush(true);
                    }
                    self.done = true;
                    let _ = self.events.send(TaskEvent::Finished(self.task));
                }
            }
        }
    }
}

impl Handler<Shutdown> for TaskSupervisor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        self.stage.do_send(Shutdown);
        ctx.stop();
    }
}
