#!/usr/bin/env bash
# The handover benchmark (bench/handover.py) from one command: builds the
# runner, prepares the venv, starts a local broker on localhost:9092 unless
# one answers at $BOOTSTRAP_SERVERS, and prints handover and recovery work
# for session timeouts 6000 and 45000 ms (--group_protocol=consumer: under KIP-848,
# the brokers' session; --runs N: N measurements each).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
BOOTSTRAP_SERVERS="${BOOTSTRAP_SERVERS:-localhost:9092}"
prepare_demo "$BOOTSTRAP_SERVERS"
"$DEMO_PY" "$REPO_ROOT/bench/handover.py" --bootstrap_servers="$BOOTSTRAP_SERVERS" "$@"
