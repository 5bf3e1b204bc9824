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
//!
//! A custom WindowFn's merges, and the ends of windows the runner cannot
//! read, are asked of the SDK before a batch is added (`window_fns`); the
//! actor takes no other message meanwhile, so order is kept.
//!
//! A batch GroupByKey keeps its panes in the task's store once the
//! GroupByKeys of the process hold more than `group_by_key_memory_mb`
//! (`runtime::gbk::spill`): it reads them back from there to fire them.
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use actix::prelude::*;
use beam_kafka_runtime::codec::packed::Pack;
use beam_kafka_runtime::gbk::merge::MergeRequests;
use beam_kafka_runtime::gbk::spill::SpillStore;
use beam_kafka_runtime::gbk::GroupByKey;
use beam_kafka_runtime::state::task_state;
use beam_kafka_runtime::window::window_fns::Merge;

use crate::messages::{GbkCommand, GbkEvent, Shutdown};
use crate::store::TaskStore;
use crate::window_fns::WindowFnClient;

/// Bytes the GroupByKeys of this process hold in memory, about.
static RESIDENT: AtomicUsize = AtomicUsize::new(0);

/// A GroupByKey's entries in its task's store (their keys without the
/// GroupByKey's prefix, as it wrote them).
pub struct GbkStoreView {
    store: Arc<TaskStore>,
    prefix: Vec<u8>,
}

impl GbkStoreView {
    pub fn new(store: Arc<TaskStore>, topic: &str) -> Self {
        GbkStoreView { store, prefix: task_state::group_by_key_key(topic, &[]) }
    }
}

impl SpillStore for GbkStoreView {
    fn scan(&self, start: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), String> {
        let mut from = self.prefix.clone();
        from.extend_from_slice(start);
        let n = self.prefix.len();
        self.store.scan(&from, &mut |k, v| k.starts_with(&self.prefix) && visit(&k[n..], v))
    }
}

pub struct GroupByKeyActor {
    /// The shuffle topic it reads (what names it to the task).
    topic: String,
    gbk: GroupByKey,
    task: Recipient<GbkEvent>,
    /// Under a TestStream, processing time is its test clock.
    test_clock: Option<i64>,
    /// Runs a custom WindowFn in the SDK, if the windowing has one.
    window_fns: Option<Arc<WindowFnClient>>,
    /// What of `RESIDENT` is this one's, and the bound on it.
    counted: usize,
    memory_bound: usize,
    /// A firing that waits for evicted panes to be committed to the store.
    waiting_fire: Option<usize>,
    /// Credit for values taken in, held back until the next barrier: a
    /// batch GroupByKey past its bounds takes no more values before a commit.
    withheld: u64,
}

impl GroupByKeyActor {
    /// `memory_bound`: the bytes every GroupByKey of the process may hold
    /// before their committed panes leave memory.
    pub fn new(
        topic: String,
        gbk: GroupByKey,
        task: Recipient<GbkEvent>,
        window_fns: Option<Arc<WindowFnClient>>,
        memory_bound: usize,
    ) -> Self {
        GroupByKeyActor { topic, gbk, task, test_clock: None, window_fns, counted: 0, memory_bound, waiting_fire: None, withheld: 0 }
    }

    /// Brings this one's share of `RESIDENT` up to date.
    fn count_resident(&mut self) {
        let now = self.gbk.resident_bytes();
        if now >= self.counted {
            RESIDENT.fetch_add(now - self.counted, Ordering::Relaxed);
        } else {
            RESIDENT.fetch_sub(self.counted - now, Ordering::Relaxed);
        }
        self.counted = now;
    }

    fn fail(&self, error: String, ctx: &mut Context<Self>) {
        self.task.do_send(GbkEvent::Failed { error: format!("GroupByKey of {}: {error}", self.topic) });
        ctx.stop();
    }

    /// Adds a batch (with the SDK's merges for it) and answers the task.
    fn add(&mut self, values: Vec<Pack>, merges: HashMap<Vec<u8>, Vec<Merge>>, ctx: &mut Context<Self>) {
        let mut panes = Vec::new();
        // Processing-time triggers count from when elements arrive.
        let now = self.test_clock.unwrap_or_else(crate::source::now_millis);
        self.gbk.set_processing_time(now, &mut panes);
        let added = if self.gbk.merges_in_sdk() {
            self.gbk.add_batch_merged(values.iter().flat_map(Pack::iter), merges, &mut panes)
        } else {
            self.gbk.add_batch(values.iter().flat_map(Pack::iter), &mut panes)
        };
        self.count_resident();
        if let Err(e) = added {
            return self.fail(e, ctx);
        }
        let taken = values.iter().map(Pack::len).sum::<usize>() as u64;
        let over_memory = self.gbk.spills() && RESIDENT.load(Ordering::Relaxed) > self.memory_bound;
        if self.withheld > 0 || self.gbk.wants_commit() || over_memory {
            // The task stops sending once its room runs out: what the
            // GroupByKey changes before the commit stays bounded.
            self.withheld += taken;
            self.ask_commit(panes);
        } else {
            self.output(taken, panes, false, false);
        }
    }

    /// What the SDK must tell about a batch first: the ends of windows not
    /// seen before, and merges. `None` if nothing.
    fn to_ask(&self, values: &[Pack]) -> Result<Option<(Vec<beam_kafka_runtime::codec::windowed::Window>, MergeRequests)>, String> {
        if self.window_fns.is_none() {
            return Ok(None);
        }
        let unresolved = self.gbk.windows_to_resolve(values.iter().flat_map(Pack::iter))?;
        let requests = if self.gbk.merges_in_sdk() { self.gbk.merge_requests(values.iter().flat_map(Pack::iter))? } else { Vec::new() };
        Ok((!unresolved.is_empty() || !requests.is_empty()).then_some((unresolved, requests)))
    }

    /// Fires up to `limit` closed panes and answers, unless they wait for
    /// a commit (then it answers after `Committed`).
    fn fire(&mut self, limit: usize, ctx: &mut Context<Self>) {
        if self.gbk.wants_commit() {
            // What it fired so far must be committed first: it fires again
            // after the next barrier.
            self.waiting_fire = Some(limit);
            return self.ask_commit(Vec::new());
        }
        let mut panes = Vec::new();
        match self.gbk.fire(limit, &mut panes) {
            Ok(Some(_)) => self.output(limit as u64, panes, true, false),
            Ok(None) => self.waiting_fire = Some(limit),
            Err(e) => self.fail(format!("reading its panes back from the state store: {e}"), ctx),
        }
    }

    /// Answers with no credit (it is held back, or a firing waits) and asks
    /// the task for a commit.
    fn ask_commit(&self, panes: Vec<Vec<u8>>) {
        let report = self.gbk.report(false);
        self.task.do_send(GbkEvent::Output { topic: self.topic.clone(), credit: 0, panes, fired: false, report, commit_wanted: true });
    }

    fn output(&self, credit: u64, panes: Vec<Vec<u8>>, fired: bool, with_holds: bool) {
        let report = self.gbk.report(with_holds);
        self.task.do_send(GbkEvent::Output { topic: self.topic.clone(), credit, panes, fired, report, commit_wanted: false });
    }
}

impl Actor for GroupByKeyActor {
    type Context = Context<Self>;
}

impl Handler<GbkCommand> for GroupByKeyActor {
    type Result = ();

    fn handle(&mut self, command: GbkCommand, ctx: &mut Context<Self>) {
        match command {
            GbkCommand::Data(values) => match self.to_ask(&values) {
                Ok(None) => self.add(values, HashMap::new(), ctx),
                Ok(Some((unresolved, requests))) => {
                    let client = self.window_fns.clone().expect("asked only with a client");
                    let asked = async move { client.ask(unresolved, requests).await };
                    ctx.wait(asked.into_actor(self).map(move |answer, act, ctx| match answer {
                        Ok(a) => {
                            act.gbk.resolve_ends(a.ends);
                            act.add(values, a.merges, ctx);
                        }
                        Err(e) => act.fail(e, ctx),
                    }));
                }
                Err(e) => self.fail(e, ctx),
            },
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
            GbkCommand::Fire { limit } => self.fire(limit, ctx),
            GbkCommand::Committed { id } => {
                self.gbk.committed(id);
                if let Some(limit) = self.waiting_fire.take() {
                    self.fire(limit, ctx);
                }
            }
            GbkCommand::Barrier { id } => {
                let over = RESIDENT.load(Ordering::Relaxed) > self.memory_bound;
                let before = self.gbk.evicted();
                let changes = self.gbk.take_changes_for(id, over);
                self.count_resident();
                let evicted = self.gbk.evicted() - before;
                if evicted > 0 && before == 0 {
                    tracing::info!(
                        "the GroupByKey reading {} holds more than group_by_key_memory_mb: {evicted} pane(s) moved to the \
                         state store, read back when their window closes",
                        self.topic
                    );
                } else if evicted > 0 {
                    tracing::debug!(topic = %self.topic, "{evicted} pane(s) left memory for the state store");
                }
                let topic = &self.topic;
                let changes = changes.into_iter().map(|(k, v)| (task_state::group_by_key_key(topic, &k), v)).collect();
                let report = self.gbk.report(true);
                self.task.do_send(GbkEvent::Barrier { topic: topic.clone(), id, changes, report });
                // Its changes are in this cycle now: the values held back may come.
                let withheld = std::mem::take(&mut self.withheld);
                if withheld > 0 {
                    self.output(withheld, Vec::new(), false, false);
                }
                if let Some(limit) = self.waiting_fire.take() {
                    self.fire(limit, ctx);
                }
            }
        }
    }
}

impl Drop for GroupByKeyActor {
    fn drop(&mut self) {
        RESIDENT.fetch_sub(self.counted, Ordering::Relaxed);
    }
}

impl Handler<Shutdown> for GroupByKeyActor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
