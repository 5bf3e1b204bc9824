"""A job stopped and started again with the same application id resumes from
its committed state: GroupByKey buffers and watermarks come back from the
changelog, offsets from the group; totals equal an uninterrupted run's."""

import collections
import random
import time
import typing

import pytest

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.io.kafka import WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import window

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import read_committed
from kafka_topics import unique_topic

WINDOW_MS = 60_000
STRING_DESER = 'org.apache.kafka.common.serialization.StringDeserializer'


class _Format(beam.DoFn):
  def process(self, kv, w=beam.DoFn.WindowParam):
    yield (('%s@%d' % (kv[0], int(w.start))).encode(), b'%d' % kv[1])


def _run(job_server, broker, app_id, tmp_path, source, sink, extra):
  args = portable_args(job_server) + kafka_args(
      broker, app_id, tmp_path / 'state') + ['--streaming'] + extra
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | read_from_start(
          job_server, broker, source,
          value_deserializer=STRING_DESER,
          timestamp_policy=ReadFromKafka.create_time_policy)
      | beam.Map(lambda kv: (kv[1], 1))
      | beam.WindowInto(window.FixedWindows(WINDOW_MS // 1000))
      | beam.CombinePerKey(sum)
      | beam.ParDo(_Format()).with_output_types(typing.Tuple[bytes, bytes])
      | WriteToKafka(
          producer_config={'bootstrap.servers': broker},
          topic=sink,
          expansion_service='localhost:%d' % job_server.expansion_port))
  return p.run()


def _cancel(result):
  result.cancel()
  # Beam's client raises for any end but DONE; the state tells what happened.
  with pytest.raises(RuntimeError, match='CANCELLED'):
    result.wait_until_finish()
  assert result.state == PipelineState.CANCELLED


def _wait_for(broker, sink, count, timeout):
  deadline = time.monotonic() + timeout
  out = []
  while time.monotonic() < deadline:
    out = read_committed(broker, sink, expected=count, timeout=5, settle=0.5)
    if len(out) >= count:
      break
  return out


def test_a_restarted_job_resumes_its_group_by_key_state(
    job_server, broker, tmp_path):
  source, sink = unique_topic('restart-in'), unique_topic('restart-out')
  create_topic(broker, source, 4)
  create_topic(broker, sink, 2)
  base = 1_700_000_000_000 - 1_700_000_000_000 % WINDOW_MS
  rng = random.Random(5)
  stamps = sorted(base + rng.randrange(0, 6 * WINDOW_MS) for _ in range(240))
  records = [(i % 4, None, rng.choice(['x', 'y', 'z']).encode(), ts)
             for i, ts in enumerate(stamps)]
  produce(broker, source, records)
  expected = collections.Counter(
      '%s@%d' % (r[2].decode(), (r[3] // WINDOW_MS) * (WINDOW_MS // 1000))
      for r in records)
  app_id = make_app_id('restart')

  # First run: no idle advance, so the last window stays buffered in the
  # GroupByKey while the earlier ones fire. Stop it once they have.
  first = _run(job_server, broker, app_id, tmp_path, source, sink,
               ['--read_idle_timeout_ms=3600000'])
  fired = _wait_for(broker, sink, 1, timeout=60)
  assert fired, 'the first run fired no window'
  time.sleep(2)  # a few commit cycles: the buffered window is in the changelog
  _cancel(first)
  before = len(read_committed(broker, sink, expected=0, timeout=5, settle=1))
  assert 0 < before < len(expected), 'the first run must stop half way'

  # Second run, same application id: nothing is read again; the restored
  # buffer fires once idle partitions let the watermark pass it.
  second = _run(job_server, broker, app_id, tmp_path, source, sink, [])
  out = _wait_for(broker, sink, len(expected), timeout=90)
  _cancel(second)

  got = collections.Counter()
  for _, key, value in out:
    got[key.decode()] += int(value)
  keys = [key for _, key, _ in out]
  assert len(keys) == len(set(keys)), 'a window fired twice: %s' % sorted(keys)
  assert got == expected
