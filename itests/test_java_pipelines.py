"""Java SDK pipelines (Beam's Java SDK, itests/java) submitted to the job server
by our BeamKafkaRunner, with the SDK harnesses as threads of the submitting JVM
(an EXTERNAL environment served by Beam's ExternalWorkerService): no Docker,
no artifacts. Java and Maven build them (scripts/java-pipelines.sh)."""

import collections
import subprocess
import time

import grpc
import pytest
from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.portability.api import beam_job_api_pb2_grpc

from conftest import REPO_ROOT
from conftest import make_app_id

# user, amount, event time (millis): alice and dave tie for the largest total.
EVENTS = [
    ('alice', 3, 1000), ('bob', 5, 2000), ('alice', 7, 3000), ('carol', 1, 500),
    ('bob', 2, 9000), ('dave', 10, 4000), ('erin', 4, 120000), ('erin', 4, 7000),
]
TIMER_DELAY_MS = 60 * 1000  # JavaPipelineIT.TIMER_DELAY


@pytest.fixture(scope='module')
def java_classpath():
  """Built once per module, outside the per-test time limit: a first build
  downloads Beam's Java SDK from Maven Central."""
  built = subprocess.run(['bash', str(REPO_ROOT / 'scripts' / 'java-pipelines.sh')],
                         capture_output=True, text=True, timeout=1800)
  assert built.returncode == 0, built.stderr[-4000:]
  return built.stdout.strip().splitlines()[-1]


def _run_java(classpath, main, args, timeout=300):
  return subprocess.run(['java', '-cp', classpath, main] + args,
                        capture_output=True, text=True, timeout=timeout)


def _expected_lines(events):
  """JavaPipelineIT's output, from the events by plain Python."""
  amounts, last = collections.defaultdict(list), {}
  for user, amount, millis in events:
    amounts[user].append(amount)
    last[user] = max(last.get(user, millis), millis)
  largest = max(sum(a) for a in amounts.values())
  lines = []
  for user, a in amounts.items():
    lines.append('total %s %d top=%s' % (user, sum(a), 'true' if sum(a) == largest else 'false'))
    lines.append('group %s %s' % (user, ','.join(str(x) for x in sorted(a))))
    lines.append('timer %s sum=%d count=%d at=%d' % (user, sum(a), len(a), last[user] + TIMER_DELAY_MS))
  return sorted(lines)


def _failure(run, job_server):
  return 'the Java pipeline failed (exit %d):\n%s\njob server:\n%s' % (
      run.returncode, run.stderr[-6000:], job_server.log_text()[-4000:])


def _run_pipeline_it(java_classpath, job_server, broker, tmp_path, extra=()):
  out = tmp_path / 'out'
  run = _run_java(java_classpath, 'dev.beamkafka.examples.JavaPipelineIT', [
      '--jobEndpoint=%s' % job_server.endpoint,
      '--bootstrapServers=%s' % broker,
      '--applicationId=%s' % make_app_id('java-pipeline'),
      '--stateDir=%s' % (tmp_path / 'state'),
      '--events=%s' % ','.join('%s:%d:%d' % e for e in EVENTS),
      '--output=%s' % (out / 'result'),
  ] + list(extra))
  assert run.returncode == 0, _failure(run, job_server)
  assert 'state DONE' in run.stdout.splitlines()
  # Beam's harness leaves channels to the garbage collector; gRPC's report of
  # each, a stack trace, is silenced rather than printed with every job.
  assert 'was garbage collected' not in run.stderr
  # The user counter of every event, attempted and committed alike.
  assert 'metric events attempted=%d committed=%d' % (len(EVENTS), len(EVENTS)) in run.stdout
  written = sorted(line for f in sorted(out.glob('result*.txt')) for line in f.read_text().splitlines())
  assert written == _expected_lines(EVENTS)


def test_java_pipeline_with_shuffles_side_input_state_and_timers(
    java_classpath, job_server, broker, tmp_path):
  _run_pipeline_it(java_classpath, job_server, broker, tmp_path)


def test_java_pipeline_on_harnesses_the_job_server_starts(
    java_classpath, sdk_image_job_server, broker, tmp_path):
  """Beam's Java SDK image as the environment: the program's classpath is
  staged, and the job server runs Java's harness with it."""
  log_start = len(sdk_image_job_server.log_text())
  _run_pipeline_it(java_classpath, sdk_image_job_server, broker, tmp_path, ['--defaultEnvironmentType=DOCKER'])
  assert 'Java harness: SDK Fn Harness started' in sdk_image_job_server.log_text(log_start)


def _run_streaming_it(java_classpath, job_server, broker, tmp_path, name, extra):
  return _run_java(java_classpath, 'dev.beamkafka.examples.JavaStreamingIT', [
      '--jobEndpoint=%s' % job_server.endpoint,
      '--bootstrapServers=%s' % broker,
      '--applicationId=%s' % make_app_id(name),
      '--stateDir=%s' % (tmp_path / 'state'),
  ] + extra)


def test_unbounded_java_pipeline_shows_live_metrics_and_cancels(
    java_classpath, job_server, broker, tmp_path):
  run = _run_streaming_it(java_classpath, job_server, broker, tmp_path, 'java-streaming', ['--minTicks=5'])
  assert run.returncode == 0, _failure(run, job_server)
  lines = run.stdout.splitlines()
  ticks = [int(line.split()[1]) for line in lines if line.startswith('ticks ')]
  assert ticks and ticks[0] >= 5, run.stdout
  assert 'state CANCELLED' in lines


def _ticks(stub, job_id):
  """The attempted count of JavaStreamingIT's counter (a varint sum)."""
  metrics = stub.GetJobMetrics(beam_job_api_pb2.GetJobMetricsRequest(job_id=job_id)).metrics
  total = 0
  for m in metrics.attempted:
    if m.labels.get('NAME') == 'ticks':
      value, shift = 0, 0
      for byte in m.payload:
        value |= (byte & 0x7f) << shift
        shift += 7
      total += value
  return total


def _wait_for(predicate, timeout, what):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if predicate():
      return
    time.sleep(0.5)
  pytest.fail('timed out waiting for %s' % what)


def test_a_streaming_java_job_outlives_the_program_that_submitted_it(
    java_classpath, sdk_image_job_server, binary, broker, tmp_path):
  run = _run_streaming_it(java_classpath, sdk_image_job_server, broker, tmp_path, 'java-detached',
                          ['--defaultEnvironmentType=DOCKER', '--detach'])
  assert run.returncode == 0, _failure(run, sdk_image_job_server)
  job_id = [line.split()[1] for line in run.stdout.splitlines() if line.startswith('job ')][0]
  channel = grpc.insecure_channel(sdk_image_job_server.endpoint)
  stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
  try:
    # The submitting JVM has exited: the job still counts, on and on.
    _wait_for(lambda: _ticks(stub, job_id) >= 5, 120, 'the detached job to count 5 ticks')
    seen = _ticks(stub, job_id)
    _wait_for(lambda: _ticks(stub, job_id) >= seen + 20, 60, 'the detached job to count on')
    state = stub.GetState(beam_job_api_pb2.GetJobStateRequest(job_id=job_id)).state
    assert state == beam_job_api_pb2.JobState.RUNNING
    # Cancelled by an operator, with `beam-kafka cancel`, which waits for the end.
    out = subprocess.run([binary, 'cancel', '--endpoint', sdk_image_job_server.endpoint, job_id],
                         capture_output=True, text=True, timeout=180, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == 'job %s: CANCELLED' % job_id
    state = stub.GetState(beam_job_api_pb2.GetJobStateRequest(job_id=job_id)).state
    assert state == beam_job_api_pb2.JobState.CANCELLED
  finally:
    channel.close()
  # Its harnesses went with it.
  _wait_for(lambda: subprocess.run(['pgrep', '-f', 'org.apache.beam.fn.harness.FnHarness'],
                                   capture_output=True, check=False).returncode == 1,
            30, "the job's Java harnesses to stop")


def test_a_bad_option_is_named_as_java_spells_it(java_classpath, job_server, broker, tmp_path):
  run = _run_java(java_classpath, 'dev.beamkafka.examples.JavaPipelineIT', [
      '--jobEndpoint=%s' % job_server.endpoint,
      '--bootstrapServers=%s' % broker,
      '--internalParallelism=0',
      '--events=a:1:1000',
      '--output=%s' % (tmp_path / 'out' / 'result'),
  ])
  assert run.returncode != 0
  assert '--internalParallelism' in run.stderr, run.stderr[-3000:]
  assert '--internal_parallelism' not in run.stderr
