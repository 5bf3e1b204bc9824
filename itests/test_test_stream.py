"""TestStream on the real broker and binary: events replayed one step at a
time, each released once the pipeline is quiescent, with processing time on
the test clock."""

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
from apache_beam.transforms import trigger
from apache_beam.transforms import userstate
from apache_beam.transforms import window
from apache_beam.utils import timestamp

import pytest

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args


def _pipeline(job_server, broker, tmp_path, parallelism=1):
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('teststream'), tmp_path / 'state') + [
          '--internal_parallelism=%d' % parallelism
      ]
  options = PipelineOptions(args)
  options.view_as(StandardOptions).streaming = True
  return beam.Pipeline(options=options)


@pytest.mark.parametrize('parallelism', [1, 4])
def test_processing_time_timers_run_on_the_test_clock(
    job_server, broker, tmp_path, parallelism):
  """A processing-time timer set 30 s ahead fires only once the TestStream
  advanced processing time past it, whatever the wall clock does, with the
  state of every element before."""
  timer_spec = userstate.TimerSpec('flush', userstate.TimeDomain.REAL_TIME)
  bag_spec = userstate.BagStateSpec('seen', beam.coders.VarIntCoder())

  class BufferUntilTimer(beam.DoFn):
    def process(
        self,
        kv,
        timer=beam.DoFn.TimerParam(timer_spec),
        seen=beam.DoFn.StateParam(bag_spec)):
      seen.add(kv[1])
      timer.set(timestamp.Timestamp.now() + 30)

    @userstate.on_timer(timer_spec)
    def flush(self, key=beam.DoFn.KeyParam, seen=beam.DoFn.StateParam(bag_spec)):
      yield key, sorted(seen.read())
      seen.clear()

  stream = (
      test_stream.TestStream()
      .add_elements([('k', 1)])
      .advance_processing_time(10)  # 20 s short of the timer
      .add_elements([('k', 2)])  # moves the timer another 10 s on
      .advance_processing_time(60)  # past it: one firing with both
      .add_elements([('k', 3)])
      .advance_watermark_to_infinity())
  with _pipeline(job_server, broker, tmp_path, parallelism) as p:
    flushed = p | stream | beam.ParDo(BufferUntilTimer())
    # 3 arrives after the firing; the end of input fires its timer.
    assert_that(flushed, equal_to([('k', [1, 2]), ('k', [3])]))


def test_processing_time_late_data_and_early_panes(job_server, broker, tmp_path):
  """Early panes by the test clock, the on-time pane, a late pane, and late
  data past the allowed lateness dropped (Beam's expected output)."""
  stream = (
      test_stream.TestStream()
      .advance_watermark_to(0)
      .add_elements([window.TimestampedValue(('k', 1), 1),
                     window.TimestampedValue(('k', 2), 2)])
      .advance_processing_time(10)  # early pane: [1, 2]
      .add_elements([window.TimestampedValue(('k', 3), 3)])
      .advance_watermark_to(20)  # on time: [1, 2, 3]
      .add_elements([window.TimestampedValue(('k', 4), 4)])  # late: [1, 2, 3, 4]
      .advance_watermark_to(100)  # past the allowed lateness
      .add_elements([window.TimestampedValue(('k', 5), 5)])  # dropped
      .advance_watermark_to_infinity())

  class Describe(beam.DoFn):
    def process(self, kv, pane=beam.DoFn.PaneInfoParam):
      yield (pane.index, pane.timing, sorted(kv[1]))

  with _pipeline(job_server, broker, tmp_path) as p:
    panes = (
        p
        | stream
        | beam.WindowInto(
            window.FixedWindows(10),
            trigger=trigger.AfterWatermark(
                early=trigger.AfterProcessingTime(5), late=trigger.AfterCount(1)),
            accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
            allowed_lateness=50)
        | beam.GroupByKey()
        | beam.ParDo(Describe()))
    assert_that(panes, equal_to([
        (0, 0, [1, 2]),  # EARLY
        (1, 1, [1, 2, 3]),  # ON_TIME
        (2, 2, [1, 2, 3, 4]),  # LATE
    ]))


def test_two_test_streams_take_turns(job_server, broker, tmp_path):
  first = (
      test_stream.TestStream()
      .add_elements([window.TimestampedValue('a1', 1)])
      .advance_watermark_to(10)
      .add_elements([window.TimestampedValue('a2', 11)]))
  second = test_stream.TestStream().add_elements([window.TimestampedValue('b1', 2)])
  with _pipeline(job_server, broker, tmp_path) as p:
    grouped = (
        (p | 'First' >> first, p | 'Second' >> second)
        | beam.Flatten()
        | beam.Map(lambda x: ('k', x))
        | beam.WindowInto(window.FixedWindows(5))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: (k, sorted(vs))))
    assert_that(grouped, equal_to([('k', ['a1', 'b1']), ('k', ['a2'])]))
