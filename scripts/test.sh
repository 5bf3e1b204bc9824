#!/usr/bin/env bash
# Runs the tests, in two tiers (README "Development" says which is which):
#
#   scripts/test.sh          every kind of test, each suite once (what CI runs):
#                            lints, the Rust unit tests, the integration tests
#                            against a real Kafka broker (started here on
#                            localhost:19092 unless one answers) and the real
#                            beam-kafka binary, driven by the pinned apache-beam;
#                            short runs of Beam's Go and Java suites, the fuzz
#                            targets and the benchmarks; Beam's own Python suite
#                            on the pinned release; packaging.
#   scripts/test.sh --full   the same, with the long variants: Beam's Java
#                            ValidatesRunner and Go integration suites whole,
#                            Beam's Python suite on the oldest and the newest
#                            supported release at internal parallelism 1 and 4,
#                            two minutes of fuzzing per target, and the wheel
#                            as published (RocksDB compiled from source and
#                            checked against manylinux; the CI tier's wheel
#                            links the prebuilt RocksDB the tests' build uses).
#
# Prints each stage's time at the end.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
FULL=0
case "${1:-}" in
  "") ;;
  --full) FULL=1 ;;
  *) die "unknown argument $1 (scripts/test.sh [--full])" ;;
esac
PORT="${BEAM_KAFKA_TEST_PORT:-19092}"
"$REPO_ROOT/scripts/setup.sh" --tests
build_while_fetching ""
PY="$BUILT_PY"

results="$(mktemp -d)"
# Runs a test command, keeping its output in $results/$1.log; never exits the script.
# Each stage's time, printed at the end.
times=("$(printf '%6d s  %s' "$SECONDS" "set-up and build (venv and Kafka's jars alongside)")")
run() {
  local name="$1"; shift
  local stage_started=$SECONDS
  set +e
  "$@" 2>&1 | tee "$results/$name.log"
  local rc=${PIPESTATUS[0]}
  set -e
  times+=("$(printf '%6d s  %s' $((SECONDS - stage_started)) "$name")")
  return "$rc"
}

# House rules: formatted, no clippy warning, no import circle.
log "cargo fmt --check, cargo clippy -D warnings, import circles"
lint_rc=0; run lint bash -c "cd '$REPO_ROOT' && { cargo fmt --all --check; f=\$?; \
  cargo clippy --locked --workspace --all-targets -- -D warnings; c=\$?; python3 scripts/import_cycles.py; i=\$?; exit \$((f | c | i)); }" \
  || lint_rc=$?

log "Kubernetes manifests (kubeconform, strict)"
k8s_rc=0; run k8s "$REPO_ROOT/scripts/k8s-validate.sh" || k8s_rc=$?

log "unit tests (cargo test)"
cargo_rc=0; run cargo bash -c "cd '$REPO_ROOT' && cargo test --locked --workspace" || cargo_rc=$?

# The Go package users import (go/beamkafka): formatted, vetted, its tests.
log "the Go package (gofmt, go vet, go test)"
gopkg_rc=0; run go-package "$REPO_ROOT/scripts/go-package.sh" || gopkg_rc=$?

# The decoders' fuzz targets, briefly (scripts/fuzz.sh 600 is the long run).
fuzz_secs=10; ((FULL)) && fuzz_secs=120
log "fuzzing ($fuzz_secs s per target)"
fuzz_rc=0; run fuzz env FUZZ_DIR="$BEAM_KAFKA_CACHE/fuzz-ci" "$REPO_ROOT/scripts/fuzz.sh" "$fuzz_secs" || fuzz_rc=$?
grep -E '^[a-z_]+: rc=' "$results/fuzz.log" || true

started=""
if ! "$REPO_ROOT/scripts/kafka.sh" status "$PORT"; then
  "$REPO_ROOT/scripts/kafka.sh" start "$PORT"
  started="$PORT"
fi
trap 'if [[ -n "$started" ]]; then "$REPO_ROOT/scripts/kafka.sh" stop "$started"; fi' EXIT
export BEAM_KAFKA_TEST_BOOTSTRAP="localhost:$PORT"

log "integration tests (pytest itests)"
# Two workers, each test file on one (tests of a file may share a broker of
# their own on fixed ports): the itests mostly wait on Kafka and processes.
pytest_rc=0; run pytest bash -c "cd '$REPO_ROOT' && '$PY' -m pytest itests -n 2 --dist loadfile -v -rs --durations=15 --ignore=itests/beam_suite" || pytest_rc=$?

# Beam's Go integration suite, a representative part (scripts/go-integration.sh
# runs all of it): Go pipelines through plain universal-runner flags.
go_args=(--short); ((FULL)) && go_args=()
log "Beam's Go integration suite (${go_args[*]:-whole})"
go_rc=0; run go-integration "$REPO_ROOT/scripts/go-integration.sh" "${go_args[@]}" || go_rc=$?
grep -E '^(go-integration|FAIL) ' "$results/go-integration.log" || true

# Beam's Java @ValidatesRunner tests, two of its classes, ParDoTest's timer and
# OnWindowExpiration tests, its set, multimap and ordered-list range state tests (the latter
# flush through OnWindowExpiration), CombineTest's triggered global combine (a final pane under
# FIRE_ALWAYS), bounded-trie metrics, a metadata-preserving Reshuffle, time-sorted input and a
# cross-language test (Python transforms with a side input, on Python harnesses the job server
# starts) (scripts/java-validates-runner.sh with no arguments runs all 35, ~15 min):
# Java pipelines through TestBeamKafkaRunner.

java_tests='GroupByKeyTest*,SplittableDoFnTest*,ParDoTest$TimerTests*,ParDoTest$OnWindowExpirationTests*'
java_tests+=',ParDoTest$TimestampTests#testOnWindowTimestampSkew,ParDoTest$StateTests#testSetState*'
java_tests+=',ParDoTest$StateTests#testOrderedListStateRange*,CombineTest$WindowingTests#testGlobalCombineWithDefaultsAndTriggers'
java_tests+=',ParDoTest$StateTests#testMultimapState*,MetricsTest$AttemptedMetricTests#testAttemptedBoundedTrieMetrics'
java_tests+=',ReshuffleTest#testReshufflePreservesMetadata,ParDoTest$StateTests#testRequiresTimeSortedInput'
java_tests+=',ValidateRunnerXlangTest$MultiInputOutputWithSideInputTest*'
java_args=(-Dtest="$java_tests"); ((FULL)) && java_args=()
if ((FULL)); then
  log "Beam's Java ValidatesRunner tests, every class"
else
  log "Beam's Java ValidatesRunner tests (GroupByKeyTest, SplittableDoFnTest, ParDoTest\$TimerTests, OnWindowExpiration, set and multimap state, FIRE_ALWAYS, bounded tries, metadata, time-sorted input, cross-language)"
fi
java_rc=0; run java-validates-runner "$REPO_ROOT/scripts/java-validates-runner.sh" "${java_args[@]}" || java_rc=$?
grep -E '^java-validates-runner' "$results/java-validates-runner.log" || true

# Packaging: the wheel, installed into an empty venv, runs the hello example
# with its own binary; `cargo install --path server` installs the binary.
log "packaging: the wheel in an empty venv, and cargo install"
package_rc=0
# The CI tier's wheel links the prebuilt RocksDB the tests' build uses; --full
# builds the wheel as published, RocksDB compiled in, checked for manylinux.
wheel_env=(env); ((FULL)) && wheel_env=(env -u ROCKSDB_LIB_DIR)
run wheel "${wheel_env[@]}" "$REPO_ROOT/scripts/wheel.sh" --out "$results/wheel" --check "$BEAM_KAFKA_TEST_BOOTSTRAP" || package_rc=$?
run cargo-install bash -c "cd '$REPO_ROOT' && cargo install --locked --debug --path server --root '$results/cargo-install' \
  && '$results/cargo-install/bin/beam-kafka' --version" || package_rc=$?

# Beam's own suite: all of it (batch, streaming, triggers) on the pinned
# apache-beam release (the oldest supported) at internal parallelism 4;
# the newest release runs the wheel's check above. --full runs the suite on
# the oldest and the newest release at 1 and at 4 (results must not depend
# on either).
suite_rc=0
suite_runs=("$BEAM_PYTHON_SDK_OLDEST:4")
((FULL)) && suite_runs=("$BEAM_PYTHON_SDK_OLDEST:4" "$BEAM_PYTHON_SDK_OLDEST:1" "$BEAM_PYTHON_SDK_NEWEST:4" "$BEAM_PYTHON_SDK_NEWEST:1")
for suite_run in "${suite_runs[@]}"; do
  sdk="${suite_run%%:*}"; par="${suite_run##*:}"
  log "Beam's PortableRunnerTest suite on apache-beam $sdk (internal_parallelism=$par)"
  run "suite-$sdk-p$par" env BEAM_KAFKA_SUITE_PARALLELISM="$par" BEAM_KAFKA_PYTHON_SDK="$sdk" "$REPO_ROOT/scripts/beam-suite.sh" -q >/dev/null || suite_rc=1
  grep -E '^(beam-suite|FAILED|ERROR) ' "$results/suite-$sdk-p$par.log" || true
done

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
echo "stage times:"
printf '  %s\n' "${times[@]}"
echo "all ($( ((FULL)) && echo full || echo CI) tier, $((SECONDS / 60)) min): $passed passed, $failed failed, $skipped skipped"
if [[ $bench_rc -ne 0 ]]; then echo "the benchmark smoke run failed (see above)"; fi
if [[ $lint_rc -ne 0 ]]; then echo "cargo fmt, clippy or scripts/import_cycles.py found problems (see above)"; fi
if [[ $package_rc -ne 0 ]]; then echo "the wheel or cargo install failed (see above)"; fi
if [[ $go_rc -ne 0 ]]; then echo "Beam's Go integration tests failed (see above)"; fi
if [[ $gopkg_rc -ne 0 ]]; then echo "the Go package (go/) is not gofmt-clean, or go vet or its tests failed (see above)"; fi
if [[ $java_rc -ne 0 ]]; then echo "Beam's Java ValidatesRunner tests failed (see above)"; fi
if [[ $k8s_rc -ne 0 ]]; then echo "a Kubernetes manifest under ops/kubernetes is invalid (see above)"; fi
if [[ $fuzz_rc -ne 0 ]]; then echo "a fuzz target found a crash (see above; its input is under $BEAM_KAFKA_CACHE/fuzz-ci/artifacts)"; fi
if [[ $gopkg_rc -ne 0 || $k8s_rc -ne 0 || $fuzz_rc -ne 0 || $lint_rc -ne 0 || $package_rc -ne 0 || $go_rc -ne 0 || $java_rc -ne 0 || $cargo_rc -ne 0 || $pytest_rc -ne 0 || $suite_rc -ne 0 || $bench_rc -ne 0 ]]; then exit 1; fi
exit 0
