#!/usr/bin/env bash
# Builds itests/java (TestBeamKafkaRunner and the Java test pipelines, on Beam's Java SDK from
# Maven Central, and java/'s runner, which it installs first: scripts/java-runner.sh) into the
# cache and prints the classpath to run them with:
#
#   java -cp "$(scripts/java-pipelines.sh)" dev.beamkafka.examples.JavaPipelineIT --help
#
# Maven keeps its downloads in ~/.m2: the first build fetches them, later ones build offline.
# Needs Java 17 and Maven (Debian: apt-get install openjdk-17-jdk-headless maven).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
command -v mvn >/dev/null || die "Maven (mvn) is not installed: apt-get install maven"
command -v java >/dev/null || die "Java is not installed: apt-get install openjdk-17-jdk-headless"

out="$BEAM_KAFKA_CACHE/java"
mkdir -p "$out"
"$REPO_ROOT/scripts/java-runner.sh" >/dev/null
cache_lock maven-repository
build() {
  mvn -q -B "$@" -f "$REPO_ROOT/itests/java/pom.xml" -Dbeam.version="$BEAM_VERSION" -Dbeamkafka.build="$out/build" \
    package -DskipTests dependency:build-classpath -Dmdep.outputFile="$out/classpath.txt"
}
# Offline first: quick, and needs no network once ~/.m2 has everything.
if ! build -o >"$out/offline.log" 2>&1; then
  log "building itests/java with Maven (fetching Beam $BEAM_VERSION's Java SDK on a first build)"
  build >&2 || die "the Maven build of itests/java failed (offline attempt: $out/offline.log)"
fi
echo "$out/build/beam-kafka-java.jar:$(cat "$out/classpath.txt")"
