"""State API reads of several MiB. Side inputs come in pages of whole
elements (1 MiB, continuation tokens), which the SDK reads one after
another, with its state cache on or off; a bag comes back whole, larger than
tonic's default 4 MiB message limit that the State service kept before."""

import pytest

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.userstate import BagStateSpec
from apache_beam.coders import StrUtf8Coder

from conftest import kafka_args
from conftest import portable_args

# 5,000 values of 1 KiB: about 5 MiB.
VALUES = ['%05d' % i + 'x' * 1019 for i in range(5000)]


@pytest.mark.parametrize('cache', [[], ['--max_cache_memory_usage_mb=100']])
def test_a_side_input_of_several_pages_is_read_whole(
    job_server, broker, app_id, collector, cache):
  options = PipelineOptions(
      portable_args(job_server) + kafka_args(broker, app_id) + cache)
  with beam.Pipeline(options=options) as p:
    side = p | 'Side' >> beam.Create(VALUES)
    _ = (
        p
        | 'Main' >> beam.Create([0])
        | beam.Map(lambda _, values: '%d %d %s %s' % (
            len(values), sum(len(v) for v in values), min(values)[:5],
            max(values)[:5]), values=beam.pvalue.AsList(side))
        | beam.Map(collector.recorder()))
  assert collector.lines() == ['5000 5120000 00000 04999']


def test_a_multimap_side_input_of_several_pages_is_read_whole(
    job_server, broker, app_id, collector):
  options = PipelineOptions(
      portable_args(job_server) + kafka_args(broker, app_id))
  with beam.Pipeline(options=options) as p:
    # One key with 3 MiB of values, and 3,000 keys besides.
    side = p | 'Side' >> beam.Create(
        [('big', v) for v in VALUES[:3000]] +
        [('k%05d' % i, 'v') for i in range(3000)])
    _ = (
        p
        | 'Main' >> beam.Create([0])
        | beam.Map(lambda _, m: '%d %d %d' % (
            len(list(m['k02999'])), len(list(m['big'])), len(set(m['big']))),
                   m=beam.pvalue.AsMultiMap(side))
        | beam.Map(collector.recorder()))
  assert collector.lines() == ['1 3000 3000']


class _Hoard(beam.DoFn):
  """Appends each value to one key's bag and reports what the bag holds:
  bundles of one element, so every read is a read of state the runner
  holds."""
  BAG = BagStateSpec('bag', StrUtf8Coder())

  def process(self, kv, bag=beam.DoFn.StateParam(BAG)):
    bag.add(kv[1])
    held = list(bag.read())
    yield len(held), len(set(held)), sum(len(v) for v in held)


def test_a_bag_of_several_mib_is_read_whole(
    job_server, broker, app_id, collector):
  # 80 values of 64 KiB: the last reads hold 5 MiB.
  values = ['%05d' % i + 'x' * (65536 - 5) for i in range(80)]
  options = PipelineOptions(
      portable_args(job_server) + kafka_args(broker, app_id) +
      ['--max_bundle_size=1'])
  with beam.Pipeline(options=options) as p:
    _ = (
        p
        | beam.Create([('k', v) for v in values])
        | beam.ParDo(_Hoard())
        | beam.Map(collector.recorder()))
  reports = sorted(eval(line) for line in collector.lines())
  # The n-th read sees exactly the n values added so far, all distinct.
  assert reports == [(n, n, n * 65536) for n in range(1, len(values) + 1)]
