//! State that grows by appending (a GroupByKey's pane, a bag of user state)
//! kept as a series of chunk entries: no changelog record exceeds Kafka's
//! record size limit (1 MB by default) however large the value grows, and a
//! commit writes only what was appended since the previous one instead of
//! rewriting the whole value.
//!
//! Chunk `i` of a value is the entry `chunk_key(i)`; its bytes are a slice of
//! the value, so a value is its chunks concatenated in order. A value changed
//! other than by appending is rewritten from chunk 0 and the chunks past its
//! new end become tombstones.
use std::collections::BTreeMap;

/// The largest chunk written: well under Kafka's default 1 MB record limit,
/// leaving room for the key and the record's overhead.
pub const CHUNK_BYTES: usize = 256 * 1024;

pub type Entry = (Vec<u8>, Option<Vec<u8>>);

/// What of a value its chunk entries hold.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Chunk entries that exist, `0..chunks`.
    pub chunks: u32,
    /// How much of the value they hold: its first `len` units (bytes of a
    /// bag, values of a pane). Zero once the value changed other than by
    /// appending, which rewrites it.
    pub len: usize,
}

impl Stored {
    /// The value no longer starts with what the chunks hold.
    pub fn invalidate(&mut self) {
        self.len = 0;
    }
}

/// Writes `appended`, the encoding of the value's units from `stored.len`
/// on, as chunk entries; `len` is the value's new length in units. Appends
/// after the existing chunks, or rewrites from chunk 0 when nothing is
/// stored, deleting chunks past the new end.
pub fn write(stored: &mut Stored, len: usize, appended: &[u8], chunk_key: impl Fn(u32) -> Vec<u8>, out: &mut Vec<Entry>) {
    let rewrite = stored.len == 0;
    let first = if rewrite { 0 } else { stored.chunks };
    let mut next = first;
    for piece in appended.chunks(CHUNK_BYTES) {
        out.push((chunk_key(next), Some(piece.to_vec())));
        next += 1;
    }
    if rewrite {
        out.extend((next..stored.chunks).map(|stale| (chunk_key(stale), None)));
    }
    stored.chunks = next;
    stored.len = len;
}

/// Tombstones for every chunk of a deleted value.
pub fn delete(stored: Stored, chunk_key: impl Fn(u32) -> Vec<u8>, out: &mut Vec<Entry>) {
    out.extend((0..stored.chunks).map(|i| (chunk_key(i), None)));
}

/// A value restored from its chunk entries.
#[derive(Debug, PartialEq, Eq)]
pub struct Assembled {
    pub bytes: Vec<u8>,
    /// Chunk entries that exist, counting any past a gap.
    pub chunks: u32,
    /// No gap: only an interrupted at-least-once write leaves one. The bytes
    /// then end at the gap and the value must be rewritten, which deletes
    /// what lies past it.
    pub complete: bool,
}

/// Chunk indexes past this many beyond the chunks that exist are corrupt:
/// only an interrupted write leaves gaps, and a write is far smaller.
const MAX_CHUNK_GAP: u32 = 1 << 16;

pub fn assemble(chunks: BTreeMap<u32, Vec<u8>>) -> Result<Assembled, String> {
    let count = chunks.keys().next_back().map_or(0, |&last| u64::from(last) + 1);
    if count - chunks.len() as u64 > u64::from(MAX_CHUNK_GAP) {
        return Err(format!("a corrupt changelog: chunk {} of a value of {} chunks", count - 1, chunks.len()));
    }
    let count = count as u32; // at most MAX_CHUNK_GAP past a u32 count of chunks
    let complete = count as usize == chunks.len();
    let mut bytes = Vec::new();
    for (expected, (i, piece)) in chunks.into_iter().enumerate() {
        if i as usize != expected {
            break;
        }
        bytes.extend_from_slice(&piece);
    }
    Ok(Assembled { bytes, chunks: count, complete })
}

/// Splits a chunk key's trailing sequence number off.
pub fn split_seq(key: &[u8]) -> Result<(&[u8], u32), String> {
    if key.len() < 4 {
        return Err("truncated state chunk key".into());
    }
    let (head, seq) = key.split_at(key.len() - 4);
    Ok((head, u32::from_be_bytes(seq.try_into().expect("four bytes"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> Vec<u8> {
        let mut k = b"k".to_vec();
        k.extend_from_slice(&i.to_be_bytes());
        k
    }

    fn apply(store: &mut BTreeMap<u32, Vec<u8>>, out: Vec<Entry>) {
        for (k, v) in out {
            let (_, seq) = split_seq(&k).unwrap();
            match v {
                Some(v) => store.insert(seq, v),
                None => store.remove(&seq),
            };
        }
    }

    #[test]
    fn appends_write_only_the_new_bytes_and_no_chunk_is_too_large() {
        let mut stored = Stored::default();
        let mut store = BTreeMap::new();
        let mut value = Vec::new();
        for round in 0..5u8 {
            let add = vec![round; CHUNK_BYTES + 10];
            let mut out = Vec::new();
            write(&mut stored, value.len() + add.len(), &add, key, &mut out);
            assert_eq!(out.len(), 2, "only the appended bytes are written");
            assert!(out.iter().all(|(_, v)| v.as_ref().unwrap().len() <= CHUNK_BYTES));
            value.extend_from_slice(&add);
            apply(&mut store, out);
            assert_eq!(assemble(store.clone()).unwrap(), Assembled { bytes: value.clone(), chunks: stored.chunks, complete: true });
        }
    }

    #[test]
    fn a_rewrite_deletes_the_chunks_past_its_end_and_a_delete_all_of_them() {
        let mut stored = Stored::default();
        let mut store = BTreeMap::new();
        let big = vec![1u8; 3 * CHUNK_BYTES];
        let mut out = Vec::new();
        write(&mut stored, big.len(), &big, key, &mut out);
        apply(&mut store, out);
        stored.invalidate();
        let mut out = Vec::new();
        write(&mut stored, 3, b"abc", key, &mut out);
        assert_eq!(out.iter().filter(|(_, v)| v.is_none()).count(), 2);
        apply(&mut store, out);
        assert_eq!(assemble(store.clone()).unwrap(), Assembled { bytes: b"abc".to_vec(), chunks: 1, complete: true });
        let mut out = Vec::new();
        delete(stored, key, &mut out);
        apply(&mut store, out);
        assert!(store.is_empty());
    }

    #[test]
    fn a_gap_ends_the_value_but_counts_its_chunks() {
        let chunks = BTreeMap::from([(0, b"ab".to_vec()), (2, b"zz".to_vec())]);
        assert_eq!(assemble(chunks).unwrap(), Assembled { bytes: b"ab".to_vec(), chunks: 3, complete: false });
        assert!(split_seq(&[1, 2]).is_err());
    }

    #[test]
    fn a_chunk_index_far_past_the_chunks_is_corruption_not_an_allocation() {
        // Found by the changelog fuzz target: 4 billion tombstones were due.
        for last in [u32::MAX - 1, u32::MAX] {
            let chunks = BTreeMap::from([(0, b"a".to_vec()), (last, b"b".to_vec())]);
            assert!(assemble(chunks).unwrap_err().contains("corrupt changelog"));
        }
    }
}
