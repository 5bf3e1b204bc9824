"""Under exactly_once a long bundle's outputs are written while it runs,
inside its transaction. A bundle that fails after such writes leaves none
of them behind: the run fails, the rerun of the same pipeline resumes the
application from its last commit and redoes the bundle, and every key's
count is exact."""

import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args

SEEDS = 2
# ~120 bytes per element: a seed's 100k elements are ~12 MB, past the
# Python SDK's 10 MB output flush, so part of them reaches the runner (and
# is written) before the seed's element fails.
PER_SEED = 100_000
KEYS = 50
PAD = b'x' * 100


def _generate(marker):
  def generate(seed):
    for i in range(seed * PER_SEED, (seed + 1) * PER_SEED):
      yield i % KEYS, PAD
    if not marker.exists():
      marker.touch()
      # The flushed outputs travel on the data stream, the failure on the
      # control stream: this lets the outputs arrive first.
      time.sleep(1)
      raise ValueError('failing once after the outputs')
  return generate


def _pipeline(p, marker, collector):
  _ = (
      p
      | beam.Create(list(range(SEEDS)))
      | 'Generate' >> beam.FlatMap(_generate(marker))
      | 'Group' >> beam.GroupByKey()
      | 'Size' >> beam.MapTuple(lambda k, vs: '%d=%d' % (k, sum(1 for _ in vs)))
      | 'Record' >> beam.Map(collector.recorder()))


def test_a_bundle_that_fails_after_writing_while_it_ran_leaves_nothing_behind(
    job_server, broker, tmp_path, collector):
  app, state, marker = make_app_id('early-writes'), tmp_path / 'state', tmp_path / 'failed-once'
  args = portable_args(job_server) + kafka_args(broker, app, state) + ['--processing_guarantee=exactly_once']

  p = beam.Pipeline(options=PipelineOptions(args))
  _pipeline(p, marker, collector)
  first = p.run()
  with pytest.raises(RuntimeError, match='failing once after the outputs'):
    first.wait_until_finish()
  assert first.state == PipelineState.FAILED
  assert marker.exists() and not collector.exists()

  p = beam.Pipeline(options=PipelineOptions(args))
  _pipeline(p, marker, collector)
  assert p.run().wait_until_finish() == PipelineState.DONE
  expected = ['%d=%d' % (k, SEEDS * PER_SEED // KEYS) for k in range(KEYS)]
  assert sorted(collector.lines()) == sorted(expected)
