#!/usr/bin/env bash
# Runs Beam's Go SDK integration suite (sdks/go/test/integration/... of
# github.com/apache/beam/sdks/v2 at the version itests/go/go.mod pins, from the
# Go module proxy) against a beam-kafka job server, and prints
#   go-integration: N passed, M failed, K skipped (wall S s)
#
#   scripts/go-integration.sh [--short] [--endpoint HOST:PORT] [--expansion-addr HOST:PORT]
#                             [--bootstrap-servers HOST:PORT] [--runner NAME] [--run REGEXP]
#
# --short             a representative subset (core primitives, state, timers,
#                     windows, side inputs, wordcount, synthetic): a few minutes
# --endpoint          use that job server (with --expansion-addr, its expansion
#                     service); else one is started on free ports for the run
# --bootstrap-servers the Kafka broker (default BEAM_KAFKA_TEST_BOOTSTRAP, else
#                     localhost:19092; a local one is started when none answers)
# --runner            the Go runner name (default `universal`, Beam's portable runner,
#                     unmodified: the job server names each job's application
#                     after the job and gives it its --default-bootstrap-servers)
# --run               only tests whose names match (as go test -run)
#
# Beam's TestDrain runs an unbounded splittable DoFn that only a drain ends:
# the script drains its job as an operator would (`beam-kafka drain`), a few
# seconds after it started running.
#
# Tests listed in itests/go/integration-skips.txt are skipped (go test -skip),
# each for a feature this setup lacks; a package whose tests are all skipped
# is not built. Every package runs alone (-p 1). A test that brings its test
# binary down (a panic in the LOOPBACK SDK harness, which runs inside it, or
# a timeout) counts as failed, and the package's remaining tests run again
# without it. Logs (go test -json, each failure, the job server's) go to
# $BEAM_KAFKA_CACHE/go-integration/logs/<time>/ (the last five runs). Exit status 1
# when a test failed.
#   BEAM_KAFKA_GO_TIMEOUT=15m   go test -timeout of one run of a package
#   BEAM_KAFKA_BINARY=...       the beam-kafka binary (else bin/beam-kafka, built when missing)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MODULE="github.com/apache/beam/sdks/v2"
SUITE="go/test/integration"
ITESTS="$REPO_ROOT/itests/go"
SKIPS="$ITESTS/integration-skips.txt"
RESULTS=(python3 "$ITESTS/integration/results.py")

short=0 endpoint="" expansion="" runner="universal" run_filter=""
bootstrap="${BEAM_KAFKA_TEST_BOOTSTRAP:-localhost:19092}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --short) short=1 ;;
    --endpoint) endpoint="$2"; shift ;;
    --endpoint=*) endpoint="${1#*=}" ;;
    --expansion-addr) expansion="$2"; shift ;;
    --expansion-addr=*) expansion="${1#*=}" ;;
    --bootstrap-servers) bootstrap="$2"; shift ;;
    --bootstrap-servers=*) bootstrap="${1#*=}" ;;
    --runner) runner="$2"; shift ;;
    --runner=*) runner="${1#*=}" ;;
    --run) run_filter="$2"; shift ;;
    --run=*) run_filter="${1#*=}" ;;
    -h|--help) sed -n '2,/^source/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

# The short mode: packages and, where not all, the tests to run (TestDrain:
# a running splittable DoFn checkpointed for the drain, then truncated; the event-
# time timer tests among them: they fired a key's timer twice after a split
# bundle, under load, until timers fired at a watermark held by the split's
# deferred rest; the Flatten and CoGBK tests: a Flatten the runner does for Go's
# harness; the TestStream ones: Go's nested element coding; the trigger ones:
# triggers asked per element, synchronized processing time per batch).
SHORT_PACKAGES=(primitives wordcount synthetic)
SHORT_PRIMITIVES='^(TestDrain|TestParDoMultiOutput|TestParDoSideInput|TestParDoKVSideInput|TestParDoMultiMapSideInput|TestReshuffle|TestGBKShortRead|TestCheckpointing|TestValueState|TestBagState|TestCombiningState|TestMapState|TestSetState|TestOrderedListState|TestTimers_EventTime_Bounded|TestTimers_EventTime_Unbounded|TestTimers_EventTime_WithOutputTimestamp|TestTimers_ProcessingTime_Bounded|TestWindowSums_GBK|TestValidateWindowedSideInputs|TestParDoBundleFinalizer|TestPanes|TestTestStreamTimersEventTime|TestFlatten|TestFlattenDup|TestCoGBK|TestTestStreamSimple|TestTestStreamStrings|TestTestStreamTwoUserTypeSequences|TestTriggerAlways|TestTriggerRepeat|TestTriggerAfterEndOfWindow|TestTriggerAfterSynchronizedProcessingTime)$'


command -v python3 >/dev/null || die "python3 is needed (it reads go test -json)"
GO="$(go_command)"
started_at=$(date +%s)

# Beam's module, verified against go.sum by the module proxy client. The suite
# builds from a copy of the module's Go tree (a `replace` of a work module with
# itests/go's requirements), unmodified.
version="$(cd "$ITESTS" && "$GO" list -mod=readonly -m -f '{{.Version}}' "$MODULE")"
moddir="$(cd "$ITESTS" && "$GO" mod download -json "$MODULE@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$moddir/$SUITE" ]] || die "cannot fetch $MODULE@$version from the Go module proxy"
work="$BEAM_KAFKA_CACHE/go-integration"
beam="$work/beam-sdks-$version"
if [[ ! -f "$beam/.complete" ]]; then
  log "copying $MODULE@$version's Go tree to $beam"
  rm -rf "$beam" && mkdir -p "$beam"
  cp -r "$moddir/go" "$moddir/go.mod" "$moddir/go.sum" "$moddir/LICENSE" "$beam/"
  chmod -R u+w "$beam"
  touch "$beam/.complete"
fi
mkdir -p "$work/run"
cp "$ITESTS/go.sum" "$work/run/go.sum"
# (itests/go's relative replace of the product's Go package, made absolute.)
{ sed "s|=> \.\./\.\./go\$|=> $REPO_ROOT/go|" "$ITESTS/go.mod"; echo; echo "replace $MODULE $version => ../beam-sdks-$version"; } > "$work/run/go.mod"

logs="$work/logs/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$logs"
# The last five runs' logs are kept (a job server's log can reach 100s of MB).
find "$work/logs" -mindepth 1 -maxdepth 1 -type d | sort | head -n -5 | xargs -r rm -rf

# The broker, and the job server unless one was given.
cleanup=()
on_exit() { local c; for c in "${cleanup[@]}"; do eval "$c" || true; done; }
trap on_exit EXIT
ensure_broker "$bootstrap"
# The cross-language tests (TestXLang_*) expand their Java transforms with
# dev.beamkafka.xlang (itests/java: Beam's own test expansion service is not
# published), and the job server runs their Java harnesses (--java-harness-dir).
test_expansion=""
if [[ -z "$endpoint" && $short -eq 0 ]] && command -v java >/dev/null && command -v mvn >/dev/null; then
  java_cp="$("$REPO_ROOT/scripts/java-pipelines.sh" | tail -n 1)"
  test_port="$(free_ports 1)"
  java -cp "$java_cp" org.apache.beam.sdk.expansion.service.ExpansionService "$test_port" > "$logs/test-expansion-service.log" 2>&1 &
  test_expansion_pid=$!
  cleanup=("kill $test_expansion_pid; wait $test_expansion_pid 2>/dev/null" "${cleanup[@]}")
  test_expansion="localhost:$test_port"
  log "Java test expansion service (pid $test_expansion_pid) at $test_expansion; log $logs/test-expansion-service.log"
fi
binary="${BEAM_KAFKA_BINARY:-$REPO_ROOT/bin/beam-kafka}"
[[ -x "$binary" ]] || binary="$("$REPO_ROOT/scripts/build.sh")"
# Python's transforms (TestDataframe, under the label python_transform) are
# expanded by the job server's forwarding to Python's expansion service
# (--python-expansion-command), their harnesses run as --python-harness-command.
python_flags=()
if [[ -z "$endpoint" && $short -eq 0 ]]; then
  py="$("$REPO_ROOT/scripts/python-env.sh")"
  python_flags=(--python-harness-command "$py -m beam_kafka.boot"
                --python-expansion-command "$py -m apache_beam.runners.portability.expansion_service_main --fully_qualified_name_glob=*")
fi
if [[ -z "$endpoint" ]]; then
  # Free ports picked here: with --job-port 0 the server logs the port asked for.
  read -r job_port artifact_port expansion_port < <(free_ports 3)
  java_flags=()
  if [[ -n "$test_expansion" ]]; then java_flags=(--java-harness-dir "$("$REPO_ROOT/scripts/java-harness.sh")"); fi
  "$binary" job-server --job-port "$job_port" --artifact-port "$artifact_port" --expansion-port "$expansion_port" \
    --trust-clients --artifacts-dir "$logs/artifacts" --state-root "$logs/state" --default-bootstrap-servers "$bootstrap" \
    "${java_flags[@]}" "${python_flags[@]}" > "$logs/job-server.log" 2>&1 &
  server_pid=$!
  cleanup=("kill $server_pid; wait $server_pid 2>/dev/null" "${cleanup[@]}")
  endpoint="localhost:$job_port" expansion="localhost:$expansion_port"
  log "job server (pid $server_pid) at $endpoint, expansion service at $expansion; log $logs/job-server.log"
fi
# The SDK waits for an endpoint that does not answer without end.
for _ in $(seq 1 300); do
  (exec 3<>"/dev/tcp/${endpoint%:*}/${endpoint##*:}") 2>/dev/null && break
  [[ -z "${server_pid:-}" ]] || kill -0 "$server_pid" 2>/dev/null || { cat "$logs/job-server.log" >&2; die "the job server did not start"; }
  sleep 0.1
done
(exec 3<>"/dev/tcp/${endpoint%:*}/${endpoint##*:}") 2>/dev/null || die "no job server answers at $endpoint"

if [[ -n "$test_expansion" ]]; then
  for _ in $(seq 1 600); do
    (exec 3<>"/dev/tcp/localhost/${test_expansion##*:}") 2>/dev/null && break
    kill -0 "$test_expansion_pid" 2>/dev/null || { cat "$logs/test-expansion-service.log" >&2; die "the Java test expansion service did not start"; }
    sleep 0.1
  done
fi
# The operator of TestDrain's job (go-testdrain-<n>): drains it once it ran 3 s.
drain_test_jobs() {
  while true; do
    "$binary" jobs --endpoint "$endpoint" 2>/dev/null | awk '$2 == "RUNNING" && $4 ~ /^go-testdrain-/ { print $1 }' |
      while read -r job; do
        sleep 3
        "$binary" drain --endpoint "$endpoint" "$job" >> "$logs/drainer.log" 2>&1
      done
    sleep 2
  done
}
drain_test_jobs &
drainer_pid=$!
cleanup=("kill $drainer_pid; wait $drainer_pid 2>/dev/null" "${cleanup[@]}")

pipeline_flags=(-runner="$runner" -endpoint="$endpoint" -environment_type=LOOPBACK -bootstrap_servers="$bootstrap")
if [[ -n "$test_expansion" ]]; then
  pipeline_flags+=(-expansion_addr="test:$test_expansion")
else
  { cat "$SKIPS"; echo "TestXLang_.* # needs Java and Maven: the Java test expansion service (dev.beamkafka.xlang) and Java harnesses"; } > "$logs/skips-java.txt"
  SKIPS="$logs/skips-java.txt"
fi
if [[ ${#python_flags[@]} -gt 0 ]]; then
  pipeline_flags+=(-expansion_addr="python_transform:$expansion")
  # TestSklearnInference's model, where the test looks for it (Beam's own
  # build trains the same: an SVC predicting 0 for [0, 0] and 1 for [1, 1]).
  mkdir -p /tmp/staged
  "$py" -c "import pickle; from sklearn import svm; m = svm.SVC(); m.fit([[0, 0], [1, 1]], [0, 1]); pickle.dump(m, open('/tmp/staged/sklearn_model', 'wb'))"
else
  { cat "$SKIPS"
    echo "TestDataframe # needs Python's expansion service: the job server this script starts forwards to it (not with --short or --endpoint)"
    echo "TestSklearnInference # needs Python's expansion service: the job server this script starts forwards to it (not with --short or --endpoint)"
  } > "$logs/skips-python.txt"
  SKIPS="$logs/skips-python.txt"
fi
# Beam's Kafka IO test expands ReadFromKafka/WriteToKafka at the "io" service: ours.
if [[ -n "$expansion" ]]; then
  pipeline_flags+=(-expansion_addr="io:$expansion")
else
  { cat "$SKIPS"; echo "TestKafkaIO_.* # needs the job server's expansion service (--expansion-addr)"; } > "$logs/skips.txt"
  SKIPS="$logs/skips.txt"
fi
skip_regex="$("${RESULTS[@]}" skip-regex "$SKIPS")"

if [[ $short == 1 ]]; then
  packages=("${SHORT_PACKAGES[@]}")
else
  mapfile -t packages < <(cd "$beam/$SUITE" && find . -name '*_test.go' -printf '%h\n' | sed 's|^\./\{0,1\}||' | sort -u)
fi

passed=0 failed=0 skipped=0
failures=()
for pkg in "${packages[@]}"; do
  dir="$beam/$SUITE${pkg:+/$pkg}"
  import="$MODULE/$SUITE${pkg:+/$pkg}"
  name="${pkg:-integration}"
  select="$run_filter"
  [[ $short == 1 && "$pkg" == primitives && -z "$select" ]] && select="$SHORT_PRIMITIVES"
  to_run=0
  while read -r what test rest; do
    case "$what" in
      skip) skipped=$((skipped + 1)); echo "SKIP $test ($name) $rest" >> "$logs/skipped.txt" ;;
      run) to_run=$((to_run + 1)) ;;
    esac
  done < <("${RESULTS[@]}" plan "$dir" "$SKIPS" "$select")
  if [[ $to_run == 0 ]]; then
    continue
  fi
  # Rounds: after a test brought the binary down, the rest of the package runs again.
  done_tests=()
  for round in $(seq 1 50); do
    skip="$skip_regex"
    if [[ ${#done_tests[@]} -gt 0 ]]; then
      skip="^($(IFS='|'; echo "${done_tests[*]}"))\$|$skip_regex"
    fi
    out="$logs/${name//\//.}.$round.json"
    log "go test $import (round $round)"
    (cd "$work/run" && "$GO" test -mod=readonly -json -count=1 -p 1 -parallel 1 \
        -timeout "${BEAM_KAFKA_GO_TIMEOUT:-15m}" ${select:+-run "$select"} -skip "$skip" "$import" \
        -args "${pipeline_flags[@]}") > "$out" 2> "$out.stderr" || true
    end=""
    while read -r what test; do
      case "$what" in
        pass) passed=$((passed + 1)); done_tests+=("$test"); echo "ok   $test ($name)" ;;
        skip) skipped=$((skipped + 1)); done_tests+=("$test"); echo "skip $test ($name)" ;;
        fail|crash)
          failed=$((failed + 1)); done_tests+=("$test")
          [[ $what == crash ]] && what="fail (the test binary ended: panic or timeout)"
          echo "FAIL $test ($name): $what"
          failures+=("$test|$name")
          ;;
        end) end="$test" ;;
      esac
    done < <("${RESULTS[@]}" parse "$out" "$logs")
    case "$end" in
      clean) break ;;
      crashed|timeout) continue ;;
      build-failed)
        failed=$((failed + to_run)); failures+=("build|$name")
        echo "FAIL $import does not build: see $logs/build.log"; break ;;
      *) cat "$out.stderr" >&2; die "go test of $import ended unexpectedly (see $out)" ;;
    esac
  done
done

for f in "${failures[@]}"; do
  test="${f%%|*}" pkg="${f#*|}"
  [[ $test == build ]] && continue
  echo "--- $test ($pkg):"
  "${RESULTS[@]}" why "$logs/$test.log"
done
echo "logs: $logs"
echo "go-integration: $passed passed, $failed failed, $skipped skipped (wall $(( $(date +%s) - started_at )) s)"
[[ $failed == 0 ]]
