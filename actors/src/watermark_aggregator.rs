//! A task's watermark aggregator as an actor of its own: it takes the
//! watermark reports of the task's upstream partitions (runner topics,
//! source partition clocks, side topics), keeps the minimum per input
//! (`runtime::window::watermark`), and on each advance of the main input tells the
//! task's GroupByKey actors first, then the task. A barrier passes through
//! it: it answers with its state and sends the barrier on to the
//! GroupByKeys, behind the watermark steps it sent them.
use std::collections::HashMap;

use actix::prelude::*;
use beam_kafka_runtime::codec::timestamp::Watermark;
use beam_kafka_runtime::test_stream::progress::ProgressTracker;
use beam_kafka_runtime::window::watermark::InputWatermark;

use crate::messages::{GbkCommand, Shutdown, WatermarkCommand, WatermarkEvent, WatermarkInput};

pub struct WatermarkAggregator {
    main: InputWatermark,
    sides: HashMap<String, InputWatermark>,
    gbks: Vec<Recipient<GbkCommand>>,
    task: Recipient<WatermarkEvent>,
    /// TestStream progress over every input, main and side.
    progress: ProgressTracker,
}

impl WatermarkAggregator {
    pub fn new(
        main: InputWatermark,
        sides: HashMap<String, InputWatermark>,
        gbks: Vec<Recipient<GbkCommand>>,
        task: Recipient<WatermarkEvent>,
    ) -> Self {
        WatermarkAggregator { main, sides, gbks, task, progress: ProgressTracker::default() }
    }
}

impl Actor for WatermarkAggregator {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Context<Self>) {
        // GroupByKeys restored with the watermark they last committed catch
        // up with the task's (a no-op when they are level).
        let wm = self.main.current();
        if wm > Watermark::NegInf {
            for g in &self.gbks {
                g.do_send(GbkCommand::Watermark(wm));
            }
        }
    }
}

impl Handler<WatermarkCommand> for WatermarkAggregator {
    type Result = ();

    fn handle(&mut self, command: WatermarkCommand, _: &mut Context<Self>) {
        match command {
            WatermarkCommand::Reports(reports) => {
                let mut advanced: Vec<(WatermarkInput, Watermark)> = Vec::new();
                let mut progressed = None;
                for r in reports {
                    if let Some(p) = self.progress.report(&format!("{:?}/{}", r.input, r.upstream), r.partition, r.total, r.progress) {
                        progressed = Some(p);
                    }
                    let aggregate = match &r.input {
                        WatermarkInput::Main => Some(&mut self.main),
                        WatermarkInput::Side(topic) => self.sides.get_mut(topic),
                    };
                    let Some(new) = aggregate.and_then(|a| a.report(&r.upstream, r.partition, r.total, r.wm)) else { continue };
                    match advanced.iter_mut().find(|(i, _)| *i == r.input) {
                        Some((_, wm)) => *wm = new,
                        None => advanced.push((r.input, new)),
                    }
                }
                // The test clock first: the GroupByKeys fire what it made due
                // before the steps and the barrier that follow.
                if let Some(p) = progressed.filter(|p| p.clock > 0) {
                    for g in &self.gbks {
                        g.do_send(GbkCommand::TestClock(p.clock));
                    }
                }
                for (input, wm) in advanced {
                    if input == WatermarkInput::Main {
                        for g in &self.gbks {
                            g.do_send(GbkCommand::Watermark(wm));
                        }
                    }
                    self.task.do_send(WatermarkEvent::Advanced { input, wm });
                }
                if let Some(p) = progressed {
                    self.task.do_send(WatermarkEvent::Progress(p));
                }
            }
            WatermarkCommand::Barrier { id } => {
                self.task.do_send(WatermarkEvent::Barrier { id, snapshot: self.main.snapshot(), current: self.main.current() });
                for g in &self.gbks {
                    g.do_send(GbkCommand::Barrier { id });
                }
            }
        }
    }
}

impl Handler<Shutdown> for WatermarkAggregator {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use beam_kafka_runtime::codec::packed::Pack;
    use beam_kafka_runtime::gbk::fixtures::{interval_element, interval_gbk};

    use super::*;
    use crate::group_by_key::GroupByKeyActor;
    use crate::messages::{GbkEvent, WatermarkReport};

    /// Stands in for the task: writes down what reaches it, in order.
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl Actor for Recorder {
        type Context = Context<Self>;
    }

    /// Answered once everything sent to the recorder before it was written down.
    #[derive(Message)]
    #[rtype(result = "()")]
    struct Sync;

    impl Handler<Sync> for Recorder {
        type Result = ();
        fn handle(&mut self, _: Sync, _: &mut Context<Self>) {}
    }

    impl Handler<GbkEvent> for Recorder {
        type Result = ();
        fn handle(&mut self, ev: GbkEvent, _: &mut Context<Self>) {
            let line = match ev {
                GbkEvent::Output { credit, panes, report, .. } => {
                    format!("gbk output credit={credit} panes={} wm={:?} closed={}", panes.len(), report.watermark, report.closed_pending)
                }
                GbkEvent::Barrier { id, changes, report, .. } => {
                    format!("gbk barrier {id} changes={} wm={:?} hold={:?}", changes.len(), report.watermark, report.holds.map(|h| h.hold))
                }
                GbkEvent::Failed { error } => format!("gbk failed {error}"),
            };
            self.0.lock().unwrap().push(line);
        }
    }

    impl Handler<WatermarkEvent> for Recorder {
        type Result = ();
        fn handle(&mut self, ev: WatermarkEvent, _: &mut Context<Self>) {
            let line = match ev {
                WatermarkEvent::Advanced { input, wm } => format!("advanced {input:?} {wm:?}"),
                WatermarkEvent::Barrier { id, current, .. } => format!("watermarks barrier {id} at {current:?}"),
                WatermarkEvent::Progress(p) => format!("progress {p:?}"),
            };
            self.0.lock().unwrap().push(line);
        }
    }

    /// Key `k`, value 1, at `ts` in its 10 ms window.
    fn value(k: &str, ts: i64) -> Vec<u8> {
        interval_element(ts, ts - ts % 10, ts - ts % 10 + 10, k, 1)
    }

    #[test]
    fn a_barrier_reaches_the_group_by_key_behind_the_values_and_watermark_steps_before_it() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorded = seen.clone();
        actix::System::new().block_on(async move {
            let task = Recorder(recorded).start();
            let g = GroupByKeyActor::new("shuffle".into(), interval_gbk(false), task.clone().recipient(), None, 128 << 20).start();
            let main = InputWatermark::new(["up".to_string()]);
            let w = WatermarkAggregator::new(main, HashMap::new(), vec![g.clone().recipient()], task.clone().recipient()).start();
            // What a task does in one batch: values to the GroupByKey, the
            // batch's watermark report to the aggregator, then a cycle.
            g.do_send(GbkCommand::Data(vec![Pack::single(value("a", 3)), Pack::single(value("b", 13))]));
            let report = WatermarkReport {
                input: WatermarkInput::Main,
                upstream: "up".into(),
                partition: 0,
                total: 1,
                wm: Watermark::At(25),
                progress: Default::default(),
            };
            w.do_send(WatermarkCommand::Reports(vec![report]));
            w.do_send(WatermarkCommand::Barrier { id: 7 });
            // The task asks for a firing once it heard of the advance.
            w.send(WatermarkCommand::Reports(Vec::new())).await.unwrap();
            g.send(GbkCommand::Fire { limit: 10 }).await.unwrap();
            task.send(Sync).await.unwrap();
        });
        let seen = seen.lock().unwrap().clone();
        let from = |prefix: &str| seen.iter().filter(|l| l.starts_with(prefix)).cloned().collect::<Vec<_>>();
        assert_eq!(
            from("gbk"),
            vec![
                "gbk output credit=2 panes=0 wm=NegInf closed=0",
                "gbk output credit=0 panes=0 wm=At(25) closed=2",
                // Behind the step: the state it answers with has the step in it.
                // The progress entry, and each pane's entry and first chunk.
                "gbk barrier 7 changes=5 wm=At(25) hold=Some(At(9))",
                "gbk output credit=10 panes=2 wm=At(25) closed=0",
            ]
        );
        assert_eq!(from("advanced").len() + from("watermarks").len(), 2);
        let advanced = seen.iter().position(|l| l == "advanced Main At(25)").expect("the advance is told");
        let barrier = seen.iter().position(|l| l == "watermarks barrier 7 at At(25)").expect("the barrier is answered");
        assert!(advanced < barrier);
    }
}
