//! User state of stateful ParDos (`beam:user_state:bag:v1`, which Python's
//! bag, combining and read-modify-write state all use): per (transform,
//! state id, window, key) the encoded values appended so far. Ordered-list
//! state keeps its entries sorted; multimap state (Go's and Java's map and
//! set state) has one cell per map key. Bundles read
//! and change it through the State API; the task persists what changed in
//! its commit cycle, so state and input offsets commit together.
//!
//! A cell is stored as chunk entries (`chunks`): a bag grows by appends, and
//! a commit writes only what was appended, however large the bag. The
//! chunks' keys group cells by window, then key (`StateCell::encode_grouped`),
//! so a task reads a cell, a map or a window by prefix: it starts without
//! reading its user state and loads each cell from its local store when a
//! bundle first uses it (`store`). Stores of the older layouts (a cell in one
//! whole entry, or chunks keyed key-first) are read whole when a task
//! starts and rewritten in the grouped layout by its first commit.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Weak;

use crate::codec::coder::Coder;
use crate::codec::coders::{encode_varint, ByteReader};
use crate::state::changelog::{ChangelogStore, Entry};
use crate::state::chunks::{self, Stored};
use crate::state::multimap_state::StateName;
use crate::state::task_state;

#[path = "user_state_store.rs"]
mod store;
pub use store::StoredCells;

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
/// Cells sort by window before key, so a window's cells are together.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StateCell {
    pub transform: String,
    pub state_id: String,
    pub window: Vec<u8>,
    pub key: Vec<u8>,
    /// Multimap state: the map key (encoded by the SDK) this cell holds the
    /// values of. The cells of one map sort together, in map-key byte order.
    pub map_key: Option<Vec<u8>>,
}

fn encode_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        encode_varint(part.len() as u64, &mut out);
        out.extend_from_slice(part);
    }
    out
}

impl StateCell {
    /// The cell in a key of the store's grouped layout: transform, state,
    /// window, key, map key, each length-prefixed, so a window's cells and
    /// a map's cells share a prefix.
    pub fn encode_grouped(&self) -> Vec<u8> {
        let map_key = self.map_key.as_deref();
        encode_parts([self.transform.as_bytes(), self.state_id.as_bytes(), &self.window, &self.key].into_iter().chain(map_key))
    }

    /// The prefix of the grouped keys of the window's cells.
    fn window_prefix(transform: &str, state_id: &str, window: &[u8]) -> Vec<u8> {
        encode_parts([transform.as_bytes(), state_id.as_bytes(), window])
    }

    pub fn decode_grouped(buf: &[u8]) -> Result<StateCell, String> {
        let (transform, state_id, window, key, map_key) = decode_parts(buf)?;
        Ok(StateCell { transform, state_id, window, key, map_key })
    }

    /// The cell as one key of the older layouts (key before window).
    pub fn encode(&self) -> Vec<u8> {
        let map_key = self.map_key.as_deref();
        encode_parts([self.transform.as_bytes(), self.state_id.as_bytes(), &self.key, &self.window].into_iter().chain(map_key))
    }

    pub fn decode(buf: &[u8]) -> Result<StateCell, String> {
        let (transform, state_id, key, window, map_key) = decode_parts(buf)?;
        Ok(StateCell { transform, state_id, window, key, map_key })
    }
}

type Parts = (String, String, Vec<u8>, Vec<u8>, Option<Vec<u8>>);

/// Two names, two byte strings and an optional map key, each length-prefixed.
fn decode_parts(buf: &[u8]) -> Result<Parts, String> {
    let mut r = ByteReader::new(buf);
    let part = |r: &mut ByteReader| -> Result<Vec<u8>, String> {
        let n = r.varint()? as usize;
        Ok(r.take(n)?.to_vec())
    };
    let text = |b: Vec<u8>| String::from_utf8(b).map_err(|_| "bad name in a user state key".to_string());
    let (transform, state_id) = (text(part(&mut r)?)?, text(part(&mut r)?)?);
    let (first, second) = (part(&mut r)?, part(&mut r)?);
    let map_key = if r.at < buf.len() { Some(part(&mut r)?) } else { None };
    if r.at != buf.len() {
        return Err("bad user state key: bytes past its map key".into());
    }
    Ok((transform, state_id, first, second, map_key))
}

/// Tells apart the user state of every task incarnation in this process.
static INCARNATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The windows holding state: transform → state id → windows.
type Windows = BTreeMap<String, BTreeMap<String, BTreeSet<Vec<u8>>>>;

/// The bags of one task, with what changed since the last commit.
pub struct UserState {
    /// This instance (one per task incarnation) and how often the runner
    /// changed it behind the SDK's back: together the SDK's cache token.
    instance: u64,
    generation: u64,
    /// The cells in memory that hold state. Without a `source` every cell
    /// is here; with one, the cells used since the task started.
    bags: BTreeMap<StateCell, Vec<u8>>,
    dirty: BTreeSet<StateCell>,
    /// What of each cell its chunk entries hold (also of cleared cells
    /// until their chunks are deleted).
    stored: BTreeMap<StateCell, Stored>,
    /// The task's local store, which cells not in memory are read from
    /// (`store`), and the cells read from it that hold nothing. Not kept
    /// open by the state: a bundle's state handler may outlive the task,
    /// and the task's next incarnation waits for the store's lock.
    source: Option<Weak<dyn StoredCells>>,
    absent: BTreeSet<StateCell>,
    /// The maps (map key `None`) whose every key is in memory.
    maps_read: BTreeSet<StateCell>,
    /// Every window that holds state, in memory or in the store (expiry
    /// visits windows, not cells).
    windows: Windows,
    /// Cells restored from the older layouts: a whole entry, or chunks
    /// keyed key-first, deleted once the cell is rewritten.
    legacy: BTreeSet<StateCell>,
    legacy_chunks: BTreeMap<StateCell, Stored>,
    /// Entries read back while restoring, assembled by `finish_restore`.
    restoring: BTreeMap<StateCell, store::Restoring>,
    /// The value coders of map and multimap states, to count values.
    map_values: HashMap<StateName, Coder>,
}

impl std::fmt::Debug for UserState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserState")
            .field("instance", &self.instance)
            .field("cells in memory", &self.bags.len())
            .field("dirty", &self.dirty.len())
            .field("lazy", &self.source.is_some())
            .finish()
    }
}

impl Default for UserState {
    fn default() -> Self {
        UserState {
            instance: INCARNATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            generation: 0,
            bags: BTreeMap::new(),
            dirty: BTreeSet::new(),
            stored: BTreeMap::new(),
            source: None,
            absent: BTreeSet::new(),
            maps_read: BTreeSet::new(),
            windows: Windows::new(),
            legacy: BTreeSet::new(),
            legacy_chunks: BTreeMap::new(),
            restoring: BTreeMap::new(),
            map_values: HashMap::new(),
        }
    }
}

fn chunk_key(cell: &StateCell) -> impl Fn(u32) -> Vec<u8> {
    let cell = cell.encode_grouped();
    move |i| task_state::user_cell_chunk_key(&cell, i)
}

fn older_chunk_key(cell: &StateCell) -> impl Fn(u32) -> Vec<u8> {
    let cell = cell.encode();
    move |i| task_state::user_state_chunk_key(&cell, i)
}

impl UserState {
    pub fn get(&mut self, cell: &StateCell) -> Result<&[u8], String> {
        self.load(cell)?;
        Ok(self.bags.get(cell).map_or(&[], |v| v.as_slice()))
    }

    pub fn append(&mut self, cell: StateCell, data: &[u8]) -> Result<(), String> {
        self.load(&cell)?;
        self.holds(&cell);
        self.bags.entry(cell.clone()).or_default().extend_from_slice(data);
        self.dirty.insert(cell);
        Ok(())
    }

    pub fn clear(&mut self, cell: StateCell) -> Result<(), String> {
        self.load(&cell)?;
        self.bags.remove(&cell);
        self.rewritten(cell);
        Ok(())
    }

    /// The cell is about to hold state.
    fn holds(&mut self, cell: &StateCell) {
        if self.source.is_some() {
            self.absent.remove(cell);
        }
        note_window(&mut self.windows, cell);
    }

    /// The cell changed other than by appending: it is written anew.
    fn rewritten(&mut self, cell: StateCell) {
        if let Some(s) = self.stored.get_mut(&cell) {
            s.invalidate();
        }
        if self.source.is_some() && !self.bags.contains_key(&cell) {
            self.absent.insert(cell.clone());
        }
        self.dirty.insert(cell);
    }

    /// Ordered-list state (`beam:user_state:ordered_list:v1`): the entries
    /// with sort keys in `[start, end)`, in sort-key order.
    pub fn ordered_get(&mut self, cell: &StateCell, start: i64, end: i64) -> Result<Vec<u8>, String> {
        Ok(entries(self.get(cell)?)?.into_iter().filter(|(k, _)| (start..end).contains(k)).flat_map(|(_, e)| e.to_vec()).collect())
    }

    /// Adds entries, keeping the cell sorted by sort key (stable for equal keys).
    pub fn ordered_append(&mut self, cell: StateCell, data: &[u8]) -> Result<(), String> {
        let mut all: Vec<(i64, Vec<u8>)> = entries(self.get(&cell)?)?.into_iter().map(|(k, e)| (k, e.to_vec())).collect();
        all.extend(entries(data)?.into_iter().map(|(k, e)| (k, e.to_vec())));
        all.sort_by_key(|(k, _)| *k);
        self.holds(&cell);
        self.bags.insert(cell.clone(), all.into_iter().flat_map(|(_, e)| e).collect());
        self.rewritten(cell);
        Ok(())
    }

    /// Removes the entries with sort keys in `[start, end)`.
    pub fn ordered_clear(&mut self, cell: StateCell, start: i64, end: i64) -> Result<(), String> {
        let kept: Vec<u8> =
            entries(self.get(&cell)?)?.into_iter().filter(|(k, _)| !(start..end).contains(k)).flat_map(|(_, e)| e.to_vec()).collect();
        if kept.is_empty() {
            self.bags.remove(&cell);
        } else {
            self.bags.insert(cell.clone(), kept);
        }
        self.rewritten(cell);
        Ok(())
    }

    /// Multimap state: the cells of `map`'s keys (`map` names the map; its
    /// own map key is ignored), read from the store first.
    fn map_cells(&mut self, map: &StateCell) -> Result<Vec<&StateCell>, String> {
        self.load_map(map)?;
        // `None` sorts before every map key: the map's cells start at `Some([])`.
        let first = StateCell { map_key: Some(Vec::new()), ..map.clone() };
        let same = |c: &StateCell| c.transform == map.transform && c.state_id == map.state_id && c.key == map.key && c.window == map.window;
        Ok(self.bags.range(first..).map(|(c, _)| c).take_while(move |c| same(c)).collect())
    }

    /// Multimap state: the map's keys, each as the SDK encoded it, concatenated.
    pub fn map_keys(&mut self, map: &StateCell) -> Result<Vec<u8>, String> {
        Ok(self.map_cells(map)?.into_iter().flat_map(|c| c.map_key.clone().unwrap_or_default()).collect())
    }

    /// The value coders of the task's map and multimap states.
    pub fn set_map_value_coders(&mut self, coders: HashMap<StateName, Coder>) {
        self.map_values = coders;
    }

    /// Multimap state: every key with its values (see `multimap_state`).
    pub fn map_entries(&mut self, map: &StateCell) -> Result<Vec<u8>, String> {
        let name = (map.transform.clone(), map.state_id.clone());
        let coder = self
            .map_values
            .get(&name)
            .ok_or_else(|| format!("'{}' of '{}' is not a multimap state of this stage", map.state_id, map.transform))?
            .clone();
        let cells: Vec<StateCell> = self.map_cells(map)?.into_iter().cloned().collect();
        let bags = &self.bags;
        let entries = cells.iter().map(|c| (c.map_key.as_deref().unwrap_or_default(), bags.get(c).map_or(&[][..], |v| v.as_slice())));
        crate::state::multimap_state::encode_entries(&coder, entries)
    }

    /// Multimap state: appends values to a map key (`cell.map_key`). An
    /// append makes the key exist even when its data is empty: values of
    /// Java's `VoidCoder` encode to nothing, and its `SetState` is a
    /// multimap of elements to such values.
    pub fn map_append(&mut self, cell: StateCell, data: &[u8]) -> Result<(), String> {
        self.append(cell, data)
    }

    /// Multimap state: removes every key of the map.
    pub fn map_clear(&mut self, map: &StateCell) -> Result<(), String> {
        let cells: Vec<StateCell> = self.map_cells(map)?.into_iter().cloned().collect();
        for c in cells {
            self.clear(c)?;
        }
        Ok(())
    }

    /// Drops the state of every window `expired(transform, window)` says
    /// is past garbage collection. The SDK may hold those cells in its
    /// cache: a new cache token disowns it.
    pub fn expire(&mut self, expired: impl Fn(&str, &[u8]) -> bool) -> Result<(), String> {
        let mut gone = Vec::new();
        for (transform, states) in &self.windows {
            for (state_id, windows) in states {
                gone.extend(windows.iter().filter(|w| expired(transform, w)).map(|w| (transform.clone(), state_id.clone(), w.clone())));
            }
        }
        if gone.is_empty() {
            return Ok(());
        }
        self.generation += 1;
        for (transform, state_id, window) in gone {
            self.load_window(&transform, &state_id, &window)?;
            let first = StateCell { transform, state_id, window, key: Vec::new(), map_key: None };
            let cells: Vec<StateCell> = self
                .bags
                .range(&first..)
                .map(|(c, _)| c)
                .take_while(|c| c.transform == first.transform && c.state_id == first.state_id && c.window == first.window)
                .cloned()
                .collect();
            for c in cells {
                self.bags.remove(&c);
                self.rewritten(c);
            }
            if let Some(windows) = self.windows.get_mut(&first.transform).and_then(|s| s.get_mut(&first.state_id)) {
                windows.remove(&first.window);
            }
        }
        Ok(())
    }

    /// The SDK's cache token for this state: valid while only the SDK
    /// changes it. A restarted or moved task has a new instance (its state
    /// came back from the last commit), and expiry bumps the generation.
    pub fn cache_token(&self) -> Vec<u8> {
        format!("user-state/{}/{}/{}", std::process::id(), self.instance, self.generation).into_bytes()
    }

    /// The cells changed since the last `take_entries` that hold state now
    /// (as of an append, even an empty one).
    pub fn written_cells(&self) -> impl Iterator<Item = &StateCell> + '_ {
        self.dirty.iter().filter(|c| self.bags.contains_key(*c))
    }
}

/// Notes that `cell`'s window holds state.
fn note_window(windows: &mut Windows, cell: &StateCell) {
    let known = windows.get(&cell.transform).and_then(|s| s.get(&cell.state_id)).is_some_and(|w| w.contains(&cell.window));
    if !known {
        windows.entry(cell.transform.clone()).or_default().entry(cell.state_id.clone()).or_default().insert(cell.window.clone());
    }
}

impl ChangelogStore for UserState {
    /// The task-state entries changed since the last call.
    fn take_entries(&mut self) -> Vec<Entry> {
        let mut out = Vec::new();
        for cell in std::mem::take(&mut self.dirty) {
            let mut stored = self.stored.remove(&cell).unwrap_or_default();
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
            // After the chunks that replace them: a write cut short keeps
            // the older entries rather than losing the cell.
            if let Some(older) = self.legacy_chunks.remove(&cell) {
                chunks::delete(older, older_chunk_key(&cell), &mut out);
            }
            if self.legacy.remove(&cell) {
                out.push((task_state::user_state_key(&cell.encode()), None));
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "user_state_tests.rs"]
mod tests;
