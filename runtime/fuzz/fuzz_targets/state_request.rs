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

fuzz_target!(|data: &[u8]| {
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
