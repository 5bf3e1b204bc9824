"""One address for every cross-language transform: the job server's own
expansion service. Beam's Kafka transforms it expands itself; a Java
transform it has Beam's Java expansion service expand (--java-expansion-dir,
started on demand), a Python one Python's (--python-expansion-command). The
client fetches the Java service's jars from the same address to stage
them, and the job server runs the Java and Python harnesses
(--java-harness-dir, --python-harness-command). The user starts nothing."""

import collections
import subprocess
import sys

import grpc
import pytest

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_artifact_api_pb2
from apache_beam.portability.api import beam_artifact_api_pb2_grpc
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.transforms.external import JavaExternalTransform

from conftest import go_pipeline
from conftest import java_jars
from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import started_job_server

PYTHON_EXPANSION = ('%s -m apache_beam.runners.portability.expansion_service_main '
                    '--fully_qualified_name_glob=*' % sys.executable)


@pytest.fixture(scope='module')
def forwarding_job_server(binary, tmp_path_factory):
  with started_job_server(binary, tmp_path_factory.mktemp('forwarding-job-server'), [
      '--java-harness-dir', java_jars(),
      '--java-expansion-dir', java_jars('--expansion-service'),
      '--python-harness-command', '%s -m beam_kafka.boot' % sys.executable,
      '--python-expansion-command', PYTHON_EXPANSION,
  ]) as server:
    yield server


def _expansion_address(job_server):
  return 'localhost:%d' % job_server.expansion_port


def _words(n=2000):
  return ['w%02d' % ((i * 7919) % 37) for i in range(n)]


def test_a_java_transform_is_expanded_by_the_job_server_alone(
    forwarding_job_server, broker, app_id, collector, tmp_path):
  server = forwarding_job_server
  words = _words()
  count = JavaExternalTransform('org.apache.beam.sdk.transforms.Count',
                                expansion_service=_expansion_address(server)).perElement()
  options = PipelineOptions(portable_args(server) + kafka_args(broker, app_id, tmp_path / 'state'))
  with beam.Pipeline(options=options) as p:
    _ = (p
         | beam.Create(words)
         | count
         | beam.Map(lambda kv: '%s %d' % (kv[0], kv[1]))
         | beam.Map(collector.recorder()))
  expected = sorted('%s %d' % kv for kv in collections.Counter(words).items())
  assert sorted(collector.lines()) == expected
  log = server.log_text()
  assert 'starting the Java expansion service' in log, log[-3000:]
  assert 'expanded by the Java expansion service' in log, log[-3000:]
  assert 'Java harness: SDK Fn Harness started' in log, log[-3000:]


def test_a_go_pipeline_has_its_python_transform_expanded_by_the_job_server(
    forwarding_job_server, broker, tmp_path):
  server = forwarding_job_server
  words = _words(300)
  out = tmp_path / 'counts.txt'
  app_id = make_app_id('go-python-forwarded')
  run = subprocess.run([
      go_pipeline('pytransform'),
      '--runner=beamkafka',
      '--endpoint=%s' % server.endpoint,
      '--environment_type=LOOPBACK',
      '--output=%s' % out,
      '--words=%s' % ','.join(words),
      '--python_expansion_addr=%s' % _expansion_address(server),
      '--bootstrap_servers=%s' % broker,
      '--application_id=%s' % app_id,
  ], capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, 'the Go pipeline failed:\n%s\njob server:\n%s' % (
      run.stderr[-4000:], server.log_text()[-4000:])
  expected = sorted('%s %d' % kv for kv in collections.Counter(words).items())
  assert sorted(out.read_text().splitlines()) == expected
  log = server.log_text()
  assert 'expanded by the Python expansion service' in log, log[-3000:]
  assert 'application %s' % app_id in log


def test_only_the_files_an_expansion_named_are_served(forwarding_job_server):
  channel = grpc.insecure_channel(_expansion_address(forwarding_job_server))
  stub = beam_artifact_api_pb2_grpc.ArtifactRetrievalServiceStub(channel)
  secret = beam_runner_api_pb2.ArtifactInformation(
      type_urn='beam:artifact:type:file:v1',
      type_payload=beam_runner_api_pb2.ArtifactFilePayload(path='/etc/passwd').SerializeToString())
  try:
    with pytest.raises(grpc.RpcError) as refused:
      list(stub.GetArtifact(beam_artifact_api_pb2.GetArtifactRequest(artifact=secret)))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
  finally:
    channel.close()


def test_a_java_transform_without_a_java_expansion_service_is_refused_naming_the_flag(job_server):
  with pytest.raises(RuntimeError) as refused:
    with beam.Pipeline() as p:
      _ = (p | beam.Create(['a'])
           | JavaExternalTransform('org.apache.beam.sdk.transforms.Count',
                                   expansion_service=_expansion_address(job_server)).perElement())
  message = str(refused.value)
  assert '--java-expansion-dir' in message and 'Java transform' in message, message
