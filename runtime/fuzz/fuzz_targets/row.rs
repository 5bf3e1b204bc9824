//! Expansion requests and the rows they carry (Beam's row coder against a
//! client-sent schema).
#![no_main]
use beam_kafka_proto::expansion::ExpansionRequest;
use beam_kafka_runtime::{codec::row, pb, plan::expansion};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((0, rest)) => {
            if let Ok(req) = ExpansionRequest::decode(rest) {
                // What the service refuses as malformed, expansion refuses too.
                let malformed = expansion::malformed(&req);
                let expanded = expansion::expand(&req);
                assert!(malformed.is_none() || expanded.is_err(), "expanded a malformed request: {malformed:?}");
            }
        }
        Some((_, rest)) => {
            let Ok(payload) = pb::ExternalConfigurationPayload::decode(rest) else { return };
            let schema = payload.schema.unwrap_or_default();
            let decoded = row::decode(&schema, &payload.payload);
            match row::skip(&schema, &payload.payload) {
                Ok(n) => {
                    assert!(n <= payload.payload.len());
                    assert!(decoded.is_ok(), "skip succeeded where decode failed");
                }
                Err(_) => assert!(decoded.is_err(), "decode succeeded where skip failed"),
            }
            if let Ok(r) = decoded {
                let values: Vec<row::Value> = r.fields.into_iter().map(|(_, v)| v).collect();
                let mut out = Vec::new();
                let _ = row::encode(&schema, &values, &mut out);
            }
        }
        None => {}
    }
});
