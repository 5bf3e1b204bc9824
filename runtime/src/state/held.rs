//! Main-input elements held back: until the side-input windows they need
//! are complete, and, for a ParDo that requires time-sorted input
//! (`@RequiresTimeSortedInput`), until the input watermark passed their
//! timestamp plus the allowed lateness. They leave in timestamp order.
//! They were taken from the input (their offsets commit), so they are
//! durable state: each is an entry of the task's changelog until it is
//! released to the stage.
use std::collections::BTreeMap;

use crate::codec::coders::{encode_varint, ByteReader};
use crate::codec::timestamp::{Millis, Watermark};
use crate::codec::windowed::Window;
use crate::state::changelog::{ChangelogStore, Entry};
use crate::state::task_state;

#[derive(Clone, Debug, PartialEq)]
pub struct Held {
    /// The stage's data source the element is for.
    pub source: String,
    /// The encoded windowed value.
    pub element: Vec<u8>,
    pub timestamp: Millis,
    pub windows: Vec<Window>,
}

/// Held elements in timestamp order (then arrival order), with the
/// changes to persist.
#[derive(Debug, Default)]
pub struct HeldElements {
    held: BTreeMap<(Millis, u64), Held>,
    next: u64,
    /// Entries changed since the last `take_changes` (`None` deletes).
    changes: Vec<(u64, Option<Vec<u8>>)>,
    /// Some may be ready: a side watermark or the input watermark moved,
    /// or the last release filled its limit.
    maybe_ready: bool,
}

fn encode(h: &Held) -> Vec<u8> {
    let mut out = Vec::new();
    encode_varint(h.source.len() as u64, &mut out);
    out.extend_from_slice(h.source.as_bytes());
    out.extend_from_slice(&h.element);
    out
}

/// Splits a stored entry into its data source and element.
pub fn decode(buf: &[u8]) -> Result<(String, Vec<u8>), String> {
    let mut r = ByteReader::new(buf);
    let n = r.varint()? as usize;
    let source = String::from_utf8(r.take(n)?.to_vec()).map_err(|_| "bad data source name in a held element")?;
    Ok((source, buf[r.at..].to_vec()))
}

/// Whether the input watermark passed `timestamp` plus `allowed_lateness`:
/// an element of a time-sorted input is then due (if held) or too late (if
/// it arrives now: Beam's runners drop it, as nothing before it may follow).
pub fn past_lateness(timestamp: Millis, allowed_lateness: i64, input: Watermark) -> bool {
    Watermark::At(timestamp.saturating_add(allowed_lateness.max(0))) < input
}

/// Where an element of the main input goes when it reaches the task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// To the stage now.
    Ready,
    /// Held: a side window it needs is not complete (`side_missing`: the
    /// task may have to ask how main windows map to side windows), or (a
    /// time-sorted input) the watermark has not passed it yet.
    Hold { side_missing: bool },
    /// Dropped: a time-sorted input's element the watermark passed already
    /// (nothing before it may follow; Beam's runners drop it).
    Late,
}

/// Where element `h` goes: `time_sorted` is its input's allowed lateness if
/// the input is time-sorted, `input` the task's input watermark,
/// `side_ready` whether every side input is complete for a window.
pub fn admit(h: &Held, time_sorted: Option<i64>, input: Watermark, side_ready: impl Fn(&Window) -> bool) -> Admission {
    if time_sorted.is_some_and(|lateness| past_lateness(h.timestamp, lateness, input)) {
        return Admission::Late;
    }
    let side_missing = !h.windows.iter().all(side_ready);
    if time_sorted.is_none() && !side_missing {
        return Admission::Ready;
    }
    Admission::Hold { side_missing }
}

/// Whether held element `h` may go to the stage now (see `admit`).
pub fn releasable(h: &Held, time_sorted: Option<i64>, input: Watermark, side_ready: impl Fn(&Window) -> bool) -> bool {
    h.windows.iter().all(side_ready) && time_sorted.is_none_or(|lateness| past_lateness(h.timestamp, lateness, input))
}

impl HeldElements {
    pub fn hold(&mut self, h: Held) {
        let seq = self.next;
        self.next += 1;
        self.changes.push((seq, Some(encode(&h))));
        self.held.insert((h.timestamp, seq), h);
    }

    /// Restores an element saved under `seq`.
    pub fn restore(&mut self, seq: u64, h: Held) {
        self.next = self.next.max(seq + 1);
        self.held.insert((h.timestamp, seq), h);
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Every window of every held element (repeats included).
    pub fn windows(&self) -> impl Iterator<Item = &Window> {
        self.held.values().flat_map(|h| h.windows.iter())
    }

    /// What held elements wait for moved (a side watermark, the input
    /// watermark of a time-sorted input, a side window mapping): some may
    /// be ready now.
    pub fn recheck(&mut self) {
        self.maybe_ready = !self.held.is_empty();
    }

    /// Whether a release may find elements ready.
    pub fn may_release(&self) -> bool {
        self.maybe_ready
    }

    /// Releases, in timestamp order, up to `limit` elements that are
    /// `ready` (the rest stay held, and durable, until there is room).
    /// Releasing fewer than `limit` means none other is ready until the
    /// next `recheck`.
    pub fn release(&mut self, ready: impl Fn(&Held) -> bool, limit: usize) -> Vec<Held> {
        let keys: Vec<(Millis, u64)> = self.held.iter().filter(|(_, h)| ready(h)).map(|(k, _)| *k).take(limit).collect();
        self.maybe_ready = keys.len() == limit;
        keys.into_iter()
            .map(|k| {
                self.changes.push((k.1, None));
                self.held.remove(&k).expect("listed above")
            })
            .collect()
    }

    /// The earliest timestamp held: the task's output watermark may not pass it.
    pub fn hold_watermark(&self) -> Watermark {
        self.held.keys().next().map_or(Watermark::PosInf, |(ts, _)| Watermark::At(*ts))
    }

    /// The changes by sequence number (the trait keys them).
    fn take_changes(&mut self) -> Vec<(u64, Option<Vec<u8>>)> {
        std::mem::take(&mut self.changes)
    }
}

impl ChangelogStore for HeldElements {
    fn take_entries(&mut self) -> Vec<Entry> {
        self.take_changes().into_iter().map(|(seq, v)| (task_state::held_key(seq), v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(ts: Millis, end: Millis) -> Held {
        Held { source: "src".into(), element: vec![ts as u8], timestamp: ts, windows: vec![Window::Interval { start: end - 10, end }] }
    }

    #[test]
    fn elements_wait_for_their_windows_and_leave_in_order() {
        let mut h = HeldElements::default();
        h.hold(held(5, 10));
        h.hold(held(15, 20));
        h.hold(held(7, 10));
        assert_eq!(h.hold_watermark(), Watermark::At(5));
        let closed = |h: &Held| h.windows.iter().all(|w| w.max_timestamp() < 10);
        assert_eq!(h.release(closed, 1).len(), 1, "no more than the limit");
        let out = h.release(closed, usize::MAX);
        assert_eq!(out.iter().map(|e| e.timestamp).collect::<Vec<_>>(), [7]);
        assert_eq!(h.hold_watermark(), Watermark::At(15));
        let changes = h.take_changes();
        assert_eq!(changes.len(), 5, "three holds, two releases");
        assert_eq!(changes[3], (0, None), "the earliest timestamp first");
        assert!(h.release(|_| false, usize::MAX).is_empty());
        assert_eq!(h.release(|_| true, usize::MAX).len(), 1);
        assert!(h.is_empty());
        assert_eq!(h.hold_watermark(), Watermark::PosInf);
    }

    #[test]
    fn a_stored_entry_decodes_to_its_source_and_element() {
        let mut h = HeldElements::default();
        h.hold(held(5, 10));
        let (seq, value) = h.take_changes().pop().unwrap();
        let (source, element) = decode(&value.unwrap()).unwrap();
        assert_eq!((seq, source.as_str(), element), (0, "src", vec![5]));
        let mut again = HeldElements::default();
        again.restore(4, held(5, 10));
        again.hold(held(6, 10));
        assert_eq!(again.take_changes()[0].0, 5, "new entries continue after restored ones");
    }

    #[test]
    fn time_sorted_elements_leave_in_timestamp_order_once_the_watermark_passed_them() {
        let mut h = HeldElements::default();
        for ts in [30, 10, 20, 10] {
            h.hold(held(ts, 100));
        }
        let due = |wm: Millis| move |e: &Held| past_lateness(e.timestamp, 5, Watermark::At(wm));
        assert!(h.release(due(15), usize::MAX).is_empty(), "10 + 5 is not yet passed");
        let out = h.release(due(26), usize::MAX);
        assert_eq!(out.iter().map(|e| e.timestamp).collect::<Vec<_>>(), [10, 10, 20]);
        assert_eq!(h.hold_watermark(), Watermark::At(30));
        assert!(past_lateness(3, 5, Watermark::At(9)) && !past_lateness(4, 5, Watermark::At(9)));
        assert!(past_lateness(Millis::MAX, 5, Watermark::PosInf), "saturates");
        assert!(!past_lateness(0, 0, Watermark::NegInf));
    }

    #[test]
    fn a_release_is_worth_trying_only_after_a_recheck_or_a_full_one() {
        let mut h = HeldElements::default();
        h.recheck();
        assert!(!h.may_release(), "nothing held, nothing to release");
        for ts in [1, 2, 3] {
            h.hold(held(ts, 10));
        }
        assert!(!h.may_release(), "holding is no reason to look");
        h.recheck();
        assert!(h.may_release());
        assert_eq!(h.release(|_| true, 2).len(), 2);
        assert!(h.may_release(), "the limit was reached: more may be ready");
        assert_eq!(h.release(|e| e.timestamp < 3, 2).len(), 0);
        assert!(!h.may_release(), "fewer than the limit: none other is ready until something moves");
    }

    #[test]
    fn an_element_waits_for_its_side_windows_or_the_watermark_of_a_sorted_input() {
        let e = held(5, 10);
        let (complete, incomplete) = (|_: &Window| true, |_: &Window| false);
        let at = Watermark::At;
        // (time-sorted lateness, input watermark, side windows complete) -> where it goes, and whether it is released once held.
        let cases = [
            (None, at(0), true, Admission::Ready, true),
            (None, at(0), false, Admission::Hold { side_missing: true }, false),
            (Some(0), at(5), true, Admission::Hold { side_missing: false }, false),
            (Some(0), at(6), true, Admission::Late, true),
            (Some(3), at(6), true, Admission::Hold { side_missing: false }, false),
            (Some(3), at(9), false, Admission::Late, false),
        ];
        for (sorted, input, sides, admission, released) in cases {
            let side = |w: &Window| if sides { complete(w) } else { incomplete(w) };
            assert_eq!(admit(&e, sorted, input, side), admission, "{sorted:?} {input:?} {sides}");
            assert_eq!(releasable(&e, sorted, input, side), released, "{sorted:?} {input:?} {sides}");
        }
    }
}
