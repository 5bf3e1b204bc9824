"""End-to-end pipelines on a real broker with the real beam-kafka binary."""

import logging
import time
import uuid

import grpc
import pytest

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.coders import StrUtf8Coder
from apache_beam.transforms import userstate

from beam_kafka import runner as beam_kafka_runner
from conftest import kafka_args
from conftest import portable_args

NUM_ELEMENTS = 1500  # more than one default bundle (max_bundle_size=1000)


def _square_line(i):
  return '%d:%d' % (i, i * i)


def _expected_squares():
  return sorted(_square_line(i) for i in range(NUM_ELEMENTS))


def _raised_by_prepare(excinfo):
  """True when the exception came out of the Job API Prepare call."""
  return any(entry.name == 'prepare' for entry in excinfo.traceback)


def _error_text(error):
  if isinstance(error, grpc.RpcError) and hasattr(error, 'details'):
    return '%s %s' % (error.details(), error)
  return str(error)


# a. Impulse -> FlatMap -> Map reaches DONE with exactly the right output.
@pytest.mark.parametrize('submission', ['runner_class', 'portable_endpoint'])
def test_impulse_flatmap_map_done(
    submission, broker, binary, job_server, app_id, collector, tmp_path):
  if submission == 'runner_class':
    # The runner discovers the binary itself and starts its own job server.
    args = ['--runner=beam_kafka.KafkaStreamsRunner']
  else:
    args = portable_args(job_server)
  args += kafka_args(broker, app_id, tmp_path / 'state')

  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | 'Impulse' >> beam.Impulse()
      | 'Numbers' >> beam.FlatMap(lambda _: range(NUM_ELEMENTS))
      | 'Square' >> beam.Map(_square_line)
      | 'Collect' >> beam.Map(collector.recorder()))
  result = p.run()
  final_state = result.wait_until_finish()

  assert final_state == PipelineState.DONE
  assert result.state == PipelineState.DONE
  got = sorted(collector.lines())
  assert len(got) == NUM_ELEMENTS, (
      'expected %d elements exactly once, got %d (%d distinct)' %
      (NUM_ELEMENTS, len(got), len(set(got))))
  assert got == _expected_squares()

  if submission == 'runner_class':
    started = beam_kafka_runner.running_job_servers()
    assert [s.binary for s in started] == [binary], (
        'the runner should run exactly one job server, from %s' % binary)


# A bounded job's DONE comes before its topics are deleted; a run of the same
# application submitted at once must neither lose its topics to that deletion
# nor see the earlier run's state.
def test_a_rerun_right_after_done_runs_whole_again(
    broker, job_server, app_id, collector, tmp_path):
  for run in range(2):
    p = beam.Pipeline(options=PipelineOptions(
        portable_args(job_server) + kafka_args(broker, app_id, tmp_path / 'state')))
    _ = (
        p
        | 'Impulse' >> beam.Impulse()
        | 'Numbers' >> beam.FlatMap(lambda _: range(NUM_ELEMENTS))
        | 'Key' >> beam.Map(lambda i: (i % 7, i))
        | 'Group' >> beam.GroupByKey()
        | 'Sum' >> beam.Map(lambda kv: '%d:%d' % (kv[0], sum(kv[1])))
        | 'Collect' >> beam.Map(collector.recorder()))
    assert p.run().wait_until_finish() == PipelineState.DONE, 'run %d' % run
  want = ['%d:%d' % (k, sum(i for i in range(NUM_ELEMENTS) if i % 7 == k))
          for k in range(7)]
  assert sorted(collector.lines()) == sorted(want * 2)


# b. A failing DoFn fails the job; the error names the stage and carries the
# SDK's traceback.
def _stage_c_divides_by_zero_marker(element):
  return element // 0


# Large elements: a bundle of several MiB reaches the harness in data
# messages that each hold whole elements (the SDK decodes every message on
# its own, so one element split across two failed the bundle).
def test_a_bundle_of_large_elements_reaches_the_harness_whole(
    broker, job_server, app_id, collector, tmp_path):
  p = beam.Pipeline(options=PipelineOptions(
      portable_args(job_server) + kafka_args(broker, app_id, tmp_path / 'state')))
  _ = (
      p
      | beam.Create(range(9))
      | beam.Map(lambda i: (0, '%d' % i + 'x' * 900_000))  # under Kafka's 1 MB record limit
      | beam.GroupByKey()  # one pane of ~8 MB: more than one data message
      | beam.FlatMap(lambda kv: sorted(len(v) for v in kv[1]))
      | beam.Map(collector.recorder()))
  assert p.run().wait_until_finish() == PipelineState.DONE
  assert sorted(collector.lines()) == ['900001'] * 9


class _BagUntilTheEnd(beam.DoFn):
  """Keeps every value of a key in bag state until the window ends."""
  BAG = userstate.BagStateSpec('values', StrUtf8Coder())
  END = userstate.TimerSpec('end', userstate.TimeDomain.WATERMARK)

  def process(self, kv, bag=beam.DoFn.StateParam(BAG),
              end=beam.DoFn.TimerParam(END), w=beam.DoFn.WindowParam):
    bag.add(kv[1])
    end.set(w.max_timestamp())

  @userstate.on_timer(END)
  def flush(self, bag=beam.DoFn.StateParam(BAG)):
    yield 'bag:' + ','.join(str(len(v)) for v in sorted(bag.read()))


def _slowly_made_large(i):
  time.sleep(0.2)  # one element per bundle and commit upstream
  return 0, '%02d' % i + 'x' * 300_000


def test_state_larger_than_a_kafka_record_grows_over_many_commits(
    broker, job_server, app_id, collector, tmp_path):
  """A group and a bag of 12 x 300 kB arrive over a dozen commit cycles:
  each commit writes the new values, never one record of the whole state
  (which Kafka refuses above 1 MB)."""
  p = beam.Pipeline(options=PipelineOptions(
      portable_args(job_server) + kafka_args(broker, app_id, tmp_path / 'state')
      + ['--max_bundle_size=1']))
  big = (
      p
      | beam.Create(range(12))
      | beam.Reshuffle()
      | beam.Map(_slowly_made_large))
  _ = (
      big
      | beam.GroupByKey()
      | beam.Map(lambda kv: 'group:' + ','.join(str(len(v)) for v in sorted(kv[1])))
      | 'RecordGroup' >> beam.Map(collector.recorder()))
  _ = (
      big
      | beam.ParDo(_BagUntilTheEnd())
      | 'RecordBag' >> beam.Map(collector.recorder()))
  assert p.run().wait_until_finish() == PipelineState.DONE
  sizes = ','.join(['300002'] * 12)
  assert sorted(collector.lines()) == ['bag:' + sizes, 'group:' + sizes]


def test_failing_dofn_reports_stage_and_traceback(
    broker, job_server, app_id, collector, tmp_path):
  args = portable_args(job_server) + kafka_args(
      broker, app_id, tmp_path / 'state')
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | 'Impulse' >> beam.Impulse()
      | 'StageA' >> beam.FlatMap(lambda _: [1, 2, 3])
      | 'StageB' >> beam.Map(collector.recorder())
      | 'StageC' >> beam.Map(_stage_c_divides_by_zero_marker))
  result = p.run()
  # PortableRunner raises RuntimeError with the text of the last
  # JOB_MESSAGE_ERROR (or of the failed state) as its message.
  with pytest.raises(RuntimeError) as excinfo:
    result.wait_until_finish()

  message = str(excinfo.value)
  assert 'StageC' in message, message
  assert 'ZeroDivisionError' in message, message
  assert '_stage_c_divides_by_zero_marker' in message, message
  assert result.state == PipelineState.FAILED


# c. Without an application id the job is refused at Prepare and never runs.
def test_a_finished_job_deletes_only_the_state_it_made(
    broker, job_server, app_id, collector, tmp_path):
  state_dir = tmp_path / 'inner'
  (state_dir / app_id).mkdir(parents=True)
  theirs = [state_dir / 'keep.txt', state_dir / app_id / 'keep.txt']
  for f in theirs:
    f.write_text('not the runner\'s')
  p = beam.Pipeline(options=PipelineOptions(
      portable_args(job_server) + kafka_args(broker, app_id, state_dir)))
  _ = (
      p
      | 'Impulse' >> beam.Impulse()
      | 'Numbers' >> beam.FlatMap(lambda _: range(20))
      | 'Key' >> beam.Map(lambda i: (i % 3, i))
      | 'Group' >> beam.GroupByKey()
      | 'Sum' >> beam.Map(lambda kv: '%d:%d' % (kv[0], sum(kv[1])))
      | 'Collect' >> beam.Map(collector.recorder()))
  assert p.run().wait_until_finish() == PipelineState.DONE

  def stores():
    return [d for d in (state_dir / app_id).iterdir() if d.is_dir()]

  # The stores are deleted after DONE, while the job server ends the job.
  deadline = time.monotonic() + 30
  while stores() and time.monotonic() < deadline:
    time.sleep(0.2)
  assert not stores(), 'the task stores were left: %s' % stores()
  assert all(f.exists() for f in theirs), 'the runner deleted files it did not make'


def test_an_application_id_naming_a_parent_directory_fails_prepare(
    broker, job_server, collector, tmp_path):
  # Before, a finished job with --application_id=.. deleted the state
  # directory's parent, and whatever else was in it.
  args = portable_args(job_server) + kafka_args(broker, '..', tmp_path / 'x' / 'inner')
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (p | 'Impulse' >> beam.Impulse() | 'Record' >> beam.Map(collector.recorder()))
  with pytest.raises(grpc.RpcError) as excinfo:
    p.run()
  assert 'must start with a letter or digit' in _error_text(excinfo.value)
  assert _raised_by_prepare(excinfo), excinfo.traceback


def test_without_an_application_id_the_job_runs_as_one_named_after_it(
    broker, job_server, collector, tmp_path, caplog):
  """Beam's own examples cannot pass --application_id (Go and Java refuse
  options they do not declare): the job server names the application after
  the job, and says so."""
  name = 'no app id %s' % uuid.uuid4().hex[:8]
  args = portable_args(job_server) + kafka_args(
      broker, None, tmp_path / 'state') + ['--job_name=%s' % name]
  caplog.set_level(logging.INFO)
  with beam.Pipeline(options=PipelineOptions(args)) as p:
    _ = (p | 'Impulse' >> beam.Impulse() | 'Record' >> beam.Map(collector.recorder()))
  assert collector.lines() == ["b''"]
  expected = "runs as application '%s'" % name.replace(' ', '-')
  assert any(expected in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records][-20:]


# A pipeline from an SDK release outside the supported range is refused at
# Prepare naming the range (the SDK names its release in a capability of its
# environment; here one is forged, as an old or a future SDK would send it).
@pytest.mark.parametrize('version,relation', [('2.72.0', 'older'), ('2.78.0.dev', 'newer')])
def test_an_sdk_release_outside_the_supported_range_fails_prepare(
    version, relation, monkeypatch, broker, job_server, app_id, collector, tmp_path):
  from apache_beam.transforms import environments
  monkeypatch.setattr(
      environments, 'sdk_base_version_capability',
      lambda: 'beam:version:sdk_base:apache/beam_python3.11_sdk:' + version)
  args = portable_args(job_server) + kafka_args(broker, app_id, tmp_path / 'state')
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (p | 'Impulse' >> beam.Impulse() | 'Record' >> beam.Map(collector.recorder()))
  with pytest.raises(grpc.RpcError) as excinfo:
    p.run()
  text = _error_text(excinfo.value)
  assert 'Python SDK %s, which is %s' % (version, relation) in text, text
  assert 'supports Beam SDK releases 2.73.0 to ' in text, text
  assert _raised_by_prepare(excinfo), excinfo.traceback
  time.sleep(1)
  assert not collector.exists(), 'the job ran: %s' % collector.lines()


def test_the_runner_class_runs_without_an_application_id(broker, collector, tmp_path, caplog):
  """KafkaStreamsRunner, like PortableRunner, leaves the id to the job
  server, which names the application after the job and says so."""
  args = ['--runner=beam_kafka.KafkaStreamsRunner'] + kafka_args(
      broker, None, tmp_path / 'state')
  caplog.set_level(logging.INFO)
  with beam.Pipeline(options=PipelineOptions(args)) as p:
    _ = (
        p
        | 'Impulse' >> beam.Impulse()
        | 'Record' >> beam.Map(collector.recorder()))
  assert collector.lines() == ["b''"]
  assert any('no --application_id was given' in r.getMessage() for r in caplog.records)


# An unreachable broker fails the job with a message naming the address,
# instead of hanging.
def test_unreachable_broker_fails_with_a_clear_message(
    job_server, app_id, collector, tmp_path):
  args = portable_args(job_server) + kafka_args(
      'localhost:1', app_id, tmp_path / 'state')
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | 'Impulse' >> beam.Impulse()
      | 'Record' >> beam.Map(collector.recorder()))
  result = p.run()
  with pytest.raises(RuntimeError) as excinfo:
    result.wait_until_finish()
  message = str(excinfo.value)
  assert 'cannot reach Kafka at localhost:1' in message, message
  assert '--bootstrap_servers' in message, message
  assert result.state == PipelineState.FAILED
  assert not collector.exists(), 'nothing may run without a broker'


# Cancel stops a running job cleanly and says CANCELLED.
def _slow(element):
  time.sleep(0.5)
  return element


def test_cancel_stops_a_running_job(broker, job_server, app_id, collector, tmp_path):
  args = portable_args(job_server) + kafka_args(
      broker, app_id, tmp_path / 'state') + ['--max_bundle_size=1']
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | 'Impulse' >> beam.Impulse()
      | 'Many' >> beam.FlatMap(lambda _: range(1000))
      | 'Slow' >> beam.Map(_slow)
      | 'Record' >> beam.Map(collector.recorder()))
  result = p.run()
  deadline = time.time() + 60
  while not collector.exists() and time.time() < deadline:
    time.sleep(0.2)
  assert collector.exists(), 'the job never started processing'
  result.cancel()
  # Beam's client raises for any end but DONE; the state tells what happened.
  with pytest.raises(RuntimeError, match='CANCELLED'):
    result.wait_until_finish()
  assert result.state == PipelineState.CANCELLED
  assert len(collector.lines()) < 1000
