#!/usr/bin/env bash
# Runs the example pipeline (examples/hello_kafka.py) on Kafka with the
# KafkaStreamsRunner. Uses the broker at $BOOTSTRAP_SERVERS (default
# localhost:9092), starting a local one for the run when none answers there.
# Extra arguments go to the pipeline.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
BOOTSTRAP_SERVERS="${BOOTSTRAP_SERVERS:-localhost:9092}"
"$REPO_ROOT/scripts/setup.sh"
"$REPO_ROOT/scripts/build.sh" >/dev/null
PY="$("$REPO_ROOT/scripts/python-env.sh")"
started=""
if ! "$REPO_ROOT/scripts/kafka.sh" status "${BOOTSTRAP_SERVERS##*:}" 2>/dev/null; then
  if [[ "${BOOTSTRAP_SERVERS%%:*}" != "localhost" && "${BOOTSTRAP_SERVERS%%:*}" != "127.0.0.1" ]]; then
    die "no Kafka broker answers at $BOOTSTRAP_SERVERS"
  fi
  "$REPO_ROOT/scripts/kafka.sh" start "${BOOTSTRAP_SERVERS##*:}"
  started="${BOOTSTRAP_SERVERS##*:}"
  trap '"$REPO_ROOT/scripts/kafka.sh" stop "$started"' EXIT
fi
"$PY" "$REPO_ROOT/examples/hello_kafka.py" --runner=beam_kafka.KafkaStreamsRunner \
  --bootstrap_servers="$BOOTSTRAP_SERVERS" "$@"
