use std::collections::HashMap;

use super::*;
use crate::codec::coder::Coder;
use crate::codec::coders::{encode_nested_bytes, encode_varint};
use crate::codec::timestamp::Watermark;
use crate::gbk::fixtures::interval_gbk;
use crate::window::window_fns::SdkWindowFn;

fn iw(start: Millis, end: Millis) -> Window {
    Window::Interval { start, end }
}

fn element(ts: Millis, window: &Window, value: u64) -> Vec<u8> {
    let mut kv = Vec::new();
    encode_nested_bytes(b"k", &mut kv);
    encode_varint(value, &mut kv);
    let mut out = Vec::new();
    windowed::encode(ts, window, &[0x0f], &kv, &mut out);
    out
}

fn sdk(merges: bool, opaque: bool) -> SdkWindowFn {
    SdkWindowFn { window_fn: Default::default(), environment_id: String::new(), window_coder_id: String::new(), merges, opaque }
}

/// (window as on the wire, values) of each pane fired.
fn panes(out: &[Vec<u8>], wc: &Coder) -> Vec<(Window, Vec<u64>)> {
    let mut got: Vec<_> = out
        .iter()
        .map(|o| {
            let h = windowed::split(o, wc).unwrap();
            let w = Window::decode(h.windows[0], wc).unwrap();
            let v = &o[h.value_offset + 2..];
            let n = u32::from_be_bytes(v[..4].try_into().unwrap());
            let mut values: Vec<u64> = v[4..4 + n as usize].iter().map(|&b| b as u64).collect();
            values.sort();
            (w, values)
        })
        .collect();
    got.sort();
    got
}

/// The merge Beam's CustomMergingWindowFn test makes: windows starting at
/// an even time merge into one spanning them all.
fn merge_evens(windows: &[Window]) -> Vec<Merge> {
    let evens: Vec<Window> = windows.iter().filter(|w| matches!(w, Window::Interval { start, .. } if start % 2 == 0)).cloned().collect();
    let (Some(Window::Interval { start, .. }), Some(end)) =
        (evens.first(), evens.iter().map(|w| if let Window::Interval { end, .. } = w { *end } else { 0 }).max())
    else {
        return Vec::new();
    };
    vec![Merge { result: iw(*start, end), originals: evens.clone() }]
}

fn add_merging(g: &mut GroupByKey, elements: &[Vec<u8>], out: &mut Vec<Vec<u8>>) {
    let requests = g.merge_requests(elements.iter().map(|e| e.as_slice())).unwrap();
    let plan: HashMap<Vec<u8>, Vec<Merge>> = requests.into_iter().map(|(k, ws)| (k, merge_evens(&ws))).collect();
    g.add_batch_merged(elements.iter().map(|e| e.as_slice()), plan, out).unwrap();
}

#[test]
fn a_merging_window_fn_of_the_sdk_merges_across_batches_with_what_the_key_has() {
    let mut g = interval_gbk(true);
    g.spec.sdk = Some(sdk(true, false));
    assert!(g.merges_in_sdk());
    let mut out = Vec::new();
    let e = |t: Millis| element(t, &iw(t, t + 1000), t as u64);
    add_merging(&mut g, &[e(1), e(2)], &mut out);
    let asked = g.merge_requests([e(100).as_slice()]).unwrap();
    assert_eq!(asked, vec![(b"\x01k".to_vec(), vec![iw(1, 1001), iw(2, 1002), iw(100, 1100)])], "the key's windows and the new one");
    add_merging(&mut g, &[e(100), e(101), e(102)], &mut out);
    g.advance(Watermark::PosInf, &mut out);
    let got = panes(&out, &Coder::IntervalWindow);
    assert_eq!(got, vec![(iw(1, 1001), vec![1]), (iw(2, 1102), vec![2, 100, 102]), (iw(101, 1101), vec![101])]);
}

#[test]
fn without_an_answer_from_the_sdk_nothing_merges_and_nothing_is_lost() {
    let mut g = interval_gbk(true);
    g.spec.sdk = Some(sdk(true, false));
    let mut out = Vec::new();
    for t in [2, 4] {
        g.add(&element(t, &iw(t, t + 1000), t as u64), &mut out).unwrap();
    }
    g.advance(Watermark::PosInf, &mut out);
    assert_eq!(panes(&out, &Coder::IntervalWindow), vec![(iw(2, 1002), vec![2]), (iw(4, 1004), vec![4])]);
}

fn opaque(name: &str) -> Window {
    Window::Opaque { max: windowed::UNRESOLVED_MAX, bytes: name.as_bytes().into() }
}

#[test]
fn opaque_windows_fire_at_the_ends_the_sdk_tells_and_keep_them_across_a_restore() {
    let lp = Coder::LengthPrefix(Box::new(Coder::Opaque("beam:coder:pickled_python:v1".into())));
    let make = || {
        let mut g = interval_gbk(false);
        g.spec.window_coder = lp.clone();
        g.spec.sdk = Some(sdk(false, true));
        g
    };
    let mut g = make();
    let batch = [element(1, &opaque("red"), 1), element(3, &opaque("red"), 3), element(2, &opaque("black"), 2)];
    let unknown = g.windows_to_resolve(batch.iter().map(|e| e.as_slice())).unwrap();
    assert_eq!(unknown, vec![opaque("black"), opaque("red")], "each once");
    g.resolve_ends([(opaque("red"), 9), (opaque("black"), 19)]);
    assert!(g.windows_to_resolve(batch.iter().map(|e| e.as_slice())).unwrap().is_empty());
    let mut out = Vec::new();
    g.add_batch(batch.iter().map(|e| e.as_slice()), &mut out).unwrap();
    assert_eq!(g.hold(), Watermark::At(9), "the red window's end holds the watermark");

    let mut restored = make();
    let changes = g.take_changes();
    restored.restore(changes.iter().filter_map(|(k, v)| v.as_deref().map(|v| (k.as_slice(), v)))).unwrap();
    assert!(restored.windows_to_resolve([element(4, &opaque("red"), 4).as_slice()]).unwrap().is_empty(), "ends are stored");

    for g in [&mut g, &mut restored] {
        let mut out = Vec::new();
        g.advance(Watermark::At(10), &mut out);
        assert_eq!(panes(&out, &lp), vec![(opaque("red"), vec![1, 3])], "only the red window ended");
        let h = windowed::split(&out[0], &lp).unwrap();
        assert_eq!(h.windows[0], b"\x03red", "the window goes out as it came");
        assert_eq!(h.timestamp, 9);
        out.clear();
        g.advance(Watermark::PosInf, &mut out);
        assert_eq!(panes(&out, &lp), vec![(opaque("black"), vec![2])]);
        assert!(g.ends.is_empty(), "ends of expired windows are forgotten");
    }
}
