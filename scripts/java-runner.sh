#!/usr/bin/env bash
# Builds beam-kafka's Java runner (java/, dev.beamkafka:beam-kafka-runner) and installs it into
# the local Maven repository (~/.m2), where a Java user's build finds it:
#
#   <dependency>
#     <groupId>dev.beamkafka</groupId><artifactId>beam-kafka-runner</artifactId><version>0.1.0</version>
#   </dependency>
#
# Prints the installed jar's path. Offline first: quick once ~/.m2 has Beam's Java SDK.
# Needs Java 17 and Maven (Debian: apt-get install openjdk-17-jdk-headless maven).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
command -v mvn >/dev/null || die "Maven (mvn) is not installed: apt-get install maven"
command -v java >/dev/null || die "Java is not installed: apt-get install openjdk-17-jdk-headless"

out="$BEAM_KAFKA_CACHE/java"
mkdir -p "$out"
# (A script calling this one takes the lock only after it returns.)
cache_lock maven-repository
install() {
  mvn -q -B "$@" -f "$REPO_ROOT/java/pom.xml" -Dbeam.version="$BEAM_VERSION" -Dbeamkafka.build="$out/runner-build" \
    install -DskipTests
}
if ! install -o >"$out/runner-offline.log" 2>&1; then
  log "building java/ (beam-kafka's Java runner) with Maven"
  install >&2 || die "the Maven build of java/ failed (offline attempt: $out/runner-offline.log)"
fi
version="$(sed -n 's:^  <version>\(.*\)</version>:\1:p' "$REPO_ROOT/java/pom.xml" | head -n 1)"
echo "$HOME/.m2/repository/dev/beamkafka/beam-kafka-runner/$version/beam-kafka-runner-$version.jar"
