//! Whether a new version of a pipeline may take over what the running (or
//! stopped) version left under its application id (`--update`).
//!
//! Both versions are compared by their plan manifests (`identity`): the
//! new one was planned with the earlier one's names (`topology::names`),
//! so a topic or a stateful transform both versions have is under the same
//! name in both. What the new version would misread or lose is refused,
//! naming the transform: a stateful transform whose coders, windowing or
//! state cells changed, or that moved to another sub-topology (its state
//! lives in that one's changelog); a stateful transform or a GroupByKey
//! or edge topic that is gone (its state, or the records in flight on it,
//! would be lost) unless dropped on purpose; another partition count. A
//! stateless step added, removed or changed, and a stateful one added,
//! are compatible.
use std::collections::{BTreeMap, BTreeSet};

use crate::plan::topology::names::Names;

/// What the user asked for with `--transform_name_mapping`: transforms
/// mapped to "" are dropped with their state (and what is under them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    pub renamed: BTreeMap<String, String>,
    pub dropped: BTreeSet<String>,
}

impl Mapping {
    pub fn new(pairs: &BTreeMap<String, String>) -> Mapping {
        let (dropped, renamed): (Vec<_>, Vec<_>) = pairs.iter().partition(|(_, new)| new.is_empty());
        Mapping {
            renamed: renamed.into_iter().map(|(a, b)| (a.clone(), b.clone())).collect(),
            dropped: dropped.into_iter().map(|(a, _)| a.clone()).collect(),
        }
    }

    fn drops(&self, transform: &str) -> bool {
        self.dropped.iter().any(|d| transform == d || transform.strip_prefix(d.as_str()).is_some_and(|r| r.starts_with('/')))
    }
}

/// The transform ids a manifest lists.
pub fn transform_ids(manifest: &[String]) -> BTreeSet<String> {
    manifest.iter().filter_map(|l| l.strip_prefix("transform ")).map(str::to_string).collect()
}

/// The stateful transforms a manifest lists.
pub fn stateful_ids(manifest: &[String]) -> BTreeSet<String> {
    parts(manifest).states.keys().map(|t| t.to_string()).collect()
}

/// The aliases (`stable_ids::alias`) this version runs with, given the
/// ids of its transforms as submitted (`ids_now`): the earlier version's,
/// each rename asked (the new name takes the id its earlier name had), and
/// a new id for each transform whose id names dropped state. A rename
/// already on record (a copy restarted with the same flags) is kept as it
/// is. Errors name each rename that cannot be.
pub fn aliases(
    earlier: &Names,
    earlier_ids: &BTreeSet<String>,
    mapping: &Mapping,
    ids_now: &BTreeSet<String>,
) -> Result<BTreeMap<String, String>, Vec<String>> {
    use crate::plan::stable_ids::aliased;
    let under = |id: &str, prefix: &str| id == prefix || id.strip_prefix(prefix).is_some_and(|r| r.starts_with('/'));
    let has = |ids: &BTreeSet<String>, prefix: &str| ids.iter().any(|i| under(i, prefix));
    let mut renames = Vec::new();
    let mut problems = Vec::new();
    for (old, new) in &mapping.renamed {
        let id = aliased(&earlier.aliases, old);
        if earlier.aliases.get(new) == Some(&id) {
            continue;
        }
        if !has(earlier_ids, &id) {
            problems.push(format!("--transform_name_mapping renames '{old}', which the earlier version does not have"));
        } else if !has(ids_now, new) {
            problems.push(format!("--transform_name_mapping renames '{old}' to '{new}', which this version does not have"));
        } else {
            renames.push((old, new, id));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    // All at once, so that names may swap: an earlier name renamed again
    // gives up its own aliases.
    let mut aliases = earlier.aliases.clone();
    aliases.retain(|k, _| !renames.iter().any(|(old, _, _)| under(k, old)));
    for (_, new, id) in renames {
        aliases.insert(new.clone(), id);
    }
    // A transform not renamed whose id is retired (its state dropped), or
    // taken by a renamed one (an earlier name used again), gets a new id.
    let taken: BTreeSet<String> = ids_now.iter().map(|id| aliased(&aliases, id)).collect();
    let mut used: BTreeSet<String> =
        earlier_ids.iter().chain(&earlier.retired_transforms).chain(aliases.values()).chain(&taken).cloned().collect();
    for id in ids_now {
        let renamed = aliased(&aliases, id) != *id;
        let clashes = ids_now.iter().any(|other| other != id && aliased(&aliases, other) == *id);
        if !renamed && (earlier.retired_transforms.contains(id) || clashes) {
            let fresh = (2..).map(|k| format!("{id}~{k}")).find(|f| !used.contains(f)).expect("a free id");
            used.insert(fresh.clone());
            aliases.insert(id.clone(), fresh);
        }
    }
    Ok(aliases)
}

/// A manifest taken apart: topics and sub-topologies by name, stateful
/// transforms by id, and the names table.
struct Parts<'a> {
    topics: BTreeMap<&'a str, &'a str>,
    sub_partitions: BTreeMap<&'a str, &'a str>,
    states: BTreeMap<&'a str, &'a str>,
    names: Names,
}

fn parts(lines: &[String]) -> Parts<'_> {
    let mut p =
        Parts { topics: BTreeMap::new(), sub_partitions: BTreeMap::new(), states: BTreeMap::new(), names: Names::from_lines(lines) };
    for l in lines {
        if let Some((name, what)) = l.strip_prefix("topic ").and_then(|r| r.split_once(": ")) {
            p.topics.insert(name, what);
        } else if let Some((id, what)) = l.strip_prefix("sub-topology ").and_then(|r| r.split_once(": ")) {
            p.sub_partitions.insert(id, what.split(',').next().unwrap_or(what));
        } else if let Some(rest) = l.strip_prefix("state ") {
            let at = [": GroupByKey in ", ": user state in "].iter().filter_map(|m| rest.find(m)).min();
            if let Some(at) = at {
                p.states.insert(&rest[..at], &rest[at + 2..]);
            }
        }
    }
    p
}

/// The transform a topic belongs to, from its identity.
fn owner(identity: &str) -> String {
    let after = |p: &str| identity.strip_prefix(p).map(str::to_string);
    if let Some(edge) = identity.strip_prefix("edge to ") {
        let end = [" input ", " of "].iter().filter_map(|m| edge.rfind(m)).max().unwrap_or(edge.len());
        return edge[..end].to_string();
    }
    let pc = |s: String| s.rsplit_once('.').map_or(s.clone(), |(p, _)| p.to_string());
    after("shuffle ")
        .or_else(|| after("impulse "))
        .or_else(|| after("empty "))
        .or_else(|| after("side ").map(pc))
        .or_else(|| after("teststream ").map(pc))
        .unwrap_or_else(|| identity.to_string())
}

/// What differs between two `; `-separated descriptions, part by part.
fn changed_parts(earlier: &str, now: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (earlier.split("; ").collect(), now.split("; ").collect());
    let (sa, sb): (BTreeSet<&str>, BTreeSet<&str>) = (a.iter().copied().collect(), b.iter().copied().collect());
    let gone: Vec<&str> = a.iter().copied().filter(|x| !sb.contains(x)).collect();
    let new: Vec<&str> = b.iter().copied().filter(|x| !sa.contains(x)).collect();
    format!("earlier [{}], now [{}]", gone.join("; "), new.join("; "))
}

/// Why `now` cannot take over from `earlier` (empty: it can), and what
/// the update does, for the job's messages.
pub fn check(earlier: &[String], now: &[String], mapping: &Mapping) -> (Vec<String>, Vec<String>) {
    let (e, n) = (parts(earlier), parts(now));
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let identity_of = |name: &str| e.names.topics.iter().find(|(_, v)| v.as_str() == name).map(|(i, _)| i.clone());
    for (name, what) in &e.topics {
        let Some(identity) = identity_of(name) else { continue };
        let owner = owner(&identity);
        match n.topics.get(name) {
            Some(now_what) if now_what != what => problems.push(format!(
                "'{owner}': what {name} carries changed (earlier {what}; now {now_what}): the records on it could not be read"
            )),
            Some(_) => {}
            None if mapping.drops(&owner) => notes.push(format!("{name} of '{owner}' is dropped, as mapped")),
            None if identity.starts_with("shuffle ") || identity.starts_with("edge ") => problems.push(format!(
                "'{owner}' is gone, and {name} may hold records in flight to it that this version would not read; \
                 map it to \"\" in --transform_name_mapping to drop them"
            )),
            None => notes.push(format!("{name} ({identity}) is no longer used")),
        }
    }
    for (t, what) in &e.states {
        match n.states.get(t) {
            Some(now_what) if now_what != what => {
                let (ea, na) = (what.split("; ").next().unwrap_or(""), now_what.split("; ").next().unwrap_or(""));
                if ea != na {
                    problems.push(format!(
                        "stateful '{t}' moved (earlier {ea}, now {na}): its state is in the earlier one's changelog, \
                         which this runner cannot move yet"
                    ));
                } else {
                    problems.push(format!("stateful '{t}' changed how its state is read: {}", changed_parts(what, now_what)));
                }
            }
            Some(_) => notes.push(format!("'{t}' keeps its state")),
            None if mapping.drops(t) => notes.push(format!("'{t}' and its state are dropped, as mapped")),
            None => problems.push(format!(
                "stateful '{t}' is gone, and its state would be lost; map it to \"\" in --transform_name_mapping \
                 to drop its state"
            )),
        }
    }
    for (t, _) in n.states.iter().filter(|(t, _)| !e.states.contains_key(*t)) {
        notes.push(format!("'{t}' is new and starts with no state"));
    }
    for (id, partitions) in &e.sub_partitions {
        if let Some(now_partitions) = n.sub_partitions.get(id).filter(|p| *p != partitions) {
            problems.push(format!(
                "sub-topology {id} had {partitions} and would have {now_partitions}: keys would land on other tasks \
                 than their state (keep --internal_parallelism as it was)"
            ));
        }
    }
    (problems, notes)
}

#[cfg(test)]
mod tests;
