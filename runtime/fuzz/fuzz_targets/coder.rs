//! Coder specs and encoded elements: coders read from (possibly hostile)
//! components, and the values a harness or a topic hands the runner.
#![no_main]
use beam_kafka_runtime::codec::coder::{length_prefixed, wire_coders, Coder};
use beam_kafka_runtime::codec::windowed::{self, Window};
use beam_kafka_runtime::{pb, plan::structure};
use libfuzzer_sys::fuzz_target;
use prost::Message;

/// A coder tree from the input's leading bytes.
fn build(d: &mut &[u8], depth: usize) -> Coder {
    let Some((&b, rest)) = d.split_first() else { return Coder::Bytes };
    *d = rest;
    let deeper = depth < 8;
    match b % 13 {
        0 => Coder::Bytes,
        1 => Coder::StringUtf8,
        2 => Coder::Varint,
        3 => Coder::Bool,
        4 => Coder::Double,
        5 if deeper => Coder::Kv(Box::new(build(d, depth + 1)), Box::new(build(d, depth + 1))),
        6 if deeper => Coder::Iterable(Box::new(build(d, depth + 1))),
        7 if deeper => Coder::LengthPrefix(Box::new(build(d, depth + 1))),
        8 if deeper => Coder::Nullable(Box::new(build(d, depth + 1))),
        9 => Coder::GlobalWindow,
        10 => Coder::IntervalWindow,
        11 if deeper => {
            let window = if b & 0x80 == 0 { Coder::GlobalWindow } else { Coder::IntervalWindow };
            Coder::WindowedValue(Box::new(build(d, depth + 1)), Box::new(window))
        }
        _ => Coder::Opaque("x".into()),
    }
}

fn values(coder: &Coder, buf: &[u8]) {
    if let Ok(n) = coder.skip(buf) {
        assert!(n <= buf.len(), "skip past the end: {n} of {}", buf.len());
    }
    for window in [Coder::GlobalWindow, Coder::IntervalWindow] {
        if let Ok(h) = windowed::split(buf, &window) {
            assert!(h.value_offset <= buf.len());
            for w in h.windows {
                let _ = Window::decode(w, &window);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        // Components as a client sends them.
        Some((0xff, rest)) => {
            // A u16 length, the components, then the value bytes.
            let Some(len) = rest.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]) as usize) else { return };
            let (spec, rest) = rest[2..].split_at(len.min(rest.len() - 2));
            let Ok(c) = pb::Components::decode(spec) else { return };
            let p = pb::Pipeline { components: Some(c.clone()), ..Default::default() };
            let shaped = structure::check(&p).is_ok();
            for id in c.coders.keys() {
                values(&Coder::from_components(&c, id), rest);
                if shaped {
                    let mut scratch = c.clone();
                    let lp = length_prefixed(&mut scratch, id);
                    assert!(Coder::from_components(&scratch, &lp).is_readable() || !scratch.coders.contains_key(&lp));
                }
            }
            for pc in c.pcollections.keys() {
                let _ = wire_coders(&c, pc);
            }
        }
        _ => {
            let mut d = data;
            let coder = build(&mut d, 0);
            values(&coder, d);
        }
    }
});
