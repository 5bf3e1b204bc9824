#!/usr/bin/env bash
# Streaming word count on Kafka, end to end from one command: creates an input
# and an output topic, writes some lines, runs examples/streaming_wordcount.py
# (Beam's ReadFromKafka -> count per 10 s window -> WriteToKafka) with the
# KafkaStreamsRunner for READ_SECONDS (default 20) while a producer keeps
# writing lines, then prints the counts a
# read_committed consumer finds in the output topic.
# Uses the broker at $BOOTSTRAP_SERVERS (default localhost:9092), starting a
# local one when none answers there.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
BOOTSTRAP_SERVERS="${BOOTSTRAP_SERVERS:-localhost:9092}"
READ_SECONDS="${READ_SECONDS:-20}"
# Its topics are made and read with the tests' Kafka client (confluent-kafka).
DEMO_VENV="" prepare_demo "$BOOTSTRAP_SERVERS"
PY="$DEMO_PY"
run_id="$(date +%s)-$$"
input="wordcount-lines-$run_id"
output="wordcount-counts-$run_id"
export REPO_ROOT BOOTSTRAP_SERVERS READ_SECONDS input output
log "topics $input (4 partitions) -> $output (2 partitions)"
"$PY" - <<'PYEOF'
import os, sys
sys.path.insert(0, os.path.join(os.environ['REPO_ROOT'], 'itests'))
from kafka_topics import create_topic
create_topic(os.environ['BOOTSTRAP_SERVERS'], os.environ['input'], 4)
create_topic(os.environ['BOOTSTRAP_SERVERS'], os.environ['output'], 2)
PYEOF
# A producer writes a line every half second while the pipeline runs.
"$PY" - <<'PYEOF' &
import os, sys, time
sys.path.insert(0, os.path.join(os.environ['REPO_ROOT'], 'itests'))
from kafka_topics import produce
lines = [
    'the quick brown fox jumps over the lazy dog',
    'a stream is a table in motion and a table is a stream at rest',
    'the log is the truth and the topic is the log',
    'count the words the fox and the dog left in the stream',
]
end = time.monotonic() + int(os.environ['READ_SECONDS']) - 4
i = 0
while time.monotonic() < end:
    produce(os.environ['BOOTSTRAP_SERVERS'], os.environ['input'], [(i % 4, None, lines[i % 4].encode(), None)])
    i += 1
    time.sleep(0.5)
print('[beam-kafka] wrote %d lines to %s' % (i, os.environ['input']), flush=True)
PYEOF
log "running the pipeline for ${READ_SECONDS} s"
"$PY" "$REPO_ROOT/examples/streaming_wordcount.py" \
  --bootstrap_servers="$BOOTSTRAP_SERVERS" --application_id="wordcount-$run_id" \
  --input_topic="$input" --output_topic="$output" --read_seconds="$READ_SECONDS" "$@"
wait
log "counts in $output (word: count@window)"
"$PY" - <<'PYEOF'
import os, sys
sys.path.insert(0, os.path.join(os.environ['REPO_ROOT'], 'itests'))
from kafka_topics import read_committed
rows = read_committed(os.environ['BOOTSTRAP_SERVERS'], os.environ['output'], expected=1, timeout=15, settle=3)
for _, k, v in sorted(rows, key=lambda r: (r[2].split(b'@')[1], r[1])):
    print('%s: %s' % (k.decode(), v.decode()))
if not rows:
    sys.exit('no counts in the output topic')
PYEOF
