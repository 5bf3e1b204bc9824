//! This copy's part in the view of its application: it reports itself and
//! its tasks (the status API's task rows) to the copies topic
//! (`actors::copies`) while its job runs, stands by for other copies' tasks
//! from what they report, and steps down when a newer version took over
//! (`crate::superseded`). What the reports add up to is `crate::copy_view`.
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use beam_kafka_actors::copies::Reporting;
use beam_kafka_actors::standby::Standby;
use beam_kafka_actors::status_board::{now_ms, StatusBoard};
use beam_kafka_runtime::app::copies::{task_owners, Presence};
use beam_kafka_runtime::app::standby::standby_tasks;
use beam_kafka_runtime::app::warm_up::tasks_to_warm;
use beam_kafka_runtime::plan::topology::TaskId;
use serde_json::{json, Value};

use crate::copy_view::{parse, reports, task_id};
use crate::jobs::Job;
use crate::status_api;

/// Starts reporting once the job has its board (it is planned).
pub fn start(job: &Arc<Job>, board: &Arc<StatusBoard>) {
    let (job_ref, board_ref) = (Arc::downgrade(job), Arc::downgrade(board));
    let reporting = Reporting::start(&job.runner_options, board.copy.clone(), move |left| match (job_ref.upgrade(), board_ref.upgrade()) {
        (Some(job), Some(board)) => report(&job, &board, left),
        _ => serde_json::to_vec(&json!({ "time_ms": now_ms(), "left": true, "tasks": [] })).unwrap_or_default(),
    });
    let read_up = reporting.read_up.clone();
    let _ = job.copies.set(reporting);
    crate::superseded::watch(job);
    let replicas = job.runner_options.num_standby_replicas as usize;
    if replicas > 0 {
        let (job_ref, board_ref) = (Arc::downgrade(job), Arc::downgrade(board));
        let placement = Box::new(move |warming| match (job_ref.upgrade(), board_ref.upgrade()) {
            (Some(job), Some(board)) if read_up.load(Ordering::Acquire) => Some(placement(&job, &board, replicas, warming)),
            (Some(_), Some(_)) => None,
            _ => Some(Default::default()),
        });
        // A copy joining while others run warms up first (`runtime::app::warm_up`);
        // not a static member: the group keeps its partitions for it while
        // it restarts, and their tasks would wait for the warm-up.
        let warm_up = job.runner_options.group_instance_id.is_none();
        match Standby::start(&job.runner_options, placement, warm_up) {
            Ok(standby) => *job.standby.lock().expect("standby lock") = Some(standby),
            Err(e) => board.event(beam_kafka_actors::status_board::Level::Warning, format!("no standby replicas: {e}")),
        }
    }
}

/// Writes the job's last report (it ended) and stops reporting and
/// standing by.
pub async fn stop(job: &Job) {
    let standby = job.standby.lock().expect("standby lock").take();
    if let Some(reporting) = job.copies.get().cloned() {
        let _ = tokio::task::spawn_blocking(move || {
            reporting.stop();
            drop(standby);
        })
        .await;
    }
}

/// The tasks this copy stands by for (`runtime::app::standby`; warming up:
/// every task another copy runs, `runtime::app::warm_up`), from the tasks the
/// running copies report, and the tasks it runs.
fn placement(job: &Job, board: &StatusBoard, replicas: usize, warming: bool) -> (BTreeSet<TaskId>, BTreeSet<TaskId>) {
    let now = now_ms();
    let own: BTreeSet<TaskId> = board.tasks().iter().map(|(t, _)| *t).collect();
    let mut running = BTreeSet::from([board.copy.clone()]);
    let mut rows: Vec<(String, i64, TaskId)> = own.iter().map(|t| (board.copy.clone(), now, *t)).collect();
    for (copy, report) in reports(job) {
        if copy == board.copy {
            continue;
        }
        let Some(r) = parse(&copy, &report) else { continue };
        if r.heard.presence(now) != Some(Presence::Running) {
            continue;
        }
        let tasks = r.body["tasks"].as_array().cloned().unwrap_or_default();
        rows.extend(tasks.iter().filter_map(task_id).map(|t| (copy.clone(), r.heard.written_ms, t)));
        running.insert(copy);
    }
    let owners = task_owners(rows.iter().map(|(c, w, t)| (c.as_str(), *w, *t)), &board.copy);
    let wanted = if warming { tasks_to_warm(&owners, &board.copy) } else { standby_tasks(&owners, &running, &board.copy, replicas) };
    (wanted, own)
}

/// This copy as the others see it.
fn report(job: &Job, board: &StatusBoard, left: bool) -> Vec<u8> {
    let tasks: Vec<Value> = board.tasks().iter().map(|(t, e)| status_api::task(board, *t, e)).collect();
    let value = json!({
        "copy": board.copy,
        "job_id": job.id,
        "job_name": job.name,
        "state": board.state(),
        "uptime_s": board.uptime_s(),
        "status_address": status_api::address(),
        "time_ms": now_ms(),
        "left": left,
        "plan": job.plan_fingerprint.get(),
        "tasks": if left { Vec::new() } else { tasks },
    });
    serde_json::to_vec(&value).unwrap_or_default()
}
