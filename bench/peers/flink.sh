#!/usr/bin/env bash
# Fetches Beam's Flink job server (FlinkJobServerDriver) into the cache for
# bench/compare.py and prints, as its last stdout line, `VERSION LIBDIR`,
# e.g. `2.62.0/flink-1.19 $BEAM_KAFKA_CACHE/flink-jobserver-2.62.0-1.19/libs`.
# Tries the SDK's Beam version first; the Maven Central reached here serves no
# Flink job server at 2.73.0, so it falls back to the newest Beam whose unshaded
# runner resolves whole (bench/PEERS.md section 2). Once one is cached, later
# calls use it without the network; delete its directory to probe again.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

# Newest first: "BEAM FLINK ARTIFACT". The job-server artifact is one shaded
# jar; the plain runner needs its dependencies resolved (and an slf4j binding,
# else Flink logs nothing).
CANDIDATES=(
  "$BEAM_VERSION 1.20 beam-runners-flink-1.20-job-server"
  "$BEAM_VERSION 1.19 beam-runners-flink-1.19-job-server"
  "2.62.0 1.19 beam-runners-flink-1.19"
)

home() { echo "$BEAM_KAFKA_CACHE/flink-jobserver-$1-$2"; }

# Resolves one candidate into its libs/; fails (quietly) when Maven cannot.
fetch() {
  local beam="$1" flink="$2" artifact="$3" dir; dir="$(home "$1" "$2")"
  mkdir -p "$dir"
  cat > "$dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>beam-kafka</groupId><artifactId>bench-flink</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.beam</groupId><artifactId>$artifact</artifactId><version>$beam</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>1.7.30</version></dependency>
  </dependencies>
</project>
POM
  log "fetching $artifact:$beam (Flink $flink) from Maven Central"
  if ! maven_copy_jars "$dir/pom.xml" "$dir/libs" "$dir/fetch.log"; then
    log "$artifact:$beam does not resolve (see $dir/fetch.log)"
    rm -rf "$dir/libs"
    return 1
  fi
}

main() {
  local c beam flink artifact
  # A cached one wins, so that a second call is instant and offline.
  for c in "${CANDIDATES[@]}"; do
    read -r beam flink artifact <<<"$c"
    if [[ -f "$(home "$beam" "$flink")/libs/.complete" ]]; then
      echo "$beam/flink-$flink $(home "$beam" "$flink")/libs"; return 0
    fi
  done
  command -v mvn >/dev/null || die "Maven (mvn) is needed to fetch the Flink job server"
  for c in "${CANDIDATES[@]}"; do
    read -r beam flink artifact <<<"$c"
    if fetch "$beam" "$flink" "$artifact"; then
      [[ "$beam" == "$BEAM_VERSION" ]] || log "using Beam $beam's Flink job server, not $BEAM_VERSION's"
      echo "$beam/flink-$flink $(home "$beam" "$flink")/libs"; return 0
    fi
  done
  die "no Flink job server resolves (tried: ${CANDIDATES[*]})"
}

main
