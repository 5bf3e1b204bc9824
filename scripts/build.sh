#!/usr/bin/env bash
# Builds the beam-kafka binary (debug unless --release) into the cache's target
# dir and links it as bin/beam-kafka, where the Python runner finds it.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
profile=debug; flags=()
if [[ "${1:-}" == "--release" ]]; then profile=release; flags=(--release); unset ROCKSDB_LIB_DIR; else use_prebuilt_rocksdb; fi
command -v cargo >/dev/null || die "cargo is needed (https://rustup.rs)"
log "building beam-kafka ($profile) in $CARGO_TARGET_DIR"
(cd "$REPO_ROOT" && cargo build --locked "${flags[@]}" -p beam-kafka-server --bin beam-kafka >&2)
mkdir -p "$REPO_ROOT/bin"
ln -sf "$CARGO_TARGET_DIR/$profile/beam-kafka" "$REPO_ROOT/bin/beam-kafka"
echo "$REPO_ROOT/bin/beam-kafka"
