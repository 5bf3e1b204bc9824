#!/usr/bin/env bash
# The runner-native Kafka benchmark (bench/native.py) from one command: builds
# the runner (release), prepares the venv, starts a local broker on
# localhost:9092 unless one answers at $BOOTSTRAP_SERVERS, then measures the
# broker's ceiling, beam-kafka against a Kafka Streams app on the same
# topic-to-topic job, and their streaming latency (Kafka Streams is fetched
# with Maven and compiled on first use). Extra arguments go to native.py, e.g.
# `bench/native.sh --records 100000 --parts native,latency --rate 500`.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
BOOTSTRAP_SERVERS="${BOOTSTRAP_SERVERS:-localhost:9092}"
prepare_demo "$BOOTSTRAP_SERVERS" --release
"$DEMO_PY" "$REPO_ROOT/bench/native.py" --binary="$DEMO_BINARY" --bootstrap_servers="$BOOTSTRAP_SERVERS" "$@"
