//! A GroupByKey's panes: per key, the panes of its windows, found by the
//! key's bytes without copying them (the path of every shuffled element),
//! and each pane's values in one buffer (no allocation per value).
use hashbrown::HashMap;

use crate::codec::timestamp::Millis;
use crate::codec::windowed::Window;
use crate::state::chunks::Stored;
use crate::window::trigger::TriggerState;

/// Values as the value coder wrote them, concatenated, with where each ends.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Values {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Values {
    pub(crate) fn push(&mut self, value: &[u8]) {
        self.bytes.extend_from_slice(value);
        self.ends.push(self.bytes.len());
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Moves `other`'s values after these.
    pub(crate) fn append(&mut self, other: Values) {
        if self.is_empty() {
            *self = other;
            return;
        }
        let base = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        self.ends.extend(other.ends.iter().map(|e| e + base));
    }

    /// Every value, concatenated: what a fired pane carries.
    pub(crate) fn concatenated(&self) -> &[u8] {
        &self.bytes
    }

    /// The values from the `first` on.
    pub(crate) fn from(&self, first: usize) -> impl Iterator<Item = &[u8]> {
        let first = first.min(self.ends.len());
        let mut start = if first == 0 { 0 } else { self.ends[first - 1] };
        self.ends[first..].iter().map(move |&end| {
            let v = &self.bytes[start..end];
            start = end;
            v
        })
    }
}

#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Pane {
    pub(crate) values: Values,
    /// The earliest and latest timestamps of the elements that hold the
    /// output watermark for the next pane (those not behind the watermark
    /// when they came; cleared when a pane fires, unless an on-time pane is
    /// still to come after an early one).
    pub(crate) min_ts: Option<Millis>,
    pub(crate) max_ts: Option<Millis>,
    /// Panes emitted so far, and how many of them were on time or late.
    pub(crate) fired: u64,
    pub(crate) fired_on_time_or_late: u64,
    /// The watermark passed the end of the window and the trigger was asked.
    pub(crate) end_seen: bool,
    /// Elements since the last firing.
    pub(crate) since_fire: u64,
    /// The trigger finished (or the final pane fired): the window takes no
    /// more elements and keeps no values; it stays until it expires.
    pub(crate) closed: bool,
    pub(crate) trigger: TriggerState,
    /// Listed in `GroupByKey::dirty` (not stored): spares `add` a lookup
    /// there per element.
    pub(crate) in_changes: bool,
    /// Listed in `GroupByKey::closed` (not stored).
    pub(crate) queued: bool,
    /// Listed in `GroupByKey::touched` (not stored).
    pub(crate) touched: bool,
    /// The processing-time deadline listed in `GroupByKey::deadlines`.
    pub(crate) deadline: Option<Millis>,
    /// What of `values` the pane's chunk entries hold (see `gbk::state`).
    pub(crate) stored: Stored,
    /// A hash of the pane entry last written or restored (see
    /// `gbk::state::take_changes`): an entry that did not change is not
    /// written again.
    pub(crate) written: Option<u64>,
    /// Runs its values were written as (see `gbk::spill`): (run, parts).
    pub(crate) runs: Vec<(u32, u16)>,
    /// How many of `values` those runs hold.
    pub(crate) run_len: usize,
}

/// Panes by key, then window. A key has few windows (one, a few sliding
/// ones, or its sessions), so they are a list; merging sessions reads it.
#[derive(Debug, Default)]
pub(crate) struct Panes {
    by_key: HashMap<Vec<u8>, Vec<(Window, Pane)>>,
}

impl Panes {
    pub(crate) fn get(&self, key: &[u8], window: &Window) -> Option<&Pane> {
        self.by_key.get(key)?.iter().find(|(w, _)| w == window).map(|(_, p)| p)
    }

    pub(crate) fn get_mut(&mut self, key: &[u8], window: &Window) -> Option<&mut Pane> {
        self.by_key.get_mut(key)?.iter_mut().find(|(w, _)| w == window).map(|(_, p)| p)
    }

    /// The pane of (`key`, `window`), new and empty if there was none; the
    /// key is copied only for a key new to the map.
    pub(crate) fn entry(&mut self, key: &[u8], window: Window) -> &mut Pane {
        let windows = self.by_key.entry_ref(key).or_default();
        let at = match windows.iter().position(|(w, _)| *w == window) {
            Some(at) => at,
            None => {
                // Most keys have one window: a first push would make room
                // for four (1.2 KB a key, most of a many-key GroupByKey's memory).
                if windows.is_empty() {
                    windows.reserve_exact(1);
                }
                windows.push((window, Pane::default()));
                windows.len() - 1
            }
        };
        &mut windows[at].1
    }

    pub(crate) fn insert(&mut self, key: &[u8], window: Window, pane: Pane) {
        *self.entry(key, window) = pane;
    }

    pub(crate) fn remove(&mut self, key: &[u8], window: &Window) -> Option<Pane> {
        let windows = self.by_key.get_mut(key)?;
        let at = windows.iter().position(|(w, _)| w == window)?;
        let (_, pane) = windows.swap_remove(at);
        if windows.is_empty() {
            self.by_key.remove(key);
        }
        Some(pane)
    }

    /// The windows of `key`'s panes, in no order.
    pub(crate) fn windows<'a>(&'a self, key: &[u8]) -> impl Iterator<Item = &'a Window> + 'a {
        self.by_key.get(key).into_iter().flatten().map(|(w, _)| w)
    }

    /// Every pane, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &Window, &Pane)> {
        self.by_key.iter().flat_map(|(k, ws)| ws.iter().map(move |(w, p)| (k.as_slice(), w, p)))
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&[u8], &Window, &mut Pane)> {
        self.by_key.iter_mut().flat_map(|(k, ws)| ws.iter_mut().map(move |(w, p)| (k.as_slice(), &*w, p)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_keep_their_boundaries_through_appends() {
        let mut a = Values::default();
        a.push(&[1]);
        a.push(&[2, 2]);
        let mut b = Values::default();
        b.push(&[3, 3, 3]);
        a.append(b);
        assert_eq!(a.len(), 3);
        assert_eq!(a.concatenated(), &[1, 2, 2, 3, 3, 3]);
        assert_eq!(a.from(1).collect::<Vec<_>>(), vec![&[2, 2][..], &[3, 3, 3][..]]);
        assert_eq!(a.from(3).count(), 0);
        a.clear();
        assert!(a.is_empty() && a.concatenated().is_empty());
    }

    #[test]
    fn panes_are_found_by_key_bytes_and_window() {
        let mut panes = Panes::default();
        let (w1, w2) = (Window::Interval { start: 0, end: 10 }, Window::Interval { start: 5, end: 15 });
        panes.entry(b"k", w1.clone()).values.push(&[1]);
        panes.entry(b"k", w2.clone()).values.push(&[2]);
        panes.entry(b"k", w1.clone()).values.push(&[3]);
        assert_eq!(panes.get(b"k", &w1).unwrap().values.len(), 2);
        assert_eq!(panes.windows(b"k").count(), 2);
        assert!(panes.get(b"j", &w1).is_none());
        assert_eq!(panes.remove(b"k", &w1).unwrap().values.concatenated(), &[1, 3]);
        assert!(panes.remove(b"k", &w2).is_some());
        assert_eq!(panes.iter().count(), 0, "a key without panes is gone");
    }

    #[test]
    fn a_key_of_one_window_takes_room_for_one_pane() {
        let mut panes = Panes::default();
        panes.entry(b"k", Window::Global).values.push(&[1]);
        assert_eq!(panes.by_key[&b"k"[..]].capacity(), 1);
        panes.entry(b"k", Window::Interval { start: 0, end: 10 });
        assert_eq!(panes.windows(b"k").count(), 2, "more windows still fit");
    }
}
