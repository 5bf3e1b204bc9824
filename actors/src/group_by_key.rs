//! A GroupByKey of one task as an actor of its own: it takes the values of
//! its shuffle partition, the task's watermark steps, requests to fire
//! closed panes and barriers, and answers each with what it fired and a
//! report of itself (`runtime::task::gbk_view`). Its answers go back to the
//! task, which hands panes to the stage as the stage has room, and holds
//! them while side inputs are not ready.
//!
//! A barrier arrives through the watermark aggregator, behind every
//! watermark step sent before it, and behind every value the task sent
//! before it: its answer carries exactly the state changes the cycle commits.
use actix::prelude::*;
use beam_kafka_runtime::gbk::GroupByKey;
use beam_kafka_runtime::task_state;

use crate::messages::{GbkCommand, GbkEvent, Shutdown};

pub struct GroupByKeyActor {
    /// The shuffle topic it reads (what names it to the task).
    topic: String,
    gbk: GroupByKey,
    task: Recipient<GbkEvent>,
    /// Under a TestStream, processing time is its test clock.
    test_clock: Option<i64>,
}

impl GroupByKeyActor {
    pub fn new(topic: String, gbk: GroupByKey, task: Recipient<GbkEvent>) -> Self {
        GroupByKeyActor { topic, gbk, task, test_clock: None }
    }

    fn output(&self, credit: u64, panes: Vec<Vec<u8>>, fired: bool, with_holds: bool) {
        let report = self.gbk.report(with_holds);
        self.task.do_send(GbkEvent::Output { topic: self.topic.clone(), credit, panes, fired, report });
    }
}

impl Actor for GroupByKeyActor {
    type Context = Context<Self>;
}

impl Handler<GbkCommand> for GroupByKeyActor {
    type Result = ();

    fn handle(&mut self, command: GbkCommand, ctx: &mut Context<Self>) {
        match command {
            GbkCommand::Data(values) => {
                let mut panes = Vec::new();
                // Processing-time triggers count from when elements arrive.
                let now = self.test_clock.unwrap_or_else(crate::source::now_millis);
                self.gbk.set_processing_time(now, &mut panes);
                if let Err(e) = self.gbk.add_batch(values.iter().map(|v| v.as_slice()), &mut panes) {
                    self.task.do_send(GbkEvent::Failed { error: format!("GroupByKey of {}: {e}", self.topic) });
                    return ctx.stop();
                }
                self.output(values.len() as u64, panes, false, false);
            }
            GbkCommand::Watermark(wm) => {
                let mut panes = Vec::new();
                self.gbk.set_watermark(wm, &mut panes);
                self.output(0, panes, false, true);
            }
            GbkCommand::ProcessingTime(now) => {
                let mut panes = Vec::new();
                self.gbk.set_processing_time(self.test_clock.unwrap_or(now), &mut panes);
                self.output(0, panes, false, false);
            }
            GbkCommand::TestClock(now) => {
                self.test_clock = Some(now);
                let mut panes = Vec::new();
                self.gbk.set_processing_time(now, &mut panes);
                self.output(0, panes, false, false);
            }
            GbkCommand::Fire { limit } => {
                let mut panes = Vec::new();
                self.gbk.fire_closed(limit, &mut panes);
                self.output(limit as u64, panes, true, false);
            }
            GbkCommand::Barrier { id } => {
                let topic = &self.topic;
                let changes = self.gbk.take_changes().into_iter().map(|(k, v)| (task_state::group_by_key_key(topic, &k), v)).collect();
                let report = self.gbk.report(true);
                self.task.do_send(GbkEvent::Barrier { topic: topic.clone(), id, changes, report });
            }
        }
    }
}

impl Handler<Shutdown> for GroupByKeyActor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
