use super::*;
use crate::graph::test_pipelines::Builder;
use crate::graph::PipelineGraph;
use crate::identity::{judge, manifest, Earlier, UpdateRequest, Verdict};
use crate::topology::TopologyPlan;
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
    let rename = Mapping::new(&[("group2".to_string(), "tally".to_string())].into_iter().collect());
    let (problems, _) = check(&v1, &v2, &rename);
    assert!(problems.iter().any(|p| p.contains("renames 'group2' to 'tally'")), "{problems:#?}");
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
    assert!(matches!(judge("app", &latest(&v1, None), &v2, &asked), Verdict::Update(_)));
    // v2 failed: v1 again, planned after v2's names, goes back.
    let back = manifest_after(&version(false, false, false), &v2);
    let Verdict::Update(notes) = judge("app", &latest(&v2, Some(&v1)), &back, &asked) else { panic!("a rollback is an update") };
    assert!(notes[0].contains("version before the latest"), "{notes:#?}");
    // Without the previous version on record, dropping group2 is refused.
    assert!(matches!(judge("app", &latest(&v2, None), &back, &asked), Verdict::Refuse(w) if w.contains("'group2' is gone")));
}
