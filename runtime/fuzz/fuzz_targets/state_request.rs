//! State API requests as a harness sends them, applied to a task's user
//! state: a sequence of (u16 length, encoded StateRequest), then a restore
//! of what the commits wrote.
#![no_main]
use beam_kafka_proto::fn_execution as fn_pb;
use beam_kafka_runtime::state::state_api;
use beam_kafka_runtime::state::changelog::ChangelogStore;
use beam_kafka_runtime::state::task_state::{self, Store};
use beam_kafka_runtime::state::user_state::{StateCell, StoredCells, UserState};
use libfuzzer_sys::fuzz_target;
use prost::Message;

/// Side-input answers in pages: every element once, in order, whatever the
/// page size.
fn pages(data: &[u8]) {
    let Some((&size, rest)) = data.split_first() else { return };
    let mut elements = state_api::Elements::default();
    for e in rest.split(|&b| b == 0xff) {
        elements.push(e);
    }
    let (mut all, mut token) = (Vec::new(), Vec::new());
    loop {
        let (page, next) = elements.page(&token, size as usize).expect("a token just handed out");
        all.extend(page);
        if next.is_empty() {
            break;
        }
        token = next;
    }
    assert_eq!(all, elements.bytes(), "pages lose or repeat bytes");
    let _ = elements.page(&data[..data.len().min(8)], size as usize);
}

/// The committed entries as a task's local store holds them.
struct Store_(std::collections::BTreeMap<Vec<u8>, Vec<u8>>);

impl StoredCells for Store_ {
    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), String> {
        for (k, v) in self.0.range(prefix.to_vec()..).take_while(|(k, _)| k.starts_with(prefix)) {
            visit(k, v);
        }
        Ok(())
    }

    fn key_at_or_after(&self, from: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Ok(self.0.range(from.to_vec()..).next().map(|(k, _)| k.clone()))
    }
}

fuzz_target!(|data: &[u8]| {
    pages(data);
    let mut state = UserState::default();
    let mut d = data;
    let mut written = std::collections::BTreeMap::new();
    while d.len() >= 2 {
        let n = u16::from_be_bytes([d[0], d[1]]) as usize;
        let Some(bytes) = d.get(2..2 + n) else { break };
        d = &d[2 + n..];
        let Ok(request) = fn_pb::StateRequest::decode(bytes) else { continue };
        if state_api::user_state_transform(&request).is_none() {
            continue;
        }
        let _ = state_api::serve_user_state(&mut state, &request);
        // What a commit would write, kept as the changelog keeps it.
        for (k, v) in state.take_entries() {
            written.insert(k, v);
        }
    }
    // Restoring what was written gives the same state back.
    let mut restored = UserState::default();
    let mut cells = Vec::new();
    for (k, v) in &written {
        let Some(v) = v else { continue };
        match task_state::split(k).expect("a key the runtime wrote") {
            Store::UserState(cell) => restored.restore(StateCell::decode(cell).expect("a cell the runtime wrote"), v.clone()),
            Store::UserCellChunk { cell, seq } => {
                let cell = StateCell::decode_grouped(cell).expect("a cell the runtime wrote");
                cells.push(cell.clone());
                restored.restore_cell_chunk(cell, seq, v.clone())
            }
            other => panic!("user state wrote {other:?}"),
        }
    }
    restored.finish_restore().expect("state the runtime wrote restores");
    // Read as it is used, the same store gives the same cells.
    let kept: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = written.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect();
    let source: std::sync::Arc<dyn StoredCells> = std::sync::Arc::new(Store_(kept));
    let mut lazy = UserState::lazy(&source).expect("state the runtime wrote is readable as used");
    for cell in cells {
        assert_eq!(lazy.get(&cell).expect("readable"), restored.get(&cell).expect("restored"), "{cell:?}");
    }
});
