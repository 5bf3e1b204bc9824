#!/usr/bin/env bash
# Runs every test: the Rust unit tests; the integration tests against a real
# Kafka broker (started here on localhost:19092 unless one answers) and the
# real beam-kafka binary, driven by the pinned apache-beam package; and Beam's
# own PortableRunnerTest suite in batch and streaming mode.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PORT="${BEAM_KAFKA_TEST_PORT:-19092}"
"$REPO_ROOT/scripts/setup.sh" --tests
"$REPO_ROOT/scripts/build.sh" >/dev/null
PY="$("$REPO_ROOT/scripts/python-env.sh")"
"$REPO_ROOT/scripts/kafka.sh" fetch

results="$(mktemp -d)"
# Runs a test command, keeping its output in $results/$1.log; never exits the script.
run() {
  local name="$1"; shift
  set +e
  "$@" 2>&1 | tee "$results/$name.log"
  local rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}

# House rules: formatted, and no clippy warning.
log "cargo fmt --check and cargo clippy -D warnings"
lint_rc=0; run lint bash -c "cd '$REPO_ROOT' && cargo fmt --all --check && cargo clippy --locked --workspace --all-targets -- -D warnings" || lint_rc=$?

log "Kubernetes manifests (kubeconform, strict)"
k8s_rc=0; run k8s "$REPO_ROOT/scripts/k8s-validate.sh" || k8s_rc=$?

log "unit tests (cargo test)"
cargo_rc=0; run cargo bash -c "cd '$REPO_ROOT' && cargo test --locked --workspace" || cargo_rc=$?

# The Go package users import (go/beamkafka): formatted, vetted, its tests.
log "the Go package (gofmt, go vet, go test)"
gopkg_rc=0; run go-package "$REPO_ROOT/scripts/go-package.sh" || gopkg_rc=$?

# The decoders' fuzz targets, briefly (scripts/fuzz.sh 600 is the long run).
log "fuzz smoke run (10 s per target)"
fuzz_rc=0; run fuzz env FUZZ_DIR="$BEAM_KAFKA_CACHE/fuzz-ci" "$REPO_ROOT/scripts/fuzz.sh" 10 || fuzz_rc=$?
grep -E '^[a-z_]+: rc=' "$results/fuzz.log" || true

started=""
if ! "$REPO_ROOT/scripts/kafka.sh" status "$PORT"; then
  "$REPO_ROOT/scripts/kafka.sh" start "$PORT"
  started="$PORT"
fi
trap 'if [[ -n "$started" ]]; then "$REPO_ROOT/scripts/kafka.sh" stop "$started"; fi' EXIT
export BEAM_KAFKA_TEST_BOOTSTRAP="localhost:$PORT"

log "integration tests (pytest itests)"
pytest_rc=0; run pytest bash -c "cd '$REPO_ROOT' && '$PY' -m pytest itests -v -rs --durations=15 --ignore=itests/beam_suite" || pytest_rc=$?

# Beam's Go integration suite, a representative part (scripts/go-integration.sh
# runs all of it): Go pipelines through plain universal-runner flags.
log "Beam's Go integration suite (--short)"
go_rc=0; run go-integration "$REPO_ROOT/scripts/go-integration.sh" --short || go_rc=$?
grep -E '^(go-integration|FAIL) ' "$results/go-integration.log" || true

# Beam's Java @ValidatesRunner tests, two of its classes, ParDoTest's timer and
# OnWindowExpiration tests, its set, multimap and ordered-list range state tests (the latter
# flush through OnWindowExpiration), CombineTest's triggered global combine (a final pane under
# FIRE_ALWAYS), bounded-trie metrics, a metadata-preserving Reshuffle, time-sorted input and a
# cross-language test (Python transforms with a side input, on Python harnesses the job server
# starts) (scripts/java-validates-runner.sh with no arguments runs all 35, ~15 min):
# Java pipelines through TestBeamKafkaRunner.
log "Beam's Java ValidatesRunner tests (GroupByKeyTest, SplittableDoFnTest, ParDoTest\$TimerTests, OnWindowExpiration, set and multimap state, FIRE_ALWAYS, bounded tries, metadata, time-sorted input, cross-language)"
java_tests='GroupByKeyTest*,SplittableDoFnTest*,ParDoTest$TimerTests*,ParDoTest$OnWindowExpirationTests*'
java_tests+=',ParDoTest$TimestampTests#testOnWindowTimestampSkew,ParDoTest$StateTests#testSetState*'
java_tests+=',ParDoTest$StateTests#testOrderedListStateRange*,CombineTest$WindowingTests#testGlobalCombineWithDefaultsAndTriggers'
java_tests+=',ParDoTest$StateTests#testMultimapState*,MetricsTest$AttemptedMetricTests#testAttemptedBoundedTrieMetrics'
java_tests+=',ReshuffleTest#testReshufflePreservesMetadata,ParDoTest$StateTests#testRequiresTimeSortedInput'
java_tests+=',ValidateRunnerXlangTest$MultiInputOutputWithSideInputTest*'
java_rc=0; run java-validates-runner "$REPO_ROOT/scripts/java-validates-runner.sh" -Dtest="$java_tests" || java_rc=$?
grep -E '^java-validates-runner' "$results/java-validates-runner.log" || true

# Packaging: the wheel, installed into an empty venv, runs the hello example
# with its own binary; `cargo install --path server` installs the binary.
log "packaging: the wheel in an empty venv, and cargo install"
package_rc=0
run wheel "$REPO_ROOT/scripts/wheel.sh" --out "$results/wheel" --check "$BEAM_KAFKA_TEST_BOOTSTRAP" || package_rc=$?
run cargo-install bash -c "cd '$REPO_ROOT' && cargo install --locked --debug --path server --root '$results/cargo-install' \
  && '$results/cargo-install/bin/beam-kafka' --version" || package_rc=$?

# Beam's own suite: all of it (batch, streaming, triggers) on the oldest
# supported apache-beam release at internal parallelism 4, and its batch
# mode on the newest at parallelism 1: same tests, same skips, and results
# must not depend on the parallelism. Each release whole at either is
# `BEAM_KAFKA_SUITE_PARALLELISM=N [BEAM_KAFKA_PYTHON_SDK=V] scripts/beam-suite.sh`.
suite_rc=0
log "Beam's PortableRunnerTest suite on apache-beam $BEAM_PYTHON_SDK_OLDEST (internal_parallelism=4)"
run "suite-4" env BEAM_KAFKA_SUITE_PARALLELISM=4 "$REPO_ROOT/scripts/beam-suite.sh" -q >/dev/null || suite_rc=1
grep -E '^(beam-suite|FAILED|ERROR) ' "$results/suite-4.log" || true
log "Beam's PortableRunnerTest suite, batch, on apache-beam $BEAM_PYTHON_SDK_NEWEST (internal_parallelism=1)"
run "suite-newest" env BEAM_KAFKA_SUITE_PARALLELISM=1 BEAM_KAFKA_PYTHON_SDK="$BEAM_PYTHON_SDK_NEWEST" "$REPO_ROOT/scripts/beam-suite.sh" batch -q >/dev/null || suite_rc=1
grep -E '^(beam-suite|FAILED|ERROR) ' "$results/suite-newest.log" || true

# The benchmark harness still works (tiny: the real comparison is bench/run.sh).
log "benchmark smoke run (bench/compare.py, bench/native.py and bench/scale.py, tiny)"
bench_rc=0; run bench "$PY" "$REPO_ROOT/bench/compare.py" --binary="$REPO_ROOT/bin/beam-kafka" \
  --bootstrap_servers="$BEAM_KAFKA_TEST_BOOTSTRAP" --elements=2000 --keys=10 --repeat=1 --warmup=0 \
  --runners=beam-kafka-eo,python-ref --out="$results/bench" >/dev/null || bench_rc=$?
grep -A20 '^SDK-bound' "$results/bench.log" || true
run bench-native "$PY" "$REPO_ROOT/bench/native.py" --binary="$REPO_ROOT/bin/beam-kafka" \
  --bootstrap_servers="$BEAM_KAFKA_TEST_BOOTSTRAP" --records=2000 --keys=10 --rate=100 --seconds=3 \
  --timeout=120 --out="$results/bench" >/dev/null || bench_rc=$?
tail -n 25 "$results/bench-native.log" || true
run bench-scale "$PY" "$REPO_ROOT/bench/scale.py" --binary="$REPO_ROOT/bin/beam-kafka" \
  --bootstrap_servers="$BEAM_KAFKA_TEST_BOOTSTRAP" --sizes=20000 --out="$results/bench" >/dev/null || bench_rc=$?
grep -A3 '^workload  ' "$results/bench-scale.log" || true
if [[ -n "$started" ]]; then "$REPO_ROOT/scripts/kafka.sh" stop "$started"; started=""; fi

# One closing line over every runner.
sum() { { grep -oE "[0-9]+ $1" "$2" || true; } | awk '{s+=$1} END {print s+0}'; }
suite_lines() { grep -hE '^(beam-suite|go-integration|java-validates-runner)[ :]' "$results"/suite-*.log "$results/go-integration.log" "$results/java-validates-runner.log" 2>/dev/null || true; }
passed=$(( $(sum passed "$results/cargo.log") + $(sum passed <(tail -n 1 "$results/pytest.log")) + $(sum passed <(suite_lines)) ))
failed=$(( $(sum failed "$results/cargo.log") + $(sum failed <(tail -n 1 "$results/pytest.log")) + $(sum failed <(suite_lines)) ))
skipped=$(( $(sum ignored "$results/cargo.log") + $(sum skipped <(tail -n 1 "$results/pytest.log")) + $(sum skipped <(suite_lines)) ))
suite_lines | sed 's/^/  /'
echo "all: $passed passed, $failed failed, $skipped skipped"
if [[ $bench_rc -ne 0 ]]; then echo "the benchmark smoke run failed (see above)"; fi
if [[ $lint_rc -ne 0 ]]; then echo "cargo fmt or clippy found problems (see above)"; fi
if [[ $package_rc -ne 0 ]]; then echo "the wheel or cargo install failed (see above)"; fi
if [[ $go_rc -ne 0 ]]; then echo "Beam's Go integration tests failed (see above)"; fi
if [[ $gopkg_rc -ne 0 ]]; then echo "the Go package (go/) is not gofmt-clean, or go vet or its tests failed (see above)"; fi
if [[ $java_rc -ne 0 ]]; then echo "Beam's Java ValidatesRunner tests failed (see above)"; fi
if [[ $k8s_rc -ne 0 ]]; then echo "a Kubernetes manifest under ops/kubernetes is invalid (see above)"; fi
if [[ $fuzz_rc -ne 0 ]]; then echo "a fuzz target found a crash (see above; its input is under $BEAM_KAFKA_CACHE/fuzz-ci/artifacts)"; fi
if [[ $gopkg_rc -ne 0 || $k8s_rc -ne 0 || $fuzz_rc -ne 0 || $lint_rc -ne 0 || $package_rc -ne 0 || $go_rc -ne 0 || $java_rc -ne 0 || $cargo_rc -ne 0 || $pytest_rc -ne 0 || $suite_rc -ne 0 || $bench_rc -ne 0 ]]; then exit 1; fi
exit 0
