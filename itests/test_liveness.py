"""Every job progresses or ends, and a cancel ends it: a processing-time
deadline its trigger does not fire on leaves the job live (it looped on the
task's thread, which hung the job and its cancel), a Flatten of nothing used
as a side input runs to DONE (it got no task, and its readers waited
forever), and a job whose user code never returns is named by the watchdog
and CANCELLED within the runner's grace of its cancel."""

import os
import threading
import time
import typing

import grpc

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import trigger
from apache_beam.transforms import window

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import unique_topic

# The runner reports a cancelled job CANCELLED within 8 s whatever it is
# doing; the margin is for a loaded machine, not for a hang.
CANCEL_BOUND_S = 30


def _cancel_within(result, bound):
  """Cancels and returns how long the job took to reach a final state."""
  began = time.monotonic()
  result.cancel()
  while time.monotonic() - began < bound:
    if result.state in (PipelineState.CANCELLED, PipelineState.DONE, PipelineState.FAILED):
      break
    time.sleep(0.2)
  assert result.state == PipelineState.CANCELLED, result.state
  return time.monotonic() - began


def _first_message(result, text, timeout):
  """The first job message containing `text` (through the Job API's message
  stream, as a client reads it), or None after `timeout` s."""
  found = []

  def read():
    stream = result._job_service.GetMessageStream(
        beam_job_api_pb2.JobMessagesRequest(job_id=result._job_id), timeout=timeout)
    try:
      for m in stream:
        if m.HasField('message_response') and text in m.message_response.message_text:
          found.append(m.message_response.message_text)
          return
    except grpc.RpcError:
      pass  # the deadline passed

  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  reader.join(timeout + 5)
  return found[0] if found else None


def _wait_for_lines(collector, count, timeout):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline and len(collector.lines()) < count:
    time.sleep(0.3)
  return collector.lines()


def test_a_passed_deadline_that_does_not_fire_leaves_the_job_live(
    job_server, broker, tmp_path, collector):
  source = unique_topic('live-in')
  create_topic(broker, source, 1)
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('live-pt'), tmp_path / 'state') + ['--streaming']
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | read_from_start(job_server, broker, source)
      | beam.Map(lambda kv: tuple(kv[1].decode().split('|'))).with_output_types(typing.Tuple[str, str])
      | beam.WindowInto(
          window.GlobalWindows(),
          # The deadline passes long before the third value comes.
          trigger=trigger.Repeatedly(trigger.AfterAll(trigger.AfterProcessingTime(1), trigger.AfterCount(3))),
          accumulation_mode=trigger.AccumulationMode.DISCARDING)
      | beam.GroupByKey()
      | beam.MapTuple(lambda k, vs: '%s=%s' % (k, ','.join(sorted(vs))))
      | beam.Map(collector.recorder()))
  result = p.run()
  try:
    produce(broker, source, [(0, None, b'k|a', None), (0, None, b'k|b', None)])
    time.sleep(4)
    produce(broker, source, [(0, None, b'k|c', None)])
    assert _wait_for_lines(collector, 1, 90) == ['k=a,b,c']
  finally:
    took = _cancel_within(result, CANCEL_BOUND_S)
  assert took < CANCEL_BOUND_S


def test_a_flatten_of_nothing_as_a_side_input_runs_to_done(
    job_server, broker, tmp_path, collector):
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('empty-flatten'), tmp_path / 'state')
  p = beam.Pipeline(options=PipelineOptions(args))
  nothing = () | 'Nothing' >> beam.Flatten(pipeline=p)
  _ = (
      p
      | beam.Create(['a', 'b'])
      | beam.Map(lambda x, side: '%s:%d' % (x, len(side)), side=beam.pvalue.AsList(nothing))
      | beam.Map(collector.recorder()))
  assert p.run().wait_until_finish() == PipelineState.DONE
  assert sorted(collector.lines()) == ['a:0', 'b:0']


def test_a_job_whose_user_code_never_returns_is_cancelled(
    job_server, broker, tmp_path):
  started, stop = tmp_path / 'started', tmp_path / 'stop'

  def stuck(x, started=str(started), stop=str(stop)):
    open(started, 'w').close()
    deadline = time.monotonic() + 120
    while not os.path.exists(stop) and time.monotonic() < deadline:
      time.sleep(0.1)
    return x

  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('stuck'), tmp_path / 'state') + ['--stall_warning_ms=2000']
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = p | beam.Create([1]) | beam.Map(stuck)
  result = p.run()
  try:
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
      time.sleep(0.2)
    assert started.exists(), 'the DoFn never ran'
    # The watchdog names the task whose bundle does not return.
    said = _first_message(result, 'has made no progress', timeout=60)
    assert said and 'in a bundle that has not finished' in said, said
    _cancel_within(result, CANCEL_BOUND_S)
  finally:
    stop.touch()
