"""State API reads of several MiB, larger than tonic's default 4 MiB
message limit, which the State service kept before it took the Fn API's
256 MiB: side inputs and bags come back whole."""

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.userstate import BagStateSpec
from apache_beam.coders import StrUtf8Coder

from conftest import kafka_args
from conftest import portable_args

# 5,000 values of 1 KiB: about 5 MiB.
VALUES = ['%05d' % i + 'x' * 1019 for i in range(5000)]


def test_a_side_input_of_several_mib_is_read_whole(
    job_server, broker, app_id, collector):
  options = PipelineOptions(
      portable_args(job_server) + kafka_args(broker, app_id))
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
