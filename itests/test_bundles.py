"""Bundles: they close on max_bundle_time_ms even when nothing else closes
them, and none runs without work."""

import threading
import time

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import unique_topic

TRICKLE = 8


class _RecordBundles(beam.DoFn):
  """Writes one line per element and one 'bundle:<n>' line per bundle."""
  def __init__(self, path):
    self._path = path
    self._n = 0

  def start_bundle(self):
    self._n = 0

  def process(self, kv):
    self._n += 1
    with open(self._path, 'a') as f:
      f.write('element:%s\n' % kv[1].decode())
    yield kv

  def finish_bundle(self):
    if self._n:
      with open(self._path, 'a') as f:
        f.write('bundle:%d\n' % self._n)


def test_a_slow_trickle_is_bundled_by_time_without_duplicates(
    job_server, broker, tmp_path):
  source = unique_topic('trickle')
  create_topic(broker, source, 1)
  stamp = 1_600_000_000_000
  path = tmp_path / 'bundles.txt'

  # Nothing but the time bound may close a bundle here: one timestamp for
  # every record (the watermark moves once), no idle advance, commits far
  # apart, and bundles far larger than the input.
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('trickle'), tmp_path / 'state') + [
          '--max_bundle_size=1000',
          '--max_bundle_time_ms=50',
          '--commit_interval_ms=600000',
          '--read_idle_timeout_ms=3600000',
      ]

  def trickle():
    for i in range(TRICKLE):
      produce(broker, source, [(0, None, b'%d' % i, stamp)])
      time.sleep(0.6)

  writer = threading.Thread(target=trickle, daemon=True)
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | read_from_start(
          job_server, broker, source,
          timestamp_policy=ReadFromKafka.create_time_policy,
          max_num_records=TRICKLE)
      | beam.ParDo(_RecordBundles(str(path))))
  writer.start()
  assert p.run().wait_until_finish() == PipelineState.DONE
  writer.join()

  lines = path.read_text().splitlines()
  elements = sorted(l for l in lines if l.startswith('element:'))
  bundles = [int(l.split(':')[1]) for l in lines if l.startswith('bundle:')]
  assert elements == sorted('element:%d' % i for i in range(TRICKLE))
  assert sum(bundles) == TRICKLE
  # Without the time bound the records after the first would share one
  # bundle, closed only when the read ends.
  assert len(bundles) >= TRICKLE // 2, bundles


class _EmitPerBundle(beam.DoFn):
  """Emits, in finish_bundle, how many elements its bundle held (a legal
  Beam pattern), and records every finish_bundle call in a file."""
  def __init__(self, path):
    self._path = path
    self._n = 0

  def start_bundle(self):
    self._n = 0

  def process(self, element):
    self._n += 1

  def finish_bundle(self):
    with open(self._path, 'a') as f:
      f.write('%d\n' % self._n)
    yield WindowedValue(self._n, MIN_TIMESTAMP, [GlobalWindow()])


def test_no_bundle_runs_without_elements(job_server, broker, tmp_path, collector):
  """A DoFn that emits in finish_bundle emits once per bundle of elements:
  the runner runs no bundle without elements, timers or residuals (earlier
  it warmed each harness up with an empty one, running user code with no
  input, and the emitted counts came out with extra zeros)."""
  calls = tmp_path / 'finish_bundle.txt'
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('no-empty'), tmp_path / 'state') + [
          '--sdk_worker_parallelism=2']
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | beam.Create(list(range(40)))
      | beam.Reshuffle()
      | beam.ParDo(_EmitPerBundle(str(calls)))
      | beam.Map(collector.recorder()))
  assert p.run().wait_until_finish() == PipelineState.DONE
  emitted = [int(n) for n in collector.lines()]
  finished = [int(n) for n in calls.read_text().split()]
  assert sum(emitted) == 40, emitted
  assert 0 not in finished, 'a bundle ran with no element: %s' % finished
  assert sorted(emitted) == sorted(finished), (emitted, finished)
