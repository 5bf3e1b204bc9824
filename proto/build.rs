//! Compiles Beam's model protos and the runner's own protos (record envelope,
//! Kafka transform payloads).
//!
//! Beam's `.proto` files are never committed: `scripts/beam-protos.sh` fetches
//! them from the pinned, checksummed `beam-model-*` jars on Maven Central.
//! Set `BEAM_PROTO_DIR` to use an already extracted copy instead.
use std::path::{Path, PathBuf};
use std::process::Command;

const BEAM_PROTOS: &[&str] = &[
    "org/apache/beam/model/pipeline/v1/beam_runner_api.proto",
    "org/apache/beam/model/pipeline/v1/endpoints.proto",
    "org/apache/beam/model/pipeline/v1/external_transforms.proto",
    "org/apache/beam/model/pipeline/v1/metrics.proto",
    "org/apache/beam/model/pipeline/v1/schema.proto",
    "org/apache/beam/model/pipeline/v1/standard_window_fns.proto",
    "org/apache/beam/model/fn_execution/v1/beam_fn_api.proto",
    "org/apache/beam/model/fn_execution/v1/beam_provision_api.proto",
    "org/apache/beam/model/job_management/v1/beam_job_api.proto",
    "org/apache/beam/model/job_management/v1/beam_artifact_api.proto",
    "org/apache/beam/model/job_management/v1/beam_expansion_api.proto",
];

fn beam_proto_dir(manifest: &Path) -> PathBuf {
    println!("cargo:rerun-if-env-changed=BEAM_PROTO_DIR");
    if let Ok(dir) = std::env::var("BEAM_PROTO_DIR") {
        return PathBuf::from(dir);
    }
    let script = manifest.join("../scripts/beam-protos.sh");
    let out = Command::new("bash").arg(&script).output().unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    if !out.status.success() {
        panic!(
            "{} failed; Beam's protos are fetched from Maven Central at build time:\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let beam = beam_proto_dir(&manifest);
    let own = manifest.join("beam_kafka");
    let mut files: Vec<PathBuf> = BEAM_PROTOS.iter().map(|p| beam.join(p)).collect();
    files.push(own.join("envelope.proto"));
    files.push(own.join("kafka_io.proto"));
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&files, &[beam, own])
        .unwrap_or_else(|e| panic!("compiling protos: {e}"));
}
