"""Custom WindowFns on the real broker and binary, streaming from Kafka: a
window type the runner cannot read fires when the watermark passes the end
the SDK tells for it, and a merging WindowFn of the user's own merges across
batches. Both run in the SDK (map_windows, merge_windows) for the runner."""

import json
import time
import typing

import pytest

import apache_beam as beam
from apache_beam.coders import coders
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.options.pipeline_options import PipelineOptions
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
BASE = 1_699_999_980_000  # a multiple of 60 s, in the past


class _ColorWindow(window.BoundedWindow):
  """60 s windows, one per color: the runner cannot read this type."""
  def __init__(self, end, color):
    super().__init__(end)
    self.color = color

  def __hash__(self):
    return hash((self.end, self.color))

  def __eq__(self, other):
    return isinstance(other, _ColorWindow) and (
        self.end, self.color) == (other.end, other.color)


class _ColorWindowCoder(beam.coders.Coder):
  _parts = beam.coders.TupleCoder(
      [beam.coders.TimestampCoder(), beam.coders.StrUtf8Coder()])

  def encode(self, w):
    return self._parts.encode((w.end, w.color))

  def decode(self, encoded):
    return _ColorWindow(*self._parts.decode(encoded))

  def is_deterministic(self):
    return True


class _ColorWindows(window.NonMergingWindowFn):
  """Red for even seconds, blue for odd ones, 60 s long."""
  def assign(self, context):
    ts = context.timestamp
    color = 'blue' if ts.micros // 1_000_000 % 2 else 'red'
    return [_ColorWindow(ts - ts % 60 + 60, color)]

  def get_window_coder(self):
    return _ColorWindowCoder()


class _MergeEvens(window.WindowFn):
  """10 s windows from each element; those starting on an even second merge
  (Beam's CustomMergingWindowFn test, in seconds)."""
  def assign(self, context):
    return [window.IntervalWindow(context.timestamp, context.timestamp + 10)]

  def merge(self, merge_context):
    evens = [w for w in merge_context.windows if w.start.micros // 1_000_000 % 2 == 0]
    if evens:
      merge_context.merge(
          evens,
          window.IntervalWindow(
              min(w.start for w in evens), max(w.end for w in evens)))

  def get_window_coder(self):
    return coders.IntervalWindowCoder()


class _Describe(beam.DoFn):
  def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
    key, values = kv
    end = int(w.end.micros // 1000) - BASE
    yield (key.encode(), json.dumps({
        'end': end,
        'start': (int(w.start.micros // 1000) - BASE
                  if isinstance(w, window.IntervalWindow) else None),
        'color': getattr(w, 'color', None),
        'on_time': pane.timing == 1,
        'values': sorted(values),
    }).encode())


def _run(job_server, broker, tmp_path, name, window_fn, batches):
  """Runs source → window_fn → GroupByKey → sink, producing `batches` one
  after another (each (values at seconds after BASE)); returns the panes
  once as many as the last batch's `expect` arrived."""
  source, sink = unique_topic(name + '-in'), unique_topic(name + '-out')
  create_topic(broker, source, 1)
  create_topic(broker, sink, 1)
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id(name), tmp_path / 'state') + [
          '--streaming', '--read_idle_timeout_ms=3600000'
      ]
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | read_from_start(job_server, broker, source,
          key_deserializer=STRING_DESER,
          value_deserializer=STRING_DESER,
          timestamp_policy=ReadFromKafka.create_time_policy)
      | beam.WindowInto(window_fn)
      | beam.GroupByKey()
      | beam.ParDo(_Describe()).with_output_types(typing.Tuple[bytes, bytes])
      | write_to(job_server, broker, sink))
  result = p.run()
  try:
    for seconds, expect in batches:
      produce(broker, source, [
          (0, b'k', str(s).encode(), BASE + s * 1000) for s in seconds])
      deadline = time.monotonic() + 60
      panes = []
      while time.monotonic() < deadline and len(panes) < expect:
        panes = [json.loads(v) for _, _, v in
                 read_committed(broker, sink, expected=expect, timeout=5, settle=0.5)]
      assert len(panes) >= expect, (expect, panes)
      if not expect:
        time.sleep(1)  # the next batch comes in a bundle of its own
  finally:
    result.cancel()
    with pytest.raises(RuntimeError, match='CANCELLED'):
      result.wait_until_finish()
  return sorted(panes, key=lambda p: (p['end'], p['color'] or ''))


def test_a_window_type_the_runner_cannot_read_fires_when_the_watermark_passes_its_end(
    job_server, broker, tmp_path):
  panes = _run(job_server, broker, tmp_path, 'color-windows', _ColorWindows(), [
      # Three elements of the first minute, two colors: nothing fires yet.
      ([1, 2, 4], 0),
      # One in the next minute moves the watermark past the first minute's
      # end: both of its windows fire, on time, while the job runs.
      ([61], 2),
  ])
  assert panes == [
      {'end': 60_000, 'start': None, 'color': 'blue', 'on_time': True, 'values': ['1']},
      {'end': 60_000, 'start': None, 'color': 'red', 'on_time': True, 'values': ['2', '4']},
  ], panes


def test_a_merging_window_fn_of_the_users_merges_across_batches(
    job_server, broker, tmp_path):
  panes = _run(job_server, broker, tmp_path, 'merge-evens', _MergeEvens(), [
      ([2, 5], 0),
      # 4 merges with 2 (both even) in a later batch; 5 stays alone.
      ([4], 0),
      # Past every window's end (odd: it merges with nothing).
      ([101], 2),
  ])
  assert panes == [
      {'end': 14_000, 'start': 2_000, 'color': None, 'on_time': True, 'values': ['2', '4']},
      {'end': 15_000, 'start': 5_000, 'color': None, 'on_time': True, 'values': ['5']},
  ], panes


class _Minutes(window.NonMergingWindowFn):
  """Minute windows the runner cannot evaluate (a WindowFn of the user's)."""
  def assign(self, context):
    start = context.timestamp - context.timestamp % 60
    return [window.IntervalWindow(start, start + 60)]

  def get_window_coder(self):
    return coders.IntervalWindowCoder()


def test_a_side_input_of_a_custom_window_fn_is_ready_once_its_mapped_window_ends(
    job_server, broker, tmp_path):
  """The side input never ends (streaming): the main pane of minute 0 goes
  out once the side watermark passes the side window the SDK maps it to."""
  main, side, sink = (unique_topic('side-main-in'), unique_topic('side-in'),
                      unique_topic('side-out'))
  for t in (main, side, sink):
    create_topic(broker, t, 1)
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('custom-side'), tmp_path / 'state') + [
          '--streaming', '--read_idle_timeout_ms=3600000'
      ]
  p = beam.Pipeline(options=PipelineOptions(args))

  def read(topic, label):
    return p | label >> read_from_start(job_server, broker, topic,
        key_deserializer=STRING_DESER,
        value_deserializer=STRING_DESER,
        timestamp_policy=ReadFromKafka.create_time_policy)

  side_values = (
      read(side, 'ReadSide')
      | 'SideValue' >> beam.Map(lambda kv: kv[1])
      | 'SideMinutes' >> beam.WindowInto(_Minutes()))
  _ = (
      read(main, 'ReadMain')
      | 'MainMinutes' >> beam.WindowInto(window.FixedWindows(60))
      | beam.GroupByKey()
      | beam.Map(lambda kv, s: (kv[0].encode(), json.dumps(
          {'values': sorted(kv[1]), 'side': sorted(s)}).encode()),
                 beam.pvalue.AsList(side_values)).with_output_types(
                     typing.Tuple[bytes, bytes])
      | write_to(job_server, broker, sink))
  result = p.run()
  try:
    produce(broker, side, [(0, b's', b's0', BASE + 10_000)])
    # Minute 0's pane fires once the main watermark passes 60 s, and waits
    # for the side input's minute 0.
    produce(broker, main, [(0, b'k', b'a', BASE + 5_000),
                           (0, b'k', b'b', BASE + 65_000)])
    time.sleep(2)
    early = read_committed(broker, sink, expected=1, timeout=3, settle=0)
    produce(broker, side, [(0, b's', b's1', BASE + 70_000)])
    out = read_committed(broker, sink, expected=1, timeout=60, settle=0.5)
  finally:
    result.cancel()
    with pytest.raises(RuntimeError, match='CANCELLED'):
      result.wait_until_finish()
  assert early == [], 'went out before its side window was complete: %s' % early
  assert [json.loads(v) for _, _, v in out] == [{'values': ['a'], 'side': ['s0']}]
