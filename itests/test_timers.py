"""Timers of stateful ParDos on the real broker: processing-time timers fire
from the wall clock in a running streaming job, and event-time timers that
are pending when a copy is killed with SIGKILL fire exactly once after it is
restarted, with the state they read intact."""

import collections
import signal
import time
import typing

import apache_beam as beam
from apache_beam.coders import BytesCoder
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.io.kafka import WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.utils.timestamp import Timestamp

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import read_committed
from kafka_topics import unique_topic
from test_copies import Copy
from test_copies import _wait
from test_copies import save_keyed_pipeline
from test_restart import _cancel


def _split(kv):
  key, value = kv[1].split(b'|')
  return key, value


class _FlushAfterASecond(beam.DoFn):
  """Buffers a key's values; a processing-time timer a second after the
  first one emits them."""
  BUFFER = userstate.BagStateSpec('buffer', BytesCoder())
  FLUSH = userstate.TimerSpec('flush', TimeDomain.REAL_TIME)

  def process(self, kv, buffer=beam.DoFn.StateParam(BUFFER),
              flush=beam.DoFn.TimerParam(FLUSH)):
    if not list(buffer.read()):
      flush.set(Timestamp.now() + 1)
    buffer.add(kv[1])

  @userstate.on_timer(FLUSH)
  def on_flush(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER)):
    values = sorted(buffer.read())
    buffer.clear()
    yield key, b','.join(values)


def test_processing_time_timers_fire_in_a_running_streaming_job(
    job_server, broker, tmp_path):
  source, sink = unique_topic('pt-in'), unique_topic('pt-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  produce(broker, source, [(i % 2, None, b'k%d|v%d' % (i % 2, i), None) for i in range(6)])
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('pt'), tmp_path / 'state') + ['--streaming']
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | read_from_start(job_server, broker, source)
      | beam.Map(_split).with_output_types(typing.Tuple[bytes, bytes])
      | beam.ParDo(_FlushAfterASecond()).with_output_types(typing.Tuple[bytes, bytes])
      | WriteToKafka(producer_config={'bootstrap.servers': broker}, topic=sink,
                     expansion_service='localhost:%d' % job_server.expansion_port))
  result = p.run()
  try:
    # The input never ends: only the wall clock can fire these timers.
    deadline = time.monotonic() + 60
    out = []
    while len(out) < 2 and time.monotonic() < deadline:
      out = read_committed(broker, sink, expected=2, timeout=3, settle=1)
  finally:
    _cancel(result)
  assert sorted((k, v) for _, k, v in out) == [
      (b'k0', b'v0,v2,v4'), (b'k1', b'v1,v3,v5')]


class _EmitAtDeadline(beam.DoFn):
  """Collects a key's values; an event-time timer 15 s after its first
  value emits them all once."""
  SEEN = userstate.BagStateSpec('seen', BytesCoder())
  DEADLINE = userstate.TimerSpec('deadline', TimeDomain.WATERMARK)

  def process(self, kv, ts=beam.DoFn.TimestampParam,
              seen=beam.DoFn.StateParam(SEEN),
              deadline=beam.DoFn.TimerParam(DEADLINE)):
    if not list(seen.read()):
      deadline.set(ts + 15)
    seen.add(kv[1])

  @userstate.on_timer(DEADLINE)
  def on_deadline(self, key=beam.DoFn.KeyParam, seen=beam.DoFn.StateParam(SEEN)):
    yield key, b','.join(sorted(seen.read()))
    seen.clear()


def test_pending_timers_fire_once_after_a_sigkill(job_server, binary, broker, tmp_path):
  source, sink = unique_topic('et-in'), unique_topic('et-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  pipeline = tmp_path / 'timers.pb'
  save_keyed_pipeline(job_server, broker, source, sink, pipeline, _split, _EmitAtDeadline(),
                      timestamp_policy=ReadFromKafka.create_time_policy)
  app_id = make_app_id('timers')
  first = Copy(binary, pipeline, broker, app_id, tmp_path / 'first')
  second = None
  try:
    _wait(lambda: first.tasks_running() > 0, 60, 'the copy to run')
    produce(broker, source, [(i % 2, None, b'k%d|v%d' % (i % 4, i), None) for i in range(20)])
    # Let the state and the timers commit, then kill before any timer is due.
    time.sleep(4)
    assert not read_committed(broker, sink, expected=1, timeout=1, settle=0), 'a timer fired early'
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    second = Copy(binary, pipeline, broker, app_id, tmp_path / 'second')
    out = []
    deadline = time.monotonic() + 90
    while len(out) < 4 and time.monotonic() < deadline:
      out = read_committed(broker, sink, expected=4, timeout=5, settle=2)
  finally:
    for c in (first, second):
      if c is not None:
        c.stop()
  want = collections.defaultdict(list)
  for i in range(20):
    want[b'k%d' % (i % 4)].append(b'v%d' % i)
  # Every key's timer fired exactly once, with all its values.
  assert sorted((k, v) for _, k, v in out) == sorted(
      (k, b','.join(sorted(vs))) for k, vs in want.items())


class _CountThenFire(beam.DoFn):
  """Counts a key's values slowly and sets its one event-time timer again
  with every value; the timer emits the count. Slow elements make a commit's
  flush split the running bundle, so the rest of it comes back deferred and
  sets the timer again after the split."""
  COUNT = userstate.CombiningValueStateSpec('count', sum)
  DONE = userstate.TimerSpec('done', TimeDomain.WATERMARK)

  def process(self, kv, count=beam.DoFn.StateParam(COUNT),
              done=beam.DoFn.TimerParam(DONE)):
    time.sleep(0.02)
    count.add(1)
    done.set(Timestamp(1000 + kv[1]))

  @userstate.on_timer(DONE)
  def on_done(self, key=beam.DoFn.KeyParam, count=beam.DoFn.StateParam(COUNT),
              fired=beam.DoFn.TimestampParam):
    yield '%s:%d:%d' % (key, count.read(), fired.micros // 1000000)


def test_a_timer_set_again_after_a_split_fires_once(job_server, broker, tmp_path, collector):
  """Go's TestTimers_EventTime_Bounded, made deterministic: every bundle of
  slow elements is split by the commits (1 ms bundle time bound, 20 ms
  cycles), and the input watermark is at its end before the deferred rest
  runs. Each key's timer fires once, at its last setting, after every value."""
  keys, per_key = 3, 15
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('timer-split'), tmp_path / 'state') + [
          '--max_bundle_time_ms=1', '--commit_interval_ms=20']
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | beam.Create([('k%d' % k, v) for k in range(keys) for v in range(per_key)])
      | beam.ParDo(_CountThenFire())
      | beam.Map(collector.recorder()))
  assert p.run().wait_until_finish() == 'DONE'
  # The timer's last setting is one value's; which one depends on the order
  # the values arrived in, so only the count is exact.
  fired = collections.Counter(line.split(':')[0] for line in collector.lines())
  assert fired == {'k%d' % k: 1 for k in range(keys)}, collector.lines()
  counts = sorted(int(line.split(':')[1]) for line in collector.lines())
  assert counts == [per_key] * keys, collector.lines()
