#!/usr/bin/env bash
# The torture run (not in CI): for MINUTES (default 20), rounds of randomly
# chosen tests from every suite (the integration tests, with copies killed
# by SIGKILL and broker restarts among them; Beam's Python suite at
# internal parallelism 1 or 4; Beam's Go integration tests; Beam's Java
# ValidatesRunner classes), each round bounded in time so a hang is counted,
# not waited through. Every test checks its output.
#   scripts/torture.sh [MINUTES] [--seed N] [--round-timeout SECONDS]
# Prints a line per round and per suite, then `torture: N passed, N failed`
# (hung rounds count as failed); logs of rounds that did not pass go to
# $BEAM_KAFKA_CACHE/torture/<time>/.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
minutes="${1:-20}"; shift || true
"$REPO_ROOT/scripts/setup.sh" --tests
"$REPO_ROOT/scripts/build.sh" >/dev/null
PY="$("$REPO_ROOT/scripts/python-env.sh")"
"$REPO_ROOT/scripts/kafka.sh" fetch
PORT="${BEAM_KAFKA_TEST_PORT:-19092}"
started=""
if [[ -z "${BEAM_KAFKA_TEST_BOOTSTRAP:-}" ]]; then
  if ! "$REPO_ROOT/scripts/kafka.sh" status "$PORT"; then
    "$REPO_ROOT/scripts/kafka.sh" start "$PORT"
    started="$PORT"
  fi
  export BEAM_KAFKA_TEST_BOOTSTRAP="localhost:$PORT"
fi
trap 'if [[ -n "$started" ]]; then "$REPO_ROOT/scripts/kafka.sh" stop "$started"; fi' EXIT
logs="$BEAM_KAFKA_CACHE/torture/$(date +%Y%m%d-%H%M%S)"
"$PY" "$REPO_ROOT/scripts/torture.py" --minutes "$minutes" --python "$PY" --logs "$logs" "$@"
