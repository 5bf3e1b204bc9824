"""Several SDK harnesses per copy (--sdk_worker_parallelism): tasks spread
over harness processes, so user code runs on more than one core."""

import json
import os

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from conftest import kafka_args
from test_environments import _boot_command

KEYS = 32
VALUES = 320


def _group_with_pids(p, collector):
  """Values grouped by key over 4 shuffle partitions (4 tasks after the
  GroupByKey); each group is recorded with the pid of the harness that
  handled it."""
  def record(kv):
    key, values = kv
    return '%s:%s:%d' % (key, ','.join(map(str, sorted(values))), os.getpid())

  _ = (
      p
      | 'Create' >> beam.Create(list(range(VALUES)))
      | 'Key' >> beam.Map(lambda i: ('k%02d' % (i % KEYS), i))
      | 'Group' >> beam.GroupByKey()
      | 'Describe' >> beam.Map(record)
      | 'Collect' >> beam.Map(collector.recorder()))


def _run_and_check(args, collector):
  p = beam.Pipeline(options=PipelineOptions(args))
  _group_with_pids(p, collector)
  result = p.run()
  assert result.wait_until_finish() == PipelineState.DONE
  _check(collector)


def _check(collector):
  """Every group exact, and handled by more than one harness process,
  none of them this one."""
  groups, pids = {}, set()
  for line in collector.lines():
    key, values, pid = line.split(':')
    assert key not in groups, 'group %s seen twice' % key
    groups[key] = values
    pids.add(int(pid))
  expected = {
      'k%02d' % k: ','.join(str(i) for i in range(VALUES) if i % KEYS == k)
      for k in range(KEYS)
  }
  assert groups == expected
  assert os.getpid() not in pids, 'the groups ran in the submitting process'
  assert len(pids) == 2, 'expected two harness processes, saw %s' % pids


def test_a_process_environment_runs_as_many_harnesses_as_asked(
    broker, job_server, app_id, collector, tmp_path):
  args = [
      '--runner=PortableRunner',
      '--job_endpoint=%s' % job_server.endpoint,
      '--environment_type=PROCESS',
      '--environment_config=%s' % json.dumps(
          {'command': _boot_command(tmp_path)}),
      '--sdk_worker_parallelism=2',
      '--internal_parallelism=4',
  ] + kafka_args(broker, app_id, tmp_path / 'state')
  _run_and_check(args, collector)


def test_kafka_streams_runner_runs_loopback_harnesses_as_processes(
    broker, job_server, app_id, collector, tmp_path):
  args = [
      '--runner=beam_kafka.KafkaStreamsRunner',
      '--job_endpoint=%s' % job_server.endpoint,
      '--expansion_port=%d' % job_server.expansion_port,
      '--sdk_worker_parallelism=2',
      '--internal_parallelism=4',
  ] + kafka_args(broker, app_id, tmp_path / 'state')
  _run_and_check(args, collector)
