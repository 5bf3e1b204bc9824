"""Cross-language: Python pipelines with Java transforms, expanded by Beam's own
Java expansion service (beam-sdks-java-expansion-service, from Maven Central)
and run by Beam's Java SDK harness, which the job server starts as a Java
process (--java-harness-dir) beside the Python harnesses: no Docker. And a Go
pipeline with a Python transform, expanded by Python's expansion service."""

import collections
import random
import re
import shutil
import subprocess
import sys
import time

import grpc
import pytest

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import window
from apache_beam.transforms.external import JavaExternalTransform

from conftest import free_ports
from conftest import go_pipeline
from conftest import java_jars
from conftest import make_app_id
from conftest import kafka_args
from conftest import portable_args

EXPANSION_MAIN = 'org.apache.beam.sdk.expansion.service.ExpansionService'


@pytest.fixture(scope='module')
def java_expansion_service(tmp_path_factory):
  """Beam's Java expansion service, as a user starts it, allowing every Java
  class to be looked up by name (JavaExternalTransform)."""
  jars = java_jars('--expansion-service')
  port, = free_ports(1)
  process = _serve(
      ['java', '-cp', jars + '/*', EXPANSION_MAIN, str(port), '--javaClassLookupAllowlistFile=*'],
      tmp_path_factory.mktemp('expansion') / 'expansion-service.log', port,
      "Beam's Java expansion service")
  address = 'localhost:%d' % port
  yield address
  process.kill()
  process.wait()


def _options(job_server, broker, app_id, tmp_path):
  return PipelineOptions(portable_args(job_server) + kafka_args(broker, app_id, tmp_path / 'state'))


def _words(seed, n=3000):
  rng = random.Random(seed)
  vocabulary = ['w%02d' % i for i in range(40)]
  return [rng.choice(vocabulary) for _ in range(n)]


def _count_per_element(expansion_service):
  return JavaExternalTransform('org.apache.beam.sdk.transforms.Count',
                               expansion_service=expansion_service).perElement()


def test_a_java_transform_counts_a_python_collection_exactly(
    sdk_image_job_server, java_expansion_service, broker, app_id, collector, tmp_path):
  words = _words(1)
  log_start = len(sdk_image_job_server.log_text())
  with beam.Pipeline(options=_options(sdk_image_job_server, broker, app_id, tmp_path)) as p:
    _ = (p
         | beam.Create(words)
         | _count_per_element(java_expansion_service)
         | beam.Map(lambda kv: '%s %d' % (kv[0], kv[1]))
         | beam.Map(collector.recorder()))
  expected = sorted('%s %d' % kv for kv in collections.Counter(words).items())
  assert sorted(collector.lines()) == expected
  log = sdk_image_job_server.log_text(log_start)
  # Java's harness ran here as a process, and what it printed is in the
  # log without its worker's secret id.
  assert 'Java harness: SDK Fn Harness started' in log, log[-3000:]
  assert not re.search(r'worker-\d+\.[0-9a-f]{32}', log), 'a worker secret was logged'


def test_windows_set_in_python_are_kept_by_the_java_transform(
    sdk_image_job_server, java_expansion_service, broker, app_id, collector, tmp_path):
  """Python assigns event times and fixed windows; Java's Count groups per
  window; Python reads each count with its window."""
  rng = random.Random(2)
  events = [(rng.choice(['a', 'b', 'c']), rng.randrange(0, 600)) for _ in range(1500)]

  def with_window(kv, w=beam.DoFn.WindowParam):
    return '%s %d %d' % (kv[0], int(w.start), kv[1])

  with beam.Pipeline(options=_options(sdk_image_job_server, broker, app_id, tmp_path)) as p:
    _ = (p
         | beam.Create(events)
         # A portable coder at the boundary (str), as every cross-language
         # transform requires: Java cannot read Python's pickled elements.
         | beam.Map(lambda e: window.TimestampedValue(e[0], e[1])).with_output_types(str)
         | beam.WindowInto(window.FixedWindows(60))
         | _count_per_element(java_expansion_service)
         | beam.Map(with_window)
         | beam.Map(collector.recorder()))
  expected = collections.Counter((key, second // 60 * 60) for key, second in events)
  assert sorted(collector.lines()) == sorted('%s %d %d' % (k, s, n) for (k, s), n in expected.items())


def _docker_engine_runs():
  if shutil.which('docker') is None:
    return False
  return subprocess.run(['docker', 'info'], capture_output=True, timeout=30, check=False).returncode == 0


@pytest.mark.skipif(_docker_engine_runs(),
                    reason='a Docker engine runs here: the job server would start the Java SDK image instead')
def test_without_a_java_harness_a_java_transform_fails_naming_the_setting(
    job_server, java_expansion_service, broker, app_id, collector, tmp_path):
  p = beam.Pipeline(options=_options(job_server, broker, app_id, tmp_path))
  _ = (p | beam.Create(['a']) | _count_per_element(java_expansion_service) | beam.Map(collector.recorder()))
  started = time.monotonic()
  result = p.run()
  with pytest.raises(RuntimeError) as failed:
    result.wait_until_finish()
  assert result.state == PipelineState.FAILED
  message = str(failed.value)
  assert "runs Beam's Java SDK" in message and '--java-harness-dir' in message, message
  assert time.monotonic() - started < 120
  assert not collector.exists()


def _serve(cmd, log_path, port, what):
  """Starts `cmd`, a gRPC service on `port`, and waits until it answers."""
  with open(log_path, 'wb') as log:
    process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
  channel = grpc.insecure_channel('localhost:%d' % port)
  try:
    grpc.channel_ready_future(channel).result(timeout=120)
  except grpc.FutureTimeoutError:
    process.kill()
    pytest.fail('%s did not start:\n%s' % (what, log_path.read_text()[-4000:]))
  finally:
    channel.close()
  return process


@pytest.fixture(scope='module')
def python_expansion_service(tmp_path_factory):
  """Python's expansion service as a Go or Java user starts it, expanding
  any Python transform by name. Its transforms name Beam's Python SDK image,
  which the job server runs as its --python-harness-command."""
  port, = free_ports(1)
  process = _serve(
      [sys.executable, '-m', 'apache_beam.runners.portability.expansion_service_main',
       '--port', str(port), '--fully_qualified_name_glob=*'],
      tmp_path_factory.mktemp('python-expansion') / 'expansion-service.log', port,
      "Python's expansion service")
  yield 'localhost:%d' % port
  process.kill()
  process.wait()


def test_a_go_pipeline_counts_with_a_python_transform(
    sdk_image_job_server, python_expansion_service, broker, tmp_path):
  job_server = sdk_image_job_server
  words = _words(3, 500)
  binary = go_pipeline('pytransform')
  out = tmp_path / 'counts.txt'
  app_id = make_app_id('go-python')
  run = subprocess.run([
      binary,
      '--runner=beamkafka',
      '--endpoint=%s' % job_server.endpoint,
      '--environment_type=LOOPBACK',
      '--output=%s' % out,
      '--words=%s' % ','.join(words),
      '--python_expansion_addr=%s' % python_expansion_service,
      '--bootstrap_servers=%s' % broker,
      '--application_id=%s' % app_id,
      '--state_dir=%s' % (tmp_path / 'state'),
  ], capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, 'the Go pipeline failed:\n%s\njob server:\n%s' % (
      run.stderr[-4000:], job_server.log_text()[-4000:])
  expected = sorted('%s %d' % kv for kv in collections.Counter(words).items())
  assert sorted(out.read_text().splitlines()) == expected
  assert 'application %s' % app_id in job_server.log_text(), 'it ran elsewhere'
