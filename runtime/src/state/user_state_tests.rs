use super::*;
use crate::state::changelog::ChangelogStore;
use std::sync::Arc;

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
        let task_state::Store::UserCellChunk { cell, .. } = task_state::split(&k).unwrap() else { panic!("not a chunk") };
        let c = StateCell::decode_grouped(cell).unwrap();
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
            task_state::Store::UserCellChunk { cell, seq } => {
                s.restore_cell_chunk(StateCell::decode_grouped(cell).unwrap(), seq, v.clone())
            }
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
        s.append(c.clone(), &vec![i; 700_000]).unwrap();
        let changes = s.take_entries();
        let bytes: usize = changes.iter().filter_map(|(_, v)| v.as_ref()).map(|v| v.len() - chunks::HEADER).sum();
        assert_eq!(bytes, 700_000, "only the appended bytes are written");
        assert!(changes.iter().all(|(_, v)| v.as_ref().is_none_or(|v| v.len() <= chunks::CHUNK_BYTES)));
        apply(&mut store, changes);
    }
    assert_eq!(reloaded(&store).get(&c).unwrap(), s.get(&c).unwrap());
    // A read-modify-write (clear, then append) rewrites and drops the rest.
    s.clear(c.clone()).unwrap();
    s.append(c.clone(), b"small").unwrap();
    apply(&mut store, s.take_entries());
    assert_eq!(store.len(), 1);
    let mut back = reloaded(&store);
    assert_eq!(back.get(&c).unwrap(), b"small");
    back.append(c.clone(), b"+more").unwrap();
    apply(&mut store, back.take_entries());
    assert_eq!(reloaded(&store).get(&c).unwrap(), b"small+more");
}

/// At-least-once may land any prefix of a commit's changelog records.
#[test]
fn a_bag_rewritten_or_appended_to_and_cut_short_restores_whole() {
    let c = cell(b"k", b"");
    let (mut s, mut store) = (UserState::default(), BTreeMap::new());
    let old: Vec<u8> = (0..3 * chunks::CHUNK_BYTES).map(|i| (i % 251) as u8).collect();
    s.append(c.clone(), &old).unwrap();
    apply(&mut store, s.take_entries());
    let mut rewritten = s;
    rewritten.clear(c.clone()).unwrap();
    rewritten.append(c.clone(), &vec![7u8; 2 * chunks::CHUNK_BYTES]).unwrap();
    let mut appended = reloaded(&store);
    appended.append(c.clone(), &vec![8u8; 2 * chunks::CHUNK_BYTES]).unwrap();
    for mut version in [rewritten, appended] {
        let new = version.get(&c).unwrap().to_vec();
        let changes = version.take_entries();
        for cut in 0..=changes.len() {
            let mut landed = store.clone();
            apply(&mut landed, changes[..cut].to_vec());
            let mut back = reloaded(&landed);
            let got = back.get(&c).unwrap().to_vec();
            assert!(got == old || got == new, "cut {cut} of {}: a mix", changes.len());
            apply(&mut landed, back.take_entries());
            assert_eq!(reloaded(&landed).get(&c).unwrap(), got, "cut {cut}: rewritten whole");
        }
    }
}

#[test]
fn a_whole_cell_of_the_older_layout_restores_and_is_replaced_by_chunks() {
    let c = cell(b"k", b"");
    let mut store = BTreeMap::from([(task_state::user_state_key(&c.encode()), b"old".to_vec())]);
    let mut s = reloaded(&store);
    assert_eq!(s.get(&c).unwrap(), b"old");
    s.append(c.clone(), b"+new").unwrap();
    apply(&mut store, s.take_entries());
    assert!(!store.contains_key(&task_state::user_state_key(&c.encode())), "the whole entry is gone");
    assert_eq!(reloaded(&store).get(&c).unwrap(), b"old+new");
    assert_eq!(lazily(&store).get(&c).unwrap(), b"old+new");
}

/// A task's local store in memory, keeping the keys read from it.
struct Memory {
    entries: BTreeMap<Vec<u8>, Vec<u8>>,
    read: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl StoredCells for Memory {
    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), String> {
        for (k, v) in self.entries.range(prefix.to_vec()..).take_while(|(k, _)| k.starts_with(prefix)) {
            self.read.lock().unwrap().push(k.clone());
            visit(k, v);
        }
        Ok(())
    }

    fn key_at_or_after(&self, from: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Ok(self.entries.range(from.to_vec()..).next().map(|(k, _)| k.clone()))
    }
}

fn memory(store: &BTreeMap<Vec<u8>, Vec<u8>>) -> Arc<Memory> {
    Arc::new(Memory { entries: store.clone(), read: Default::default() })
}

/// What a task that reads its cells as it uses them starts with (the
/// store kept open for the test's length).
fn lazily(store: &BTreeMap<Vec<u8>, Vec<u8>>) -> UserState {
    let source: Arc<dyn StoredCells> = memory(store);
    let state = UserState::lazy(&source).unwrap();
    std::mem::forget(source);
    state
}

/// A store of two windows of bags (one large), a map and an ordered list.
fn a_store() -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut s = UserState::default();
    s.append(cell(b"a", b"w1"), &vec![1; 3 * chunks::CHUNK_BYTES]).unwrap();
    s.append(cell(b"b", b"w1"), b"b1").unwrap();
    s.append(cell(b"a", b"w2"), b"a2").unwrap();
    s.map_append(map_entry(b"a", b"\x01x"), &[]).unwrap();
    s.map_append(map_entry(b"a", b"\x01y"), b"v").unwrap();
    s.ordered_append(StateCell { state_id: "list".into(), ..cell(b"a", b"") }, &entry(3, b"three")).unwrap();
    let mut store = BTreeMap::new();
    apply(&mut store, s.take_entries());
    store
}

/// The same requests to a state read whole and to one read as used.
fn use_state(s: &mut UserState) -> Vec<Vec<u8>> {
    let list = StateCell { state_id: "list".into(), ..cell(b"a", b"") };
    let mut seen = vec![s.get(&cell(b"b", b"w1")).unwrap().to_vec(), s.map_keys(&map_entry(b"a", b"")).unwrap()];
    s.append(cell(b"a", b"w1"), b"more").unwrap();
    s.clear(cell(b"b", b"w1")).unwrap();
    s.append(cell(b"c", b"w1"), b"new").unwrap();
    s.map_append(map_entry(b"a", b"\x01z"), b"w").unwrap();
    s.clear(map_entry(b"a", b"\x01x")).unwrap();
    s.ordered_append(list.clone(), &entry(1, b"one")).unwrap();
    seen.push(s.ordered_get(&list, 0, 10).unwrap());
    seen.push(s.map_keys(&map_entry(b"a", b"")).unwrap());
    seen.push(s.get(&cell(b"missing", b"w1")).unwrap().to_vec());
    seen
}

#[test]
fn a_state_read_as_used_answers_and_commits_as_one_read_whole() {
    let store = a_store();
    let source = memory(&store);
    let dynamic: Arc<dyn StoredCells> = source.clone();
    let mut lazy = UserState::lazy(&dynamic).unwrap();
    assert!(lazy.is_lazy());
    assert!(source.read.lock().unwrap().is_empty(), "nothing read at start");
    let mut eager = reloaded(&store);
    assert_eq!(use_state(&mut lazy), use_state(&mut eager));
    let read = source.read.lock().unwrap().clone();
    let unused = task_state::user_cells_prefix(&cell(b"a", b"w2").encode_grouped());
    assert!(read.iter().all(|k| !k.starts_with(&unused)), "a cell no bundle used is not read");
    let mut once = read.clone();
    once.sort();
    once.dedup();
    assert_eq!(once.len(), read.len(), "each entry read once");
    drop((dynamic, source));
    assert!(lazy.get(&cell(b"zz", b"w1")).is_err(), "the store closed: nothing more is read");
    let (mut after_lazy, mut after_eager) = (store.clone(), store.clone());
    apply(&mut after_lazy, lazy.take_entries());
    apply(&mut after_eager, eager.take_entries());
    assert_eq!(after_lazy, after_eager);
    assert_eq!(lazily(&after_lazy).get(&cell(b"a", b"w1")).unwrap().len(), 3 * chunks::CHUNK_BYTES + 4, "appended, not rewritten");
    assert!(lazily(&after_lazy).get(&cell(b"b", b"w1")).unwrap().is_empty());
}

#[test]
fn expiry_of_a_state_read_as_used_deletes_its_stored_windows() {
    let store = a_store();
    let mut lazy = lazily(&store);
    lazy.expire(|_, w| w == b"w1").unwrap();
    let mut after = store.clone();
    apply(&mut after, lazy.take_entries());
    let mut back = lazily(&after);
    assert!(back.get(&cell(b"a", b"w1")).unwrap().is_empty());
    assert!(back.get(&cell(b"b", b"w1")).unwrap().is_empty());
    assert_eq!(back.get(&cell(b"a", b"w2")).unwrap(), b"a2");
    assert_eq!(back.map_keys(&map_entry(b"a", b"")).unwrap(), b"\x01x\x01y");
    let token = back.cache_token();
    back.expire(|_, w| w == b"w1").unwrap();
    assert_eq!(back.cache_token(), token, "nothing of w1 is left to expire");
}

#[test]
fn chunks_of_the_key_first_layout_are_rewritten_grouped_by_the_first_commit() {
    let (c, m) = (cell(b"k", b"w"), map_entry(b"k", b"\x01q"));
    let mut store = BTreeMap::new();
    for (cell, value) in [(&c, vec![5u8; 2 * chunks::CHUNK_BYTES]), (&m, Vec::new())] {
        let mut out = Vec::new();
        chunks::write(&mut Stored::default(), value.len(), &value, older_chunk_key(cell), &mut out);
        apply(&mut store, out);
    }
    let mut s = reloaded(&store);
    assert_eq!(s.get(&c).unwrap(), vec![5u8; 2 * chunks::CHUNK_BYTES].as_slice());
    let changes = s.take_entries();
    // The migration cut short anywhere restores the same cells.
    for cut in 0..=changes.len() {
        let mut landed = store.clone();
        apply(&mut landed, changes[..cut].to_vec());
        let mut back = reloaded(&landed);
        assert_eq!(back.get(&c).unwrap().len(), 2 * chunks::CHUNK_BYTES, "cut {cut}");
        assert_eq!(back.map_keys(&map_entry(b"k", b"")).unwrap(), b"\x01q", "cut {cut}");
    }
    apply(&mut store, changes);
    let older = task_state::older_user_state_prefixes();
    assert!(store.keys().all(|k| !older.iter().any(|p| k.starts_with(p))), "only the grouped layout is left");
    assert_eq!(lazily(&store).get(&c).unwrap().len(), 2 * chunks::CHUNK_BYTES);
    assert_eq!(lazily(&store).map_keys(&map_entry(b"k", b"")).unwrap(), b"\x01q");
}

#[test]
fn multimaps_list_put_remove_and_clear_their_keys() {
    let mut s = UserState::default();
    let map = map_entry(b"user", b"");
    s.map_append(map_entry(b"user", b"\x01b"), &[2]).unwrap();
    s.map_append(map_entry(b"user", b"\x01a"), &[1]).unwrap();
    s.map_append(map_entry(b"user", b"\x01a"), &[3]).unwrap();
    // Another key's map and another state of the same key stay apart.
    s.map_append(map_entry(b"other", b"\x01z"), &[9]).unwrap();
    s.append(cell(b"user", b""), &[7]).unwrap();
    assert_eq!(s.map_keys(&map).unwrap(), b"\x01a\x01b", "keys in byte order");
    assert_eq!(s.get(&map_entry(b"user", b"\x01a")).unwrap(), &[1, 3]);
    s.clear(map_entry(b"user", b"\x01a")).unwrap();
    assert_eq!(s.map_keys(&map).unwrap(), b"\x01b");
    s.take_entries();
    s.map_clear(&map).unwrap();
    assert!(s.map_keys(&map).unwrap().is_empty());
    assert_eq!(s.map_keys(&map_entry(b"other", b"")).unwrap(), b"\x01z");
    assert_eq!(s.get(&cell(b"user", b"")).unwrap(), &[7]);
    let written: Vec<&StateCell> = s.written_cells().collect();
    assert!(written.is_empty(), "cleared cells hold nothing: {written:?}");
    assert_eq!(touched(s.take_entries()), [(map_entry(b"user", b"\x01b"), false)]);
    s.map_append(map_entry(b"user", b"\x01d"), &[]).unwrap();
    assert_eq!(s.written_cells().cloned().collect::<Vec<_>>(), [map_entry(b"user", b"\x01d")]);
}

#[test]
fn a_map_key_whose_values_encode_to_nothing_exists_and_is_restored() {
    // Java's SetState: each element is a map key with Void values.
    let map = map_entry(b"user", b"");
    let mut s = UserState::default();
    s.map_append(map_entry(b"user", b"\x01a"), &[]).unwrap();
    s.map_append(map_entry(b"user", b"\x01b"), &[]).unwrap();
    assert_eq!(s.map_keys(&map).unwrap(), b"\x01a\x01b");
    let mut store = BTreeMap::new();
    apply(&mut store, s.take_entries());
    assert_eq!(reloaded(&store).map_keys(&map).unwrap(), b"\x01a\x01b", "restored");
    // Added again (Java's SetState.add clears the key, then appends).
    s.clear(map_entry(b"user", b"\x01a")).unwrap();
    s.map_append(map_entry(b"user", b"\x01a"), &[]).unwrap();
    apply(&mut store, s.take_entries());
    assert_eq!(reloaded(&store).map_keys(&map).unwrap(), b"\x01a\x01b", "rewritten, still there");
    s.clear(map_entry(b"user", b"\x01a")).unwrap();
    apply(&mut store, s.take_entries());
    assert_eq!(reloaded(&store).map_keys(&map).unwrap(), b"\x01b", "removed");
    s.map_clear(&map).unwrap();
    apply(&mut store, s.take_entries());
    assert!(store.is_empty(), "nothing left: {store:?}");
}

#[test]
fn bags_append_clear_and_report_their_changes() {
    let mut s = UserState::default();
    s.append(cell(b"a", b""), &[1]).unwrap();
    s.append(cell(b"a", b""), &[2]).unwrap();
    s.append(cell(b"b", b""), &[3]).unwrap();
    assert_eq!(s.get(&cell(b"a", b"")).unwrap(), &[1, 2]);
    let mut store = BTreeMap::new();
    let changes = s.take_entries();
    assert_eq!(touched(changes.clone()), [(cell(b"a", b""), true), (cell(b"b", b""), true)]);
    apply(&mut store, changes);
    assert_eq!(reloaded(&store).get(&cell(b"a", b"")).unwrap(), &[1, 2]);
    assert!(s.take_entries().is_empty());
    s.clear(cell(b"a", b"")).unwrap();
    assert!(s.get(&cell(b"a", b"")).unwrap().is_empty());
    let changes = s.take_entries();
    assert_eq!(touched(changes.clone()), [(cell(b"a", b""), false)]);
    apply(&mut store, changes);
    let mut back = reloaded(&store);
    assert!(back.get(&cell(b"a", b"")).unwrap().is_empty());
    assert_eq!(back.get(&cell(b"b", b"")).unwrap(), &[3]);
}

#[test]
fn the_cache_token_changes_with_the_instance_and_with_expiry_only() {
    let mut s = UserState::default();
    let first = s.cache_token();
    s.append(cell(b"a", b"old"), &[1]).unwrap();
    s.clear(cell(b"a", b"old")).unwrap();
    s.take_entries();
    assert_eq!(s.cache_token(), first, "the SDK's own writes keep it");
    s.append(cell(b"a", b"old"), &[1]).unwrap();
    s.expire(|_, w| w == b"new").unwrap();
    assert_eq!(s.cache_token(), first, "nothing expired");
    s.expire(|_, w| w == b"old").unwrap();
    assert_ne!(s.cache_token(), first, "the runner dropped state the SDK may cache");
    assert_ne!(UserState::default().cache_token(), s.cache_token(), "a new incarnation");
}

#[test]
fn expired_windows_lose_their_state() {
    let mut s = UserState::default();
    s.append(cell(b"a", b"old"), &[1]).unwrap();
    s.append(cell(b"a", b"new"), &[2]).unwrap();
    s.take_entries();
    s.expire(|_, w| w == b"old").unwrap();
    assert!(s.get(&cell(b"a", b"old")).unwrap().is_empty());
    assert_eq!(s.get(&cell(b"a", b"new")).unwrap(), &[2]);
    assert_eq!(touched(s.take_entries()), [(cell(b"a", b"old"), false)]);
}

fn entry(key: i64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    crate::codec::coders::encode_varint(key as u64, &mut out);
    crate::codec::coders::encode_varint(value.len() as u64, &mut out);
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
    let empty_key = StateCell { map_key: Some(Vec::new()), ..c.clone() };
    assert_eq!(StateCell::decode_grouped(&empty_key.encode_grouped()).unwrap(), empty_key);
    assert_eq!(StateCell::decode_grouped(&m.encode_grouped()).unwrap(), m);
    assert!(m.encode_grouped().starts_with(&c.encode_grouped()), "a map's keys share its prefix");
    assert_eq!(StateCell::decode(&empty_key.encode()).unwrap(), empty_key);
    assert!(StateCell::decode(&[5, 1]).is_err());
}

#[test]
fn chunks_of_an_empty_bag_are_deleted_by_the_next_commit() {
    let c = cell(b"k", b"w");
    let mut out = Vec::new();
    chunks::write(&mut Stored::default(), 0, &[], chunk_key(&c), &mut out);
    let mut store = BTreeMap::new();
    apply(&mut store, out);
    assert_eq!(store.len(), 1, "an empty bag written whole is one chunk");
    for mut s in [reloaded(&store), lazily(&store)] {
        assert!(s.get(&c).unwrap().is_empty());
        let mut after = store.clone();
        apply(&mut after, s.take_entries());
        assert!(after.is_empty(), "{after:?}");
    }
}
