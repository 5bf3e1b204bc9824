//! The header of a windowed value (`beam:coder:windowed_value:v1`):
//! timestamp, windows and pane, split off the element after it. Part of
//! reading coders, since skipping a windowed value means skipping its
//! windows; `crate::codec::windowed` builds on it.
use super::Coder;
use crate::codec::coders::decode_varint;
use crate::codec::timestamp::Millis;

/// Where the parts of one encoded windowed value are.
#[derive(Debug, PartialEq, Eq)]
pub struct Header<'a> {
    pub timestamp: Millis,
    /// Each window's encoding.
    pub windows: Windows<'a>,
    pub pane: &'a [u8],
    /// Offset of the element's value within the buffer.
    pub value_offset: usize,
}

/// The encoded windows of one value. Nearly every value has one: it is held
/// without an allocation (this split runs for every element the runner
/// writes or groups).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Windows<'a> {
    One(&'a [u8]),
    Many(Vec<&'a [u8]>),
}

impl<'a> std::ops::Deref for Windows<'a> {
    type Target = [&'a [u8]];

    fn deref(&self) -> &[&'a [u8]] {
        match self {
            Windows::One(w) => std::slice::from_ref(w),
            Windows::Many(ws) => ws,
        }
    }
}

impl<'a> IntoIterator for Windows<'a> {
    type Item = &'a [u8];
    type IntoIter = std::iter::Chain<std::option::IntoIter<&'a [u8]>, std::vec::IntoIter<&'a [u8]>>;

    fn into_iter(self) -> Self::IntoIter {
        match self {
            Windows::One(w) => Some(w).into_iter().chain(Vec::new()),
            Windows::Many(ws) => None.into_iter().chain(ws),
        }
    }
}

impl<'b, 'a> IntoIterator for &'b Windows<'a> {
    type Item = &'b &'a [u8];
    type IntoIter = std::slice::Iter<'b, &'a [u8]>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

pub(crate) fn read_timestamp(buf: &[u8]) -> Result<Millis, String> {
    let raw: [u8; 8] = buf.get(..8).ok_or("truncated timestamp")?.try_into().expect("8 bytes");
    Ok((u64::from_be_bytes(raw) ^ (1u64 << 63)) as i64)
}

/// Splits the header of the windowed value at the start of `buf`.
pub fn split<'a>(buf: &'a [u8], window: &Coder) -> Result<Header<'a>, String> {
    let timestamp = read_timestamp(buf)?;
    let mut at = 8;
    let count = i32::from_be_bytes(buf.get(at..at + 4).ok_or("truncated window count")?.try_into().expect("4 bytes"));
    at += 4;
    if count < 0 {
        return Err(format!("bad window count {count}"));
    }
    super::check_count(window, count as u64, buf.len() - at)?;
    let windows = if count == 1 {
        let n = window.skip(&buf[at..])?;
        at += n;
        Windows::One(&buf[at - n..at])
    } else {
        let mut windows = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let n = window.skip(&buf[at..])?;
            windows.push(&buf[at..at + n]);
            at += n;
        }
        Windows::Many(windows)
    };
    let pane_start = at;
    let first = *buf.get(at).ok_or("truncated pane")?;
    at += 1;
    for _ in 0..(first >> 4) {
        // ONE_INDEX (1) and TWO_INDICES (2) carry that many varints.
        let (_, n) = decode_varint(&buf[at..]).ok_or("truncated pane index")?;
        at += n;
    }
    Ok(Header { timestamp, windows, pane: &buf[pane_start..at], value_offset: at })
}
