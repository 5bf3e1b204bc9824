//! The application's plan record (`__beam_<app>_plan`, one compacted
//! partition): what the run that created its topics planned, so a later
//! run under the same id resumes only the same plan (`runtime::app::identity`
//! decides), and whether a run ended DONE keeping its topics. Also
//! `reset`: deleting everything a run left under an application id.
use std::path::Path;
use std::time::Duration;

use beam_kafka_config::RunnerOptions;
use beam_kafka_runtime::app::identity::{self, Earlier};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::kafka::admin::{Admin, TopicSpec};
use crate::kafka::config;
use crate::kafka::producer::{KafkaProducer, Writes};

const PLAN_KEY: &[u8] = b"plan";
/// The version before the latest, kept by an update (for a rollback).
const PREVIOUS_KEY: &[u8] = b"previous";
const STATUS_KEY: &[u8] = b"status";
const FINISHED: &[u8] = b"finished";
const READ_TIMEOUT: Duration = Duration::from_secs(10);

pub fn plan_topic(application_id: &str) -> String {
    format!("{}plan", beam_kafka_runtime::plan::topology::topic_prefix(application_id))
}

/// What an earlier run left under the application id: one metadata
/// request (the admin's connection check, which also turns a refused
/// login into a clear error) and, when a plan record exists, reading it.
pub async fn earlier_run(opts: &RunnerOptions) -> Result<Earlier, String> {
    let opts = opts.clone();
    tokio::task::spawn_blocking(move || {
        let app = &opts.application_id;
        let admin = Admin::connect(&opts)?;
        let names = admin.topic_names();
        crate::kafka::close_in_background(admin);
        let mut left: Vec<String> = names?.into_iter().filter(|t| identity::is_runner_topic(app, t)).collect();
        left.sort();
        let plan = plan_topic(app);
        if left.contains(&plan) {
            let reader = plan_reader(&opts)?;
            let records = read_plan(&reader, &plan);
            crate::kafka::close_in_background(reader);
            let records = records?;
            let last = |key: &[u8]| records.iter().rev().find(|(k, _)| k.as_slice() == key).map(|(_, v)| v.clone());
            if last(STATUS_KEY).as_deref() == Some(FINISHED) {
                return Ok(Earlier::Finished);
            }
            if let Some(m) = last(PLAN_KEY) {
                let previous = last(PREVIOUS_KEY).map(|p| identity::decode(&p));
                return Ok(Earlier::Plan { manifest: identity::decode(&m), previous });
            }
        }
        // A control topic alone is a drain asked before any run; a copies
        // topic alone, the reports of a run that never recorded a plan.
        let (control, copies) = (crate::control::control_topic(app), crate::copies::copies_topic(app));
        left.retain(|t| *t != control && *t != plan && *t != copies);
        Ok(if left.is_empty() { Earlier::Nothing } else { Earlier::Unrecorded(left) })
    })
    .await
    .map_err(|e| format!("reading the plan record: {e}"))?
}

/// The plan topic's spec: created with the job's other topics.
pub(crate) fn topic_spec(application_id: &str) -> TopicSpec {
    TopicSpec { name: plan_topic(application_id), partitions: 1, compacted: true, keep_forever: true, segment_ms: None, grows: false }
}

/// Records this run's plan (a first run or an update; its topics exist by
/// now) with the job's producer, before any task starts; an update keeps
/// the version it replaces as the previous one.
pub(crate) async fn record_plan(producer: &KafkaProducer, application_id: &str, record: &PlanRecord) -> Result<(), String> {
    let writes = Writes::new();
    let topic = plan_topic(application_id);
    if let Some(previous) = &record.previous {
        writes.send(producer, &topic, 0, Some(PREVIOUS_KEY), Some(&identity::encode(previous))).await?;
    }
    writes.send(producer, &topic, 0, Some(PLAN_KEY), Some(&identity::encode(&record.manifest))).await?;
    writes.wait().await.map(|_| ()).map_err(|e| format!("cannot record the plan on {topic}: {e}"))
}

/// What a run records before its tasks start: its manifest, and after an
/// update the manifest of the version it took over from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanRecord {
    pub manifest: Vec<String>,
    pub previous: Option<Vec<String>>,
}

/// Fences the transactional ids of every task of `sub_topologies` (those
/// an update retired), as many as their changelogs have partitions.
/// Blocks; a failure is only logged (the broker aborts what was left open
/// once its transaction times out).
pub fn fence_retired(opts: &RunnerOptions, sub_topologies: &[u32]) {
    let admin = match Admin::connect(opts) {
        Ok(a) => a,
        Err(e) => return tracing::warn!("cannot fence the tasks of retired sub-topologies: {e}"),
    };
    for &sub in sub_topologies {
        let changelog = beam_kafka_runtime::plan::topology::changelog_topic(&opts.application_id, sub);
        let partitions = admin.partitions(&changelog).ok().flatten().unwrap_or(0);
        for partition in 0..partitions {
            let task = beam_kafka_runtime::plan::topology::TaskId { sub_topology: sub, partition };
            match crate::kafka::transaction::fence(opts, task) {
                Ok(()) => tracing::debug!("fenced retired task {task}"),
                Err(e) => tracing::warn!("cannot fence retired task {task}: {e}"),
            }
        }
    }
    crate::kafka::close_in_background(admin);
}

/// Records that the application ran to the end and kept its topics.
pub async fn record_finished(opts: &RunnerOptions) -> Result<(), String> {
    let admin = Admin::connect(opts)?;
    admin.ensure_topics(&[topic_spec(&opts.application_id)], opts.topic_replication_factor, config::batch_max_bytes(opts)).await?;
    let producer: FutureProducer = config::producer(opts).create().map_err(|e| format!("cannot create a Kafka producer: {e}"))?;
    let topic = plan_topic(&opts.application_id);
    producer
        .send(FutureRecord::to(&topic).partition(0).key(STATUS_KEY).payload(FINISHED), READ_TIMEOUT)
        .await
        .map_err(|(e, _)| format!("cannot write to {topic}: {e}"))?;
    Ok(())
}

/// A record's key and value.
type KeyValue = (Vec<u8>, Vec<u8>);

fn plan_reader(opts: &RunnerOptions) -> Result<BaseConsumer, String> {
    let mut c = config::base(opts, "plan");
    c.set("group.id", format!("{}-plan", opts.application_id)).set("enable.auto.commit", "false");
    c.create().map_err(|e| format!("cannot create a Kafka consumer: {e}"))
}

/// How long a plan topic without a plan is given to get one.
const PLAN_WAIT: Duration = Duration::from_secs(15);

/// The plan topic's records. A plan topic that holds nothing yet, or whose
/// leader is not elected yet, was just created by another copy's first
/// run, which records its plan before any of its tasks starts: copies
/// started together wait for it (a while: a first run that died before
/// recording its plan leaves the topic empty).
fn read_plan(consumer: &BaseConsumer, topic: &str) -> Result<Vec<KeyValue>, String> {
    let deadline = std::time::Instant::now() + PLAN_WAIT;
    loop {
        let read = read_all(consumer, topic);
        let waiting = !matches!(&read, Ok(records) if !records.is_empty());
        if !waiting || std::time::Instant::now() >= deadline {
            return read;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every record of the one-partition `topic`, in order.
fn read_all(consumer: &BaseConsumer, topic: &str) -> Result<Vec<KeyValue>, String> {
    let (low, high) = consumer.fetch_watermarks(topic, 0, READ_TIMEOUT).map_err(|e| format!("cannot read the end of {topic}: {e}"))?;
    let mut out = Vec::new();
    if high <= low {
        return Ok(out);
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| format!("cannot read {topic}: {e}"))?;
    let deadline = std::time::Instant::now() + READ_TIMEOUT;
    while std::time::Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                out.push((m.key().unwrap_or_default().to_vec(), m.payload().unwrap_or_default().to_vec()));
                if m.offset() + 1 >= high {
                    return Ok(out);
                }
            }
            None => {}
            Some(Err(e)) => return Err(format!("cannot read {topic}: {e}")),
        }
    }
    Err(format!("{topic} could not be read to its end within {READ_TIMEOUT:?}"))
}

/// What `reset` deleted.
#[derive(Debug, Default)]
pub struct ResetReport {
    pub topics: Vec<String>,
    pub stores: usize,
}

/// Deletes every runner topic of the application, its consumer group (so
/// the next run starts its sources as a first run does) and its task
/// stores under `state_dir` on this machine. Refuses while copies run.
/// `dry_run` only says what it would delete.
pub async fn reset(opts: &RunnerOptions, state_dir: &Path, dry_run: bool) -> Result<ResetReport, String> {
    let app = opts.application_id.clone();
    let admin = Admin::connect(opts)?;
    let members = admin.group_members(&app)?;
    if members > 0 {
        return Err(format!(
            "application '{app}' has {members} member(s) in its consumer group: copies are still running. Stop them \
             (or `beam-kafka drain` them) first, then reset"
        ));
    }
    let mut topics: Vec<String> = admin.topic_names()?.into_iter().filter(|t| identity::is_runner_topic(&app, t)).collect();
    topics.sort();
    // The plan record goes last: a reset cut short still refuses a new run.
    let plan = plan_topic(&app);
    topics.retain(|t| *t != plan);
    let had_plan = admin.partitions(&plan)?.is_some();
    let app_dir = state_dir.join(&app);
    let stores: Vec<std::path::PathBuf> = match std::fs::read_dir(&app_dir) {
        Ok(entries) => entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.join("beam-kafka.lock").exists()).collect(),
        Err(_) => Vec::new(),
    };
    let mut report = ResetReport { topics: topics.clone(), stores: stores.len() };
    if had_plan {
        report.topics.push(plan.clone());
    }
    if dry_run {
        return Ok(report);
    }
    admin.delete_topics(&topics).await?;
    admin.delete_group(&app).await?;
    for dir in &stores {
        crate::store::remove_store_dir(dir).map_err(|e| format!("cannot delete the local state {}: {e}", dir.display()))?;
    }
    let _ = std::fs::remove_dir(&app_dir);
    admin.delete_topics(&[plan]).await?;
    Ok(report)
}
