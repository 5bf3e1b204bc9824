//! OnWindowExpiration (`on_window_expiration_timer_family_spec`): a stateful
//! ParDo's callback for each key and window it saw, once the input
//! watermark passed the window's expiry (its end plus allowed lateness).
//! The runner, not the SDK, sets the callback's timer: when an element of
//! the key and window reaches the stage, and when a bundle writes the key's
//! state in the window (a timer callback may, without an element).
//! `timers::Timers::arm_expiry` keeps one per key and window.
use crate::codec::coder::Coder;
use crate::codec::coders::PANE_NO_FIRING;
use crate::codec::timestamp::Watermark;
use crate::codec::windowed::{self, Window, Windows};
use crate::state::timers::TimerTimes;

/// The callback's timer in `window`: it fires at the window's expiry and
/// holds the output watermark at the window's end (or at the input
/// watermark, when that is past it: a watermark never goes back), so what
/// the callback outputs at the window's end is not late. `None` for a
/// window the runner cannot read the end of.
pub fn timer(window: &[u8], window_coder: &Coder, allowed_lateness: i64, input: Watermark) -> Option<TimerTimes> {
    let end = Window::decode(window, window_coder).ok()?.max_timestamp();
    let hold = match input {
        Watermark::At(w) => end.max(w),
        _ => end,
    };
    Some(TimerTimes { fire: end.saturating_add(allowed_lateness), hold, pane: vec![PANE_NO_FIRING] })
}

/// The key (as encoded, the way the SDK encodes timer keys) and windows of
/// a keyed element reaching the stage.
pub fn key_and_windows<'a>(element: &'a [u8], window_coder: &Coder, key_coder: &Coder) -> Result<(&'a [u8], Windows<'a>), String> {
    let h = windowed::split(element, window_coder)?;
    let value = &element[h.value_offset..];
    let n = key_coder.skip(value).map_err(|e| format!("an element's key: {e}"))?;
    Ok((&value[..n], h.windows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::coders::{encode_nested_bytes, encode_varint};

    #[test]
    fn the_timer_fires_at_expiry_and_holds_at_the_window_end_or_the_watermark() {
        let w = Window::Interval { start: 0, end: 10 };
        let mut bytes = Vec::new();
        w.encode(&mut bytes);
        let t = timer(&bytes, &Coder::IntervalWindow, 5, Watermark::At(3)).unwrap();
        assert_eq!((t.fire, t.hold, t.pane.as_slice()), (14, 9, &[PANE_NO_FIRING][..]));
        assert_eq!(timer(&bytes, &Coder::IntervalWindow, 5, Watermark::At(12)).unwrap().hold, 12, "late data: never behind the watermark");
        let global = timer(&[], &Coder::GlobalWindow, i64::MAX, Watermark::NegInf).unwrap();
        assert_eq!(global.fire, i64::MAX, "saturates");
        assert!(timer(&[1], &Coder::IntervalWindow, 0, Watermark::NegInf).is_none());
    }

    #[test]
    fn an_element_s_key_and_windows_are_read() {
        let mut kv = Vec::new();
        encode_nested_bytes(b"key", &mut kv);
        encode_varint(7, &mut kv);
        let mut element = Vec::new();
        windowed::encode(4, &Window::Global, &[PANE_NO_FIRING], &kv, &mut element);
        let (key, windows) = key_and_windows(&element, &Coder::GlobalWindow, &Coder::Bytes).unwrap();
        assert_eq!(key, b"\x03key");
        assert_eq!(windows.len(), 1);
        assert!(key_and_windows(&element[..element.len() - 3], &Coder::GlobalWindow, &Coder::Bytes).is_err(), "truncated");
    }
}
