//! What a job does about what earlier runs left under its application id
//! (`runtime::app::identity`), around planning: before, it reads the plan record
//! and gives the pipeline's transforms the ids the earlier version had for
//! them (renames asked with `--transform_name_mapping`, and renames and
//! dropped state on record: `runtime::app::update::aliases`); after, it names
//! the plan's topics and sub-topologies as the record does
//! (`topology::names`) and judges: a first run or an update gets what to
//! record with its topics, the same plan resumes (and says so), another
//! is refused before anything starts.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use beam_kafka_actors::identity::PlanRecord;
use beam_kafka_proto::job_management as jm;
use beam_kafka_proto::pipeline::Pipeline;
use beam_kafka_runtime::app::identity::{self, Earlier, UpdateRequest, Verdict};
use beam_kafka_runtime::app::update::{self, Mapping};
use beam_kafka_runtime::plan::graph::PipelineGraph;
use beam_kafka_runtime::plan::topology::names::Names;
use beam_kafka_runtime::plan::topology::TopologyPlan;
use jm::job_message::MessageImportance as Importance;

use crate::jobs::Job;

/// What the plan record says, and the aliases this run took.
pub struct Found {
    earlier: Earlier,
    names: Names,
    aliases: BTreeMap<String, String>,
    request: UpdateRequest,
}

impl Found {
    fn manifest(&self) -> Option<&Vec<String>> {
        match &self.earlier {
            Earlier::Plan { manifest, .. } => Some(manifest),
            _ => None,
        }
    }
}

/// Reads the plan record and rewrites `pipeline`'s ids after the earlier
/// version's (the job's copy too, so its metrics and status page agree).
pub async fn take_ids(job: &Arc<Job>, pipeline: &mut Pipeline) -> Result<Found, String> {
    let opts = &job.runner_options;
    let request = UpdateRequest { update: opts.update, mapping: Mapping::new(&opts.transform_name_mapping) };
    if !opts.transform_name_mapping.is_empty() && !opts.update {
        return Err("--transform_name_mapping says how an earlier version's transforms are named in this one: it goes with \
                    --update"
            .into());
    }
    let earlier = beam_kafka_actors::identity::earlier_run(opts).await?;
    let mut found = Found { earlier, names: Names::default(), aliases: BTreeMap::new(), request };
    let Some(manifest) = found.manifest().cloned() else { return Ok(found) };
    found.names = Names::from_lines(&manifest);
    let ids_now: BTreeSet<String> = pipeline.components.iter().flat_map(|c| c.transforms.keys().cloned()).collect();
    found.aliases = update::aliases(&found.names, &update::transform_ids(&manifest), &found.request.mapping, &ids_now)
        .map_err(|problems| format!("--update: nothing was changed:\n  {}", problems.join("\n  ")))?;
    beam_kafka_runtime::plan::stable_ids::alias(pipeline, &found.aliases).map_err(|e| format!("--transform_name_mapping: {e}"))?;
    *job.pipeline.lock().unwrap_or_else(|e| e.into_inner()) = pipeline.clone();
    Ok(found)
}

/// The fingerprint of a manifest a copy reports (`copy_view`).
pub fn fingerprint(manifest: &[String]) -> String {
    format!("{:016x}", beam_kafka_runtime::plan::plan_facts::fingerprint(&identity::encode(manifest)))
}

/// A rollback starts only once no copy of another version runs: those
/// run the version it would replace, which replaced it a moment ago (a
/// copy of the earlier version restarted mid-rollout, still asking
/// --update), and the two would take turns. A copy killed a moment ago
/// still looks current, so copies that reported lately are read again
/// after two and a half report intervals: a running one has reported
/// again.
async fn no_other_version_runs(job: &Arc<Job>, plan: &str) -> Result<(), String> {
    use beam_kafka_runtime::app::copies::{other_versions_maybe_running, reported_again, REPORT_EVERY_MS};
    let read = || {
        let opts = job.runner_options.clone();
        async move {
            let reports = tokio::task::spawn_blocking(move || beam_kafka_actors::copies::read_all(&opts))
                .await
                .map_err(|e| format!("reading the copies' reports: {e}"))??;
            Ok::<_, String>(crate::copy_view::versions(&reports.unwrap_or_default()))
        }
    };
    let first = read().await?;
    let maybe = other_versions_maybe_running(&first, plan, beam_kafka_actors::status_board::now_ms());
    if maybe.is_empty() {
        return Ok(());
    }
    tokio::time::sleep(std::time::Duration::from_millis((REPORT_EVERY_MS * 5 / 2) as u64)).await;
    let running = reported_again(&first, &read().await?, &maybe);
    if running.is_empty() {
        return Ok(());
    }
    Err(format!(
        "--update: this is the version before the one application '{}' runs now, whose copies are still running \
         ({}): nothing was changed. To roll back, stop every copy of the running version first, then start this one \
         with --update.",
        job.runner_options.application_id,
        running.join(", ")
    ))
}

/// What this run judged: what to record, and the topics earlier versions
/// left that this one does not use.
pub struct Judged {
    pub record: Option<PlanRecord>,
    pub retired_topics: Vec<String>,
    /// Sub-topologies this update retired (their tasks' ids are fenced).
    pub newly_retired: Vec<u32>,
}

/// Names the plan after the record and judges whether this run may start.
pub async fn judge(job: &Arc<Job>, found: &Found, graph: &PipelineGraph<'_>, plan: &mut TopologyPlan) -> Result<Judged, String> {
    let (record, names) = judge_record(job, found, graph, plan).await?;
    let app = &job.runner_options.application_id;
    let mut retired_topics: Vec<String> = names.retired_topics.iter().cloned().collect();
    retired_topics.extend(names.retired_sub_topologies.iter().map(|s| beam_kafka_runtime::plan::topology::changelog_topic(app, *s)));
    let newly_retired = match &record {
        Some(PlanRecord { previous: Some(_), .. }) => {
            names.retired_sub_topologies.difference(&found.names.retired_sub_topologies).copied().collect()
        }
        _ => Vec::new(),
    };
    Ok(Judged { record, retired_topics, newly_retired })
}

/// What to record (if anything), and the names this run took.
async fn judge_record(
    job: &Arc<Job>,
    found: &Found,
    graph: &PipelineGraph<'_>,
    plan: &mut TopologyPlan,
) -> Result<(Option<PlanRecord>, Names), String> {
    let opts = &job.runner_options;
    let mut names = plan.inherit(graph, &found.names);
    names.aliases = found.aliases.clone();
    // Stateful transforms this version no longer has: their ids are not
    // given again (an update that keeps them is refused, or drops them).
    if let Some(earlier) = found.manifest() {
        let now = update::stateful_ids(&beam_kafka_runtime::plan::plan_facts::state_lines(graph, plan));
        names.retired_transforms.extend(update::stateful_ids(earlier).into_iter().filter(|t| !now.contains(t)));
    }
    let manifest = identity::manifest(graph, plan, &names);
    let _ = job.plan_fingerprint.set(fingerprint(&manifest));
    let record = match identity::judge(&opts.application_id, &found.earlier, &manifest, &found.request) {
        Verdict::Fresh => Some(PlanRecord { manifest, previous: None }),
        Verdict::Resume => {
            job.message(
                Importance::JobMessageBasic,
                format!(
                    "application '{}' already has the topics and state of a run of this same pipeline (an earlier run, or \
                     another copy running now): this run resumes from their last commits",
                    opts.application_id
                ),
            );
            None
        }
        Verdict::Update { mut notes, rollback } => {
            if let Some(earlier) = found.manifest() {
                let _ = job.replaces.set(fingerprint(earlier));
            }
            // Forward, the earlier version's copies step down once this one
            // is on record (`superseded`); back, they would be the version
            // that just replaced this one, and both would take turns.
            if rollback {
                no_other_version_runs(job, &fingerprint(&manifest)).await?;
            }
            for (old, new) in &found.request.mapping.renamed {
                notes.insert(0, format!("'{old}' is named '{new}' now"));
            }
            job.message(
                Importance::JobMessageBasic,
                format!(
                    "--update: this version of the pipeline takes over the state of application '{}':\n  {}",
                    opts.application_id,
                    notes.join("\n  ")
                ),
            );
            Some(PlanRecord { manifest, previous: found.manifest().cloned() })
        }
        Verdict::Refuse(why) => return Err(why),
    };
    Ok((record, names))
}
