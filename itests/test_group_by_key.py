"""GroupByKey through shuffle topics on the real broker and binary."""

import pytest

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import window

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args


def _run(job_server, broker, tmp_path, build, extra=()):
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('gbk'), tmp_path / 'state') + list(extra)
  p = beam.Pipeline(options=PipelineOptions(args))
  build(p)
  result = p.run()
  assert result.wait_until_finish() == PipelineState.DONE


@pytest.mark.parametrize('parallelism', [1, 4])
@pytest.mark.parametrize('streaming', [False, True])
def test_grouping_is_the_same_for_any_parallelism(
    job_server, broker, tmp_path, collector, parallelism, streaming):
  def build(p):
    _ = (
        p
        | beam.Create([(i % 7, i) for i in range(200)])
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: '%d:%d:%d' % (k, len(vs), sum(vs)))
        | beam.Map(collector.recorder()))

  extra = ['--internal_parallelism=%d' % parallelism]
  if streaming:
    extra.append('--streaming')
  _run(job_server, broker, tmp_path, build, extra)
  expected = sorted(
      '%d:%d:%d' % (k, len(vs), sum(vs))
      for k, vs in ((k, [i for i in range(200) if i % 7 == k]) for k in range(7)))
  assert sorted(collector.lines()) == expected


def test_fixed_windows_group_per_window(job_server, broker, tmp_path, collector):
  def build(p):
    _ = (
        p
        | beam.Create([('k', 1, 1), ('k', 2, 4), ('k', 3, 12), ('j', 4, 13)])
        | beam.Map(lambda e: window.TimestampedValue((e[0], e[1]), e[2]))
        | beam.WindowInto(window.FixedWindows(10))
        | beam.CombinePerKey(sum)
        | beam.ParDo(_WithWindow())
        | beam.Map(collector.recorder()))

  _run(job_server, broker, tmp_path, build, ['--internal_parallelism=2'])
  assert sorted(collector.lines()) == ['j@10-20=4', 'k@0-10=3', 'k@10-20=3']


def test_session_windows_merge(job_server, broker, tmp_path, collector):
  def build(p):
    _ = (
        p
        | beam.Create([('k', 1), ('k', 5), ('k', 30), ('j', 2)])
        | beam.Map(lambda e: window.TimestampedValue(e, e[1]))
        | beam.WindowInto(window.Sessions(10))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: (k, sorted(vs)))
        | beam.ParDo(_WithWindow())
        | beam.Map(collector.recorder()))

  _run(job_server, broker, tmp_path, build)
  assert sorted(collector.lines()) == [
      "j@2-12=[2]", "k@1-15=[1, 5]", "k@30-40=[30]"]


class _WithWindow(beam.DoFn):
  def process(self, kv, w=beam.DoFn.WindowParam):
    yield '%s@%d-%d=%s' % (kv[0], int(w.start), int(w.end), kv[1])


@pytest.mark.parametrize('streaming', [False, True])
def test_combine_globally_with_fanout(job_server, broker, tmp_path, collector, streaming):
  # The fanout's Flatten joins both sides of a GroupByKey: planned once as a
  # sub-topology reading its own shuffle topic, it never finished.
  def build(p):
    _ = (
        p
        | beam.Create(list(range(50)))
        | beam.CombineGlobally(sum).with_fanout(fanout=3)
        | beam.Map(collector.recorder()))

  _run(job_server, broker, tmp_path, build,
       ['--internal_parallelism=2'] + (['--streaming'] if streaming else []))
  assert collector.lines() == [str(sum(range(50)))]


@pytest.mark.parametrize('streaming', [False, True])
def test_combine_per_key_with_hot_key_fanout(job_server, broker, tmp_path, collector, streaming):
  def build(p):
    _ = (
        p
        | beam.Create([('hot' if i % 4 else 'k%d' % (i % 3), i) for i in range(120)])
        | beam.CombinePerKey(sum).with_hot_key_fanout(lambda key: 4 if key == 'hot' else 0)
        | beam.MapTuple(lambda k, s: '%s=%d' % (k, s))
        | beam.Map(collector.recorder()))

  _run(job_server, broker, tmp_path, build,
       ['--internal_parallelism=2'] + (['--streaming'] if streaming else []))
  sums = {}
  for i in range(120):
    k = 'hot' if i % 4 else 'k%d' % (i % 3)
    sums[k] = sums.get(k, 0) + i
  assert sorted(collector.lines()) == sorted('%s=%d' % kv for kv in sums.items())
