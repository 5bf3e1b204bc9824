"""SDK harness environments other than LOOPBACK, on the real binary and broker."""

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import userstate

from conftest import kafka_args


def _boot_command(tmp_path: Path) -> str:
  """An executable that starts the Python SDK harness the way Beam's boot does."""
  boot = tmp_path / 'boot'
  boot.write_text('#!/bin/sh\nexec "%s" -m beam_kafka.boot "$@"\n' %
                  sys.executable)
  boot.chmod(boot.stat().st_mode | stat.S_IEXEC)
  return str(boot)


def _environment_args(job_server, broker, app_id, tmp_path, kind, config):
  """PortableRunner options submitting to the session's job server with an
  SDK environment of `kind` configured by `config`."""
  return [
      '--runner=PortableRunner',
      '--job_endpoint=%s' % job_server.endpoint,
      '--environment_type=%s' % kind,
      '--environment_config=%s' % config,
  ] + kafka_args(broker, app_id, tmp_path / 'state')


def _process_config(command):
  return json.dumps({'command': command})


def _boot_pipeline(job_server, broker, app_id, tmp_path):
  """A pipeline whose SDK harness is a PROCESS running beam_kafka.boot."""
  args = _environment_args(
      job_server, broker, app_id, tmp_path, 'PROCESS',
      _process_config(_boot_command(tmp_path)))
  return beam.Pipeline(options=PipelineOptions(args))


def test_process_environment_runs_the_harness_as_a_subprocess(
    broker, job_server, app_id, collector, tmp_path):
  p = _boot_pipeline(job_server, broker, app_id, tmp_path)
  _ = (
      p
      | 'Impulse' >> beam.Impulse()
      | 'Words' >> beam.FlatMap(lambda _: ['a', 'bb', 'ccc'])
      | 'Length' >> beam.Map(lambda w: '%s=%d' % (w, len(w)))
      | 'Collect' >> beam.Map(collector.recorder()))
  result = p.run()
  assert result.wait_until_finish() == PipelineState.DONE
  assert sorted(collector.lines()) == ['a=1', 'bb=2', 'ccc=3']


def test_process_environment_with_a_missing_command_fails_clearly(
    broker, job_server, app_id, collector, tmp_path):
  missing = str(tmp_path / 'no-such-boot')
  args = _environment_args(
      job_server, broker, app_id, tmp_path, 'PROCESS', _process_config(missing))
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = p | beam.Impulse() | beam.Map(collector.recorder())
  result = p.run()
  with pytest.raises(RuntimeError) as excinfo:
    result.wait_until_finish()
  assert missing in str(excinfo.value)
  assert result.state == PipelineState.FAILED
  assert not collector.exists()


def test_a_harness_command_that_exits_at_once_fails_the_job_at_once(
    broker, job_server, app_id, collector, tmp_path):
  # The command starts, but its interpreter cannot find the harness module:
  # the job fails as soon as the process ended, not after the 120 s the
  # runner waits for a harness to connect.
  command = '%s -m no_such_beam_harness_module' % sys.executable
  args = _environment_args(
      job_server, broker, app_id, tmp_path, 'PROCESS', _process_config(command))
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = p | beam.Impulse() | beam.Map(collector.recorder())
  started = time.monotonic()
  result = p.run()
  with pytest.raises(RuntimeError) as excinfo:
    result.wait_until_finish()
  waited = time.monotonic() - started
  assert 'exited (exit status: 1) before it connected' in str(excinfo.value)
  assert result.state == PipelineState.FAILED
  assert waited < 100, 'failed only after %.0f s' % waited
  assert not collector.exists()


def test_docker_environment_without_an_engine_or_image_fails_clearly(
    broker, job_server, app_id, collector, tmp_path):
  args = _environment_args(
      job_server, broker, app_id, tmp_path, 'DOCKER',
      'beam-kafka-itest/no-such-image:0')
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = p | beam.Impulse() | beam.Map(collector.recorder())
  result = p.run()
  with pytest.raises(RuntimeError) as excinfo:
    result.wait_until_finish()
  # Either no engine runs here, or the engine cannot start the image: both
  # must end the job with a message about Docker, never hang.
  assert 'docker' in str(excinfo.value).lower(), str(excinfo.value)
  assert result.state == PipelineState.FAILED
  assert not collector.exists()


def _count_sum_and_keep():
  """A stateful DoFn defined in a function, so it is pickled whole: the
  PROCESS harness cannot import this test module."""

  class CountSumAndKeep(beam.DoFn):
    """Per key: a value state counting, a combining state summing, a bag
    keeping every value; each element emits what the three hold after it,
    and how this harness reached state so far (reads a prefetch answered,
    handlers on the runner's state socket)."""
    COUNT = userstate.ReadModifyWriteStateSpec('count', VarIntCoder())
    TOTAL = userstate.CombiningValueStateSpec('total', combine_fn=sum)
    KEPT = userstate.BagStateSpec('kept', VarIntCoder())

    def process(self, kv, count=beam.DoFn.StateParam(COUNT),
                total=beam.DoFn.StateParam(TOTAL), kept=beam.DoFn.StateParam(KEPT)):
      n = (count.read() or 0) + 1
      count.write(n)
      total.add(kv[1])
      kept.add(kv[1])
      from beam_kafka import state_prefetch, state_socket  # pylint: disable=import-outside-toplevel
      yield '%s %d %d %d %d %d' % (kv[0], n, total.read(), len(list(kept.read())),
                                   state_prefetch.stats['prefetched_reads'], state_socket.stats['handlers'])

  return CountSumAndKeep()


def test_state_written_by_a_booted_harness_survives_every_bundle(
    broker, job_server, app_id, collector, tmp_path):
  # beam_kafka.boot turns the state cache on, sends a bundle's state writes
  # together, asks for the state of a chunk's new keys before the DoFn
  # reads it, and talks to the runner's state socket instead of gRPC: small
  # bundles make every key's state cross many bundles, read back from the
  # cache or the runner, and the first 40 elements bring a new key each.
  keys, per_key = 40, 9
  args = _environment_args(
      job_server, broker, app_id, tmp_path, 'PROCESS',
      _process_config(_boot_command(tmp_path))) + ['--max_bundle_size=7']
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | 'Values' >> beam.Create(list(range(keys * per_key)))
      | 'Key' >> beam.Map(lambda i: ('k%d' % (i % keys), i))
      | 'Count' >> beam.ParDo(_count_sum_and_keep())
      | 'Collect' >> beam.Map(collector.recorder()))
  result = p.run()
  assert result.wait_until_finish() == PipelineState.DONE
  rows = [line.split() for line in collector.lines()]
  assert len(rows) == keys * per_key
  assert max(int(r[4]) for r in rows) > 0, 'no read was answered by a prefetch'
  assert max(int(r[5]) for r in rows) > 0, 'the harness did not use the state socket'
  for k in range(keys):
    mine = sorted((int(n), int(t), int(b)) for key, n, t, b, _, _ in rows if key == 'k%d' % k)
    # One row per element, counts 1..per_key, the bag as long as the count;
    # the last total is the sum of the key's values.
    assert [n for n, _, _ in mine] == list(range(1, per_key + 1)), mine
    assert all(b == n for n, _, b in mine), mine
    assert mine[-1][1] == sum(range(k, keys * per_key, keys)), mine


def _client_only_function(tmp_path):
  """A function of a module only this process can import (the harness's
  sys.path lacks `tmp_path`): it is pickled by name."""
  (tmp_path / 'only_in_the_client.py').write_text('def same(element):\n  return element\n')
  sys.path.insert(0, str(tmp_path))
  try:
    import only_in_the_client  # pylint: disable=import-outside-toplevel
  finally:
    sys.path.remove(str(tmp_path))
  return only_in_the_client.same


def test_a_dofn_the_harness_cannot_import_fails_the_job_with_the_import_error(
    broker, job_server, app_id, collector, tmp_path):
  # The harness fails the bundle before it opens its data stream. The job
  # fails with the SDK's error at once, not after waiting for that stream.
  p = _boot_pipeline(job_server, broker, app_id, tmp_path)
  _ = (
      p
      | 'Impulse' >> beam.Impulse()
      | 'Unimportable' >> beam.Map(_client_only_function(tmp_path))
      | 'Record' >> beam.Map(collector.recorder()))
  result = p.run()
  started = time.monotonic()
  with pytest.raises(RuntimeError) as excinfo:
    result.wait_until_finish()
  assert "No module named 'only_in_the_client'" in str(excinfo.value), str(excinfo.value)
  assert result.state == PipelineState.FAILED
  # The harness's own 60 s to open its data stream did not run out.
  assert time.monotonic() - started < 45, 'the job waited for a data stream'
  assert not collector.exists()


def test_a_crashing_harness_fails_the_job_with_a_message(
    broker, job_server, app_id, collector, tmp_path):
  p = _boot_pipeline(job_server, broker, app_id, tmp_path)
  _ = (
      p
      | 'Impulse' >> beam.Impulse()
      # The harness process dies mid-bundle, as a crash would. A lambda is
      # pickled whole: a function of this module would be pickled by name,
      # and the harness cannot import this module.
      | 'Crash' >> beam.Map(lambda _: os._exit(3))
      | 'Record' >> beam.Map(collector.recorder()))
  result = p.run()
  with pytest.raises(RuntimeError) as excinfo:
    result.wait_until_finish()
  message = str(excinfo.value)
  assert 'SDK harness' in message, message
  assert result.state == PipelineState.FAILED
  assert not collector.exists()
