#!/usr/bin/env bash
# The start-up race soak from one command (itests/test_startup_race.py):
# ROUNDS times (default 30), three copies of a stateful exactly-once job start
# together under a stream; every record must be counted once and every copy
# must stop promptly on SIGTERM. The logs of a round that went wrong are kept
# under $BEAM_KAFKA_STARTUP_LOGS (default /tmp/beam-kafka-startup; debug logs
# of the actors). BEAM_KAFKA_STARTUP_EXTRA adds flags to every copy (e.g.
# --read_max_poll_time_ms=1000 widens the poll loop's batches).
#   bench/startup.sh [ROUNDS]
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
"$REPO_ROOT/scripts/setup.sh"
"$REPO_ROOT/scripts/build.sh" >/dev/null
PY="$("$REPO_ROOT/scripts/python-env.sh")"
"$REPO_ROOT/scripts/kafka.sh" fetch
logs="${BEAM_KAFKA_STARTUP_LOGS:-/tmp/beam-kafka-startup}"
rm -rf "$logs"; mkdir -p "$logs"
cd "$REPO_ROOT"
BEAM_KAFKA_STARTUP_ROUNDS="${1:-30}" BEAM_KAFKA_STARTUP_LOGS="$logs" \
  BEAM_KAFKA_LOG="${BEAM_KAFKA_LOG:-info,beam_kafka_actors=debug}" \
  "$PY" -m pytest itests/test_startup_race.py -q -p no:cacheprovider "${@:2}"
