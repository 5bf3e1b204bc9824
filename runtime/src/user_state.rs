//! User state of stateful ParDos (`beam:user_state:bag:v1`, which Python's
//! bag, combining and read-modify-write state all use): per (transform,
//! state id, key, window) the encoded values appended so far. Ordered-list
//! state keeps its entries sorted; multimap state (Go's and Java's map and
//! set state) has one cell per map key. Bundles read
//! and change it through the State API; the task persists what changed in
//! its commit cycle, so state and input offsets commit together.
//!
//! A cell is stored as chunk entries (`chunks`): a bag grows by appends, and
//! a commit writes only what was appended, however large the bag. A cell of
//! the older layout is one whole entry; it still restores and is rewritten
//! as chunks when it next changes.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::chunks::{self, Entry, Stored};
use crate::coder::Coder;
use crate::coders::{encode_varint, ByteReader};
use crate::multimap_state::StateName;
use crate::task_state;

pub const BAG_PROTOCOL: &str = "beam:user_state:bag:v1";
pub const ORDERED_LIST_PROTOCOL: &str = "beam:user_state:ordered_list:v1";
pub const MULTIMAP_PROTOCOL: &str = "beam:user_state:multimap:v1";

/// Splits ordered-list entries (the SDK's `KV<varint sort key,
/// length-prefixed value>`, concatenated) into (sort key, entry bytes).
fn entries(buf: &[u8]) -> Result<Vec<(i64, &[u8])>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let mut r = ByteReader::new(&buf[at..]);
        let key = r.varint()? as i64;
        let n = r.varint()? as usize;
        r.take(n)?;
        out.push((key, &buf[at..at + r.at]));
        at += r.at;
    }
    Ok(out)
}

/// Which cell of user state: the key and window are the SDK's exact bytes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StateCell {
    pub transform: String,
    pub state_id: String,
    pub key: Vec<u8>,
    pub window: Vec<u8>,
    /// Multimap state: the map key (encoded by the SDK) this cell holds the
    /// values of. The cells of one map sort together, in map-key byte order.
    pub map_key: Option<Vec<u8>>,
}

impl StateCell {
    /// The cell as one key of the task's store.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let map_key = self.map_key.as_deref();
        for part in [self.transform.as_bytes(), self.state_id.as_bytes(), &self.key, &self.window].into_iter().chain(map_key) {
            encode_varint(part.len() as u64, &mut out);
            out.extend_from_slice(part);
        }
        out
    }

    pub fn decode(buf: &[u8]) -> Result<StateCell, String> {
        let mut r = ByteReader::new(buf);
        let part = |r: &mut ByteReader| -> Result<Vec<u8>, String> {
            let n = r.varint()? as usize;
            Ok(r.take(n)?.to_vec())
        };
        let text = |b: Vec<u8>| String::from_utf8(b).map_err(|_| "bad name in a user state key".to_string());
        let (transform, state_id) = (text(part(&mut r)?)?, text(part(&mut r)?)?);
        let (key, window) = (part(&mut r)?, part(&mut r)?);
        let map_key = if r.at < buf.len() { Some(part(&mut r)?) } else { None };
        Ok(StateCell { transform, state_id, key, window, map_key })
    }
}

/// Tells apart the user state of every task incarnation in this process.
static INCARNATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The bags of one task, with what changed since the last commit.
#[derive(Debug)]
pub struct UserState {
    /// This instance (one per task incarnation) and how often the runner
    /// changed it behind the SDK's back: together the SDK's cache token.
    instance: u64,
    generation: u64,
    bags: BTreeMap<StateCell, Vec<u8>>,
    dirty: BTreeSet<StateCell>,
    /// What of each cell its chunk entries hold (also of cleared cells
    /// until their chunks are deleted).
    stored: BTreeMap<StateCell, Stored>,
    /// Cells restored from a whole entry of the older layout.
    legacy: BTreeSet<StateCell>,
    /// Chunks read back while restoring, assembled by `finish_restore`.
    restoring: BTreeMap<StateCell, BTreeMap<u32, Vec<u8>>>,
    /// The value coders of map and multimap states, to count values.
    map_values: HashMap<StateName, Coder>,
}

impl Default for UserState {
    fn default() -> Self {
        UserState {
            instance: INCARNATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            generation: 0,
            bags: BTreeMap::new(),
            dirty: BTreeSet::new(),
            stored: BTreeMap::new(),
            legacy: BTreeSet::new(),
            restoring: BTreeMap::new(),
            map_values: HashMap::new(),
        }
    }
}

fn chunk_key(cell: &StateCell) -> impl Fn(u32) -> Vec<u8> {
    let cell = cell.encode();
    move |i| task_state::user_state_chunk_key(&cell, i)
}

impl UserState {
    pub fn get(&self, cell: &StateCell) -> &[u8] {
        self.bags.get(cell).map_or(&[], |v| v.as_slice())
    }

    pub fn append(&mut self, cell: StateCell, data: &[u8]) {
        self.bags.entry(cell.clone()).or_default().extend_from_slice(data);
        self.dirty.insert(cell);
    }

    pub fn clear(&mut self, cell: StateCell) {
        self.bags.remove(&cell);
        self.rewritten(cell);
    }

    /// The cell changed other than by appending: it is written anew.
    fn rewritten(&mut self, cell: StateCell) {
        if let Some(s) = self.stored.get_mut(&cell) {
            s.invalidate();
        }
        self.dirty.insert(cell);
    }

    /// Ordered-list state (`beam:user_state:ordered_list:v1`): the entries
    /// with sort keys in `[start, end)`, in sort-key order.
    pub fn ordered_get(&self, cell: &StateCell, start: i64, end: i64) -> Result<Vec<u8>, String> {
        Ok(entries(self.get(cell))?.into_iter().filter(|(k, _)| (start..end).contains(k)).flat_map(|(_, e)| e.to_vec()).collect())
    }

    /// Adds entries, keeping the cell sorted by sort key (stable for equal keys).
    pub fn ordered_append(&mut self, cell: StateCell, data: &[u8]) -> Result<(), String> {
        let mut all: Vec<(i64, Vec<u8>)> = entries(self.get(&cell))?.into_iter().map(|(k, e)| (k, e.to_vec())).collect();
        all.extend(entries(data)?.into_iter().map(|(k, e)| (k, e.to_vec())));
        all.sort_by_key(|(k, _)| *k);
        self.bags.insert(cell.clone(), all.into_iter().flat_map(|(_, e)| e).collect());
        self.rewritten(cell);
        Ok(())
    }

    /// Removes the entries with sort keys in `[start, end)`.
    pub fn ordered_clear(&mut self, cell: StateCell, start: i64, end: i64) -> Result<(), String> {
        let kept: Vec<u8> =
            entries(self.get(&cell))?.into_iter().filter(|(k, _)| !(start..end).contains(k)).flat_map(|(_, e)| e.to_vec()).collect();
        if kept.is_empty() {
            self.bags.remove(&cell);
        } else {
            self.bags.insert(cell.clone(), kept);
        }
        self.rewritten(cell);
        Ok(())
    }

    /// Multimap state: the cells of `map`'s keys (`map` names the map; its
    /// own map key is ignored).
    fn map_cells<'a>(&'a self, map: &'a StateCell) -> impl Iterator<Item = &'a StateCell> + 'a {
        // `None` sorts before every map key: the map's cells start at `Some([])`.
        let first = StateCell { map_key: Some(Vec::new()), ..map.clone() };
        let same = |c: &StateCell| c.transform == map.transform && c.state_id == map.state_id && c.key == map.key && c.window == map.window;
        self.bags.range(first..).map(|(c, _)| c).take_while(move |c| same(c))
    }

    /// Multimap state: the map's keys, each as the SDK encoded it, concatenated.
    pub fn map_keys(&self, map: &StateCell) -> Vec<u8> {
        self.map_cells(map).flat_map(|c| c.map_key.clone().unwrap_or_default()).collect()
    }

    /// The value coders of the task's map and multimap states.
    pub fn set_map_value_coders(&mut self, coders: HashMap<StateName, Coder>) {
        self.map_values = coders;
    }

    /// Multimap state: every key with its values (see `multimap_state`).
    pub fn map_entries(&self, map: &StateCell) -> Result<Vec<u8>, String> {
        let name = (map.transform.clone(), map.state_id.clone());
        let coder = self
            .map_values
            .get(&name)
            .ok_or_else(|| format!("'{}' of '{}' is not a multimap state of this stage", map.state_id, map.transform))?;
        let entries = self.map_cells(map).map(|c| (c.map_key.as_deref().unwrap_or_default(), self.get(c)));
        crate::multimap_state::encode_entries(coder, entries)
    }

    /// Multimap state: appends values to a map key (`cell.map_key`). An
    /// append makes the key exist even when its data is empty: values of
    /// Java's `VoidCoder` encode to nothing, and its `SetState` is a
    /// multimap of elements to such values.
    pub fn map_append(&mut self, cell: StateCell, data: &[u8]) {
        self.append(cell, data);
    }

    /// Multimap state: removes every key of the map.
    pub fn map_clear(&mut self, map: &StateCell) {
        let cells: Vec<StateCell> = self.map_cells(map).cloned().collect();
        for c in cells {
            self.clear(c);
        }
    }

    /// Drops every cell `expired` says is past garbage collection. The SDK
    /// may hold those cells in its cache: a new cache token disowns it.
    pub fn expire(&mut self, expired: impl Fn(&StateCell) -> bool) {
        let gone: Vec<StateCell> = self.bags.keys().filter(|c| expired(c)).cloned().collect();
        if !gone.is_empty() {
            self.generation += 1;
        }
        for c in gone {
            self.clear(c);
        }
    }

    /// The SDK's cache token for this state: valid while only the SDK
    /// changes it. A restarted or moved task has a new instance (its state
    /// came back from the last commit), and expiry bumps the generation.
    pub fn cache_token(&self) -> Vec<u8> {
        format!("user-state/{}/{}/{}", std::process::id(), self.instance, self.generation).into_bytes()
    }

    /// The cells changed since the last `take_changes` that hold state now
    /// (as of an append, even an empty one).
    pub fn written_cells(&self) -> impl Iterator<Item = &StateCell> + '_ {
        self.dirty.iter().filter(|c| self.bags.contains_key(*c))
    }

    /// The task-state entries changed since the last call.
    pub fn take_changes(&mut self) -> Vec<Entry> {
        let mut out = Vec::new();
        for cell in std::mem::take(&mut self.dirty) {
            let mut stored = self.stored.remove(&cell).unwrap_or_default();
            let legacy = self.legacy.remove(&cell);
            if legacy {
                stored.invalidate();
            }
            match self.bags.get(&cell) {
                None => chunks::delete(stored, chunk_key(&cell), &mut out),
                Some(bytes) => {
                    if stored.len > bytes.len() {
                        stored.invalidate();
                    }
                    let from = stored.len;
                    chunks::write(&mut stored, bytes.len(), &bytes[from..], chunk_key(&cell), &mut out);
                    self.stored.insert(cell.clone(), stored);
                }
            }
            // After the chunks that replace it: a write cut short keeps the
            // older whole entry rather than losing the cell.
            if legacy {
                out.push((task_state::user_state_key(&cell.encode()), None));
            }
        }
        out
    }

    /// Restores a cell from a whole entry of the older layout.
    pub fn restore(&mut self, cell: StateCell, contents: Vec<u8>) {
        self.legacy.insert(cell.clone());
        self.bags.entry(cell).or_insert(contents);
    }

    /// Restores chunk `seq` of a cell; `finish_restore` puts the cell together.
    pub fn restore_chunk(&mut self, cell: StateCell, seq: u32, bytes: Vec<u8>) {
        self.restoring.entry(cell).or_default().insert(seq, bytes);
    }

    pub fn finish_restore(&mut self) -> Result<(), String> {
        for (cell, pieces) in std::mem::take(&mut self.restoring) {
            let restored = chunks::assemble(pieces)?;
            let mut stored = restored.stored;
            if restored.appendable {
                stored.len = restored.bytes.len();
            }
            if !restored.complete {
                // What an interrupted at-least-once write left: the value is
                // written again at the next commit, which deletes it.
                self.dirty.insert(cell.clone());
            }
            // Chunks are newer than a whole entry of the same cell. A map
            // key that was written holds no bytes when its values encode to
            // none, and still exists.
            let written = cell.map_key.is_some() && stored.chunks > 0;
            if restored.bytes.is_empty() && !written {
                self.bags.remove(&cell);
            } else {
                self.bags.insert(cell.clone(), restored.bytes);
            }
            self.stored.insert(cell, stored);
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.bags.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(key: &[u8], window: &[u8]) -> StateCell {
        StateCell { transform: "t".into(), state_id: "count".into(), key: key.to_vec(), window: window.to_vec(), map_key: None }
    }

    fn map_entry(key: &[u8], map_key: &[u8]) -> StateCell {
        StateCell { state_id: "m".into(), map_key: Some(map_key.to_vec()), ..cell(key, b"") }
    }

    /// The cells the entries touch: (cell, written rather than deleted).
    fn touched(changes: Vec<Entry>) -> Vec<(StateCell, bool)> {
        let mut out: Vec<(StateCell, bool)> = Vec::new();
        for (k, v) in changes {
            let task_state::Store::UserStateChunk { cell, .. } = task_state::split(&k).unwrap() else { panic!("not a chunk") };
            let c = StateCell::decode(cell).unwrap();
            if out.last().is_none_or(|(last, _)| *last != c) {
                out.push((c, v.is_some()));
            }
        }
        out
    }

    fn apply(store: &mut BTreeMap<Vec<u8>, Vec<u8>>, changes: Vec<Entry>) {
        for (k, v) in changes {
            match v {
                Some(v) => store.insert(k, v),
                None => store.remove(&k),
            };
        }
    }

    /// What a task restores from the store.
    fn reloaded(store: &BTreeMap<Vec<u8>, Vec<u8>>) -> UserState {
        let mut s = UserState::default();
        for (k, v) in store {
            match task_state::split(k).unwrap() {
                task_state::Store::UserStateChunk { cell, seq } => s.restore_chunk(StateCell::decode(cell).unwrap(), seq, v.clone()),
                task_state::Store::UserState(cell) => s.restore(StateCell::decode(cell).unwrap(), v.clone()),
                other => panic!("{other:?}"),
            }
        }
        s.finish_restore().unwrap();
        s
    }

    #[test]
    fn a_bag_larger_than_a_kafka_record_is_written_a_chunk_at_a_time() {
        let mut s = UserState::default();
        let mut store = BTreeMap::new();
        let c = cell(b"k", b"");
        for i in 0..8u8 {
            s.append(c.clone(), &vec![i; 700_000]);
            let changes = s.take_changes();
            let bytes: usize = changes.iter().filter_map(|(_, v)| v.as_ref()).map(|v| v.len() - chunks::HEADER).sum();
            assert_eq!(bytes, 700_000, "only the appended bytes are written");
            assert!(changes.iter().all(|(_, v)| v.as_ref().is_none_or(|v| v.len() <= chunks::CHUNK_BYTES)));
            apply(&mut store, changes);
        }
        assert_eq!(reloaded(&store).get(&c), s.get(&c));
        // A read-modify-write (clear, then append) rewrites and drops the rest.
        s.clear(c.clone());
        s.append(c.clone(), b"small");
        apply(&mut store, s.take_changes());
        assert_eq!(store.len(), 1);
        let mut back = reloaded(&store);
        assert_eq!(back.get(&c), b"small");
        back.append(c.clone(), b"+more");
        apply(&mut store, back.take_changes());
        assert_eq!(reloaded(&store).get(&c), b"small+more");
    }

    /// At-least-once may land any prefix of a commit's changelog records.
    #[test]
    fn a_bag_rewritten_or_appended_to_and_cut_short_restores_whole() {
        let c = cell(b"k", b"");
        let (mut s, mut store) = (UserState::default(), BTreeMap::new());
        let old: Vec<u8> = (0..3 * chunks::CHUNK_BYTES).map(|i| (i % 251) as u8).collect();
        s.append(c.clone(), &old);
        apply(&mut store, s.take_changes());
        let mut rewritten = s;
        rewritten.clear(c.clone());
        rewritten.append(c.clone(), &vec![7u8; 2 * chunks::CHUNK_BYTES]);
        let mut appended = reloaded(&store);
        appended.append(c.clone(), &vec![8u8; 2 * chunks::CHUNK_BYTES]);
        for mut version in [rewritten, appended] {
            let new = version.get(&c).to_vec();
            let changes = version.take_changes();
            for cut in 0..=changes.len() {
                let mut landed = store.clone();
                apply(&mut landed, changes[..cut].to_vec());
                let mut back = reloaded(&landed);
                let got = back.get(&c).to_vec();
                assert!(got == old || got == new, "cut {cut} of {}: a mix", changes.len());
                apply(&mut landed, back.take_changes());
                assert_eq!(reloaded(&landed).get(&c), got, "cut {cut}: rewritten whole");
            }
        }
    }

    #[test]
    fn a_whole_cell_of_the_older_layout_restores_and_is_replaced_by_chunks() {
        let c = cell(b"k", b"");
        let mut store = BTreeMap::from([(task_state::user_state_key(&c.encode()), b"old".to_vec())]);
        let mut s = reloaded(&store);
        assert_eq!(s.get(&c), b"old");
        assert!(s.take_changes().is_empty());
        s.append(c.clone(), b"+new");
        apply(&mut store, s.take_changes());
        assert!(!store.contains_key(&task_state::user_state_key(&c.encode())), "the whole entry is gone");
        assert_eq!(reloaded(&store).get(&c), b"old+new");
    }

    #[test]
    fn multimaps_list_put_remove_and_clear_their_keys() {
        let mut s = UserState::default();
        let map = map_entry(b"user", b"");
        s.map_append(map_entry(b"user", b"\x01b"), &[2]);
        s.map_append(map_entry(b"user", b"\x01a"), &[1]);
        s.map_append(map_entry(b"user", b"\x01a"), &[3]);
        // Another key's map and another state of the same key stay apart.
        s.map_append(map_entry(b"other", b"\x01z"), &[9]);
        s.append(cell(b"user", b""), &[7]);
        assert_eq!(s.map_keys(&map), b"\x01a\x01b", "keys in byte order");
        assert_eq!(s.get(&map_entry(b"user", b"\x01a")), &[1, 3]);
        s.clear(map_entry(b"user", b"\x01a"));
        assert_eq!(s.map_keys(&map), b"\x01b");
        s.take_changes();
        s.map_clear(&map);
        assert!(s.map_keys(&map).is_empty());
        assert_eq!(s.map_keys(&map_entry(b"other", b"")), b"\x01z");
        assert_eq!(s.get(&cell(b"user", b"")), &[7]);
        let written: Vec<&StateCell> = s.written_cells().collect();
        assert!(written.is_empty(), "cleared cells hold nothing: {written:?}");
        assert_eq!(touched(s.take_changes()), [(map_entry(b"user", b"\x01b"), false)]);
        s.map_append(map_entry(b"user", b"\x01d"), &[]);
        assert_eq!(s.written_cells().cloned().collect::<Vec<_>>(), [map_entry(b"user", b"\x01d")]);
    }

    #[test]
    fn a_map_key_whose_values_encode_to_nothing_exists_and_is_restored() {
        // Java's SetState: each element is a map key with Void values.
        let map = map_entry(b"user", b"");
        let mut s = UserState::default();
        s.map_append(map_entry(b"user", b"\x01a"), &[]);
        s.map_append(map_entry(b"user", b"\x01b"), &[]);
        assert_eq!(s.map_keys(&map), b"\x01a\x01b");
        let mut store = BTreeMap::new();
        apply(&mut store, s.take_changes());
        assert_eq!(reloaded(&store).map_keys(&map), b"\x01a\x01b", "restored");
        // Added again (Java's SetState.add clears the key, then appends).
        s.clear(map_entry(b"user", b"\x01a"));
        s.map_append(map_entry(b"user", b"\x01a"), &[]);
        apply(&mut store, s.take_changes());
        assert_eq!(reloaded(&store).map_keys(&map), b"\x01a\x01b", "rewritten, still there");
        s.clear(map_entry(b"user", b"\x01a"));
        apply(&mut store, s.take_changes());
        assert_eq!(reloaded(&store).map_keys(&map), b"\x01b", "removed");
        s.map_clear(&map);
        apply(&mut store, s.take_changes());
        assert!(store.is_empty(), "nothing left: {store:?}");
    }

    #[test]
    fn bags_append_clear_and_report_their_changes() {
        let mut s = UserState::default();
        s.append(cell(b"a", b""), &[1]);
        s.append(cell(b"a", b""), &[2]);
        s.append(cell(b"b", b""), &[3]);
        assert_eq!(s.get(&cell(b"a", b"")), &[1, 2]);
        let mut store = BTreeMap::new();
        let changes = s.take_changes();
        assert_eq!(touched(changes.clone()), [(cell(b"a", b""), true), (cell(b"b", b""), true)]);
        apply(&mut store, changes);
        assert_eq!(reloaded(&store).get(&cell(b"a", b"")), &[1, 2]);
        assert!(s.take_changes().is_empty());
        s.clear(cell(b"a", b""));
        assert!(s.get(&cell(b"a", b"")).is_empty());
        let changes = s.take_changes();
        assert_eq!(touched(changes.clone()), [(cell(b"a", b""), false)]);
        apply(&mut store, changes);
        let back = reloaded(&store);
        assert!(back.get(&cell(b"a", b"")).is_empty());
        assert_eq!(back.get(&cell(b"b", b"")), &[3]);
    }

    #[test]
    fn the_cache_token_changes_with_the_instance_and_with_expiry_only() {
        let mut s = UserState::default();
        let first = s.cache_token();
        s.append(cell(b"a", b"old"), &[1]);
        s.clear(cell(b"a", b"old"));
        s.take_changes();
        assert_eq!(s.cache_token(), first, "the SDK's own writes keep it");
        s.append(cell(b"a", b"old"), &[1]);
        s.expire(|c| c.window == b"new");
        assert_eq!(s.cache_token(), first, "nothing expired");
        s.expire(|c| c.window == b"old");
        assert_ne!(s.cache_token(), first, "the runner dropped state the SDK may cache");
        assert_ne!(UserState::default().cache_token(), s.cache_token(), "a new incarnation");
    }

    #[test]
    fn expired_windows_lose_their_state() {
        let mut s = UserState::default();
        s.append(cell(b"a", b"old"), &[1]);
        s.append(cell(b"a", b"new"), &[2]);
        s.take_changes();
        s.expire(|c| c.window == b"old");
        assert!(s.get(&cell(b"a", b"old")).is_empty());
        assert_eq!(s.get(&cell(b"a", b"new")), &[2]);
        assert_eq!(touched(s.take_changes()), [(cell(b"a", b"old"), false)]);
    }

    fn entry(key: i64, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        crate::coders::encode_varint(key as u64, &mut out);
        crate::coders::encode_varint(value.len() as u64, &mut out);
        out.extend_from_slice(value);
        out
    }

    #[test]
    fn ordered_lists_keep_sort_key_order_and_answer_ranges() {
        let mut s = UserState::default();
        let c = cell(b"a", b"");
        s.ordered_append(c.clone(), &[entry(30, b"c"), entry(-5, b"neg")].concat()).unwrap();
        s.ordered_append(c.clone(), &[entry(10, b"a"), entry(30, b"c2")].concat()).unwrap();
        assert_eq!(
            s.ordered_get(&c, i64::MIN, i64::MAX).unwrap(),
            [entry(-5, b"neg"), entry(10, b"a"), entry(30, b"c"), entry(30, b"c2")].concat()
        );
        assert_eq!(s.ordered_get(&c, 0, 30).unwrap(), entry(10, b"a"));
        s.ordered_clear(c.clone(), 10, 31).unwrap();
        assert_eq!(s.ordered_get(&c, i64::MIN, i64::MAX).unwrap(), entry(-5, b"neg"));
        assert!(s.ordered_append(c, &[0x80]).is_err(), "a truncated entry is refused");
    }

    #[test]
    fn a_cell_round_trips_through_its_store_key() {
        let c = StateCell { transform: "ref_T_1".into(), state_id: "s".into(), key: vec![0, 255], window: vec![], map_key: None };
        assert_eq!(StateCell::decode(&c.encode()).unwrap(), c);
        let m = StateCell { map_key: Some(vec![3, 0]), ..c.clone() };
        assert_eq!(StateCell::decode(&m.encode()).unwrap(), m);
        let empty_key = StateCell { map_key: Some(Vec::new()), ..c };
        assert_eq!(StateCell::decode(&empty_key.encode()).unwrap(), empty_key);
        assert!(StateCell::decode(&[5, 1]).is_err());
    }
}
