"""A job server safe to leave running: a token on every server, worker ids
that cannot be claimed twice, and bad submissions refused with
INVALID_ARGUMENT while the server keeps serving.

These tests start a job server of their own with a token and the default
policy (the session's job server trusts its clients).
"""

import re
import subprocess
import threading
import time
import typing

import grpc
import pytest
from google.protobuf import struct_pb2

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_artifact_api_pb2
from apache_beam.portability.api import beam_artifact_api_pb2_grpc
from apache_beam.portability.api import beam_expansion_api_pb2
from apache_beam.portability.api import beam_expansion_api_pb2_grpc
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import beam_fn_api_pb2_grpc
from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.portability.api import beam_job_api_pb2_grpc
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.portability.api import external_transforms_pb2
from apache_beam.portability.api import schema_pb2
from apache_beam.runners.worker import worker_pool_main
from apache_beam.transforms import environments

from conftest import free_ports
from conftest import make_app_id

TOKEN = 'itest-token-%s' % ('x' * 24)
PLANTED = 'PLANTED-secret-value-7731'


class _Server:
  def __init__(self, binary, root, state_root=None, extra=()):
    root.mkdir(parents=True, exist_ok=True)
    self.root = root
    self.log_path = root / 'job-server.log'
    token_file = root / 'token'
    token_file.write_text(TOKEN + '\n')
    self.job_port, self.artifact_port, self.expansion_port = free_ports(3)
    self.state_root = state_root or root / 'state'
    cmd = [binary, 'job-server', '--job-port', str(self.job_port),
           '--artifact-port', str(self.artifact_port),
           '--expansion-port', str(self.expansion_port),
           '--artifacts-dir', str(root / 'artifacts'),
           '--state-root', str(self.state_root),
           '--auth-token-file', str(token_file)] + list(extra)
    with open(self.log_path, 'wb') as log:
      self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    self.endpoint = 'localhost:%d' % self.job_port
    deadline = time.monotonic() + 60
    while 'job server listening' not in self.log():
      assert self.process.poll() is None, self.log()
      assert time.monotonic() < deadline, self.log()
      time.sleep(0.1)
    self.jobs = beam_job_api_pb2_grpc.JobServiceStub(
        grpc.insecure_channel(self.endpoint))

  def log(self):
    return self.log_path.read_text(errors='replace')

  def address(self, what):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
      m = re.search(what + r' listening on (\S+)', self.log())
      if m:
        return m.group(1)
      time.sleep(0.1)
    raise AssertionError('no %s address in the log:\n%s' % (what, self.log()))

  def fn_api(self):
    return self.address('Fn API server')

  def stop(self):
    self.process.terminate()
    self.process.wait(30)


@pytest.fixture(scope='module')
def server(binary, tmp_path_factory):
  s = _Server(binary, tmp_path_factory.mktemp('safe-server'))
  yield s
  s.stop()


AUTH = [('authorization', 'Bearer ' + TOKEN)]


@pytest.fixture
def worker_ids(monkeypatch):
  """The worker ids the runner hands worker pools in this process (each
  worker's secret), as an attacker who stole one would have them."""
  seen = []
  original = worker_pool_main.BeamFnExternalWorkerPoolServicer.StartWorker

  def start_worker(self, request, context):
    seen.append(request.worker_id)
    return original(self, request, context)

  monkeypatch.setattr(
      worker_pool_main.BeamFnExternalWorkerPoolServicer, 'StartWorker',
      start_worker)
  return seen


def _options(**values):
  s = struct_pb2.Struct()
  for k, v in values.items():
    s['beam:option:%s:v1' % k] = v
  return s


def _pipeline_proto():
  p = beam.Pipeline()
  _ = p | beam.Create([1, 2]) | beam.Map(lambda x: x)
  # As PortableRunner's LOOPBACK sends it: a worker pool on this machine.
  return p.to_runner_api(
      default_environment=environments.ExternalEnvironment('localhost:1'))


def _prepare(server, metadata=(), pipeline=None, **options):
  return server.jobs.Prepare(
      beam_job_api_pb2.PrepareJobRequest(
          pipeline=pipeline or _pipeline_proto(), job_name='safety',
          pipeline_options=_options(**options)),
      metadata=list(metadata), timeout=30)


def _code(call):
  with pytest.raises(grpc.RpcError) as e:
    call()
  return e.value.code(), e.value.details()


def test_a_client_without_the_token_is_refused_on_every_server(server, broker):
  # Job API: Prepare and GetJobs.
  code, details = _code(lambda: _prepare(
      server, bootstrap_servers=broker, application_id=make_app_id('noauth')))
  assert code == grpc.StatusCode.UNAUTHENTICATED, details
  assert 'job_server_token' in details
  code, _ = _code(lambda: server.jobs.GetJobs(
      beam_job_api_pb2.GetJobsRequest(), timeout=10))
  assert code == grpc.StatusCode.UNAUTHENTICATED
  code, _ = _code(lambda: server.jobs.GetJobs(
      beam_job_api_pb2.GetJobsRequest(),
      metadata=[('authorization', 'Bearer wrong')], timeout=10))
  assert code == grpc.StatusCode.UNAUTHENTICATED
  # Expansion service.
  expansion = beam_expansion_api_pb2_grpc.ExpansionServiceStub(
      grpc.insecure_channel('localhost:%d' % server.expansion_port))
  code, _ = _code(lambda: expansion.Expand(
      beam_expansion_api_pb2.ExpansionRequest(), timeout=10))
  assert code == grpc.StatusCode.UNAUTHENTICATED
  # Artifact staging needs a live preparation's token; retrieval a worker's.
  artifacts = grpc.insecure_channel('localhost:%d' % server.artifact_port)
  staging = beam_artifact_api_pb2_grpc.ArtifactStagingServiceStub(artifacts)
  responses = staging.ReverseArtifactRetrievalService(iter([
      beam_artifact_api_pb2.ArtifactResponseWrapper(
          staging_token='prep-guessed')]), timeout=10)
  code, _ = _code(lambda: list(responses))
  assert code == grpc.StatusCode.NOT_FOUND
  retrieval = beam_artifact_api_pb2_grpc.ArtifactRetrievalServiceStub(
      grpc.insecure_channel(
          server.address('artifact retrieval for SDK harnesses')))
  code, _ = _code(lambda: list(retrieval.GetArtifact(
      beam_artifact_api_pb2.GetArtifactRequest(
          artifact=beam_runner_api_pb2.ArtifactInformation()),
      metadata=[('worker_id', 'guessed')], timeout=10)))
  assert code == grpc.StatusCode.PERMISSION_DENIED
  # Fn API: an unknown worker id gets nothing.
  fn = grpc.insecure_channel(server.fn_api())
  control = beam_fn_api_pb2_grpc.BeamFnControlStub(fn)
  code, _ = _code(lambda: next(iter(control.Control(
      iter([]), metadata=[('worker_id', 'guessed-worker')], timeout=10))))
  assert code == grpc.StatusCode.PERMISSION_DENIED
  # The option a client without call credentials uses is advertised.
  described = server.jobs.DescribePipelineOptions(
      beam_job_api_pb2.DescribePipelineOptionsRequest(), timeout=10)
  assert 'job_server_token' in [o.name for o in described.options]


def test_bad_submissions_get_invalid_argument_and_the_server_keeps_serving(
    server, broker, tmp_path):
  def refused(**kw):
    pipeline = kw.pop('pipeline', None)
    code, details = _code(lambda: _prepare(
        server, AUTH, pipeline=pipeline, bootstrap_servers=broker, **kw))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    return details

  assert 'application_id' in refused(application_id='..')
  details = refused(
      application_id=make_app_id('outside'), state_dir=str(tmp_path / 'x'))
  assert 'outside' in details and 'state root' in details
  details = refused(
      application_id=make_app_id('plugin'),
      kafka_property=['plugin.library.paths=/tmp/evil.so'])
  assert 'plugin.library.paths' in details and 'loads code' in details
  # A coder that contains itself.
  looping = _pipeline_proto()
  looping.components.coders['loop'].CopyFrom(beam_runner_api_pb2.Coder(
      spec=beam_runner_api_pb2.FunctionSpec(urn='beam:coder:kv:v1'),
      component_coder_ids=['loop', 'loop']))
  details = refused(application_id=make_app_id('loop'), pipeline=looping)
  assert 'contains itself' in details
  # An environment this server does not start by default.
  process = _pipeline_proto()
  for env in process.components.environments.values():
    env.urn = 'beam:env:process:v1'
    env.payload = beam_runner_api_pb2.ProcessPayload(
        command='/bin/true').SerializeToString()
  details = refused(application_id=make_app_id('process'), pipeline=process)
  assert 'Process' in details and '--allow-environments' in details

  # A row claiming 2^31 map entries, at the expansion service.
  read = ReadFromKafka(consumer_config={'bootstrap.servers': broker},
                       topics=['t'], expansion_service='localhost:1')
  field = schema_pb2.Field(name='consumer_config', type=schema_pb2.FieldType(
      map_type=schema_pb2.MapType(
          key_type=schema_pb2.FieldType(atomic_type=schema_pb2.STRING),
          value_type=schema_pb2.FieldType(atomic_type=schema_pb2.STRING))))
  payload = external_transforms_pb2.ExternalConfigurationPayload(
      schema=schema_pb2.Schema(id='huge', fields=[field]),
      payload=bytes([1, 0]) + (2**31 - 1).to_bytes(4, 'big') + b'\0' * 8)
  expansion = beam_expansion_api_pb2_grpc.ExpansionServiceStub(
      grpc.insecure_channel('localhost:%d' % server.expansion_port))
  request = beam_expansion_api_pb2.ExpansionRequest(
      transform=beam_runner_api_pb2.PTransform(
          unique_name='huge', spec=beam_runner_api_pb2.FunctionSpec(
              urn=read._urn, payload=payload.SerializeToString())),
      namespace='safety')
  with pytest.raises(grpc.RpcError) as e:
    expansion.Expand(request, metadata=AUTH, timeout=30)
  assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
  assert 'claims 2147483647 entries' in e.value.details()

  # Still serving: a good submission is prepared.
  ok = _prepare(server, AUTH, bootstrap_servers=broker,
                application_id=make_app_id('still-serving'))
  assert ok.preparation_id
  assert server.process.poll() is None


class _Release(beam.DoFn):
  """Signals once it runs, then waits to be released (LOOPBACK: the DoFn
  runs in this process, so the test can hold the bundle open)."""
  started = threading.Event()
  release = threading.Event()

  def process(self, x):
    _Release.started.set()
    _Release.release.wait(120)
    yield x


def test_portable_runner_with_the_token_runs_and_a_second_claim_on_its_worker_is_refused(
    server, broker, tmp_path, worker_ids):
  # The worker id the runner hands the LOOPBACK pool, to play an attacker
  # who stole it.
  seen = worker_ids
  out = tmp_path / 'out.txt'
  app = make_app_id('token-run')
  options = PipelineOptions([
      '--runner=PortableRunner', '--job_endpoint=%s' % server.endpoint,
      '--environment_type=LOOPBACK', '--job_server_token=%s' % TOKEN,
      '--bootstrap_servers=%s' % broker, '--application_id=%s' % app,
      '--kafka_property=sasl.password=%s' % PLANTED,
      '--job_server_timeout=60'])
  p = beam.Pipeline(options=options)
  _ = (p | beam.Create(['a', 'b', 'c']) | beam.ParDo(_Release())
       | beam.Map(lambda x, path=str(out): open(path, 'a').write(x + '\n')))
  result = p.run()
  try:
    assert _Release.started.wait(120), server.log()[-3000:]
    assert seen, 'no StartWorker reached the pool'
    worker_id = seen[0]
    assert worker_id not in server.log(), 'the worker secret is logged'
    fn = grpc.insecure_channel(server.fn_api())
    control = beam_fn_api_pb2_grpc.BeamFnControlStub(fn)
    code, details = _code(lambda: next(iter(control.Control(
        iter([]), metadata=[('worker_id', worker_id)], timeout=10))))
    assert code == grpc.StatusCode.ALREADY_EXISTS, details
    data = beam_fn_api_pb2_grpc.BeamFnDataStub(fn)
    code, details = _code(lambda: next(iter(data.Data(
        iter([beam_fn_api_pb2.Elements()]),
        metadata=[('worker_id', worker_id)], timeout=10))))
    assert code == grpc.StatusCode.ALREADY_EXISTS, details
    # What Provision hands this worker holds no secret of the runner's.
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.portability.api import beam_provision_api_pb2_grpc
    info = beam_provision_api_pb2_grpc.ProvisionServiceStub(fn).GetProvisionInfo(
        beam_provision_api_pb2.GetProvisionInfoRequest(),
        metadata=[('worker_id', worker_id)], timeout=10).info
    provisioned = str(info.pipeline_options)
    assert app in provisioned, 'the options are provisioned'
    assert PLANTED not in provisioned and TOKEN not in provisioned, provisioned
  finally:
    _Release.release.set()
  result.wait_until_finish(duration=120 * 1000)
  assert str(result.state) == 'DONE'
  assert sorted(out.read_text().split()) == ['a', 'b', 'c']
  # Secrets: not in GetJobs, not in the server's log.
  jobs = server.jobs.GetJobs(beam_job_api_pb2.GetJobsRequest(), metadata=AUTH,
                             timeout=10)
  assert jobs.job_info, 'GetJobs lists the job'
  listed = str(jobs)
  assert PLANTED not in listed and TOKEN not in listed
  assert 'sasl.password' in listed, 'the property is listed, its value hidden'
  log = server.log()
  assert PLANTED not in log and TOKEN not in log


def _streaming_count(server, broker, source, sink, app):
  from apache_beam.io.kafka import WriteToKafka
  from apache_beam.transforms import window
  from conftest import read_from_start
  options = PipelineOptions([
      '--runner=PortableRunner', '--job_endpoint=%s' % server.endpoint,
      '--environment_type=LOOPBACK', '--job_server_token=%s' % TOKEN,
      '--bootstrap_servers=%s' % broker, '--application_id=%s' % app,
      '--streaming', '--job_server_timeout=60'])
  p = beam.Pipeline(options=options)
  _ = (p
       | read_from_start(server, broker, source)
       | beam.Map(lambda kv: (kv[1].decode(), 1))
       | beam.WindowInto(window.FixedWindows(2))
       | beam.CombinePerKey(sum)
       | beam.Map(lambda kv: (kv[0].encode(), b'%d' % kv[1])).with_output_types(
           typing.Tuple[bytes, bytes])
       | WriteToKafka(producer_config={'bootstrap.servers': broker},
                      topic=sink,
                      expansion_service='localhost:%d' % server.expansion_port))
  return p.run()


def _counted(broker, sink, want, timeout=120):
  from kafka_topics import read_committed
  total, deadline = 0, time.monotonic() + timeout
  while total < want and time.monotonic() < deadline:
    total = sum(int(v) for _, _, v in read_committed(
        broker, sink, 1000, timeout=3, settle=0.5))
  return total


def test_sigterm_cancels_running_jobs_and_a_restart_resumes_from_clean_checkpoints(
    binary, broker, tmp_path):
  from kafka_topics import create_topic, produce, unique_topic
  source, sink = unique_topic('term-in'), unique_topic('term-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  produce(broker, source, [(i % 2, None, b'red', None) for i in range(4)])
  app = make_app_id('term')
  first = _Server(binary, tmp_path / 'first')
  try:
    _streaming_count(first, broker, source, sink, app)
    assert _counted(broker, sink, 4) == 4, first.log()[-3000:]
  finally:
    first.process.send_signal(subprocess.signal.SIGTERM)
    code = first.process.wait(60)
  log = first.log()
  assert code == 0, log[-3000:]
  assert 'cancelling 1 running job' in log, log[-3000:]
  state = first.state_root / app
  checkpoints = sorted(state.glob('*/checkpoint'))
  assert checkpoints, 'no store was checkpointed: %s' % list(state.rglob('*'))

  # The same application on a new job server over the same state root.
  second = _Server(binary, tmp_path / 'second', state_root=first.state_root)
  try:
    produce(broker, source, [(i % 2, None, b'red', None) for i in range(4)])
    _streaming_count(second, broker, source, sink, app)
    assert _counted(broker, sink, 8) == 8, second.log()[-3000:]
    log = second.log()
    assert 'no clean checkpoint' not in log and 'rebuilding' not in log, log
  finally:
    second.stop()


def test_tls_with_the_token_as_call_credentials(binary, tmp_path):
  cert, key = tmp_path / 'cert.pem', tmp_path / 'key.pem'
  subprocess.run(
      ['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1',
       '-keyout', str(key), '-out', str(cert), '-subj', '/CN=localhost',
       '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'],
      check=True, capture_output=True)
  server = _Server(binary, tmp_path / 'tls',
                   extra=['--tls-cert', str(cert), '--tls-key', str(key)])
  try:
    creds = grpc.composite_channel_credentials(
        grpc.ssl_channel_credentials(root_certificates=cert.read_bytes()),
        grpc.access_token_call_credentials(TOKEN))
    secure = beam_job_api_pb2_grpc.JobServiceStub(
        grpc.secure_channel(server.endpoint, creds))
    # The token rides as call credentials (authorization: Bearer ...).
    jobs = secure.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=10)
    assert list(jobs.job_info) == []
    # TLS without the token, and plaintext, are refused.
    no_token = beam_job_api_pb2_grpc.JobServiceStub(grpc.secure_channel(
        server.endpoint,
        grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())))
    code, _ = _code(lambda: no_token.GetJobs(
        beam_job_api_pb2.GetJobsRequest(), timeout=10))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    code, _ = _code(lambda: server.jobs.GetJobs(
        beam_job_api_pb2.GetJobsRequest(), metadata=AUTH, timeout=5))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert 'over TLS' in server.log()
  finally:
    server.stop()


def test_a_harness_cannot_fetch_a_file_the_client_named_but_never_staged(
    server, broker, worker_ids):
  """A client lists the server's token file as a dependency, skips
  staging and runs: its (real) worker pool gets the worker id, yet
  retrieval serves only files staged under the artifacts dir."""
  seen = worker_ids
  address, pool = worker_pool_main.BeamFnExternalWorkerPoolServicer.start()
  try:
    p = beam.Pipeline()
    _ = p | beam.Create([1]) | beam.Map(lambda x: x)
    secret = str(server.root / 'token')
    env = environments.ExternalEnvironment(
        address, artifacts=[beam_runner_api_pb2.ArtifactInformation(
            type_urn='beam:artifact:type:file:v1',
            type_payload=beam_runner_api_pb2.ArtifactFilePayload(
                path=secret).SerializeToString())])
    proto = p.to_runner_api(default_environment=env)
    prepared = _prepare(server, AUTH, pipeline=proto, bootstrap_servers=broker,
                        application_id=make_app_id('exfiltrate'))
    run = server.jobs.Run(beam_job_api_pb2.RunJobRequest(
        preparation_id=prepared.preparation_id), metadata=AUTH, timeout=30)
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline:
      time.sleep(0.1)
    assert seen, server.log()[-3000:]
    retrieval = beam_artifact_api_pb2_grpc.ArtifactRetrievalServiceStub(
        grpc.insecure_channel(
            server.address('artifact retrieval for SDK harnesses')))
    artifact = beam_runner_api_pb2.ArtifactInformation(
        type_urn='beam:artifact:type:file:v1',
        type_payload=beam_runner_api_pb2.ArtifactFilePayload(
            path=secret).SerializeToString())
    code, details = _code(lambda: list(retrieval.GetArtifact(
        beam_artifact_api_pb2.GetArtifactRequest(artifact=artifact),
        metadata=[('worker_id', seen[0])], timeout=10)))
    assert code == grpc.StatusCode.PERMISSION_DENIED, details
    server.jobs.Cancel(beam_job_api_pb2.CancelJobRequest(job_id=run.job_id),
                       metadata=AUTH, timeout=10)
  finally:
    pool.stop(None)
