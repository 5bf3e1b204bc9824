//! A GroupByKey's state as key/value entries, for a durable store and its
//! changelog: what changed since the last commit, and a rebuild from entries.
//!
//! Entry keys: `[0]` for the GroupByKey's own progress (input watermark and
//! late-drop count); `[1] varint(len) key window` for the pane of (key,
//! window). A `None` value deletes the entry (a changelog tombstone).
use crate::coders::{encode_varint, ByteReader};
use crate::gbk::{GroupByKey, Pane};
use crate::timestamp::Watermark;
use crate::windowed::Window;

const META: u8 = 0;
const PANE: u8 = 1;

pub type Entry = (Vec<u8>, Option<Vec<u8>>);

fn pane_key(key: &[u8], window: &Window) -> Vec<u8> {
    let mut out = vec![PANE];
    encode_varint(key.len() as u64, &mut out);
    out.extend_from_slice(key);
    window.encode(&mut out);
    out
}

fn encode_pane_state(p: &Pane) -> Vec<u8> {
    let mut out = Vec::new();
    encode_varint(p.values.len() as u64, &mut out);
    for v in &p.values {
        encode_varint(v.len() as u64, &mut out);
        out.extend_from_slice(v);
    }
    for ts in [p.min_ts, p.max_ts] {
        match ts {
            None => out.push(0),
            Some(t) => {
                out.push(1);
                out.extend_from_slice(&t.to_be_bytes());
            }
        }
    }
    for n in [p.fired, p.fired_on_time_or_late, p.since_fire] {
        encode_varint(n, &mut out);
    }
    out.push(p.on_time_done as u8);
    out
}

fn decode_pane_state(buf: &[u8]) -> Result<Pane, String> {
    let mut c = ByteReader::new(buf);
    let n = c.varint()?;
    let mut values = Vec::with_capacity(n.min(1 << 20) as usize);
    for _ in 0..n {
        let len = c.varint()? as usize;
        values.push(c.take(len)?.to_vec());
    }
    let mut ts = [None, None];
    for t in &mut ts {
        if c.take(1)?[0] == 1 {
            *t = Some(c.i64()?);
        }
    }
    let (fired, fired_on_time_or_late, since_fire) = (c.varint()?, c.varint()?, c.varint()?);
    let on_time_done = c.take(1)?[0] != 0;
    Ok(Pane {
        values,
        min_ts: ts[0],
        max_ts: ts[1],
        fired,
        fired_on_time_or_late,
        on_time_done,
        since_fire,
        in_changes: false,
        queued: false,
    })
}

impl GroupByKey {
    /// The entries changed since the last call, in key order.
    pub fn take_changes(&mut self) -> Vec<Entry> {
        let mut out = Vec::new();
        if std::mem::take(&mut self.meta_dirty) {
            let mut v = Vec::new();
            v.extend_from_slice(&self.input_watermark.to_millis().to_be_bytes());
            encode_varint(self.dropped_late, &mut v);
            out.push((vec![META], Some(v)));
        }
        for id in std::mem::take(&mut self.dirty) {
            let value = self.panes.get_mut(&id).map(|p| {
                p.in_changes = false;
                encode_pane_state(p)
            });
            out.push((pane_key(&id.0, &id.1), value));
        }
        out
    }

    /// Rebuilds the state from stored entries (the latest value per key).
    pub fn restore<'a>(&mut self, entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Result<(), String> {
        for (k, v) in entries {
            match k.first() {
                Some(&META) => {
                    let mut c = ByteReader::new(v);
                    self.input_watermark = Watermark::from_millis(c.i64()?);
                    self.dropped_late = c.varint()?;
                }
                Some(&PANE) => {
                    let mut c = ByteReader { buf: k, at: 1 };
                    let len = c.varint()? as usize;
                    let key = c.take(len)?.to_vec();
                    let window = Window::decode(&k[c.at..], &self.spec.window_coder)?;
                    self.panes.insert((key, window), decode_pane_state(v)?);
                }
                _ => return Err("unknown GroupByKey state entry".into()),
            }
        }
        self.dirty.clear();
        self.meta_dirty = false;
        // Windows closed before the last commit that had not fired yet.
        self.queue_closed();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::gbk_fixtures::{interval_element, interval_gbk};

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
    fn fired_and_expired_panes_become_tombstones() {
        let mut g = gbk(false);
        let mut out = Vec::new();
        g.add(&element(1, 0, 10, "k", 1), &mut out).unwrap();
        let first = g.take_changes();
        assert_eq!(first.len(), 1);
        assert!(first[0].1.is_some());
        g.advance(Watermark::PosInf, &mut out);
        let after = g.take_changes();
        assert_eq!(after[0].0, vec![META]);
        assert_eq!(after[1], (first[0].0.clone(), None), "the expired pane is deleted");
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn a_truncated_entry_is_an_error() {
        let mut g = gbk(false);
        let mut out = Vec::new();
        g.add(&element(1, 0, 10, "k", 1), &mut out).unwrap();
        let (k, v) = g.take_changes().remove(0);
        let v = v.unwrap();
        let mut fresh = gbk(false);
        assert!(fresh.restore([(k.as_slice(), &v[..v.len() - 1])]).is_err());
    }
}
