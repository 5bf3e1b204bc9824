//! Multimap user state read whole: `MultimapEntriesUserState`, which Java's
//! `MultimapState.entries()` asks for, is answered with every map key and
//! its values as `KV<key, Iterable<value>>`, so the runner must count each
//! key's values. It does so with the state's value coder; where that coder
//! is one the runner cannot read, the descriptor gives the SDK the coder
//! length-prefixed (as for data), and the runner counts prefixes.
use std::collections::HashMap;

use prost::Message;

use crate::codec::coder::{length_prefixed, Coder};
use crate::pb;
use crate::urns;

/// A ParDo's state, by transform id and state id.
pub type StateName = (String, String);

/// The value coder id of a map or multimap state spec.
fn value_coder_id(spec: &mut pb::StateSpec) -> Option<&mut String> {
    match spec.spec.as_mut()? {
        pb::state_spec::Spec::MultimapSpec(m) => Some(&mut m.value_coder_id),
        pb::state_spec::Spec::MapSpec(m) => Some(&mut m.value_coder_id),
        _ => None,
    }
}

/// Points the ParDo's map and multimap value coders at coders the runner
/// reads (unreadable ones length-prefixed, added to `scratch`). Returns
/// whether anything changed.
pub fn length_prefix_values(payload: &mut pb::ParDoPayload, scratch: &mut pb::Components) -> bool {
    let mut changed = false;
    for spec in payload.state_specs.values_mut() {
        let Some(id) = value_coder_id(spec) else { continue };
        let wire = length_prefixed(scratch, id);
        changed |= wire != *id;
        *id = wire;
    }
    changed
}

/// The value coders, as the runner reads them, of the map and multimap
/// states of the ParDos among `transforms`.
pub fn value_coders<'a>(
    components: &pb::Components,
    transforms: impl IntoIterator<Item = (&'a String, &'a pb::PTransform)>,
) -> Result<HashMap<StateName, Coder>, String> {
    let mut scratch = pb::Components { coders: components.coders.clone(), ..Default::default() };
    let mut out = HashMap::new();
    for (id, t) in transforms {
        let Some(spec) = t.spec.as_ref().filter(|s| s.urn == urns::PAR_DO) else { continue };
        let mut payload =
            pb::ParDoPayload::decode(spec.payload.as_slice()).map_err(|e| format!("'{}': unreadable ParDo payload: {e}", t.unique_name))?;
        length_prefix_values(&mut payload, &mut scratch);
        for (state_id, spec) in payload.state_specs.iter_mut() {
            let Some(coder_id) = value_coder_id(spec) else { continue };
            out.insert((id.clone(), state_id.clone()), Coder::from_components(&scratch, coder_id));
        }
    }
    Ok(out)
}

/// How many values of `coder` the concatenation `values` holds.
pub fn count_values(coder: &Coder, values: &[u8]) -> Result<u32, String> {
    let (mut at, mut count) = (0usize, 0u32);
    while at < values.len() {
        let n = coder.skip(&values[at..])?;
        if n == 0 {
            return Err("a multimap value of zero bytes: the runner cannot count such values".into());
        }
        at += n;
        count += 1;
    }
    Ok(count)
}

/// The answer to a `MultimapEntriesUserState` read: for each map key (as
/// the SDK encoded it, nested), the key, its value count (big-endian, as
/// Beam's iterable coder writes a known size) and its values.
pub fn encode_entries<'a>(coder: &Coder, entries: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for (key, values) in entries {
        let count = count_values(coder, values)?;
        out.extend_from_slice(key);
        out.extend_from_slice(&count.to_be_bytes());
        out.extend_from_slice(values);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coder(id: &str, urn: &str, parts: &[&str]) -> (String, pb::Coder) {
        let spec = Some(pb::FunctionSpec { urn: urn.into(), payload: vec![] });
        (id.to_string(), pb::Coder { spec, component_coder_ids: parts.iter().map(|p| p.to_string()).collect() })
    }

    fn multimap_pardo(key: &str, value: &str) -> pb::PTransform {
        let spec = pb::StateSpec {
            spec: Some(pb::state_spec::Spec::MultimapSpec(pb::MultimapStateSpec {
                key_coder_id: key.into(),
                value_coder_id: value.into(),
            })),
            ..Default::default()
        };
        let payload = pb::ParDoPayload { state_specs: [("m".to_string(), spec)].into(), ..Default::default() };
        pb::PTransform {
            unique_name: "Stateful".into(),
            spec: Some(pb::FunctionSpec { urn: urns::PAR_DO.into(), payload: payload.encode_to_vec() }),
            ..Default::default()
        }
    }

    fn components() -> pb::Components {
        pb::Components {
            coders: [
                coder("str", crate::codec::coder::STRING_UTF8, &[]),
                coder("int", crate::codec::coder::VARINT, &[]),
                coder("java", "beam:coders:javasdk:0.1", &[]),
            ]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn readable_value_coders_stay_and_unreadable_ones_are_length_prefixed() {
        let c = components();
        let (t1, t2) = (multimap_pardo("str", "int"), multimap_pardo("str", "java"));
        let ids = ["t1".to_string(), "t2".to_string()];
        let coders = value_coders(&c, [(&ids[0], &t1), (&ids[1], &t2)]).unwrap();
        assert_eq!(coders[&("t1".to_string(), "m".to_string())], Coder::Varint);
        assert!(matches!(coders[&("t2".to_string(), "m".to_string())], Coder::LengthPrefix(_)));
        // The descriptor's rewrite names the same coders.
        let mut scratch = c.clone();
        let mut payload = pb::ParDoPayload::decode(multimap_pardo("str", "java").spec.unwrap().payload.as_slice()).unwrap();
        assert!(length_prefix_values(&mut payload, &mut scratch));
        let Some(pb::state_spec::Spec::MultimapSpec(m)) = &payload.state_specs["m"].spec else { panic!() };
        assert!(matches!(Coder::from_components(&scratch, &m.value_coder_id), Coder::LengthPrefix(_)));
        let mut readable = pb::ParDoPayload::decode(multimap_pardo("str", "int").spec.unwrap().payload.as_slice()).unwrap();
        assert!(!length_prefix_values(&mut readable, &mut scratch));
    }

    #[test]
    fn entries_carry_each_keys_value_count() {
        // Keys "a" (values 1, 300) and "b" (value 2), as varints.
        let (a, b) = (b"\x01a".as_slice(), b"\x01b".as_slice());
        let out = encode_entries(&Coder::Varint, [(a, b"\x01\xac\x02".as_slice()), (b, b"\x02".as_slice())].into_iter()).unwrap();
        assert_eq!(out, b"\x01a\x00\x00\x00\x02\x01\xac\x02\x01b\x00\x00\x00\x01\x02");
        assert_eq!(count_values(&Coder::Varint, b""), Ok(0));
        assert!(count_values(&Coder::Varint, b"\xac").is_err(), "a truncated value");
    }
}
