//! A batch GroupByKey whose panes outgrow memory: memory is a cache of the
//! task's store, not a second copy of it.
//!
//! It applies to a GroupByKey of a bounded input whose trigger fires only
//! when the watermark passes the end of the window, with no allowed lateness
//! and no merging: its panes take values and nothing else happens to them
//! until their window closes, and then each fires once and is gone.
//!
//! Such a pane's values are written as **runs**: at each commit, the values
//! it took since the last one, as one entry `[3] varint(len) key window
//! u32(run) u16(part)` (parts split a run over the record size limit). A run
//! number belongs to one commit, so a pane needs no bookkeeping to append,
//! nor any to exist only in the store. Once a commit is in the store and
//! the GroupByKeys of the process hold more than their memory, every pane
//! whose values are all in committed runs is **evicted**: only its window's
//! bounds (the earliest and latest timestamp, for holds) stay in memory.
//!
//! When the watermark closes a window that has evicted panes, a **pass**
//! reads the store's runs in key order from a cursor, a bounded number of
//! panes per firing: each (key, window) with evicted runs fires once, with
//! those values and those of its resident pane (a key that came back after
//! its eviction); its runs are deleted in the same commit. Panes without
//! evicted runs fire from memory as any other, after the pass.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::codec::coders::{encode_varint, ByteReader};
use crate::codec::timestamp::{Millis, Watermark};
use crate::codec::windowed::Window;
use crate::gbk::panes::Values;
use crate::gbk::{max_opt, min_opt, GroupByKey, Pane, PaneId};
use crate::state::chunks::CHUNK_BYTES;
use crate::window::windowing::OutputTime;

pub(crate) const RUN: u8 = 3;
/// A run key ends with the run (u32) and the part (u16).
const RUN_TAIL: usize = 6;
/// Panes a batch GroupByKey may change (or runs it may delete) between two
/// commits: past them it asks for a commit and takes no more values, and
/// fires no more panes, until it (the changes of one commit, and what they
/// cost in memory, stay a bounded batch).
pub const MAX_CHANGED_PANES: usize = 75_000;
/// What a resident pane is counted as besides its values: the pane, its
/// key, its map slot and its entry in the changed panes (measured with
/// heaptrack: ~300 bytes of pane and window, the rest small allocations).
const PANE_OVERHEAD: usize = 480;

/// The task's store as a GroupByKey reads it: its own entries (keys as
/// `take_changes` wrote them), committed ones only.
pub trait SpillStore: Send + Sync {
    /// Visits the entries from `start` (inclusive) on, in key order, while
    /// `visit` returns true.
    fn scan(&self, start: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), String>;
}

/// The earliest and latest timestamps that hold a window's output.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Bounds {
    pub(crate) min: Option<Millis>,
    pub(crate) max: Option<Millis>,
}

impl Bounds {
    fn absorb(&mut self, min: Option<Millis>, max: Option<Millis>) {
        self.min = min_opt(self.min, min);
        self.max = max_opt(self.max, max);
    }
}

pub(crate) struct Spill {
    store: Arc<dyn SpillStore>,
    /// Windows with evicted panes, and their bounds.
    pub(crate) windows: BTreeMap<Window, Bounds>,
    /// The run the next commit writes.
    next_run: u32,
    /// The last barrier whose changes are in the store, and the last one
    /// that evicted panes: a pass reads the store only once it has them.
    committed: Option<u64>,
    evicted_at: Option<u64>,
    pass: Option<Pass>,
    /// Run entries to delete at the next `take_changes`.
    pub(crate) deletes: Vec<Vec<u8>>,
    /// Bytes taken by resident panes since they were last counted: a
    /// cheap upper bound between counts.
    resident: usize,
    /// Panes evicted so far (reported).
    pub(crate) evicted: u64,
}

/// Firing the evicted panes of closed windows, in the store's key order.
struct Pass {
    windows: BTreeSet<Window>,
    /// Where the next read starts: past every entry of the panes fired
    /// so far (runs of a fired resident pane may land there later).
    from: Vec<u8>,
}

/// One (key, window)'s evicted runs, read from the store.
#[derive(Default)]
struct Group {
    /// `[3] varint(len) key window`, the common head of its run keys.
    head: Vec<u8>,
    /// Its evicted run entries (to delete), and their streams.
    keys: Vec<Vec<u8>>,
    runs: Vec<(u32, Vec<u8>)>,
}

fn run_head(key: &[u8], window: &Window) -> Vec<u8> {
    let mut out = vec![RUN];
    encode_varint(key.len() as u64, &mut out);
    out.extend_from_slice(key);
    window.encode_stored(&mut out);
    out
}

/// The first key past every key that starts with `head`. Heads are
/// prefix-free (a varint length, then the key, then a window whose encoding
/// is prefix-free), so this skips one (key, window)'s runs, and only them.
fn after_head(head: &[u8]) -> Vec<u8> {
    let mut k = head.to_vec();
    while let Some(last) = k.pop() {
        if last < u8::MAX {
            k.push(last + 1);
            return k;
        }
    }
    vec![RUN + 1]
}

fn run_key(head: &[u8], run: u32, part: u16) -> Vec<u8> {
    let mut k = Vec::with_capacity(head.len() + RUN_TAIL);
    k.extend_from_slice(head);
    k.extend_from_slice(&run.to_be_bytes());
    k.extend_from_slice(&part.to_be_bytes());
    k
}

/// A run key's (key, window) head, run and part.
fn split_run_key(k: &[u8]) -> Result<(&[u8], u32, u16), String> {
    if k.len() < 1 + RUN_TAIL {
        return Err("a GroupByKey run key is too short".into());
    }
    let (head, tail) = k.split_at(k.len() - RUN_TAIL);
    let run = u32::from_be_bytes(tail[..4].try_into().expect("4 bytes"));
    let part = u16::from_be_bytes(tail[4..].try_into().expect("2 bytes"));
    Ok((head, run, part))
}

fn decode_head(head: &[u8], window_coder: &crate::codec::coder::Coder) -> Result<PaneId, String> {
    let mut c = ByteReader { buf: head, at: 1 };
    let len = c.varint()? as usize;
    let key = c.take(len)?.to_vec();
    Ok((key, Window::decode_stored(&head[c.at..], window_coder)?))
}

/// A run's stream: the pane's bounds, then its new values, length-prefixed.
fn encode_run<'a>(min: Option<Millis>, max: Option<Millis>, values: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for t in [min, max] {
        match t {
            None => out.push(0),
            Some(t) => {
                out.push(1);
                out.extend_from_slice(&t.to_be_bytes());
            }
        }
    }
    for v in values {
        encode_varint(v.len() as u64, &mut out);
        out.extend_from_slice(v);
    }
    out
}

/// A run's bounds, and its values added to `values` (if given).
fn decode_run(buf: &[u8], values: Option<&mut Values>) -> Result<Bounds, String> {
    let mut c = ByteReader::new(buf);
    let mut ts = [None, None];
    for t in &mut ts {
        if c.take(1)?[0] == 1 {
            *t = Some(c.i64()?);
        }
    }
    if let Some(values) = values {
        while c.at < buf.len() {
            let len = c.varint()? as usize;
            values.push(c.take(len)?);
        }
    }
    Ok(Bounds { min: ts[0], max: ts[1] })
}

impl GroupByKey {
    /// Whether this GroupByKey's panes can live in the store (see above).
    pub fn spillable(&self) -> bool {
        let s = &self.spec;
        let readable = matches!(s.window_coder, crate::codec::coder::Coder::GlobalWindow | crate::codec::coder::Coder::IntervalWindow);
        readable && s.bounded_input && s.trigger.is_watermark_only() && !s.merging && s.sdk.is_none() && s.allowed_lateness == 0
    }

    /// Writes its panes as runs from now on, and evicts them into `store`
    /// when asked to. Call before `restore`; a GroupByKey that is not
    /// `spillable` ignores it.
    pub fn spill_to(&mut self, store: Arc<dyn SpillStore>) {
        if self.spillable() {
            self.spill = Some(Spill {
                store,
                windows: BTreeMap::new(),
                next_run: 0,
                committed: None,
                evicted_at: None,
                pass: None,
                deletes: Vec::new(),
                resident: 0,
                evicted: 0,
            });
        }
    }

    /// Bytes of values held in memory, about (an upper bound between
    /// evictions): what the process's memory bound is checked against.
    pub fn resident_bytes(&self) -> usize {
        self.spill.as_ref().map_or(0, |s| s.resident)
    }

    /// Whether it keeps panes in the store (see above).
    pub fn spills(&self) -> bool {
        self.spill.is_some()
    }

    /// Whether it changed so many panes (or fired so many runs) since its
    /// last commit that it should take no more values, nor fire more panes,
    /// before the next.
    pub fn wants_commit(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| self.dirty.len() + s.deletes.len() >= MAX_CHANGED_PANES)
    }

    /// Panes evicted so far.
    pub fn evicted(&self) -> u64 {
        self.spill.as_ref().map_or(0, |s| s.evicted)
    }

    /// Windows with panes in the store only.
    pub fn spilled_windows(&self) -> usize {
        self.spill.as_ref().map_or(0, |s| s.windows.len())
    }

    /// A value went into a pane (`new_pane`: the length of the key of a
    /// pane that held nothing before).
    pub(crate) fn note_resident(&mut self, value_len: usize, new_pane: Option<usize>) {
        if let Some(s) = self.spill.as_mut() {
            s.resident += value_len + 8 + new_pane.map_or(0, |k| k + PANE_OVERHEAD);
        }
    }

    /// Whether the pane writes its values as runs (a pane restored from the
    /// chunk layout keeps it).
    pub(crate) fn writes_runs(&self, p: &Pane) -> bool {
        self.spill.is_some() && p.written.is_none() && p.stored.is_empty()
    }

    /// `take_changes` for a pane that writes runs: its values since the last
    /// run, as the next one.
    pub(crate) fn write_run(&mut self, id: &PaneId, out: &mut Vec<(Vec<u8>, Option<Vec<u8>>)>) {
        let Some(spill) = self.spill.as_ref() else { return };
        let run = spill.next_run;
        let Some(p) = self.panes.get_mut(&id.0, &id.1) else { return };
        if p.run_len == p.values.len() {
            return;
        }
        let stream = encode_run(p.min_ts, p.max_ts, p.values.from(p.run_len));
        let head = run_head(&id.0, &id.1);
        let mut parts = 0u16;
        for piece in stream.chunks(CHUNK_BYTES) {
            out.push((run_key(&head, run, parts), Some(piece.to_vec())));
            parts += 1;
        }
        p.runs.push((run, parts));
        p.run_len = p.values.len();
    }

    /// A removed pane that wrote runs: they are deleted at the next commit.
    pub(crate) fn delete_runs(&mut self, key: &[u8], window: &Window, runs: &[(u32, u16)]) {
        let Some(spill) = self.spill.as_mut() else { return };
        if runs.is_empty() {
            return;
        }
        let head = run_head(key, window);
        for &(run, parts) in runs {
            spill.deletes.extend((0..parts).map(|part| run_key(&head, run, part)));
        }
    }

    /// After `take_changes` for barrier `id`: the next one writes the next
    /// run. With `evict` (the process's GroupByKeys hold more than their
    /// memory), every pane whose values are all in runs now leaves memory;
    /// returns how many did. They are read back once `id` is committed.
    pub(crate) fn barrier_taken(&mut self, id: u64, wrote_runs: bool, evict: bool) -> usize {
        let Some(s) = self.spill.as_mut() else { return 0 };
        if wrote_runs {
            s.next_run = s.next_run.wrapping_add(1);
        }
        if !evict {
            return 0;
        }
        let wm = self.input_watermark;
        let mut evicted = Vec::new();
        let mut resident = 0;
        for (key, window, p) in self.panes.iter() {
            let written = p.run_len == p.values.len() && !p.runs.is_empty() && p.written.is_none() && p.stored.is_empty();
            let busy = p.queued || p.closed || p.fired > 0 || Watermark::At(window.max_timestamp()) < wm;
            if written && !busy {
                evicted.push((key.to_vec(), window.clone()));
            } else {
                resident += p.values.concatenated().len() + 8 * p.values.len() + key.len() + PANE_OVERHEAD;
            }
        }
        let s = self.spill.as_mut().expect("looked at above");
        s.resident = resident;
        s.evicted += evicted.len() as u64;
        if !evicted.is_empty() {
            s.evicted_at = Some(id);
        }
        for (key, window) in &evicted {
            let p = self.panes.remove(key, window).expect("listed above");
            let s = self.spill.as_mut().expect("looked at above");
            s.windows.entry(window.clone()).or_default().absorb(p.min_ts, p.max_ts);
        }
        evicted.len()
    }

    /// Barrier `id`'s changes are in the store.
    pub fn committed(&mut self, id: u64) {
        if let Some(s) = self.spill.as_mut() {
            s.committed = s.committed.max(Some(id));
        }
    }

    /// Rebuilds what a run entry says (restore): its window has evicted
    /// panes; the run numbers go on after it.
    pub(crate) fn restore_run(&mut self, k: &[u8], v: &[u8]) -> Result<(), String> {
        let Some(s) = self.spill.as_mut() else {
            return Err("a GroupByKey run entry for a GroupByKey that does not write runs".into());
        };
        let (head, run, part) = split_run_key(k)?;
        let (_, window) = decode_head(head, &self.spec.window_coder)?;
        s.next_run = s.next_run.max(run.wrapping_add(1));
        let bounds = s.windows.entry(window).or_default();
        if part == 0 {
            let b = decode_run(v, None)?;
            bounds.absorb(b.min, b.max);
        }
        Ok(())
    }

    /// Whether a closed window's evicted panes wait to fire.
    pub(crate) fn spilled_closed(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| s.pass.is_some() || s.windows.keys().any(|w| self.end_passed(w)))
    }

    /// The earliest output timestamp evicted panes may produce: of every
    /// window with evicted panes, or (`closed_only`) of closed ones.
    pub(crate) fn spilled_hold(&self, closed_only: bool) -> Watermark {
        let Some(s) = self.spill.as_ref() else { return Watermark::PosInf };
        s.windows
            .iter()
            .filter(|(w, _)| !closed_only || self.end_passed(w))
            .map(|(w, b)| {
                Watermark::At(match self.spec.output_time {
                    OutputTime::EndOfWindow => w.max_timestamp(),
                    OutputTime::EarliestInPane => b.min.unwrap_or(w.max_timestamp()),
                    OutputTime::LatestInPane => b.min.or(b.max).unwrap_or(w.max_timestamp()),
                })
            })
            .min()
            .unwrap_or(Watermark::PosInf)
    }

    /// Fires up to `limit` closed panes: evicted ones first (their pass
    /// must end before any resident pane of its windows fires alone), then
    /// those in memory; returns how many fired, or `None` if evicted panes
    /// wait for the commit that writes them to the store (ask again after
    /// `committed`).
    pub fn fire(&mut self, limit: usize, out: &mut Vec<Vec<u8>>) -> Result<Option<usize>, String> {
        if self.spill.as_ref().is_some_and(|s| s.pass.is_none() && s.evicted_at > s.committed) && self.spilled_closed() {
            return Ok(None);
        }
        let fired = self.fire_spilled(limit, out)?;
        if fired >= limit || self.spill.as_ref().is_some_and(|s| s.pass.is_some()) {
            return Ok(Some(fired));
        }
        Ok(Some(fired + self.fire_closed(limit - fired, out)))
    }

    /// Goes on with (or starts) the pass over closed windows' evicted panes.
    fn fire_spilled(&mut self, limit: usize, out: &mut Vec<Vec<u8>>) -> Result<usize, String> {
        let Some(s) = self.spill.as_mut() else { return Ok(0) };
        if limit == 0 {
            return Ok(0);
        }
        if s.pass.is_none() {
            let wm = self.input_watermark;
            let closed: BTreeSet<Window> = s.windows.keys().filter(|w| Watermark::At(w.max_timestamp()) < wm).cloned().collect();
            if closed.is_empty() {
                return Ok(0);
            }
            s.pass = Some(Pass { windows: closed, from: vec![RUN] });
        }
        let pass = s.pass.as_ref().expect("started above");
        let start = pass.from.clone();
        // Read whole groups, up to `limit` of those with evicted runs.
        let mut groups: Vec<Group> = Vec::new();
        let mut current = Group::default();
        let mut complete = true;
        let mut error = None;
        let coder = self.spec.window_coder.clone();
        let windows = &pass.windows;
        let panes = &self.panes;
        let mut wanted_head: Option<(Vec<u8>, bool, Vec<u32>)> = None;
        s.store.scan(&start, &mut |k, v| {
            if k.first() != Some(&RUN) {
                return false;
            }
            let (head, run, _) = match split_run_key(k) {
                Ok(x) => x,
                Err(e) => {
                    error = Some(e);
                    return false;
                }
            };
            if wanted_head.as_ref().is_none_or(|(h, _, _)| h.as_slice() != head) {
                // A new (key, window): the previous group is whole.
                if !current.runs.is_empty() {
                    groups.push(std::mem::take(&mut current));
                    if groups.len() >= limit {
                        complete = false;
                        return false;
                    }
                }
                current = Group::default();
                let (wanted, held) = match decode_head(head, &coder) {
                    Ok((key, window)) => {
                        let held = panes.get(&key, &window).map(|p| p.runs.iter().map(|r| r.0).collect()).unwrap_or_default();
                        (windows.contains(&window), held)
                    }
                    Err(e) => {
                        error = Some(e);
                        return false;
                    }
                };
                wanted_head = Some((head.to_vec(), wanted, held));
            }
            let (head_bytes, wanted, held) = wanted_head.as_ref().expect("set above");
            // Runs of the resident pane are its own: it holds their values.
            if *wanted && !held.contains(&run) {
                current.head.clone_from(head_bytes);
                current.keys.push(k.to_vec());
                match current.runs.last_mut() {
                    Some((r, stream)) if *r == run => stream.extend_from_slice(v),
                    _ => current.runs.push((run, v.to_vec())),
                }
            }
            true
        })?;
        if let Some(e) = error {
            return Err(e);
        }
        if complete && !current.runs.is_empty() {
            groups.push(current);
        }
        let s = self.spill.as_mut().expect("looked at above");
        let pass = s.pass.as_mut().expect("started above");
        if complete {
            for w in std::mem::take(&mut pass.windows) {
                s.windows.remove(&w);
            }
            s.pass = None;
        } else {
            pass.from = after_head(&groups.last().expect("stopped at the limit").head);
        }
        let mut fired = 0;
        for g in groups {
            fired += self.fire_group(g, out)?;
        }
        Ok(fired)
    }

    /// Fires one (key, window) with its evicted runs and its resident pane.
    fn fire_group(&mut self, g: Group, out: &mut Vec<Vec<u8>>) -> Result<usize, String> {
        let (key, window) = decode_head(&g.head, &self.spec.window_coder)?;
        let mut values = Values::default();
        let mut bounds = Bounds::default();
        for (_, stream) in &g.runs {
            let b = decode_run(stream, Some(&mut values))?;
            bounds.absorb(b.min, b.max);
        }
        let count = values.len() as u64;
        let pane = self.panes.entry(&key, window.clone());
        values.append(std::mem::take(&mut pane.values));
        pane.run_len += count as usize;
        pane.values = values;
        pane.min_ts = min_opt(pane.min_ts, bounds.min);
        pane.max_ts = max_opt(pane.max_ts, bounds.max);
        pane.since_fire = pane.since_fire.saturating_add(count);
        pane.queued = true;
        let fired = self.fire_one(&key, &window, out);
        if let Some(s) = self.spill.as_mut() {
            s.deletes.extend(g.keys);
        }
        Ok(fired)
    }
}

#[cfg(test)]
#[path = "spill_tests.rs"]
mod tests;
