//! GroupByKey and GroupAlsoByWindow: buffers values per (key, window), merges
//! session windows, and fires panes by trigger and watermark. Pure: the task
//! owning a shuffle partition feeds it elements and watermarks and ships what
//! it returns to the stage behind it.
//!
//! Windows the watermark closes are fired lazily (`fire_closed`), as many as
//! the stage has room for: one watermark step can close millions of panes,
//! and handing them over at once would put the whole output in one commit
//! cycle. A closed pane stays in the state until it fired, so a restart fires
//! it again from the changelog, and it holds the output watermark meanwhile.
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::chunks::Stored;
use crate::coder::Coder;
pub(crate) use crate::panes::Pane;
use crate::panes::Panes;
use crate::timestamp::{Millis, Watermark};
use crate::windowed::{self, encode_pane, Timing, Window};
use crate::windowing::{OutputTime, Trigger, WindowingSpec};

pub struct GroupByKey {
    pub(crate) spec: WindowingSpec,
    key: Coder,
    value: Coder,
    pub(crate) panes: Panes,
    pub(crate) input_watermark: Watermark,
    /// Elements dropped because their window had expired.
    pub dropped_late: u64,
    /// Panes changed since the last `take_changes` (see `gbk_state`).
    pub(crate) dirty: BTreeSet<(Vec<u8>, Window)>,
    pub(crate) meta_dirty: bool,
    /// Chunk entries of panes removed since the last `take_changes`, to delete.
    pub(crate) gone: BTreeMap<(Vec<u8>, Window), Stored>,
    /// Panes whose window the watermark closed, to fire on time, oldest
    /// watermark step first.
    closed: VecDeque<(Vec<u8>, Window)>,
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
            dropped_late: 0,
            dirty: BTreeSet::new(),
            meta_dirty: false,
            gone: BTreeMap::new(),
            closed: VecDeque::new(),
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

    /// Adds one encoded element (a windowed KV); returns panes it fires.
    /// Nothing is copied per element but its value, into its pane.
    pub fn add(&mut self, element: &[u8], out: &mut Vec<Vec<u8>>) -> Result<(), String> {
        let h = windowed::split(element, &self.spec.window_coder)?;
        let k = self.key.skip(&element[h.value_offset..])?;
        let key = &element[h.value_offset..h.value_offset + k];
        let rest = &element[h.value_offset + k..];
        let value = &rest[..self.value.skip(rest)?];
        for wbytes in &h.windows {
            let window = Window::decode(wbytes, &self.spec.window_coder)?;
            if self.expired(&window) {
                self.dropped_late = self.dropped_late.saturating_add(1);
                self.meta_dirty = true;
                continue;
            }
            let window = if self.spec.merging { self.merge_into(key, window) } else { window };
            let pane = self.panes.entry(key, window);
            if !pane.in_changes {
                pane.in_changes = true;
                self.dirty.insert((key.to_vec(), window));
            }
            // A pane the watermark already closed (a merged session, or one
            // created behind the watermark within allowed lateness) fires
            // on time with the others.
            if !pane.on_time_done && !pane.queued && Watermark::At(window.max_timestamp()) < self.input_watermark {
                pane.queued = true;
                self.closed.push_back((key.to_vec(), window));
            }
            pane.values.push(value);
            pane.min_ts = Some(pane.min_ts.map_or(h.timestamp, |m| m.min(h.timestamp)));
            pane.max_ts = Some(pane.max_ts.map_or(h.timestamp, |m| m.max(h.timestamp)));
            pane.since_fire = pane.since_fire.saturating_add(1);
            let fire_now = match self.spec.trigger {
                Trigger::Always => true,
                Trigger::RepeatedCount(n) => pane.since_fire >= n,
                // After the on-time pane, every late element fires.
                Trigger::Default => pane.on_time_done,
            };
            let timing = if pane.on_time_done { Timing::Late } else { Timing::Early };
            if fire_now {
                self.fire(key, window, timing, false, out);
            }
        }
        Ok(())
    }

    /// Removes a pane, remembering its chunk entries for `take_changes` to
    /// delete; the pane it returns has none (it may move to another window).
    fn remove_pane(&mut self, key: &[u8], window: &Window) -> Option<Pane> {
        let mut pane = self.panes.remove(key, window)?;
        let id = (key.to_vec(), *window);
        let stored = std::mem::take(&mut pane.stored);
        if stored.chunks > 0 {
            let gone = self.gone.entry(id.clone()).or_default();
            gone.chunks = gone.chunks.max(stored.chunks);
        }
        self.dirty.insert(id);
        Some(pane)
    }

    /// Merges `window` with the key's overlapping session windows (moving
    /// their contents) and returns the merged window.
    fn merge_into(&mut self, key: &[u8], window: Window) -> Window {
        let Window::Interval { mut start, mut end } = window else { return window };
        loop {
            let mut overlapping: Vec<Window> = self
                .panes
                .windows(key)
                .filter_map(|w| match *w {
                    Window::Interval { start: s, end: e } if s < end && start < e && *w != (Window::Interval { start, end }) => Some(*w),
                    _ => None,
                })
                .collect();
            if overlapping.is_empty() {
                return Window::Interval { start, end };
            }
            // In window order, so a merged pane's values do not depend on
            // the order its windows were created in (a restored GroupByKey
            // merges as the original did).
            overlapping.sort();
            let mut merged = self.remove_pane(key, &Window::Interval { start, end }).unwrap_or_default();
            for w in overlapping {
                if let Window::Interval { start: s, end: e } = w {
                    start = start.min(s);
                    end = end.max(e);
                }
                let p = self.remove_pane(key, &w).expect("listed above");
                merged.values.append(p.values);
                merged.min_ts = min_opt(merged.min_ts, p.min_ts);
                merged.max_ts = max_opt(merged.max_ts, p.max_ts);
                merged.since_fire = merged.since_fire.saturating_add(p.since_fire);
                merged.fired = merged.fired.max(p.fired);
            }
            self.dirty.insert((key.to_vec(), Window::Interval { start, end }));
            // Queue entries of the merged windows now find no pane; `add`
            // queues the merged one if the watermark closed it.
            merged.queued = false;
            // A pane in the changes is listed in `dirty` (just above).
            merged.in_changes = true;
            self.panes.insert(key, Window::Interval { start, end }, merged);
        }
    }

    fn fire(&mut self, key: &[u8], window: Window, timing: Timing, is_last: bool, out: &mut Vec<Vec<u8>>) {
        let accumulating = self.spec.accumulating;
        let output_time = self.spec.output_time;
        let Some(pane) = self.panes.get_mut(key, &window) else { return };
        // Marked even if nothing fires: a spurious entry only rewrites a pane.
        if !pane.in_changes {
            pane.in_changes = true;
            self.dirty.insert((key.to_vec(), window));
        }
        if pane.values.is_empty() {
            return;
        }
        let ts = match output_time {
            OutputTime::EndOfWindow => window.max_timestamp(),
            OutputTime::EarliestInPane => pane.min_ts.unwrap_or(window.max_timestamp()),
            OutputTime::LatestInPane => pane.max_ts.unwrap_or(window.max_timestamp()),
        };
        let mut pane_bytes = Vec::new();
        let on_time_index = if timing == Timing::Early { 0 } else { pane.fired_on_time_or_late };
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
        if timing != Timing::Early {
            pane.fired_on_time_or_late = pane.fired_on_time_or_late.saturating_add(1);
        }
        pane.since_fire = 0;
        if !accumulating {
            pane.values.clear();
            pane.stored.invalidate();
            pane.min_ts = None;
            pane.max_ts = None;
        }
    }

    /// Advances the input watermark and fires every window it closes (all
    /// of them: see `set_watermark` and `fire_closed` for doing it in steps).
    pub fn advance(&mut self, wm: Watermark, out: &mut Vec<Vec<u8>>) {
        self.set_watermark(wm);
        self.fire_closed(usize::MAX, out);
    }

    /// Advances the input watermark: queues every window it closes for its
    /// on-time firing and drops the state of windows past their allowed
    /// lateness that have fired.
    pub fn set_watermark(&mut self, wm: Watermark) {
        if wm <= self.input_watermark {
            return;
        }
        self.input_watermark = wm;
        self.meta_dirty = true;
        self.queue_closed();
        let expired: Vec<(Vec<u8>, Window)> =
            self.panes.iter().filter(|(_, w, p)| !p.queued && self.expired(w)).map(|(k, w, _)| (k.to_vec(), *w)).collect();
        for (key, window) in expired {
            self.remove_pane(&key, &window);
        }
    }

    /// Queues the panes closed by the current watermark that are not yet
    /// queued or fired (also after a restore), in (key, window) order.
    pub(crate) fn queue_closed(&mut self) {
        let wm = self.input_watermark;
        let mut closed = Vec::new();
        for (key, window, p) in self.panes.iter_mut() {
            if !p.on_time_done && !p.queued && Watermark::At(window.max_timestamp()) < wm {
                p.queued = true;
                closed.push((key.to_vec(), *window));
            }
        }
        closed.sort_unstable();
        self.closed.extend(closed);
    }

    /// How many closed panes wait for their on-time firing.
    pub fn closed_pending(&self) -> usize {
        self.closed.len()
    }

    /// Fires up to `limit` closed panes on time (empty ones count nothing);
    /// returns how many it fired. Expired panes are dropped once fired.
    pub fn fire_closed(&mut self, limit: usize, out: &mut Vec<Vec<u8>>) -> usize {
        let mut fired = 0;
        while fired < limit {
            let Some((key, window)) = self.closed.pop_front() else { break };
            // A merged-away pane, or a second entry of one (a session merged
            // back into a queued window): nothing to fire.
            if !self.panes.get(&key, &window).is_some_and(|p| p.queued && !p.on_time_done) {
                continue;
            }
            let expires = self.expired(&window);
            let before = out.len();
            self.fire(&key, window, Timing::OnTime, expires, out);
            fired += out.len() - before;
            if let Some(p) = self.panes.get_mut(&key, &window) {
                p.on_time_done = true;
                p.queued = false;
                if expires {
                    self.remove_pane(&key, &window);
                }
            }
        }
        fired
    }

    /// The earliest output timestamp of closed panes not yet fired: what
    /// the stage behind sees of the watermark may not pass it.
    pub fn closed_hold(&self) -> Watermark {
        self.closed
            .iter()
            .filter_map(|(k, w)| self.panes.get(k, w).filter(|p| !p.values.is_empty()).map(|p| self.output_timestamp(w, p)))
            .min()
            .map_or(Watermark::PosInf, Watermark::At)
    }

    fn output_timestamp(&self, w: &Window, p: &Pane) -> Millis {
        match self.spec.output_time {
            OutputTime::EndOfWindow => w.max_timestamp(),
            _ => p.min_ts.unwrap_or(w.max_timestamp()),
        }
    }

    /// The earliest output timestamp buffered data may still produce: the
    /// GroupByKey's output watermark may not pass it.
    pub fn hold(&self) -> Watermark {
        self.panes
            .iter()
            .filter(|(_, _, p)| !p.values.is_empty())
            .map(|(_, w, p)| Watermark::At(self.output_timestamp(w, p)))
            .min()
            .unwrap_or(Watermark::PosInf)
    }

    pub fn spec_allowed_lateness(&self) -> i64 {
        self.spec.allowed_lateness
    }

    pub fn is_empty(&self) -> bool {
        self.panes.iter().all(|(_, _, p)| p.values.is_empty())
    }
}

fn min_opt(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn max_opt(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coders::{encode_nested_bytes, encode_varint};
    use crate::windowed::encode as encode_wv;

    fn spec(trigger: Trigger, window_coder: Coder) -> WindowingSpec {
        WindowingSpec {
            merging: false,
            trigger,
            accumulating: false,
            allowed_lateness: 0,
            output_time: OutputTime::EndOfWindow,
            window_coder,
        }
    }

    fn kv_coder() -> Coder {
        Coder::Kv(Box::new(Coder::StringUtf8), Box::new(Coder::Varint))
    }

    fn element(ts: Millis, window: Window, key: &str, value: u64) -> Vec<u8> {
        let mut kv = Vec::new();
        encode_nested_bytes(key.as_bytes(), &mut kv);
        encode_varint(value, &mut kv);
        let mut out = Vec::new();
        encode_wv(ts, &window, &[0x0f], &kv, &mut out);
        out
    }

    /// (timestamp, window, key, values) of a fired pane.
    fn decode(out: &[u8], wc: &Coder) -> (Millis, Window, String, Vec<u64>, u8) {
        let h = windowed::split(out, wc).unwrap();
        let w = Window::decode(h.windows[0], wc).unwrap();
        let v = &out[h.value_offset..];
        let klen = Coder::StringUtf8.skip(v).unwrap();
        let key = String::from_utf8(v[1..klen].to_vec()).unwrap();
        let count = u32::from_be_bytes(v[klen..klen + 4].try_into().unwrap());
        let mut at = klen + 4;
        let mut values = Vec::new();
        for _ in 0..count {
            let (x, n) = crate::coders::decode_varint(&v[at..]).unwrap();
            values.push(x);
            at += n;
        }
        (h.timestamp, w, key, values, h.pane[0])
    }

    #[test]
    fn default_trigger_groups_per_key_and_fires_at_end_of_window() {
        let mut g = GroupByKey::new(spec(Trigger::Default, Coder::GlobalWindow), &kv_coder()).unwrap();
        let mut out = Vec::new();
        for (k, v) in [("a", 1), ("b", 2), ("a", 3)] {
            g.add(&element(5, Window::Global, k, v), &mut out).unwrap();
        }
        assert!(out.is_empty());
        assert_eq!(g.hold(), Watermark::At(Window::Global.max_timestamp()));
        g.advance(Watermark::At(100), &mut out);
        assert!(out.is_empty(), "the global window is still open");
        g.advance(Watermark::PosInf, &mut out);
        let mut got: Vec<_> = out.iter().map(|o| decode(o, &Coder::GlobalWindow)).collect();
        got.sort_by(|a, b| a.2.cmp(&b.2));
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].2.as_str(), got[0].3.clone()), ("a", vec![1, 3]));
        assert_eq!((got[1].2.as_str(), got[1].3.clone()), ("b", vec![2]));
        assert_eq!(got[0].0, Window::Global.max_timestamp());
        assert_eq!(got[0].4, 0x07, "first, last, on time");
        assert!(g.is_empty());
    }

    #[test]
    fn fixed_windows_fire_as_the_watermark_passes_and_late_data_is_dropped() {
        let wc = Coder::IntervalWindow;
        let mut g = GroupByKey::new(spec(Trigger::Default, wc.clone()), &kv_coder()).unwrap();
        let w1 = Window::Interval { start: 0, end: 10 };
        let w2 = Window::Interval { start: 10, end: 20 };
        let mut out = Vec::new();
        g.add(&element(1, w1, "k", 1), &mut out).unwrap();
        g.add(&element(12, w2, "k", 2), &mut out).unwrap();
        g.advance(Watermark::At(10), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(decode(&out[0], &wc).1, w1);
        g.add(&element(2, w1, "k", 9), &mut out).unwrap();
        assert_eq!(g.dropped_late, 1, "window 1 expired with zero allowed lateness");
        assert_eq!(g.hold(), Watermark::At(19));
        g.advance(Watermark::PosInf, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(decode(&out[1], &wc).3, vec![2]);
    }

    #[test]
    fn sessions_merge_overlapping_windows_of_a_key() {
        let wc = Coder::IntervalWindow;
        let mut s = spec(Trigger::Default, wc.clone());
        s.merging = true;
        let mut g = GroupByKey::new(s, &kv_coder()).unwrap();
        let mut out = Vec::new();
        g.add(&element(0, Window::Interval { start: 0, end: 10 }, "k", 1), &mut out).unwrap();
        g.add(&element(20, Window::Interval { start: 20, end: 30 }, "k", 2), &mut out).unwrap();
        g.add(&element(8, Window::Interval { start: 8, end: 21 }, "k", 3), &mut out).unwrap();
        g.add(&element(8, Window::Interval { start: 8, end: 18 }, "other", 4), &mut out).unwrap();
        g.advance(Watermark::PosInf, &mut out);
        let mut got: Vec<_> = out.iter().map(|o| decode(o, &wc)).collect();
        got.sort_by(|a, b| a.2.cmp(&b.2));
        assert_eq!(got[0].1, Window::Interval { start: 0, end: 30 });
        let mut vals = got[0].3.clone();
        vals.sort();
        assert_eq!(vals, vec![1, 2, 3]);
        assert_eq!(got[1].1, Window::Interval { start: 8, end: 18 });
    }

    #[test]
    fn always_fires_each_element_and_counting_accumulates() {
        let mut g = GroupByKey::new(spec(Trigger::Always, Coder::GlobalWindow), &kv_coder()).unwrap();
        let mut out = Vec::new();
        g.add(&element(1, Window::Global, "k", 1), &mut out).unwrap();
        g.add(&element(2, Window::Global, "k", 2), &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(decode(&out[1], &Coder::GlobalWindow).3, vec![2]);
        g.advance(Watermark::PosInf, &mut out);
        assert_eq!(out.len(), 2, "nothing left to fire");

        let mut s = spec(Trigger::RepeatedCount(2), Coder::GlobalWindow);
        s.accumulating = true;
        let mut g = GroupByKey::new(s, &kv_coder()).unwrap();
        let mut out = Vec::new();
        for v in 1..=5 {
            g.add(&element(v as i64, Window::Global, "k", v), &mut out).unwrap();
        }
        assert_eq!(out.len(), 2);
        assert_eq!(decode(&out[1], &Coder::GlobalWindow).3, vec![1, 2, 3, 4]);
        g.advance(Watermark::PosInf, &mut out);
        assert_eq!(decode(&out[2], &Coder::GlobalWindow).3, vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn keys_are_found_for_partitioning() {
        let g = GroupByKey::new(spec(Trigger::Default, Coder::GlobalWindow), &kv_coder()).unwrap();
        let mut two = element(1, Window::Global, "ab", 7);
        let first_len = two.len();
        two.extend(element(1, Window::Global, "c", 8));
        let (key, len) = g.key_of(&two).unwrap();
        assert_eq!(len, first_len);
        assert_eq!(key, &[2, b'a', b'b']);
    }

    #[test]
    fn closed_windows_fire_in_steps_and_hold_the_watermark_until_fired() {
        let wc = Coder::IntervalWindow;
        // Lateness allowed: an element behind the watermark is not dropped.
        let mut g = GroupByKey::new(WindowingSpec { allowed_lateness: 100, ..spec(Trigger::Default, wc.clone()) }, &kv_coder()).unwrap();
        let mut out = Vec::new();
        for k in 0..5 {
            g.add(&element(1, Window::Interval { start: 0, end: 10 }, &format!("k{k}"), k), &mut out).unwrap();
        }
        g.add(&element(15, Window::Interval { start: 10, end: 20 }, "late-window", 9), &mut out).unwrap();
        g.set_watermark(Watermark::At(12));
        assert!(out.is_empty(), "closing a window fires nothing by itself");
        assert_eq!(g.closed_pending(), 5);
        assert_eq!(g.closed_hold(), Watermark::At(9));
        assert_eq!(g.fire_closed(2, &mut out), 2);
        assert_eq!(g.closed_pending(), 3);
        assert_eq!(g.closed_hold(), Watermark::At(9), "three panes of the window still wait");
        // An element for a closed but unfired window joins its on-time pane.
        g.add(&element(2, Window::Interval { start: 0, end: 10 }, "k4", 40), &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(g.fire_closed(usize::MAX, &mut out), 3);
        assert_eq!(g.closed_hold(), Watermark::PosInf);
        let got: Vec<_> = out.iter().map(|o| decode(o, &wc)).collect();
        assert_eq!(got.iter().filter(|g| g.1 == Window::Interval { start: 0, end: 10 }).count(), 5, "each key fired once");
        let k4 = got.iter().find(|g| g.2 == "k4").unwrap();
        assert_eq!(k4.3, vec![4, 40]);
        assert_eq!(g.hold(), Watermark::At(19), "the open window still holds");
    }

    #[test]
    fn closed_windows_not_yet_fired_fire_after_a_restore_and_expired_ones_only_after_firing() {
        let wc = Coder::IntervalWindow;
        let mut g = GroupByKey::new(spec(Trigger::Default, wc.clone()), &kv_coder()).unwrap();
        let mut out = Vec::new();
        for k in 0..3 {
            g.add(&element(1, Window::Interval { start: 0, end: 10 }, &format!("k{k}"), k), &mut out).unwrap();
        }
        // Past the end plus allowed lateness (0): expired, yet not dropped unfired.
        g.set_watermark(Watermark::At(50));
        assert_eq!(g.fire_closed(1, &mut out), 1);
        let changes = g.take_changes();
        let mut restored = GroupByKey::new(spec(Trigger::Default, wc.clone()), &kv_coder()).unwrap();
        restored.restore(changes.iter().filter_map(|(k, v)| v.as_deref().map(|v| (k.as_slice(), v)))).unwrap();
        assert_eq!(restored.closed_pending(), 2, "the unfired panes are queued again");
        let mut again = Vec::new();
        assert_eq!(restored.fire_closed(usize::MAX, &mut again), 2);
        let mut keys: Vec<String> = out.iter().chain(again.iter()).map(|o| decode(o, &wc).2).collect();
        keys.sort();
        assert_eq!(keys, vec!["k0", "k1", "k2"]);
        assert!(restored.is_empty(), "expired panes are dropped once they fired");
    }

    #[test]
    fn a_late_element_merging_into_a_closed_unfired_session_fires_it_once() {
        let wc = Coder::IntervalWindow;
        let mut s = WindowingSpec { allowed_lateness: 100, accumulating: true, ..spec(Trigger::Default, wc.clone()) };
        s.merging = true;
        let mut g = GroupByKey::new(s, &kv_coder()).unwrap();
        let mut out = Vec::new();
        g.add(&element(0, Window::Interval { start: 0, end: 10 }, "k", 1), &mut out).unwrap();
        g.add(&element(5, Window::Interval { start: 5, end: 15 }, "k", 2), &mut out).unwrap();
        g.set_watermark(Watermark::At(20));
        // Merges into [0, 15) again: the window is queued a second time.
        g.add(&element(2, Window::Interval { start: 2, end: 12 }, "k", 3), &mut out).unwrap();
        assert_eq!(g.fire_closed(usize::MAX, &mut out), 1);
        let got: Vec<_> = out.iter().map(|o| decode(o, &wc)).collect();
        assert_eq!(got.len(), 1, "one on-time pane: {got:?}");
        assert_eq!(got[0].1, Window::Interval { start: 0, end: 15 });
        let mut vals = got[0].3.clone();
        vals.sort();
        assert_eq!(vals, vec![1, 2, 3]);
    }
}
