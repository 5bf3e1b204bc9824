#!/usr/bin/env python3
"""Handover benchmark: how long a pipeline stops producing when the copy that
holds its source is killed with SIGKILL, and how much of that is recovery work
beyond Kafka's session timeout.

Two `beam-kafka run` copies of one application read a one-partition topic
(so exactly one copy holds the source) and write every record to an output
topic. A producer writes a numbered record every 20 ms. The benchmark kills
the copy running the source task and measures, for each session timeout:

    handover       = (first output of a record produced after the kill) - kill
    recovery work  = handover - session timeout

It is a benchmark, not a test: it prints numbers and asserts nothing about
time. Run it with bench/handover.sh (which builds and starts what it needs).
"""

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import typing
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / 'itests'))
sys.path.insert(0, str(REPO / 'python'))

import apache_beam as beam  # noqa: E402
from apache_beam.io.kafka import ReadFromKafka  # noqa: E402
from apache_beam.io.kafka import WriteToKafka  # noqa: E402
from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402

from kafka_topics import create_topic  # noqa: E402
from kafka_topics import unique_topic  # noqa: E402


def _free_port():
  import socket
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


@contextlib.contextmanager
def expansion_service(binary):
  """A short-lived job server's expansion service (for ReadFromKafka and
  WriteToKafka in a pipeline saved for `beam-kafka run`): its address."""
  port = _free_port()
  server = subprocess.Popen(
      [binary, 'job-server', '--job-port', str(_free_port()), '--artifact-port',
       '0', '--expansion-port', str(port), '--artifacts-dir', tempfile.mkdtemp(),
       '--trust-clients'],
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    time.sleep(1.5)
    yield 'localhost:%d' % port
  finally:
    server.terminate()
    server.wait()


def save_pipeline(binary, broker, source, sink, path):
  """Saves ReadFromKafka -> WriteToKafka, expanded by a short-lived job server."""
  with expansion_service(binary) as expansion:
    p = beam.Pipeline()
    _ = (
        p
        | ReadFromKafka(
            consumer_config={'bootstrap.servers': broker,
                             'auto.offset.reset': 'earliest'},
            topics=[source], expansion_service=expansion)
        | beam.Map(lambda kv: kv).with_output_types(
            typing.Tuple[typing.Optional[bytes], typing.Optional[bytes]])
        | WriteToKafka(producer_config={'bootstrap.servers': broker},
                       topic=sink, expansion_service=expansion))
    path.write_bytes(p.to_runner_api().SerializeToString())


class Copy:
  def __init__(self, binary, pipeline, broker, app_id, state_dir, session_ms, protocol):
    env = dict(os.environ)
    # Under KIP-848 the session timeout is the brokers' (session_ms names it).
    membership = (['--session_timeout_ms=%d' % session_ms] if protocol == 'classic'
                  else ['--group_protocol=%s' % protocol])
    env['PYTHONPATH'] = os.pathsep.join([str(Path(__file__).parent), env.get('PYTHONPATH', '')])
    self.proc = subprocess.Popen(
        [binary, 'run', '--pipeline', str(pipeline), '--sdk-worker-command',
         '%s -m beam_kafka.boot' % sys.executable, '--',
         '--bootstrap_servers=%s' % broker, '--application_id=%s' % app_id,
         '--state_dir=%s' % state_dir, '--streaming'] + membership
        # Extra runner options for an analysis, e.g. librdkafka debug logs:
        # BEAM_KAFKA_BENCH_ARGS='--kafka_property=debug=fetch,cgrp --kafka_property=log_level=7'
        + os.environ.get('BEAM_KAFKA_BENCH_ARGS', '').split(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    self.lines = []
    threading.Thread(target=self._read, daemon=True).start()

  def _read(self):
    for raw in self.proc.stdout:
      self.lines.append(raw.decode(errors='replace'))

  def tasks(self):
    found = re.findall(r'running \d+ task\(s\) of application \S+ on \S+: ([\d_ ]*)', ''.join(self.lines))
    return found[-1].split() if found else []


class Stream:
  """Numbered records every 20 ms; remembers when each was produced."""
  def __init__(self, broker, topic):
    self.producer = Producer({'bootstrap.servers': broker, 'linger.ms': 0})
    self.topic, self.sent, self.n = topic, {}, 0
    self.stop = threading.Event()
    threading.Thread(target=self._run, daemon=True).start()

  def _run(self):
    while not self.stop.is_set():
      self.sent[self.n] = time.monotonic()
      self.producer.produce(self.topic, value=b'%d' % self.n, partition=0)
      self.producer.poll(0)
      self.n += 1
      time.sleep(0.02)


class Output:
  """Arrival time of every record in the output (read_committed)."""
  def __init__(self, broker, topic):
    self.consumer = Consumer({'bootstrap.servers': broker, 'group.id': unique_topic('bench'),
                              'isolation.level': 'read_committed'})
    self.consumer.assign([TopicPartition(topic, 0, 0)])
    self.arrived = {}
    self.stop = threading.Event()
    threading.Thread(target=self._run, daemon=True).start()

  def _run(self):
    while not self.stop.is_set():
      m = self.consumer.poll(0.05)
      if m is not None and not m.error():
        self.arrived.setdefault(int(m.value()), time.monotonic())


def measure(binary, broker, session_ms, workdir, protocol, run):
  source, sink = unique_topic('handover-in'), unique_topic('handover-out')
  create_topic(broker, source, 1)
  create_topic(broker, sink, 1)
  pipeline = workdir / ('handover-%d-%d.pb' % (session_ms, run))
  save_pipeline(binary, broker, source, sink, pipeline)
  app_id = unique_topic('handover')
  copies = [Copy(binary, pipeline, broker, app_id, workdir / ('s%d-%d-%d' % (session_ms, run, i)),
                 session_ms, protocol) for i in range(2)]
  stream, out = Stream(broker, source), Output(broker, sink)
  try:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
      holders = [c for c in copies if '0_0' in c.tasks()]
      running = all(': Running' in ''.join(c.lines) for c in copies)
      if len(holders) == 1 and running and len(out.arrived) > 50:
        break
      time.sleep(0.2)
    else:
      raise RuntimeError('the copies did not settle: %s' % [c.tasks() for c in copies])
    # Let the group settle: the later copy's join moves the source once.
    time.sleep(8)
    holders = [c for c in copies if '0_0' in c.tasks() and c.proc.poll() is None]
    if len(holders) != 1:
      raise RuntimeError('the source is not held by exactly one copy: %s' % [c.tasks() for c in copies])
    holder = holders[0]
    killed_at, killed_wall = time.monotonic(), time.time()
    holder.proc.send_signal(signal.SIGKILL)
    holder.proc.wait()
    first_after = None
    deadline = killed_at + session_ms / 1000 + 120
    while first_after is None and time.monotonic() < deadline:
      later = [out.arrived[n] for n, t in list(stream.sent.items()) if t > killed_at and n in out.arrived]
      first_after = min(later) if later else None
      time.sleep(0.05)
    if first_after is None:
      raise RuntimeError('no output after the kill')
    handover = first_after - killed_at
    logs = os.environ.get('BEAM_KAFKA_BENCH_LOGS')
    if logs:
      # For a breakdown: the survivor's log (UTC timestamps) and the kill time.
      survivor = next(c for c in copies if c is not holder)
      with open('%s/handover-%d-%d.log' % (logs, session_ms, run), 'w') as f:
        f.write('killed at %s UTC, first output after it %.3f s later\n' % (
            time.strftime('%H:%M:%S', time.gmtime(killed_wall)) + ('%.3f' % (killed_wall % 1))[1:], handover))
        f.write(''.join(survivor.lines))
    return handover, handover - session_ms / 1000
  finally:
    stream.stop.set()
    out.stop.set()
    for c in copies:
      if c.proc.poll() is None:
        c.proc.send_signal(signal.SIGTERM)
        c.proc.wait(60)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--bootstrap_servers', default='localhost:9092')
  parser.add_argument('--binary', default=str(REPO / 'bin' / 'beam-kafka'))
  parser.add_argument('--session_timeouts', default='6000,45000',
                      help='classic: the copies\' --session_timeout_ms values; consumer: the '
                      'brokers\' group.consumer.session.timeout.ms (scripts/kafka.sh sets 6000)')
  parser.add_argument('--group_protocol', default='classic', choices=['classic', 'consumer'])
  parser.add_argument('--runs', type=int, default=1, help='measurements per session timeout')
  args = parser.parse_args()
  if args.group_protocol == 'consumer' and args.session_timeouts == '6000,45000':
    args.session_timeouts = '6000'
  workdir = Path(tempfile.mkdtemp(prefix='beam-kafka-handover-'))
  print('handover after SIGKILL of the copy holding the source (2 copies, 1-partition source, '
        '--group_protocol=%s)' % args.group_protocol)
  print('%-18s %-12s %-14s' % ('session timeout', 'handover', 'recovery work'))
  for ms in [int(x) for x in args.session_timeouts.split(',')]:
    for run in range(args.runs):
      handover, work = measure(args.binary, args.bootstrap_servers, ms, workdir, args.group_protocol, run)
      print('%-18s %-12s %-14s' % ('%d ms' % ms, '%.2f s' % handover, '%.2f s' % work), flush=True)
  print('seed (Java runner on Kafka Streams): 8.6-10.0 s at 6000 ms (2.6-4.0 s of recovery work), '
        '55.7 s at 45000 ms; target: recovery work <= 0.5 s')


if __name__ == '__main__':
  main()
