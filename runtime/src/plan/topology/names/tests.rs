use super::*;
use crate::plan::graph::test_pipelines::Builder;
use crate::urns::*;

/// impulse → pair → group → count, and with `extra` a second grouping
/// planned before it (so fresh numbering shifts the first's names).
fn plan(extra: bool) -> (crate::pb::Pipeline, &'static str) {
    let mut b = Builder::new();
    if extra {
        b.leaf("a-impulse", IMPULSE, &[], &["x"], false)
            .leaf("a-pair", PAR_DO, &["x"], &["y"], true)
            .leaf("a-group", GROUP_BY_KEY, &["y"], &["z"], false)
            .leaf("a-sum", PAR_DO, &["z"], &["w"], true);
    }
    b.leaf("impulse", IMPULSE, &[], &["a"], false)
        .leaf("pair", PAR_DO, &["a"], &["b"], true)
        .leaf("group", GROUP_BY_KEY, &["b"], &["g"], false)
        .leaf("count", PAR_DO, &["g"], &["c"], true);
    (b.build(), "app")
}

fn planned(p: &crate::pb::Pipeline) -> (PipelineGraph<'_>, TopologyPlan) {
    let graph = PipelineGraph::new(p).unwrap();
    let plan = TopologyPlan::plan(&graph, "app", 2).unwrap();
    (graph, plan)
}

fn shuffle_of<'a>(plan: &'a TopologyPlan, graph: &PipelineGraph, gbk: &str) -> &'a str {
    let i = (0..plan.topics.len()).find(|i| plan.topic_identity(graph, *i) == format!("shuffle {gbk}")).unwrap();
    &plan.topics[i].name
}

fn reader_of(plan: &TopologyPlan, graph: &PipelineGraph, gbk: &str) -> u32 {
    plan.sub_topologies.iter().find(|s| plan.sub_topology_identity(graph, s) == format!("reader of shuffle {gbk}")).unwrap().id
}

#[test]
fn a_first_run_keeps_its_own_names_and_records_them() {
    let (p, _) = plan(false);
    let (graph, mut plan) = planned(&p);
    let before = plan.clone();
    let names = plan.inherit(&graph, &Names::default());
    assert_eq!(plan, before);
    assert_eq!(names.topics[&"shuffle group".to_string()], shuffle_of(&plan, &graph, "group"));
    assert_eq!(Names::from_lines(&names.to_lines()), names);
}

#[test]
fn a_later_version_keeps_the_names_of_what_it_still_has_and_numbers_the_rest_anew() {
    let (p1, _) = plan(false);
    let (g1, mut v1) = planned(&p1);
    let recorded = v1.inherit(&g1, &Names::default());
    let (p2, _) = plan(true);
    let (g2, mut v2) = planned(&p2);
    let fresh_shuffle = shuffle_of(&v2, &g2, "group").to_string();
    let names = v2.inherit(&g2, &recorded);
    assert_eq!(shuffle_of(&v2, &g2, "group"), shuffle_of(&v1, &g1, "group"), "the kept GroupByKey keeps its topic");
    assert_eq!(reader_of(&v2, &g2, "group"), reader_of(&v1, &g1, "group"), "and its reader its changelog");
    assert_ne!(shuffle_of(&v2, &g2, "a-group"), shuffle_of(&v1, &g1, "group"), "a new one gets a name never used");
    assert!(fresh_shuffle != shuffle_of(&v2, &g2, "group") || v1.topics.len() == v2.topics.len());
    // Names stay unique, and the writers' reports follow the renumbering.
    let mut topic_names: Vec<&String> = v2.topics.iter().map(|t| &t.name).collect();
    topic_names.sort();
    topic_names.dedup();
    assert_eq!(topic_names.len(), v2.topics.len());
    let mut ids: Vec<u32> = v2.sub_topologies.iter().map(|s| s.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), v2.sub_topologies.len());
    for s in &v2.sub_topologies {
        for o in &s.outputs {
            assert_eq!(v2.topics[o.topic].upstream, crate::plan::topology::sub_topology_source(s.id));
        }
    }
    assert!(names.retired_topics.is_empty() && names.retired_sub_topologies.is_empty());
    // Back to the first version: the second's additions retire, and a
    // third version adding them again gets new numbers, not their old ones.
    let (g1b, mut v1b) = planned(&p1);
    let back = v1b.inherit(&g1b, &names);
    assert_eq!(v1b, v1, "the first version's names come back");
    assert!(back.retired_topics.contains(shuffle_of(&v2, &g2, "a-group")));
    let (g3, mut v3) = planned(&p2);
    v3.inherit(&g3, &back);
    assert_ne!(shuffle_of(&v3, &g3, "a-group"), shuffle_of(&v2, &g2, "a-group"), "a retired name is never given again");
    assert!(!v3.sub_topologies.iter().any(|s| back.retired_sub_topologies.contains(&s.id)));
}

#[test]
fn any_text_survives_the_record() {
    let mut names = Names::default();
    for odd in ["a = b", "Split on \\n", "line\nbreak", "back\\slash\\", "x=y\\e"] {
        names.topics.insert(format!("shuffle {odd}"), "__beam_app_shuffle_0".into());
        names.aliases.insert(odd.to_string(), format!("{odd}~2"));
        names.retired_transforms.insert(odd.to_string());
    }
    assert_eq!(Names::from_lines(&names.to_lines()), names);
    assert!(names.to_lines().iter().all(|l| !l.contains('\n')));
}
