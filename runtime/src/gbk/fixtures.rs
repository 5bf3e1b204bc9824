//! GroupByKeys and their input elements for tests: this crate's, and other
//! crates' through the `fixtures` feature (never in a build that ships).
use crate::codec::coder::Coder;
use crate::codec::coders::{encode_nested_bytes, encode_varint};
use crate::codec::timestamp::Millis;
use crate::codec::windowed::{encode, Window};
use crate::gbk::GroupByKey;
use crate::window::windowing::{OutputTime, Trigger, WindowingSpec};

/// A GroupByKey of string keys and varint values in interval windows, with
/// the default trigger and no allowed lateness; `merging` for sessions.
pub fn interval_gbk(merging: bool) -> GroupByKey {
    let spec = WindowingSpec {
        merging,
        trigger: Trigger::default_trigger(),
        accumulating: false,
        allowed_lateness: 0,
        output_time: OutputTime::EndOfWindow,
        window_coder: Coder::IntervalWindow,
        sdk: None,
        on_time_always: true,
        final_pane_always: false,
        bounded_input: false,
    };
    GroupByKey::new(spec, &Coder::Kv(Box::new(Coder::StringUtf8), Box::new(Coder::Varint))).expect("a readable KV coder")
}

/// The element (`key`, `value`) at `ts` in window [`start`, `end`), as an
/// `interval_gbk` reads it.
pub fn interval_element(ts: Millis, start: Millis, end: Millis, key: &str, value: u64) -> Vec<u8> {
    let mut kv = Vec::new();
    encode_nested_bytes(key.as_bytes(), &mut kv);
    encode_varint(value, &mut kv);
    let mut out = Vec::new();
    encode(ts, &Window::Interval { start, end }, &[0x0f], &kv, &mut out);
    out
}

/// `Repeatedly(AfterCount(n))`.
pub fn repeated_count(n: i32) -> Trigger {
    use crate::pb::trigger::{ElementCount, Repeat, Trigger as T};
    let count = crate::pb::Trigger { trigger: Some(T::ElementCount(ElementCount { element_count: n })) };
    let repeat = T::Repeat(Box::new(Repeat { subtrigger: Some(Box::new(count)) }));
    Trigger::from_proto(Some(&crate::pb::Trigger { trigger: Some(repeat) })).expect("a valid trigger")
}

/// A pane an `interval_gbk` (or any GroupByKey of string keys and varint
/// values) fired: (timestamp, its first window, key, values, the pane
/// info's first byte).
pub fn decode_fired(out: &[u8], wc: &Coder) -> (Millis, Window, String, Vec<u64>, u8) {
    let h = crate::codec::windowed::split(out, wc).expect("a windowed value");
    let w = Window::decode(h.windows[0], wc).expect("a window");
    let v = &out[h.value_offset..];
    let klen = Coder::StringUtf8.skip(v).expect("a key");
    let key = String::from_utf8(v[1..klen].to_vec()).expect("a UTF-8 key");
    let count = u32::from_be_bytes(v[klen..klen + 4].try_into().expect("a count"));
    let mut at = klen + 4;
    let mut values = Vec::new();
    for _ in 0..count {
        let (x, n) = crate::codec::coders::decode_varint(&v[at..]).expect("a varint value");
        values.push(x);
        at += n;
    }
    assert_eq!(at, v.len(), "the pane holds its count of values");
    (h.timestamp, w, key, values, h.pane[0])
}
