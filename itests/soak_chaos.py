"""The chaos soak (bench/chaos.sh runs it; not part of the CI suite, whose
short variant is test_broker_restart.py).

For BEAM_KAFKA_CHAOS_SECS (default 600) a streaming exactly-once job with
user state and a GroupByKey runs as 3 `beam-kafka run` copies under a steady
stream of input, while
  - a random copy is SIGKILLed and started again every ~20 s, and
  - the broker is SIGKILLed, left down 5-30 s and restarted on its data,
    at least 3 times, and
  - the application scales out and back in every ~BEAM_KAFKA_CHAOS_SCALE_EVERY
    s (90 by default): a fourth copy starts, and is later stopped with
    SIGTERM (each is a scale event).
Then a verifier reads both outputs read_committed: every word's running
count must be 1..n exactly once (user state), and the windowed counts must
sum to what was produced with no pane written twice (GroupByKey). The
summary (kills, broker restarts, records, lost, duplicated) is printed and
written to BEAM_KAFKA_CHAOS_REPORT if set. BEAM_KAFKA_CHAOS_GROUP_PROTOCOL=
consumer runs the copies with --group_protocol=consumer (KIP-848);
BEAM_KAFKA_CHAOS_STANDBYS=R gives them --num_standby_replicas=R (a killed
copy's tasks start from a survivor's standby store)."""

import collections
import json
import os
import random
import signal
import threading
import time
import typing

import apache_beam as beam
from apache_beam.io.kafka import WriteToKafka
from apache_beam.transforms import window
from confluent_kafka import Producer

from conftest import make_app_id
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import read_committed
from kafka_topics import unique_topic
from own_broker import kafka
from own_broker import own_broker
from test_copies import Copy
from test_copies import WORDS
from test_copies import _RunningCount
from test_copies import _word_key
from test_run_command import _KeyWithWindow
from test_run_command import _sum_values
from test_run_command import _to_pair

SECS = float(os.environ.get('BEAM_KAFKA_CHAOS_SECS', '600'))
COPY_KILL_EVERY = float(os.environ.get('BEAM_KAFKA_CHAOS_KILL_EVERY', '20'))
BROKER_RESTARTS = int(os.environ.get('BEAM_KAFKA_CHAOS_BROKER_RESTARTS', '3'))
SCALE_EVERY = float(os.environ.get('BEAM_KAFKA_CHAOS_SCALE_EVERY', '90'))
# classic (eager rebalancing) or consumer (KIP-848: moving tasks hand over).
GROUP_PROTOCOL = os.environ.get('BEAM_KAFKA_CHAOS_GROUP_PROTOCOL', 'classic')
STANDBYS = int(os.environ.get('BEAM_KAFKA_CHAOS_STANDBYS', '0'))


def _save(job_server, broker, source, counts, panes, path):
  expansion = 'localhost:%d' % job_server.expansion_port
  p = beam.Pipeline()
  words = p | read_from_start(job_server, broker, source)
  _ = (
      words
      | 'Key' >> beam.Map(_word_key).with_output_types(typing.Tuple[bytes, bytes])
      | beam.ParDo(_RunningCount()).with_output_types(typing.Tuple[bytes, bytes])
      | 'WriteCounts' >> WriteToKafka(
          producer_config={'bootstrap.servers': broker}, topic=counts,
          expansion_service=expansion))
  _ = (
      words
      | 'Pair' >> beam.Map(_to_pair)
      | beam.WindowInto(window.FixedWindows(2))
      | beam.GroupByKey()
      | beam.MapTuple(_sum_values)
      | beam.ParDo(_KeyWithWindow()).with_output_types(typing.Tuple[bytes, bytes])
      | 'WritePanes' >> WriteToKafka(
          producer_config={'bootstrap.servers': broker}, topic=panes,
          expansion_service=expansion))
  path.write_bytes(p.to_runner_api().SerializeToString())


class _Stream:
  """12 records every 0.2 s. Delivery is retried through broker outages
  (idempotent, 10 minute timeout); only acknowledged records count."""
  def __init__(self, broker, source):
    self.producer = Producer({
        'bootstrap.servers': broker, 'enable.idempotence': True,
        'message.timeout.ms': 600_000, 'log_level': 2})
    self.source, self.sent, self.acked, self.errors = source, 0, 0, []
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)
    self._thread.start()

  def _delivered(self, err, _msg):
    if err is None:
      self.acked += 1
    else:
      self.errors.append(str(err))

  def _run(self):
    while not self._stop.is_set():
      for i in range(self.sent, self.sent + 12):
        self.producer.produce(self.source, partition=i % 4, value=WORDS[i % 3],
                              on_delivery=self._delivered)
      self.sent += 12
      self.producer.poll(0)
      time.sleep(0.2)

  def stop(self):
    self._stop.set()
    self._thread.join(30)
    left = self.producer.flush(600)
    assert left == 0 and not self.errors, (left, self.errors[:5])
    return self.acked


def _plan(rng):
  """(time, event) pairs: broker restarts spread over the run, copy kills
  every ~COPY_KILL_EVERY s, none of them in the last 10% of the run."""
  events = []
  for k in range(BROKER_RESTARTS):
    at = SECS * (k + 0.5) / (BROKER_RESTARTS + 0.5)
    events.append((at, ('broker', rng.uniform(5, 30))))
  t = COPY_KILL_EVERY / 2
  while t < SECS * 0.9:
    events.append((t, ('copy', rng.randrange(3))))
    t += rng.uniform(0.6, 1.4) * COPY_KILL_EVERY
  # Scale out, then back in, alternately (the last one in, before the end).
  t, out = SCALE_EVERY / 3, True
  while t < SECS * 0.9 or not out:
    events.append((t, ('scale', 'out' if out else 'in')))
    out = not out
    t += rng.uniform(0.6, 1.4) * SCALE_EVERY
  return sorted(events)


def test_chaos_soak(job_server, binary, tmp_path):
  rng = random.Random(int(os.environ.get('BEAM_KAFKA_CHAOS_SEED', time.time())))
  report = {'seconds': SECS, 'group_protocol': GROUP_PROTOCOL, 'standbys': STANDBYS,
            'copy_kills': 0, 'broker_restarts': 0,
            'broker_down_secs': [], 'copies_exited_by_themselves': 0,
            'scale_events': 0}
  with own_broker(39092) as port:
    broker = 'localhost:%d' % port
    source = unique_topic('soak-in')
    counts, panes = unique_topic('soak-counts'), unique_topic('soak-panes')
    create_topic(broker, source, 4)
    create_topic(broker, counts, 1)
    create_topic(broker, panes, 1)
    pipeline = tmp_path / 'soak.pb'
    _save(job_server, broker, source, counts, panes, pipeline)
    app_id = make_app_id('soak')
    serial = [0]

    def start_copy(i):
      serial[0] += 1
      extra = ['--num_standby_replicas=%d' % STANDBYS] if STANDBYS else []
      if GROUP_PROTOCOL == 'consumer':
        return Copy(binary, pipeline, broker, app_id,
                    tmp_path / ('c%d-%d' % (i, serial[0])),
                    extra=extra + ['--group_protocol=consumer'], session_timeout_ms=None)
      return Copy(binary, pipeline, broker, app_id,
                  tmp_path / ('c%d-%d' % (i, serial[0])), extra=extra)

    copies = [start_copy(i) for i in range(3)]
    everyone = list(copies)
    stream = _Stream(broker, source)
    began = time.monotonic()
    try:
      for at, (kind, arg) in _plan(rng):
        while time.monotonic() - began < at:
          time.sleep(0.2)
          # A copy whose job ended by itself is started again, as a
          # service manager would, and counted: there should be none.
          for i, c in enumerate(copies):
            if c.proc.poll() is not None:
              report['copies_exited_by_themselves'] += 1
              print('copy exited with %s:\n%s' % (c.proc.returncode, c.log()))
              copies[i] = start_copy(i)
              everyone.append(copies[i])
        if kind == 'scale':
          if arg == 'out':
            copies.append(start_copy(len(copies)))
            everyone.append(copies[-1])
          elif len(copies) > 3:
            copies.pop().stop()
          report['scale_events'] += 1
        elif kind == 'broker':
          kafka('kill', str(port))
          time.sleep(arg)
          kafka('resume', str(port))
          report['broker_restarts'] += 1
          report['broker_down_secs'].append(round(arg, 1))
        else:
          arg %= len(copies)
          copies[arg].stop(signal.SIGKILL)
          copies[arg] = start_copy(arg)
          everyone.append(copies[arg])
          report['copy_kills'] += 1
        print('%6.0f s: %s %s' % (time.monotonic() - began, kind, arg), flush=True)
      while time.monotonic() - began < SECS:
        time.sleep(0.5)
    finally:
      produced = stream.stop()
    report['records'] = produced
    try:
      out_counts, out_panes = _wait_for_outputs(broker, counts, panes, produced)
    finally:
      for c in everyone:
        c.stop()
    report.update(_verify(out_counts, out_panes, produced))
  print(json.dumps(report, indent=2))
  if os.environ.get('BEAM_KAFKA_CHAOS_REPORT'):
    with open(os.environ['BEAM_KAFKA_CHAOS_REPORT'], 'w') as f:
      json.dump(report, f, indent=2)
  assert report['lost'] == 0 and report['duplicated'] == 0, report
  assert report['state_exact'] and report['panes_exact'], report


def _wait_for_outputs(broker, counts, panes, produced, timeout=300):
  deadline = time.monotonic() + timeout
  while True:
    out_counts = read_committed(broker, counts, expected=produced, timeout=20, settle=2)
    out_panes = read_committed(broker, panes, expected=1, timeout=10, settle=2)
    total = sum(int(v) for _, _, v in out_panes)
    if (len(out_counts) >= produced and total >= produced) or time.monotonic() > deadline:
      return out_counts, out_panes
    time.sleep(5)


def _verify(out_counts, out_panes, produced):
  want = collections.Counter(WORDS[i % 3] for i in range(produced))
  seen = collections.defaultdict(list)
  for _, key, _ in out_counts:
    word, n = key.split(b'@')
    seen[word].append(int(n))
  lost = dup = 0
  for word, n in want.items():
    got = collections.Counter(seen[word])
    lost += sum(1 for i in range(1, n + 1) if got[i] == 0)
    dup += sum(c - 1 for c in got.values() if c > 1)
    dup += sum(c for i, c in got.items() if i > n)
  keys = [key for _, key, _ in out_panes]
  per_word = collections.Counter()
  for _, key, value in out_panes:
    per_word[key.split(b'@')[0]] += int(value)
  return {
      'lost': lost, 'duplicated': dup,
      'state_exact': lost == 0 and dup == 0,
      'panes': len(keys), 'panes_written_twice': len(keys) - len(set(keys)),
      'panes_exact': per_word == want and len(keys) == len(set(keys)),
      'pane_sum': sum(per_word.values()),
  }
