#!/usr/bin/env python3
"""Handover benchmark: how long a pipeline stops producing when the copy that
holds its source (or its state) is killed with SIGKILL, and how much of that
is recovery work beyond Kafka's session timeout.

Two (--copies) `beam-kafka run` copies of one application read a
one-partition topic (so exactly one copy holds the source) and write every
record to an output topic. A producer writes a numbered record every 20 ms.
With --state_mb S, the pipeline keeps each record's value in user state
(bench/restore.py's) in one stateful task, the source is first filled with
S MB of 10 kB values under distinct keys, and the copy running the stateful
task is the one killed; --standbys R gives the copies
--num_standby_replicas=R. The benchmark measures, for each session timeout:

    handover       = (first output of a record produced after the kill) - kill
    recovery work  = handover - session timeout

and prints the pipeline's latency before the kill (a record produced after
the kill takes at least as long once its tasks run again).

It is a benchmark, not a test: it prints numbers and asserts nothing about
time. Run it with bench/handover.sh (which builds and starts what it needs).
"""

import argparse
import contextlib
import os
import re
import shutil
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
from kafka_topics import delete_topics  # noqa: E402
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
  def __init__(self, binary, pipeline, broker, app_id, state_dir, session_ms, protocol, extra=()):
    env = dict(os.environ)
    # Under KIP-848 the session timeout is the brokers' (session_ms names it).
    membership = (['--session_timeout_ms=%d' % session_ms] if protocol == 'classic'
                  else ['--group_protocol=%s' % protocol])
    env['PYTHONPATH'] = os.pathsep.join([str(Path(__file__).parent), str(REPO / 'itests'), env.get('PYTHONPATH', '')])
    self.proc = subprocess.Popen(
        [binary, 'run', '--pipeline', str(pipeline), '--sdk-worker-command',
         '%s -m beam_kafka.boot' % sys.executable, '--',
         '--bootstrap_servers=%s' % broker, '--application_id=%s' % app_id,
         '--state_dir=%s' % state_dir, '--streaming'] + membership + list(extra)
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
      self.producer.produce(self.topic, key=b'%d' % self.n, value=b'%d' % self.n, partition=0)
      self.producer.poll(0)
      self.n += 1
      time.sleep(0.02)


class Output:
  """Arrival time of every record in the output (read_committed)."""
  def __init__(self, broker, topic):
    self.consumer = Consumer({'bootstrap.servers': broker, 'group.id': unique_topic('bench'),
                              'isolation.level': 'read_committed'})
    self.consumer.assign([TopicPartition(topic, 0, 0)])
    self.arrived, self.count = {}, 0
    self.stop = threading.Event()
    threading.Thread(target=self._run, daemon=True).start()

  def _run(self):
    while not self.stop.is_set():
      m = self.consumer.poll(0.05)
      if m is not None and not m.error():
        self.count += 1
        # The stateful pipeline emits (key, b''); the fill's keys are not numbers.
        number = m.value() or m.key()
        if number and number.isdigit():
          self.arrived.setdefault(int(number), time.monotonic())


def fill(broker, topic, megabytes):
  """S MB of 10 kB values under distinct keys: the stateful task's state."""
  producer = Producer({'bootstrap.servers': broker, 'linger.ms': 20})
  value = os.urandom(10 * 1024)
  records = megabytes * 1024 // 10
  for i in range(records):
    producer.produce(topic, key=b'k%09d' % i, value=value, partition=0)
    if i % 1000 == 0:
      producer.poll(0)
  producer.flush(300)
  return records


def measure(binary, broker, session_ms, workdir, protocol, run, copies_n=2, state_mb=0, standbys=0):
  source, sink = unique_topic('handover-in'), unique_topic('handover-out')
  create_topic(broker, source, 1)
  create_topic(broker, sink, 1)
  pipeline = workdir / ('handover-%d-%d.pb' % (session_ms, run))
  extra = ['--num_standby_replicas=%d' % standbys] if standbys else []
  if state_mb:
    from restore import save_pipeline as save_stateful  # noqa: E402 (restore imports this module)
    save_stateful(binary, broker, source, sink, pipeline)
    filled = fill(broker, source, state_mb)
    extra.append('--internal_parallelism=1')
  else:
    save_pipeline(binary, broker, source, sink, pipeline)
    filled = 0
  # The task whose copy is killed: the source's, or the state's.
  victim_task = '1_0' if state_mb else '0_0'
  app_id = unique_topic('handover')
  copies = [Copy(binary, pipeline, broker, app_id, workdir / ('s%d-%d-%d' % (session_ms, run, i)),
                 session_ms, protocol, extra) for i in range(copies_n)]
  out = Output(broker, sink)
  stream = None
  try:
    deadline = time.monotonic() + 120 + state_mb
    while time.monotonic() < deadline:
      if stream is None and out.count >= filled:
        stream = Stream(broker, source)
      holders = [c for c in copies if victim_task in c.tasks()]
      running = all(': Running' in ''.join(c.lines) for c in copies)
      if len(holders) == 1 and running and len(out.arrived) > 50:
        break
      time.sleep(0.2)
    else:
      raise RuntimeError('the copies did not settle: %s' % [c.tasks() for c in copies])
    # Let the group settle (a later copy's join moves tasks once) and the
    # standbys read the changelog (about 50 MB/s here).
    time.sleep(8 + state_mb / 50)
    holders = [c for c in copies if victim_task in c.tasks() and c.proc.poll() is None]
    if len(holders) != 1:
      raise RuntimeError('%s is not held by exactly one copy: %s' % (victim_task, [c.tasks() for c in copies]))
    holder = holders[0]
    # The pipeline's latency before the kill (median over its last 100
    # records): a record produced after the kill takes at least that too.
    steady = sorted(out.arrived[n] - t for n, t in list(stream.sent.items())[-150:-50] if n in out.arrived)
    latency = steady[len(steady) // 2] if steady else float('nan')
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
      survivor = next((c for c in copies if c is not holder and victim_task in c.tasks()),
                      next(c for c in copies if c is not holder))
      with open('%s/handover-%d-%d.log' % (logs, session_ms, run), 'w') as f:
        f.write('killed at %s UTC, first output after it %.3f s later\n' % (
            time.strftime('%H:%M:%S', time.gmtime(killed_wall)) + ('%.3f' % (killed_wall % 1))[1:], handover))
        f.write(''.join(survivor.lines))
    taker = next((c for c in copies if c is not holder and victim_task in c.tasks()), None)
    warm = taker is not None and ('task %s starts from this copy\'s standby store' % victim_task) in ''.join(taker.lines)
    return handover, handover - session_ms / 1000, latency, warm
  finally:
    if stream:
      stream.stop.set()
    out.stop.set()
    for c in copies:
      if c.proc.poll() is None:
        c.proc.send_signal(signal.SIGTERM)
        c.proc.wait(60)
    # A run with state leaves gigabytes: its topics and state directories go.
    delete_topics(broker, [source, sink, '__beam_%s_' % app_id])
    for i in range(copies_n):
      shutil.rmtree(workdir / ('s%d-%d-%d' % (session_ms, run, i)), ignore_errors=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--bootstrap_servers', default='localhost:9092')
  parser.add_argument('--binary', default=str(REPO / 'bin' / 'beam-kafka'))
  parser.add_argument('--session_timeouts', default='6000,45000',
                      help='classic: the copies\' --session_timeout_ms values; consumer: the '
                      'brokers\' group.consumer.session.timeout.ms (scripts/kafka.sh sets 6000)')
  parser.add_argument('--group_protocol', default='classic', choices=['classic', 'consumer'])
  parser.add_argument('--runs', type=int, default=1, help='measurements per session timeout')
  parser.add_argument('--copies', type=int, default=2)
  parser.add_argument('--state_mb', type=int, default=0, help='user state of the stateful task killed (0: stateless)')
  parser.add_argument('--standbys', type=int, default=0, help='--num_standby_replicas of the copies')
  args = parser.parse_args()
  if args.group_protocol == 'consumer' and args.session_timeouts == '6000,45000':
    args.session_timeouts = '6000'
  workdir = Path(tempfile.mkdtemp(prefix='beam-kafka-handover-'))
  print('handover after SIGKILL of the copy holding the %s (%d copies, 1-partition source, '
        '--group_protocol=%s, %d MB of state, %d standby replicas)' % (
            'state' if args.state_mb else 'source', args.copies, args.group_protocol, args.state_mb, args.standbys))
  print('%-18s %-12s %-14s %-20s %s' % ('session timeout', 'handover', 'recovery work', 'latency before kill',
                                        'new owner had a standby'))
  works = []
  for ms in [int(x) for x in args.session_timeouts.split(',')]:
    for run in range(args.runs):
      handover, work, latency, warm = measure(args.binary, args.bootstrap_servers, ms, workdir, args.group_protocol,
                                              run, args.copies, args.state_mb, args.standbys)
      works.append(work)
      print('%-18s %-12s %-14s %-20s %s' % ('%d ms' % ms, '%.2f s' % handover, '%.3f s' % work,
                                            '%.2f s' % latency, 'yes' if warm else 'no'), flush=True)
  if len(works) > 1:
    works.sort()
    print('recovery work over %d runs: median %.3f s, %.3f-%.3f s' % (
        len(works), works[len(works) // 2], works[0], works[-1]))
  print('seed (Java runner on Kafka Streams): 8.6-10.0 s at 6000 ms (2.6-4.0 s of recovery work), '
        '55.7 s at 45000 ms; target: recovery work <= 0.5 s')


if __name__ == '__main__':
  main()
