//! State API requests as a harness sends them, applied to a task's user
//! state: a sequence of (u16 length, encoded StateRequest), then a restore
//! of what the commits wrote.
#![no_main]
use beam_kafka_proto::fn_execution as fn_pb;
use beam_kafka_runtime::state_api;
use beam_kafka_runtime::task_state::{self, Store};
use beam_kafka_runtime::user_state::{StateCell, UserState};
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
        for (k, v) in state.take_changes() {
            written.insert(k, v);
        }
    }
    // Restoring what was written gives the same state back.
    let mut restored = UserState::default();
    for (k, v) in &written {
        let Some(v) = v else { continue };
        match task_state::split(k).expect("a key the runtime wrote") {
            Store::UserState(cell) => restored.restore(StateCell::decode(cell).expect("a cell the runtime wrote"), v.clone()),
            Store::UserStateChunk { cell, seq } => {
                restored.restore_chunk(StateCell::decode(cell).expect("a cell the runtime wrote"), seq, v.clone())
            }
            other => panic!("user state wrote {other:?}"),
        }
    }
    restored.finish_restore().expect("state the runtime wrote restores");
});
