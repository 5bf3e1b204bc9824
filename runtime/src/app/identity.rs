//! What a run under an application id leaves for the next one to read:
//! topics named by index, changelogs keyed by sub-topology, group offsets.
//! A later run may resume from them only if it plans the same topology;
//! one that plans another would read state written for other transforms
//! (or a watermark already at its end, and end DONE with nothing done).
//!
//! The plan's *manifest* is what decides how the stored bytes are read:
//! every topic (name, kind, partitions) and every sub-topology (its
//! partitions, the transforms it runs by their unique names and URNs, the
//! topics it reads and writes). It leaves out what changes between two
//! submissions of the same program: pickled or serialized user code,
//! environments, job ids, display data. Runs compare manifests line by
//! line, so a refusal can name what differs.
use std::collections::BTreeSet;

use crate::app::update::Mapping;
use crate::plan::graph::PipelineGraph;
use crate::plan::plan_facts;
use crate::plan::topology::names::Names;
use crate::plan::topology::{TopicKind, TopologyPlan};

/// The manifest format: a runner whose manifest differs in form bumps it.
/// v2: topics say how their records are coded, stateful transforms what
/// decides how their state is read, and the names table is recorded.
pub const VERSION: &str = "beam-kafka plan manifest v2";

/// The plan's manifest: sorted lines, the first naming the format, with
/// `names` (what `TopologyPlan::inherit` returned) as its last lines.
pub fn manifest(graph: &PipelineGraph<'_>, plan: &TopologyPlan, names: &Names) -> Vec<String> {
    let mut lines = BTreeSet::new();
    for t in &plan.topics {
        let coded = match t.kind {
            TopicKind::Source => String::new(),
            _ => format!(", coded {}", plan_facts::topic_coder(graph, &t.pcollection)),
        };
        lines.insert(format!("topic {}: {:?}, {} partition(s){coded}", t.name, t.kind, t.partitions));
    }
    for s in &plan.sub_topologies {
        let transforms: Vec<String> =
            s.stage.transforms.iter().map(|id| format!("{} ({})", graph.transform(id).unique_name, graph.urn(id))).collect();
        lines.insert(format!("sub-topology {}: {} partition(s), runs [{}]", s.id, s.partitions, transforms.join(", ")));
        for i in &s.inputs {
            lines.insert(format!("sub-topology {} reads {}", s.id, plan.topics[i.topic].name));
        }
        for i in &s.side_inputs {
            lines.insert(format!("sub-topology {} reads {} as a side input", s.id, plan.topics[i.topic].name));
        }
        for o in &s.outputs {
            lines.insert(format!("sub-topology {} writes {}", s.id, plan.topics[o.topic].name));
        }
    }
    lines.extend(plan_facts::state_lines(graph, plan));
    lines.extend(graph.leaves.iter().map(|id| format!("transform {}", plan_facts::one_line(id))));
    std::iter::once(VERSION.to_string()).chain(lines).chain(names.to_lines()).collect()
}

/// The manifest as one record's value (a line each).
pub fn encode(manifest: &[String]) -> Vec<u8> {
    manifest.join("\n").into_bytes()
}

pub fn decode(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes).lines().map(str::to_string).collect()
}

/// What differs between an earlier run's manifest and this one's, as
/// lines for a message (at most `limit` of each side); empty when the
/// plans are the same.
pub fn differences(earlier: &[String], now: &[String], limit: usize) -> Vec<String> {
    let (a, b): (BTreeSet<&String>, BTreeSet<&String>) = (earlier.iter().collect(), now.iter().collect());
    let gone: Vec<&&String> = a.difference(&b).collect();
    let new: Vec<&&String> = b.difference(&a).collect();
    let mut out = Vec::new();
    let mut side = |what: &str, lines: &[&&String]| {
        for l in lines.iter().take(limit) {
            out.push(format!("{what}: {l}"));
        }
        if lines.len() > limit {
            out.push(format!("{what}: … and {} more", lines.len() - limit));
        }
    };
    side("earlier run", &gone);
    side("this run", &new);
    out
}

/// What a run finds under its application id before it starts anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Earlier {
    /// Nothing: no runner topic of the application, or only its control
    /// topic (a drain asked before any run).
    Nothing,
    /// A plan record: the manifest of the latest version that ran, and of
    /// the one before it (after an update).
    Plan { manifest: Vec<String>, previous: Option<Vec<String>> },
    /// A run that ended DONE and kept its topics (`keep_runner_topics`).
    Finished,
    /// Runner topics but no plan record (a runner before plan records, or
    /// a clean-up cut short): these topics.
    Unrecorded(Vec<String>),
}

/// What a run does about what it found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A first run: record the plan, then start.
    Fresh,
    /// The same plan: resume from the earlier run's commits.
    Resume,
    /// Another version of the pipeline, asked with `--update`, that can
    /// take over the earlier one's state: record it (keeping the earlier
    /// as the previous) and resume; `notes` say what carries over.
    /// `rollback`: it is the version before the latest one.
    Update { notes: Vec<String>, rollback: bool },
    /// Start nothing; the message says why and the way out.
    Refuse(String),
}

/// What the submission asked about an earlier version (`--update`,
/// `--transform_name_mapping`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpdateRequest {
    pub update: bool,
    pub mapping: Mapping,
}

/// The manifest without its names table and aliases: what a version
/// plans (a version restarted after a later one renamed its transforms
/// carries their aliases, and plans the same).
fn planned(manifest: &[String]) -> Vec<&String> {
    manifest.iter().filter(|l| !l.starts_with("name ") && !l.starts_with("retired ") && !l.starts_with("alias ")).collect()
}

/// Decides whether a run of `manifest` under `application_id` may start.
pub fn judge(application_id: &str, earlier: &Earlier, manifest: &[String], request: &UpdateRequest) -> Verdict {
    let way_out = format!(
        "Use a new --application_id, or delete what the earlier run left with `beam-kafka reset -- \
         --application_id={application_id} --bootstrap_servers=…` (stop every copy first)"
    );
    match earlier {
        Earlier::Nothing => Verdict::Fresh,
        Earlier::Plan { manifest: m, .. } if m.as_slice() == manifest => Verdict::Resume,
        Earlier::Plan { manifest: m, .. } if m.first() != manifest.first() => Verdict::Refuse(format!(
            "application '{application_id}' was run by a runner version that recorded its plan as '{}' (this one: \
             '{}'), so this run cannot tell what its state means. {way_out}.",
            m.first().map_or("", String::as_str),
            manifest.first().map_or("", String::as_str)
        )),
        Earlier::Plan { manifest: m, previous } if request.update => {
            // Going back to the version before the latest (a failed
            // update rolled back) drops what the latest one added.
            let mut mapping = request.mapping.clone();
            let rollback = previous.as_ref().is_some_and(|p| planned(p) == planned(manifest));
            if let Some(before) = previous.as_ref().filter(|_| rollback) {
                let kept = crate::app::update::stateful_ids(before);
                mapping.dropped.extend(crate::app::update::stateful_ids(m).into_iter().filter(|t| !kept.contains(t)));
            }
            let (problems, mut notes) = crate::app::update::check(m, manifest, &mapping);
            if problems.is_empty() {
                if rollback {
                    notes.insert(0, "this is the version before the latest one: the latest one's additions are dropped".into());
                }
                Verdict::Update { notes, rollback }
            } else {
                Verdict::Refuse(format!(
                    "--update: this version of the pipeline cannot take over the state of application \
                     '{application_id}', and nothing was changed:\n  {}",
                    problems.join("\n  ")
                ))
            }
        }
        Earlier::Plan { manifest: m, .. } => {
            let owned = |v: Vec<&String>| v.into_iter().cloned().collect::<Vec<String>>();
            let diff = differences(&owned(planned(m)), &owned(planned(manifest)), 6);
            Verdict::Refuse(format!(
                "application '{application_id}' already holds the topics and state of an earlier run of another pipeline \
                 (a failed, cancelled or still running one), which this one cannot resume:\n  {}\n\
                 To carry its state over to this version, stop every copy of it and submit this one with --update. \
                 Or: {way_out}.",
                diff.join("\n  ")
            ))
        }
        Earlier::Finished => Verdict::Refuse(format!(
            "application '{application_id}' already ran to the end and kept its topics (keep_runner_topics): a new run \
             would find every input consumed and end with nothing done. {way_out}."
        )),
        Earlier::Unrecorded(topics) => {
            let shown: Vec<&str> = topics.iter().take(5).map(String::as_str).collect();
            let more = if topics.len() > 5 { format!(" and {} more", topics.len() - 5) } else { String::new() };
            Verdict::Refuse(format!(
                "application '{application_id}' already has runner topics ({}{more}) that record no plan (left by an \
                 earlier runner version or a clean-up cut short), so this run cannot know whether it may resume \
                 them. {way_out}.",
                shown.join(", ")
            ))
        }
    }
}

/// Whether `topic` is a runner topic of `application_id` (and not of an
/// application whose id merely starts with it: `_` may be part of an id).
pub fn is_runner_topic(application_id: &str, topic: &str) -> bool {
    let Some(rest) = topic.strip_prefix(&crate::plan::topology::topic_prefix(application_id)) else { return false };
    let numbered = |kind: &str| rest.strip_prefix(kind).and_then(|r| r.strip_prefix('_')).is_some_and(all_digits);
    rest == "control"
        || rest == "plan"
        || ["impulse", "empty", "shuffle", "edge", "side", "teststream"].into_iter().any(numbered)
        || rest.strip_prefix("state_").and_then(|r| r.strip_suffix("-changelog")).is_some_and(all_digits)
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[&str]) -> Vec<String> {
        std::iter::once(VERSION).chain(v.iter().copied()).map(str::to_string).collect()
    }

    #[test]
    fn the_same_plan_resumes_and_another_is_refused_naming_what_differs() {
        let earlier = lines(&["sub-topology 0: 1 partition(s), runs [Count (beam:transform:pardo:v1)]", "topic a: Edge, 4 partition(s)"]);
        let same = earlier.clone();
        let plan = |m: &Vec<String>| Earlier::Plan { manifest: m.clone(), previous: None };
        let asked = UpdateRequest::default();
        assert_eq!(judge("app", &plan(&earlier), &same, &asked), Verdict::Resume);
        let changed = lines(&["sub-topology 0: 1 partition(s), runs [Sum (beam:transform:pardo:v1)]", "topic a: Edge, 4 partition(s)"]);
        let Verdict::Refuse(why) = judge("app", &plan(&earlier), &changed, &asked) else { panic!("a changed plan must be refused") };
        assert!(why.contains("earlier run: sub-topology 0: 1 partition(s), runs [Count"), "{why}");
        assert!(why.contains("this run: sub-topology 0: 1 partition(s), runs [Sum"), "{why}");
        assert!(!why.contains("topic a"), "what is the same is not named: {why}");
        assert!(why.contains("beam-kafka reset -- --application_id=app"), "{why}");
        assert!(why.contains("with --update"), "{why}");
        assert_eq!(judge("app", &Earlier::Nothing, &changed, &asked), Verdict::Fresh);
        let older = vec!["beam-kafka plan manifest v1".to_string()];
        assert!(matches!(judge("app", &plan(&older), &changed, &asked), Verdict::Refuse(w) if w.contains("manifest v1")));
    }

    #[test]
    fn a_finished_run_or_topics_without_a_plan_are_refused() {
        let m = lines(&[]);
        assert!(
            matches!(judge("app", &Earlier::Finished, &m, &UpdateRequest::default()), Verdict::Refuse(w) if w.contains("ran to the end"))
        );
        let topics: Vec<String> = (0..7).map(|i| format!("__beam_app_edge_{i}")).collect();
        let Verdict::Refuse(why) = judge("app", &Earlier::Unrecorded(topics), &m, &UpdateRequest::default()) else { panic!() };
        assert!(why.contains("__beam_app_edge_0") && why.contains("and 2 more"), "{why}");
    }

    #[test]
    fn differences_are_bounded_and_a_manifest_round_trips() {
        let a = lines(&["x1", "x2", "x3"]);
        let b = lines(&["y1"]);
        let d = differences(&a, &b, 2);
        assert_eq!(d, ["earlier run: x1", "earlier run: x2", "earlier run: … and 1 more", "this run: y1"]);
        assert_eq!(decode(&encode(&a)), a);
        assert!(differences(&a, &a, 2).is_empty());
    }

    #[test]
    fn runner_topics_are_told_from_another_applications() {
        for t in ["__beam_a_control", "__beam_a_plan", "__beam_a_edge_3", "__beam_a_state_12-changelog", "__beam_a_teststream_0"] {
            assert!(is_runner_topic("a", t), "{t}");
        }
        for t in ["__beam_a_b_control", "__beam_a_edge_", "__beam_a_edge_x", "__beam_ab_edge_1", "orders", "__beam_a_state_1"] {
            assert!(!is_runner_topic("a", t), "{t}");
        }
    }

    #[test]
    fn a_planned_pipeline_has_a_stable_manifest_naming_its_transforms() {
        use crate::urns::*;
        let mut b = crate::plan::graph::test_pipelines::Builder::new();
        b.leaf("impulse", IMPULSE, &[], &["a"], false)
            .leaf("pair", PAR_DO, &["a"], &["b"], true)
            .leaf("gbk", GROUP_BY_KEY, &["b"], &["g"], false)
            .leaf("count", PAR_DO, &["g"], &["c"], true);
        let pipeline = b.build();
        let graph = PipelineGraph::new(&pipeline).unwrap();
        let plan = TopologyPlan::plan(&graph, "app", 2).unwrap();
        let names = plan.names(&graph);
        let m = manifest(&graph, &plan, &names);
        assert_eq!(m, manifest(&graph, &TopologyPlan::plan(&graph, "app", 2).unwrap(), &names), "planning again gives the same");
        assert_eq!(m[0], VERSION);
        assert!(
            m.iter().any(|l| l.starts_with("topic __beam_app_shuffle_") && l.ends_with("Shuffle, 2 partition(s), coded bytes:v1")),
            "{m:#?}"
        );
        assert!(m.iter().any(|l| l.starts_with("state gbk: GroupByKey in sub-topology ")), "{m:#?}");
        assert!(m.iter().any(|l| l.starts_with("name topic __beam_app_shuffle_") && l.ends_with(" = shuffle gbk")), "{m:#?}");
        assert!(m.iter().any(|l| l.contains("runs [") && l.contains("(beam:transform:")), "{m:#?}");
        let wider = manifest(&graph, &TopologyPlan::plan(&graph, "app", 4).unwrap(), &names);
        assert!(!differences(&m, &wider, 10).is_empty(), "another parallelism is another plan");
    }
}
