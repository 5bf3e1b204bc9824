//! The shape a submitted pipeline must have before anything walks it:
//! composites form a tree, coders refer to no coder that contains them, and
//! nothing is nested or counted beyond what a real pipeline needs. Every
//! later pass (lifting, planning, coder reading) may then recurse without a
//! stack to overflow or a cycle to follow forever.
use std::collections::HashMap;

use crate::codec::coder::MAX_CODER_NESTING;
use crate::pb;

/// Composite transforms nested deeper than this are refused (Beam's own
/// pipelines nest a few levels; each level is a stack frame somewhere).
pub const MAX_TRANSFORM_NESTING: usize = 256;
/// Transforms, PCollections or coders in one pipeline.
pub const MAX_COMPONENTS: usize = 200_000;

/// Checks the pipeline's shape; the error says what is wrong, for the user.
pub fn check(pipeline: &pb::Pipeline) -> Result<(), String> {
    let c = pipeline.components.as_ref().ok_or("the pipeline has no components")?;
    for (what, n) in [("transforms", c.transforms.len()), ("PCollections", c.pcollections.len()), ("coders", c.coders.len())] {
        if n > MAX_COMPONENTS {
            return Err(format!("the pipeline has {n} {what}; at most {MAX_COMPONENTS} are accepted"));
        }
    }
    if let Some(id) = c.coders.keys().find(|id| id.contains(crate::codec::coder::RUNNER_CODER_SUFFIX)) {
        return Err(format!("coder id '{id}' uses a name reserved for the runner's own coders"));
    }
    check_transform_tree(pipeline, c)?;
    check_every_composite(c)?;
    check_coders(c)
}

/// Every root and subtransform exists, no transform contains itself, and no
/// transform has two parents.
fn check_transform_tree(pipeline: &pb::Pipeline, c: &pb::Components) -> Result<(), String> {
    let mut parent: HashMap<&str, &str> = HashMap::new();
    // Depth-first with an explicit stack of (transform, depth, parent).
    let mut stack: Vec<(&str, usize, &str)> = pipeline.root_transform_ids.iter().map(|id| (id.as_str(), 1, "")).collect();
    while let Some((id, depth, from)) = stack.pop() {
        if depth > MAX_TRANSFORM_NESTING {
            return Err(format!("transform '{id}' is nested {depth} composites deep; at most {MAX_TRANSFORM_NESTING} are accepted"));
        }
        if let Some(earlier) = parent.insert(id, from) {
            return Err(if earlier == from {
                format!("transform '{id}' is listed twice under '{from}'")
            } else {
                format!("transform '{id}' is part of both '{earlier}' and '{from}' (or contains itself)")
            });
        }
        let t = c.transforms.get(id).ok_or_else(|| format!("the pipeline refers to a missing transform '{id}'"))?;
        stack.extend(t.subtransforms.iter().map(|s| (s.as_str(), depth + 1, id)));
    }
    Ok(())
}

/// Every transform, reachable from the roots or not (passes such as
/// combiner lifting look at all of them): no composite contains itself,
/// directly or deeper, and none nests too deeply. One depth-first walk.
fn check_every_composite(c: &pb::Components) -> Result<(), String> {
    // None while on the walk's path, Some(()) once done.
    let mut seen: HashMap<&str, Option<()>> = HashMap::new();
    let mut ids: Vec<&String> = c.transforms.keys().collect();
    ids.sort();
    for id in ids {
        if seen.contains_key(id.as_str()) {
            continue;
        }
        seen.insert(id, None);
        let mut stack: Vec<(&str, usize)> = vec![(id.as_str(), 0)];
        while let Some((cur, next)) = stack.last_mut() {
            let t = &c.transforms[*cur];
            match t.subtransforms.get(*next) {
                Some(sub) => {
                    *next += 1;
                    if !c.transforms.contains_key(sub) {
                        return Err(format!("transform '{cur}' lists a missing subtransform '{sub}'"));
                    }
                    match seen.get(sub.as_str()) {
                        Some(None) => return Err(format!("transform '{sub}' contains itself")),
                        Some(Some(())) => {}
                        None => {
                            if stack.len() >= MAX_TRANSFORM_NESTING {
                                return Err(format!("transform '{sub}' is nested more than {MAX_TRANSFORM_NESTING} composites deep"));
                            }
                            seen.insert(sub, None);
                            stack.push((sub.as_str(), 0));
                        }
                    }
                }
                None => {
                    seen.insert(cur, Some(()));
                    stack.pop();
                }
            }
        }
    }
    Ok(())
}

/// Checks every coder: each refers only to coders that exist, none contains
/// itself, and none nests too deeply. One depth-first walk with memoised
/// depths, so coders sharing parts are not walked once per path.
fn check_coders(c: &pb::Components) -> Result<(), String> {
    // depth[id]: None while being walked (on the stack), Some when done.
    let mut depth: HashMap<&str, Option<usize>> = HashMap::new();
    let mut ids: Vec<&String> = c.coders.keys().collect();
    ids.sort();
    for id in ids {
        if depth.contains_key(id.as_str()) {
            continue;
        }
        // (coder, index of the next part to visit)
        let mut stack: Vec<(&str, usize)> = vec![(id.as_str(), 0)];
        depth.insert(id, None);
        while let Some((cur, next)) = stack.last_mut() {
            let coder = &c.coders[*cur];
            match coder.component_coder_ids.get(*next) {
                Some(part) => {
                    *next += 1;
                    let owner = *cur;
                    if !c.coders.contains_key(part) {
                        return Err(format!("coder '{owner}' refers to a missing coder '{part}'"));
                    }
                    match depth.get(part.as_str()) {
                        Some(None) => return Err(format!("coder '{part}' contains itself")),
                        Some(Some(_)) => {}
                        None => {
                            depth.insert(part, None);
                            stack.push((part.as_str(), 0));
                        }
                    }
                }
                None => {
                    let parts = coder.component_coder_ids.iter().filter_map(|p| depth.get(p.as_str()).copied().flatten());
                    let d = 1 + parts.max().unwrap_or(0);
                    if d > MAX_CODER_NESTING {
                        return Err(format!("coder '{cur}' is nested more than {MAX_CODER_NESTING} coders deep"));
                    }
                    depth.insert(cur, Some(d));
                    stack.pop();
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transform(subs: &[&str]) -> pb::PTransform {
        pb::PTransform { subtransforms: subs.iter().map(|s| s.to_string()).collect(), ..Default::default() }
    }

    fn pipeline(transforms: &[(&str, &[&str])], roots: &[&str]) -> pb::Pipeline {
        let mut c = pb::Components::default();
        for (id, subs) in transforms {
            c.transforms.insert(id.to_string(), transform(subs));
        }
        pb::Pipeline { components: Some(c), root_transform_ids: roots.iter().map(|r| r.to_string()).collect(), ..Default::default() }
    }

    fn coder(p: &mut pb::Pipeline, id: &str, parts: &[&str]) {
        let c = pb::Coder {
            spec: Some(pb::FunctionSpec { urn: crate::codec::coder::KV.into(), payload: vec![] }),
            component_coder_ids: parts.iter().map(|s| s.to_string()).collect(),
        };
        p.components.as_mut().unwrap().coders.insert(id.into(), c);
    }

    #[test]
    fn a_tree_of_composites_passes() {
        let p = pipeline(&[("root", &["a", "b"]), ("a", &["a1"]), ("a1", &[]), ("b", &[])], &["root"]);
        assert_eq!(check(&p), Ok(()));
    }

    #[test]
    fn a_composite_containing_itself_is_refused() {
        let p = pipeline(&[("root", &["a"]), ("a", &["root"])], &["root"]);
        assert!(check(&p).unwrap_err().contains("'root'"), "{:?}", check(&p));
        let p = pipeline(&[("root", &["a", "b"]), ("a", &["c"]), ("b", &["c"]), ("c", &[])], &["root"]);
        assert!(check(&p).unwrap_err().contains("both"));
        let p = pipeline(&[("root", &["missing"])], &["root"]);
        assert!(check(&p).unwrap_err().contains("missing transform 'missing'"));
    }

    #[test]
    fn a_composite_no_root_reaches_is_checked_too() {
        // Found in review: combiner lifting walked an unreachable composite
        // containing itself until the stack overflowed.
        let p = pipeline(&[("root", &[]), ("stray", &["loop"]), ("loop", &["loop"])], &["root"]);
        assert!(check(&p).unwrap_err().contains("'loop' contains itself"), "{:?}", check(&p));
    }

    #[test]
    fn nesting_is_bounded_without_recursion() {
        let ids: Vec<String> = (0..=MAX_TRANSFORM_NESTING).map(|i| format!("t{i}")).collect();
        let mut c = pb::Components::default();
        for (i, id) in ids.iter().enumerate() {
            c.transforms
                .insert(id.clone(), pb::PTransform { subtransforms: ids.get(i + 1).cloned().into_iter().collect(), ..Default::default() });
        }
        let p = pb::Pipeline { components: Some(c), root_transform_ids: vec!["t0".into()], ..Default::default() };
        assert!(check(&p).unwrap_err().contains("nested"));
    }

    #[test]
    fn coders_that_contain_themselves_or_nest_too_deeply_are_refused() {
        let mut p = pipeline(&[], &[]);
        coder(&mut p, "kv", &["a", "b"]);
        coder(&mut p, "a", &[]);
        coder(&mut p, "b", &["a"]);
        assert_eq!(check(&p), Ok(()));
        coder(&mut p, "loop", &["a", "loop"]);
        assert_eq!(check(&p), Err("coder 'loop' contains itself".into()));
        let mut p = pipeline(&[], &[]);
        coder(&mut p, "x", &["gone"]);
        assert!(check(&p).unwrap_err().contains("missing coder 'gone'"));
        let mut p = pipeline(&[], &[]);
        for i in 0..=MAX_CODER_NESTING {
            let next = [format!("c{}", i + 1)];
            let parts: Vec<&str> = next.iter().map(String::as_str).take(usize::from(i < MAX_CODER_NESTING)).collect();
            coder(&mut p, &format!("c{i}"), &parts);
        }
        assert!(check(&p).unwrap_err().contains("nested more than"));
    }

    #[test]
    fn a_client_coder_cannot_take_a_runner_coder_name() {
        // Found by the coder fuzz target: a client coder named like the
        // runner's length-prefixed version of another was used in its place.
        let mut p = pipeline(&[], &[]);
        coder(&mut p, "c/beam-kafka-lp", &[]);
        assert!(check(&p).unwrap_err().contains("reserved"));
    }

    #[test]
    fn coders_sharing_parts_are_walked_once() {
        // kv(c{i+1}, c{i+1}) down 60 levels: 2^60 paths, 61 coders.
        let mut p = pipeline(&[], &[]);
        for i in 0..60 {
            let next = format!("c{}", i + 1);
            coder(&mut p, &format!("c{i}"), &[next.as_str(), next.as_str()]);
        }
        coder(&mut p, "c60", &[]);
        assert_eq!(check(&p), Ok(()));
    }
}
