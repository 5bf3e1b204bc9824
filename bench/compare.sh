#!/usr/bin/env bash
# The runner comparison (bench/compare.py) from one command: builds the
# runner (release), prepares the venv, starts a local broker on
# localhost:9092 unless one answers at $BOOTSTRAP_SERVERS, and runs every
# workload on every runner one after another (Prism is built from the Go
# module proxy on first use). Extra arguments go to compare.py, e.g.
# `bench/compare.sh --elements 100000 --repeat 3 --runners beam-kafka-eo,prism`.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
BOOTSTRAP_SERVERS="${BOOTSTRAP_SERVERS:-localhost:9092}"
prepare_demo "$BOOTSTRAP_SERVERS" --release
"$DEMO_PY" "$REPO_ROOT/bench/compare.py" --binary="$DEMO_BINARY" --bootstrap_servers="$BOOTSTRAP_SERVERS" "$@"
