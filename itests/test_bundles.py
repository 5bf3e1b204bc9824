"""Bundles close on max_bundle_time_ms even when nothing else closes them."""

import threading
import time

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

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
