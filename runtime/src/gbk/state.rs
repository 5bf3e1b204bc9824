//! A GroupByKey's state as key/value entries, for a durable store and its
//! changelog: what changed since the last commit, and a rebuild from entries.
//!
//! Entry keys: `[0]` for the GroupByKey's own progress (input watermark and
//! late-drop count); `[1] varint(len) key window` for the pane of (key,
//! window): its timestamps and firing counts; `[2] varint(len) key window
//! u32(i)` for chunk `i` of the pane's values (`chunks`), so a pane of any
//! size is stored and a commit writes only the values added since the last.
//! A `None` value deletes the entry (a changelog tombstone). A pane entry of
//! the older layout holds its values itself; it still restores.
use std::collections::BTreeMap;

use crate::codec::coders::{encode_varint, ByteReader};
use crate::codec::timestamp::Watermark;
use crate::codec::windowed::Window;
use crate::gbk::panes::Values;
use crate::gbk::{GroupByKey, Pane};
use crate::state::changelog::Entry;
use crate::state::chunks;
use crate::window::trigger::TriggerState;

const META: u8 = 0;
const PANE: u8 = 1;
const CHUNK: u8 = 2;

use crate::gbk::PaneId;

fn pane_key(kind: u8, key: &[u8], window: &Window) -> Vec<u8> {
    let mut out = vec![kind];
    encode_varint(key.len() as u64, &mut out);
    out.extend_from_slice(key);
    window.encode_stored(&mut out);
    out
}

fn chunk_key(id: &PaneId) -> impl Fn(u32) -> Vec<u8> {
    let head = pane_key(CHUNK, &id.0, &id.1);
    move |i| {
        let mut k = head.clone();
        k.extend_from_slice(&i.to_be_bytes());
        k
    }
}

fn encode_values<'a>(values: impl Iterator<Item = &'a [u8]>, out: &mut Vec<u8>) {
    for v in values {
        encode_varint(v.len() as u64, out);
        out.extend_from_slice(v);
    }
}

/// Adds the whole values of a chunk stream to `out`; returns whether the
/// stream ended after one.
fn decode_values(buf: &[u8], out: &mut Values) -> bool {
    let mut c = ByteReader::new(buf);
    while c.at < buf.len() {
        let Ok(len) = c.varint() else { return false };
        let Ok(v) = c.take(len as usize) else { return false };
        out.push(v);
    }
    true
}

/// The pane's entry: everything but its values, which are in chunks. Of
/// the elements since the last firing only whether there were any is kept
/// (all that is read of it), so a pane that only takes more values keeps
/// the same entry and a commit writes just their chunk.
fn encode_pane_state(p: &Pane) -> Vec<u8> {
    let mut out = Vec::new();
    encode_varint(0, &mut out);
    for ts in [p.min_ts, p.max_ts] {
        match ts {
            None => out.push(0),
            Some(t) => {
                out.push(1);
                out.extend_from_slice(&t.to_be_bytes());
            }
        }
    }
    for n in [p.fired, p.fired_on_time_or_late, p.since_fire.min(1)] {
        encode_varint(n, &mut out);
    }
    out.push(p.end_seen as u8);
    out.push(p.closed as u8);
    p.trigger.encode(&mut out);
    out
}

fn decode_pane_state(buf: &[u8]) -> Result<Pane, String> {
    let mut c = ByteReader::new(buf);
    let n = c.varint()?;
    let mut values = Values::default();
    for _ in 0..n {
        let len = c.varint()? as usize;
        values.push(c.take(len)?);
    }
    let mut ts = [None, None];
    for t in &mut ts {
        if c.take(1)?[0] == 1 {
            *t = Some(c.i64()?);
        }
    }
    let (fired, fired_on_time_or_late, since_fire) = (c.varint()?, c.varint()?, c.varint()?);
    let end_seen = c.take(1)?[0] != 0;
    // Entries written before triggers had state end here.
    let (closed, trigger) =
        if c.at < buf.len() { (c.take(1)?[0] != 0, TriggerState::decode(&mut c)?) } else { (false, TriggerState::default()) };
    Ok(Pane {
        values,
        min_ts: ts[0],
        max_ts: ts[1],
        fired,
        fired_on_time_or_late,
        end_seen,
        since_fire,
        closed,
        trigger,
        ..Pane::default()
    })
}

/// A pane entry's fingerprint (SipHash with fixed keys: restored and
/// written entries of one process compare).
fn entry_hash(entry: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    h.write(entry);
    h.finish()
}

fn decode_id(k: &[u8], window_coder: &crate::codec::coder::Coder) -> Result<PaneId, String> {
    let mut c = ByteReader { buf: k, at: 1 };
    let len = c.varint()? as usize;
    let key = c.take(len)?.to_vec();
    Ok((key, Window::decode_stored(&k[c.at..], window_coder)?))
}

impl GroupByKey {
    /// The entries changed since the last call, for barrier `id` (whose
    /// commit `committed` is told of); with `evict`, panes they write leave
    /// memory (see `gbk::spill`).
    pub fn take_changes_for(&mut self, id: u64, evict: bool) -> Vec<Entry> {
        let (changes, wrote_runs) = self.changes();
        self.barrier_taken(id, wrote_runs, evict);
        changes
    }

    /// The entries changed since the last call.
    pub fn take_changes(&mut self) -> Vec<Entry> {
        self.changes().0
    }

    /// The changes, and whether they write runs.
    fn changes(&mut self) -> (Vec<Entry>, bool) {
        let mut out = Vec::new();
        let mut wrote_runs = false;
        if std::mem::take(&mut self.meta_dirty) {
            let mut v = Vec::new();
            v.extend_from_slice(&self.input_watermark.to_millis().to_be_bytes());
            encode_varint(self.dropped_late, &mut v);
            out.push((vec![META], Some(v)));
        }
        let spilling = self.spill.is_some();
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for id in dirty {
            let gone = self.gone.remove(&id);
            let Some(p) = self.panes.get_mut(&id.0, &id.1) else {
                if gone.is_none() && spilling {
                    // A pane of runs: they were listed to delete when it went.
                    continue;
                }
                chunks::delete(gone.unwrap_or_default(), chunk_key(&id), &mut out);
                out.push((pane_key(PANE, &id.0, &id.1), None));
                continue;
            };
            p.in_changes = false;
            // As `writes_runs` says (it cannot borrow `self` while `p` is held).
            if gone.is_none() && spilling && p.written.is_none() && p.stored.is_empty() {
                let before = out.len();
                self.write_run(&id, &mut out);
                wrote_runs |= out.len() > before;
                continue;
            }
            if let Some(g) = gone {
                // The window's earlier pane was removed and a new one began.
                p.stored.absorb(g);
                p.stored.invalidate();
            }
            let mut appended = Vec::new();
            encode_values(p.values.from(p.stored.len), &mut appended);
            chunks::write(&mut p.stored, p.values.len(), &appended, chunk_key(&id), &mut out);
            // Half of a many-key GroupByKey's entries were its panes'
            // unchanged state, each a changelog record and a store write.
            let state = encode_pane_state(p);
            let hash = entry_hash(&state);
            if p.written != Some(hash) {
                p.written = Some(hash);
                out.push((pane_key(PANE, &id.0, &id.1), Some(state)));
            }
        }
        if let Some(spill) = self.spill.as_mut() {
            out.extend(std::mem::take(&mut spill.deletes).into_iter().map(|k| (k, None)));
        }
        (out, wrote_runs)
    }

    /// Rebuilds the state from stored entries (the latest value per key).
    pub fn restore<'a>(&mut self, entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Result<(), String> {
        let mut pane_chunks: BTreeMap<PaneId, BTreeMap<u32, Vec<u8>>> = BTreeMap::new();
        for (k, v) in entries {
            match k.first() {
                Some(&META) => {
                    let mut c = ByteReader::new(v);
                    self.input_watermark = Watermark::from_millis(c.i64()?);
                    self.dropped_late = c.varint()?;
                }
                Some(&PANE) => {
                    let id = decode_id(k, &self.spec.window_coder)?;
                    if let Window::Opaque { max, bytes } = &id.1 {
                        self.ends.insert(bytes.clone(), *max);
                    }
                    let pane = Pane { written: Some(entry_hash(v)), ..decode_pane_state(v)? };
                    self.panes.insert(&id.0, id.1, pane);
                }
                Some(&CHUNK) => {
                    let (head, seq) = chunks::split_seq(k)?;
                    let id = decode_id(head, &self.spec.window_coder)?;
                    pane_chunks.entry(id).or_default().insert(seq, v.to_vec());
                }
                Some(&crate::gbk::spill::RUN) => self.restore_run(k, v)?,
                _ => return Err("unknown GroupByKey state entry".into()),
            }
        }
        self.dirty.clear();
        self.meta_dirty = false;
        for (id, pieces) in pane_chunks {
            let restored = chunks::assemble(pieces)?;
            let Some(p) = self.panes.get_mut(&id.0, &id.1) else {
                // Chunks of a pane whose entry was never written (an
                // interrupted at-least-once commit): deleted at the next one.
                self.gone.insert(id.clone(), restored.stored);
                self.dirty.push(id);
                continue;
            };
            let legacy = !p.values.is_empty();
            let clean = decode_values(&restored.bytes, &mut p.values);
            let whole = restored.complete && clean;
            p.stored = restored.stored;
            if !legacy && whole && restored.appendable {
                p.stored.len = p.values.len();
            }
            if !whole {
                // A partial chunk from an interrupted at-least-once write.
                p.in_changes = true;
                self.dirty.push(id);
            }
        }
        // Windows closed before the last commit that had not fired yet.
        self.queue_closed();
        self.index_deadlines();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::codec::coder::Coder;
    use crate::gbk::fixtures::{interval_element, interval_gbk};

    fn gbk(merging: bool) -> GroupByKey {
        interval_gbk(merging)
    }

    fn element(ts: i64, start: i64, end: i64, key: &str, v: u64) -> Vec<u8> {
        interval_element(ts, start, end, key, v)
    }

    /// A store: the latest value per key, as a compacted changelog keeps.
    fn apply(store: &mut BTreeMap<Vec<u8>, Vec<u8>>, changes: Vec<Entry>) {
        for (k, v) in changes {
            match v {
                Some(v) => store.insert(k, v),
                None => store.remove(&k),
            };
        }
    }

    #[test]
    fn a_restored_group_by_key_fires_what_the_original_would() {
        for merging in [false, true] {
            let mut live = gbk(merging);
            let mut store = BTreeMap::new();
            let mut out = Vec::new();
            for (i, key) in ["a", "b", "a", "c"].iter().enumerate() {
                live.add(&element(i as i64, i as i64, i as i64 + 10, key, i as u64), &mut out).unwrap();
            }
            live.advance(Watermark::At(5), &mut out);
            apply(&mut store, live.take_changes());
            // A restart: only the store survives.
            let mut restored = gbk(merging);
            restored.restore(store.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).unwrap();
            assert!(restored.take_changes().is_empty());
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for g in [(&mut live, &mut a), (&mut restored, &mut b)] {
                g.0.add(&element(7, 7, 17, "b", 9), g.1).unwrap();
                g.0.advance(Watermark::PosInf, g.1);
            }
            assert!(!a.is_empty());
            assert_eq!(a, b, "merging={merging}");
        }
    }

    #[test]
    fn a_pane_that_only_takes_values_writes_only_its_chunks() {
        let mut live = gbk(false);
        let mut store = BTreeMap::new();
        let mut out = Vec::new();
        let kinds = |changes: &[Entry]| changes.iter().map(|(k, _)| k[0]).collect::<Vec<u8>>();
        live.add(&element(1, 0, 10, "k", 1), &mut out).unwrap();
        let first = live.take_changes();
        assert_eq!(kinds(&first), vec![CHUNK, PANE]);
        apply(&mut store, first);
        for v in [2, 3] {
            live.add(&element(1, 0, 10, "k", v), &mut out).unwrap();
            let more = live.take_changes();
            assert_eq!(kinds(&more), vec![CHUNK], "the pane's entry did not change: {more:?}");
            apply(&mut store, more);
        }
        // A later timestamp moves the pane's hold: its entry is written.
        live.add(&element(5, 0, 10, "k", 4), &mut out).unwrap();
        let moved = live.take_changes();
        assert_eq!(kinds(&moved), vec![CHUNK, PANE]);
        apply(&mut store, moved);
        let mut restored = gbk(false);
        restored.restore(store.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).unwrap();
        restored.add(&element(5, 0, 10, "k", 5), &mut out).unwrap();
        assert_eq!(kinds(&restored.take_changes()), vec![CHUNK], "a restored pane knows its entry");
        let (mut a, mut b) = (Vec::new(), Vec::new());
        live.add(&element(5, 0, 10, "k", 5), &mut out).unwrap();
        for g in [(&mut live, &mut a), (&mut restored, &mut b)] {
            g.0.advance(Watermark::PosInf, g.1);
        }
        assert_eq!(a.len(), 1);
        assert_eq!(a, b, "the restored pane fires the same five values");
    }

    #[test]
    fn fired_and_expired_panes_become_tombstones() {
        let mut g = gbk(false);
        let mut out = Vec::new();
        g.add(&element(1, 0, 10, "k", 1), &mut out).unwrap();
        let first = g.take_changes();
        assert_eq!(first.len(), 2, "one chunk of values and the pane: {first:?}");
        assert!(first.iter().all(|(_, v)| v.is_some()));
        g.advance(Watermark::PosInf, &mut out);
        let after = g.take_changes();
        assert_eq!(after[0].0, vec![META]);
        let deleted: Vec<_> = after[1..].iter().filter(|(_, v)| v.is_none()).map(|(k, _)| k.clone()).collect();
        let mut written: Vec<_> = first.iter().map(|(k, _)| k.clone()).collect();
        written.sort();
        let mut deleted_sorted = deleted.clone();
        deleted_sorted.sort();
        assert_eq!(deleted_sorted, written, "the expired pane and its chunk are deleted");
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn a_truncated_entry_is_an_error() {
        let mut g = gbk(false);
        let mut out = Vec::new();
        g.add(&element(1, 0, 10, "k", 1), &mut out).unwrap();
        let (k, v) = g.take_changes().into_iter().find(|(k, _)| k[0] == PANE).unwrap();
        let v = v.unwrap();
        let mut fresh = gbk(false);
        assert!(fresh.restore([(k.as_slice(), &v[..v.len() - 1])]).is_err());
    }

    #[test]
    fn counts_at_their_limit_in_a_restored_pane_still_fire() {
        // Found by the changelog fuzz target: `fired + 1` overflowed.
        let mut g = gbk(false);
        let mut out = Vec::new();
        g.add(&element(1, 0, 10, "k", 1), &mut out).unwrap();
        let changes = g.take_changes();
        let mut entries: Vec<(Vec<u8>, Vec<u8>)> = changes.into_iter().map(|(k, v)| (k, v.unwrap())).collect();
        for (_, v) in entries.iter_mut().filter(|(k, _)| k[0] == PANE) {
            let mut p = decode_pane_state(v).unwrap();
            (p.fired, p.fired_on_time_or_late, p.since_fire) = (u64::MAX, u64::MAX, u64::MAX);
            *v = encode_pane_state(&p);
        }
        let mut fresh = gbk(false);
        fresh.restore(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).unwrap();
        fresh.advance(Watermark::PosInf, &mut out);
        fresh.fire_closed(usize::MAX, &mut out);
        assert!(!out.is_empty());
    }

    fn bytes_gbk(accumulating: bool) -> GroupByKey {
        let mut spec = interval_gbk(false).spec.clone();
        spec.accumulating = accumulating;
        spec.trigger = crate::gbk::fixtures::repeated_count(1000);
        GroupByKey::new(spec, &Coder::Kv(Box::new(Coder::StringUtf8), Box::new(Coder::Bytes))).unwrap()
    }

    fn big(ts: i64, key: &str, fill: u8, len: usize) -> Vec<u8> {
        let mut kv = Vec::new();
        crate::codec::coders::encode_nested_bytes(key.as_bytes(), &mut kv);
        crate::codec::coders::encode_nested_bytes(&vec![fill; len], &mut kv);
        let mut out = Vec::new();
        crate::codec::windowed::encode(ts, &Window::Interval { start: 0, end: 100 }, &[0x0f], &kv, &mut out);
        out
    }

    fn restored(store: &BTreeMap<Vec<u8>, Vec<u8>>, accumulating: bool) -> GroupByKey {
        let mut g = bytes_gbk(accumulating);
        g.restore(store.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).unwrap();
        g
    }

    #[test]
    fn a_pane_larger_than_a_kafka_record_is_stored_in_small_entries_written_once() {
        let mut g = bytes_gbk(false);
        let mut store = BTreeMap::new();
        let mut out = Vec::new();
        let mut written = 0;
        for i in 0..12 {
            g.add(&big(i, "k", i as u8, 900_000), &mut out).unwrap();
            let changes = g.take_changes();
            assert!(changes.iter().all(|(_, v)| v.as_ref().is_none_or(|v| v.len() <= chunks::CHUNK_BYTES)));
            let bytes: usize = changes.iter().filter_map(|(_, v)| v.as_ref()).map(|v| v.len()).sum();
            assert!(bytes < 1_000_000, "a commit writes the value added, not the pane: {bytes} bytes");
            written += bytes;
            apply(&mut store, changes);
        }
        assert!(written < 12 * 1_000_000);
        let mut back = restored(&store, false);
        assert!(back.take_changes().is_empty());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        g.advance(Watermark::PosInf, &mut a);
        back.advance(Watermark::PosInf, &mut b);
        assert_eq!(a.len(), 1);
        assert!(a[0].len() > 12 * 900_000);
        assert_eq!(a, b, "the restored pane fires the same values");
        apply(&mut store, back.take_changes());
        assert_eq!(store.keys().filter(|k| k[0] != META).count(), 0, "a fired, expired pane leaves nothing");
    }

    /// A pane's values, short enough to print: (length, first byte).
    fn summary(g: &GroupByKey) -> Vec<Vec<(usize, u8)>> {
        g.panes.iter().map(|(_, _, p)| p.values.from(0).map(|v| (v.len(), v[v.len() - 1])).collect()).collect()
    }

    #[test]
    fn a_discarding_firing_rewrites_and_an_accumulating_one_appends() {
        for accumulating in [false, true] {
            let mut g = bytes_gbk(accumulating);
            g.spec.trigger = crate::gbk::fixtures::repeated_count(2);
            let mut store = BTreeMap::new();
            let mut fired = Vec::new();
            for i in 0..7 {
                g.add(&big(i, "k", i as u8, 300_000), &mut fired).unwrap();
                apply(&mut store, g.take_changes());
                let back = restored(&store, accumulating);
                assert_eq!(summary(&back), summary(&g), "accumulating={accumulating}, after element {i}");
                let stored = store.len();
                assert!(stored <= 2 + 2 * (i as usize + 1), "{stored} entries: stale chunks are deleted");
            }
            assert_eq!(fired.len(), 3);
        }
    }

    #[test]
    fn chunks_without_their_pane_are_deleted_and_old_whole_panes_still_restore() {
        // The older layout: the pane entry holds its values.
        let mut legacy = Vec::new();
        encode_varint(2, &mut legacy);
        for v in [b"\x05".as_slice(), b"\x07"] {
            encode_varint(v.len() as u64, &mut legacy);
            legacy.extend_from_slice(v);
        }
        legacy.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0]);
        let window = Window::Interval { start: 0, end: 10 };
        let mut key = Vec::new();
        crate::codec::coders::encode_nested_bytes(b"k", &mut key);
        let orphan = chunk_key(&(key.clone(), Window::Interval { start: 20, end: 30 }))(0);
        let mut g = gbk(false);
        g.restore([(pane_key(PANE, &key, &window).as_slice(), legacy.as_slice()), (orphan.as_slice(), b"\x01\x09".as_slice())]).unwrap();
        let changes = g.take_changes();
        assert_eq!(changes.len(), 2, "the orphan chunk and its (absent) pane are deleted: {changes:?}");
        assert!(changes.iter().any(|(k, v)| *k == orphan && v.is_none()));
        let mut out = Vec::new();
        g.add(&element(3, 0, 10, "k", 9), &mut out).unwrap();
        let mut store = BTreeMap::new();
        store.insert(pane_key(PANE, &key, &window), legacy.clone());
        apply(&mut store, g.take_changes());
        let mut back = gbk(false);
        back.restore(store.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).unwrap();
        let values: Vec<&[u8]> = back.panes.get(&key, &window).unwrap().values.from(0).collect();
        assert_eq!(values, vec![&[5][..], &[7], &[9]], "rewritten in the new layout");
    }
}
