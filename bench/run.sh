#!/usr/bin/env bash
# The whole runner comparison (issue 7) from one command, on a fresh machine:
# builds the runner (release), prepares the venv, starts a local broker on
# localhost:9092 unless one answers at $BOOTSTRAP_SERVERS, then runs, one
# after another,
#   bench/compare.py  the SDK-bound workloads on beam-kafka (exactly-once and
#                     at-least-once), Beam's Python reference runner, Prism
#                     and Beam's Flink job server (peers fetched on first use)
#   bench/native.py   the broker's own produce/consume ceiling, the
#                     runner-native topic-to-topic count against a Kafka
#                     Streams app, and streaming latency of both
# Tables go to stdout and bench/results/report.txt; CSVs and PNGs to
# bench/results/. COMPARE_ARGS and NATIVE_ARGS pass options to each (the
# native part runs on 8 partitions with 2 SDK harness processes unless
# NATIVE_ARGS says otherwise), e.g.
#   COMPARE_ARGS="--repeat 3" NATIVE_ARGS="--parts ceiling,native" bench/run.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
BOOTSTRAP_SERVERS="${BOOTSTRAP_SERVERS:-localhost:9092}"
prepare_demo "$BOOTSTRAP_SERVERS" --release
out="$REPO_ROOT/bench/results"
mkdir -p "$out"
{
  echo "# beam-kafka benchmark, $(date -u +%FT%TZ), $(nproc) cores, $(git -C "$REPO_ROOT" rev-parse --short HEAD)"
  # shellcheck disable=SC2086  # the ARGS variables are lists of options
  "$DEMO_PY" "$REPO_ROOT/bench/compare.py" --binary="$DEMO_BINARY" --bootstrap_servers="$BOOTSTRAP_SERVERS" \
    --out="$out" ${COMPARE_ARGS:-}
  # shellcheck disable=SC2086
  "$DEMO_PY" "$REPO_ROOT/bench/native.py" --binary="$DEMO_BINARY" --bootstrap_servers="$BOOTSTRAP_SERVERS" \
    --out="$out" ${NATIVE_ARGS:---partitions 8 --harnesses 2}
} 2>&1 | tee "$out/report.txt"
exit "${PIPESTATUS[0]}"
