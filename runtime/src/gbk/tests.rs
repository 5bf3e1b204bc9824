//! The GroupByKey with its triggers: grouping, merging, firing, panes.
use super::*;
use crate::codec::coders::{encode_nested_bytes, encode_varint};
use crate::codec::windowed::encode as encode_wv;
use crate::gbk::fixtures::repeated_count;
use crate::window::windowing::Trigger;

fn always() -> Trigger {
    Trigger::from_proto(Some(&crate::pb::Trigger { trigger: Some(crate::pb::trigger::Trigger::Always(Default::default())) })).unwrap()
}

fn spec(trigger: Trigger, window_coder: Coder) -> WindowingSpec {
    WindowingSpec {
        merging: false,
        trigger,
        accumulating: false,
        allowed_lateness: 0,
        output_time: OutputTime::EndOfWindow,
        window_coder,
        sdk: None,
        on_time_always: true,
        final_pane_always: false,
        bounded_input: false,
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

/// (timestamp, window, key, values, pane byte) of a fired pane.
fn decode(out: &[u8], wc: &Coder) -> (Millis, Window, String, Vec<u64>, u8) {
    crate::gbk::fixtures::decode_fired(out, wc)
}

#[test]
fn default_trigger_groups_per_key_and_fires_at_end_of_window() {
    let mut g = GroupByKey::new(spec(Trigger::default_trigger(), Coder::GlobalWindow), &kv_coder()).unwrap();
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
    let mut g = GroupByKey::new(spec(Trigger::default_trigger(), wc.clone()), &kv_coder()).unwrap();
    let w1 = Window::Interval { start: 0, end: 10 };
    let w2 = Window::Interval { start: 10, end: 20 };
    let mut out = Vec::new();
    g.add(&element(1, w1.clone(), "k", 1), &mut out).unwrap();
    g.add(&element(12, w2, "k", 2), &mut out).unwrap();
    g.advance(Watermark::At(10), &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(decode(&out[0], &wc).1, w1);
    g.add(&element(2, w1.clone(), "k", 9), &mut out).unwrap();
    assert_eq!(g.dropped_late, 1, "window 1 expired with zero allowed lateness");
    assert_eq!(g.hold(), Watermark::At(19));
    g.advance(Watermark::PosInf, &mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(decode(&out[1], &wc).3, vec![2]);
}

#[test]
fn sessions_merge_overlapping_windows_of_a_key() {
    let wc = Coder::IntervalWindow;
    let mut s = spec(Trigger::default_trigger(), wc.clone());
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
    let mut g = GroupByKey::new(spec(always(), Coder::GlobalWindow), &kv_coder()).unwrap();
    let mut out = Vec::new();
    g.add(&element(1, Window::Global, "k", 1), &mut out).unwrap();
    g.add(&element(2, Window::Global, "k", 2), &mut out).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(decode(&out[1], &Coder::GlobalWindow).3, vec![2]);
    g.advance(Watermark::PosInf, &mut out);
    assert_eq!(out.len(), 2, "nothing left to fire");

    let mut s = spec(repeated_count(2), Coder::GlobalWindow);
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
    let g = GroupByKey::new(spec(Trigger::default_trigger(), Coder::GlobalWindow), &kv_coder()).unwrap();
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
    let mut g =
        GroupByKey::new(WindowingSpec { allowed_lateness: 100, ..spec(Trigger::default_trigger(), wc.clone()) }, &kv_coder()).unwrap();
    let mut out = Vec::new();
    for k in 0..5 {
        g.add(&element(1, Window::Interval { start: 0, end: 10 }, &format!("k{k}"), k), &mut out).unwrap();
    }
    g.add(&element(15, Window::Interval { start: 10, end: 20 }, "late-window", 9), &mut out).unwrap();
    g.set_watermark(Watermark::At(12), &mut out);
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
    let mut g = GroupByKey::new(spec(Trigger::default_trigger(), wc.clone()), &kv_coder()).unwrap();
    let mut out = Vec::new();
    for k in 0..3 {
        g.add(&element(1, Window::Interval { start: 0, end: 10 }, &format!("k{k}"), k), &mut out).unwrap();
    }
    // Past the end plus allowed lateness (0): expired, yet not dropped unfired.
    g.set_watermark(Watermark::At(50), &mut out);
    assert_eq!(g.fire_closed(1, &mut out), 1);
    let changes = g.take_changes();
    let mut restored = GroupByKey::new(spec(Trigger::default_trigger(), wc.clone()), &kv_coder()).unwrap();
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
    let mut s = WindowingSpec { allowed_lateness: 100, accumulating: true, ..spec(Trigger::default_trigger(), wc.clone()) };
    s.merging = true;
    let mut g = GroupByKey::new(s, &kv_coder()).unwrap();
    let mut out = Vec::new();
    g.add(&element(0, Window::Interval { start: 0, end: 10 }, "k", 1), &mut out).unwrap();
    g.add(&element(5, Window::Interval { start: 5, end: 15 }, "k", 2), &mut out).unwrap();
    g.set_watermark(Watermark::At(20), &mut out);
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

/// A fired pane as Beam's pane info says it: (window, values, timestamp,
/// timing, index, on-time index, is_first, is_last).
#[derive(Debug, PartialEq)]
struct Fired {
    window: Window,
    values: Vec<u64>,
    ts: Millis,
    timing: u8,
    index: u64,
    on_time_index: i64,
    first: bool,
    last: bool,
}

const EARLY: u8 = 0;
const ON_TIME: u8 = 1;
const LATE: u8 = 2;

fn fired(out: &[u8], wc: &Coder) -> Fired {
    let (ts, window, _, mut values, low) = decode(out, wc);
    values.sort();
    let h = windowed::split(out, wc).unwrap();
    let timing = (low >> 2) & 3;
    let (index, on_time_index) = match low >> 4 {
        0 => (0, if timing == EARLY { -1 } else { 0 }),
        1 => {
            let (i, _) = crate::codec::coders::decode_varint(&h.pane[1..]).unwrap();
            (i, if timing == EARLY { -1 } else { i as i64 })
        }
        _ => {
            let (i, n) = crate::codec::coders::decode_varint(&h.pane[1..]).unwrap();
            let (o, _) = crate::codec::coders::decode_varint(&h.pane[1 + n..]).unwrap();
            (i, o as i64)
        }
    };
    Fired { window, values, ts, timing, index, on_time_index, first: low & 1 != 0, last: low & 2 != 0 }
}

fn trigger(t: crate::pb::trigger::Trigger) -> Trigger {
    Trigger::from_proto(Some(&crate::pb::Trigger { trigger: Some(t) })).unwrap()
}

fn count(n: i32) -> crate::pb::trigger::Trigger {
    crate::pb::trigger::Trigger::ElementCount(crate::pb::trigger::ElementCount { element_count: n })
}

fn after_watermark(early: Option<crate::pb::trigger::Trigger>, late: Option<crate::pb::trigger::Trigger>) -> Trigger {
    use crate::pb::trigger::{AfterEndOfWindow, Trigger as T};
    let wrap = |t: crate::pb::trigger::Trigger| Box::new(crate::pb::Trigger { trigger: Some(t) });
    trigger(T::AfterEndOfWindow(Box::new(AfterEndOfWindow { early_firings: early.map(wrap), late_firings: late.map(wrap) })))
}

fn processing(delay: i64) -> crate::pb::trigger::Trigger {
    use crate::pb::timestamp_transform::{Delay, TimestampTransform as TT};
    crate::pb::trigger::Trigger::AfterProcessingTime(crate::pb::trigger::AfterProcessingTime {
        timestamp_transforms: vec![crate::pb::TimestampTransform { timestamp_transform: Some(TT::Delay(Delay { delay_millis: delay })) }],
    })
}

fn fixed(ts: Millis, key: &str) -> Vec<u8> {
    let start = ts - ts.rem_euclid(10);
    element(ts, Window::Interval { start, end: start + 10 }, key, ts as u64)
}

fn w(start: Millis, end: Millis) -> Window {
    Window::Interval { start, end }
}

/// Beam's `discarding_early_fixed` transcript: early panes by count, then
/// on-time panes (one of them empty: on-time panes always fire).
#[test]
fn early_panes_by_count_then_on_time_panes_discarding() {
    let wc = Coder::IntervalWindow;
    let mut g = GroupByKey::new(spec(after_watermark(Some(count(2)), None), wc.clone()), &kv_coder()).unwrap();
    let mut out = Vec::new();
    let batch = |g: &mut GroupByKey, ts: &[Millis], out: &mut Vec<Vec<u8>>| {
        let els: Vec<Vec<u8>> = ts.iter().map(|&t| fixed(t, "k")).collect();
        g.add_batch(els.iter().map(|e| e.as_slice()), out).unwrap();
    };
    batch(&mut g, &[1, 2], &mut out);
    batch(&mut g, &[4], &mut out);
    batch(&mut g, &[14], &mut out);
    batch(&mut g, &[5], &mut out);
    batch(&mut g, &[18], &mut out);
    batch(&mut g, &[6], &mut out);
    g.advance(Watermark::At(100), &mut out);
    let got: Vec<Fired> = out.iter().map(|o| fired(o, &wc)).collect();
    let f = |window: Window, values: Vec<u64>, timing, index, on_time_index, last| Fired {
        ts: if window == w(0, 10) { 9 } else { 19 },
        window,
        values,
        timing,
        index,
        on_time_index,
        first: index == 0,
        last,
    };
    assert_eq!(
        got,
        vec![
            f(w(0, 10), vec![1, 2], EARLY, 0, -1, false),
            f(w(0, 10), vec![4, 5], EARLY, 1, -1, false),
            f(w(10, 20), vec![14, 18], EARLY, 0, -1, false),
            f(w(0, 10), vec![6], ON_TIME, 2, 0, true),
            f(w(10, 20), vec![], ON_TIME, 1, 0, true),
        ]
    );
}

/// AfterWatermark(early=AfterProcessingTime, late=AfterCount(1)),
/// accumulating, with allowed lateness: early, on time, late; nothing new
/// is left at garbage collection, so no final pane.
#[test]
fn early_on_time_and_late_panes_accumulating() {
    let wc = Coder::IntervalWindow;
    let mut s = spec(after_watermark(Some(processing(1000)), Some(count(1))), wc.clone());
    s.accumulating = true;
    s.allowed_lateness = 50;
    let mut g = GroupByKey::new(s, &kv_coder()).unwrap();
    let mut out = Vec::new();
    g.set_processing_time(10_000, &mut out);
    g.add(&fixed(1, "k"), &mut out).unwrap();
    g.add(&fixed(2, "k"), &mut out).unwrap();
    assert_eq!(g.next_deadline(), Some(11_000));
    g.set_processing_time(10_999, &mut out);
    assert!(out.is_empty());
    g.set_processing_time(11_000, &mut out);
    g.add(&fixed(3, "k"), &mut out).unwrap();
    g.advance(Watermark::At(10), &mut out);
    g.add(&fixed(4, "k"), &mut out).unwrap();
    g.set_processing_time(99_000, &mut out);
    g.add(&fixed(5, "k"), &mut out).unwrap();
    g.advance(Watermark::At(100), &mut out);
    let got: Vec<(Vec<u64>, u8, u64, i64, bool)> =
        out.iter().map(|o| fired(o, &wc)).map(|f| (f.values, f.timing, f.index, f.on_time_index, f.last)).collect();
    assert_eq!(
        got,
        vec![
            (vec![1, 2], EARLY, 0, -1, false),
            (vec![1, 2, 3], ON_TIME, 1, 0, false),
            (vec![1, 2, 3, 4], LATE, 2, 1, false),
            (vec![1, 2, 3, 4, 5], LATE, 3, 2, false),
        ]
    );
    assert!(g.panes.iter().next().is_none(), "expired");
}

/// What a trigger left unfired goes out at garbage collection, as the last
/// pane.
#[test]
fn garbage_collection_fires_what_the_trigger_left() {
    let wc = Coder::IntervalWindow;
    let mut s = spec(after_watermark(None, Some(count(2))), wc.clone());
    s.allowed_lateness = 50;
    let mut g = GroupByKey::new(s, &kv_coder()).unwrap();
    let mut out = Vec::new();
    g.add(&fixed(1, "k"), &mut out).unwrap();
    g.advance(Watermark::At(20), &mut out);
    g.add(&fixed(2, "k"), &mut out).unwrap();
    assert_eq!(out.len(), 1, "one late element: the late trigger waits for two");
    g.advance(Watermark::At(100), &mut out);
    let last = fired(&out[1], &wc);
    assert_eq!((last.values, last.timing, last.index, last.on_time_index, last.last), (vec![2], LATE, 1, 1, true));
}

/// Beam's `known_late_data_watermark` and `..._no_watermark_hold_possible`:
/// elements behind the watermark do not set the earliest output time.
#[test]
fn earliest_output_time_counts_only_elements_not_behind_the_watermark() {
    let wc = Coder::IntervalWindow;
    for (wm, expected) in [(5, 7), (8, 9)] {
        let mut s = spec(Trigger::default_trigger(), wc.clone());
        s.output_time = OutputTime::EarliestInPane;
        s.allowed_lateness = 10;
        let mut g = GroupByKey::new(s, &kv_coder()).unwrap();
        let mut out = Vec::new();
        g.advance(Watermark::At(wm), &mut out);
        let els: Vec<Vec<u8>> = [2, 3, 7, 8].iter().filter(|&&t| t != 8 || wm == 5).map(|&t| fixed(t, "k")).collect();
        g.add_batch(els.iter().map(|e| e.as_slice()), &mut out).unwrap();
        assert_eq!(g.hold(), if wm == 5 { Watermark::At(7) } else { Watermark::PosInf });
        g.advance(Watermark::At(11), &mut out);
        assert_eq!(fired(&out[0], &wc).ts, expected, "watermark {wm}");
    }
}

/// A trigger that finished closes its window: later elements are dropped,
/// and nothing fires at garbage collection. A trigger that never fired
/// leaves its data to the final pane (unless nothing is new).
#[test]
fn finished_triggers_close_windows_and_never_fires_at_garbage_collection() {
    let wc = Coder::IntervalWindow;
    let mut g = GroupByKey::new(spec(trigger(count(3)), wc.clone()), &kv_coder()).unwrap();
    let mut out = Vec::new();
    let els: Vec<Vec<u8>> = [1, 2, 3, 4, 5, 11, 12].iter().map(|&t| fixed(t, "k")).collect();
    g.add_batch(els.iter().map(|e| e.as_slice()), &mut out).unwrap();
    assert_eq!(out.len(), 1, "the trigger is asked after each element: it fires at its count");
    assert_eq!(fired(&out[0], &wc).values, vec![1, 2, 3]);
    assert!(fired(&out[0], &wc).last);
    assert_eq!(g.dropped_late, 2, "4 and 5 came after the window closed");
    g.add(&fixed(6, "k"), &mut out).unwrap();
    assert_eq!(g.dropped_late, 3, "the window is closed");
    g.advance(Watermark::PosInf, &mut out);
    let last = fired(&out[1], &wc);
    assert_eq!((last.window, last.values, last.timing, last.last), (w(10, 20), vec![11, 12], ON_TIME, true));
    assert_eq!(out.len(), 2);

    let never = crate::pb::trigger::Trigger::Never(Default::default());
    let mut g = GroupByKey::new(spec(trigger(never), wc.clone()), &kv_coder()).unwrap();
    let mut out = Vec::new();
    g.add(&fixed(1, "k"), &mut out).unwrap();
    g.advance(Watermark::At(10), &mut out);
    let f = fired(&out[0], &wc);
    assert_eq!((f.values, f.timing, f.last), (vec![1], ON_TIME, true));
}

/// Java's `ClosingBehavior.FIRE_ALWAYS` (CombineTest's
/// testGlobalCombineWithDefaultsAndTriggers): a window whose trigger has
/// not finished closes with a last pane even when nothing new came; with
/// FIRE_IF_NON_EMPTY it closes silently.
#[test]
fn closing_behaviour_fire_always_closes_with_a_last_pane_even_when_empty() {
    let wc = Coder::IntervalWindow;
    for always in [true, false] {
        let mut s = spec(repeated_count(1), wc.clone());
        s.accumulating = true;
        s.final_pane_always = always;
        let mut g = GroupByKey::new(s, &kv_coder()).unwrap();
        let mut out = Vec::new();
        g.add(&fixed(1, "k"), &mut out).unwrap();
        g.add(&fixed(2, "k"), &mut out).unwrap();
        assert_eq!(out.len(), 2, "a pane per element");
        assert!(!fired(&out[1], &wc).last);
        g.advance(Watermark::PosInf, &mut out);
        if always {
            let last = fired(&out[2], &wc);
            assert_eq!((last.values, last.timing, last.index, last.last), (vec![1, 2], ON_TIME, 2, true), "accumulated");
            assert_eq!(out.len(), 3);
        } else {
            assert_eq!(out.len(), 2, "nothing new: no final pane");
        }
        assert!(g.is_empty());
    }
}

#[test]
fn a_bounded_input_meets_its_trigger_at_watermark_steps() {
    let wc = Coder::IntervalWindow;
    let mut s = spec(trigger(count(3)), wc.clone());
    s.bounded_input = true;
    let mut g = GroupByKey::new(s, &kv_coder()).unwrap();
    let mut out = Vec::new();
    for t in [1, 2, 3, 4, 5, 11, 12] {
        g.add(&fixed(t, "k"), &mut out).unwrap();
    }
    assert!(out.is_empty(), "asked at the next watermark step");
    g.set_watermark(Watermark::PosInf, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(fired(&out[0], &wc).values, vec![1, 2, 3, 4, 5]);
}

/// Beam's `early_late_sessions` transcript.
#[test]
fn sessions_merge_trigger_state_and_pane_indexes() {
    let wc = Coder::IntervalWindow;
    let mut s = spec(after_watermark(Some(count(2)), Some(count(3))), wc.clone());
    s.merging = true;
    s.accumulating = true;
    s.allowed_lateness = 100;
    let mut g = GroupByKey::new(s, &kv_coder()).unwrap();
    let mut out = Vec::new();
    let session = |ts: &[Millis]| -> Vec<Vec<u8>> { ts.iter().map(|&t| element(t, w(t, t + 10), "k", t as u64)).collect() };
    let step = |g: &mut GroupByKey, ts: &[Millis], out: &mut Vec<Vec<u8>>| {
        let els = session(ts);
        g.add_batch(els.iter().map(|e| e.as_slice()), out).unwrap();
    };
    step(&mut g, &[1, 2], &mut out);
    step(&mut g, &[3], &mut out);
    step(&mut g, &[4], &mut out);
    step(&mut g, &[5], &mut out);
    g.advance(Watermark::At(100), &mut out);
    step(&mut g, &[1], &mut out);
    step(&mut g, &[3, 4], &mut out);
    let got: Vec<Fired> = out.iter().map(|o| fired(o, &wc)).collect();
    let summary: Vec<_> = got.iter().map(|f| (f.window.clone(), f.values.clone(), f.ts, f.timing, f.index, f.on_time_index)).collect();
    assert_eq!(
        summary,
        vec![
            // A merge into a new window starts its pane indexes over.
            (w(1, 12), vec![1, 2], 11, EARLY, 0, -1),
            (w(1, 14), vec![1, 2, 3, 4], 13, EARLY, 0, -1),
            (w(1, 15), vec![1, 2, 3, 4, 5], 14, ON_TIME, 0, 0),
            // Merged into the window it was: its indexes go on.
            (w(1, 15), vec![1, 1, 2, 3, 3, 4, 4, 5], 14, LATE, 1, 1),
        ]
    );
}

#[test]
fn trigger_state_and_deadlines_survive_a_restore() {
    let wc = Coder::IntervalWindow;
    let make = || {
        let mut s = spec(after_watermark(Some(processing(100)), Some(count(2))), wc.clone());
        s.allowed_lateness = 1000;
        GroupByKey::new(s, &kv_coder()).unwrap()
    };
    let mut live = make();
    let mut out = Vec::new();
    live.add(&fixed(1, "k"), &mut out).unwrap();
    live.advance(Watermark::At(10), &mut out);
    live.add(&fixed(2, "k"), &mut out).unwrap();
    live.add(&fixed(13, "k"), &mut out).unwrap();
    assert_eq!(out.len(), 1, "on time only");
    let mut restored = make();
    let changes = live.take_changes();
    restored.restore(changes.iter().filter_map(|(k, v)| v.as_deref().map(|v| (k.as_slice(), v)))).unwrap();
    assert_eq!(restored.next_deadline(), Some(100), "the deadline of the open window");
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (g, o) in [(&mut live, &mut a), (&mut restored, &mut b)] {
        g.add(&fixed(3, "k"), o).unwrap();
        g.set_processing_time(100, o);
        g.advance(Watermark::PosInf, o);
    }
    assert_eq!(a.len(), 3, "late (2 elements), early for [10, 20), final");
    assert_eq!(a, b);
}

/// A window that first gets data once the watermark passed its end (within
/// the allowed lateness) fires late panes only.
#[test]
fn a_window_born_behind_the_watermark_fires_late() {
    let wc = Coder::IntervalWindow;
    let mut s = spec(Trigger::default_trigger(), wc.clone());
    s.allowed_lateness = 100;
    let mut g = GroupByKey::new(s, &kv_coder()).unwrap();
    let mut out = Vec::new();
    g.advance(Watermark::At(50), &mut out);
    g.add(&fixed(3, "k"), &mut out).unwrap();
    g.add(&fixed(4, "k"), &mut out).unwrap();
    let got: Vec<(Vec<u64>, u8, u64, i64)> =
        out.iter().map(|o| fired(o, &wc)).map(|f| (f.values, f.timing, f.index, f.on_time_index)).collect();
    assert_eq!(got, vec![(vec![3], LATE, 0, 0), (vec![4], LATE, 1, 1)]);
    assert_eq!(g.closed_pending(), 0, "nothing waits for an on-time firing");
}

/// A processing-time deadline that passes while its pane waits in the
/// watermark's queue (the stage had no room yet), or while its trigger
/// waits for more (AfterAll with a count), is offered once: taking it again
/// at once looped forever on the task's thread, which hung the job and its
/// cancel (Java's testAfterProcessingTimeContinuationTriggerUsingState).
#[test]
fn a_passed_deadline_of_a_pane_that_does_not_fire_is_taken_once() {
    use crate::pb::trigger::{AfterAll, Trigger as T};
    let wc = Coder::IntervalWindow;
    // Queued for the watermark's firing when its early deadline passes.
    let mut g = GroupByKey::new(spec(after_watermark(Some(processing(1000)), None), wc.clone()), &kv_coder()).unwrap();
    let mut out = Vec::new();
    g.set_processing_time(10_000, &mut out);
    g.add(&fixed(1, "k"), &mut out).unwrap();
    g.set_watermark(Watermark::At(100), &mut out);
    assert_eq!(g.closed_pending(), 1);
    g.set_processing_time(12_000, &mut out);
    assert!(out.is_empty(), "a queued pane fires with the queue");
    assert_eq!(g.next_deadline(), None, "its passed deadline is not listed again");
    assert_eq!(g.fire_closed(usize::MAX, &mut out), 1);
    assert_eq!(fired(&out[0], &wc).values, vec![1]);

    // AfterAll(AfterProcessingTime, AfterCount(2)) with one element: the
    // deadline passes, the count does not; the second element fires it.
    let wrap = |t: T| crate::pb::Trigger { trigger: Some(t) };
    let all = trigger(T::AfterAll(AfterAll { subtriggers: vec![wrap(processing(1000)), wrap(count(2))] }));
    let mut g = GroupByKey::new(spec(all, wc.clone()), &kv_coder()).unwrap();
    let mut out = Vec::new();
    g.set_processing_time(10_000, &mut out);
    g.add(&fixed(1, "k"), &mut out).unwrap();
    g.set_processing_time(12_000, &mut out);
    assert!(out.is_empty());
    assert_eq!(g.next_deadline(), None);
    g.add(&fixed(2, "k"), &mut out).unwrap();
    assert_eq!(out.iter().map(|o| fired(o, &wc).values).collect::<Vec<_>>(), vec![vec![1, 2]]);
}

/// Triggers are asked after each element of a batch (a TestStream step, a
/// poll), as Prism asks them: an element count fires at its count. A
/// trigger on synchronized processing time, the batch's clock, fires once
/// the batch is in.
#[test]
fn triggers_are_asked_per_element_and_synchronized_time_per_batch() {
    let mut g = GroupByKey::new(spec(always(), Coder::GlobalWindow), &kv_coder()).unwrap();
    let mut out = Vec::new();
    let els: Vec<Vec<u8>> = (1..=3).map(|v| element(v, Window::Global, "k", v as u64)).collect();
    g.add_batch(els.iter().map(|e| e.as_slice()), &mut out).unwrap();
    let panes: Vec<Vec<u64>> = out.iter().map(|o| decode(o, &Coder::GlobalWindow).3).collect();
    assert_eq!(panes, [vec![1], vec![2], vec![3]]);

    let mut g = GroupByKey::new(spec(repeated_count(2), Coder::GlobalWindow), &kv_coder()).unwrap();
    let mut out = Vec::new();
    let els: Vec<Vec<u8>> = (1..=5).map(|v| element(v, Window::Global, "k", v as u64)).collect();
    g.add_batch(els.iter().map(|e| e.as_slice()), &mut out).unwrap();
    let panes: Vec<Vec<u64>> = out.iter().map(|o| decode(o, &Coder::GlobalWindow).3).collect();
    assert_eq!(panes, [vec![1, 2], vec![3, 4]]);

    use crate::pb::trigger::{AfterSynchronizedProcessingTime, Repeat, Trigger as T};
    let sync = T::AfterSynchronizedProcessingTime(AfterSynchronizedProcessingTime {});
    let repeat = T::Repeat(Box::new(Repeat { subtrigger: Some(Box::new(crate::pb::Trigger { trigger: Some(sync) })) }));
    let mut g = GroupByKey::new(spec(trigger(repeat), Coder::GlobalWindow), &kv_coder()).unwrap();
    let mut out = Vec::new();
    g.add_batch(els.iter().map(|e| e.as_slice()), &mut out).unwrap();
    assert_eq!(out.len(), 1, "one pane for the batch");
    assert_eq!(decode(&out[0], &Coder::GlobalWindow).3, vec![1, 2, 3, 4, 5]);
}
