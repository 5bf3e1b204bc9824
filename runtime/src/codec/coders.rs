//! The few encodings the runner writes or reads itself (Beam's standard coders,
//! nested context as on the Fn API data channel).
use crate::codec::timestamp::Millis;

/// Beam's varint: unsigned LEB128 of the two's-complement value.
pub fn encode_varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Decodes a varint at the start of `buf`; returns the value and its length.
pub fn decode_varint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, b) in buf.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Beam's timestamp encoding: big-endian millis with the sign bit flipped, so
/// byte order equals time order.
pub fn encode_timestamp(millis: Millis, out: &mut Vec<u8>) {
    out.extend_from_slice(&((millis as u64) ^ (1u64 << 63)).to_be_bytes());
}

/// Pane info of an element that was never fired by a trigger (`NO_FIRING`):
/// first, last, timing UNKNOWN, index 0 — one byte.
pub const PANE_NO_FIRING: u8 = 0x0F;

/// A `WindowedValue` in the global window with `value` already encoded
/// (nested), as `beam:coder:windowed_value:v1` writes it.
pub fn encode_global_windowed_value(timestamp: Millis, encoded_value: &[u8], out: &mut Vec<u8>) {
    encode_timestamp(timestamp, out);
    out.extend_from_slice(&1u32.to_be_bytes()); // one window; the global window encodes as nothing
    out.push(PANE_NO_FIRING);
    out.extend_from_slice(encoded_value);
}

/// Bytes in the nested context: a varint length, then the bytes.
pub fn encode_nested_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// The element Impulse emits: empty bytes at the minimum timestamp in the
/// global window.
pub fn impulse_element() -> Vec<u8> {
    let mut value = Vec::new();
    encode_nested_bytes(&[], &mut value);
    let mut out = Vec::new();
    encode_global_windowed_value(crate::codec::timestamp::MIN_TIMESTAMP, &value, &mut out);
    out
}

/// Reads fixed-size and varint fields off a buffer, failing (not panicking)
/// when it ends early.
pub struct ByteReader<'a> {
    pub buf: &'a [u8],
    pub at: usize,
}

impl<'a> ByteReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        ByteReader { buf, at: 0 }
    }
    pub fn varint(&mut self) -> Result<u64, String> {
        let (v, n) = decode_varint(self.buf.get(self.at..).unwrap_or_default()).ok_or("data ends early")?;
        self.at += n;
        Ok(v)
    }
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or("data ends early")?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    pub fn i64(&mut self) -> Result<i64, String> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_started_past_its_end_fails_instead_of_panicking() {
        // Found by the changelog fuzz target: a chunk key with an empty head.
        let mut r = ByteReader { buf: &[], at: 1 };
        assert!(r.varint().is_err());
        assert!(r.take(0).is_err());
    }

    #[test]
    fn varints_round_trip() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut buf = Vec::new();
            encode_varint(v, &mut buf);
            assert_eq!(decode_varint(&buf), Some((v, buf.len())));
        }
        let mut buf = Vec::new();
        encode_varint(300, &mut buf);
        assert_eq!(buf, [0xac, 0x02]);
        assert_eq!(decode_varint(&[0x80]), None);
    }

    #[test]
    fn timestamps_sort_bytewise() {
        let enc = |m| {
            let mut b = Vec::new();
            encode_timestamp(m, &mut b);
            b
        };
        assert!(enc(-1) < enc(0));
        assert!(enc(0) < enc(1));
        assert_eq!(enc(0), [0x80, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn impulse_element_layout() {
        let e = impulse_element();
        assert_eq!(e.len(), 8 + 4 + 1 + 1);
        assert_eq!(&e[8..12], &[0, 0, 0, 1]);
        assert_eq!(e[12], PANE_NO_FIRING);
        assert_eq!(e[13], 0, "empty bytes, length-prefixed");
    }
}
