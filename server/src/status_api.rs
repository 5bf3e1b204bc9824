//! The status page's JSON (documented in ops/status-api.md): the jobs, and
//! for one job its tasks as its status board has them, its recent
//! warnings and errors, and its user metrics.
use beam_kafka_actors::status_board::{now_ms, StatusBoard, TaskEntry};
use beam_kafka_proto::job_management as jm;
use beam_kafka_proto::pipeline::MonitoringInfo;
use beam_kafka_runtime::app::copies::Presence;
use beam_kafka_runtime::codec::coders::decode_varint;
use beam_kafka_runtime::codec::timestamp::Watermark;
use beam_kafka_runtime::plan::topology::TaskId;
use beam_kafka_runtime::task::status::watermark_text;
use jm::job_message::MessageImportance as Importance;
use jm::job_state::Enum as State;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

use crate::copy_view;
use crate::jobs::{Job, Jobs};

/// Events shown per job, newest kept.
const EVENTS_SHOWN: usize = 100;

pub fn state_name(s: i32) -> String {
    State::try_from(s).map_or_else(|_| "UNSPECIFIED".into(), |s| s.as_str_name().to_string())
}

/// The jobs this server runs or ran (prepared ones not yet run are left out).
pub fn jobs(jobs: &Jobs) -> Value {
    let mut list = jobs.run_jobs();
    // Newest first.
    list.sort_by(|a, b| a.age_s().total_cmp(&b.age_s()));
    json!({ "jobs": list.iter().map(|j| summary(j)).collect::<Vec<_>>() })
}

fn summary(job: &Job) -> Value {
    json!({
        "id": job.id,
        "name": job.name,
        "state": state_name(job.state().state),
        "application_id": job.runner_options.application_id,
        "uptime_s": job.board.get().map_or(0.0, |b| b.uptime_s()),
    })
}

/// One job: this copy's tasks and those the application's other copies
/// report (each row names its copy), the copies, events and user metrics.
pub fn job(job: &Job) -> Value {
    let mut out = summary(job);
    let own: Vec<Value> = job.board.get().map(|b| b.tasks().iter().map(|(t, e)| task(b, *t, e)).collect()).unwrap_or_default();
    let (copies, tasks) = match job.board.get() {
        Some(board) => {
            let summary = own_summary(job, board, own.len());
            let view = copy_view::view(&copy_view::reports(job), &board.copy, Some((summary, own)), now_ms());
            (view.copies, view.tasks)
        }
        None => (Vec::new(), own),
    };
    out["tasks"] = Value::Array(tasks);
    out["copies"] = Value::Array(copies);
    out["events"] = Value::Array(events(job));
    let (attempted, committed) = {
        let metrics = job.metrics.lock().unwrap_or_else(|e| e.into_inner());
        (metrics.attempted.all(), metrics.committed.all())
    };
    let mut rows = user_metrics(&attempted, &committed);
    // Transforms by the names the user gave them.
    let pipeline = job.pipeline.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(transforms) = pipeline.components.as_ref().map(|c| &c.transforms) {
        for row in &mut rows {
            let name = row["transform"].as_str().and_then(|id| transforms.get(id)).map(|t| t.unique_name.clone());
            if let Some(name) = name.filter(|n| !n.is_empty()) {
                row["transform"] = json!(name);
            }
        }
    }
    out["metrics"] = Value::Array(rows);
    out
}

fn watermark_ms(w: Watermark) -> Value {
    match w {
        Watermark::At(ms) => json!(ms),
        _ => Value::Null,
    }
}

pub fn task(board: &StatusBoard, id: TaskId, e: &TaskEntry) -> Value {
    let s = &e.status;
    let m = &e.meters;
    let lag = board.task_lag(s);
    let inputs: Vec<Value> = s
        .inputs
        .iter()
        .map(|i| {
            json!({
                "topic": i.topic,
                "partition": i.partition,
                "position": i.position,
                "committed": i.committed,
                "lag": board.lag(&i.topic, i.partition, i.position),
            })
        })
        .collect();
    let watermark_lag = match s.output_watermark {
        Watermark::At(ms) => json!(((now_ms() - ms).max(0)) as f64 / 1000.0),
        _ => Value::Null,
    };
    json!({
        "task": id.to_string(),
        "sub_topology": id.sub_topology,
        "partition": id.partition,
        // Which start of the task in this copy: a restart counts up.
        "incarnation": e.incarnation,
        "copy": board.copy,
        "state": format!("{:?}", s.state),
        "inputs": inputs,
        "input_watermark": watermark_text(s.input_watermark),
        "input_watermark_ms": watermark_ms(s.input_watermark),
        "output_watermark": watermark_text(s.output_watermark),
        "output_watermark_ms": watermark_ms(s.output_watermark),
        "watermark_lag_s": watermark_lag,
        "records_read": m.records_read.load(Ordering::Relaxed),
        "records_written": m.records_written.load(Ordering::Relaxed),
        "lag": lag,
        "lag_time_s": lag.and_then(|l| e.read_rate.catch_up_s(l)),
        "commits": m.commits.load(Ordering::Relaxed),
        "commit_failures": m.commit_failures.load(Ordering::Relaxed),
        "last_commit_ms": s.last_commit_ms,
        "commit_p50_ms": s.commit_p50_ms,
        "commit_max_ms": s.commit_max_ms,
        "bundles": s.bundles,
        "bundle_p50_ms": s.bundle_p50_ms,
        "held_elements": s.held_elements,
        "pending_timers": s.pending_timers,
        "queued_records": s.queued_records,
        "flow_paused": s.flow_paused,
        "state_bytes": s.state_bytes,
        "waiting": s.waiting(),
    })
}

/// The job's warnings and errors (and its other messages), and its tasks'
/// events, oldest first.
fn events(job: &Job) -> Vec<Value> {
    let (history, _) = job.messages();
    let mut all: Vec<(i64, &'static str, String)> = history
        .into_iter()
        .filter_map(|r| match r.response {
            Some(jm::job_messages_response::Response::MessageResponse(m)) => {
                let level = match Importance::try_from(m.importance).unwrap_or(Importance::Unspecified) {
                    Importance::JobMessageError => "error",
                    Importance::JobMessageWarning => "warning",
                    _ => "info",
                };
                Some((message_ms(&m.time), level, m.message_text))
            }
            _ => None,
        })
        .collect();
    if let Some(b) = job.board.get() {
        all.extend(b.events().into_iter().map(|e| (e.time_ms, e.level.as_str(), e.text)));
    }
    all.sort_by_key(|(t, _, _)| *t);
    let skip = all.len().saturating_sub(EVENTS_SHOWN);
    all.into_iter().skip(skip).map(|(t, level, text)| json!({ "time_ms": t, "level": level, "text": text })).collect()
}

/// A job message's time ("seconds.millis") in ms.
fn message_ms(time: &str) -> i64 {
    let (s, ms) = time.split_once('.').unwrap_or((time, "0"));
    s.parse::<i64>().unwrap_or(0) * 1000 + ms.parse::<i64>().unwrap_or(0)
}

/// A user metric's value as text: a sum, a distribution, a gauge.
fn value_text(info: &MonitoringInfo) -> Option<String> {
    let mut at = 0;
    let mut ints = Vec::new();
    while let Some((v, n)) = info.payload.get(at..).and_then(decode_varint) {
        ints.push(v as i64);
        at += n;
    }
    match (info.r#type.as_str(), ints.as_slice()) {
        ("beam:metrics:sum_int64:v1", [v, ..]) => Some(v.to_string()),
        ("beam:metrics:distribution_int64:v1", [count, sum, min, max, ..]) => {
            Some(format!("count {count}, sum {sum}, min {min}, max {max}"))
        }
        ("beam:metrics:latest_int64:v1", [_, v, ..]) => Some(v.to_string()),
        _ => None,
    }
}

fn user_metrics(attempted: &[MonitoringInfo], committed: &[MonitoringInfo]) -> Vec<Value> {
    let key = |i: &MonitoringInfo| {
        let l = |k: &str| i.labels.get(k).cloned().unwrap_or_default();
        (l("NAMESPACE"), l("NAME"), l("PTRANSFORM"), i.r#type.clone())
    };
    let mut rows: std::collections::BTreeMap<_, (Option<String>, Option<String>)> = Default::default();
    for i in attempted.iter().filter(|i| i.urn.starts_with("beam:metric:user:")) {
        rows.entry(key(i)).or_default().0 = value_text(i);
    }
    for i in committed.iter().filter(|i| i.urn.starts_with("beam:metric:user:")) {
        rows.entry(key(i)).or_default().1 = value_text(i);
    }
    rows.into_iter()
        .filter(|(_, (a, c))| a.is_some() || c.is_some())
        .map(|((namespace, name, transform, _), (attempted, committed))| {
            json!({ "namespace": namespace, "name": name, "transform": transform, "attempted": attempted, "committed": committed })
        })
        .collect()
}

/// This copy's own line among the copies.
pub fn own_summary(job: &Job, board: &StatusBoard, tasks: usize) -> Value {
    json!({
        "copy": board.copy,
        "this": true,
        "presence": if board.ended_at().is_some() { Presence::Left.as_str() } else { Presence::Running.as_str() },
        "state": board.state(),
        "job_id": job.id,
        "uptime_s": board.uptime_s(),
        "status_address": address(),
        "last_report_s": 0.0,
        "tasks": tasks,
    })
}

static ADDRESS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Where this process's status page answers (`host:port`), if it serves one:
/// what the other copies' pages link to. Set once, when the page binds.
pub fn address() -> Option<String> {
    ADDRESS.get().cloned()
}

pub(crate) fn set_address(address: String) {
    let _ = ADDRESS.set(address);
}

#[cfg(test)]
mod tests {
    use super::*;
    use beam_kafka_runtime::codec::coders::encode_varint;

    fn info(kind: &str, name: &str, ints: &[i64]) -> MonitoringInfo {
        let mut payload = Vec::new();
        for v in ints {
            encode_varint(*v as u64, &mut payload);
        }
        MonitoringInfo {
            urn: format!("beam:metric:user:{kind}:v1"),
            r#type: format!("beam:metrics:{kind}:v1"),
            payload,
            labels: [("NAME".to_string(), name.to_string()), ("NAMESPACE".into(), "ns".into()), ("PTRANSFORM".into(), "t".into())].into(),
            ..Default::default()
        }
    }

    #[test]
    fn user_metrics_pair_attempted_with_committed() {
        let rows = user_metrics(
            &[info("sum_int64", "c", &[7]), info("distribution_int64", "d", &[2, 10, 3, 7]), info("latest_int64", "g", &[99, 5])],
            &[info("sum_int64", "c", &[5])],
        );
        assert_eq!(rows.len(), 3);
        let c = rows.iter().find(|r| r["name"] == "c").unwrap();
        assert_eq!((c["attempted"].as_str(), c["committed"].as_str()), (Some("7"), Some("5")));
        let d = rows.iter().find(|r| r["name"] == "d").unwrap();
        assert_eq!(d["attempted"], "count 2, sum 10, min 3, max 7");
        assert!(d["committed"].is_null());
        assert_eq!(rows.iter().find(|r| r["name"] == "g").unwrap()["attempted"], "5");
    }

    #[test]
    fn message_times_in_ms() {
        assert_eq!(message_ms("1764727200.042"), 1_764_727_200_042);
        assert_eq!(message_ms("12"), 12_000);
    }
}
