//! GroupByKey and GroupAlsoByWindow: buffers values per (key, window), merges
//! session windows, and fires panes as the window's trigger
//! (`runtime::window::trigger`) decides. Pure: the task owning a shuffle partition
//! feeds it elements, watermarks and processing time, and ships what it
//! returns to the stage behind it.
//!
//! The trigger is asked after each batch of elements (as Beam's runners do:
//! a batch is a bundle's worth), when a processing-time deadline passes, and
//! when the watermark passes the end of the window or its end plus allowed
//! lateness (garbage collection, where what the trigger left unfired goes
//! out as the final pane). For a bounded input, elements are asked about
//! only at the next watermark step: a batch pipeline has no order of
//! arrival, so a key's elements meet the trigger together.
//!
//! Windows the watermark closes are fired lazily (`fire_closed`), as many as
//! the stage has room for: one watermark step can close millions of panes,
//! and handing them over at once would put the whole output in one commit
//! cycle. A closed pane stays in the state until it fired, so a restart fires
//! it again from the changelog, and it holds the output watermark meanwhile.

#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod merge;
pub(crate) mod panes;
pub mod spill;
pub mod state;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use crate::codec::coder::Coder;
use crate::codec::timestamp::{Millis, Watermark};
use crate::codec::windowed::{self, encode_pane, Timing, Window};
pub(crate) use crate::gbk::panes::Pane;
use crate::gbk::panes::Panes;
use crate::state::chunks::Stored;
use crate::window::trigger::Now;
use crate::window::windowing::{OutputTime, WindowingSpec};

pub(crate) type PaneId = (Vec<u8>, Window);

pub struct GroupByKey {
    pub(crate) spec: WindowingSpec,
    key: Coder,
    value: Coder,
    pub(crate) panes: Panes,
    pub(crate) input_watermark: Watermark,
    processing_time: Millis,
    /// Elements dropped because their window had expired or was closed.
    pub dropped_late: u64,
    /// Panes changed since the last `take_changes` (see `gbk::state`), in
    /// no order and possibly listed twice: sorted and deduplicated when
    /// taken (a set costs a tree search per changed pane).
    pub(crate) dirty: Vec<PaneId>,
    pub(crate) meta_dirty: bool,
    /// Chunk entries of panes removed since the last `take_changes`, to delete.
    pub(crate) gone: BTreeMap<PaneId, Stored>,
    /// Panes whose window end or expiry the watermark passed, to ask their
    /// trigger about, oldest watermark step first.
    closed: VecDeque<PaneId>,
    /// Panes that took elements since their trigger was last asked.
    touched: Vec<PaneId>,
    /// Panes the element being added reached, asked at once (see `add_batch`).
    just_touched: Vec<PaneId>,
    /// Within a batch: triggers on the batch's own clock (synchronized
    /// processing time) wait for its end.
    mid_batch: bool,
    /// Processing-time deadlines of triggers (stale entries are skipped).
    deadlines: BTreeSet<(Millis, Vec<u8>, Window)>,
    /// The last timestamps of opaque windows, as the SDK told them (see
    /// `gbk::merge`): by the window's encoding.
    pub(crate) ends: HashMap<Arc<[u8]>, Millis>,
    /// The merges the SDK made for the batch being added, by key.
    pub(crate) plan: HashMap<Vec<u8>, Vec<crate::window::window_fns::Merge>>,
    /// Panes that live in the store, for a batch GroupByKey (`gbk::spill`).
    pub(crate) spill: Option<crate::gbk::spill::Spill>,
}

impl GroupByKey {
    /// `input` is the element coder of the GroupByKey's input: a KV.
    pub fn new(spec: WindowingSpec, input: &Coder) -> Result<GroupByKey, String> {
        let Coder::Kv(key, value) = input else {
            return Err(format!("GroupByKey input must be KV-coded, found {input:?}"));
        };
        if !key.is_readable() || !value.is_readable() {
            return Err("GroupByKey input coder is not readable by the runner (it should be length-prefixed)".into());
        }
        Ok(GroupByKey {
            spec,
            key: *key.clone(),
            value: *value.clone(),
            panes: Panes::default(),
            input_watermark: Watermark::NegInf,
            processing_time: 0,
            dropped_late: 0,
            dirty: Vec::new(),
            meta_dirty: false,
            gone: BTreeMap::new(),
            closed: VecDeque::new(),
            touched: Vec::new(),
            just_touched: Vec::new(),
            mid_batch: false,
            deadlines: BTreeSet::new(),
            ends: HashMap::new(),
            plan: HashMap::new(),
            spill: None,
        })
    }

    /// Splits the first element of `buf`; returns the key bytes and the length
    /// consumed. The key bytes are what a shuffle partitions on.
    pub fn key_of<'a>(&self, buf: &'a [u8]) -> Result<(&'a [u8], usize), String> {
        let h = windowed::split(buf, &self.spec.window_coder)?;
        let k = self.key.skip(&buf[h.value_offset..])?;
        let v = self.value.skip(&buf[h.value_offset + k..])?;
        Ok((&buf[h.value_offset..h.value_offset + k], h.value_offset + k + v))
    }

    fn expired(&self, w: &Window) -> bool {
        match self.input_watermark {
            Watermark::NegInf => false,
            Watermark::PosInf => true,
            Watermark::At(wm) => w.max_timestamp().saturating_add(self.spec.allowed_lateness) < wm,
        }
    }

    pub(crate) fn end_passed(&self, w: &Window) -> bool {
        Watermark::At(w.max_timestamp()) < self.input_watermark
    }

    fn now(&self, w: &Window) -> Now {
        Now { watermark: self.input_watermark, processing: self.processing_time, window_max: w.max_timestamp(), mid_batch: self.mid_batch }
    }

    /// Adds one encoded element (a windowed KV) as a batch of its own.
    pub fn add(&mut self, element: &[u8], out: &mut Vec<Vec<u8>>) -> Result<(), String> {
        self.add_batch([element], out)
    }

    /// Adds a batch of encoded elements, asking the trigger of the window
    /// each reached after it (as Prism does: an element-count trigger fires
    /// at its count, however the elements were batched); appends the panes
    /// that fire. Nothing is copied per element but its value, into its pane.
    pub fn add_batch<'a>(&mut self, elements: impl IntoIterator<Item = &'a [u8]>, out: &mut Vec<Vec<u8>>) -> Result<(), String> {
        let mut result = Ok(());
        self.mid_batch = true;
        for element in elements {
            let pushed = self.push(element);
            for (key, window) in std::mem::take(&mut self.just_touched) {
                if !self.spec.bounded_input && self.panes.get(&key, &window).is_some_and(|p| !p.queued) {
                    self.evaluate(&key, window, false, false, out);
                }
            }
            if let Err(e) = pushed {
                result = Err(e);
                break;
            }
        }
        self.mid_batch = false;
        if !self.spec.bounded_input {
            self.evaluate_touched(out);
        }
        result
    }

    fn push(&mut self, element: &[u8]) -> Result<(), String> {
        let h = windowed::split(element, &self.spec.window_coder)?;
        let k = self.key.skip(&element[h.value_offset..])?;
        let key = &element[h.value_offset..h.value_offset + k];
        let rest = &element[h.value_offset + k..];
        let value = &rest[..self.value.skip(rest)?];
        for wbytes in &h.windows {
            let window = self.resolve(Window::decode(wbytes, &self.spec.window_coder)?);
            if self.expired(&window) {
                self.dropped_late = self.dropped_late.saturating_add(1);
                self.meta_dirty = true;
                continue;
            }
            let window = if self.spec.merging { self.merge_into(key, window) } else { window };
            let wm = self.input_watermark;
            let end_passed = self.end_passed(&window);
            let now = self.now(&window);
            let holds = match self.spec.output_time {
                OutputTime::EndOfWindow => !end_passed,
                _ => Watermark::At(h.timestamp) >= wm,
            };
            // A window born behind the watermark has no on-time pane: its
            // data is late (Java's runner calls such panes LATE too).
            let born_late = end_passed && self.panes.get(key, &window).is_none();
            let pane = self.panes.entry(key, window.clone());
            let new_pane = pane.values.is_empty() && pane.runs.is_empty();
            if born_late {
                pane.end_seen = true;
            }
            if pane.closed {
                self.dropped_late = self.dropped_late.saturating_add(1);
                self.meta_dirty = true;
                continue;
            }
            if !pane.in_changes {
                pane.in_changes = true;
                self.dirty.push((key.to_vec(), window.clone()));
            }
            // A window the watermark passed whose trigger was not asked yet
            // (a merged session): asked with the others of its step.
            if !pane.end_seen && !pane.queued && end_passed {
                pane.queued = true;
                self.closed.push_back((key.to_vec(), window.clone()));
            }
            pane.values.push(value);
            if holds {
                pane.min_ts = Some(pane.min_ts.map_or(h.timestamp, |m| m.min(h.timestamp)));
                pane.max_ts = Some(pane.max_ts.map_or(h.timestamp, |m| m.max(h.timestamp)));
            }
            pane.since_fire = pane.since_fire.saturating_add(1);
            self.spec.trigger.on_element(&mut pane.trigger, &now);
            // The default trigger fires on elements only once the window's
            // end passed: spare the open windows the list.
            if end_passed || !self.spec.trigger.is_watermark_only() {
                if !pane.touched {
                    pane.touched = true;
                    self.touched.push((key.to_vec(), window.clone()));
                }
                self.just_touched.push((key.to_vec(), window.clone()));
            }
            if self.spec.trigger.uses_processing_time() {
                self.note_deadline(key, &window);
            }
            self.note_resident(value.len(), new_pane.then_some(key.len()));
        }
        Ok(())
    }

    /// Lists the pane's processing-time deadline if it has a new one.
    pub(crate) fn note_deadline(&mut self, key: &[u8], window: &Window) {
        self.note_deadline_after(key, window, None);
    }

    /// The same, but a deadline at or before `offered` is only remembered,
    /// not listed: the pane's trigger was offered that time already (or, for
    /// a pane queued for the watermark's firing, will be asked when it
    /// fires), and listing it again would have it taken again at once.
    fn note_deadline_after(&mut self, key: &[u8], window: &Window, offered: Option<Millis>) {
        let trigger = &self.spec.trigger;
        let Some(pane) = self.panes.get_mut(key, window) else { return };
        let next = if pane.closed { None } else { trigger.next_deadline(&pane.trigger) };
        if next != pane.deadline {
            pane.deadline = next;
            if let Some(d) = next.filter(|d| offered.is_none_or(|o| *d > o)) {
                self.deadlines.insert((d, key.to_vec(), window.clone()));
            }
        }
    }

    /// Asks the trigger of every pane that took elements since it was last
    /// asked (not those waiting in the watermark's queue: asked there).
    fn evaluate_touched(&mut self, out: &mut Vec<Vec<u8>>) {
        for (key, window) in std::mem::take(&mut self.touched) {
            let Some(pane) = self.panes.get_mut(&key, &window) else { continue };
            pane.touched = false;
            if !pane.queued {
                self.evaluate(&key, window, false, false, out);
            }
        }
    }

    /// Fires (key, window) if its trigger says so (`expires`: the firing
    /// is the window's last); whether it fired.
    fn evaluate(&mut self, key: &[u8], window: Window, by_watermark: bool, expires: bool, out: &mut Vec<Vec<u8>>) -> bool {
        let now = self.now(&window);
        let trigger = &self.spec.trigger;
        let Some(pane) = self.panes.get_mut(key, &window) else { return false };
        if pane.closed || !trigger.should_fire(&mut pane.trigger, &now) {
            return false;
        }
        trigger.on_fire(&mut pane.trigger, &now);
        let finished = trigger.is_finished(&pane.trigger);
        self.emit(key, window.clone(), by_watermark, finished || expires, out);
        self.note_deadline(key, &window);
        true
    }

    /// Removes a pane, remembering its chunk entries for `take_changes` to
    /// delete; the pane it returns has none (it may move to another window).
    pub(crate) fn remove_pane(&mut self, key: &[u8], window: &Window) -> Option<Pane> {
        let mut pane = self.panes.remove(key, window)?;
        if self.writes_runs(&pane) {
            // Its values are runs (see `gbk::spill`): no entry of its own.
            self.delete_runs(key, window, &pane.runs);
            pane.runs.clear();
            pane.run_len = 0;
            return Some(pane);
        }
        let id = (key.to_vec(), window.clone());
        // Wherever it goes next, its entry there is new.
        pane.written = None;
        let stored = std::mem::take(&mut pane.stored);
        // Beside runs, a removed pane's entry is deleted through `gone`.
        if !stored.is_empty() || self.spill.is_some() {
            self.gone.entry(id.clone()).or_default().absorb(stored);
        }
        self.dirty.push(id);
        Some(pane)
    }

    /// Emits a pane of (key, window) — `by_watermark`: fired because the
    /// watermark passed the window's end or expiry; `is_last`: the window
    /// closes with it — unless nothing came since the last pane, which only
    /// an on-time pane fires with (`OnTimeBehavior.FIRE_ALWAYS`: after early
    /// panes discarded everything), and a last one with
    /// `ClosingBehavior.FIRE_ALWAYS`. Pane info as Beam defines it: early
    /// while the watermark has not passed the end of the window, on time for
    /// the first watermark-driven firing after it, late otherwise.
    fn emit(&mut self, key: &[u8], window: Window, by_watermark: bool, is_last: bool, out: &mut Vec<Vec<u8>>) {
        let early = !self.end_passed(&window);
        let (accumulating, output_time) = (self.spec.accumulating, self.spec.output_time);
        let on_time_always = self.spec.on_time_always;
        let final_pane_always = self.spec.final_pane_always;
        let keeps_hold = early && self.spec.trigger.has_on_time_pane();
        let Some(pane) = self.panes.get_mut(key, &window) else { return };
        if !pane.in_changes {
            pane.in_changes = true;
            self.dirty.push((key.to_vec(), window.clone()));
        }
        let timing = if early {
            Timing::Early
        } else if by_watermark && pane.fired_on_time_or_late == 0 {
            Timing::OnTime
        } else {
            Timing::Late
        };
        let new_data = pane.since_fire > 0;
        let wanted = new_data || (timing == Timing::OnTime && on_time_always) || (is_last && final_pane_always);
        if wanted {
            let ts = match output_time {
                OutputTime::EndOfWindow => window.max_timestamp(),
                OutputTime::EarliestInPane => pane.min_ts.unwrap_or(window.max_timestamp()),
                OutputTime::LatestInPane => pane.max_ts.unwrap_or(window.max_timestamp()),
            };
            let mut pane_bytes = Vec::new();
            let on_time_index = if early { 0 } else { pane.fired_on_time_or_late };
            encode_pane(pane.fired == 0, is_last, timing, pane.fired, on_time_index, &mut pane_bytes);
            let values = pane.values.concatenated();
            let mut value = Vec::with_capacity(key.len() + 4 + values.len());
            value.extend_from_slice(key);
            value.extend_from_slice(&(pane.values.len() as u32).to_be_bytes());
            value.extend_from_slice(values);
            let mut encoded = Vec::with_capacity(value.len() + 32);
            windowed::encode(ts, &window, &pane_bytes, &value, &mut encoded);
            out.push(encoded);
            // Saturating: the counts come back from a changelog, which may
            // hold anything.
            pane.fired = pane.fired.saturating_add(1);
            if !early {
                pane.fired_on_time_or_late = pane.fired_on_time_or_late.saturating_add(1);
            }
        }
        pane.since_fire = 0;
        if !keeps_hold {
            pane.min_ts = None;
            pane.max_ts = None;
        }
        if !accumulating || is_last {
            pane.values.clear();
            pane.stored.invalidate();
        }
        if is_last {
            pane.closed = true;
            pane.min_ts = None;
            pane.max_ts = None;
        }
    }

    /// Advances the input watermark and fires everything it makes due (all
    /// of it: see `set_watermark` and `fire_closed` for doing it in steps).
    pub fn advance(&mut self, wm: Watermark, out: &mut Vec<Vec<u8>>) {
        self.set_watermark(wm, out);
        self.fire_closed(usize::MAX, out);
    }

    /// Advances the input watermark: queues every window whose end or expiry
    /// it passed for its trigger to be asked, and drops the state of expired
    /// windows with nothing left to fire. For a bounded input, first asks
    /// the triggers of the windows that took elements since the last step
    /// (their panes go to `out`).
    pub fn set_watermark(&mut self, wm: Watermark, out: &mut Vec<Vec<u8>>) {
        if wm <= self.input_watermark {
            return;
        }
        if self.spec.bounded_input {
            self.evaluate_touched(out);
        }
        self.input_watermark = wm;
        self.meta_dirty = true;
        self.queue_closed();
        let expired: Vec<PaneId> =
            self.panes.iter().filter(|(_, w, p)| !p.queued && self.expired(w)).map(|(k, w, _)| (k.to_vec(), w.clone())).collect();
        for (key, window) in expired {
            self.remove_pane(&key, &window);
        }
        // Ends of expired opaque windows: an element of one is dropped as
        // late, after the SDK is asked again.
        if !self.ends.is_empty() {
            let lateness = self.spec.allowed_lateness;
            self.ends.retain(|_, max| Watermark::At(max.saturating_add(lateness)) >= wm);
        }
    }

    /// Queues the panes whose end the watermark passed whose trigger was not
    /// asked about it yet, and the expired ones still open (also after a
    /// restore), in (key, window) order.
    pub(crate) fn queue_closed(&mut self) {
        let wm = self.input_watermark;
        let lateness = self.spec.allowed_lateness;
        let mut closed = Vec::new();
        for (key, window, p) in self.panes.iter_mut() {
            let end = window.max_timestamp();
            let expired = wm == Watermark::PosInf || Watermark::At(end.saturating_add(lateness)) < wm;
            let due = (!p.end_seen && Watermark::At(end) < wm) || expired;
            if !p.queued && !p.closed && due {
                p.queued = true;
                closed.push((key.to_vec(), window.clone()));
            }
        }
        closed.sort_unstable();
        self.closed.extend(closed);
    }

    /// How many panes wait for the watermark's firing.
    pub fn closed_pending(&self) -> usize {
        self.closed.len() + usize::from(self.spilled_closed())
    }

    /// Asks the triggers of up to `limit` queued panes (the watermark passed
    /// their end or expiry), firing what they say and, at expiry, the final
    /// pane; returns how many panes it fired. Expired panes are dropped once
    /// asked.
    /// Panes of the store (`gbk::spill`) are not fired here: see `fire`.
    pub fn fire_closed(&mut self, limit: usize, out: &mut Vec<Vec<u8>>) -> usize {
        let mut fired = 0;
        while fired < limit {
            let Some((key, window)) = self.closed.pop_front() else { break };
            // A merged-away pane, or a second entry of one (a session merged
            // back into a queued window): nothing to do.
            if !self.panes.get(&key, &window).is_some_and(|p| p.queued) {
                continue;
            }
            fired += self.fire_one(&key, &window, out);
        }
        fired
    }

    /// Asks the trigger of a queued pane, fires what it says (and at expiry
    /// the final pane), and drops the pane if it expired; how many panes
    /// went to `out`.
    pub(crate) fn fire_one(&mut self, key: &[u8], window: &Window, out: &mut Vec<Vec<u8>>) -> usize {
        let expires = self.expired(window);
        let before = out.len();
        let asked = self.evaluate(key, window.clone(), true, expires, out);
        let Some(pane) = self.panes.get_mut(key, window) else { return out.len() - before };
        if expires && !asked && !pane.closed && (pane.since_fire > 0 || self.spec.final_pane_always) {
            // Garbage collection: the final pane of what the trigger left
            // unfired. Only with something new in it, unless the closing
            // behaviour asks for an empty one too (see WindowingSpec).
            self.emit(key, window.clone(), true, true, out);
        }
        if let Some(pane) = self.panes.get_mut(key, window) {
            pane.queued = false;
            pane.end_seen = true;
        }
        if expires {
            self.remove_pane(key, window);
        }
        out.len() - before
    }

    /// Sets processing time and fires the panes whose processing-time
    /// deadline it reached.
    pub fn set_processing_time(&mut self, now: Millis, out: &mut Vec<Vec<u8>>) {
        self.processing_time = self.processing_time.max(now);
        while let Some(first) = self.deadlines.first() {
            if first.0 > self.processing_time {
                break;
            }
            let (deadline, key, window) = self.deadlines.pop_first().expect("looked at above");
            let Some(pane) = self.panes.get_mut(&key, &window) else { continue };
            if pane.deadline != Some(deadline) {
                continue;
            }
            pane.deadline = None;
            if !pane.queued {
                self.evaluate(&key, window.clone(), false, false, out);
            }
            // A trigger that did not fire keeps the deadline it passed (a
            // queued pane, or AfterAll waiting for a count too): taking it
            // again would loop forever on the task's thread.
            self.note_deadline_after(&key, &window, Some(self.processing_time));
        }
    }

    /// The earliest processing-time deadline a trigger waits for.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.deadlines.first().map(|d| d.0)
    }

    /// Lists the deadlines of every pane again (after a restore).
    pub(crate) fn index_deadlines(&mut self) {
        self.deadlines.clear();
        let ids: Vec<PaneId> = self.panes.iter().map(|(k, w, _)| (k.to_vec(), w.clone())).collect();
        for (key, window) in ids {
            if let Some(p) = self.panes.get_mut(&key, &window) {
                p.deadline = None;
            }
            self.note_deadline(&key, &window);
        }
    }

    /// The earliest output timestamp of queued panes not yet fired: what
    /// the stage behind sees of the watermark may not pass it.
    pub fn closed_hold(&self) -> Watermark {
        self.closed
            .iter()
            .filter_map(|(k, w)| self.panes.get(k, w).filter(|p| p.queued && !p.closed).map(|p| self.output_timestamp(w, p)))
            .min()
            .map_or(Watermark::PosInf, Watermark::At)
            .min(self.spilled_hold(true))
    }

    fn output_timestamp(&self, w: &Window, p: &Pane) -> Millis {
        match self.spec.output_time {
            OutputTime::EndOfWindow => w.max_timestamp(),
            OutputTime::EarliestInPane => p.min_ts.unwrap_or(w.max_timestamp()),
            OutputTime::LatestInPane => p.max_ts.unwrap_or(w.max_timestamp()),
        }
    }

    /// The earliest output timestamp buffered data may still produce: the
    /// GroupByKey's output watermark may not pass it.
    pub fn hold(&self) -> Watermark {
        self.panes
            .iter()
            .filter(|(_, _, p)| p.min_ts.is_some() && !p.closed)
            .map(|(_, w, p)| Watermark::At(self.output_timestamp(w, p)))
            .min()
            .unwrap_or(Watermark::PosInf)
            .min(self.spilled_hold(false))
    }

    pub fn spec_allowed_lateness(&self) -> i64 {
        self.spec.allowed_lateness
    }

    /// Whether no pane holds values.
    pub fn is_empty(&self) -> bool {
        self.panes.iter().all(|(_, _, p)| p.values.is_empty()) && self.spill.as_ref().is_none_or(|s| s.windows.is_empty())
    }
}

pub(crate) fn min_opt(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

pub(crate) fn max_opt(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests;
