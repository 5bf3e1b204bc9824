//! `beam-kafka status`: every copy of a running application and every task
//! they run, as the copies report them to the application's copies topic
//! (what each copy's status page shows too).
//!
//!   beam-kafka status --application_id=wordcount --bootstrap_servers=kafka:9092
//!   beam-kafka status --json -- --application_id=wordcount ...
use anyhow::{anyhow, bail};
use serde_json::{json, Value};

use crate::copy_view;
use crate::{options, run};

#[derive(clap::Args)]
pub struct StatusArgs {
    /// Print the view as JSON: `copies` and `tasks`, as the status API's
    /// job has them.
    #[arg(long)]
    json: bool,
    /// Runner options: --application_id and --bootstrap_servers (and
    /// --kafka_property for a secured cluster), as the job was given.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    options: Vec<String>,
}

pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let given: Vec<String> = args.options.iter().filter(|a| *a != "--").cloned().collect();
    let values = options::from_struct(&run::parse_options(&given)?);
    if !values.contains_key("application_id") {
        bail!("--application_id is needed: the application whose copies to show");
    }
    let opts = beam_kafka_config::RunnerOptions::parse(&values)
        .map_err(|errors| anyhow!("{}", errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")))?;
    let app = opts.application_id.clone();
    let read = tokio::task::spawn_blocking(move || {
        // Brokers that do not answer (or refuse) are named as such first.
        beam_kafka_actors::kafka::admin::Admin::connect(&opts)?;
        beam_kafka_actors::copies::read_all(&opts)
    })
    .await?
    .map_err(anyhow::Error::msg)?;
    let Some(reports) = read else {
        if args.json {
            println!("{}", json!({ "application_id": app, "copies": [], "tasks": [] }));
        } else {
            println!("application '{app}' is not running: it has no copies topic (it never ran, or it finished)");
        }
        return Ok(());
    };
    let view = copy_view::view(&reports, "", None, beam_kafka_actors::status_board::now_ms());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json!({ "application_id": app, "copies": view.copies, "tasks": view.tasks }))?);
    } else {
        print!("{}", text(&app, &view));
    }
    Ok(())
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.as_f64().filter(|f| f.fract() != 0.0).map_or_else(|| n.to_string(), |f| format!("{f:.1}")),
        other => other.to_string(),
    }
}

/// Rows of cells, aligned in columns.
fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        out += &line(r);
    }
    out
}

fn text(app: &str, view: &copy_view::View) -> String {
    let running = view.copies.iter().filter(|c| c["presence"] == "running").count();
    let mut out = format!(
        "application '{app}': {running} running cop{} ({} reported)\n\n",
        if running == 1 { "y" } else { "ies" },
        view.copies.len()
    );
    let copies = view
        .copies
        .iter()
        .map(|c| {
            vec![
                cell(&c["copy"]),
                cell(&c["presence"]),
                cell(&c["state"]),
                cell(&c["tasks"]),
                format!("{} s ago", cell(&c["last_report_s"])),
                cell(&c["status_address"]),
            ]
        })
        .collect();
    out += &table(&["COPY", "PRESENCE", "JOB STATE", "TASKS", "LAST REPORT", "STATUS PAGE"], copies);
    out += "\n";
    let tasks = view
        .tasks
        .iter()
        .map(|t| {
            vec![
                cell(&t["task"]),
                cell(&t["copy"]),
                cell(&t["state"]),
                cell(&t["lag"]),
                cell(&t["records_read"]),
                cell(&t["records_written"]),
                cell(&t["output_watermark"]),
                t["waiting"].as_array().map(|w| w.iter().map(cell).collect::<Vec<_>>().join("; ")).unwrap_or_default(),
            ]
        })
        .collect();
    out += &table(&["TASK", "COPY", "STATE", "LAG", "READ", "WRITTEN", "OUTPUT WATERMARK", "WAITING FOR"], tasks);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_lists_copies_then_tasks_in_aligned_columns() {
        let view = copy_view::View {
            copies: vec![
                json!({ "copy": "host-a:12", "presence": "running", "state": "RUNNING", "tasks": 2, "last_report_s": 1.5, "status_address": null }),
                json!({ "copy": "host-b:7", "presence": "silent", "state": "RUNNING", "tasks": 1, "last_report_s": 30, "status_address": "host-b:8080" }),
            ],
            tasks: vec![
                json!({ "task": "0_0", "copy": "host-a:12", "state": "Running", "lag": 3, "records_read": 10, "records_written": 4, "output_watermark": "+inf", "waiting": ["input"] }),
            ],
        };
        let out = text("wc", &view);
        assert!(out.starts_with("application 'wc': 1 running copy (2 reported)\n"), "{out}");
        assert!(out.contains("host-a:12  running   RUNNING    2      1.5 s ago    -\n"), "{out}");
        assert!(out.contains("host-b:7   silent    RUNNING    1      30 s ago     host-b:8080\n"), "{out}");
        assert!(out.contains("0_0   host-a:12  Running  3    10    4        +inf              input\n"), "{out}");
    }
}
