#!/usr/bin/env bash
# Fetches Beam's model protos from the pinned beam-model-* jars on Maven Central,
# checks each jar against its pinned SHA-256, and extracts the .proto files into
# $BEAM_KAFKA_CACHE/beam-protos/<version>. Prints that directory. Never committed.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OUT="$BEAM_KAFKA_CACHE/beam-protos/$BEAM_VERSION"
if [[ -f "$OUT/.complete" ]]; then echo "$OUT"; exit 0; fi

declare -A SHA256=(
  [beam-model-pipeline]=7c25ed22d5a8fc0e3c7987b05be77fd6ab7b8b623b88f7d4a890e340ea841590
  [beam-model-fn-execution]=81b63ae8927de8ab0cb70addfcc539154e4bdc4c52147bb1ee04b7a0b8188787
  [beam-model-job-management]=5075fd602c287bb4ceb58a6c4a325e644ed72d74869438d25d0f5586072cb699
)
command -v mvn >/dev/null || die "Maven (mvn) is needed to fetch Beam's model protos"
command -v unzip >/dev/null || die "unzip is needed (scripts/setup.sh installs it)"
jars="$BEAM_KAFKA_CACHE/beam-protos/jars-$BEAM_VERSION"
mkdir -p "$jars"
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp"
for artifact in "${!SHA256[@]}"; do
  jar="$jars/$artifact-$BEAM_VERSION.jar"
  if [[ ! -f "$jar" ]]; then
    log "fetching org.apache.beam:$artifact:$BEAM_VERSION from Maven Central"
    mvn -q -B org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
        -Dartifact="org.apache.beam:$artifact:$BEAM_VERSION:jar" -DoutputDirectory="$jars" >&2 \
      || die "could not fetch org.apache.beam:$artifact:$BEAM_VERSION"
  fi
  actual="$(sha256sum "$jar" | cut -d' ' -f1)"
  if [[ "$actual" != "${SHA256[$artifact]}" ]]; then
    rm -f "$jar"
    die "checksum mismatch for $artifact-$BEAM_VERSION.jar: expected ${SHA256[$artifact]}, got $actual"
  fi
  unzip -q -o "$jar" 'org/apache/beam/model/*.proto' -d "$OUT.tmp"
done
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"; touch "$OUT/.complete"
echo "$OUT"
