#!/usr/bin/env bash
# Beam's own Java examples, unchanged, on beam-kafka: installs the runner (java/), fetches
# beam-examples-java from Maven Central, and runs WordCount and complete.game.UserScore on local
# input files through a job server with --runner=BeamKafkaRunner, adding only the runner to the
# classpath. Their outputs are checked against counts computed in Python
# (scripts/java_examples.py). Prints "java-examples: ok" or fails.
#
#   scripts/java-examples.sh [--endpoint HOST:PORT] [--bootstrap-servers HOST:PORT]
#
# --endpoint           a running job server (else one is started for the run)
# --bootstrap-servers  the Kafka broker (default BEAM_KAFKA_TEST_BOOTSTRAP, else localhost:9092;
#                      a local one is started when none answers)
# beam-examples-java is served where this project fetches from up to release 2.62.0 (not at
# 2.73.0, the SDK the runner is built against): the examples' classes of 2.62.0 run on the
# 2.73.0 SDK the runner brings.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
EXAMPLES_VERSION="2.62.0"
endpoint="" bootstrap="${BEAM_KAFKA_TEST_BOOTSTRAP:-localhost:9092}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --endpoint) endpoint="$2"; shift ;;
    --endpoint=*) endpoint="${1#*=}" ;;
    --bootstrap-servers) bootstrap="$2"; shift ;;
    --bootstrap-servers=*) bootstrap="${1#*=}" ;;
    *) die "unknown argument $1" ;;
  esac
  shift
done
command -v mvn >/dev/null || die "Maven (mvn) is not installed: apt-get install maven"
command -v java >/dev/null || die "Java is not installed: apt-get install openjdk-17-jdk-headless"

runner_jar="$("$REPO_ROOT/scripts/java-runner.sh")"
dir="$BEAM_KAFKA_CACHE/java-examples-$EXAMPLES_VERSION"
if [[ ! -f "$dir/.complete" ]]; then
  mkdir -p "$dir"
  # What a user's build declares: the examples, the runner, and a logging binding.
  cat > "$dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>beam-kafka</groupId><artifactId>java-examples</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>dev.beamkafka</groupId><artifactId>beam-kafka-runner</artifactId><version>0.1.0</version></dependency>
    <dependency><groupId>org.apache.beam</groupId><artifactId>beam-sdks-java-extensions-avro</artifactId><version>$BEAM_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-jdk14</artifactId><version>2.0.16</version></dependency>
  </dependencies>
</project>
POM
  log "fetching beam-examples-java $EXAMPLES_VERSION from Maven Central"
  ( cache_lock maven-repository
    mvn -q -B -f "$dir/pom.xml" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath \
      -Dmdep.outputFile="$dir/classpath.txt" \
    && mvn -q -B org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
      -Dartifact="org.apache.beam:beam-examples-java:$EXAMPLES_VERSION:jar" -DoutputDirectory="$dir" ) \
    >"$dir/fetch.log" 2>&1 || { cat "$dir/fetch.log" >&2; die "could not fetch the examples (see above)"; }
  touch "$dir/.complete"
fi
classpath="$dir/beam-examples-java-$EXAMPLES_VERSION.jar:$runner_jar:$(cat "$dir/classpath.txt")"

cleanup=()
on_exit() { local c; for c in "${cleanup[@]}"; do eval "$c" || true; done; }
trap on_exit EXIT
ensure_broker "$bootstrap"
work="$(mktemp -d)"
cleanup+=("rm -rf '$work'")
if [[ -z "$endpoint" ]]; then
  binary="${BEAM_KAFKA_BINARY:-$REPO_ROOT/bin/beam-kafka}"
  [[ -x "$binary" ]] || binary="$("$REPO_ROOT/scripts/build.sh")"
  read -r job_port artifact_port expansion_port < <(free_ports 3)
  "$binary" job-server --job-port "$job_port" --artifact-port "$artifact_port" --expansion-port "$expansion_port" \
    --state-root "$work/state" --artifacts-dir "$work/artifacts" > "$work/job-server.log" 2>&1 &
  cleanup=("kill $! 2>/dev/null; wait $! 2>/dev/null" "${cleanup[@]}")
  endpoint="localhost:$job_port"
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$job_port") 2>/dev/null && break; sleep 0.1; done
fi

check=(python3 "$REPO_ROOT/scripts/java_examples.py")
"${check[@]}" write-inputs "$work"
runner=(--runner=BeamKafkaRunner --jobEndpoint="$endpoint" --bootstrapServers="$bootstrap")
log "WordCount"
java -cp "$classpath" org.apache.beam.examples.WordCount "${runner[@]}" \
  --inputFile="$work/kinglear.txt" --output="$work/wordcount/counts" >"$work/wordcount.log" 2>&1 \
  || { tail -40 "$work/wordcount.log" >&2; die "WordCount failed"; }
log "UserScore"
java -cp "$classpath" org.apache.beam.examples.complete.game.UserScore "${runner[@]}" \
  --input="$work/gaming.csv" --output="$work/userscore/scores" >"$work/userscore.log" 2>&1 \
  || { tail -40 "$work/userscore.log" >&2; die "UserScore failed"; }
"${check[@]}" check "$work"
echo "java-examples: ok"
