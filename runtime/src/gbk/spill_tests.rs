//! A batch GroupByKey whose panes are evicted to the store fires what one
//! that kept them in memory fires, once each, through restarts and passes
//! cut into small firings.
use std::collections::BTreeMap;
use std::sync::Mutex;

use super::*;
use crate::codec::coder::Coder;
use crate::gbk::fixtures::interval_element;
use crate::window::windowing::{Trigger, WindowingSpec};

/// The task's store: the committed entries, in key order.
#[derive(Default)]
struct MemStore(Mutex<BTreeMap<Vec<u8>, Vec<u8>>>);

impl MemStore {
    fn apply(&self, changes: Vec<(Vec<u8>, Option<Vec<u8>>)>) {
        let mut m = self.0.lock().unwrap();
        for (k, v) in changes {
            match v {
                Some(v) => m.insert(k, v),
                None => m.remove(&k),
            };
        }
    }

    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.0.lock().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

impl SpillStore for MemStore {
    fn scan(&self, start: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), String> {
        for (k, v) in self.0.lock().unwrap().range(start.to_vec()..) {
            if !visit(k, v) {
                break;
            }
        }
        Ok(())
    }
}

fn batch_gbk(output_time: OutputTime) -> GroupByKey {
    let spec = WindowingSpec {
        merging: false,
        trigger: Trigger::default_trigger(),
        accumulating: false,
        allowed_lateness: 0,
        output_time,
        window_coder: Coder::IntervalWindow,
        sdk: None,
        on_time_always: true,
        final_pane_always: false,
        bounded_input: true,
    };
    GroupByKey::new(spec, &Coder::Kv(Box::new(Coder::StringUtf8), Box::new(Coder::Varint))).unwrap()
}

fn spilling(store: &Arc<MemStore>) -> GroupByKey {
    let mut g = batch_gbk(OutputTime::EndOfWindow);
    g.spill_to(store.clone());
    assert!(g.spill.is_some());
    g
}

/// A fired pane as (window start, key, timestamp, values sorted).
type Fired = (i64, String, i64, Vec<u64>);

fn decode(pane: &[u8]) -> Fired {
    let (ts, window, key, mut values, _) = crate::gbk::fixtures::decode_fired(pane, &Coder::IntervalWindow);
    let Window::Interval { start, .. } = window else { panic!("an interval window") };
    values.sort_unstable();
    (start, key, ts, values)
}

fn sorted(out: &[Vec<u8>]) -> Vec<Fired> {
    let mut f: Vec<Fired> = out.iter().map(|p| decode(p)).collect();
    f.sort();
    f
}

/// Cycle `c`'s elements: keys k0..k39 in windows [0,10) and [10,20),
/// each key in some cycles only, so keys come back after their eviction.
fn cycle_elements(c: u64) -> Vec<Vec<u8>> {
    (0..40u64)
        .filter(|k| !(k + c).is_multiple_of(3))
        .flat_map(|k| {
            let start = if k % 2 == 0 { 0 } else { 10 };
            (0..2).map(move |i| interval_element(start + (k % 7) as i64, start, start + 10, &format!("k{k}"), c * 100 + i))
        })
        .collect()
}

/// Drains the closed panes in firings of `limit`, committing after each.
fn fire_all(g: &mut GroupByKey, store: &MemStore, limit: usize, barrier: &mut u64, out: &mut Vec<Vec<u8>>) {
    for _ in 0..10_000 {
        if g.closed_pending() == 0 {
            return;
        }
        let before = out.len();
        assert!(g.fire(limit, out).unwrap().is_some(), "every eviction is committed");
        assert!(out.len() - before <= limit, "a firing gives at most its limit");
        *barrier += 1;
        store.apply(g.take_changes_for(*barrier, true));
        g.committed(*barrier);
    }
    panic!("the closed panes never drained");
}

#[test]
fn evicted_panes_fire_once_with_all_their_values_as_resident_ones_do() {
    for limit in [1, 3, usize::MAX] {
        let store = Arc::new(MemStore::default());
        let mut g = spilling(&store);
        let mut reference = batch_gbk(OutputTime::EndOfWindow);
        let (mut out, mut expected) = (Vec::new(), Vec::new());
        for c in 1..=6u64 {
            let elements = cycle_elements(c);
            g.add_batch(elements.iter().map(Vec::as_slice), &mut out).unwrap();
            reference.add_batch(elements.iter().map(Vec::as_slice), &mut expected).unwrap();
            store.apply(g.take_changes_for(c, !c.is_multiple_of(2)));
            g.committed(c);
        }
        assert!(g.spill.as_ref().unwrap().evicted > 0 && g.spill.as_ref().unwrap().windows.len() == 2, "panes of both windows left memory");
        assert!(g.panes.iter().count() > 0, "keys came back after their eviction");
        // The last cycle's values are not even taken when the window closes.
        let last = cycle_elements(7);
        g.add_batch(last.iter().map(Vec::as_slice), &mut out).unwrap();
        reference.add_batch(last.iter().map(Vec::as_slice), &mut expected).unwrap();
        assert!(out.is_empty());
        g.set_watermark(Watermark::At(10), &mut out);
        reference.advance(Watermark::At(10), &mut expected);
        let mut barrier = 100;
        fire_all(&mut g, &store, limit, &mut barrier, &mut out);
        assert_eq!(sorted(&out), sorted(&expected), "window [0,10) with limit {limit}");
        assert!(g.hold() > Watermark::At(9), "the first window holds nothing any more");
        g.set_watermark(Watermark::PosInf, &mut out);
        reference.advance(Watermark::PosInf, &mut expected);
        fire_all(&mut g, &store, limit, &mut barrier, &mut out);
        let fired = sorted(&out);
        assert_eq!(fired, sorted(&expected), "limit {limit}");
        let mut once: Vec<(i64, String)> = fired.iter().map(|f| (f.0, f.1.clone())).collect();
        once.dedup();
        assert_eq!(once.len(), fired.len(), "each (key, window) fires once");
        assert!(g.is_empty() && g.hold() == Watermark::PosInf);
        assert!(store.entries().iter().all(|(k, _)| k[0] != RUN), "every run was deleted");
    }
}

#[test]
fn a_restart_fires_from_the_store_what_the_live_one_would() {
    let store = Arc::new(MemStore::default());
    let mut live = spilling(&store);
    let mut out = Vec::new();
    for c in 1..=4u64 {
        let elements = cycle_elements(c);
        live.add_batch(elements.iter().map(Vec::as_slice), &mut out).unwrap();
        store.apply(live.take_changes_for(c, true));
        live.committed(c);
    }
    live.set_watermark(Watermark::PosInf, &mut out);
    // Part of the pass fires and commits, then the task restarts.
    assert_eq!(live.fire(5, &mut out).unwrap(), Some(5));
    store.apply(live.take_changes_for(5, true));
    let mut expected = out.clone();
    let mut barrier = 5;
    fire_all(&mut live, &store.clone_contents(), 4, &mut barrier, &mut expected);

    let restarted_store = Arc::new(MemStore::default());
    restarted_store.apply(store.entries().into_iter().map(|(k, v)| (k, Some(v))).collect());
    let mut restored = spilling(&restarted_store);
    let entries = restarted_store.entries();
    restored.restore(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).unwrap();
    assert!(restored.closed_pending() > 0, "the rest of the pass is still to fire");
    let mut barrier = 10;
    fire_all(&mut restored, &restarted_store, 4, &mut barrier, &mut out);
    assert_eq!(sorted(&out), sorted(&expected));
    assert_eq!(out.len(), 40, "every (key, window) once: 40 keys, each in one window");
}

impl MemStore {
    /// A copy, for a run that must not change this one.
    fn clone_contents(&self) -> MemStore {
        MemStore(Mutex::new(self.0.lock().unwrap().clone()))
    }
}

#[test]
fn evicted_panes_hold_the_output_watermark_at_their_earliest_element() {
    let store = Arc::new(MemStore::default());
    let mut g = batch_gbk(OutputTime::EarliestInPane);
    g.spill_to(store.clone());
    let mut out = Vec::new();
    g.add(&interval_element(7, 0, 10, "a", 1), &mut out).unwrap();
    g.add(&interval_element(4, 0, 10, "b", 1), &mut out).unwrap();
    store.apply(g.take_changes_for(1, true));
    g.committed(1);
    assert_eq!(g.panes.iter().count(), 0, "both panes left memory");
    assert_eq!(g.hold(), Watermark::At(4), "the evicted panes still hold");
    assert_eq!(g.closed_hold(), Watermark::PosInf, "their window is open");
    g.set_watermark(Watermark::At(10), &mut out);
    assert_eq!((g.closed_pending(), g.closed_hold()), (1, Watermark::At(4)));
    assert_eq!(g.fire(1, &mut out).unwrap(), Some(1));
    assert_eq!(decode(&out[0]).1, "a", "in the store's key order");
    // The read stopped at the second key: the pass is not over, and the
    // window still holds at its earliest element.
    assert_eq!((g.closed_pending(), g.closed_hold()), (1, Watermark::At(4)));
    g.fire(1, &mut out).unwrap();
    assert_eq!(
        sorted(&out).iter().map(|f| (f.1.as_str(), f.2)).collect::<Vec<_>>(),
        vec![("a", 7), ("b", 4)],
        "each pane at its earliest element"
    );
    g.fire(1, &mut out).unwrap();
    assert_eq!((g.closed_pending(), g.hold()), (0, Watermark::PosInf));
}

#[test]
fn evicted_panes_are_read_back_only_once_committed_and_streaming_group_by_keys_never_spill() {
    let store = Arc::new(MemStore::default());
    let mut g = spilling(&store);
    let mut out = Vec::new();
    g.add(&interval_element(1, 0, 10, "a", 1), &mut out).unwrap();
    let first = g.take_changes_for(1, false);
    assert!(first.iter().all(|(k, v)| k[0] == RUN && v.is_some()), "a pane of runs writes one run: {first:?}");
    assert_eq!(g.panes.iter().count(), 1, "nothing leaves memory unless asked");
    g.add(&interval_element(1, 0, 10, "a", 2), &mut out).unwrap();
    let second = g.take_changes_for(2, true);
    assert_eq!(g.panes.iter().count(), 0, "its values are all in runs: it left");
    assert!(g.resident_bytes() < 100);
    g.set_watermark(Watermark::PosInf, &mut out);
    assert_eq!(g.closed_pending(), 1);
    assert_eq!(g.fire(10, &mut out).unwrap(), None, "its second run is not in the store yet");
    store.apply(first);
    g.committed(1);
    assert_eq!(g.fire(10, &mut out).unwrap(), None, "nor after the first commit");
    store.apply(second);
    g.committed(2);
    assert_eq!(g.fire(10, &mut out).unwrap(), Some(1));
    assert_eq!(sorted(&out), vec![(0, "a".to_string(), 9, vec![1, 2])]);
    store.apply(g.take_changes_for(3, true));
    assert!(store.entries().iter().all(|(k, _)| k[0] != RUN), "its runs were deleted with the firing");

    let mut streaming = crate::gbk::fixtures::interval_gbk(false);
    streaming.spill_to(store.clone());
    assert!(streaming.spill.is_none(), "an unbounded input's panes fire more than once");
}

#[test]
fn runs_of_a_fired_pane_that_land_in_the_store_later_are_not_fired_again() {
    let store = Arc::new(MemStore::default());
    let mut g = spilling(&store);
    let mut out = Vec::new();
    for key in ["a", "b"] {
        g.add(&interval_element(1, 0, 10, key, 1), &mut out).unwrap();
    }
    store.apply(g.take_changes_for(1, true));
    g.committed(1);
    // "a" comes back; its new run is written but not committed when the
    // pass reads it.
    g.add(&interval_element(1, 0, 10, "a", 2), &mut out).unwrap();
    let late = g.take_changes_for(2, false);
    g.set_watermark(Watermark::PosInf, &mut out);
    assert_eq!(g.fire(1, &mut out).unwrap(), Some(1));
    assert_eq!(sorted(&out), vec![(0, "a".to_string(), 9, vec![1, 2])]);
    store.apply(late);
    g.committed(2);
    let mut barrier = 3;
    fire_all(&mut g, &store, 10, &mut barrier, &mut out);
    assert_eq!(sorted(&out), vec![(0, "a".to_string(), 9, vec![1, 2]), (0, "b".to_string(), 9, vec![1])]);
    assert!(store.entries().iter().all(|(k, _)| k[0] != RUN));
}

#[test]
fn a_group_by_key_that_changed_too_many_panes_wants_a_commit_until_it_had_one() {
    let store = Arc::new(MemStore::default());
    let mut g = spilling(&store);
    let mut out = Vec::new();
    let elements: Vec<Vec<u8>> = (0..MAX_CHANGED_PANES).map(|k| interval_element(1, 0, 10, &format!("k{k}"), 1)).collect();
    g.add_batch(elements[..MAX_CHANGED_PANES - 1].iter().map(Vec::as_slice), &mut out).unwrap();
    assert!(!g.wants_commit());
    g.add(&elements[MAX_CHANGED_PANES - 1], &mut out).unwrap();
    assert!(g.wants_commit(), "{MAX_CHANGED_PANES} panes changed");
    let resident = g.resident_bytes();
    assert!(resident >= MAX_CHANGED_PANES * PANE_OVERHEAD, "every new pane is counted: {resident}");
    store.apply(g.take_changes_for(1, false));
    assert!(!g.wants_commit(), "their changes are taken");
    let mut streaming = crate::gbk::fixtures::interval_gbk(false);
    streaming.add_batch(elements.iter().map(Vec::as_slice), &mut out).unwrap();
    assert!(!streaming.wants_commit(), "only a batch GroupByKey holds its input back");
}

#[test]
fn a_pass_that_deleted_many_runs_wants_a_commit() {
    let store = Arc::new(MemStore::default());
    let mut g = spilling(&store);
    let mut out = Vec::new();
    let elements: Vec<Vec<u8>> = (0..MAX_CHANGED_PANES / 2).map(|k| interval_element(1, 0, 10, &format!("k{k}"), 1)).collect();
    for barrier in 1..=2 {
        g.add_batch(elements.iter().map(Vec::as_slice), &mut out).unwrap();
        store.apply(g.take_changes_for(barrier, true));
        g.committed(barrier);
    }
    g.set_watermark(Watermark::PosInf, &mut out);
    assert!(!g.wants_commit());
    assert_eq!(g.fire(MAX_CHANGED_PANES / 2, &mut out).unwrap(), Some(MAX_CHANGED_PANES / 2));
    assert!(g.wants_commit(), "two runs deleted per pane fired");
    store.apply(g.take_changes_for(3, true));
    assert!(!g.wants_commit());
}
