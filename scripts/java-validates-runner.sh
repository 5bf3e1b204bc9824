#!/usr/bin/env bash
# Runs Beam's Java @ValidatesRunner tests (the beam-sdks-java-core tests jar, JUnit category
# org.apache.beam.sdk.testing.ValidatesRunner) through itests/java's TestBeamKafkaRunner against a
# job server this script starts, and prints
#
#   java-validates-runner: N passed, N failed, N skipped
#
#   scripts/java-validates-runner.sh [extra Maven args, e.g. -Dtest='ParDoTest*']
#
# Uses the broker at BEAM_KAFKA_TEST_BOOTSTRAP (default localhost:19092; started here when none
# answers) and the binary at BEAM_KAFKA_BINARY, else bin/beam-kafka (built when missing). A test
# pipeline still running after BEAM_KAFKA_JAVA_TEST_TIMEOUT seconds (default 120) is cancelled.
# Logs land in $BEAM_KAFKA_CACHE/java/validates-runner, with failures.txt listing the failed tests;
# JUnit reports in $BEAM_KAFKA_CACHE/java/build-vr/surefire-reports. Exits non-zero when a test failed.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
command -v mvn >/dev/null || die "Maven (mvn) is not installed: apt-get install maven"

# Categories of tests skipped, each for a feature beam-kafka or this client lacks.
# The cross-language tests (ValidateRunnerXlangTest: UsesJavaExpansionService and
# UsesPythonExpansionService) run against Python's test expansion service, started below, which
# serves the test transforms Beam's Java one would.
excluded=(
  # They check the Java SDK container's JVM (jamm agent, TLS settings, log4j); here the harness is
  # the test JVM itself.
  UsesSdkHarnessEnvironment
)

out="$BEAM_KAFKA_CACHE/java/validates-runner"
mkdir -p "$out"
bootstrap="${BEAM_KAFKA_TEST_BOOTSTRAP:-localhost:19092}"
binary="${BEAM_KAFKA_BINARY:-$REPO_ROOT/bin/beam-kafka}"
[[ -x "$binary" ]] || binary="$("$REPO_ROOT/scripts/build.sh")"

cleanup=()
on_exit() { for c in "${cleanup[@]}"; do eval "$c" || true; done; }
trap on_exit EXIT

port="${bootstrap##*:}"
if ! "$REPO_ROOT/scripts/kafka.sh" status "$port" 2>/dev/null; then
  [[ "${bootstrap%%:*}" == localhost || "${bootstrap%%:*}" == 127.0.0.1 ]] \
    || die "no Kafka broker answers at $bootstrap"
  "$REPO_ROOT/scripts/kafka.sh" start "$port"
  cleanup+=("\"$REPO_ROOT/scripts/kafka.sh\" stop $port")
fi

# The job server, on free ports chosen here (its log shows --job-port as given, 0 included).
# Below the kernel's ephemeral range: a port bind(0) hands out may be taken by an outgoing
# connection before the server binds it.
read -r job_port artifact_port expansion_port xlang_port < <(python3 -c '
import random, socket
ports = []
while len(ports) < 4:
    p = random.randrange(20000, 29000)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            continue
    if p not in ports:
        ports.append(p)
print(*ports)')
endpoint="localhost:$job_port"
log_file="$out/job-server.log"
reports="$BEAM_KAFKA_CACHE/java/build-vr/surefire-reports"
rm -rf "$out/state" "$out/artifacts" "$reports"
# Python's test expansion service (in apache-beam) for ValidateRunnerXlangTest: its transforms
# name Beam's Python SDK image, which the job server runs as beam_kafka.boot processes.
py="$("$REPO_ROOT/scripts/python-env.sh")"
# (Its start adds a scikit-learn model to the environment for a RunInference test not run
# here; scikit-learn is not installed, so that step is skipped.)
"$py" -c 'import sys
from apache_beam.runners.portability import expansion_service_test as service
service.update_sklearn_model_dependency = lambda environment: None
service.main(sys.argv)' -p "$xlang_port" >"$out/python-expansion.log" 2>&1 &
xlang_pid=$!
cleanup+=("kill $xlang_pid; wait $xlang_pid 2>/dev/null")
NO_COLOR=1 PYTHONPATH="$REPO_ROOT/python${PYTHONPATH:+:$PYTHONPATH}" "$binary" job-server --job-port "$job_port" \
  --artifact-port "$artifact_port" --expansion-port "$expansion_port" --trust-clients --state-root "$out/state" \
  --artifacts-dir "$out/artifacts" --python-harness-command "$py -m beam_kafka.boot" >"$log_file" 2>&1 &
server_pid=$!
cleanup+=("kill $server_pid; wait $server_pid 2>/dev/null")
for _ in $(seq 1 120); do
  grep -q "job server listening" "$log_file" && break
  kill -0 "$server_pid" 2>/dev/null || die "the job server exited: see $log_file"
  sleep 0.5
done
grep -q "job server listening" "$log_file" || die "the job server did not start within 60 s: see $log_file"
for _ in $(seq 1 120); do
  (exec 3<>"/dev/tcp/127.0.0.1/$xlang_port") 2>/dev/null && break
  kill -0 "$xlang_pid" 2>/dev/null || die "Python's test expansion service exited: see $out/python-expansion.log"
  sleep 0.5
done
log "job server at $endpoint, broker at $bootstrap, Python's test expansion service at localhost:$xlang_port"

# Seconds per test pipeline (TestPipeline's 900 is long). 240: the time-sorted input tests replay
# 1000 TestStream steps, one at a time (~0.1 s each).
test_timeout="${BEAM_KAFKA_JAVA_TEST_TIMEOUT:-240}"
options="[\"--runner=dev.beamkafka.runner.TestBeamKafkaRunner\",\"--jobEndpoint=$endpoint\",\
\"--bootstrapServers=$bootstrap\",\"--sdkWorkerParallelism=1\",\"--testTimeoutSeconds=$test_timeout\"]"
categories="$(printf 'org.apache.beam.sdk.testing.%s,' "${excluded[@]}")"
mvn_args=(-B -f "$REPO_ROOT/itests/java/pom.xml" -Pvalidates-runner -Dbeam.version="$BEAM_VERSION"
  -Dbeamkafka.build="$BEAM_KAFKA_CACHE/java/build-vr" -Dvr.excluded="${categories%,}" -DexpansionPort="$xlang_port")
# Fetch what is missing once (Beam's tests jar, Surefire's JUnit provider) by running no test,
# then run offline.
prepare=(test -Dtest=NoSuchTest -Dsurefire.failIfNoSpecifiedTests=false)
"$REPO_ROOT/scripts/java-runner.sh" >/dev/null
if ! mvn -q -o "${mvn_args[@]}" "${prepare[@]}" >"$out/offline.log" 2>&1; then
  log "fetching the Maven dependencies of the ValidatesRunner tests"
  mvn -q "${mvn_args[@]}" "${prepare[@]}" >&2 || die "the Maven build failed (see above)"
fi
log "running the tests (log: $out/maven.log)"
mvn -o "${mvn_args[@]}" test -DbeamTestPipelineOptions="$options" -Dmaven.test.failure.ignore=true \
  -Dsurefire.failIfNoSpecifiedTests=false "$@" \
  >"$out/maven.log" 2>&1 || { tail -50 "$out/maven.log" >&2; die "Maven failed: see $out/maven.log"; }

# Counts from the JUnit reports; failed tests, with the start of why, to failures.txt.
python3 - "$reports" "$out/failures.txt" <<'EOF'
import glob, sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
lines = []
for path in sorted(glob.glob(sys.argv[1] + '/TEST-*.xml')):
  for case in ET.parse(path).getroot().iter('testcase'):
    bad = case.find('failure') if case.find('failure') is not None else case.find('error')
    if bad is not None:
      failed += 1
      why = ' | '.join((bad.get('message') or bad.get('type') or '').strip().splitlines()[:3])
      lines.append('%s.%s: %s' % (case.get('classname'), case.get('name'), why[:400]))
    elif case.find('skipped') is not None:
      skipped += 1
    else:
      passed += 1
open(sys.argv[2], 'w').write(''.join(l + '\n' for l in lines))
print('java-validates-runner: %d passed, %d failed, %d skipped' % (passed, failed, skipped))
for l in lines[:20]:
  print('  failed: ' + l[:300])
sys.exit(1 if failed else 0)
EOF
