#!/usr/bin/env bash
# Beam's Java SDK, fetched from Maven Central into the cache, for a job server
# that runs Java SDK environments itself (no Docker):
#   java-harness.sh                      the jars of beam-sdks-java-harness and
#                                        its dependencies; prints their directory,
#                                        for --java-harness-dir (or
#                                        BEAM_KAFKA_JAVA_HARNESS_DIR)
#   java-harness.sh --expansion-service  the jars of Beam's Java expansion service
#                                        (beam-sdks-java-expansion-service); prints
#                                        their directory. Run it with
#                                        java -cp 'DIR/*' org.apache.beam.sdk.expansion.service.ExpansionService PORT
# Both follow the Beam release the runner is built against ($BEAM_VERSION).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

dep() { echo "    <dependency><groupId>$1</groupId><artifactId>$2</artifactId><version>$3</version></dependency>"; }
beam() { dep org.apache.beam "$1" "$BEAM_VERSION"; }

case "${1:-}" in
  "")
    artifact="beam-sdks-java-harness" dir="$BEAM_KAFKA_CACHE/java-harness-$BEAM_VERSION"
    # The harness's pom declares what it runs on as "provided" (the Java SDK
    # image, or the user's classpath, brings it): listed here, as that image does.
    extra="$(beam beam-sdks-java-core; beam beam-model-pipeline; beam beam-sdks-java-transform-service-launcher
      dep org.apache.beam beam-vendor-grpc-1_69_0 0.1; dep org.apache.beam beam-vendor-guava-32_1_2-jre 0.1
      dep org.apache.avro avro 1.11.4; dep com.fasterxml.jackson.core jackson-databind 2.15.4
      dep joda-time joda-time 2.14.0; dep com.github.jbellis jamm 0.4.0)" ;;
  --expansion-service)
    artifact="beam-sdks-java-expansion-service" dir="$BEAM_KAFKA_CACHE/java-expansion-service-$BEAM_VERSION" extra="" ;;
  *) die "unknown argument '$1' (expected nothing or --expansion-service)" ;;
esac

cache_lock "$(basename "$dir")"
if [[ ! -f "$dir/jars/.complete" ]]; then
  command -v mvn >/dev/null || die "Maven (mvn) is needed to fetch Beam's Java SDK: apt-get install maven"
  command -v java >/dev/null || die "Java 17 is needed to run Beam's Java SDK: apt-get install openjdk-17-jdk-headless"
  mkdir -p "$dir"
  cat > "$dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>beam-kafka</groupId><artifactId>$artifact-jars</artifactId><version>1</version>
  <dependencies>
$(beam "$artifact")
$extra
    <!-- the harness logs through SLF4J; without a binding it says nothing -->
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-jdk14</artifactId><version>2.0.16</version></dependency>
  </dependencies>
</project>
POM
  log "fetching org.apache.beam:$artifact:$BEAM_VERSION and its dependencies from Maven Central"
  maven_copy_jars "$dir/pom.xml" "$dir/jars" "$dir/fetch.log" \
    || { cat "$dir/fetch.log" >&2; die "could not fetch $artifact (see above)"; }
fi
echo "$dir/jars"
