"""A batch GroupByKey whose panes pass group_by_key_memory_mb keeps them in
the task's state store and reads them back when the window closes: every
key's group is whole and fires once, also when the job failed half way and
its rerun restores the evicted panes from the changelog."""

import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args

SEEDS = 6
KEYS = 10_000
PER_KEY = 2  # values per key and seed

MOVED = 'moved to the state store'
RESTORED = 'restored panes kept in the state store'


def _generate(done_dir, fail):
  def generate(seed):
    # The last seed of the first run fails, once the others committed and
    # the GroupByKey took (and evicted) their values.
    if fail and len(list(done_dir.iterdir())) == SEEDS - 1:
      time.sleep(3)
      raise ValueError('failing once after the other seeds')
    for k in range(KEYS):
      for i in range(PER_KEY):
        yield k, seed * 1000 + i
    (done_dir / str(seed)).touch()
    # Longer than --max_bundle_time_ms: the bundle is split after a seed or
    # two, so the seeds' outputs commit a few at a time.
    time.sleep(0.3)
  return generate


def _pipeline(p, done_dir, fail, collector):
  _ = (
      p
      | beam.Create(list(range(SEEDS)))
      | beam.Reshuffle()
      | 'Generate' >> beam.FlatMap(_generate(done_dir, fail))
      | 'Group' >> beam.GroupByKey()
      | 'Size' >> beam.MapTuple(lambda k, vs: '%d=%d:%d' % (k, len(list(vs)), sum(vs)))
      | 'Record' >> beam.Map(collector.recorder()))


def _expected():
  total = sum(seed * 1000 + i for seed in range(SEEDS) for i in range(PER_KEY))
  return sorted('%d=%d:%d' % (k, SEEDS * PER_KEY, total) for k in range(KEYS))


def _args(job_server, broker, tmp_path, app):
  return portable_args(job_server) + kafka_args(broker, app, tmp_path / 'state') + [
      '--processing_guarantee=exactly_once', '--group_by_key_memory_mb=1', '--max_bundle_time_ms=200']


def test_panes_past_the_memory_bound_fire_whole_from_the_store(job_server, broker, tmp_path, collector):
  done = tmp_path / 'done'
  done.mkdir()
  start = len(job_server.log_text())
  p = beam.Pipeline(options=PipelineOptions(_args(job_server, broker, tmp_path, make_app_id('spill'))))
  _pipeline(p, done, False, collector)
  assert p.run().wait_until_finish() == PipelineState.DONE
  assert MOVED in job_server.log_text(start), 'the panes never left memory'
  assert sorted(collector.lines()) == _expected()


def test_a_rerun_restores_the_panes_kept_in_the_store(job_server, broker, tmp_path, collector):
  done = tmp_path / 'done'
  done.mkdir()
  args = _args(job_server, broker, tmp_path, make_app_id('spill-rerun'))
  start = len(job_server.log_text())
  p = beam.Pipeline(options=PipelineOptions(args))
  _pipeline(p, done, True, collector)
  first = p.run()
  with pytest.raises(RuntimeError, match='failing once after the other seeds'):
    first.wait_until_finish()
  assert MOVED in job_server.log_text(start), 'the panes never left memory'
  assert not collector.exists(), 'nothing fires before the input ends'

  rerun = len(job_server.log_text())
  p = beam.Pipeline(options=PipelineOptions(args))
  _pipeline(p, done, False, collector)
  assert p.run().wait_until_finish() == PipelineState.DONE
  assert RESTORED in job_server.log_text(rerun), 'the rerun did not start from the evicted panes'
  assert sorted(collector.lines()) == _expected()
