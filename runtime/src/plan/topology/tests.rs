//! Unit tests of the topology plan.
use super::*;
use crate::plan::graph::test_pipelines::Builder;
use crate::urns::*;

#[test]
fn impulse_feeds_a_one_partition_topic_read_by_one_task() {
    let mut b = Builder::new();
    b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("map", PAR_DO, &["a"], &["b"], true);
    let p = b.build();
    let g = PipelineGraph::new(&p).unwrap();
    let plan = TopologyPlan::plan(&g, "app", 4).unwrap();
    assert_eq!(plan.topics.len(), 1);
    assert_eq!(plan.topics[0].name, "__beam_app_impulse_0");
    assert_eq!(plan.topics[0].partitions, 1);
    assert_eq!(plan.topics[0].upstream, "impulse");
    assert_eq!(plan.sub_topologies[0].inputs, [SubInput { topic: 0, kind: InputKind::Direct, pcollection: "a".into() }]);
    assert_eq!(plan.tasks(), [TaskId { sub_topology: 0, partition: 0 }]);
    assert_eq!(plan.terminal_tasks(), plan.tasks());
    let text = plan.describe(&g);
    assert!(text.contains("__beam_app_impulse_0") && text.contains("map"), "{text}");
}

#[test]
fn a_side_input_travels_on_a_side_topic_and_its_reader_starts_a_stage() {
    let mut b = Builder::new();
    b.leaf("impulse", IMPULSE, &[], &["a"], false)
        .leaf("make", PAR_DO, &["a"], &["b"], true)
        .leaf("use", PAR_DO, &["b"], &["c"], true)
        .side_input("use", "side0", "b");
    let p = b.build();
    let g = PipelineGraph::new(&p).unwrap();
    let plan = TopologyPlan::plan(&g, "s", 3).unwrap();
    let topics: Vec<_> = plan.topics.iter().map(|t| (t.name.as_str(), t.kind, t.partitions, t.upstream.as_str())).collect();
    assert_eq!(
        topics,
        [
            ("__beam_s_impulse_0", TopicKind::Impulse, 1, "impulse"),
            ("__beam_s_side_0", TopicKind::Side, 1, "sub-0"),
            ("__beam_s_edge_0", TopicKind::Edge, 3, "sub-0"),
        ]
    );
    let (make, reader) = (&plan.sub_topologies[0], &plan.sub_topologies[1]);
    assert_eq!(make.stage.transforms, ["make"]);
    assert_eq!(make.outputs.iter().map(|o| o.topic).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(reader.stage.transforms, ["use"]);
    assert_eq!(reader.inputs, [SubInput { topic: 2, kind: InputKind::Direct, pcollection: "b".into() }]);
    assert_eq!(
        reader.side_inputs,
        [SubSideInput { topic: 1, transform: "use".into(), local_name: "side0".into(), pcollection: "b".into() }]
    );
    assert_eq!(reader.partitions, 3);
}

#[test]
fn a_group_by_key_output_read_only_as_a_side_input_is_copied_out_by_a_relay_stage() {
    let mut b = Builder::new();
    b.leaf("impulse", IMPULSE, &[], &["a"], false)
        .leaf("pair", PAR_DO, &["a"], &["b"], true)
        .leaf("gbk", GROUP_BY_KEY, &["b"], &["g"], false)
        .leaf("use", PAR_DO, &["b"], &["c"], true)
        .side_input("use", "side0", "g");
    let p = b.build();
    let g = PipelineGraph::new(&p).unwrap();
    let plan = TopologyPlan::plan(&g, "r", 1).unwrap();
    let relay = plan.sub_topologies.iter().find(|s| s.stage.id == "relay-0").expect("a relay stage");
    assert!(relay.stage.transforms.is_empty());
    assert!(matches!(relay.inputs[0].kind, InputKind::GroupByKey { .. }));
    assert_eq!(plan.topics[relay.outputs[0].topic].kind, TopicKind::Side);
    let reader = plan.sub_topologies.iter().find(|s| s.stage.transforms == ["use"]).unwrap();
    assert_eq!(reader.side_inputs[0].topic, relay.outputs[0].topic);
}

#[test]
fn a_group_by_key_splits_the_pipeline_at_a_shuffle_topic() {
    let mut b = Builder::new();
    b.leaf("impulse", IMPULSE, &[], &["a"], false)
        .leaf("pair", PAR_DO, &["a"], &["b"], true)
        .leaf("gbk", GROUP_BY_KEY, &["b"], &["c"], false)
        .leaf("post", PAR_DO, &["c"], &["d"], true);
    let p = b.build();
    let g = PipelineGraph::new(&p).unwrap();
    let plan = TopologyPlan::plan(&g, "x", 3).unwrap();
    let names: Vec<_> = plan.topics.iter().map(|t| (t.name.as_str(), t.partitions)).collect();
    assert_eq!(names, [("__beam_x_impulse_0", 1), ("__beam_x_shuffle_0", 3)]);
    assert_eq!(plan.topics[1].upstream, "sub-0");
    assert_eq!(plan.topics[1].upstream_partitions, 1);
    assert_eq!(plan.sub_topologies[0].outputs, [SubOutput { pcollection: "b".into(), topic: 1 }]);
    let second = &plan.sub_topologies[1];
    assert_eq!(second.inputs[0].kind, InputKind::GroupByKey { transform: "gbk".into() });
    assert_eq!(second.inputs[0].pcollection, "c");
    assert_eq!(second.partitions, 3);
    assert_eq!(plan.tasks().len(), 4);
    assert_eq!(plan.terminal_tasks().len(), 3);
    assert!(plan.describe(&g).contains("via gbk"));
    let dot = plan.to_dot(&g);
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(dot.contains("t1 -> s1 [label=\"gbk\"]"), "{dot}");
    assert!(dot.contains("s0 -> t1;"), "{dot}");
}

#[test]
fn an_unread_shuffle_is_not_planned() {
    let mut b = Builder::new();
    b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("pair", PAR_DO, &["a"], &["b"], true).leaf(
        "gbk",
        GROUP_BY_KEY,
        &["b"],
        &["c"],
        false,
    );
    let p = b.build();
    let g = PipelineGraph::new(&p).unwrap();
    let plan = TopologyPlan::plan(&g, "x", 2).unwrap();
    assert_eq!(plan.topics.len(), 1);
    assert!(plan.sub_topologies[0].outputs.is_empty());
    assert_eq!(plan.terminal_tasks().len(), 1);
}

#[test]
fn each_impulse_gets_its_own_topic() {
    let mut b = Builder::new();
    b.leaf("i1", IMPULSE, &[], &["a"], false).leaf("i2", IMPULSE, &[], &["b"], false).leaf("flatten", FLATTEN, &["a", "b"], &["c"], true);
    let p = b.build();
    let g = PipelineGraph::new(&p).unwrap();
    let plan = TopologyPlan::plan(&g, "x", 1).unwrap();
    let names: Vec<_> = plan.topics.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["__beam_x_impulse_0", "__beam_x_impulse_1"]);
    assert_eq!(plan.sub_topologies[0].inputs.len(), 2);
}

#[test]
fn a_group_by_key_fed_by_a_runner_transform_is_an_error() {
    let mut b = Builder::new();
    b.leaf("impulse", IMPULSE, &[], &["a"], false).leaf("gbk", GROUP_BY_KEY, &["a"], &["c"], false).leaf(
        "post",
        PAR_DO,
        &["c"],
        &["d"],
        true,
    );
    let p = b.build();
    let g = PipelineGraph::new(&p).unwrap();
    let err = TopologyPlan::plan(&g, "x", 1).unwrap_err();
    assert!(err.contains("impulse"), "{err}");
}

fn with_read_spec(p: &mut crate::pb::Pipeline, id: &str, topics: &[&str]) {
    use prost::Message;
    let spec = beam_kafka_proto::envelope::KafkaReadSpec { topics: topics.iter().map(|t| t.to_string()).collect(), ..Default::default() };
    let t = p.components.as_mut().unwrap().transforms.get_mut(id).unwrap();
    t.spec.as_mut().unwrap().payload = spec.encode_to_vec();
}

#[test]
fn a_kafka_read_feeds_its_stage_from_every_topic_and_a_write_is_a_sink() {
    let mut b = Builder::new();
    b.leaf("read", KAFKA_READ, &[], &["a"], false)
        .leaf("map", PAR_DO, &["a"], &["b"], true)
        .leaf("gbk", GROUP_BY_KEY, &["b"], &["c"], false)
        .leaf("post", PAR_DO, &["c"], &["d"], true)
        .leaf("write", KAFKA_WRITE, &["d"], &["w"], false);
    let mut p = b.build();
    with_read_spec(&mut p, "read", &["in1", "in2"]);
    let g = PipelineGraph::new(&p).unwrap();
    let mut plan = TopologyPlan::plan(&g, "x", 2).unwrap();
    let first = &plan.sub_topologies[0];
    let sources: Vec<_> = first.inputs.iter().map(|i| (plan.topics[i.topic].name.as_str(), i.kind.clone())).collect();
    let read = InputKind::Source { transform: "read".into() };
    assert_eq!(sources, [("in1", read.clone()), ("in2", read)]);
    assert_eq!(plan.sub_topologies[1].sinks, [SubSink { pcollection: "d".into(), transform: "write".into() }]);
    // User topics are neither created nor deleted.
    let runner: Vec<_> = plan.runner_topics().map(|t| t.name.as_str()).collect();
    assert_eq!(runner, ["__beam_x_shuffle_0"]);
    // The broker's partition counts size the reading sub-topology.
    plan.resolve_source_partitions(&|t| Some(if t == "in1" { 4 } else { 3 })).unwrap();
    assert_eq!(plan.sub_topologies[0].partitions, 4);
    assert_eq!(plan.topics.iter().find(|t| t.kind == TopicKind::Shuffle).unwrap().upstream_partitions, 4);
    assert_eq!(plan.sub_topologies[1].partitions, 2);
    assert!(plan.describe(&g).contains("topic in2 via read"), "{}", plan.describe(&g));
}

#[test]
fn a_topic_read_twice_or_a_write_fed_by_a_runner_transform_is_an_error() {
    let mut b = Builder::new();
    b.leaf("r1", KAFKA_READ, &[], &["a"], false).leaf("r2", KAFKA_READ, &[], &["b"], false).leaf(
        "flatten",
        FLATTEN,
        &["a", "b"],
        &["c"],
        true,
    );
    let mut p = b.build();
    with_read_spec(&mut p, "r1", &["t"]);
    with_read_spec(&mut p, "r2", &["t"]);
    let g = PipelineGraph::new(&p).unwrap();
    let err = TopologyPlan::plan(&g, "x", 1).unwrap_err();
    assert!(err.contains("'t' is read by both"), "{err}");

    let mut b = Builder::new();
    b.leaf("read", KAFKA_READ, &[], &["a"], false).leaf("write", KAFKA_WRITE, &["a"], &["w"], false);
    let mut p = b.build();
    with_read_spec(&mut p, "read", &["t"]);
    let g = PipelineGraph::new(&p).unwrap();
    let err = TopologyPlan::plan(&g, "x", 1).unwrap_err();
    assert!(err.contains("put a step between"), "{err}");
}

/// Python's `Create` on a portable runner: Impulse, FlatMap, a Reshuffle
/// (its own GroupByKey) and a decoding Map, ending in `out`.
fn create(b: &mut Builder, impulse: &str, out: &str) {
    let pc = |s: &str| format!("{out}.{s}");
    b.leaf(impulse, IMPULSE, &[], &[&pc("imp")], false)
        .leaf(&pc("flatmap"), PAR_DO, &[&pc("imp")], &[&pc("enc")], true)
        .leaf(&pc("add_keys"), PAR_DO, &[&pc("enc")], &[&pc("keyed")], true)
        .leaf(&pc("reify"), PAR_DO, &[&pc("keyed")], &[&pc("reified")], true)
        .leaf(&pc("reshuffle"), GROUP_BY_KEY, &[&pc("reified")], &[&pc("grouped")], false)
        .leaf(&pc("restore"), PAR_DO, &[&pc("grouped")], &[&pc("restored")], true)
        .leaf(&pc("remove_keys"), PAR_DO, &[&pc("restored")], &[&pc("decoded")], true)
        .leaf(&pc("decode"), PAR_DO, &[&pc("decoded")], &[out], true);
}

/// `CombinePerKey(fn).with_hot_key_fanout(n)` reading `input`, as Python
/// 2.73 sends it: `combine(b, name, from, to)` adds one CombinePerKey.
fn hot_key_fanout(b: &mut Builder, input: &str, out: &str, combine: &dyn Fn(&mut Builder, &str, &str, &str)) {
    b.leaf("split", PAR_DO, &[input], &["cold", "hot"], true).leaf("window_discarding", WINDOW_INTO, &["hot"], &["hot_w"], true);
    combine(b, "pre", "hot_w", "pre_out");
    b.leaf("strip", PAR_DO, &["pre_out"], &["stripped"], true)
        .leaf("window_original", WINDOW_INTO, &["stripped"], &["hot_combined"], true)
        .leaf("flatten", FLATTEN, &["cold", "hot_combined"], &["both"], true);
    combine(b, "post", "both", out);
}

/// A CombinePerKey lifted by the SDK (batch): precombine, group, merge, extract.
fn lifted(b: &mut Builder, name: &str, from: &str, to: &str) {
    let pc = |s: &str| format!("{name}.{s}");
    b.leaf(&pc("precombine"), COMBINE_PER_KEY_PRECOMBINE, &[from], &[&pc("acc")], true)
        .leaf(&pc("group"), GROUP_BY_KEY, &[&pc("acc")], &[&pc("grouped")], false)
        .leaf(&pc("merge"), COMBINE_PER_KEY_MERGE_ACCUMULATORS, &[&pc("grouped")], &[&pc("merged")], true)
        .leaf(&pc("extract"), COMBINE_PER_KEY_EXTRACT_OUTPUTS, &[&pc("merged")], &[to], true);
}

/// A CombinePerKey as Python sends it in streaming: a composite of a
/// GroupByKey and a ParDo, which the runner lifts (`lift::lift_combiners`).
fn unlifted(b: &mut Builder, name: &str, from: &str, to: &str) {
    use prost::Message;
    let (gbk, values, grouped) = (format!("{name}.gbk"), format!("{name}.values"), format!("{name}.grouped"));
    b.leaf(&gbk, GROUP_BY_KEY, &[from], &[&grouped], false).leaf(&values, PAR_DO, &[&grouped], &[to], true);
    b.p.root_transform_ids.retain(|r| r != &gbk && r != &values);
    b.p.root_transform_ids.push(name.to_string());
    let c = b.p.components.as_mut().unwrap();
    let coder = |urn: &str, parts: &[&str]| crate::pb::Coder {
        spec: Some(crate::pb::FunctionSpec { urn: urn.into(), payload: vec![] }),
        component_coder_ids: parts.iter().map(|s| s.to_string()).collect(),
    };
    c.coders.insert("kv".into(), coder(crate::codec::coder::KV, &["bytes", "bytes"]));
    c.pcollections.get_mut(from).unwrap().coder_id = "kv".into();
    let payload = crate::pb::CombinePayload { combine_fn: None, accumulator_coder_id: "bytes".into() };
    let composite = crate::pb::PTransform {
        unique_name: name.to_string(),
        spec: Some(crate::pb::FunctionSpec { urn: "beam:transform:combine_per_key:v1".into(), payload: payload.encode_to_vec() }),
        subtransforms: vec![gbk, values],
        inputs: [("i0".to_string(), from.to_string())].into(),
        outputs: [("i0".to_string(), to.to_string())].into(),
        ..Default::default()
    };
    c.transforms.insert(name.to_string(), composite);
}

/// Every topic written by a sub-topology is read only by later ones.
fn assert_forward_only(plan: &TopologyPlan) {
    for s in &plan.sub_topologies {
        for o in &s.outputs {
            for r in plan.sub_topologies.iter().filter(|r| r.inputs.iter().any(|i| i.topic == o.topic)) {
                assert!(r.id > s.id, "sub-topology {} writes {}, read by sub-topology {}", s.id, plan.topics[o.topic].name, r.id);
            }
        }
    }
}

fn stage_of<'a>(plan: &'a TopologyPlan, transform: &str) -> &'a SubTopology {
    plan.sub_topologies.iter().find(|s| s.stage.transforms.iter().any(|t| t == transform)).unwrap()
}

#[test]
fn a_hot_key_fanout_in_batch_plans_without_a_sub_topology_reading_its_own_shuffle() {
    let mut b = Builder::new();
    create(&mut b, "impulse", "kvs");
    hot_key_fanout(&mut b, "kvs", "sums", &lifted);
    let p = b.build();
    let g = PipelineGraph::new(&p).unwrap();
    let plan = TopologyPlan::plan(&g, "x", 2).unwrap();
    assert_forward_only(&plan);
    let names: Vec<_> = plan.topics.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["__beam_x_impulse_0", "__beam_x_shuffle_0", "__beam_x_shuffle_1", "__beam_x_shuffle_2", "__beam_x_edge_0"]);
    // The Flatten joins the hot side after the first GroupByKey; the cold
    // values reach it through an edge topic.
    let (split, hot) = (stage_of(&plan, "split"), stage_of(&plan, "flatten"));
    assert_eq!(split.id, 1);
    assert_eq!(hot.stage.transforms, ["pre.merge", "pre.extract", "strip", "window_original", "flatten", "post.precombine"]);
    let edge = plan.topics.iter().position(|t| t.kind == TopicKind::Edge).unwrap();
    assert_eq!(plan.topics[edge].pcollection, "cold");
    assert!(split.outputs.iter().any(|o| o.topic == edge));
    assert!(hot.inputs.iter().any(|i| i.topic == edge && i.kind == InputKind::Direct));
    assert_eq!(stage_of(&plan, "post.merge").stage.transforms, ["post.merge", "post.extract"]);
}

#[test]
fn combine_globally_with_fanout_in_streaming_is_lifted_and_plans_without_a_cycle() {
    // CombineGlobally(sum).with_fanout(1): KeyWithVoid, the hot key fanout
    // (unlifted in streaming), UnKey, and InjectDefault reading the result
    // as a side input next to a second Create.
    let mut b = Builder::new();
    create(&mut b, "impulse", "values");
    b.leaf("key_with_void", PAR_DO, &["values"], &["keyed"], true);
    hot_key_fanout(&mut b, "keyed", "sums", &unlifted);
    b.leaf("unkey", PAR_DO, &["sums"], &["sum"], true);
    create(&mut b, "do_once", "once");
    b.leaf("inject_default", PAR_DO, &["once"], &["result"], true).side_input("inject_default", "side0", "sum");
    let mut p = b.build();
    assert_eq!(crate::plan::lift::lift_combiners(&mut p), 2);
    let g = PipelineGraph::new(&p).unwrap();
    let plan = TopologyPlan::plan(&g, "x", 2).unwrap();
    assert_forward_only(&plan);
    let hot = stage_of(&plan, "flatten");
    assert_eq!(hot.stage.transforms.first().map(String::as_str), Some("pre/lifted/Merge"));
    assert_ne!(stage_of(&plan, "split").id, hot.id);
    let side = plan.topics.iter().position(|t| t.kind == TopicKind::Side).unwrap();
    assert!(stage_of(&plan, "unkey").outputs.iter().any(|o| o.topic == side));
    assert_eq!(stage_of(&plan, "inject_default").side_inputs[0].topic, side);
}

#[test]
fn siblings_that_would_form_a_cycle_are_refused_with_a_fix() {
    let p = crate::plan::graph::test_pipelines::siblings_through_a_shuffle();
    let g = PipelineGraph::new(&p).unwrap();
    let err = TopologyPlan::plan(&g, "x", 1).unwrap_err();
    assert!(err.contains("read by two stages") && err.contains("Reshuffle"), "{err}");
}

fn two_shuffles() -> crate::pb::Pipeline {
    let mut b = Builder::new();
    b.leaf("impulse", IMPULSE, &[], &["a"], false)
        .leaf("pair", PAR_DO, &["a"], &["b"], true)
        .leaf("gbk", GROUP_BY_KEY, &["b"], &["c"], false)
        .leaf("post", PAR_DO, &["c"], &["d"], true)
        .leaf("gbk2", GROUP_BY_KEY, &["d"], &["e"], false)
        .leaf("last", PAR_DO, &["e"], &["f"], true);
    b.build()
}

#[test]
fn a_sub_topology_reading_a_topic_it_writes_is_refused() {
    let p = two_shuffles();
    let g = PipelineGraph::new(&p).unwrap();
    let mut plan = TopologyPlan::plan(&g, "x", 2).unwrap();
    plan.check_acyclic(&g).unwrap();
    // Sub-topology 1 reads shuffle_0 through `gbk`; make it write it too.
    plan.sub_topologies[1].outputs.push(SubOutput { pcollection: "b".into(), topic: 1 });
    let err = plan.check_acyclic(&g).unwrap_err();
    assert!(
        err.contains("sub-topology 1 (stage-1) writes __beam_x_shuffle_0 from 'pair', read via 'gbk' by sub-topology 1 (stage-1)"),
        "{err}"
    );
    assert!(err.contains("never finish"), "{err}");
}

#[test]
fn a_cycle_through_several_sub_topologies_or_a_side_input_is_refused() {
    let p = two_shuffles();
    let g = PipelineGraph::new(&p).unwrap();
    let mut plan = TopologyPlan::plan(&g, "x", 2).unwrap();
    // 1 writes shuffle_1 read by 2; 2 now writes shuffle_0, read by 1.
    plan.sub_topologies[2].outputs.push(SubOutput { pcollection: "b".into(), topic: 1 });
    let err = plan.check_acyclic(&g).unwrap_err();
    assert!(err.contains("sub-topology 1 (stage-1) writes __beam_x_shuffle_1 from 'post', read via 'gbk2' by sub-topology 2"), "{err}");
    assert!(err.contains("sub-topology 2 (stage-2) writes __beam_x_shuffle_0"), "{err}");

    let mut plan = TopologyPlan::plan(&g, "x", 2).unwrap();
    let topic = plan.topics.len();
    plan.topics.push(TopicPlan {
        name: "__beam_x_side_0".into(),
        kind: TopicKind::Side,
        partitions: 1,
        pcollection: "f".into(),
        upstream: "sub-2".into(),
        upstream_partitions: 2,
    });
    plan.sub_topologies[2].outputs.push(SubOutput { pcollection: "f".into(), topic });
    plan.sub_topologies[0].side_inputs.push(SubSideInput {
        topic,
        transform: "pair".into(),
        local_name: "s".into(),
        pcollection: "f".into(),
    });
    let err = plan.check_acyclic(&g).unwrap_err();
    assert!(err.contains("writes __beam_x_side_0 from 'last', read by sub-topology 0"), "{err}");
}

/// A TestStream payload of `coder` with no events on transform `id`.
fn with_test_stream(p: &mut crate::pb::Pipeline, id: &str, coder: &str) {
    use prost::Message;
    let payload = crate::pb::TestStreamPayload { coder_id: coder.into(), events: vec![], endpoint: None };
    let t = p.components.as_mut().unwrap().transforms.get_mut(id).unwrap();
    t.spec.as_mut().unwrap().payload = payload.encode_to_vec();
}

#[test]
fn a_test_stream_is_recoded_by_a_stage_of_its_own_and_awaits_the_terminal_tasks_it_reaches() {
    let mut b = Builder::new();
    b.leaf("ts", TEST_STREAM, &[], &["t"], false)
        .leaf("key", PAR_DO, &["t"], &["k"], true)
        .leaf("gbk", GROUP_BY_KEY, &["k"], &["g"], false)
        .leaf("out", PAR_DO, &["g"], &["o"], true)
        .leaf("impulse", IMPULSE, &[], &["a"], false)
        .leaf("other", PAR_DO, &["a"], &["b"], true);
    let mut p = b.build();
    let coder = p.components.as_ref().unwrap().pcollections["t"].coder_id.clone();
    with_test_stream(&mut p, "ts", &coder);
    let g = PipelineGraph::new(&p).unwrap();
    let plan = TopologyPlan::plan(&g, "app", 2).unwrap();
    let ts = plan.topics.iter().position(|t| t.kind == TopicKind::TestStream).expect("a TestStream topic");
    assert_eq!((plan.topics[ts].partitions, plan.topics[ts].upstream.as_str()), (1, "ts"));
    let recoder = plan.sub_topologies.iter().find(|s| s.inputs.iter().any(|i| i.topic == ts)).unwrap();
    assert!(recoder.stage.transforms.is_empty(), "only the recode stage reads the TestStream topic");
    assert_eq!(recoder.stage.input_coders, [("t".to_string(), coder)]);
    let keyer = stage_of(&plan, "key");
    assert_eq!(plan.topics[keyer.inputs[0].topic].kind, TopicKind::Edge, "the rest read the recoded elements");
    let out = stage_of(&plan, "out");
    let awaited = plan.test_stream_terminals();
    assert_eq!(awaited, (0..out.partitions).map(|p| TaskId { sub_topology: out.id, partition: p }).collect::<Vec<_>>());
    assert!(plan.terminal_tasks().len() > awaited.len(), "the impulse's branch is not awaited");
}

#[test]
fn a_test_stream_read_as_a_side_input_too_is_written_once_to_each_topic() {
    // Go's passert reads the TestStream's output as a main and a side input.
    let mut b = Builder::new();
    b.leaf("ts", TEST_STREAM, &[], &["t"], false)
        .leaf("count", PAR_DO, &["t"], &["c"], true)
        .leaf("impulse", IMPULSE, &[], &["a"], false)
        .leaf("check", PAR_DO, &["a"], &["d"], true)
        .side_input("check", "side0", "t");
    let mut p = b.build();
    let coder = p.components.as_ref().unwrap().pcollections["t"].coder_id.clone();
    with_test_stream(&mut p, "ts", &coder);
    let g = PipelineGraph::new(&p).unwrap();
    let plan = TopologyPlan::plan(&g, "app", 1).unwrap();
    let recoder = plan.sub_topologies.iter().find(|s| !s.stage.input_coders.is_empty()).unwrap();
    let mut written: Vec<usize> = recoder.outputs.iter().map(|o| o.topic).collect();
    let all = written.len();
    written.sort();
    written.dedup();
    assert_eq!(written.len(), all, "each topic once: {:?}", recoder.outputs);
    assert_eq!(all, 2, "the edge to `count` and the side topic");
}

/// A Flatten of no inputs (Java's `Flatten.pCollections()` of an empty
/// list, Python's `() | beam.Flatten(pipeline=p)`) used as a side input:
/// its output is a topic that holds only the end of event time, copied to
/// the side topic by a relay, so every sub-topology has an input and a
/// task that runs it (before, its stage had none and its readers hung).
#[test]
fn an_empty_flatten_is_a_topic_holding_only_the_end_of_event_time() {
    let mut b = Builder::new();
    b.leaf("impulse", IMPULSE, &[], &["a"], false)
        .leaf("empty", FLATTEN, &[], &["e"], true)
        .leaf("use", PAR_DO, &["a"], &["c"], true)
        .side_input("use", "side0", "e");
    let p = b.build();
    let g = PipelineGraph::new(&p).unwrap();
    let plan = TopologyPlan::plan(&g, "x", 2).unwrap();
    let empty = plan.topics.iter().find(|t| t.kind == TopicKind::Empty).expect("an empty topic");
    assert_eq!((empty.name.as_str(), empty.partitions, empty.upstream.as_str()), ("__beam_x_empty_0", 1, "empty"));
    assert!(plan.topics.iter().any(|t| t.kind == TopicKind::Side && t.pcollection == "e"), "{:#?}", plan.topics);
    for s in &plan.sub_topologies {
        assert!(!s.inputs.is_empty(), "sub-topology {} has no input: no task would run it", s.id);
        assert!(!s.stage.transforms.contains(&"empty".to_string()), "the Flatten runs in no stage");
    }
}

#[test]
fn a_task_id_reads_back_as_it_is_written() {
    let t = TaskId { sub_topology: 12, partition: 3 };
    assert_eq!(t.to_string().parse::<TaskId>(), Ok(t));
    for bad in ["12", "a_1", "1_", "1_2_3", "-1_2"] {
        assert!(bad.parse::<TaskId>().is_err(), "{bad}");
    }
}

#[test]
fn a_go_flatten_feeds_both_branches_edge_topics_to_one_stage_input() {
    // Go's harness reads one data input per bundle (see `runner_flatten`).
    let mut b = crate::plan::graph::test_pipelines::two_branches_flattened();
    b.leaf("gbk", GROUP_BY_KEY, &["f"], &["g"], false).leaf("after", PAR_DO, &["g"], &["out"], true);
    crate::plan::graph::test_pipelines::in_go(&mut b);
    let p = b.build();
    let g = PipelineGraph::new(&p).unwrap();
    let plan = TopologyPlan::plan(&g, "go", 2).unwrap();
    let flatten =
        plan.sub_topologies.iter().find(|s| s.inputs.iter().any(|i| i.pcollection == "f")).expect("a stage reads the Flatten's output");
    assert!(flatten.stage.transforms.is_empty(), "the runner flattens: {:?}", flatten.stage);
    let mut read: Vec<&str> = flatten.inputs.iter().map(|i| plan.topics[i.topic].pcollection.as_str()).collect();
    read.sort();
    assert_eq!(read, ["l", "r"], "each branch on its own edge topic");
    assert!(flatten
        .inputs
        .iter()
        .all(|i| plan.topics[i.topic].kind == TopicKind::Edge && plan.topics[i.topic].upstream.starts_with("sub-")));
    // It writes the Flatten's output on to the GroupByKey's shuffle.
    assert!(flatten.outputs.iter().any(|o| plan.topics[o.topic].kind == TopicKind::Shuffle && o.pcollection == "f"));
}
