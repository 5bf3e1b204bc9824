#!/usr/bin/env bash
# Fetches what Beam-on-Flink needs to run Beam's Java KafkaIO from a Python
# pipeline (bench/native.py's beam-flink system): Beam's unshaded expansion
# service and KafkaIO with kafka-clients, at the Beam version of the Flink job
# server bench/peers/flink.sh fetched (the Maven Central reached here serves
# Beam's shaded IO expansion service jar only up to 2.43.0), and jamm for
# Beam's Java harness inside the Flink JVM. Prints, as its
# last stdout line, the directory of the jars; cached once complete.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

beam="${1:?usage: flink_kafka.sh BEAM_VERSION}"
kafka_clients=3.9.1
dir="$BEAM_KAFKA_CACHE/flink-kafkaio-$beam"
if [[ ! -f "$dir/libs/.complete" ]]; then
  command -v mvn >/dev/null || die "Maven (mvn) is needed to fetch KafkaIO"
  mkdir -p "$dir"
  cat > "$dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>beam-kafka</groupId><artifactId>bench-flink-kafkaio</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.beam</groupId><artifactId>beam-sdks-java-expansion-service</artifactId><version>$beam</version></dependency>
    <dependency><groupId>org.apache.beam</groupId><artifactId>beam-sdks-java-io-kafka</artifactId><version>$beam</version>
      <!-- Confluent's Avro serializers live outside Maven Central; the
           benchmark's strings need none of them. -->
      <exclusions><exclusion><groupId>io.confluent</groupId><artifactId>*</artifactId></exclusion></exclusions>
    </dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>$kafka_clients</version></dependency>
    <!-- Beam's Java harness, run inside the Flink JVM (EMBEDDED), sizes its
         caches with jamm, which the Flink job server's jars lack. -->
    <dependency><groupId>com.github.jbellis</groupId><artifactId>jamm</artifactId><version>0.4.0</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>1.7.30</version></dependency>
  </dependencies>
</project>
POM
  log "fetching Beam $beam's expansion service and KafkaIO (kafka-clients $kafka_clients) from Maven Central"
  maven_copy_jars "$dir/pom.xml" "$dir/libs" "$dir/fetch.log" \
    || die "KafkaIO $beam does not resolve (see $dir/fetch.log)"
fi
echo "$dir/libs"
