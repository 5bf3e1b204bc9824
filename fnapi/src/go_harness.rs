//! Runs a Go pipeline's staged worker binary as its harness, for an
//! environment naming Beam's Go SDK image (Go's default), as the image's
//! boot program would: no Docker, and the harness belongs to the job, not
//! to the program that submitted it. `runtime::app::sdk_images` decides what it
//! is told.
use std::path::Path;

use beam_kafka_proto::pipeline as pb;
use beam_kafka_runtime::app::sdk_images;
use tokio::process::Command;

use crate::environment::{Endpoints, Harness};

/// Starts one harness for `env` in `work_dir` (the worker's own, created
/// here, private): a copy of the staged binary (a staged file is not
/// executable), its options file and its scratch space.
pub fn start(
    env: &pb::Environment,
    worker_id: &str,
    ep: &Endpoints,
    options: &prost_types::Struct,
    work_dir: &Path,
) -> Result<Harness, String> {
    let staged = sdk_images::go_worker_binary(env)
        .ok_or("the Go environment's staged artifacts hold no worker binary (Go's SDK stages it as \"worker\")")?;
    let private = |e: std::io::Error| format!("cannot prepare {} for the Go harness: {e}", work_dir.display());
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(work_dir).map_err(private)?;
    }
    let binary = work_dir.join("worker");
    std::fs::copy(&staged, &binary).map_err(|e| format!("cannot copy the staged Go worker binary {staged}: {e}"))?;
    let options_file = work_dir.join("pipeline_options.json");
    write_private(&binary, None, 0o700).map_err(private)?;
    write_private(&options_file, Some(crate::harness_process::options_json(options).as_bytes()), 0o600).map_err(private)?;
    let dir = work_dir.display().to_string();
    let mut command = Command::new(&binary);
    command
        .args(sdk_images::go_worker_args(worker_id, &ep.control, &ep.logging, &dir))
        .env("PIPELINE_OPTIONS_FILE", &options_file)
        .current_dir(work_dir);
    let child = crate::harness_process::spawn_logged(command, worker_id, "Go harness")
        .map_err(|e| format!("cannot start the Go worker binary {staged}: {e}"))?;
    Ok(Harness::Process(child))
}

/// Sets `path`'s mode, writing `bytes` first when given.
fn write_private(path: &Path, bytes: Option<&[u8]>, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(bytes) = bytes {
        std::fs::write(path, bytes)?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}
