//! User state of stateful ParDos (`beam:user_state:bag:v1`, which Python's
//! bag, combining and read-modify-write state all use): per (transform,
//! state id, key, window) the encoded values appended so far. Ordered-list
//! state keeps its entries sorted; multimap state (Go's and Java's map and
//! set state) has one cell per map key. Bundles read
//! and change it through the State API; the task persists what changed in
//! its commit cycle, so state and input offsets commit together.
use std::collections::{BTreeMap, BTreeSet};

use crate::coders::{encode_varint, ByteReader};

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

/// The bags of one task, with what changed since the last commit.
#[derive(Debug, Default)]
pub struct UserState {
    bags: BTreeMap<StateCell, Vec<u8>>,
    dirty: BTreeSet<StateCell>,
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
        self.dirty.insert(cell);
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
        self.dirty.insert(cell);
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

    /// Multimap state: appends values to a map key (`cell.map_key`). A key
    /// exists while it has values, so an empty append adds nothing.
    pub fn map_append(&mut self, cell: StateCell, data: &[u8]) {
        if !data.is_empty() {
            self.append(cell, data);
        }
    }

    /// Multimap state: removes every key of the map.
    pub fn map_clear(&mut self, map: &StateCell) {
        let cells: Vec<StateCell> = self.map_cells(map).cloned().collect();
        for c in cells {
            self.clear(c);
        }
    }

    /// Drops every cell `expired` says is past garbage collection.
    pub fn expire(&mut self, expired: impl Fn(&StateCell) -> bool) {
        let gone: Vec<StateCell> = self.bags.keys().filter(|c| expired(c)).cloned().collect();
        for c in gone {
            self.clear(c);
        }
    }

    /// What changed since the last call: (cell, contents; `None` deletes).
    pub fn take_changes(&mut self) -> Vec<(StateCell, Option<Vec<u8>>)> {
        std::mem::take(&mut self.dirty)
            .into_iter()
            .map(|c| {
                let v = self.bags.get(&c).cloned();
                (c, v)
            })
            .collect()
    }

    /// Restores a cell from the task's store.
    pub fn restore(&mut self, cell: StateCell, contents: Vec<u8>) {
        self.bags.insert(cell, contents);
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

    #[test]
    fn multimaps_list_put_remove_and_clear_their_keys() {
        let mut s = UserState::default();
        let map = map_entry(b"user", b"");
        s.map_append(map_entry(b"user", b"\x01b"), &[2]);
        s.map_append(map_entry(b"user", b"\x01a"), &[1]);
        s.map_append(map_entry(b"user", b"\x01a"), &[3]);
        s.map_append(map_entry(b"user", b"\x01c"), &[]);
        // Another key's map and another state of the same key stay apart.
        s.map_append(map_entry(b"other", b"\x01z"), &[9]);
        s.append(cell(b"user", b""), &[7]);
        assert_eq!(s.map_keys(&map), b"\x01a\x01b", "keys in byte order; an empty append adds none");
        assert_eq!(s.get(&map_entry(b"user", b"\x01a")), &[1, 3]);
        s.clear(map_entry(b"user", b"\x01a"));
        assert_eq!(s.map_keys(&map), b"\x01b");
        s.take_changes();
        s.map_clear(&map);
        assert!(s.map_keys(&map).is_empty());
        assert_eq!(s.map_keys(&map_entry(b"other", b"")), b"\x01z");
        assert_eq!(s.get(&cell(b"user", b"")), &[7]);
        assert_eq!(s.take_changes(), [(map_entry(b"user", b"\x01b"), None)]);
    }

    #[test]
    fn bags_append_clear_and_report_their_changes() {
        let mut s = UserState::default();
        s.append(cell(b"a", b""), &[1]);
        s.append(cell(b"a", b""), &[2]);
        s.append(cell(b"b", b""), &[3]);
        assert_eq!(s.get(&cell(b"a", b"")), &[1, 2]);
        let changes = s.take_changes();
        assert_eq!(changes, [(cell(b"a", b""), Some(vec![1, 2])), (cell(b"b", b""), Some(vec![3]))]);
        assert!(s.take_changes().is_empty());
        s.clear(cell(b"a", b""));
        assert!(s.get(&cell(b"a", b"")).is_empty());
        assert_eq!(s.take_changes(), [(cell(b"a", b""), None)]);
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
        assert_eq!(s.take_changes(), [(cell(b"a", b"old"), None)]);
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
