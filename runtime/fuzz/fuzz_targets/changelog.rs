//! Changelog entries read back into a task's state when it restores: the
//! store each key names, then GroupByKey panes, user state, timers, held and
//! deferred elements and watermarks from their values. The input is a
//! sequence of (u16 key length, key, u16 value length, value).
#![no_main]
use beam_kafka_runtime::codec::coder::Coder;
use beam_kafka_runtime::codec::timestamp::Watermark;
use beam_kafka_runtime::gbk::GroupByKey;
use beam_kafka_runtime::state::changelog::ChangelogStore;
use beam_kafka_runtime::state::task_state::{self, Store};
use beam_kafka_runtime::state::timers::{PendingTimer, TimerId, Timers};
use beam_kafka_runtime::state::user_state::{StateCell, UserState};
use beam_kafka_runtime::window::watermark::InputWatermark;
use beam_kafka_runtime::window::windowing::{OutputTime, Trigger, WindowingSpec};
use beam_kafka_runtime::{state::deferred, state::held};
use libfuzzer_sys::fuzz_target;

fn take<'a>(d: &mut &'a [u8]) -> Option<&'a [u8]> {
    let n = u16::from_be_bytes(d.get(..2)?.try_into().ok()?) as usize;
    let part = d.get(2..2 + n)?;
    *d = &d[2 + n..];
    Some(part)
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut d)) = data.split_first() else { return };
    let window_coder = match (flags & 1, flags & 8) {
        (_, 8) => Coder::LengthPrefix(Box::new(Coder::Opaque("custom window".into()))),
        (0, _) => Coder::GlobalWindow,
        _ => Coder::IntervalWindow,
    };
    let spec = WindowingSpec {
        merging: flags & 2 != 0,
        trigger: Trigger::default_trigger(),
        accumulating: flags & 4 != 0,
        allowed_lateness: 0,
        output_time: OutputTime::EndOfWindow,
        window_coder,
        sdk: None,
        on_time_always: true,
        final_pane_always: flags & 16 != 0,
        bounded_input: false,
    };
    let input = Coder::Kv(Box::new(Coder::LengthPrefix(Box::new(Coder::Bytes))), Box::new(Coder::Varint));
    let mut gbk = GroupByKey::new(spec, &input).expect("a readable KV coder");
    let mut gbk_entries = Vec::new();
    let mut user = UserState::default();
    let mut timers = Timers::default();
    let mut watermark = InputWatermark::new(["a".to_string()]);
    while let (Some(key), Some(value)) = (take(&mut d), take(&mut d)) {
        match task_state::split(key) {
            Ok(Store::GroupByKey { key, .. }) => gbk_entries.push((key, value)),
            Ok(Store::UserState(cell)) => {
                if let Ok(c) = StateCell::decode(cell) {
                    user.restore(c, value.to_vec());
                }
            }
            Ok(Store::UserStateChunk { cell, seq }) => {
                if let Ok(c) = StateCell::decode(cell) {
                    user.restore_chunk(c, seq, value.to_vec());
                }
            }
            Ok(Store::UserCellChunk { cell, seq }) => {
                if let Ok(c) = StateCell::decode_grouped(cell) {
                    user.restore_cell_chunk(c, seq, value.to_vec());
                }
            }
            Ok(Store::Timer(id)) => {
                if let (Ok(id), Ok(t)) = (TimerId::decode(id), PendingTimer::decode(value)) {
                    timers.restore(id, t);
                }
            }
            Ok(Store::Held(_)) => {
                let _ = held::decode(value);
            }
            Ok(Store::Deferred(_)) => {
                let _ = deferred::decode(value);
            }
            Ok(Store::Watermark) => {
                let _ = watermark.restore(value);
            }
            Err(_) => {}
        }
    }
    if user.finish_restore().is_ok() {
        let _ = user.take_entries();
    }
    let _ = timers.take_due(Watermark::PosInf, i64::MAX);
    if gbk.restore(gbk_entries).is_ok() {
        let mut out = Vec::new();
        gbk.advance(Watermark::PosInf, &mut out);
        gbk.fire_closed(usize::MAX, &mut out);
        let _ = gbk.take_changes();
    }
});
