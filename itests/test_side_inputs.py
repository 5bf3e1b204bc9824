"""Side inputs in a streaming pipeline on the real broker: every task reads
the whole side input, and a main-input element waits until the side-input
window it reads is complete, so it sees all of it (as in batch)."""

import collections

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import window

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import unique_topic

BASE = 1_700_000_000_000  # ms, a multiple of 10 s in the past
SIDE_PER_WINDOW = 1000


def _window_of(ts):
  return (ts - BASE) // 10_000


def test_main_elements_wait_for_their_whole_side_window(
    job_server, broker, tmp_path, collector):
  main, side = unique_topic('main'), unique_topic('side')
  create_topic(broker, main, 2)
  create_topic(broker, side, 2)
  # Partition p holds window p's records, in both topics. The side input is
  # much larger and read in small bundles, so without waiting a main element
  # would see only part of its window.
  side_records = [(i % 2, None, b'%d' % i, BASE + (i % 2) * 10_000 + 1 + i // 2)
                  for i in range(2 * SIDE_PER_WINDOW)]
  main_records = [(i % 2, None, b'm%d' % i, BASE + (i % 2) * 10_000 + 5)
                  for i in range(10)]
  produce(broker, main, main_records)
  produce(broker, side, side_records)

  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('side'), tmp_path / 'state') + [
          '--streaming', '--max_bundle_size=20', '--internal_parallelism=2']
  p = beam.Pipeline(options=PipelineOptions(args))
  side_values = (
      p
      | 'ReadSide' >> read_from_start(job_server, broker, side,
          timestamp_policy=ReadFromKafka.create_time_policy,
          max_num_records=len(side_records))
      | 'SideValue' >> beam.Map(lambda kv: int(kv[1]))
      | 'SideWindows' >> beam.WindowInto(window.FixedWindows(10)))
  _ = (
      p
      | 'ReadMain' >> read_from_start(job_server, broker, main,
          timestamp_policy=ReadFromKafka.create_time_policy,
          max_num_records=len(main_records))
      | 'MainValue' >> beam.Map(lambda kv: kv[1].decode())
      | 'MainWindows' >> beam.WindowInto(window.FixedWindows(10))
      | 'Join' >> beam.Map(lambda m, s: '%s:%d:%d' % (m, len(s), sum(s)),
                           beam.pvalue.AsList(side_values))
      | beam.Map(collector.recorder()))
  assert p.run().wait_until_finish() == PipelineState.DONE

  sums = collections.Counter()
  for _, _, value, ts in side_records:
    sums[_window_of(ts)] += int(value)
  want = sorted('m%d:%d:%d' % (i, SIDE_PER_WINDOW, sums[i % 2]) for i in range(10))
  assert sorted(collector.lines()) == want


def test_a_periodic_impulse_refreshes_a_side_input_each_element_sees_its_time(
    job_server, broker, tmp_path, collector):
  """Beam's pattern for a slowly changing side input in streaming: a
  PeriodicImpulse (a splittable DoFn that checkpoints until its next firing
  and moves the watermark as it fires) windowed like the main input. Each
  main element read from Kafka waits for, and sees, the side value of its
  own window."""
  import time as _time
  from apache_beam.transforms.periodicsequence import PeriodicImpulse
  interval = 2
  start = (int(_time.time()) // interval + 1) * interval
  firings = 6
  main = unique_topic('main')
  create_topic(broker, main, 2)
  main_records = [(k % 2, None, b'%d' % k, (start + k) * 1000 + 500)
                  for k in range(firings * interval)]
  produce(broker, main, main_records)

  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('periodic'), tmp_path / 'state') + [
          '--streaming', '--internal_parallelism=2']
  p = beam.Pipeline(options=PipelineOptions(args))
  side = (
      p
      | PeriodicImpulse(start_timestamp=start,
                        stop_timestamp=start + firings * interval,
                        fire_interval=interval,
                        apply_windowing=True)
      | 'SideValue' >> beam.Map(lambda ts: int(float(ts))))
  _ = (
      p
      | 'ReadMain' >> read_from_start(job_server, broker, main,
          timestamp_policy=ReadFromKafka.create_time_policy,
          max_num_records=len(main_records))
      | 'MainValue' >> beam.Map(lambda kv: int(kv[1]))
      | 'MainWindows' >> beam.WindowInto(window.FixedWindows(interval))
      | 'Join' >> beam.Map(lambda k, s: '%d:%d' % (k, s),
                           beam.pvalue.AsSingleton(side))
      | beam.Map(collector.recorder()))
  assert p.run().wait_until_finish() == PipelineState.DONE

  want = sorted('%d:%d' % (k, start + k // interval * interval)
                for k in range(firings * interval))
  assert sorted(collector.lines()) == want
