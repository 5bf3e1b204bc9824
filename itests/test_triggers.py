"""Triggers in the runner's GroupByKey, on the real broker and binary: a
streaming pipeline from Kafka with early, on-time and late firings, read
back from its output topic pane by pane."""

import json
import time
import typing

import pytest

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import trigger
from apache_beam.transforms import window

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import read_from_start
from conftest import write_to
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import read_committed
from kafka_topics import unique_topic

STRING_DESER = 'org.apache.kafka.common.serialization.StringDeserializer'
# Event time in the past (the broker refuses timestamps far ahead); with an
# idle timeout of an hour, the source's watermark moves only with records.
BASE = 1_699_999_980_000  # a multiple of the 60 s window size
TIMING = {0: 'EARLY', 1: 'ON_TIME', 2: 'LATE'}


class _Describe(beam.DoFn):
  """A fired pane as (key, JSON of its window start, pane info, values)."""
  def process(
      self,
      kv,
      w=beam.DoFn.WindowParam,
      pane=beam.DoFn.PaneInfoParam):
    key, values = kv
    yield (
        key.encode(),
        json.dumps({
            'window': int(w.start.micros // 1000) - BASE,
            'index': pane.index,
            'on_time_index': pane.nonspeculative_index,
            'timing': TIMING[pane.timing],
            'last': pane.is_last,
            'values': sorted(values),
        }).encode())


def _panes(broker, topic, n, timeout=60):
  out = read_committed(broker, topic, expected=n, timeout=timeout, settle=0.5)
  return [json.loads(v) for _, _, v in out]


def _wait_for(broker, topic, n, what):
  deadline = time.monotonic() + 60
  while time.monotonic() < deadline:
    panes = _panes(broker, topic, n, timeout=5)
    if len(panes) >= n:
      return panes
  raise AssertionError('waited for %s; the output topic has %s' % (what, panes))


def test_early_on_time_and_late_panes_from_kafka(job_server, broker, tmp_path):
  source, sink = unique_topic('trigger-in'), unique_topic('trigger-out')
  create_topic(broker, source, 1)
  create_topic(broker, sink, 1)
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('triggers'), tmp_path / 'state') + [
          '--streaming', '--read_idle_timeout_ms=3600000'
      ]
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | read_from_start(job_server, broker, source,
          key_deserializer=STRING_DESER,
          value_deserializer=STRING_DESER,
          timestamp_policy=ReadFromKafka.create_time_policy)
      | beam.WindowInto(
          window.FixedWindows(60),
          trigger=trigger.AfterWatermark(
              early=trigger.AfterProcessingTime(1),
              late=trigger.AfterCount(1)),
          accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
          allowed_lateness=3600)
      | beam.GroupByKey()
      | beam.ParDo(_Describe()).with_output_types(typing.Tuple[bytes, bytes])
      | write_to(job_server, broker, sink))
  result = p.run()
  try:
    # Two elements of window [0, 60 s): the early trigger fires a second
    # after the first arrived.
    produce(broker, source, [(0, b'k', b'a', BASE + 1_000),
                             (0, b'k', b'b', BASE + 2_000)])
    _wait_for(broker, sink, 1, 'the early pane')
    # An element of the next window moves the watermark past the first one's
    # end: its on-time pane (accumulating, nothing new since the early one).
    produce(broker, source, [(0, b'k', b'c', BASE + 61_000)])
    _wait_for(broker, sink, 3, 'the on-time pane and the second window\'s early pane')
    # A late element: the late trigger fires on it.
    produce(broker, source, [(0, b'k', b'd', BASE + 3_000)])
    panes = _wait_for(broker, sink, 4, 'the late pane')
  finally:
    result.cancel()
    # Beam's client raises for any end but DONE; the state tells what happened.
    with pytest.raises(RuntimeError, match='CANCELLED'):
      result.wait_until_finish()
  assert result.state == PipelineState.CANCELLED
  first = [p for p in panes if p['window'] == 0]
  assert first == [
      {'window': 0, 'index': 0, 'on_time_index': -1, 'timing': 'EARLY',
       'last': False, 'values': ['a', 'b']},
      {'window': 0, 'index': 1, 'on_time_index': 0, 'timing': 'ON_TIME',
       'last': False, 'values': ['a', 'b']},
      {'window': 0, 'index': 2, 'on_time_index': 1, 'timing': 'LATE',
       'last': False, 'values': ['a', 'b', 'd']},
  ], panes
  second = [p for p in panes if p['window'] == 60_000]
  assert second == [
      {'window': 60_000, 'index': 0, 'on_time_index': -1, 'timing': 'EARLY',
       'last': False, 'values': ['c']},
  ], panes
