use super::*;
use crate::codec::coders::encode_timestamp;

fn components() -> pb::Components {
    let mut c = pb::Components::default();
    for (id, urn) in [("iw", crate::codec::coder::INTERVAL_WINDOW), ("pw", "beam:coder:pickled_python:v1")] {
        c.coders.insert(
            id.into(),
            pb::Coder { spec: Some(pb::FunctionSpec { urn: urn.into(), payload: vec![] }), component_coder_ids: vec![] },
        );
    }
    c
}

fn sdk(window_coder: &str) -> SdkWindowFn {
    SdkWindowFn {
        window_fn: pb::FunctionSpec { urn: PICKLED_WINDOW_FN.into(), payload: b"pickled".to_vec() },
        environment_id: "py".into(),
        window_coder_id: window_coder.into(),
        merges: true,
        opaque: window_coder == "pw",
    }
}

fn urn_of(d: &fn_pb::ProcessBundleDescriptor, id: &str) -> String {
    d.transforms[id].spec.as_ref().unwrap().urn.clone()
}

#[test]
fn the_merge_descriptor_runs_the_pipelines_window_fn_between_a_data_source_and_sink() {
    let d = merge_descriptor(&components(), &sdk("iw"), "merge-1", "localhost:7");
    assert_eq!(d.id, "merge-1");
    assert_eq!(urn_of(&d, HELPER_SOURCE), urns::DATA_INPUT);
    assert_eq!(urn_of(&d, HELPER_SINK), urns::DATA_OUTPUT);
    let apply = &d.transforms["window_fn/apply"];
    assert_eq!(apply.spec.as_ref().unwrap().urn, urns::MERGE_WINDOWS);
    let window_fn = pb::FunctionSpec::decode(apply.spec.as_ref().unwrap().payload.as_slice()).unwrap();
    assert_eq!(window_fn.payload, b"pickled", "the WindowFn exactly as the pipeline has it");
    assert_eq!(apply.environment_id, "py");
    let port = fn_pb::RemoteGrpcPort::decode(d.transforms[HELPER_SOURCE].spec.as_ref().unwrap().payload.as_slice()).unwrap();
    assert_eq!(port.api_service_descriptor.unwrap().url, "localhost:7");
    // A Python harness dials the state endpoint of every descriptor.
    assert_eq!(d.state_api_service_descriptor.unwrap().url, "localhost:7");
    // Every coder referred to is in the descriptor.
    for c in d.coders.values() {
        for part in &c.component_coder_ids {
            assert!(d.coders.contains_key(part), "{part}");
        }
    }
    for pc in d.pcollections.values() {
        assert!(d.coders.contains_key(&pc.coder_id) && d.windowing_strategies.contains_key(&pc.windowing_strategy_id));
    }
}

#[test]
fn opaque_windows_are_length_prefixed_in_helper_bundles_and_the_end_mapping_is_pickled() {
    let d = end_descriptor(&components(), "py", "pw", "end-1", "localhost:7");
    let apply = d.transforms["window_fn/apply"].spec.as_ref().unwrap();
    assert_eq!(apply.urn, urns::MAP_WINDOWS);
    let mapping = pb::FunctionSpec::decode(apply.payload.as_slice()).unwrap();
    assert_eq!(mapping.urn, PICKLED_WINDOW_MAPPING_FN);
    assert_eq!(mapping.payload, crate::codec::pickle::window_end_mapping_fn());
    let input = &d.coders["window_fn/end-in"];
    let window = &d.coders[&input.component_coder_ids[1]];
    assert_eq!(window.spec.as_ref().unwrap().urn, urns::CODER_LENGTH_PREFIX);
    assert_eq!(window.component_coder_ids, ["pw"]);
}

fn iw(start: i64, end: i64) -> Window {
    Window::Interval { start, end }
}

/// An answer as Python's MergeWindows writes it (nonce, (unmerged, merges)).
fn merge_answer(nonce: u64, unmerged: &[Window], merges: &[(Window, Vec<Window>)]) -> Vec<u8> {
    let windows = |ws: &[Window], out: &mut Vec<u8>| {
        out.extend_from_slice(&(ws.len() as u32).to_be_bytes());
        ws.iter().for_each(|w| w.encode(out));
    };
    let mut v = Vec::new();
    encode_nested_bytes(&nonce.to_be_bytes(), &mut v);
    windows(unmerged, &mut v);
    v.extend_from_slice(&(merges.len() as u32).to_be_bytes());
    for (result, originals) in merges {
        result.encode(&mut v);
        windows(originals, &mut v);
    }
    let mut out = Vec::new();
    encode_global_windowed_value(0, &v, &mut out);
    out
}

#[test]
fn merge_requests_carry_each_keys_windows_and_answers_come_back_by_request() {
    let (a, b, c) = (iw(0, 10), iw(2, 12), iw(100, 110));
    let request = encode_merge_requests([vec![&a, &b, &c], vec![&c]]);
    // Two windowed values in the global window, each a KV<nonce, windows>.
    let first = windowed::split(&request, &Coder::GlobalWindow).unwrap();
    let body = &request[first.value_offset..];
    assert_eq!(&body[..9], [&[8u8][..], &0u64.to_be_bytes()].concat());
    assert_eq!(&body[9..13], 3u32.to_be_bytes());

    let mut answer = merge_answer(0, std::slice::from_ref(&c), &[(iw(0, 12), vec![a.clone(), b.clone()])]);
    answer.extend(merge_answer(1, std::slice::from_ref(&c), &[]));
    let merges = decode_merge_results(&answer, &Coder::IntervalWindow).unwrap();
    assert_eq!(merges[&0], vec![Merge { result: iw(0, 12), originals: vec![a, b] }]);
    assert!(!merges.contains_key(&1), "nothing merged for the second key");
    assert!(decode_merge_results(&answer[..answer.len() - 3], &Coder::IntervalWindow).is_err());
}

#[test]
fn ends_are_read_from_the_one_millisecond_windows_the_sdk_maps_onto() {
    let lp = Coder::LengthPrefix(Box::new(Coder::Opaque("x".into())));
    let red = Window::Opaque { max: windowed::UNRESOLVED_MAX, bytes: b"red".as_slice().into() };
    let request = encode_window_requests([&red]);
    let h = windowed::split(&request, &Coder::GlobalWindow).unwrap();
    let body = &request[h.value_offset..];
    assert_eq!(Window::decode(&body[9..], &lp).unwrap(), red);
    let mut v = Vec::new();
    encode_nested_bytes(&0u64.to_be_bytes(), &mut v);
    encode_timestamp(10_000, &mut v);
    v.push(1);
    let mut answer = Vec::new();
    encode_global_windowed_value(0, &v, &mut answer);
    assert_eq!(decode_ends(&answer).unwrap()[&0], 9_999);
    assert!(decode_ends(&answer[..answer.len() - 1]).is_err());
}

#[test]
fn the_side_mapping_descriptor_runs_the_side_inputs_own_mapping_from_main_to_side_windows() {
    let mapping = pb::FunctionSpec { urn: PICKLED_WINDOW_MAPPING_FN.into(), payload: b"the side input's".to_vec() };
    let d = side_mapping_descriptor(&components(), "py", &mapping, ("pw", "iw"), "side-1", "localhost:7");
    let apply = d.transforms["window_fn/apply"].spec.as_ref().unwrap();
    assert_eq!(apply.urn, urns::MAP_WINDOWS);
    assert_eq!(pb::FunctionSpec::decode(apply.payload.as_slice()).unwrap(), mapping);
    let (input, output) = (&d.coders["window_fn/map-in"], &d.coders["window_fn/map-out"]);
    assert_eq!(d.coders[&input.component_coder_ids[1]].spec.as_ref().unwrap().urn, urns::CODER_LENGTH_PREFIX, "main windows opaque");
    assert_eq!(output.component_coder_ids[1], "iw", "side windows as they are");
    let mut v = Vec::new();
    encode_nested_bytes(&0u64.to_be_bytes(), &mut v);
    iw(0, 60).encode(&mut v);
    let mut answer = Vec::new();
    encode_global_windowed_value(0, &v, &mut answer);
    assert_eq!(decode_mapped(&answer, &Coder::IntervalWindow).unwrap()[&0], iw(0, 60));
}
