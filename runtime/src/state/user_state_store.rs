//! How user state comes back from the task's store: read whole when the
//! task starts (the older layouts), or a cell, a map or a window at a time
//! as bundles use them (the grouped layout, `StoredCells`).
use std::collections::BTreeMap;
use std::sync::Arc;

use super::{note_window, StateCell, UserState, Windows};
use crate::state::chunks;
use crate::state::task_state::{self, Store};

/// The committed entries of a task's state as its local store holds them
/// (the changelog applied up to the task's last commit).
pub trait StoredCells: Send + Sync {
    /// Visits the entries whose keys start with `prefix`, in key order.
    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), String>;
    /// The first key at or after `from`.
    fn key_at_or_after(&self, from: &[u8]) -> Result<Option<Vec<u8>>, String>;
}

/// A cell's entries read back, in every layout it may have.
#[derive(Default)]
pub(super) struct Restoring {
    grouped: BTreeMap<u32, Vec<u8>>,
    older: Option<BTreeMap<u32, Vec<u8>>>,
    whole: Option<Vec<u8>>,
}

impl UserState {
    /// User state read from `source` as it is used: nothing is read now
    /// but the windows holding state (one seek per window). The store must
    /// hold no entry of the older layouts (`task_state::older_user_state_prefixes`).
    pub fn lazy(source: &Arc<dyn StoredCells>) -> Result<UserState, String> {
        let windows = stored_windows(&**source)?;
        Ok(UserState { source: Some(Arc::downgrade(source)), windows, ..UserState::default() })
    }

    /// Whether cells are read from the store as they are used.
    pub fn is_lazy(&self) -> bool {
        self.source.is_some()
    }

    /// Makes sure the cell, if the store holds it, is in memory.
    pub(super) fn load(&mut self, cell: &StateCell) -> Result<(), String> {
        if self.source.is_none() || self.in_memory(cell) {
            return Ok(());
        }
        let wanted = cell.encode_grouped();
        self.load_prefix(&wanted, |c| c == wanted.as_slice())?;
        if !self.bags.contains_key(cell) {
            self.absent.insert(cell.clone());
        }
        Ok(())
    }

    /// Whether memory knows the cell (it holds state, or nothing): its
    /// store entries are not read again.
    fn in_memory(&self, cell: &StateCell) -> bool {
        self.bags.contains_key(cell) || self.absent.contains(cell)
    }

    /// Makes sure every key of the map `map` names is in memory.
    pub(super) fn load_map(&mut self, map: &StateCell) -> Result<(), String> {
        let map = StateCell { map_key: None, ..map.clone() };
        if self.source.is_none() || self.maps_read.contains(&map) {
            return Ok(());
        }
        self.load_prefix(&map.encode_grouped(), |_| true)?;
        self.maps_read.insert(map);
        Ok(())
    }

    /// Makes sure every cell of the window is in memory.
    pub(super) fn load_window(&mut self, transform: &str, state_id: &str, window: &[u8]) -> Result<(), String> {
        self.load_prefix(&StateCell::window_prefix(transform, state_id, window), |_| true)
    }

    /// Reads the cells whose grouped encoding starts with `prefix` (those
    /// `wanted` accepts) and are not in memory yet.
    fn load_prefix(&mut self, prefix: &[u8], wanted: impl Fn(&[u8]) -> bool) -> Result<(), String> {
        let Some(source) = self.source.as_ref() else { return Ok(()) };
        let source = source.upgrade().ok_or("the task's state store is closed (the task stopped)")?;
        let mut found: BTreeMap<Vec<u8>, BTreeMap<u32, Vec<u8>>> = BTreeMap::new();
        let mut bad = None;
        source.scan_prefix(&task_state::user_cells_prefix(prefix), &mut |k, v| match task_state::split(k) {
            Ok(Store::UserCellChunk { cell, seq }) if wanted(cell) => {
                found.entry(cell.to_vec()).or_default().insert(seq, v.to_vec());
            }
            Ok(_) => {}
            Err(e) => bad = Some(e),
        })?;
        if let Some(e) = bad {
            return Err(format!("unreadable user state in the store: {e}"));
        }
        for (encoded, grouped) in found {
            let cell = StateCell::decode_grouped(&encoded)?;
            if !self.in_memory(&cell) {
                self.put_together(cell, Restoring { grouped, ..Restoring::default() })?;
            }
        }
        Ok(())
    }

    /// Restores a cell from a whole entry of the oldest layout.
    pub fn restore(&mut self, cell: StateCell, contents: Vec<u8>) {
        self.restoring.entry(cell).or_default().whole = Some(contents);
    }

    /// Restores chunk `seq` of a cell of the older, key-first layout.
    pub fn restore_chunk(&mut self, cell: StateCell, seq: u32, bytes: Vec<u8>) {
        self.restoring.entry(cell).or_default().older.get_or_insert_default().insert(seq, bytes);
    }

    /// Restores chunk `seq` of a cell of the grouped layout.
    pub fn restore_cell_chunk(&mut self, cell: StateCell, seq: u32, bytes: Vec<u8>) {
        self.restoring.entry(cell).or_default().grouped.insert(seq, bytes);
    }

    /// Puts together the cells `restore*` read back.
    pub fn finish_restore(&mut self) -> Result<(), String> {
        for (cell, pieces) in std::mem::take(&mut self.restoring) {
            self.put_together(cell, pieces)?;
        }
        Ok(())
    }

    /// A cell from its entries: the newest whole value of the grouped
    /// layout, else of the older chunks, else the whole entry. Chunks of an
    /// interrupted write, or of an older layout, are deleted by the next
    /// commit, which writes the cell again.
    fn put_together(&mut self, cell: StateCell, pieces: Restoring) -> Result<(), String> {
        let grouped = chunks::assemble(pieces.grouped)?;
        let older = pieces.older.map(chunks::assemble).transpose()?;
        // A map key that was written holds no bytes when its values encode
        // to none, and still exists.
        let exists = |bytes: &[u8]| !bytes.is_empty() || cell.map_key.is_some();
        let mut stored = grouped.stored;
        let mut rewrite = !grouped.complete;
        let value = if stored.chunks > 0 {
            let holds = exists(&grouped.bytes);
            if grouped.appendable {
                stored.len = grouped.bytes.len();
            }
            holds.then_some(grouped.bytes)
        } else {
            let older_value = older.as_ref().filter(|o| o.stored.chunks > 0).map(|o| (exists(&o.bytes), o.bytes.clone()));
            let value = match (older_value, pieces.whole.as_ref()) {
                (Some((holds, bytes)), _) => holds.then_some(bytes),
                (None, Some(whole)) => Some(whole.clone()),
                (None, None) => None,
            };
            rewrite |= value.is_some();
            value
        };
        if let Some(o) = older {
            self.legacy_chunks.insert(cell.clone(), o.stored);
            rewrite = true;
        }
        if pieces.whole.is_some() {
            self.legacy.insert(cell.clone());
            rewrite = true;
        }
        // Chunks that hold no value (an empty bag written whole) are
        // deleted by the next commit.
        if value.is_none() && !stored.is_empty() {
            rewrite = true;
        }
        if rewrite {
            stored.invalidate();
            self.dirty.insert(cell.clone());
        }
        if !stored.is_empty() {
            self.stored.insert(cell.clone(), stored);
        }
        match value {
            Some(bytes) => {
                note_window(&mut self.windows, &cell);
                self.bags.insert(cell, bytes);
            }
            None if self.source.is_some() => {
                self.absent.insert(cell);
            }
            None => {}
        }
        Ok(())
    }
}

/// The windows holding state in the store: one seek per window, past all
/// of its cells.
fn stored_windows(source: &dyn StoredCells) -> Result<Windows, String> {
    let all = task_state::user_cells_prefix(&[]);
    let mut windows = Windows::new();
    let mut from = all.clone();
    while let Some(key) = source.key_at_or_after(&from)? {
        if !key.starts_with(&all) {
            break;
        }
        let Store::UserCellChunk { cell, .. } = task_state::split(&key)? else {
            return Err("unreadable user state in the store".into());
        };
        let cell = StateCell::decode_grouped(cell)?;
        let prefix = StateCell::window_prefix(&cell.transform, &cell.state_id, &cell.window);
        note_window(&mut windows, &cell);
        match task_state::prefix_end(&task_state::user_cells_prefix(&prefix)) {
            Some(end) => from = end,
            None => break,
        }
    }
    Ok(windows)
}
