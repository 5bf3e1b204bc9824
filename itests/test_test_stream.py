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
def test_watermark_timers_fire_as_the_test_stream_moves_event_time(
    job_server, broker, tmp_path, parallelism):
  timer_spec = userstate.TimerSpec('timer', userstate.TimeDomain.WATERMARK)

  class TimerDoFn(beam.DoFn):
    def process(self, element, timer=beam.DoFn.TimerParam(timer_spec)):
      unused_key, ts = element
      timer.set(ts)
      timer.set(2 * ts)

    @userstate.on_timer(timer_spec)
    def process_timer(self, key=beam.DoFn.KeyParam):
      yield key

  stream = (
      test_stream.TestStream().add_elements([('k1', 10)]).advance_watermark_to(100)
      .add_elements([('k2', 100)]).advance_watermark_to(1000))
  with _pipeline(job_server, broker, tmp_path, parallelism) as p:
    fired = (
        p
        | stream
        | beam.ParDo(TimerDoFn())
        | beam.Map(lambda k, ts=beam.DoFn.TimestampParam: (k, ts.micros // 1000000)))
    assert_that(fired, equal_to([('k1', 20), ('k2', 200)]))


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
