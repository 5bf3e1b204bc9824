//! TestStream payloads read into steps.
use super::*;
use crate::codec::coders::encode_nested_bytes;
use pb::test_stream_payload::event::{AddElements, AdvanceProcessingTime, AdvanceWatermark};
use pb::test_stream_payload::{Event, TimestampedElement};

fn coder(c: &mut pb::Components, id: &str, urn: &str, parts: &[&str]) {
    c.coders.insert(
        id.into(),
        pb::Coder {
            spec: Some(pb::FunctionSpec { urn: urn.into(), payload: vec![] }),
            component_coder_ids: parts.iter().map(|p| p.to_string()).collect(),
        },
    );
}

/// A TestStream of `element_coder` elements with `events`, outputs by tag.
fn setup(element_coder: &str, events: Vec<E>, tags: &[&str]) -> (pb::PTransform, pb::Components) {
    let mut c = pb::Components::default();
    coder(&mut c, "s", crate::codec::coder::STRING_UTF8, &[]);
    coder(&mut c, "v", crate::codec::coder::VARINT, &[]);
    coder(&mut c, "kv", crate::codec::coder::KV, &["s", "v"]);
    coder(&mut c, "pickled", "beam:coder:pickled_python:v1", &[]);
    coder(&mut c, "gw", crate::urns::CODER_GLOBAL_WINDOW, &[]);
    c.windowing_strategies.insert("ws".into(), pb::WindowingStrategy { window_coder_id: "gw".into(), ..Default::default() });
    let mut t = pb::PTransform { unique_name: "ts".into(), ..Default::default() };
    for tag in tags {
        let pc = format!("pc-{tag}");
        c.pcollections.insert(
            pc.clone(),
            pb::PCollection { coder_id: element_coder.into(), windowing_strategy_id: "ws".into(), ..Default::default() },
        );
        t.outputs.insert(tag.to_string(), pc);
    }
    let payload = pb::TestStreamPayload {
        coder_id: element_coder.into(),
        events: events.into_iter().map(|e| Event { event: Some(e) }).collect(),
        endpoint: None,
    };
    t.spec = Some(pb::FunctionSpec { urn: crate::urns::TEST_STREAM.into(), payload: payload.encode_to_vec() });
    (t, c)
}

fn elements(tag: &str, items: &[(&[u8], i64)]) -> E {
    E::ElementEvent(AddElements {
        elements: items.iter().map(|(e, ts)| TimestampedElement { encoded_element: e.to_vec(), timestamp: *ts }).collect(),
        tag: tag.into(),
    })
}

#[test]
fn kv_elements_get_their_nested_coding() {
    // ('k1', 10) as the SDK encodes it: the key nested, the value outer.
    let mut outer = Vec::new();
    encode_nested_bytes(b"k1", &mut outer);
    outer.push(10);
    let (t, c) = setup("kv", vec![elements("None", &[(&outer, 7)])], &["None"]);
    let spec = TestStreamSpec::read("t", &t, &c).unwrap();
    let TestEvent::Elements { output: 0, elements } = &spec.events[0] else { panic!("{spec:?}") };
    let windowed = &elements[0];
    let mut expected = Vec::new();
    encode_global_windowed_value(7, &outer, &mut expected);
    assert_eq!(windowed, &expected, "a KV of a string and a varint is nested as it is outer");
}

#[test]
fn unreadable_elements_are_length_prefixed_and_tags_pick_outputs() {
    let (t, c) = setup("pickled", vec![elements("b", &[(b"\x80pickle", 1)]), elements("a", &[(b"x", 2)])], &["a", "b"]);
    let spec = TestStreamSpec::read("t", &t, &c).unwrap();
    assert_eq!(spec.outputs, vec!["pc-a".to_string(), "pc-b".to_string()]);
    let TestEvent::Elements { output, elements: got } = &spec.events[0] else { panic!() };
    assert_eq!(*output, 1);
    let mut expected = Vec::new();
    encode_global_windowed_value(1, b"\x07\x80pickle", &mut expected);
    assert_eq!(got[0], expected);
    let bad = setup("pickled", vec![elements("c", &[(b"x", 2)])], &["a", "b"]);
    assert!(TestStreamSpec::read("t", &bad.0, &bad.1).unwrap_err().contains("'c'"));
}

#[test]
fn steps_replay_events_then_end_every_output() {
    let events = vec![
        elements("None", &[(b"\x01", 1)]),
        E::WatermarkEvent(AdvanceWatermark { new_watermark: 100, tag: "None".into() }),
        E::ProcessingTimeEvent(AdvanceProcessingTime { advance_duration: 5000 }),
        elements("None", &[(b"\x02", 150)]),
    ];
    let (t, c) = setup("v", events, &["None"]);
    let spec = TestStreamSpec::read("t", &t, &c).unwrap();
    let mut d = Driver::new(std::slice::from_ref(&spec), 1_000);
    let steps: Vec<Step> = std::iter::from_fn(|| d.next_step()).collect();
    let summary: Vec<_> = steps.iter().map(|s| (s.epoch, s.elements.len(), s.watermarks[0][0], s.clock)).collect();
    assert_eq!(
        summary,
        vec![
            (1, 1, Watermark::NegInf, 1_000),
            (2, 0, Watermark::At(100), 1_000),
            (3, 0, Watermark::At(100), 6_000),
            (4, 1, Watermark::At(100), 6_000),
            (5, 0, Watermark::PosInf, 6_000),
        ]
    );
}

#[test]
fn several_test_streams_take_turns_on_one_clock() {
    let a = setup("v", vec![elements("None", &[(b"\x01", 1)]), elements("None", &[(b"\x02", 2)])], &["None"]);
    let b = setup("v", vec![E::ProcessingTimeEvent(AdvanceProcessingTime { advance_duration: 10 })], &["None"]);
    let specs = [TestStreamSpec::read("a", &a.0, &a.1).unwrap(), TestStreamSpec::read("b", &b.0, &b.1).unwrap()];
    let mut d = Driver::new(&specs, 0);
    let steps: Vec<Step> = std::iter::from_fn(|| d.next_step()).collect();
    let summary: Vec<_> = steps.iter().map(|s| (s.elements.iter().map(|e| e.0).collect::<Vec<_>>(), s.clock)).collect();
    assert_eq!(summary, vec![(vec![0], 0), (vec![], 10), (vec![0], 10), (vec![], 10)], "a, b, a (b is done), the end");
    assert!(steps.last().unwrap().watermarks.iter().flatten().all(|w| *w == Watermark::PosInf));
}

#[test]
fn an_event_service_is_refused_by_name() {
    let (mut t, c) = setup("v", vec![], &["None"]);
    let payload = pb::TestStreamPayload {
        coder_id: "v".into(),
        events: vec![],
        endpoint: Some(pb::ApiServiceDescriptor { url: "localhost:1".into(), ..Default::default() }),
    };
    t.spec.as_mut().unwrap().payload = payload.encode_to_vec();
    assert!(TestStreamSpec::read("t", &t, &c).unwrap_err().contains("interactive"));
}

#[test]
fn go_elements_come_nested_and_are_prefixed_only_where_go_does_not() {
    let go = pb::Environment {
        capabilities: vec![format!("{}go:apache/beam_go_sdk:2.73.0", crate::plan::sdk_version::SDK_BASE_PREFIX)],
        ..Default::default()
    };
    // Go writes values of its custom coders length-prefixed: a custom-coded
    // 42 (zigzag 0x54) comes as 01 54.
    let (t, mut c) = setup("gocustom", vec![elements("None", &[(b"\x01\x54", 3)])], &["None"]);
    coder(&mut c, "gocustom", "beam:go:coder:custom:v1", &[]);
    c.environments.insert("go".into(), go.clone());
    let spec = TestStreamSpec::read("t", &t, &c).unwrap();
    let TestEvent::Elements { elements: got, .. } = &spec.events[0] else { panic!() };
    let mut expected = Vec::new();
    encode_global_windowed_value(3, b"\x01\x54", &mut expected);
    assert_eq!(got[0], expected, "not prefixed twice");
    // A coder the runner prefixes and Go does not (its schema rows).
    let (t, mut c) = setup("pickled", vec![elements("None", &[(b"\x01\x02", 4)])], &["None"]);
    c.environments.insert("go".into(), go);
    let spec = TestStreamSpec::read("t", &t, &c).unwrap();
    let TestEvent::Elements { elements: got, .. } = &spec.events[0] else { panic!() };
    let mut expected = Vec::new();
    encode_global_windowed_value(4, b"\x02\x01\x02", &mut expected);
    assert_eq!(got[0], expected);
}
