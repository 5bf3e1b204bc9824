//! Merging windows in a GroupByKey, and what the SDK tells it about custom
//! WindowFns (see `window_fns`).
//!
//! Sessions merge here: a new window takes in every window of its key it
//! overlaps, over and over until none is left. Any other merging WindowFn
//! merges in the SDK: before a batch is added, the task asks it with every
//! window of each key in the batch (`merge_requests`), and the batch is
//! added with its answer (`add_batch_merged`), as Beam's runners merge once
//! per bundle. Windows of a WindowFn the runner cannot read get their last
//! timestamp from the SDK first (`windows_to_resolve`, `resolve_ends`).
use std::collections::{BTreeSet, HashMap};

use crate::codec::timestamp::Millis;
use crate::codec::windowed::{self, Window, UNRESOLVED_MAX};
use crate::gbk::{max_opt, min_opt, GroupByKey, Pane};
use crate::window::window_fns::Merge;

/// Per key (its bytes), every window to merge.
pub type MergeRequests = Vec<(Vec<u8>, Vec<Window>)>;

/// Fired and on-time counts of panes a merge took in, by window.
type Counts = Vec<(Window, u64, u64)>;

impl GroupByKey {
    /// Whether the SDK merges this GroupByKey's windows.
    pub fn merges_in_sdk(&self) -> bool {
        self.spec.merging && self.spec.sdk.as_ref().is_some_and(|s| s.merges)
    }

    /// `window` with its last timestamp, if the SDK told it.
    pub(crate) fn resolve(&self, window: Window) -> Window {
        match &window {
            Window::Opaque { bytes, .. } => {
                let max = self.ends.get(bytes).copied().unwrap_or(UNRESOLVED_MAX);
                window.with_max(max)
            }
            _ => window,
        }
    }

    /// The opaque windows of `elements` whose last timestamp is not known
    /// yet, each once.
    pub fn windows_to_resolve<'a>(&self, elements: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<Window>, String> {
        let mut seen = BTreeSet::new();
        if !matches!(self.spec.window_coder, crate::codec::coder::Coder::LengthPrefix(_)) {
            return Ok(Vec::new());
        }
        for e in elements {
            for w in windowed::split(e, &self.spec.window_coder)?.windows {
                let body = windowed::window_body(w, &self.spec.window_coder);
                if !self.ends.contains_key(body) {
                    seen.insert(body.to_vec());
                }
            }
        }
        Ok(seen.into_iter().map(|b| Window::Opaque { max: UNRESOLVED_MAX, bytes: b.into() }).collect())
    }

    /// Records the last timestamps the SDK gave opaque windows.
    pub fn resolve_ends(&mut self, ends: impl IntoIterator<Item = (Window, Millis)>) {
        for (w, max) in ends {
            if let Window::Opaque { bytes, .. } = w {
                self.ends.insert(bytes, max);
            }
        }
    }

    /// What to ask the SDK to merge before adding `elements`: per key they
    /// bring, every window the key has and the new ones, in window order.
    pub fn merge_requests<'a>(&self, elements: impl IntoIterator<Item = &'a [u8]>) -> Result<MergeRequests, String> {
        let mut by_key: HashMap<Vec<u8>, BTreeSet<Window>> = HashMap::new();
        for e in elements {
            let (key, _) = self.key_of(e)?;
            let h = windowed::split(e, &self.spec.window_coder)?;
            let windows = by_key.entry(key.to_vec()).or_default();
            for w in h.windows {
                windows.insert(self.resolve(Window::decode(w, &self.spec.window_coder)?));
            }
        }
        let mut out: MergeRequests = by_key
            .into_iter()
            .map(|(key, mut windows)| {
                windows.extend(self.panes.windows(&key).filter(|w| !self.panes.get(&key, w).is_some_and(|p| p.closed)).cloned());
                (key, windows.into_iter().collect())
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Adds a batch with the merges the SDK made for its keys (the answer
    /// to `merge_requests`; windows it returns get their known ends).
    pub fn add_batch_merged<'a>(
        &mut self,
        elements: impl IntoIterator<Item = &'a [u8]>,
        merges: HashMap<Vec<u8>, Vec<Merge>>,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<(), String> {
        self.plan = merges
            .into_iter()
            .map(|(key, ms)| {
                let ms = ms
                    .into_iter()
                    .map(|m| Merge {
                        result: self.resolve(m.result),
                        originals: m.originals.into_iter().map(|w| self.resolve(w)).collect(),
                    })
                    .collect();
                (key, ms)
            })
            .collect();
        let result = self.add_batch(elements, out);
        self.plan.clear();
        result
    }

    /// Merges `window` as the WindowFn says; returns the window its value
    /// goes to.
    pub(crate) fn merge_into(&mut self, key: &[u8], window: Window) -> Window {
        if self.merges_in_sdk() {
            self.merge_by_plan(key, window)
        } else {
            self.merge_sessions(key, window)
        }
    }

    /// Applies the SDK's merge that took `window` in, if any.
    fn merge_by_plan(&mut self, key: &[u8], window: Window) -> Window {
        let Some(m) = self.plan.get(key).and_then(|ms| ms.iter().find(|m| m.originals.contains(&window) || m.result == window)) else {
            return window;
        };
        let result = m.result.clone();
        let mut sources: Vec<Window> = m.originals.iter().filter(|w| self.panes.get(key, w).is_some()).cloned().collect();
        if self.panes.get(key, &result).is_some() && !sources.contains(&result) {
            sources.push(result.clone());
        }
        if sources.is_empty() || sources == [result.clone()] {
            return result;
        }
        sources.sort();
        let mut counts = Vec::new();
        self.combine(key, &sources, result.clone(), &mut counts, None);
        self.restore_counts(key, &result, &counts);
        result
    }

    /// Merges `window` with the key's overlapping session windows (moving
    /// their contents and merging their trigger states) and returns the
    /// merged window.
    fn merge_sessions(&mut self, key: &[u8], window: Window) -> Window {
        let Window::Interval { mut start, mut end } = window else { return window };
        // Pane indexes are not carried across a merge (as in Beam's Java and
        // Python runners): the merged window keeps those of the window it
        // was already, if any; a new window starts at index 0.
        let mut counts: Counts = Vec::new();
        let mut created: Option<Window> = None;
        loop {
            let current = Window::Interval { start, end };
            let mut overlapping: Vec<Window> = self
                .panes
                .windows(key)
                .filter(|w| matches!(w, Window::Interval { start: s, end: e } if *s < end && start < *e && **w != current))
                .cloned()
                .collect();
            if overlapping.is_empty() {
                if created.is_some() {
                    self.restore_counts(key, &current, &counts);
                }
                return current;
            }
            // In window order, so a merged pane's values do not depend on
            // the order its windows were created in (a restored GroupByKey
            // merges as the original did).
            overlapping.sort();
            for w in &overlapping {
                if let Window::Interval { start: s, end: e } = *w {
                    start = start.min(s);
                    end = end.max(e);
                }
            }
            let mut sources = vec![current];
            sources.extend(overlapping);
            let merged = Window::Interval { start, end };
            self.combine(key, &sources, merged.clone(), &mut counts, created.as_ref());
            created = Some(merged);
        }
    }

    /// Gives the merged window the pane indexes it had, if it was a window
    /// before the merge (a new one starts at 0).
    fn restore_counts(&mut self, key: &[u8], merged: &Window, counts: &Counts) {
        let (fired, on_time) = counts.iter().find(|(w, ..)| w == merged).map_or((0, 0), |c| (c.1, c.2));
        if let Some(p) = self.panes.get_mut(key, merged) {
            (p.fired, p.fired_on_time_or_late) = (fired, on_time);
        }
    }

    /// Moves the panes of `sources` (those that exist) into one pane of
    /// `merged`: values, timestamps, counts and trigger states; notes the
    /// firing counts of windows other than `created` (made by this merge).
    fn combine(&mut self, key: &[u8], sources: &[Window], merged_window: Window, counts: &mut Counts, created: Option<&Window>) {
        let mut merged = Pane::default();
        let mut states = Vec::new();
        // The merged window's end was seen if the window ending last saw it.
        let mut last_end: Option<(Millis, bool)> = None;
        for w in sources {
            let p = self.remove_pane(key, w).unwrap_or_default();
            if created != Some(w) {
                counts.push((w.clone(), p.fired, p.fired_on_time_or_late));
            }
            let end = w.max_timestamp();
            if last_end.is_none_or(|(e, seen)| end > e || (end == e && p.end_seen && !seen)) {
                last_end = Some((end, p.end_seen));
            }
            merged.values.append(p.values);
            merged.min_ts = min_opt(merged.min_ts, p.min_ts);
            merged.max_ts = max_opt(merged.max_ts, p.max_ts);
            merged.since_fire = merged.since_fire.saturating_add(p.since_fire);
            merged.closed |= p.closed;
            states.push(p.trigger);
        }
        merged.trigger = self.spec.trigger.merge(&states);
        if merged.closed {
            merged.values.clear();
        }
        self.dirty.push((key.to_vec(), merged_window.clone()));
        // Queue entries and deadlines of the merged windows now find no
        // pane; the merged one is queued (by `push`) if the watermark
        // passed an end no merged window saw, and its deadline listed.
        merged.end_seen = last_end.is_some_and(|(_, seen)| seen);
        // A pane in the changes is listed in `dirty` (just above).
        merged.in_changes = true;
        self.panes.insert(key, merged_window.clone(), merged);
        self.note_deadline(key, &merged_window);
    }
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
