//! Records of runner-owned topics: envelopes and packed records, and the
//! keys of task stores.
#![no_main]
use beam_kafka_runtime::{codec::envelope, state::chunks, state::task_state};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(envelope::Record::Data(pack)) = envelope::decode(data) {
        // A decoded pack is validated: reading it in place yields every element.
        let total: usize = pack.iter().map(<[u8]>::len).sum();
        assert!(total <= data.len(), "elements larger than their record");
        assert_eq!(pack.iter().count(), pack.len(), "a validated pack's elements end early");
    }
    let _ = chunks::split_seq(data);
    let _ = task_state::split(data);
});
