//! Work a task's stage must do again: elements a split bundle did not
//! process, and what bundles left of splittable DoFn restrictions
//! (residuals: checkpoints and split-off rests). Each becomes an entry of
//! the task's changelog in the next cycle's changes, and is handed to the
//! stage again only once that cycle committed (before, a crash would lose
//! it with its removal committed), and not before the time its DoFn asked
//! for; meanwhile it holds the task's output watermark.
use std::collections::{BTreeMap, BTreeSet};

use crate::codec::coders::{encode_varint, ByteReader};
use crate::codec::timestamp::{Millis, Watermark};
use crate::state::changelog::{ChangelogStore, Entry};
use crate::state::task_state;

#[derive(Clone, Debug, PartialEq)]
pub struct Deferred {
    /// The stage's data source the element goes to.
    pub source: String,
    /// The encoded windowed value.
    pub element: Vec<u8>,
    /// The output watermark may not pass this (the element's timestamp, or
    /// the watermark a splittable DoFn estimated for its rest).
    pub hold: Millis,
    /// Processing time (ms) before which it does not run again.
    pub not_before: Millis,
}

/// Marks the entry format (an older one began with the source's length,
/// never 0).
const FORMAT: u8 = 0;

pub fn encode(d: &Deferred) -> Vec<u8> {
    let mut out = vec![FORMAT];
    encode_varint(d.source.len() as u64, &mut out);
    out.extend_from_slice(d.source.as_bytes());
    out.extend_from_slice(&d.hold.to_be_bytes());
    out.extend_from_slice(&d.not_before.to_be_bytes());
    out.extend_from_slice(&d.element);
    out
}

/// Reads a stored entry. One of the older format (source and element only)
/// holds the watermark until it ran, and runs at once.
pub fn decode(buf: &[u8]) -> Result<Deferred, String> {
    if buf.first() != Some(&FORMAT) {
        let (source, element) = crate::state::held::decode(buf)?;
        return Ok(Deferred { source, element, hold: Millis::MIN, not_before: 0 });
    }
    let mut r = ByteReader::new(&buf[1..]);
    let n = r.varint()? as usize;
    let source = String::from_utf8(r.take(n)?.to_vec()).map_err(|_| "bad data source name in a deferred element")?;
    let mut millis = || -> Result<Millis, String> {
        let raw: [u8; 8] = r.take(8)?.try_into().map_err(|_| "short deferred element")?;
        Ok(Millis::from_be_bytes(raw))
    };
    let (hold, not_before) = (millis()?, millis()?);
    Ok(Deferred { source, element: buf[1 + r.at..].to_vec(), hold, not_before })
}

/// Deferred work in the order it was deferred, with the changes to persist.
#[derive(Debug, Default)]
pub struct DeferredWork {
    work: BTreeMap<u64, Deferred>,
    next: u64,
    /// Entries changed since the last `take_changes` (`None` deletes).
    changes: Vec<(u64, Option<Vec<u8>>)>,
    /// Entries not in a committed cycle yet: not written (`unsaved`), or
    /// written in the cycle being committed (`saving`).
    unsaved: BTreeSet<u64>,
    saving: BTreeSet<u64>,
}

impl DeferredWork {
    pub fn defer(&mut self, d: Deferred) {
        let seq = self.next;
        self.next += 1;
        self.changes.push((seq, Some(encode(&d))));
        self.unsaved.insert(seq);
        self.work.insert(seq, d);
    }

    fn durable(&self, seq: u64) -> bool {
        !self.unsaved.contains(&seq) && !self.saving.contains(&seq)
    }

    /// Whether some entries wait to be written in a cycle.
    pub fn has_changes(&self) -> bool {
        !self.changes.is_empty()
    }

    /// The cycle the last `take_changes` went into committed.
    pub fn saved(&mut self) {
        self.saving.clear();
    }

    /// Makes everything due now (a drain: the work is truncated, and waits
    /// for nothing).
    pub fn all_due(&mut self) {
        for d in self.work.values_mut() {
            d.not_before = 0;
        }
    }

    /// Restores an entry saved under `seq`.
    pub fn restore(&mut self, seq: u64, d: Deferred) {
        self.next = self.next.max(seq + 1);
        self.work.insert(seq, d);
    }

    pub fn is_empty(&self) -> bool {
        self.work.is_empty()
    }

    pub fn len(&self) -> usize {
        self.work.len()
    }

    /// Whether some of it may run at `now` (durable and due).
    pub fn has_due(&self, now: Millis) -> bool {
        self.work.iter().any(|(s, d)| d.not_before <= now && self.durable(*s))
    }

    /// When the earliest entry not yet due becomes due.
    pub fn next_due(&self, now: Millis) -> Option<Millis> {
        self.work.values().map(|d| d.not_before).filter(|&t| t > now).min()
    }

    /// Takes, in the order deferred, up to `limit` durable entries due at `now`.
    pub fn release(&mut self, now: Millis, limit: usize) -> Vec<Deferred> {
        let seqs: Vec<u64> =
            self.work.iter().filter(|(s, d)| d.not_before <= now && self.durable(**s)).map(|(s, _)| *s).take(limit).collect();
        seqs.into_iter()
            .map(|s| {
                self.changes.push((s, None));
                self.work.remove(&s).expect("listed above")
            })
            .collect()
    }

    /// The task's output watermark may not pass this.
    pub fn hold_watermark(&self) -> Watermark {
        self.work.values().map(|d| Watermark::At(d.hold)).min().unwrap_or(Watermark::PosInf)
    }

    /// The changes for the cycle now being written; what they add becomes
    /// durable once that cycle committed (`saved`).
    fn take_changes(&mut self) -> Vec<(u64, Option<Vec<u8>>)> {
        self.saving.append(&mut self.unsaved);
        std::mem::take(&mut self.changes)
    }
}

impl ChangelogStore for DeferredWork {
    fn take_entries(&mut self) -> Vec<Entry> {
        self.take_changes().into_iter().map(|(seq, v)| (task_state::deferred_key(seq), v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(hold: Millis, not_before: Millis) -> Deferred {
        Deferred { source: "src".into(), element: vec![hold as u8, 7], hold, not_before }
    }

    #[test]
    fn work_runs_only_once_its_cycle_committed() {
        let mut w = DeferredWork::default();
        w.defer(work(10, 0));
        assert!(!w.has_due(0) && w.release(0, 9).is_empty(), "not written yet");
        assert!(w.has_changes());
        assert_eq!(w.take_changes().len(), 1);
        w.defer(work(20, 0));
        assert!(w.release(0, 9).is_empty(), "written, not committed");
        w.saved();
        assert_eq!(w.release(0, 9).iter().map(|d| d.hold).collect::<Vec<_>>(), [10], "the later one is in no cycle yet");
        w.take_changes();
        w.saved();
        assert_eq!(w.release(0, 9).len(), 1);
    }

    #[test]
    fn work_runs_in_order_once_due_and_holds_the_watermark_meanwhile() {
        let mut w = DeferredWork::default();
        w.defer(work(30, 1_000));
        w.defer(work(10, 0));
        w.defer(work(20, 0));
        assert_eq!(w.hold_watermark(), Watermark::At(10));
        w.take_changes();
        w.saved();
        assert!(w.has_due(0));
        assert_eq!(w.release(500, 1).iter().map(|d| d.hold).collect::<Vec<_>>(), [10], "no more than the limit");
        assert_eq!(w.release(500, 9).iter().map(|d| d.hold).collect::<Vec<_>>(), [20], "the delayed one waits");
        assert!(!w.has_due(500));
        assert_eq!(w.next_due(500), Some(1_000));
        assert_eq!(w.hold_watermark(), Watermark::At(30), "waiting work still holds");
        assert_eq!(w.release(1_000, 9).len(), 1);
        assert!(w.is_empty());
        assert_eq!((w.hold_watermark(), w.next_due(0)), (Watermark::PosInf, None));
        let changes = w.take_changes();
        assert_eq!(changes.len(), 3, "three released");
        assert_eq!(changes[0], (1, None));
    }

    #[test]
    fn a_drain_makes_delayed_work_due() {
        let mut w = DeferredWork::default();
        w.defer(work(1, i64::MAX));
        w.take_changes();
        w.saved();
        assert!(!w.has_due(10));
        w.all_due();
        assert_eq!(w.release(10, 9).len(), 1);
    }

    #[test]
    fn an_entry_round_trips_and_the_older_format_still_reads() {
        let d = Deferred { source: "source/pc".into(), element: b"elem".to_vec(), hold: -5, not_before: 1_700_000_000_000 };
        assert_eq!(decode(&encode(&d)).unwrap(), d);
        let mut older = Vec::new();
        encode_varint(3, &mut older);
        older.extend_from_slice(b"srcELEM");
        let o = decode(&older).unwrap();
        assert_eq!((o.source.as_str(), o.element.as_slice(), o.hold, o.not_before), ("src", b"ELEM".as_slice(), Millis::MIN, 0));
        assert!(decode(&[FORMAT, 3, b's']).is_err());
    }

    #[test]
    fn restored_work_keeps_its_sequence() {
        let mut w = DeferredWork::default();
        w.restore(41, work(1, 0));
        w.defer(work(2, 0));
        assert_eq!(w.take_changes()[0].0, 42);
        assert_eq!(w.len(), 2);
    }
}
