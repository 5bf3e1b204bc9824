#!/usr/bin/env bash
# Runs the example pipeline (examples/hello_kafka.py) on Kafka with the
# KafkaStreamsRunner. Uses the broker at $BOOTSTRAP_SERVERS (default
# localhost:9092), starting a local one for the run when none answers there.
# Extra arguments go to the pipeline.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
BOOTSTRAP_SERVERS="${BOOTSTRAP_SERVERS:-localhost:9092}"
prepare_demo "$BOOTSTRAP_SERVERS"
PY="$DEMO_PY"
"$PY" "$REPO_ROOT/examples/hello_kafka.py" --runner=beam_kafka.KafkaStreamsRunner \
  --bootstrap_servers="$BOOTSTRAP_SERVERS" "$@"
