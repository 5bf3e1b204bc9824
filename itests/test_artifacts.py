"""Artifact staging: names are never trusted as paths.

These tests speak the Job and Artifact APIs directly (Beam's generated stubs
and the client-side helpers PortableRunner itself uses), so they can stage a
dependency with a hostile name that the SDK would never produce.
"""

import hashlib
import os
import uuid

import grpc
import pytest

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_artifact_api_pb2_grpc
from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.portability.api import beam_job_api_pb2_grpc
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability import artifact_service
from apache_beam.runners.portability import portable_runner
from apache_beam.transforms import environments

from conftest import JOB_SERVER_TIMEOUT_SECS
from conftest import kafka_args


def _file_dependency(path, staged_name):
  with open(path, 'rb') as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  return beam_runner_api_pb2.ArtifactInformation(
      type_urn=common_urns.artifact_types.FILE.urn,
      type_payload=beam_runner_api_pb2.ArtifactFilePayload(
          path=str(path), sha256=digest).SerializeToString(),
      role_urn=common_urns.artifact_roles.STAGING_TO.urn,
      role_payload=beam_runner_api_pb2.ArtifactStagingToRolePayload(
          staged_name=staged_name).SerializeToString())


class _Submission:
  """Prepares Impulse -> Map, as PortableRunner would, plus one dependency."""
  def __init__(self, job_server, broker, app_id, state_dir):
    self.options = PipelineOptions(
        ['--environment_type=LOOPBACK'] +
        kafka_args(broker, app_id, state_dir))
    p = beam.Pipeline(options=self.options)
    _ = p | 'Impulse' >> beam.Impulse() | 'Map' >> beam.Map(lambda x: x)
    self.proto = p.to_runner_api(
        default_environment=environments.Environment.from_options(
            self.options))
    # Points the LOOPBACK environment at a real worker pool, as a real
    # submission does; it is stopped by close().
    self._cleanups = (
        portable_runner.PortableRunner.start_and_replace_loopback_environments(
            self.proto, self.options))
    self.channel = grpc.insecure_channel(job_server.endpoint)
    self.stub = beam_job_api_pb2_grpc.JobServiceStub(self.channel)

  def add_dependency(self, path, staged_name):
    envs = self.proto.components.environments
    assert len(envs) == 1, list(envs)
    for env in envs.values():
      env.dependencies.append(_file_dependency(path, staged_name))

  def prepare(self):
    handle = portable_runner.JobServiceHandle(self.stub, self.options)
    return self.stub.Prepare(
        beam_job_api_pb2.PrepareJobRequest(
            job_name='itest-artifacts',
            pipeline=self.proto,
            pipeline_options=handle.get_pipeline_options()),
        timeout=JOB_SERVER_TIMEOUT_SECS)

  @staticmethod
  def stage(prepare_response):
    channel = grpc.insecure_channel(
        prepare_response.artifact_staging_endpoint.url)
    try:
      artifact_service.offer_artifacts(
          beam_artifact_api_pb2_grpc.ArtifactStagingServiceStub(channel),
          artifact_service.ArtifactRetrievalService(
              artifact_service.BeamFilesystemHandler(None).file_reader),
          prepare_response.staging_session_token)
    finally:
      channel.close()

  def close(self):
    for cleanup in self._cleanups:
      cleanup()
    self.channel.close()


@pytest.fixture
def submission(job_server, broker, app_id, tmp_path):
  s = _Submission(job_server, broker, app_id, tmp_path / 'state')
  try:
    yield s
  finally:
    s.close()


def _files_named(root, name):
  return [
      os.path.join(d, name) for d, _, files in os.walk(root) if name in files
  ]


def _files_containing(root, marker, skip_dir=None):
  found = []
  for d, _, files in os.walk(root):
    if skip_dir and os.path.commonpath([d, skip_dir]) == str(skip_dir):
      continue
    for name in files:
      path = os.path.join(d, name)
      try:
        with open(path, 'rb') as f:
          if marker in f.read():
            found.append(path)
      except OSError:
        pass
  return found


# e. A staged name that climbs out of the artifacts directory is refused and
# nothing is written outside it.
def test_staged_name_with_parent_components_is_refused(
    submission, job_server, tmp_path):
  marker = ('beam-kafka-itest-%s' % uuid.uuid4().hex).encode()
  dependency = tmp_path / 'dependency.txt'
  dependency.write_bytes(marker)
  submission.add_dependency(dependency, '../../x')

  prepared = submission.prepare()
  assert prepared.artifact_staging_endpoint.url.endswith(
      ':%d' % job_server.artifact_port), prepared.artifact_staging_endpoint

  with pytest.raises(grpc.RpcError) as excinfo:
    submission.stage(prepared)
  error = excinfo.value
  assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
  assert '../../x' in error.details(), error.details()

  artifacts_dir = job_server.artifacts_dir
  assert not (artifacts_dir / '..' / '..' / 'x').exists()
  # artifacts_dir = <root>/outer/inner/artifacts: its parent and grandparent
  # (and everything else the server owns) are under <root>.
  for directory in (artifacts_dir.parent, artifacts_dir.parent.parent,
                    job_server.root):
    assert _files_named(directory, 'x') == []
  assert _files_containing(job_server.root, marker, artifacts_dir) == []


# Control for the test above: a plain staged name is accepted and lands under
# the artifacts directory, so the refusal above is about the name.
def test_plain_staged_name_is_staged_inside_artifacts_dir(
    submission, job_server, tmp_path):
  marker = ('beam-kafka-itest-%s' % uuid.uuid4().hex).encode()
  dependency = tmp_path / 'dependency.txt'
  dependency.write_bytes(marker)
  staged_name = 'itest-dep-%s.txt' % uuid.uuid4().hex[:8]
  submission.add_dependency(dependency, staged_name)

  prepared = submission.prepare()
  submission.stage(prepared)

  stored = _files_containing(job_server.artifacts_dir, marker)
  assert stored, 'the staged file is nowhere under %s' % job_server.artifacts_dir
  assert _files_containing(job_server.root, marker,
                           job_server.artifacts_dir) == []
