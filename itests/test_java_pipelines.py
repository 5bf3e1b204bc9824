"""Java SDK pipelines (Beam's Java SDK, itests/java) submitted to the job server
by our BeamKafkaRunner, with the SDK harnesses as threads of the submitting JVM
(an EXTERNAL environment served by Beam's ExternalWorkerService): no Docker,
no artifacts. Java and Maven build them (scripts/java-pipelines.sh)."""

import collections
import subprocess

import pytest

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


def test_java_pipeline_with_shuffles_side_input_state_and_timers(
    java_classpath, job_server, broker, tmp_path):
  out = tmp_path / 'out'
  run = _run_java(java_classpath, 'dev.beamkafka.examples.JavaPipelineIT', [
      '--jobEndpoint=%s' % job_server.endpoint,
      '--bootstrapServers=%s' % broker,
      '--applicationId=%s' % make_app_id('java-pipeline'),
      '--stateDir=%s' % (tmp_path / 'state'),
      '--events=%s' % ','.join('%s:%d:%d' % e for e in EVENTS),
      '--output=%s' % (out / 'result'),
  ])
  assert run.returncode == 0, _failure(run, job_server)
  assert 'state DONE' in run.stdout.splitlines()
  # The user counter of every event, attempted and committed alike.
  assert 'metric events attempted=%d committed=%d' % (len(EVENTS), len(EVENTS)) in run.stdout
  written = sorted(line for f in sorted(out.glob('result*.txt')) for line in f.read_text().splitlines())
  assert written == _expected_lines(EVENTS)


def test_unbounded_java_pipeline_shows_live_metrics_and_cancels(
    java_classpath, job_server, broker, tmp_path):
  run = _run_java(java_classpath, 'dev.beamkafka.examples.JavaStreamingIT', [
      '--jobEndpoint=%s' % job_server.endpoint,
      '--bootstrapServers=%s' % broker,
      '--applicationId=%s' % make_app_id('java-streaming'),
      '--stateDir=%s' % (tmp_path / 'state'),
      '--minTicks=5',
  ])
  assert run.returncode == 0, _failure(run, job_server)
  lines = run.stdout.splitlines()
  ticks = [int(line.split()[1]) for line in lines if line.startswith('ticks ')]
  assert ticks and ticks[0] >= 5, run.stdout
  assert 'state CANCELLED' in lines
