#!/usr/bin/env bash
# Runs every test: the Rust unit tests, then the integration tests against a
# real Kafka broker (started here on localhost:19092 unless one answers) and
# the real beam-kafka binary, driven by the pinned apache-beam package.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PORT="${BEAM_KAFKA_TEST_PORT:-19092}"
"$REPO_ROOT/scripts/setup.sh"
"$REPO_ROOT/scripts/build.sh" >/dev/null
PY="$("$REPO_ROOT/scripts/python-env.sh")"
"$REPO_ROOT/scripts/kafka.sh" fetch

results="$(mktemp -d)"
log "unit tests (cargo test)"
(cd "$REPO_ROOT" && cargo test --locked --workspace 2>&1) | tee "$results/cargo.log"
cargo_rc=${PIPESTATUS[0]}

started=""
if ! "$REPO_ROOT/scripts/kafka.sh" status "$PORT"; then
  "$REPO_ROOT/scripts/kafka.sh" start "$PORT"
  started="$PORT"
fi
trap 'if [[ -n "$started" ]]; then "$REPO_ROOT/scripts/kafka.sh" stop "$started"; fi' EXIT
export BEAM_KAFKA_TEST_BOOTSTRAP="localhost:$PORT"

log "integration tests (pytest itests)"
(cd "$REPO_ROOT" && "$PY" -m pytest itests -v -rs 2>&1) | tee "$results/pytest.log"
pytest_rc=${PIPESTATUS[0]}
if [[ -n "$started" ]]; then "$REPO_ROOT/scripts/kafka.sh" stop "$started"; started=""; fi

# One closing line over both runners.
sum() { { grep -oE "[0-9]+ $1" "$2" || true; } | awk '{s+=$1} END {print s+0}'; }
passed=$(( $(sum passed "$results/cargo.log") + $(sum passed <(tail -n 1 "$results/pytest.log")) ))
failed=$(( $(sum failed "$results/cargo.log") + $(sum failed <(tail -n 1 "$results/pytest.log")) ))
skipped=$(( $(sum ignored "$results/cargo.log") + $(sum skipped <(tail -n 1 "$results/pytest.log")) ))
echo "all: $passed passed, $failed failed, $skipped skipped"
if [[ $cargo_rc -ne 0 || $pytest_rc -ne 0 ]]; then exit 1; fi
exit 0
