//! Beam's triggers as a state machine the GroupByKey runs per (key, window).
//!
//! A trigger tree from the windowing strategy is flattened into nodes (the
//! root first); a window's `TriggerState` holds one cell per node: whether
//! the node finished, its element count, its processing-time deadline and,
//! for AfterWatermark, whether the end of the window was reached. The
//! GroupByKey calls `on_element` for every element, asks `should_fire` after
//! a batch of elements, a watermark step or a processing-time deadline, and
//! calls `on_fire` when it fires; the root finishing closes the window.
//!
//! Semantics follow Beam's trigger state machines (Java's
//! `TriggerStateMachine`s, which Python's `trigger.py` agrees with):
//! once-triggers (AfterCount, AfterProcessingTime) finish when they fire;
//! Repeatedly resets its subtrigger when that finishes; AfterAny (and
//! OrFinally) finishes when any subtrigger finished, AfterAll when all did;
//! AfterEach runs its subtriggers one after another; AfterWatermark's early
//! and late triggers repeat; Default is Repeatedly(AfterWatermark); Always
//! is Repeatedly(AfterCount(1)), as Java defines it (so it never fires an
//! empty pane); AfterSynchronizedProcessingTime (the runner's discretion)
//! fires like Always and never finishes, as Python's runners run it, so the
//! GroupByKey after an AfterProcessingTime one never closes a window and
//! loses data. Merged windows (sessions)
//! combine their cells: counts add, deadlines take the earliest, a node is
//! finished or past the end of the window if it was in any merged window.
use crate::codec::coders::{encode_varint, ByteReader};
use crate::codec::timestamp::{Millis, Watermark};
use crate::pb;
use pb::trigger::Trigger as T;

/// How an AfterProcessingTime turns the first element's processing time into
/// its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeTransform {
    Delay(i64),
    /// Up to the next multiple of `period` after `offset` (unchanged if on one).
    AlignTo {
        period: i64,
        offset: i64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Default,
    /// Children: `early` and `late` (each repeated), by index.
    AfterWatermark {
        early: Option<usize>,
        late: Option<usize>,
    },
    AfterProcessingTime(Vec<TimeTransform>),
    AfterSynchronizedProcessingTime,
    AfterCount(u64),
    AfterAny,
    AfterAll,
    AfterEach,
    Repeatedly,
    Never,
    Always,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    kind: Kind,
    children: Vec<usize>,
    /// One past the last node of its subtree (nodes are in preorder).
    end: usize,
}

/// A trigger tree, flattened in preorder (node 0 is the root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger {
    nodes: Vec<Node>,
    /// Some part waits for processing time (asked per element).
    processing_time: bool,
}

/// One node's state in one window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Cell {
    finished: bool,
    /// AfterWatermark: the end of the window was reached (late phase).
    late: bool,
    count: u64,
    deadline: Option<Millis>,
}

/// A window's trigger state: a cell per node of its `Trigger`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TriggerState {
    cells: Vec<Cell>,
}

/// The times a trigger is asked about: the GroupByKey's input watermark,
/// processing time, and the window's last timestamp.
#[derive(Clone, Copy, Debug)]
pub struct Now {
    pub watermark: Watermark,
    pub processing: Millis,
    pub window_max: Millis,
    /// Asked after an element, before the rest of its batch: a trigger on
    /// synchronized processing time (the batch's clock) waits for its end.
    pub mid_batch: bool,
}

impl Now {
    fn end_of_window_passed(&self) -> bool {
        Watermark::At(self.window_max) < self.watermark
    }
}

/// Nesting deeper than this is refused (a trigger tree is tiny in practice).
const MAX_NODES: usize = 256;

fn name(t: &Option<T>) -> &'static str {
    match t {
        None => "unset",
        Some(T::AfterAll(_)) => "AfterAll",
        Some(T::AfterAny(_)) => "AfterAny",
        Some(T::AfterEach(_)) => "AfterEach",
        Some(T::AfterEndOfWindow(_)) => "AfterWatermark",
        Some(T::AfterProcessingTime(_)) => "AfterProcessingTime",
        Some(T::AfterSynchronizedProcessingTime(_)) => "AfterSynchronizedProcessingTime",
        Some(T::Always(_)) => "Always",
        Some(T::Default(_)) => "Default",
        Some(T::ElementCount(_)) => "AfterCount",
        Some(T::Never(_)) => "Never",
        Some(T::OrFinally(_)) => "OrFinally",
        Some(T::Repeat(_)) => "Repeatedly",
    }
}

impl Trigger {
    /// The default trigger (what an unset trigger means).
    pub fn default_trigger() -> Trigger {
        Trigger { nodes: vec![Node { kind: Kind::Default, children: vec![], end: 1 }], processing_time: false }
    }

    pub fn from_proto(t: Option<&pb::Trigger>) -> Result<Trigger, String> {
        let mut nodes = Vec::new();
        match t {
            None => return Ok(Trigger::default_trigger()),
            Some(t) => add(&mut nodes, t, 0)?,
        };
        let processing_time = nodes.iter().any(|n| matches!(n.kind, Kind::AfterProcessingTime(_)));
        Ok(Trigger { nodes, processing_time })
    }

    /// Whether this is the default trigger (or a plain AfterWatermark): it
    /// fires on elements only once the watermark passed the window's end.
    pub fn is_watermark_only(&self) -> bool {
        matches!(self.nodes[0].kind, Kind::Default | Kind::AfterWatermark { early: None, .. })
    }

    /// Whether any part waits for processing time (deadlines to track).
    pub fn uses_processing_time(&self) -> bool {
        self.processing_time
    }

    /// Whether a pane fires on time as well as early (Python's
    /// `has_ontime_pane`): an early firing keeps the watermark hold for it.
    pub fn has_on_time_pane(&self) -> bool {
        self.has_on_time(0)
    }

    fn has_on_time(&self, n: usize) -> bool {
        match self.nodes[n].kind {
            Kind::Default | Kind::AfterWatermark { .. } => true,
            Kind::Repeatedly | Kind::AfterAny | Kind::AfterAll | Kind::AfterEach => {
                self.nodes[n].children.iter().any(|&c| self.has_on_time(c))
            }
            _ => false,
        }
    }

    /// A fresh window's state.
    pub fn new_state(&self) -> TriggerState {
        TriggerState { cells: vec![Cell::default(); self.nodes.len()] }
    }

    /// Whether the trigger finished: the window is closed.
    pub fn is_finished(&self, s: &TriggerState) -> bool {
        s.cells.first().is_some_and(|c| c.finished)
    }

    /// The earliest processing-time deadline the state waits for.
    pub fn next_deadline(&self, s: &TriggerState) -> Option<Millis> {
        s.cells.iter().filter(|c| !c.finished).filter_map(|c| c.deadline).min()
    }

    pub fn on_element(&self, s: &mut TriggerState, now: &Now) {
        self.fit(s);
        self.element(0, s, now);
    }

    fn element(&self, n: usize, s: &mut TriggerState, now: &Now) {
        if s.cells[n].finished {
            return;
        }
        let node = &self.nodes[n];
        match &node.kind {
            Kind::Default | Kind::Never => {}
            Kind::AfterCount(_) | Kind::Always | Kind::AfterSynchronizedProcessingTime => {
                s.cells[n].count = s.cells[n].count.saturating_add(1)
            }
            Kind::AfterProcessingTime(transforms) => {
                if s.cells[n].deadline.is_none() {
                    s.cells[n].deadline = Some(deadline(now.processing, transforms));
                }
            }
            Kind::AfterWatermark { early, late } => {
                let phase = if s.cells[n].late { late } else { early };
                if let Some(c) = phase {
                    self.element(*c, s, now);
                }
            }
            Kind::AfterAny | Kind::AfterAll | Kind::Repeatedly => {
                for &c in &node.children {
                    self.element(c, s, now);
                }
            }
            Kind::AfterEach => {
                if let Some(c) = self.current(n, s) {
                    self.element(c, s, now);
                }
            }
        }
    }

    /// The subtrigger of an AfterEach that runs now: the first unfinished.
    fn current(&self, n: usize, s: &TriggerState) -> Option<usize> {
        self.nodes[n].children.iter().copied().find(|&c| !s.cells[c].finished)
    }

    pub fn should_fire(&self, s: &mut TriggerState, now: &Now) -> bool {
        self.fit(s);
        self.fires(0, s, now)
    }

    fn fires(&self, n: usize, s: &TriggerState, now: &Now) -> bool {
        let cell = s.cells[n];
        if cell.finished {
            return false;
        }
        let node = &self.nodes[n];
        match &node.kind {
            Kind::Default => now.end_of_window_passed(),
            Kind::Always => cell.count > 0,
            Kind::AfterSynchronizedProcessingTime => cell.count > 0 && !now.mid_batch,
            Kind::Never => false,
            Kind::AfterCount(n) => cell.count >= *n,
            Kind::AfterProcessingTime(_) => cell.deadline.is_some_and(|d| now.processing >= d),
            Kind::AfterWatermark { early, late } => {
                if cell.late {
                    late.is_some_and(|c| self.fires(c, s, now))
                } else {
                    now.end_of_window_passed() || early.is_some_and(|c| self.fires(c, s, now))
                }
            }
            Kind::AfterAny => node.children.iter().any(|&c| self.fires(c, s, now)),
            Kind::AfterAll => node.children.iter().all(|&c| s.cells[c].finished || self.fires(c, s, now)),
            Kind::AfterEach => self.current(n, s).is_some_and(|c| self.fires(c, s, now)),
            Kind::Repeatedly => node.children.first().is_some_and(|&c| self.fires(c, s, now)),
        }
    }

    /// Records a firing (call only when `should_fire` said so).
    pub fn on_fire(&self, s: &mut TriggerState, now: &Now) {
        self.fit(s);
        self.fire(0, s, now);
    }

    fn fire(&self, n: usize, s: &mut TriggerState, now: &Now) {
        let node = &self.nodes[n];
        match &node.kind {
            Kind::Default | Kind::Never => {}
            Kind::Always | Kind::AfterSynchronizedProcessingTime => s.cells[n].count = 0,
            Kind::AfterCount(_) | Kind::AfterProcessingTime(_) => s.cells[n].finished = true,
            Kind::AfterWatermark { early, late } => {
                if s.cells[n].late {
                    if let Some(c) = *late {
                        self.fire_repeated(c, s, now);
                    }
                } else if now.end_of_window_passed() {
                    // The on-time firing: the early phase is over.
                    s.cells[n].late = true;
                    if let Some(c) = *early {
                        self.reset(c, s);
                    }
                    if late.is_none() {
                        s.cells[n].finished = true;
                    }
                } else if let Some(c) = *early {
                    self.fire_repeated(c, s, now);
                }
            }
            Kind::AfterAny | Kind::AfterAll => {
                let ready: Vec<usize> = node.children.iter().copied().filter(|&c| self.fires(c, s, now)).collect();
                for c in ready {
                    self.fire(c, s, now);
                }
                let mut done = node.children.iter().map(|&c| s.cells[c].finished);
                s.cells[n].finished = if node.kind == Kind::AfterAny { done.any(|d| d) } else { done.all(|d| d) };
            }
            Kind::AfterEach => {
                if let Some(c) = self.current(n, s) {
                    self.fire(c, s, now);
                }
                s.cells[n].finished = self.current(n, s).is_none();
            }
            Kind::Repeatedly => {
                if let Some(&c) = node.children.first() {
                    self.fire_repeated(c, s, now);
                }
            }
        }
    }

    /// Fires a subtrigger that repeats: once it finished it starts over.
    fn fire_repeated(&self, c: usize, s: &mut TriggerState, now: &Now) {
        self.fire(c, s, now);
        if s.cells[c].finished {
            self.reset(c, s);
        }
    }

    /// Clears the state of node `n`'s subtree.
    fn reset(&self, n: usize, s: &mut TriggerState) {
        for cell in &mut s.cells[n..self.nodes[n].end] {
            *cell = Cell::default();
        }
    }

    /// The state of a window merged from windows with `states`.
    pub fn merge<'a>(&self, states: impl IntoIterator<Item = &'a TriggerState>) -> TriggerState {
        let mut out = self.new_state();
        for s in states {
            for (o, c) in out.cells.iter_mut().zip(&s.cells) {
                o.finished |= c.finished;
                o.late |= c.late;
                o.count = o.count.saturating_add(c.count);
                o.deadline = match (o.deadline, c.deadline) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        out
    }

    /// A state decoded from elsewhere (another trigger's, or empty) has as
    /// many cells as this trigger has nodes.
    fn fit(&self, s: &mut TriggerState) {
        if s.cells.len() != self.nodes.len() {
            *s = self.new_state();
        }
    }
}

fn deadline(now: Millis, transforms: &[TimeTransform]) -> Millis {
    transforms.iter().fold(now, |t, tr| match *tr {
        TimeTransform::Delay(d) => t.saturating_add(d),
        TimeTransform::AlignTo { period, offset } if period > 0 => {
            let since = t.saturating_sub(offset).rem_euclid(period);
            if since == 0 {
                t
            } else {
                t.saturating_add(period - since)
            }
        }
        TimeTransform::AlignTo { .. } => t,
    })
}

/// Appends the node for `t` and its subtree; returns its index.
fn add(nodes: &mut Vec<Node>, t: &pb::Trigger, depth: usize) -> Result<usize, String> {
    if nodes.len() >= MAX_NODES || depth > 32 {
        return Err(format!("a trigger of more than {MAX_NODES} parts, or nested deeper than 32, is not supported"));
    }
    let at = nodes.len();
    nodes.push(Node { kind: Kind::Never, children: vec![], end: at + 1 });
    let sub = |nodes: &mut Vec<Node>, t: &Option<Box<pb::Trigger>>, what: &str| -> Result<usize, String> {
        let t = t.as_deref().ok_or_else(|| format!("a {what} trigger without its subtrigger"))?;
        add(nodes, t, depth + 1)
    };
    let (kind, children) = match &t.trigger {
        None | Some(T::Default(_)) => (Kind::Default, vec![]),
        Some(T::Always(_)) => (Kind::Always, vec![]),
        Some(T::Never(_)) => (Kind::Never, vec![]),
        Some(T::AfterSynchronizedProcessingTime(_)) => (Kind::AfterSynchronizedProcessingTime, vec![]),
        Some(T::ElementCount(c)) => (Kind::AfterCount(c.element_count.max(1) as u64), vec![]),
        Some(T::AfterProcessingTime(p)) => {
            let mut transforms = Vec::new();
            for tr in &p.timestamp_transforms {
                use pb::timestamp_transform::TimestampTransform as TT;
                transforms.push(match &tr.timestamp_transform {
                    Some(TT::Delay(d)) => TimeTransform::Delay(d.delay_millis),
                    Some(TT::AlignTo(a)) => TimeTransform::AlignTo { period: a.period, offset: a.offset },
                    None => return Err("an AfterProcessingTime with an empty timestamp transform".into()),
                });
            }
            (Kind::AfterProcessingTime(transforms), vec![])
        }
        Some(T::AfterEndOfWindow(a)) => {
            // Early and late firings repeat (as every SDK wraps them).
            let mut repeated = |t: &Option<Box<pb::Trigger>>| -> Result<Option<usize>, String> {
                let Some(t) = t.as_deref() else { return Ok(None) };
                if matches!(t.trigger, Some(T::Repeat(_))) {
                    return add(nodes, t, depth + 1).map(Some);
                }
                let r = nodes.len();
                nodes.push(Node { kind: Kind::Repeatedly, children: vec![], end: r + 1 });
                let c = add(nodes, t, depth + 1)?;
                nodes[r].children = vec![c];
                nodes[r].end = nodes.len();
                Ok(Some(r))
            };
            let early = repeated(&a.early_firings)?;
            let late = repeated(&a.late_firings)?;
            let children = early.into_iter().chain(late).collect();
            (Kind::AfterWatermark { early, late }, children)
        }
        Some(T::Repeat(r)) => (Kind::Repeatedly, vec![sub(nodes, &r.subtrigger, "Repeatedly")?]),
        Some(T::OrFinally(o)) => (Kind::AfterAny, vec![sub(nodes, &o.main, "OrFinally")?, sub(nodes, &o.finally, "OrFinally")?]),
        Some(kind @ (T::AfterAny(_) | T::AfterAll(_) | T::AfterEach(_))) => {
            let subs = match kind {
                T::AfterAny(a) => &a.subtriggers,
                T::AfterAll(a) => &a.subtriggers,
                T::AfterEach(a) => &a.subtriggers,
                _ => unreachable!("matched above"),
            };
            if subs.is_empty() {
                return Err(format!("an {} trigger without subtriggers", name(&t.trigger)));
            }
            let children = subs.iter().map(|s| add(nodes, s, depth + 1)).collect::<Result<Vec<_>, _>>()?;
            let k = match kind {
                T::AfterAny(_) => Kind::AfterAny,
                T::AfterAll(_) => Kind::AfterAll,
                _ => Kind::AfterEach,
            };
            (k, children)
        }
    };
    nodes[at].kind = kind;
    nodes[at].children = children;
    nodes[at].end = nodes.len();
    Ok(at)
}

impl TriggerState {
    /// Durable form: cell count, then per cell flags, count and deadline.
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_varint(self.cells.len() as u64, out);
        for c in &self.cells {
            out.push(c.finished as u8 | (c.late as u8) << 1 | (c.deadline.is_some() as u8) << 2);
            encode_varint(c.count, out);
            if let Some(d) = c.deadline {
                out.extend_from_slice(&d.to_be_bytes());
            }
        }
    }

    pub fn decode(r: &mut ByteReader) -> Result<TriggerState, String> {
        let n = r.varint()? as usize;
        if n > MAX_NODES {
            return Err(format!("a trigger state of {n} cells"));
        }
        let mut cells = Vec::with_capacity(n);
        for _ in 0..n {
            let flags = r.take(1)?[0];
            let count = r.varint()?;
            let deadline = if flags & 4 != 0 { Some(r.i64()?) } else { None };
            cells.push(Cell { finished: flags & 1 != 0, late: flags & 2 != 0, count, deadline });
        }
        Ok(TriggerState { cells })
    }
}

#[cfg(test)]
#[path = "trigger_tests.rs"]
mod tests;
