//! The keys of a task's durable state in its sub-topology's changelog: one
//! entry for the task's input watermark, and the entries of each GroupByKey
//! (`gbk::state`), told apart by the topic the GroupByKey reads.
use crate::codec::coders::{encode_varint, ByteReader};

const WATERMARK: u64 = 0;
const GROUP_BY_KEY: u64 = 1;
const HELD: u64 = 2;
const USER_STATE: u64 = 3;
const TIMER: u64 = 4;
const DEFERRED: u64 = 5;
const USER_STATE_CHUNK: u64 = 6;
const USER_CELL_CHUNK: u64 = 7;

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
    /// Chunk `seq` of a cell of user state, the cell encoded grouped by
    /// window (`StateCell::encode_grouped`): the layout a task reads as it
    /// uses its cells, by prefix (a cell, a map, a window).
    UserCellChunk {
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

/// The key of chunk `seq` of a cell encoded by `StateCell::encode_grouped`.
pub fn user_cell_chunk_key(cell: &[u8], seq: u32) -> Vec<u8> {
    let mut out = user_cells_prefix(cell);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// The prefix of the chunk keys of every cell whose grouped encoding
/// starts with `cell_prefix` (empty: every cell of the layout).
pub fn user_cells_prefix(cell_prefix: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(cell_prefix.len() + 5);
    encode_varint(USER_CELL_CHUNK, &mut out);
    out.extend_from_slice(cell_prefix);
    out
}

/// The prefixes of the entries a task reads whole when it starts: its
/// watermark, GroupByKeys, held and deferred elements, timers.
pub fn read_whole_prefixes() -> Vec<Vec<u8>> {
    kind_prefixes(&[WATERMARK, GROUP_BY_KEY, HELD, TIMER, DEFERRED])
}

/// The prefixes of user state in the layouts before cells were grouped by
/// window: a store holding any is read whole (and rewritten as it commits).
pub fn older_user_state_prefixes() -> Vec<Vec<u8>> {
    kind_prefixes(&[USER_STATE, USER_STATE_CHUNK])
}

/// The key prefix of each store kind.
fn kind_prefixes(kinds: &[u64]) -> Vec<Vec<u8>> {
    kinds
        .iter()
        .map(|kind| {
            let mut out = Vec::new();
            encode_varint(*kind, &mut out);
            out
        })
        .collect()
}

/// The smallest key after every key that starts with `prefix` (`None`:
/// there is none, the prefix is all 0xFF).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|b| *b != 0xFF)?;
    let mut out = prefix[..=last].to_vec();
    out[last] += 1;
    Some(out)
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
        USER_CELL_CHUNK => {
            let end = key.len().checked_sub(4).filter(|end| *end >= r.at).ok_or("bad user state chunk key")?;
            let raw: [u8; 4] = key[end..].try_into().map_err(|_| "bad user state chunk key")?;
            Ok(Store::UserCellChunk { cell: &key[r.at..end], seq: u32::from_be_bytes(raw) })
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
        assert_eq!(split(&user_cell_chunk_key(&[4, 2], 9)).unwrap(), Store::UserCellChunk { cell: &[4, 2], seq: 9 });
        assert!(user_cell_chunk_key(&[4, 2], 9).starts_with(&user_cells_prefix(&[4])));
        assert!(split(&user_cell_chunk_key(&[], 9)[..4]).is_err());
        assert!(split(&[9]).is_err());
        assert!(split(&k[..4]).is_err());
    }

    #[test]
    fn a_prefix_ends_past_every_key_it_starts() {
        assert_eq!(prefix_end(&[7, 1]), Some(vec![7, 2]));
        assert_eq!(prefix_end(&[7, 0xFF, 0xFF]), Some(vec![8]));
        assert_eq!(prefix_end(&[0xFF]), None);
        let end = prefix_end(&[3, 0xFE, 0xFF]).unwrap();
        assert_eq!(end, vec![3, 0xFF]);
        assert!(end.as_slice() > [3, 0xFE, 0xFF, 0xFF, 0xFF].as_slice());
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
