#!/usr/bin/env python3
"""Restore benchmark: how long a task with S MB of user state takes to start
again, from its local store (a clean stop left a checkpoint) and from its
changelog alone (a fresh state directory, as on a machine that never ran it).

One `beam-kafka run` copy reads a one-partition topic of distinct keys and
keeps each record's value in a ReadModifyWriteState (so the task's state is
about records x value size), echoing the key to an output topic. Once every
record is counted, the copy is stopped with SIGTERM and started again, first
on its own state directory, then on an empty one; each start's log gives the
time from the task start to its state being restored and to its partitions
being sought (BEAM_KAFKA_LOG debug lines of `actors::task_start`).

It is a benchmark, not a test: it prints numbers and asserts nothing about
time. It is the measurement standby replicas and lazily read state are
judged by: a standby keeps a store like the first case current.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import typing
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / 'itests'))
sys.path.insert(0, str(REPO / 'python'))
sys.path.insert(0, str(REPO / 'bench'))

import apache_beam as beam  # noqa: E402
from apache_beam.coders import BytesCoder  # noqa: E402
from apache_beam.io.kafka import ReadFromKafka  # noqa: E402
from apache_beam.io.kafka import WriteToKafka  # noqa: E402
from apache_beam.transforms import userstate  # noqa: E402
from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402

from handover import expansion_service  # noqa: E402
from kafka_topics import create_topic  # noqa: E402
from kafka_topics import delete_topics  # noqa: E402
from kafka_topics import unique_topic  # noqa: E402


class _Keep(beam.DoFn):
  """Keeps each key's latest value; emits the key."""
  VALUE = userstate.ReadModifyWriteStateSpec('value', BytesCoder())

  def process(self, kv, value=beam.DoFn.StateParam(VALUE)):
    value.write(kv[1])
    yield kv[0], b''


def save_pipeline(binary, broker, source, sink, path):
  with expansion_service(binary) as expansion:
    p = beam.Pipeline()
    _ = (
        p
        | ReadFromKafka(consumer_config={'bootstrap.servers': broker, 'auto.offset.reset': 'earliest'},
                        topics=[source], expansion_service=expansion)
        | beam.Map(lambda kv: (kv[0], kv[1])).with_output_types(typing.Tuple[bytes, bytes])
        | beam.ParDo(_Keep()).with_output_types(typing.Tuple[bytes, bytes])
        | WriteToKafka(producer_config={'bootstrap.servers': broker}, topic=sink,
                       expansion_service=expansion))
    path.write_bytes(p.to_runner_api().SerializeToString())


def start(binary, pipeline, broker, app_id, state_dir):
  env = dict(os.environ)
  env['PYTHONPATH'] = os.pathsep.join([str(REPO / 'bench'), str(REPO / 'itests'), env.get('PYTHONPATH', '')])
  env['BEAM_KAFKA_LOG'] = 'info,beam_kafka_actors::task_start=debug'
  return subprocess.Popen(
      [binary, 'run', '--pipeline', str(pipeline), '--sdk-worker-command',
       '%s -m beam_kafka.boot' % sys.executable, '--',
       '--bootstrap_servers=%s' % broker, '--application_id=%s' % app_id,
       '--state_dir=%s' % state_dir, '--streaming'],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, errors='replace')


def wait_for_outputs(broker, sink, n, timeout):
  consumer = Consumer({'bootstrap.servers': broker, 'group.id': unique_topic('restore-bench'),
                       'isolation.level': 'read_committed'})
  consumer.assign([TopicPartition(sink, 0, 0)])
  seen, deadline = 0, time.monotonic() + timeout
  while seen < n and time.monotonic() < deadline:
    seen += len([m for m in consumer.consume(1000, 0.5) if not m.error()])
  consumer.close()
  if seen < n:
    raise RuntimeError('only %d of %d outputs after %d s' % (seen, n, timeout))


# The stateful sub-topology's task, as the start-up's debug lines name it.
STATEFUL = r'tasks \[[^\]]*sub_topology: 1, partition: 0'


def run_until_started(binary, pipeline, broker, app_id, state_dir, timeout=600):
  """Starts a copy, waits for its stateful task to start, stops it; returns
  (restored after, sought after) in seconds from the task start."""
  proc = start(binary, pipeline, broker, app_id, state_dir)
  lines, restored, sought = [], None, None
  deadline = time.monotonic() + timeout
  for line in proc.stdout:
    lines.append(line)
    m = re.search(STATEFUL + r'[^\]]*\]: state restored after ([\d.]+)(ms|s|µs)', line)
    if m:
      restored = float(m.group(1)) / {'ms': 1000, 's': 1, 'µs': 1e6}[m.group(2)]
    m = re.search(STATEFUL + r'[^\]]*\]: partitions sought after ([\d.]+)(ms|s|µs)', line)
    if m:
      sought = float(m.group(1)) / {'ms': 1000, 's': 1, 'µs': 1e6}[m.group(2)]
      break
    if time.monotonic() > deadline:
      break
  proc.send_signal(signal.SIGTERM)
  proc.wait(120)
  if sought is None:
    raise RuntimeError('the stateful task never started:\n%s' % ''.join(lines[-30:]))
  return restored, sought


def measure(binary, broker, megabytes, value_kb, workdir):
  records = max(1, megabytes * 1024 // value_kb)
  source, sink = unique_topic('restore-in'), unique_topic('restore-out')
  create_topic(broker, source, 1)
  create_topic(broker, sink, 1)
  pipeline = workdir / ('restore-%d.pb' % megabytes)
  save_pipeline(binary, broker, source, sink, pipeline)
  producer = Producer({'bootstrap.servers': broker, 'linger.ms': 20})
  value = os.urandom(value_kb * 1024)
  for i in range(records):
    producer.produce(source, key=b'k%09d' % i, value=value, partition=0)
    if i % 1000 == 0:
      producer.poll(0)
  producer.flush(300)
  app_id = unique_topic('restore')
  state = workdir / ('state-%d' % megabytes)
  proc = start(binary, pipeline, broker, app_id, state)
  began = time.monotonic()
  try:
    wait_for_outputs(broker, sink, records, timeout=1800)
  finally:
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
  filled = time.monotonic() - began
  try:
    local = run_until_started(binary, pipeline, broker, app_id, state)
    changelog = run_until_started(binary, pipeline, broker, app_id, workdir / ('fresh-%d' % megabytes))
  finally:
    # Gigabytes of topics and stores: gone once measured.
    delete_topics(broker, [source, sink, '__beam_%s_' % app_id])
    shutil.rmtree(state, ignore_errors=True)
    shutil.rmtree(workdir / ('fresh-%d' % megabytes), ignore_errors=True)
  return records, filled, local, changelog


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--bootstrap_servers', default='localhost:9092')
  parser.add_argument('--binary', default=str(REPO / 'bin' / 'beam-kafka'))
  parser.add_argument('--sizes_mb', default='10,100', help='state sizes to measure, in MB')
  parser.add_argument('--value_kb', type=int, default=10)
  args = parser.parse_args()
  workdir = Path(tempfile.mkdtemp(prefix='beam-kafka-restore-'))
  print('a stateful task started again with S MB of user state (values of %d kB, one key each)' % args.value_kb)
  print('%-8s %-9s %-10s %-24s %-24s' % ('state', 'records', 'filled in', 'local store: restored/sought',
                                        'changelog: restored/sought'))
  for mb in [int(x) for x in args.sizes_mb.split(',')]:
    records, filled, local, changelog = measure(args.binary, args.bootstrap_servers, mb, args.value_kb, workdir)
    print('%-8s %-9d %-10s %-24s %-24s' % (
        '%d MB' % mb, records, '%.0f s' % filled, '%.2f s / %.2f s' % local, '%.2f s / %.2f s' % changelog),
        flush=True)


if __name__ == '__main__':
  main()
