//! Records of runner-owned topics: envelopes and packed records, and the
//! keys of task stores.
#![no_main]
use beam_kafka_runtime::{chunks, envelope, task_state};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(envelope::Record::Data(elements)) = envelope::decode(data) {
        let total: usize = elements.iter().map(Vec::len).sum();
        assert!(total <= data.len(), "elements larger than their record");
    }
    let _ = chunks::split_seq(data);
    let _ = task_state::split(data);
});
