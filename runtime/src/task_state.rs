//! The keys of a task's durable state in its sub-topology's changelog: one
//! entry for the task's input watermark, and the entries of each GroupByKey
//! (`gbk_state`), told apart by the topic the GroupByKey reads.
use crate::coders::{encode_varint, ByteReader};

const WATERMARK: u64 = 0;
const GROUP_BY_KEY: u64 = 1;
const HELD: u64 = 2;
const USER_STATE: u64 = 3;
const TIMER: u64 = 4;
const DEFERRED: u64 = 5;
const USER_STATE_CHUNK: u64 = 6;

/// Which store an entry belongs to.
#[derive(Debug, PartialEq, Eq)]
pub enum Store<'a> {
    Watermark,
    /// The GroupByKey reading `topic`, and the entry's key inside it.
    GroupByKey {
        topic: &'a str,
        key: &'a [u8],
    },
    /// A main-input element waiting for side inputs (`held`), by sequence.
    Held(u64),
    /// A cell of a stateful ParDo's user state (`user_state::StateCell`),
    /// whole: the older layout.
    UserState(&'a [u8]),
    /// Chunk `seq` of a cell of user state (`chunks`).
    UserStateChunk {
        cell: &'a [u8],
        seq: u32,
    },
    /// A pending timer (`timers::TimerId`).
    Timer(&'a [u8]),
    /// An element a split bundle did not process (`held` encoding), by sequence.
    Deferred(u64),
}

pub fn watermark_key() -> Vec<u8> {
    let mut out = Vec::new();
    encode_varint(WATERMARK, &mut out);
    out
}

pub fn group_by_key_key(topic: &str, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_varint(GROUP_BY_KEY, &mut out);
    encode_varint(topic.len() as u64, &mut out);
    out.extend_from_slice(topic.as_bytes());
    out.extend_from_slice(key);
    out
}

pub fn held_key(seq: u64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_varint(HELD, &mut out);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

pub fn deferred_key(seq: u64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_varint(DEFERRED, &mut out);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

pub fn user_state_key(cell: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_varint(USER_STATE, &mut out);
    out.extend_from_slice(cell);
    out
}

pub fn user_state_chunk_key(cell: &[u8], seq: u32) -> Vec<u8> {
    let mut out = Vec::new();
    encode_varint(USER_STATE_CHUNK, &mut out);
    encode_varint(cell.len() as u64, &mut out);
    out.extend_from_slice(cell);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

pub fn timer_key(id: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_varint(TIMER, &mut out);
    out.extend_from_slice(id);
    out
}

pub fn split(key: &[u8]) -> Result<Store<'_>, String> {
    let mut r = ByteReader::new(key);
    match r.varint()? {
        WATERMARK => Ok(Store::Watermark),
        GROUP_BY_KEY => {
            let len = r.varint()? as usize;
            let topic = std::str::from_utf8(r.take(len)?).map_err(|_| "bad topic in a state key")?;
            Ok(Store::GroupByKey { topic, key: &key[r.at..] })
        }
        HELD => {
            let raw: [u8; 8] = r.take(8)?.try_into().map_err(|_| "bad held element key")?;
            Ok(Store::Held(u64::from_be_bytes(raw)))
        }
        DEFERRED => {
            let raw: [u8; 8] = r.take(8)?.try_into().map_err(|_| "bad deferred element key")?;
            Ok(Store::Deferred(u64::from_be_bytes(raw)))
        }
        USER_STATE => Ok(Store::UserState(&key[r.at..])),
        USER_STATE_CHUNK => {
            let len = r.varint()? as usize;
            let cell = r.take(len)?;
            let raw: [u8; 4] = r.take(4)?.try_into().map_err(|_| "bad user state chunk key")?;
            Ok(Store::UserStateChunk { cell, seq: u32::from_be_bytes(raw) })
        }
        TIMER => Ok(Store::Timer(&key[r.at..])),
        other => Err(format!("unknown state store {other}")),
    }
}

/// What a restore reads of a changelog partition holding offsets
/// `low..high`, for a store current up to `from` (0: an empty store):
/// `Ok(None)` nothing, `Ok(Some(start))` from `start` on (0: the first
/// record there is). A `from` outside the partition is an error: the topic
/// was recreated, and the store is rebuilt from the start.
pub fn changelog_to_read(from: i64, low: i64, high: i64) -> Result<Option<i64>, String> {
    if from > high || (from > 0 && from < low) {
        return Err(format!("the store's checkpoint {from} lies outside the changelog partition ({low}..{high})"));
    }
    Ok((high > from.max(low)).then_some(from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_back_into_their_store() {
        assert_eq!(split(&watermark_key()).unwrap(), Store::Watermark);
        let k = group_by_key_key("__beam_a_shuffle_0", &[1, 2, 3]);
        assert_eq!(split(&k).unwrap(), Store::GroupByKey { topic: "__beam_a_shuffle_0", key: &[1, 2, 3] });
        assert_eq!(split(&held_key(7)).unwrap(), Store::Held(7));
        assert_eq!(split(&deferred_key(7)).unwrap(), Store::Deferred(7));
        assert!(split(&deferred_key(7)[..5]).is_err());
        assert_eq!(split(&user_state_key(&[4, 2])).unwrap(), Store::UserState(&[4, 2]));
        assert_eq!(split(&user_state_chunk_key(&[4, 2], 9)).unwrap(), Store::UserStateChunk { cell: &[4, 2], seq: 9 });
        assert!(split(&user_state_chunk_key(&[4, 2], 9)[..5]).is_err());
        assert!(split(&[9]).is_err());
        assert!(split(&k[..4]).is_err());
    }

    #[test]
    fn a_restore_reads_what_lies_past_the_store_checkpoint() {
        // An empty store reads an empty partition not at all, a full one from its start.
        assert_eq!(changelog_to_read(0, 0, 0), Ok(None));
        assert_eq!(changelog_to_read(0, 0, 5), Ok(Some(0)));
        // Compaction or retention moved the start past offset 0.
        assert_eq!(changelog_to_read(0, 3, 3), Ok(None));
        assert_eq!(changelog_to_read(0, 3, 5), Ok(Some(0)));
        // A store current to 5 reads from 5 on, or nothing at the end.
        assert_eq!(changelog_to_read(5, 0, 5), Ok(None));
        assert_eq!(changelog_to_read(5, 0, 9), Ok(Some(5)));
        // A checkpoint past the end, or before a moved start: the topic was recreated.
        assert!(changelog_to_read(6, 0, 5).is_err());
        assert!(changelog_to_read(2, 3, 9).is_err());
    }
}
