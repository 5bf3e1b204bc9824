//! Windowed values on the wire (`beam:coder:windowed_value:v1`): the header
//! (timestamp, windows, pane) and the element after it.
use crate::codec::coder::windowed_header::read_timestamp;
pub use crate::codec::coder::windowed_header::{split, Header, Windows};
use crate::codec::coder::Coder;
use crate::codec::coders::{decode_varint, encode_timestamp, encode_varint};
use crate::codec::timestamp::{Millis, GLOBAL_WINDOW_MAX};
use std::sync::Arc;

/// Where one encoded windowed value lies: its length, and its key's bytes
/// when its element is a KV (an empty range otherwise).
#[derive(Debug, PartialEq, Eq)]
pub struct Extent {
    pub len: usize,
    pub key: std::ops::Range<usize>,
}

/// The extent of the windowed value of `element` in `window` windows at the
/// start of `buf`; an error if it is malformed or cut short.
pub fn extent(buf: &[u8], window: &Coder, element: &Coder) -> Result<Extent, String> {
    let h = split(buf, window)?;
    let at = h.value_offset;
    let (key, value_len) = match element {
        Coder::Kv(k, v) => {
            let kl = k.skip(&buf[at..])?;
            (at..at + kl, kl + v.skip(&buf[at + kl..])?)
        }
        other => (at..at, other.skip(&buf[at..])?),
    };
    Ok(Extent { len: at + value_len, key })
}

/// A window as the runner reasons about it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Window {
    Global,
    /// `[start, end)` in millis.
    Interval {
        start: Millis,
        end: Millis,
    },
    /// A window of a custom WindowFn, which the runner cannot read: kept as
    /// the SDK encoded it, with its last timestamp (the SDK tells it, see
    /// `window_fns`). On the wire it travels length-prefixed.
    Opaque {
        max: Millis,
        bytes: Arc<[u8]>,
    },
}

/// The last timestamp given to an opaque window nobody resolved: it never
/// ends, so what waits for its end waits for the end of time, and nothing
/// in it is dropped or expires early.
pub const UNRESOLVED_MAX: Millis = GLOBAL_WINDOW_MAX;

/// The window coder's body of one encoded window: without the length prefix
/// an opaque window travels with (what the SDK's window coder wrote).
pub fn window_body<'a>(encoded: &'a [u8], coder: &Coder) -> &'a [u8] {
    match coder {
        Coder::LengthPrefix(_) => match decode_varint(encoded) {
            Some((len, n)) => encoded.get(n..n.saturating_add(len as usize)).unwrap_or(&[]),
            None => &[],
        },
        _ => encoded,
    }
}

impl Window {
    /// Decodes a window in its wire form (`coder` is a wire window coder).
    /// An opaque window gets `UNRESOLVED_MAX` (see `with_max`).
    pub fn decode(bytes: &[u8], coder: &Coder) -> Result<Window, String> {
        match coder {
            Coder::GlobalWindow => Ok(Window::Global),
            Coder::IntervalWindow => {
                let end = read_timestamp(bytes)?;
                let (span, _) = decode_varint(&bytes[8..]).ok_or("truncated interval window")?;
                let start =
                    i64::try_from(span).ok().and_then(|s| end.checked_sub(s)).ok_or("an interval window starting before time began")?;
                Ok(Window::Interval { start, end })
            }
            Coder::LengthPrefix(_) => {
                let n = coder.skip(bytes)?;
                Ok(Window::Opaque { max: UNRESOLVED_MAX, bytes: window_body(&bytes[..n], coder).into() })
            }
            // A window as a state key names it (the SDK's own encoding).
            Coder::Opaque(_) => Ok(Window::Opaque { max: UNRESOLVED_MAX, bytes: bytes.into() }),
            other => Err(format!("the runner cannot read windows encoded with {other:?}")),
        }
    }

    /// The same window with its last timestamp known.
    pub fn with_max(self, max: Millis) -> Window {
        match self {
            Window::Opaque { bytes, .. } => Window::Opaque { max, bytes },
            other => other,
        }
    }

    /// Encodes the window in its wire form.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Window::Global => {}
            Window::Interval { start, end } => {
                encode_timestamp(*end, out);
                encode_varint((end - start) as u64, out);
            }
            Window::Opaque { bytes, .. } => {
                encode_varint(bytes.len() as u64, out);
                out.extend_from_slice(bytes);
            }
        }
    }

    /// Encodes the window for the runner's own state: an opaque window
    /// keeps its last timestamp there, so a restore needs no SDK.
    pub fn encode_stored(&self, out: &mut Vec<u8>) {
        if let Window::Opaque { max, .. } = self {
            encode_timestamp(*max, out);
        }
        self.encode(out);
    }

    /// Decodes what `encode_stored` wrote.
    pub fn decode_stored(bytes: &[u8], coder: &Coder) -> Result<Window, String> {
        match coder {
            Coder::LengthPrefix(_) => {
                Ok(Window::decode(bytes.get(8..).ok_or("truncated window")?, coder)?.with_max(read_timestamp(bytes)?))
            }
            _ => Window::decode(bytes, coder),
        }
    }

    /// The last timestamp inside the window.
    pub fn max_timestamp(&self) -> Millis {
        match self {
            Window::Global => GLOBAL_WINDOW_MAX,
            Window::Interval { end, .. } => end.saturating_sub(1),
            Window::Opaque { max, .. } => *max,
        }
    }
}

/// Pane timing (Beam's PaneInfo.Timing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    Early = 0,
    OnTime = 1,
    Late = 2,
}

/// Encodes a pane: `index` counts every firing of the window, `on_time_index`
/// the non-early ones (Beam's nonspeculative index).
pub fn encode_pane(is_first: bool, is_last: bool, timing: Timing, index: u64, on_time_index: u64, out: &mut Vec<u8>) {
    let low = (is_first as u8) | ((is_last as u8) << 1) | ((timing as u8) << 2);
    if index == 0 && on_time_index == 0 {
        out.push(low);
    } else if timing == Timing::Early || index == on_time_index {
        out.push(low | (1 << 4));
        encode_varint(index, out);
    } else {
        out.push(low | (2 << 4));
        encode_varint(index, out);
        encode_varint(on_time_index, out);
    }
}

/// Writes a windowed value with one window; `value` is already encoded.
pub fn encode(timestamp: Millis, window: &Window, pane: &[u8], value: &[u8], out: &mut Vec<u8>) {
    encode_timestamp(timestamp, out);
    out.extend_from_slice(&1u32.to_be_bytes());
    window.encode(out);
    out.extend_from_slice(pane);
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::coders::{encode_global_windowed_value, PANE_NO_FIRING};

    #[test]
    fn a_value_cut_anywhere_has_no_extent_and_a_whole_one_has_its_key() {
        let element = Coder::Kv(Box::new(Coder::Bytes), Box::new(Coder::Varint));
        let (mut buf, mut ends) = (Vec::new(), vec![0]);
        let keys = [&b"a"[..], b"longer key", b""];
        for (i, key) in keys.iter().enumerate() {
            let mut kv = Vec::new();
            encode_varint(key.len() as u64, &mut kv);
            kv.extend_from_slice(key);
            encode_varint(300 * i as u64, &mut kv);
            let w = Window::Interval { start: 0, end: 10 };
            encode(i as i64, &w, &[PANE_NO_FIRING], &kv, &mut buf);
            ends.push(buf.len());
        }
        for (i, pair) in ends.windows(2).enumerate() {
            let (start, end) = (pair[0], pair[1]);
            let e = extent(&buf[start..], &Coder::IntervalWindow, &element).unwrap();
            assert_eq!(e.len, end - start);
            assert_eq!(&buf[start..][e.key.clone()][1..], keys[i], "the key's bytes, after its length");
            for cut in start..end {
                assert!(extent(&buf[start..cut], &Coder::IntervalWindow, &element).is_err(), "cut at {cut}");
            }
        }
    }

    #[test]
    fn a_global_window_element_splits() {
        let mut buf = Vec::new();
        encode_global_windowed_value(42, &[7, 8], &mut buf);
        let h = split(&buf, &Coder::GlobalWindow).unwrap();
        assert_eq!(h.timestamp, 42);
        assert_eq!(h.windows, Windows::One(&[]));
        assert_eq!(h.windows.len(), 1);
        assert_eq!(h.pane, &[PANE_NO_FIRING]);
        assert_eq!(&buf[h.value_offset..], &[7, 8]);
    }

    #[test]
    fn several_windows_split_in_their_order() {
        let (a, b) = (Window::Interval { start: 0, end: 10 }, Window::Interval { start: 10, end: 20 });
        let (mut one, mut other) = (Vec::new(), Vec::new());
        encode(5, &a, &[PANE_NO_FIRING], &[1], &mut one);
        encode(5, &b, &[PANE_NO_FIRING], &[1], &mut other);
        let (wa, wb) = (split(&one, &Coder::IntervalWindow).unwrap().windows[0], split(&other, &Coder::IntervalWindow).unwrap().windows[0]);
        // `one` with `b`'s window after its own and a count of two.
        let mut buf = one[..8].to_vec();
        buf.extend(2i32.to_be_bytes());
        buf.extend(wa);
        buf.extend(wb);
        buf.extend(&one[12 + wa.len()..]);
        let h = split(&buf, &Coder::IntervalWindow).unwrap();
        assert_eq!(h.windows.len(), 2);
        assert_eq!(&buf[h.value_offset..], &[1]);
        let borrowed: Vec<Window> = h.windows.iter().map(|w| Window::decode(w, &Coder::IntervalWindow).unwrap()).collect();
        let owned: Vec<Window> = h.windows.into_iter().map(|w| Window::decode(w, &Coder::IntervalWindow).unwrap()).collect();
        assert_eq!((borrowed, owned), (vec![a.clone(), b.clone()], vec![a, b]));
    }

    #[test]
    fn interval_windows_round_trip_and_panes_with_indexes_are_skipped() {
        let w = Window::Interval { start: -10, end: 20 };
        let mut pane = Vec::new();
        encode_pane(false, false, Timing::Late, 3, 1, &mut pane);
        assert_eq!(pane.len(), 3);
        let mut buf = Vec::new();
        encode(5, &w, &pane, &[1], &mut buf);
        let h = split(&buf, &Coder::IntervalWindow).unwrap();
        assert_eq!(Window::decode(h.windows[0], &Coder::IntervalWindow).unwrap(), w);
        assert_eq!(h.pane, pane.as_slice());
        assert_eq!(&buf[h.value_offset..], &[1]);
        assert_eq!(w.max_timestamp(), 19);
        assert_eq!(Window::Global.max_timestamp(), GLOBAL_WINDOW_MAX);
    }

    #[test]
    fn opaque_windows_travel_length_prefixed_and_keep_their_end_in_state() {
        let coder = Coder::LengthPrefix(Box::new(Coder::Opaque("beam:coder:pickled_python:v1".into())));
        let w = Window::Opaque { max: 9_999, bytes: b"red".as_slice().into() };
        let mut buf = Vec::new();
        encode(5, &w, &[0x0f], &[1], &mut buf);
        let h = split(&buf, &coder).unwrap();
        assert_eq!(h.windows[0], b"\x03red");
        assert_eq!(window_body(h.windows[0], &coder), b"red");
        let decoded = Window::decode(h.windows[0], &coder).unwrap();
        assert_eq!(decoded.max_timestamp(), UNRESOLVED_MAX, "the wire does not say when it ends");
        assert_eq!(decoded.clone().with_max(9_999), w);
        let mut stored = Vec::new();
        w.encode_stored(&mut stored);
        assert_eq!(Window::decode_stored(&stored, &coder).unwrap(), w);
        assert!(Window::decode_stored(&stored[..4], &coder).is_err());
        let iw = Window::Interval { start: 0, end: 10 };
        let mut plain = Vec::new();
        iw.encode_stored(&mut plain);
        assert_eq!(Window::decode_stored(&plain, &Coder::IntervalWindow).unwrap(), iw);
    }

    #[test]
    fn the_first_on_time_pane_is_one_byte() {
        let mut pane = Vec::new();
        encode_pane(true, true, Timing::OnTime, 0, 0, &mut pane);
        assert_eq!(pane, [0x07]);
    }

    #[test]
    fn negative_timestamps_decode() {
        let mut buf = Vec::new();
        encode_global_windowed_value(-5, &[], &mut buf);
        assert_eq!(split(&buf, &Coder::GlobalWindow).unwrap().timestamp, -5);
    }

    #[test]
    fn a_value_claiming_2_pow_31_windows_is_refused_before_allocating() {
        let mut buf = vec![0x80, 0, 0, 0, 0, 0, 0, 0];
        buf.extend_from_slice(&i32::MAX.to_be_bytes());
        buf.push(PANE_NO_FIRING);
        assert!(split(&buf, &Coder::GlobalWindow).unwrap_err().contains("claims"));
        assert!(split(&buf, &Coder::IntervalWindow).unwrap_err().contains("claims"));
        // Found in review: a value may be in the global window once, not
        // once per byte left (each copy of it is stored).
        let mut two = vec![0x80, 0, 0, 0, 0, 0, 0, 0];
        two.extend_from_slice(&2i32.to_be_bytes());
        two.extend_from_slice(&[PANE_NO_FIRING, 0, 0, 0, 0]);
        assert!(split(&two, &Coder::GlobalWindow).unwrap_err().contains("claims"));
    }

    #[test]
    fn the_last_timestamp_of_a_window_ending_at_the_earliest_time_does_not_overflow() {
        // Found by the changelog fuzz target: `end - 1` overflowed.
        let w = Window::Interval { start: i64::MIN, end: i64::MIN };
        assert_eq!(w.max_timestamp(), i64::MIN);
    }

    #[test]
    fn an_interval_window_starting_before_time_began_is_an_error() {
        // Found by the coder fuzz target: end - span overflowed.
        let mut buf = Vec::new();
        encode_timestamp(i64::MIN + 5, &mut buf);
        encode_varint(10, &mut buf);
        assert!(Window::decode(&buf, &Coder::IntervalWindow).is_err());
    }
}
