//! One view of an application across its copies: each copy's job reports
//! itself and its tasks (the status API's task rows) to the application's
//! copies topic (`actors::copies`), and the status page, `/api` and
//! `beam-kafka status` show every copy's tasks. Which report counts as
//! current is `runtime::app::copies`' decision.
use beam_kafka_actors::copies::Report;
use beam_kafka_runtime::app::copies::{task_owners, Heard, Presence};
use beam_kafka_runtime::plan::topology::TaskId;
use serde_json::{json, Value};

use crate::jobs::Job;

/// A copy's report as read: what the view needs of it.
pub(crate) struct Read {
    pub heard: Heard,
    pub body: Value,
}

pub(crate) fn parse(copy: &str, report: &Report) -> Option<Read> {
    let body: Value = serde_json::from_slice(&report.bytes).ok()?;
    let heard = Heard {
        copy: copy.to_string(),
        written_ms: body["time_ms"].as_i64()?,
        received_ms: report.received_ms,
        left: body["left"].as_bool().unwrap_or(false),
    };
    Some(Read { heard, body })
}

/// Each copy's report as who wrote it, when, and which version of the
/// pipeline it runs (`plan`: a fingerprint of its manifest).
pub fn versions(reports: &[(String, Report)]) -> Vec<(Heard, Option<String>)> {
    reports.iter().filter_map(|(c, r)| parse(c, r)).map(|r| (r.heard, r.body["plan"].as_str().map(str::to_string))).collect()
}

pub(crate) fn task_id(row: &Value) -> Option<TaskId> {
    row["task"].as_str()?.parse().ok()
}

/// The application's copies, and the tasks each running copy reports, as
/// of `now_ms`; `own` (this copy's live rows) replace its own report.
pub struct View {
    pub copies: Vec<Value>,
    pub tasks: Vec<Value>,
}

pub fn view(reports: &[(String, Report)], this: &str, own: Option<(Value, Vec<Value>)>, now_ms: i64) -> View {
    let read: Vec<Read> = reports.iter().filter(|(c, _)| c != this || own.is_none()).filter_map(|(c, r)| parse(c, r)).collect();
    let mut copies = Vec::new();
    let mut rows: Vec<(String, i64, Value)> = Vec::new();
    if let Some((summary, tasks)) = own {
        copies.push(summary);
        rows.extend(tasks.into_iter().map(|t| (this.to_string(), now_ms, t)));
    }
    for r in &read {
        let Some(presence) = r.heard.presence(now_ms) else { continue };
        let tasks = r.body["tasks"].as_array().cloned().unwrap_or_default();
        copies.push(json!({
            "copy": r.heard.copy,
            "this": false,
            "presence": presence.as_str(),
            "state": r.body["state"],
            "job_id": r.body["job_id"],
            "uptime_s": r.body["uptime_s"],
            "status_address": r.body["status_address"],
            "last_report_s": r.heard.age_ms(now_ms) as f64 / 1000.0,
            "tasks": tasks.len(),
        }));
        if presence == Presence::Running {
            rows.extend(tasks.into_iter().map(|t| (r.heard.copy.clone(), r.heard.written_ms, t)));
        }
    }
    let owners = task_owners(rows.iter().filter_map(|(c, w, t)| Some((c.as_str(), *w, task_id(t)?))), this);
    let mut tasks: Vec<Value> =
        rows.iter().filter(|(c, _, t)| task_id(t).is_some_and(|id| owners.get(&id) == Some(c))).map(|(_, _, t)| t.clone()).collect();
    tasks.sort_by_key(|t| task_id(t).map(|id| (id.sub_topology, id.partition)));
    copies.sort_by_key(|c| (c["this"] != true, c["copy"].as_str().unwrap_or_default().to_string()));
    View { copies, tasks }
}

/// The reports this job has read, if it reports.
pub fn reports(job: &Job) -> Vec<(String, Report)> {
    job.copies.get().map(|r| r.reports.iter().map(|e| (e.key().clone(), e.value().clone())).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(copy: &str, written_ms: i64, left: bool, tasks: &[&str]) -> (String, Report) {
        let rows: Vec<Value> = tasks.iter().map(|t| json!({ "task": t, "copy": copy })).collect();
        let body = json!({ "copy": copy, "time_ms": written_ms, "left": left, "state": "RUNNING", "tasks": rows });
        (copy.to_string(), Report { received_ms: written_ms + 10, bytes: serde_json::to_vec(&body).unwrap() })
    }

    fn shown(v: &View) -> Vec<(String, String)> {
        v.tasks.iter().map(|t| (t["task"].as_str().unwrap().to_string(), t["copy"].as_str().unwrap().to_string())).collect()
    }

    #[test]
    fn every_running_copys_tasks_are_shown_once_and_this_copys_rows_win() {
        let now = 1_000_000;
        let reports = vec![
            report("a:1", now - 1_000, false, &["0_0", "0_1"]),
            report("b:2", now - 500, false, &["0_1", "0_2"]),
            report("c:3", now - 60_000, false, &["0_3"]),
            report("d:4", now - 2_000, true, &[]),
            report("junk", now, false, &[]),
        ];
        let mut reports = reports;
        reports.push(("bad".into(), Report { received_ms: now, bytes: b"not json".to_vec() }));
        let own = (json!({ "copy": "b:2", "this": true }), vec![json!({ "task": "0_2", "copy": "b:2" })]);
        let v = view(&reports, "b:2", Some(own), now);
        // b's live board replaces its report: 0_1 is a's now (b let it go).
        assert_eq!(shown(&v), vec![("0_0".into(), "a:1".into()), ("0_1".into(), "a:1".into()), ("0_2".into(), "b:2".into())]);
        let presence: Vec<(&str, &str)> =
            v.copies.iter().map(|c| (c["copy"].as_str().unwrap(), c["presence"].as_str().unwrap_or("-"))).collect();
        assert_eq!(presence, vec![("b:2", "-"), ("a:1", "running"), ("c:3", "silent"), ("d:4", "left"), ("junk", "running")]);
    }

    #[test]
    fn without_a_copy_of_its_own_the_latest_report_of_a_task_wins() {
        let now = 1_000_000;
        let reports = vec![report("a:1", now - 3_000, false, &["0_1"]), report("b:2", now - 1_000, false, &["0_1"])];
        let v = view(&reports, "cli:9", None, now);
        assert_eq!(shown(&v), vec![("0_1".into(), "b:2".into())]);
        assert_eq!(v.copies.len(), 2);
    }
}
