use super::*;
use crate::app::identity::{judge, manifest, Earlier, UpdateRequest, Verdict};
use crate::plan::graph::test_pipelines::Builder;
use crate::plan::graph::PipelineGraph;
use crate::plan::topology::TopologyPlan;
use crate::urns::*;

/// impulse → pair → [extra →] group → count [→ group2 → sum]; `varint`
/// codes the grouped PCollection with another coder.
fn version(extra: bool, varint: bool, second_group: bool) -> crate::pb::Pipeline {
    let mut b = Builder::new();
    b.leaf("impulse", IMPULSE, &[], &["impulse.out"], false).leaf("pair", PAR_DO, &["impulse.out"], &["pair.out"], true);
    let mut last = "pair.out";
    if extra {
        b.leaf("extra", PAR_DO, &["pair.out"], &["extra.out"], true);
        last = "extra.out";
    }
    b.leaf("group", GROUP_BY_KEY, &[last], &["group.out"], false).leaf("count", PAR_DO, &["group.out"], &["count.out"], true);
    if second_group {
        b.leaf("group2", GROUP_BY_KEY, &["count.out"], &["group2.out"], false).leaf("sum", PAR_DO, &["group2.out"], &["sum.out"], true);
    }
    if varint {
        let c = b.p.components.as_mut().unwrap();
        let spec = crate::pb::FunctionSpec { urn: "beam:coder:varint:v1".into(), payload: vec![] };
        c.coders.insert("varint".into(), crate::pb::Coder { spec: Some(spec), component_coder_ids: vec![] });
        c.pcollections.get_mut(last).unwrap().coder_id = "varint".into();
    }
    b.build()
}

/// The manifest of `p` planned after `earlier`'s names.
fn manifest_after(p: &crate::pb::Pipeline, earlier: &[String]) -> Vec<String> {
    let graph = PipelineGraph::new(p).unwrap();
    let mut plan = TopologyPlan::plan(&graph, "app", 2).unwrap();
    let names = plan.inherit(&graph, &Names::from_lines(earlier));
    manifest(&graph, &plan, &names)
}

#[test]
fn a_stateless_step_added_keeps_the_groupings_state() {
    let v1 = manifest_after(&version(false, false, false), &[]);
    let v2 = manifest_after(&version(true, false, false), &v1);
    let (problems, notes) = check(&v1, &v2, &Mapping::default());
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(notes.iter().any(|n| n == "'group' keeps its state"), "{notes:#?}");
}

#[test]
fn a_changed_coder_is_refused_naming_the_transform() {
    let v1 = manifest_after(&version(false, false, false), &[]);
    let v2 = manifest_after(&version(false, true, false), &v1);
    let (problems, _) = check(&v1, &v2, &Mapping::default());
    assert!(problems.iter().any(|p| p.starts_with("'group': what __beam_app_shuffle_") && p.contains("coded varint:v1")), "{problems:#?}");
    assert!(
        problems.iter().any(|p| p.starts_with("stateful 'group' changed how its state is read") && p.contains("input bytes:v1")),
        "{problems:#?}"
    );
}

#[test]
fn a_gone_grouping_is_refused_unless_dropped_and_a_new_one_starts_empty() {
    let v1 = manifest_after(&version(false, false, true), &[]);
    let v2 = manifest_after(&version(false, false, false), &v1);
    let (problems, _) = check(&v1, &v2, &Mapping::default());
    assert!(problems.iter().any(|p| p.starts_with("stateful 'group2' is gone")), "{problems:#?}");
    assert!(problems.iter().any(|p| p.starts_with("'group2' is gone, and __beam_app_shuffle_")), "{problems:#?}");
    let drop = Mapping::new(&[("group2".to_string(), String::new())].into_iter().collect());
    let (problems, notes) = check(&v1, &v2, &drop);
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(notes.iter().any(|n| n.contains("'group2' and its state are dropped")), "{notes:#?}");
    let v3 = manifest_after(&version(false, false, true), &v2);
    let (problems, notes) = check(&v2, &v3, &Mapping::default());
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(notes.iter().any(|n| n == "'group2' is new and starts with no state"), "{notes:#?}");
    assert_ne!(v1.iter().find(|l| l.ends_with(" = shuffle group2")), v3.iter().find(|l| l.ends_with(" = shuffle group2")));
}

#[test]
fn an_update_needs_asking_and_a_failed_one_rolls_back_to_the_version_before() {
    let v1 = manifest_after(&version(false, false, false), &[]);
    let v2 = manifest_after(&version(false, false, true), &v1);
    let asked = UpdateRequest { update: true, mapping: Mapping::default() };
    let latest = |m: &Vec<String>, previous: Option<&Vec<String>>| Earlier::Plan { manifest: m.clone(), previous: previous.cloned() };
    assert!(matches!(judge("app", &latest(&v1, None), &v2, &UpdateRequest::default()), Verdict::Refuse(w) if w.contains("--update")));
    assert!(matches!(judge("app", &latest(&v1, None), &v2, &asked), Verdict::Update { rollback: false, .. }));
    // v2 failed: v1 again, planned after v2's names, goes back.
    let back = manifest_after(&version(false, false, false), &v2);
    let Verdict::Update { notes, rollback: true } = judge("app", &latest(&v2, Some(&v1)), &back, &asked) else {
        panic!("a rollback is an update")
    };
    assert!(notes[0].contains("version before the latest"), "{notes:#?}");
    // Without the previous version on record, dropping group2 is refused.
    assert!(matches!(judge("app", &latest(&v2, None), &back, &asked), Verdict::Refuse(w) if w.contains("'group2' is gone")));
}

/// `version(false, false, false)` with the grouping named `name`.
fn renamed(name: &str) -> crate::pb::Pipeline {
    let mut p = version(false, false, false);
    let c = p.components.as_mut().unwrap();
    let mut t = c.transforms.remove("group").unwrap();
    t.unique_name = name.into();
    c.transforms.insert(name.into(), t);
    for r in p.root_transform_ids.iter_mut().filter(|r| *r == "group") {
        *r = name.into();
    }
    p
}

fn ids(p: &crate::pb::Pipeline) -> BTreeSet<String> {
    p.components.as_ref().unwrap().transforms.keys().cloned().collect()
}

#[test]
fn a_renamed_transform_keeps_its_id_and_state_and_the_rename_stays_on_record() {
    let v1 = manifest_after(&version(false, false, false), &[]);
    let mapping = Mapping::new(&[("group".to_string(), "Grouping".to_string())].into_iter().collect());
    let mut v2 = renamed("Grouping");
    let earlier = Names::from_lines(&v1);
    let asked = aliases(&earlier, &transform_ids(&v1), &mapping, &ids(&v2)).unwrap();
    assert_eq!(asked.get("Grouping").map(String::as_str), Some("group"));
    crate::plan::stable_ids::alias(&mut v2, &asked).unwrap();
    let graph = PipelineGraph::new(&v2).unwrap();
    let mut plan = TopologyPlan::plan(&graph, "app", 2).unwrap();
    let mut names = plan.inherit(&graph, &earlier);
    names.aliases = asked.clone();
    let m2 = manifest(&graph, &plan, &names);
    let (problems, notes) = check(&v1, &m2, &Mapping::default());
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(notes.iter().any(|n| n == "'group' keeps its state"), "{notes:#?}");
    // A copy restarted with the same flags finds the rename on record.
    let again = aliases(&Names::from_lines(&m2), &transform_ids(&m2), &mapping, &ids(&renamed("Grouping"))).unwrap();
    assert_eq!(again, asked);
    // Without the mapping, the next version still finds it.
    let next = aliases(&Names::from_lines(&m2), &transform_ids(&m2), &Mapping::default(), &ids(&renamed("Grouping"))).unwrap();
    assert_eq!(next, asked);
    // Names neither version has are refused.
    let typo = Mapping::new(&[("grup".to_string(), "Grouping".to_string())].into_iter().collect());
    let e = aliases(&earlier, &transform_ids(&v1), &typo, &ids(&renamed("Grouping"))).unwrap_err();
    assert!(e[0].contains("renames 'grup', which the earlier version does not have"), "{e:?}");
    let missing = Mapping::new(&[("group".to_string(), "Nope".to_string())].into_iter().collect());
    let e = aliases(&earlier, &transform_ids(&v1), &missing, &ids(&renamed("Grouping"))).unwrap_err();
    assert!(e[0].contains("to 'Nope', which this version does not have"), "{e:?}");
}

#[test]
fn a_name_whose_state_was_dropped_gets_a_new_id() {
    let v1 = manifest_after(&version(false, false, true), &[]);
    let mut earlier = Names::from_lines(&v1);
    earlier.retired_transforms.insert("group2".into());
    let given = aliases(&earlier, &transform_ids(&v1), &Mapping::default(), &ids(&version(false, false, true))).unwrap();
    assert_eq!(given.get("group2").map(String::as_str), Some("group2~2"));
    assert_eq!(stateful_ids(&v1), ["group".to_string(), "group2".to_string()].into_iter().collect());
}

#[test]
fn names_may_swap_and_an_earlier_name_used_again_gets_a_new_id() {
    let earlier_ids: BTreeSet<String> = ["A", "B", "Count/Pair"].iter().map(|s| s.to_string()).collect();
    let swap = Mapping::new(&[("A".to_string(), "B".to_string()), ("B".to_string(), "A".to_string())].into_iter().collect());
    let got = aliases(&Names::default(), &earlier_ids, &swap, &earlier_ids).unwrap();
    assert_eq!((got["A"].as_str(), got["B"].as_str()), ("B", "A"));
    // Count renamed Tally; later a new Count comes: it does not get Count's id.
    let mut earlier = Names::default();
    earlier.aliases.insert("Tally".into(), "Count".into());
    let now: BTreeSet<String> = ["Tally", "Tally/Pair", "Count", "Count/Pair"].iter().map(|s| s.to_string()).collect();
    let got = aliases(&earlier, &earlier_ids, &Mapping::default(), &now).unwrap();
    assert_eq!(got["Tally"], "Count");
    assert_eq!(got["Count"], "Count~2");
    let ids: BTreeSet<String> = now.iter().map(|id| crate::plan::stable_ids::aliased(&got, id)).collect();
    assert_eq!(ids.len(), now.len(), "every transform keeps an id of its own: {ids:?}");
}
