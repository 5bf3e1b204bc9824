//! Side inputs: what a ParDo reads besides its main input. Each task keeps the
//! whole side-input PCollection (broadcast to every task of the consuming
//! sub-topology), per window, and serves the SDK's State API reads from it:
//! `beam:side_input:iterable:v1` (every element of a window) and
//! `beam:side_input:multimap:v1` (the values of one key, or the keys).
//!
//! A main-input element may only run once the side windows it maps to are
//! complete (the side input's watermark passed their end), so a pipeline
//! gives the same result in streaming as in batch. The mapping is Beam's
//! default for the side input's WindowFn (the SDK applies the same one): the
//! global window for global windowing, else the window containing the end of
//! the main window.
use std::collections::{BTreeMap, HashMap};

use crate::codec::coder::Coder;
use crate::codec::timestamp::{Millis, Watermark, GLOBAL_WINDOW_MAX};
use crate::codec::windowed::{self, Window};
use crate::pb;
use crate::state::state_api::Elements;

pub const ITERABLE: &str = "beam:side_input:iterable:v1";
pub const MULTIMAP: &str = "beam:side_input:multimap:v1";
const GLOBAL_WINDOWS: &str = "beam:window_fn:global_windows:v1";
const FIXED_WINDOWS: &str = "beam:window_fn:fixed_windows:v1";
const SLIDING_WINDOWS: &str = "beam:window_fn:sliding_windows:v1";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Iterable,
    Multimap,
}

impl Access {
    pub fn from_urn(urn: &str) -> Option<Access> {
        match urn {
            ITERABLE => Some(Access::Iterable),
            MULTIMAP => Some(Access::Multimap),
            _ => None,
        }
    }
}

/// The side input's windowing, as far as the runner needs it to know when a
/// side window is complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SideWindowing {
    Global,
    Fixed {
        size: Millis,
        offset: Millis,
    },
    Sliding {
        size: Millis,
        period: Millis,
        offset: Millis,
    },
    /// A WindowFn the runner cannot evaluate: wait for the whole side input.
    Other,
}

fn millis(d: Option<&prost_types::Duration>) -> Millis {
    d.map_or(0, |d| d.seconds * 1000 + d.nanos as i64 / 1_000_000)
}

fn instant(t: Option<&prost_types::Timestamp>) -> Millis {
    t.map_or(0, |t| t.seconds * 1000 + t.nanos as i64 / 1_000_000)
}

impl SideWindowing {
    pub fn from_window_fn(spec: &pb::FunctionSpec) -> SideWindowing {
        use prost::Message;
        match spec.urn.as_str() {
            GLOBAL_WINDOWS => SideWindowing::Global,
            FIXED_WINDOWS => match pb::FixedWindowsPayload::decode(spec.payload.as_slice()) {
                Ok(p) if millis(p.size.as_ref()) > 0 => {
                    SideWindowing::Fixed { size: millis(p.size.as_ref()), offset: instant(p.offset.as_ref()) }
                }
                _ => SideWindowing::Other,
            },
            SLIDING_WINDOWS => match pb::SlidingWindowsPayload::decode(spec.payload.as_slice()) {
                Ok(p) if millis(p.size.as_ref()) > 0 && millis(p.period.as_ref()) > 0 => SideWindowing::Sliding {
                    size: millis(p.size.as_ref()),
                    period: millis(p.period.as_ref()),
                    offset: instant(p.offset.as_ref()),
                },
                _ => SideWindowing::Other,
            },
            _ => SideWindowing::Other,
        }
    }

    /// The last timestamp of the side window that `main` maps to: the side
    /// input is ready for `main` once its watermark is past it.
    pub fn side_window_max(&self, main: &Window) -> Millis {
        let ts = main.max_timestamp();
        match *self {
            SideWindowing::Global | SideWindowing::Other => GLOBAL_WINDOW_MAX,
            SideWindowing::Fixed { size, offset } => {
                let start = ts - (ts - offset).rem_euclid(size);
                start + size - 1
            }
            // The earliest-starting window that contains `ts` (the last one
            // Python's SlidingWindows.assign lists).
            SideWindowing::Sliding { size, period, offset } => {
                let latest = ts - (ts - offset).rem_euclid(period);
                let steps = (latest - (ts - size + 1)).div_euclid(period);
                let earliest = latest - steps * period;
                earliest + size - 1
            }
        }
    }

    /// Whether a side-input watermark makes the side window of `main` complete.
    pub fn ready(&self, main: &Window, side_watermark: Watermark) -> bool {
        if *self == SideWindowing::Other {
            return side_watermark == Watermark::PosInf;
        }
        match side_watermark {
            Watermark::NegInf => false,
            Watermark::PosInf => true,
            Watermark::At(w) => w > self.side_window_max(main),
        }
    }
}

#[derive(Debug, Default)]
struct WindowData {
    /// Every element, encoded (an iterable read's answer).
    elements: Elements,
    /// For multimap access: each key's encoded values.
    by_key: BTreeMap<Vec<u8>, Elements>,
}

static NO_ELEMENTS: Elements = Elements::EMPTY;

/// One side input's contents in one task, per encoded window.
#[derive(Debug)]
pub struct SideInputData {
    access: Access,
    window_coder: Coder,
    /// The key and value coders of a multimap side input.
    kv: Option<(Coder, Coder)>,
    windows: BTreeMap<Vec<u8>, WindowData>,
    /// This instance (one per task incarnation) and how many elements it
    /// holds: together the SDK's cache token, which changes with every add.
    instance: u64,
    version: u64,
}

/// Numbers the side inputs of this process, so no two share a cache token.
static INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl SideInputData {
    /// `element` is the side input's wire element coder (KV for multimap).
    pub fn new(access: Access, element: &Coder, window_coder: Coder) -> Result<SideInputData, String> {
        let kv = match (access, element) {
            (Access::Iterable, _) => None,
            (Access::Multimap, Coder::Kv(k, v)) if k.is_readable() && v.is_readable() => Some((*k.clone(), *v.clone())),
            (Access::Multimap, other) => return Err(format!("a multimap side input must be key/value coded, found {other:?}")),
        };
        let instance = INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(SideInputData { access, window_coder, kv, windows: BTreeMap::new(), instance, version: 0 })
    }

    /// Adds one encoded windowed value (one entry per window it is in).
    pub fn add(&mut self, windowed_value: &[u8]) -> Result<(), String> {
        let h = windowed::split(windowed_value, &self.window_coder)?;
        let element = &windowed_value[h.value_offset..];
        let split_kv = match &self.kv {
            Some((k, v)) => {
                let kn = k.skip(element)?;
                let vn = v.skip(&element[kn..])?;
                Some((&element[..kn], &element[kn..kn + vn]))
            }
            None => None,
        };
        self.version += 1;
        for w in &h.windows {
            // Keyed as the SDK names windows in its reads: the window coder's
            // own encoding (an opaque window travels length-prefixed).
            let data = self.windows.entry(windowed::window_body(w, &self.window_coder).to_vec()).or_default();
            data.elements.push(element);
            if let Some((key, value)) = split_kv {
                data.by_key.entry(key.to_vec()).or_default().push(value);
            }
        }
        Ok(())
    }

    pub fn access(&self) -> Access {
        self.access
    }

    /// The token under which the SDK may cache what it read of this side
    /// input across bundles: it names these exact contents, so any new
    /// element gives a new token. A bundle that reads after an add it did
    /// not start with caches newer data under its older token, which no
    /// later bundle can hold again (tokens only move forward).
    pub fn cache_token(&self) -> Vec<u8> {
        format!("side-input/{}/{}/{}", std::process::id(), self.instance, self.version).into_bytes()
    }

    /// Every element in `window` (an encoded window).
    pub fn iterable(&self, window: &[u8]) -> &Elements {
        self.windows.get(window).map_or(&NO_ELEMENTS, |d| &d.elements)
    }

    /// The values of `key` (encoded with the key coder) in `window`.
    pub fn values(&self, window: &[u8], key: &[u8]) -> &Elements {
        self.windows.get(window).and_then(|d| d.by_key.get(key)).unwrap_or(&NO_ELEMENTS)
    }

    /// Every key in `window`, encoded.
    pub fn keys(&self, window: &[u8]) -> Elements {
        let mut keys = Elements::default();
        for k in self.windows.get(window).into_iter().flat_map(|d| d.by_key.keys()) {
            keys.push(k);
        }
        keys
    }
}

/// Which side window main windows need, as the SDK told (for side inputs
/// whose WindowFn, or whose main input's windows, the runner cannot map
/// itself): per side input, each main window's side window's last
/// timestamp; `None` while the SDK is asked.
#[derive(Debug, Default)]
pub struct SideMaps {
    by_side: HashMap<usize, HashMap<Window, Option<Millis>>>,
}

impl SideMaps {
    /// Notes that side input `side` needs the mapping of `main`; true if
    /// nobody asked for it yet (the caller asks).
    pub fn want(&mut self, side: usize, main: &Window) -> bool {
        let known = self.by_side.entry(side).or_default();
        if known.contains_key(main) {
            return false;
        }
        known.insert(main.clone(), None);
        true
    }

    /// Notes the mappings `windows` need for each side input of `sides`;
    /// returns those nobody asked for yet (the caller asks them).
    pub fn want_all<'w>(&mut self, sides: &[usize], windows: impl IntoIterator<Item = &'w Window>) -> Vec<(usize, Window)> {
        let mut to_ask = Vec::new();
        for w in windows {
            for &side in sides {
                if self.want(side, w) {
                    to_ask.push((side, w.clone()));
                }
            }
        }
        to_ask
    }

    /// Whether side input `side` is complete for `main`: through the SDK's
    /// mapping if it has one (`mapped`), else as `windowing` says.
    pub fn side_ready(&self, side: usize, mapped: bool, windowing: &SideWindowing, main: &Window, side_watermark: Watermark) -> bool {
        if mapped {
            self.ready(side, main, side_watermark)
        } else {
            windowing.ready(main, side_watermark)
        }
    }

    /// What the SDK told: `main` needs the side window ending at `side_max`.
    pub fn learn(&mut self, side: usize, main: Window, side_max: Millis) {
        self.by_side.entry(side).or_default().insert(main, Some(side_max));
    }

    /// Forgets the mappings of side input `side` onto side windows its
    /// watermark passed, but those of main windows `in_use` (by held
    /// elements): only a late element of such a window asks again.
    pub fn forget_ended(&mut self, side: usize, side_watermark: Watermark, in_use: impl Fn(&Window) -> bool) {
        if let Some(known) = self.by_side.get_mut(&side) {
            known.retain(|w, max| max.is_none_or(|m| Watermark::At(m) >= side_watermark) || in_use(w));
        }
    }

    /// Forgets asked mappings that got no answer (so they are asked again).
    pub fn forget_pending(&mut self) {
        for known in self.by_side.values_mut() {
            known.retain(|_, max| max.is_some());
        }
    }

    /// Whether side input `side` is complete for `main`: past the end of the
    /// side window it maps to, or, before the SDK told which, whole.
    pub fn ready(&self, side: usize, main: &Window, side_watermark: Watermark) -> bool {
        match (self.by_side.get(&side).and_then(|k| k.get(main)).copied().flatten(), side_watermark) {
            (_, Watermark::PosInf) => true,
            (Some(max), Watermark::At(w)) => w > max,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::coders::{encode_nested_bytes, encode_varint};
    use crate::codec::windowed::encode as encode_wv;

    fn kv(key: &str, v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        encode_nested_bytes(key.as_bytes(), &mut out);
        encode_varint(v, &mut out);
        out
    }

    fn in_window(w: Window, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_wv(w.max_timestamp(), &w, &[0x0f], value, &mut out);
        out
    }

    fn window_bytes(w: Window) -> Vec<u8> {
        let mut out = Vec::new();
        w.encode(&mut out);
        out
    }

    #[test]
    fn side_windows_the_sdk_maps_are_ready_past_their_end_and_unknown_ones_when_whole() {
        let mut maps = SideMaps::default();
        let main = Window::Opaque { max: 9, bytes: b"red".as_slice().into() };
        assert!(maps.want(0, &main), "asked once");
        assert!(!maps.want(0, &main));
        assert!(!maps.ready(0, &main, Watermark::At(1 << 40)), "unknown yet: only the whole side input will do");
        assert!(maps.ready(0, &main, Watermark::PosInf));
        maps.learn(0, main.clone(), 19);
        assert!(!maps.ready(0, &main, Watermark::At(19)));
        assert!(maps.ready(0, &main, Watermark::At(20)));
        assert!(!maps.ready(1, &main, Watermark::At(20)), "per side input");
        assert!(maps.want(1, &main));
        maps.forget_pending();
        assert!(maps.want(1, &main), "asked again after a failed answer");
        assert!(!maps.want(0, &main), "known mappings stay");
        let (a, b) = (Window::Interval { start: 0, end: 10 }, Window::Interval { start: 10, end: 20 });
        assert_eq!(maps.want_all(&[0, 2], [&a, &b, &a]).len(), 4, "each window once per side input");
        assert!(maps.side_ready(5, false, &SideWindowing::Global, &a, Watermark::PosInf), "not mapped: by its windowing");
        assert!(!maps.side_ready(0, true, &SideWindowing::Global, &a, Watermark::At(1 << 40)), "mapped, not answered yet");
        maps.forget_ended(0, Watermark::At(19), |_| false);
        assert!(!maps.want(0, &main), "its side window has not ended");
        maps.forget_ended(0, Watermark::At(20), |w| w == &main);
        assert!(!maps.want(0, &main), "a held element still needs it");
        maps.forget_ended(0, Watermark::At(20), |_| false);
        assert!(maps.want(0, &main), "forgotten once its side window ended");
    }

    #[test]
    fn fixed_and_sliding_side_windows_follow_the_end_of_the_main_window() {
        let fixed = SideWindowing::Fixed { size: 10, offset: 0 };
        assert_eq!(fixed.side_window_max(&Window::Interval { start: 0, end: 5 }), 9);
        assert_eq!(fixed.side_window_max(&Window::Interval { start: 5, end: 15 }), 19);
        assert_eq!(fixed.side_window_max(&Window::Interval { start: -5, end: -1 }), -1);
        // Windows of size 10 every 5: [0,10) and [5,15) contain 9; the earliest starts at 0.
        let sliding = SideWindowing::Sliding { size: 10, period: 5, offset: 0 };
        assert_eq!(sliding.side_window_max(&Window::Interval { start: 0, end: 10 }), 9);
        assert_eq!(sliding.side_window_max(&Window::Interval { start: 5, end: 11 }), 14);
        assert_eq!(SideWindowing::Global.side_window_max(&Window::Interval { start: 0, end: 1 }), GLOBAL_WINDOW_MAX);
    }

    #[test]
    fn a_side_window_is_ready_once_the_watermark_passed_it() {
        let fixed = SideWindowing::Fixed { size: 10, offset: 0 };
        let main = Window::Interval { start: 0, end: 5 };
        assert!(!fixed.ready(&main, Watermark::NegInf));
        assert!(!fixed.ready(&main, Watermark::At(9)));
        assert!(fixed.ready(&main, Watermark::At(10)));
        assert!(!SideWindowing::Global.ready(&Window::Global, Watermark::At(GLOBAL_WINDOW_MAX)));
        assert!(SideWindowing::Global.ready(&Window::Global, Watermark::PosInf));
        assert!(!SideWindowing::Other.ready(&main, Watermark::At(1 << 50)));
        assert!(SideWindowing::Other.ready(&main, Watermark::PosInf));
    }

    #[test]
    fn iterable_data_is_kept_per_window() {
        let mut d = SideInputData::new(Access::Iterable, &Coder::Varint, Coder::IntervalWindow).unwrap();
        let (a, b) = (Window::Interval { start: 0, end: 10 }, Window::Interval { start: 10, end: 20 });
        d.add(&in_window(a.clone(), &[1])).unwrap();
        d.add(&in_window(b.clone(), &[2])).unwrap();
        d.add(&in_window(a.clone(), &[3])).unwrap();
        assert_eq!(d.iterable(&window_bytes(a)).bytes(), &[1, 3]);
        assert_eq!(d.iterable(&window_bytes(b)).bytes(), &[2]);
        assert!(d.iterable(&window_bytes(Window::Interval { start: 20, end: 30 })).bytes().is_empty());
        assert!(d.add(&[1, 2]).is_err());
    }

    #[test]
    fn the_cache_token_changes_with_every_element_and_between_instances() {
        let mut a = SideInputData::new(Access::Iterable, &Coder::Varint, Coder::GlobalWindow).unwrap();
        let b = SideInputData::new(Access::Iterable, &Coder::Varint, Coder::GlobalWindow).unwrap();
        let empty = a.cache_token();
        assert_ne!(empty, b.cache_token(), "another task's side input");
        assert_eq!(a.cache_token(), empty, "reads keep it");
        let mut one = Vec::new();
        encode_varint(1, &mut one);
        a.add(&in_window(Window::Global, &one)).unwrap();
        let after = a.cache_token();
        assert_ne!(after, empty, "new data");
        a.add(&in_window(Window::Global, &one)).unwrap();
        assert_ne!(a.cache_token(), after, "the same value again is new data too");
    }

    #[test]
    fn multimap_data_is_kept_per_key() {
        let coder = Coder::Kv(Box::new(Coder::StringUtf8), Box::new(Coder::Varint));
        let mut d = SideInputData::new(Access::Multimap, &coder, Coder::GlobalWindow).unwrap();
        for (k, v) in [("a", 1), ("b", 2), ("a", 3)] {
            d.add(&in_window(Window::Global, &kv(k, v))).unwrap();
        }
        let mut key_a = Vec::new();
        encode_nested_bytes(b"a", &mut key_a);
        assert_eq!(d.values(&[], &key_a).bytes(), &[1, 3]);
        let mut keys = key_a.clone();
        encode_nested_bytes(b"b", &mut keys);
        assert_eq!(d.keys(&[]).bytes(), keys);
        assert!(SideInputData::new(Access::Multimap, &Coder::Varint, Coder::GlobalWindow).is_err());
    }
}
