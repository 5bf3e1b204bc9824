//! What the harness processes the runner starts from an SDK's staged code
//! share (`java_harness`, `go_harness`): their options as the JSON their
//! SDKs read, and their output logged without their worker's secret.
use tokio::process::{Child, Command};

/// Pipeline options as JSON, keys as sent (`beam:option:<name>:v1`).
pub fn options_json(options: &prost_types::Struct) -> String {
    serde_json::Value::Object(struct_json(options)).to_string()
}

/// Spawns `command`, killed when dropped, logging each line it prints as
/// `what` with the worker's secret id replaced by its public name (Java's
/// harness prints its id at start).
pub fn spawn_logged(mut command: Command, worker_id: &str, what: &'static str) -> std::io::Result<Child> {
    let mut child = command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).kill_on_drop(true).spawn()?;
    let name = crate::public_name(worker_id).to_string();
    if let Some(out) = child.stdout.take() {
        tokio::spawn(forward_lines(out, worker_id.to_string(), name.clone(), what));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(forward_lines(err, worker_id.to_string(), name, what));
    }
    Ok(child)
}

async fn forward_lines(from: impl tokio::io::AsyncRead + Unpin, secret: String, name: String, what: &'static str) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(worker = %name, "{what}: {}", line.replace(&secret, &name));
    }
}

fn struct_json(s: &prost_types::Struct) -> serde_json::Map<String, serde_json::Value> {
    s.fields.iter().map(|(k, v)| (k.clone(), value_json(v))).collect()
}

fn value_json(v: &prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        // Whole numbers as integers: Java reads an int option from `3`, not `3.0`.
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9e15 => serde_json::Value::from(*n as i64),
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n).map_or(serde_json::Value::Null, serde_json::Value::Number),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
        Some(Kind::StructValue(s)) => serde_json::Value::Object(struct_json(s)),
        Some(Kind::ListValue(l)) => serde_json::Value::Array(l.values.iter().map(value_json).collect()),
    }
}
