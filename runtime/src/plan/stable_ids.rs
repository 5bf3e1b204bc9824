//! Ids that survive a change of the pipeline.
//!
//! Python and Go number their transform and PCollection ids as they build
//! the proto (`ref_AppliedPTransform_Sum-GroupByKey_8`): a step added early
//! renumbers every later one. State is keyed by these ids (a user state
//! cell and a timer by transform, a held or deferred element by
//! PCollection), so a changed pipeline would no longer find its state.
//! Before anything reads the pipeline, its ids are rewritten as Java
//! already writes them: a transform by its unique name (unique by Beam's
//! rule), a PCollection by its producing leaf's id and output tag.
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::pb;

/// Rewrites every transform and PCollection id of `pipeline`; returns how
/// many ids changed.
pub fn rename(pipeline: &mut pb::Pipeline) -> usize {
    let Some(c) = pipeline.components.as_ref() else { return 0 };
    let transforms = transform_ids(c);
    let pcollections = pcollection_ids(c, &transforms);
    apply(pipeline, &transforms, &pcollections)
}

/// Gives transforms the ids an earlier version had for them: `aliases`
/// maps an id (a unique name, after `rename`), or what is under it, to the
/// id or prefix to use instead (a rename asked with
/// `--transform_name_mapping`, or a new id for a name whose earlier state
/// was dropped); PCollections follow their producers. Fails, changing
/// nothing, when two transforms would get one id.
pub fn alias(pipeline: &mut pb::Pipeline, aliases: &BTreeMap<String, String>) -> Result<usize, String> {
    let Some(c) = pipeline.components.as_ref() else { return Ok(0) };
    if aliases.is_empty() {
        return Ok(0);
    }
    let transforms: HashMap<String, String> = c.transforms.keys().map(|id| (id.clone(), aliased(aliases, id))).collect();
    let mut owners: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
    for (id, new) in &transforms {
        owners.entry(new).or_default().push(id);
    }
    if let Some((new, mut ids)) = owners.into_iter().find(|(_, ids)| ids.len() > 1) {
        ids.sort();
        return Err(format!("'{}' and '{}' would both take the place of the earlier '{new}': map only one of them to it", ids[0], ids[1]));
    }
    // A PCollection follows by the same prefix: `<producer>.<tag>`, and the
    // ones lifting and splittable DoFns made, `<composite>/…`. Others keep
    // their ids, whatever recomputing them would give.
    let pcollections: HashMap<String, String> = c.pcollections.keys().map(|id| (id.clone(), aliased(aliases, id))).collect();
    let distinct: HashSet<&String> = pcollections.values().collect();
    if distinct.len() != pcollections.len() {
        return Err("two PCollections would have one id: map fewer names".into());
    }
    Ok(apply(pipeline, &transforms, &pcollections))
}

/// `id` with the longest prefix `aliases` has for it replaced (a prefix
/// is a whole step of the name: followed by `/`, or by `.` and a
/// PCollection's tag).
pub fn aliased(aliases: &BTreeMap<String, String>, id: &str) -> String {
    let under = |k: &str| id == k || id.strip_prefix(k).is_some_and(|r| r.starts_with('/') || r.starts_with('.'));
    match aliases.iter().filter(|(k, _)| under(k)).max_by_key(|(k, _)| k.len()) {
        Some((k, v)) => format!("{v}{}", &id[k.len()..]),
        None => id.to_string(),
    }
}

/// Rewrites ids as `transforms` and `pcollections` say.
fn apply(pipeline: &mut pb::Pipeline, transforms: &HashMap<String, String>, pcollections: &HashMap<String, String>) -> usize {
    let Some(c) = pipeline.components.as_mut() else { return 0 };
    let changed = transforms.iter().filter(|(a, b)| a != b).count() + pcollections.iter().filter(|(a, b)| a != b).count();
    if changed == 0 {
        return 0;
    }
    let pc = |id: &String| pcollections.get(id).cloned().unwrap_or_else(|| id.clone());
    let tr = |id: &String| transforms.get(id).cloned().unwrap_or_else(|| id.clone());
    c.transforms = std::mem::take(&mut c.transforms)
        .into_iter()
        .map(|(id, mut t)| {
            t.subtransforms = t.subtransforms.iter().map(tr).collect();
            t.inputs = t.inputs.into_iter().map(|(k, v)| (k, pc(&v))).collect();
            t.outputs = t.outputs.into_iter().map(|(k, v)| (k, pc(&v))).collect();
            (tr(&id), t)
        })
        .collect();
    c.pcollections = std::mem::take(&mut c.pcollections).into_iter().map(|(id, p)| (pc(&id), p)).collect();
    pipeline.root_transform_ids = pipeline.root_transform_ids.iter().map(tr).collect();
    changed
}

/// A transform's new id: its unique name. One without a name, or sharing
/// it (an SDK that does not enforce Beam's rule), keeps its own id after
/// its name; nothing may end up with another's id.
fn transform_ids(c: &pb::Components) -> HashMap<String, String> {
    let mut by_name: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for (id, t) in &c.transforms {
        by_name.entry(t.unique_name.as_str()).or_default().push(id);
    }
    let mut taken = HashSet::new();
    let mut out = HashMap::new();
    // Uniquely named ones first: they get exactly their names.
    for (name, ids) in &by_name {
        if ids.len() == 1 && !name.is_empty() {
            taken.insert(name.to_string());
            out.insert(ids[0].clone(), name.to_string());
        }
    }
    for (name, ids) in &by_name {
        if ids.len() == 1 && !name.is_empty() {
            continue;
        }
        let mut ids = ids.clone();
        ids.sort();
        for id in ids {
            let new = free(&mut taken, if name.is_empty() { id.clone() } else { format!("{name}#{id}") });
            out.insert(id.clone(), new);
        }
    }
    out
}

/// A PCollection's new id: `<producer's new id>.<output tag>`, its leaf
/// producer's (the innermost transform listing it as an output).
fn pcollection_ids(c: &pb::Components, transforms: &HashMap<String, String>) -> HashMap<String, String> {
    let mut producer: HashMap<&String, (&String, &String)> = HashMap::new();
    let mut leaves: Vec<(&String, &pb::PTransform)> = c.transforms.iter().filter(|(_, t)| t.subtransforms.is_empty()).collect();
    leaves.sort_by_key(|(id, _)| *id);
    for (id, t) in leaves {
        for (tag, pc) in &t.outputs {
            producer.entry(pc).or_insert((id, tag));
        }
    }
    let mut taken: HashSet<String> = HashSet::new();
    let mut ids: Vec<&String> = c.pcollections.keys().collect();
    ids.sort();
    // Produced ones first, so that an unproduced one (kept as it is)
    // never takes a produced one's name.
    ids.sort_by_key(|id| !producer.contains_key(id));
    let mut out = HashMap::new();
    for id in ids {
        let wanted = match producer.get(id) {
            Some((t, tag)) => format!("{}.{tag}", transforms.get(*t).map_or(t.as_str(), String::as_str)),
            None => id.clone(),
        };
        out.insert(id.clone(), free(&mut taken, wanted));
    }
    out
}

/// `wanted`, or it with the first free `#n` after it.
fn free(taken: &mut HashSet<String>, wanted: String) -> String {
    let mut name = wanted.clone();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{wanted}#{n}");
        n += 1;
    }
    taken.insert(name.clone());
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::graph::test_pipelines::Builder;
    use crate::urns::*;

    fn named(b: &mut Builder, id: &str, name: &str) {
        b.p.components.as_mut().unwrap().transforms.get_mut(id).unwrap().unique_name = name.into();
    }

    /// Python's numbering: `extra` adds a step before the others.
    fn pythonic(extra: bool) -> pb::Pipeline {
        let mut b = Builder::new();
        let n = if extra { 1 } else { 0 };
        let id = |label: &str, k: usize| format!("ref_AppliedPTransform_{label}_{}", k + n);
        let pcid = |k: usize| format!("ref_PCollection_PCollection_{}", k + n);
        b.leaf(&id("Impulse", 1), IMPULSE, &[], &["ref_PCollection_PCollection_1"], false);
        named(&mut b, &id("Impulse", 1), "Impulse");
        let mut last = "ref_PCollection_PCollection_1".to_string();
        if extra {
            b.leaf("ref_AppliedPTransform_Extra_2", PAR_DO, &[&last], &["ref_PCollection_PCollection_2"], true);
            named(&mut b, "ref_AppliedPTransform_Extra_2", "Extra");
            last = "ref_PCollection_PCollection_2".into();
        }
        b.leaf(&id("Count", 2), PAR_DO, &[&last], &[&pcid(2)], true);
        named(&mut b, &id("Count", 2), "Count");
        b.build()
    }

    #[test]
    fn ids_follow_unique_names_so_a_step_added_before_keeps_the_others() {
        let (mut before, mut after) = (pythonic(false), pythonic(true));
        assert!(rename(&mut before) > 0);
        rename(&mut after);
        let ids = |p: &pb::Pipeline| {
            let mut v: Vec<String> = p.components.as_ref().unwrap().transforms.keys().cloned().collect();
            v.sort();
            v
        };
        assert_eq!(ids(&before), ["Count", "Impulse"]);
        assert_eq!(ids(&after), ["Count", "Extra", "Impulse"]);
        let c = before.components.as_ref().unwrap();
        assert_eq!(c.transforms["Count"].inputs["i0"], "Impulse.i0", "a PCollection is named by its producer and tag");
        assert_eq!(c.transforms["Count"].outputs["i0"], "Count.i0");
        assert!(c.pcollections.contains_key("Count.i0") && c.pcollections.contains_key("Impulse.i0"));
        assert_eq!(after.components.as_ref().unwrap().transforms["Count"].outputs["i0"], "Count.i0");
        let mut roots = before.root_transform_ids.clone();
        roots.sort();
        assert_eq!(roots, ["Count", "Impulse"]);
        assert_eq!(rename(&mut before), 0, "renaming twice changes nothing");
    }

    #[test]
    fn composites_point_at_renamed_parts_and_produce_no_name_of_their_own() {
        let mut b = Builder::new();
        b.leaf("e1", IMPULSE, &[], &["n1"], false).leaf("e2", PAR_DO, &["n1"], &["n2"], true);
        named(&mut b, "e1", "Read/Impulse");
        named(&mut b, "e2", "Read/Parse");
        let c = b.p.components.as_mut().unwrap();
        let mut comp = c.transforms["e2"].clone();
        comp.unique_name = "Read".into();
        comp.subtransforms = vec!["e1".into(), "e2".into()];
        comp.inputs.clear();
        comp.spec = None;
        c.transforms.insert("s1".into(), comp);
        b.p.root_transform_ids = vec!["s1".into()];
        let mut p = b.build();
        rename(&mut p);
        let c = p.components.as_ref().unwrap();
        assert_eq!(c.transforms["Read"].subtransforms, ["Read/Impulse", "Read/Parse"]);
        assert_eq!(c.transforms["Read"].outputs["i0"], "Read/Parse.i0", "named by the leaf, not the composite");
        assert_eq!(p.root_transform_ids, ["Read"]);
    }

    #[test]
    fn aliases_give_a_renamed_transform_and_its_parts_their_earlier_ids() {
        let mut b = Builder::new();
        b.leaf("Tally/Pair", PAR_DO, &["in"], &["p"], true).leaf("Tally/Group", GROUP_BY_KEY, &["p"], &["g"], false);
        let mut p = b.build();
        rename(&mut p);
        let aliases: BTreeMap<String, String> = [("Tally".to_string(), "Count".to_string())].into_iter().collect();
        assert_eq!(alias(&mut p, &aliases), Ok(4));
        let c = p.components.as_ref().unwrap();
        assert!(c.transforms.contains_key("Count/Pair") && c.transforms.contains_key("Count/Group"));
        assert_eq!(c.transforms["Count/Group"].inputs["i0"], "Count/Pair.i0");
        assert_eq!(c.transforms["Count/Group"].unique_name, "Tally/Group", "names stay the user's");
        assert_eq!(aliased(&aliases, "Tallyho"), "Tallyho", "a prefix is a whole step of the name");
        let clash: BTreeMap<String, String> = [("Count/Pair".to_string(), "Count/Group".to_string())].into_iter().collect();
        let before = p.clone();
        assert!(alias(&mut p, &clash)
            .unwrap_err()
            .contains("'Count/Group' and 'Count/Pair' would both take the place of the earlier 'Count/Group'"));
        assert_eq!(p, before, "a refused alias changes nothing");
    }

    #[test]
    fn shared_or_missing_names_keep_ids_that_collide_with_nothing() {
        let mut b = Builder::new();
        b.leaf("a", IMPULSE, &[], &["p1"], false).leaf("b", PAR_DO, &["p1"], &["p2"], true).leaf("c", PAR_DO, &["p2"], &["p3"], true);
        named(&mut b, "a", "b");
        named(&mut b, "b", "Same");
        named(&mut b, "c", "Same");
        let mut p = b.build();
        rename(&mut p);
        let mut ids: Vec<String> = p.components.as_ref().unwrap().transforms.keys().cloned().collect();
        ids.sort();
        assert_eq!(ids, ["Same#b", "Same#c", "b"]);
        let mut no_name = Builder::new();
        no_name.leaf("x", IMPULSE, &[], &["q"], false);
        named(&mut no_name, "x", "");
        let mut p = no_name.build();
        rename(&mut p);
        assert!(p.components.as_ref().unwrap().transforms.contains_key("x"));
    }
}
