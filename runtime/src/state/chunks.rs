//! State that grows by appending (a GroupByKey's pane, a bag of user state)
//! kept as a series of chunk entries: no changelog record exceeds Kafka's
//! record size limit (1 MB by default) however large the value grows, and a
//! commit writes only what was appended since the previous one instead of
//! rewriting the whole value.
//!
//! A value's chunks live in one of two slots (A, B), at sequence numbers
//! `slot | index`; a value is its current slot's chunks concatenated in
//! order. Each chunk starts with the generation of the value it belongs to
//! and whether it ends a write. Appending adds chunks to the current slot; a
//! value changed other than by appending is written whole under the next
//! generation, into the other slot (in place when it is a single chunk: one
//! record lands whole or not at all), and only then are the old chunks
//! deleted.
//!
//! So a write cut short (at-least-once has no transactions: a crash or a
//! stop can leave any prefix of a commit's records in the changelog) never
//! mixes two versions of a value: a restore takes the newest generation whose
//! chunks run from index 0 to a chunk that ends a write, and deletes every
//! other chunk. A rewrite cut short restores the old value, an append cut
//! short the value before it. Chunks of the layout before slots (sequence =
//! index, no header) still restore; the next write of their value moves it
//! into a slot.
use std::collections::BTreeMap;

use crate::state::changelog::Entry;

/// The largest chunk written: well under Kafka's default 1 MB record limit,
/// leaving room for the key and the record's overhead.
pub const CHUNK_BYTES: usize = 256 * 1024;

/// A chunk's header: the generation (u32, big-endian), then flags.
pub const HEADER: usize = 5;
/// The chunk ends a write: what precedes it in its slot is a whole value.
const ENDS_WRITE: u8 = 1;

/// A sequence number in a slot (older ones are bare indexes).
const SLOTTED: u32 = 1 << 31;
const SLOT_B: u32 = 1 << 30;
const INDEX: u32 = SLOT_B - 1;

/// Where a value's chunks live.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// The layout before slots (or nothing written yet).
    #[default]
    Bare,
    A,
    B,
}

impl Slot {
    fn from_seq(seq: u32) -> Slot {
        match (seq & SLOTTED != 0, seq & SLOT_B != 0) {
            (false, _) => Slot::Bare,
            (true, false) => Slot::A,
            (true, true) => Slot::B,
        }
    }

    fn seq(self, index: u32) -> u32 {
        match self {
            Slot::Bare => index,
            Slot::A => SLOTTED | index,
            Slot::B => SLOTTED | SLOT_B | index,
        }
    }

    fn other(self) -> Slot {
        if self == Slot::A {
            Slot::B
        } else {
            Slot::A
        }
    }
}

/// What of a value its chunk entries hold.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Chunk entries of the current slot, `0..chunks`.
    pub chunks: u32,
    /// How much of the value they hold: its first `len` units (bytes of a
    /// bag, values of a pane). Zero once the value changed other than by
    /// appending, which rewrites it.
    pub len: usize,
    slot: Slot,
    generation: u32,
    /// Sequence numbers of chunks to delete at the next write (left by a
    /// write cut short, or by an older value of the same key).
    stale: Vec<u32>,
}

impl Stored {
    /// The value no longer starts with what the chunks hold.
    pub fn invalidate(&mut self) {
        self.len = 0;
    }

    /// Whether chunk entries exist for it (to write or to delete).
    pub fn is_empty(&self) -> bool {
        self.chunks == 0 && self.stale.is_empty()
    }

    /// Takes over the chunks of `other` (an older value of the same key,
    /// removed) to delete them: its place, when this holds none yet, so the
    /// next rewrite moves past it.
    pub fn absorb(&mut self, other: Stored) {
        if self.is_empty() {
            *self = Stored { len: 0, ..other };
            return;
        }
        self.stale.extend((0..other.chunks).map(|i| other.slot.seq(i)));
        self.stale.extend(other.stale);
    }

    fn locations(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.chunks).map(|i| self.slot.seq(i)).chain(self.stale.iter().copied())
    }
}

/// Writes `appended`, the encoding of the value's units from `stored.len`
/// on, as chunk entries; `len` is the value's new length in units. Appends
/// after the existing chunks; when nothing is held (`stored.len == 0`),
/// writes the value whole under the next generation (into the other slot
/// unless it is one chunk), then deletes the old chunks.
pub fn write(stored: &mut Stored, len: usize, appended: &[u8], chunk_key: impl Fn(u32) -> Vec<u8>, out: &mut Vec<Entry>) {
    let mut pieces: Vec<&[u8]> = appended.chunks(CHUNK_BYTES - HEADER).collect();
    let rewrite = stored.len == 0 || stored.slot == Slot::Bare;
    if pieces.is_empty() && rewrite {
        // An empty value is written as one empty chunk, so it restores as
        // a value (a map key whose values encode to nothing), not as none.
        pieces.push(&[]);
    }
    let old = rewrite.then(|| {
        // One record is written whole or not at all: a value of one chunk
        // replaces chunk 0 in place (its old successors, of an older
        // generation, no longer follow it); a longer one goes to the other slot.
        let slot = if pieces.len() <= 1 && stored.slot != Slot::Bare { stored.slot } else { stored.slot.other() };
        let next = Stored { slot, generation: stored.generation.wrapping_add(1), ..Stored::default() };
        std::mem::replace(stored, next)
    });
    let first = stored.chunks;
    for (n, piece) in pieces.iter().enumerate() {
        let mut value = Vec::with_capacity(HEADER + piece.len());
        value.extend_from_slice(&stored.generation.to_be_bytes());
        value.push(if n + 1 == pieces.len() { ENDS_WRITE } else { 0 });
        value.extend_from_slice(piece);
        out.push((chunk_key(stored.slot.seq(first + n as u32)), Some(value)));
    }
    stored.chunks = first + pieces.len() as u32;
    stored.len = len;
    // After the new chunks: a write cut short keeps the old value.
    let written = first..stored.chunks;
    let stale: Vec<u32> = old.iter().flat_map(Stored::locations).chain(std::mem::take(&mut stored.stale)).collect();
    for seq in stale {
        let overwritten = seq & SLOTTED != 0 && Slot::from_seq(seq) == stored.slot && written.contains(&(seq & INDEX));
        if !overwritten {
            out.push((chunk_key(seq), None));
        }
    }
}

/// Tombstones for every chunk of a deleted value.
pub fn delete(stored: Stored, chunk_key: impl Fn(u32) -> Vec<u8>, out: &mut Vec<Entry>) {
    out.extend(stored.locations().map(|seq| (chunk_key(seq), None)));
}

/// A value restored from its chunk entries.
#[derive(Debug, PartialEq, Eq)]
pub struct Assembled {
    pub bytes: Vec<u8>,
    /// Where its chunks are (`len` is left to the caller, in its units,
    /// when `appendable`; else zero, so the next write rewrites it).
    pub stored: Stored,
    /// Nothing to fix: no chunk of an interrupted write or an older value
    /// is left (the caller writes the value again otherwise, which deletes
    /// them).
    pub complete: bool,
    /// Later writes may append to its chunks.
    pub appendable: bool,
}

/// Bare chunk indexes past this many beyond the chunks that exist are
/// corrupt: only an interrupted write leaves gaps, and a write is far smaller.
const MAX_CHUNK_GAP: u32 = 1 << 16;

/// The whole value a key's chunk entries (by sequence number) hold.
pub fn assemble(chunks: BTreeMap<u32, Vec<u8>>) -> Result<Assembled, String> {
    let mut bare = BTreeMap::new();
    let mut slots = [BTreeMap::new(), BTreeMap::new()];
    for (seq, piece) in chunks {
        match Slot::from_seq(seq) {
            Slot::Bare => bare.insert(seq, piece),
            Slot::A => slots[0].insert(seq & INDEX, piece),
            Slot::B => slots[1].insert(seq & INDEX, piece),
        };
    }
    let mut best: Option<(Slot, u32, u32)> = None; // slot, generation, chunks
    for (slot, pieces) in [(Slot::A, &slots[0]), (Slot::B, &slots[1])] {
        let Some((generation, chunks)) = whole_run(pieces)? else { continue };
        let newer = best.is_none_or(|(_, g, _)| (generation.wrapping_sub(g) as i32) > 0);
        if newer {
            best = Some((slot, generation, chunks));
        }
    }
    let every = |except: Option<(Slot, u32)>| -> Vec<u32> {
        let slotted = [(Slot::A, &slots[0]), (Slot::B, &slots[1])].into_iter().flat_map(|(slot, pieces)| {
            pieces.keys().filter(move |i| except.is_none_or(|(s, n)| s != slot || **i >= n)).map(move |i| slot.seq(*i))
        });
        bare.keys().copied().chain(slotted).collect()
    };
    if let Some((slot, generation, chunks)) = best {
        let pieces = if slot == Slot::A { &slots[0] } else { &slots[1] };
        let bytes = (0..chunks).flat_map(|i| pieces[&i][HEADER..].iter().copied()).collect();
        let stale = every(Some((slot, chunks)));
        let complete = stale.is_empty();
        return Ok(Assembled { bytes, stored: Stored { chunks, len: 0, slot, generation, stale }, complete, appendable: complete });
    }
    // The layout before slots: the chunks up to the first gap.
    let count = bare.keys().next_back().map_or(0, |&last| u64::from(last) + 1);
    if count - bare.len() as u64 > u64::from(MAX_CHUNK_GAP) {
        return Err(format!("a corrupt changelog: chunk {} of a value of {} chunks", count - 1, bare.len()));
    }
    let count = count as u32; // at most MAX_CHUNK_GAP past a u32 count of chunks
    let whole = count as usize == bare.len();
    let mut bytes = Vec::new();
    for (expected, (i, piece)) in bare.iter().enumerate() {
        if *i as usize != expected {
            break;
        }
        bytes.extend_from_slice(piece);
    }
    let stale = every(None).into_iter().filter(|seq| Slot::from_seq(*seq) != Slot::Bare).collect::<Vec<_>>();
    let complete = whole && stale.is_empty();
    Ok(Assembled { bytes, stored: Stored { chunks: count, len: 0, slot: Slot::Bare, generation: 0, stale }, complete, appendable: false })
}

/// The generation and chunk count of the whole value a slot holds: its
/// chunks from index 0 of chunk 0's generation, up to the last that ends a
/// write; `None` if no such chunk exists.
fn whole_run(pieces: &BTreeMap<u32, Vec<u8>>) -> Result<Option<(u32, u32)>, String> {
    let header = |piece: &Vec<u8>| -> Result<(u32, bool), String> {
        if piece.len() < HEADER {
            return Err("a corrupt changelog: a state chunk shorter than its header".into());
        }
        Ok((u32::from_be_bytes(piece[..4].try_into().expect("four bytes")), piece[4] & ENDS_WRITE != 0))
    };
    let Some(first) = pieces.get(&0) else { return Ok(None) };
    let generation = header(first)?.0;
    let mut end = 0;
    let mut i = 0;
    while let Some(piece) = pieces.get(&i) {
        let (g, ends) = header(piece)?;
        if g != generation {
            break;
        }
        i += 1;
        if ends {
            end = i;
        }
    }
    Ok((end > 0).then_some((generation, end)))
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

    fn restored(store: &BTreeMap<u32, Vec<u8>>) -> (Vec<u8>, Stored, bool) {
        let a = assemble(store.clone()).unwrap();
        let mut stored = a.stored;
        if a.appendable {
            stored.len = a.bytes.len();
        }
        (a.bytes, stored, a.complete)
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
            assert_eq!(restored(&store), (value.clone(), stored.clone(), true));
        }
    }

    #[test]
    fn a_rewrite_deletes_the_old_chunks_and_a_delete_all_of_them() {
        let mut stored = Stored::default();
        let mut store = BTreeMap::new();
        let big = vec![1u8; 3 * CHUNK_BYTES];
        let mut out = Vec::new();
        write(&mut stored, big.len(), &big, key, &mut out);
        apply(&mut store, out);
        assert_eq!(store.len(), 4, "a header per chunk: 3 chunks' bytes take 4");
        stored.invalidate();
        let mut out = Vec::new();
        write(&mut stored, 3, b"abc", key, &mut out);
        assert_eq!(out.iter().filter(|(_, v)| v.is_none()).count(), 3, "chunk 0 is replaced in place");
        assert!(out[0].1.is_some(), "the new value first, then the old one goes");
        apply(&mut store, out);
        assert_eq!(restored(&store), (b"abc".to_vec(), stored.clone(), true));
        let mut out = Vec::new();
        delete(stored, key, &mut out);
        apply(&mut store, out);
        assert!(store.is_empty());
    }

    /// The review's mixed chunks: at-least-once may land any prefix of a
    /// commit's records. Whatever the cut, a restore gives the value before
    /// the write or after it, never a mix; the next write deletes what the
    /// cut left.
    #[test]
    fn a_write_cut_short_restores_the_old_value_or_the_new_never_a_mix() {
        let old: Vec<u8> = (0..3 * CHUNK_BYTES).map(|i| (i % 251) as u8).collect();
        let longer: Vec<u8> = old.iter().copied().chain(vec![9u8; 2 * CHUNK_BYTES]).collect();
        let cases: [(&str, bool, Vec<u8>); 3] =
            [("rewrite", true, vec![7u8; 2 * CHUNK_BYTES]), ("short rewrite", true, b"xyz".to_vec()), ("append", false, longer)];
        for (what, rewrite, new) in cases {
            let mut stored = Stored::default();
            let mut store = BTreeMap::new();
            let mut out = Vec::new();
            write(&mut stored, old.len(), &old, key, &mut out);
            apply(&mut store, out);
            let mut changes = Vec::new();
            if rewrite {
                stored.invalidate();
                write(&mut stored, new.len(), &new, key, &mut changes);
            } else {
                write(&mut stored, new.len(), &new[old.len()..], key, &mut changes);
            }
            for cut in 0..=changes.len() {
                let mut landed = store.clone();
                apply(&mut landed, changes[..cut].to_vec());
                let (bytes, mut after, complete) = restored(&landed);
                assert!(bytes == old || bytes == new, "{what}, cut after {cut} of {}: a mix of {} bytes", changes.len(), bytes.len());
                if cut == changes.len() {
                    assert!(bytes == new && complete, "{what}: the whole write");
                }
                // The next commit writes the restored value again if the cut
                // left chunks behind: then only it remains.
                if !complete {
                    let mut out = Vec::new();
                    write(&mut after, bytes.len(), &bytes, key, &mut out);
                    apply(&mut landed, out);
                    assert_eq!(restored(&landed), (bytes, after, true), "{what}, cut {cut}: cleaned up");
                }
            }
        }
    }

    #[test]
    fn chunks_of_the_layout_before_slots_restore_and_move_to_a_slot() {
        let bare = BTreeMap::from([(0, b"ab".to_vec()), (1, b"cd".to_vec())]);
        let a = assemble(bare.clone()).unwrap();
        assert_eq!((a.bytes.as_slice(), a.complete, a.appendable), (&b"abcd"[..], true, false));
        let (mut stored, mut store) = (a.stored, bare);
        let mut out = Vec::new();
        write(&mut stored, 5, b"abcde", key, &mut out);
        apply(&mut store, out);
        assert!(store.keys().all(|seq| seq & SLOTTED != 0), "{store:?}");
        assert_eq!(restored(&store).0, b"abcde");
    }

    #[test]
    fn a_gap_in_the_older_layout_ends_the_value_and_is_deleted() {
        let chunks = BTreeMap::from([(0, b"ab".to_vec()), (2, b"zz".to_vec())]);
        let a = assemble(chunks.clone()).unwrap();
        assert_eq!((a.bytes.as_slice(), a.complete), (&b"ab"[..], false));
        let (mut stored, mut store) = (a.stored, chunks);
        let mut out = Vec::new();
        write(&mut stored, 2, b"ab", key, &mut out);
        apply(&mut store, out);
        assert_eq!(store.len(), 1);
        assert!(split_seq(&[1, 2]).is_err());
    }

    #[test]
    fn a_chunk_index_far_past_the_chunks_is_corruption_not_an_allocation() {
        // Found by the changelog fuzz target: 4 billion tombstones were due.
        for last in [SLOTTED - 2, SLOTTED - 1] {
            let chunks = BTreeMap::from([(0, b"a".to_vec()), (last, b"b".to_vec())]);
            assert!(assemble(chunks).unwrap_err().contains("corrupt changelog"));
        }
        // Far slotted indexes cost only their own entries.
        let chunks = BTreeMap::from([(u32::MAX, vec![0; HEADER]), (SLOTTED | 5, vec![0; HEADER])]);
        let a = assemble(chunks).unwrap();
        assert!(a.bytes.is_empty() && !a.complete && a.stored.stale.len() == 2);
        assert!(assemble(BTreeMap::from([(SLOTTED, vec![1])])).unwrap_err().contains("header"));
    }
}
