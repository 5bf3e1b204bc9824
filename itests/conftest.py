"""Fixtures of the beam-kafka integration tests.

Everything here is real: a Kafka broker (scripts/kafka.sh, KRaft), the
beam-kafka binary (found like the runner finds it) and Beam's Python SDK.

Environment:
  BEAM_KAFKA_TEST_BOOTSTRAP  broker address (default localhost:19092); when
                             nothing answers there and the host is local, the
                             session starts a broker on that port with
                             scripts/kafka.sh and stops it at the end.
  BEAM_KAFKA_BINARY          the binary to test (else: see beam_kafka.find_binary)
  BEAM_KAFKA_ITEST_TIMEOUT   per-test wall-time limit in seconds (default 240)
"""

import contextlib
import dataclasses
import faulthandler
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import List
from typing import Optional

import grpc
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

try:
  import beam_kafka  # noqa: F401  (installed editable by scripts/python-env.sh)
except ImportError:
  sys.path.insert(0, str(REPO_ROOT / 'python'))
  import beam_kafka  # noqa: F401

from beam_kafka import runner as beam_kafka_runner

DEFAULT_BOOTSTRAP = 'localhost:19092'
DEFAULT_TEST_TIMEOUT_SECS = float(
    os.environ.get('BEAM_KAFKA_ITEST_TIMEOUT', '240'))
# Bounds every Job API call the Python client makes, including the state
# stream that wait_until_finish() reads: no test job may run longer.
JOB_SERVER_TIMEOUT_SECS = 120
JOB_SERVER_STARTUP_SECS = 60

_JOB_SERVER_LOG = pytest.StashKey[Path]()
_LOG_OFFSET = pytest.StashKey[int]()

# ---------------------------------------------------------------------------
# Per-test time limit (pytest-timeout is not installed).


class ITestTimeout(Exception):
  """A test exceeded its wall-time limit."""


def pytest_configure(config):
  config.addinivalue_line(
      'markers',
      'timeout_seconds(n): wall-time limit of the test in seconds '
      '(default: BEAM_KAFKA_ITEST_TIMEOUT or 240)')


@pytest.fixture(autouse=True)
def _per_test_timeout(request):
  marker = request.node.get_closest_marker('timeout_seconds')
  seconds = float(marker.args[0]) if marker else DEFAULT_TEST_TIMEOUT_SECS
  if (threading.current_thread() is not threading.main_thread() or
      not hasattr(signal, 'SIGALRM')):
    yield
    return

  def on_alarm(signum, frame):
    raise ITestTimeout(
        '%s exceeded its time limit of %.0f s' % (request.node.nodeid, seconds))

  previous = signal.signal(signal.SIGALRM, on_alarm)
  signal.setitimer(signal.ITIMER_REAL, seconds)
  # Last resort if the alarm cannot interrupt a blocked call: dump every
  # thread's stack and end the session instead of hanging forever.
  faulthandler.dump_traceback_later(seconds + 60, exit=True)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    faulthandler.cancel_dump_traceback_later()
    signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------
# Broker


def _host_port(address):
  host, _, port = address.strip().rpartition(':')
  return (host or 'localhost').strip('[]'), int(port)


def broker_answers(bootstrap: str, timeout: float = 2.0) -> bool:
  for address in bootstrap.split(','):
    try:
      with socket.create_connection(_host_port(address), timeout=timeout):
        return True
    except OSError:
      continue
  return False


@pytest.fixture(scope='session')
def broker():
  """The bootstrap address of a running Kafka broker."""
  bootstrap = os.environ.get('BEAM_KAFKA_TEST_BOOTSTRAP', DEFAULT_BOOTSTRAP)
  if broker_answers(bootstrap):
    yield bootstrap
    return
  host, port = _host_port(bootstrap.split(',')[0])
  if len(bootstrap.split(',')) > 1 or host not in ('localhost', '127.0.0.1'):
    pytest.fail(
        'No Kafka broker answers at %s (BEAM_KAFKA_TEST_BOOTSTRAP) and it is '
        'not a local address this session could start one on.' % bootstrap,
        pytrace=False)
  script = REPO_ROOT / 'scripts' / 'kafka.sh'
  started = subprocess.run([str(script), 'start', str(port)],
                           stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT,
                           timeout=900,
                           check=False)
  if started.returncode != 0:
    pytest.fail(
        '%s start %d failed (exit %d):\n%s' % (
            script,
            port,
            started.returncode,
            started.stdout.decode(errors='replace')),
        pytrace=False)
  try:
    yield bootstrap
  finally:
    subprocess.run([str(script), 'stop', str(port)],
                   stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT,
                   timeout=120,
                   check=False)


# ---------------------------------------------------------------------------
# Binary and job server


@pytest.fixture(scope='session')
def binary():
  """The beam-kafka executable under test, found as the runner finds it."""
  try:
    return beam_kafka_runner.find_binary()
  except beam_kafka_runner.BinaryNotFoundError as e:
    pytest.fail(str(e), pytrace=False)


def _ephemeral_range():
  try:
    low, high = open('/proc/sys/net/ipv4/ip_local_port_range').read().split()
    return int(low), int(high)
  except (OSError, ValueError):
    return 32768, 60999


# Test brokers listen on 19092-19094, 29092-29094 and 29500-29502.
_FREE_PORT_RANGE = (20000, 29000)


def free_ports(count: int) -> List[int]:
  """Ports a server may bind, outside the kernel's ephemeral range.

  A port the kernel hands out for bind(0) is also one it hands out to
  outgoing connections (the Kafka clients of a running job make many), so
  one picked that way can be taken before the server binds it. Ports below
  the ephemeral range are only ever taken by servers.
  """
  low, high = _FREE_PORT_RANGE
  ephemeral_low, _ = _ephemeral_range()
  high = min(high, ephemeral_low)
  rng = random.Random(os.getpid() ^ time.monotonic_ns())
  chosen: List[int] = []
  for _ in range(2000):
    if len(chosen) == count:
      return chosen
    port = rng.randrange(low, high)
    if port in chosen:
      continue
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
      try:
        s.bind(('127.0.0.1', port))
      except OSError:
        continue
    chosen.append(port)
  raise RuntimeError('no %d free ports in %d-%d' % (count, low, high))


@dataclasses.dataclass
class JobServer:
  """A `beam-kafka job-server` process started by the test session."""
  endpoint: str
  job_port: int
  artifact_port: int
  expansion_port: int
  # <root>/outer/inner/artifacts: two levels of directories that belong to
  # this server only, so an escape via ../.. stays observable inside <root>.
  artifacts_dir: Path
  root: Path
  log_path: Path
  process: subprocess.Popen

  def log_text(self, start: int = 0) -> str:
    try:
      with open(self.log_path, 'rb') as f:
        f.seek(start)
        return f.read().decode('utf-8', 'replace')
    except OSError:
      return ''


def _tail(text: str, lines: int = 300) -> str:
  return '\n'.join(text.splitlines()[-lines:])


@contextlib.contextmanager
def started_job_server(binary, root: Path, extra_args=()):
  """Starts a `beam-kafka job-server` under `root` that trusts its clients
  (plus `extra_args`), waits until it accepts gRPC, and stops it after;
  fails the test if it exited by itself meanwhile."""
  artifacts_dir = root / 'outer' / 'inner' / 'artifacts'
  artifacts_dir.mkdir(parents=True)
  log_path = root / 'job-server.log'
  job_port, artifact_port, expansion_port = free_ports(3)
  cmd = [
      binary,
      'job-server',
      '--job-port',
      str(job_port),
      '--artifact-port',
      str(artifact_port),
      '--expansion-port',
      str(expansion_port),
      '--artifacts-dir',
      str(artifacts_dir),
      # Tests choose environments, state dirs and client properties freely;
      # test_job_server_safety.py checks the default policy on its own server.
      '--trust-clients',
  ] + list(extra_args)
  env = dict(os.environ)
  env.setdefault('NO_COLOR', '1')
  with open(log_path, 'wb') as log:
    process = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        env=env)
  server = JobServer(
      endpoint='localhost:%d' % job_port,
      job_port=job_port,
      artifact_port=artifact_port,
      expansion_port=expansion_port,
      artifacts_dir=artifacts_dir,
      root=root,
      log_path=log_path,
      process=process)

  channel = grpc.insecure_channel(server.endpoint)
  ready = grpc.channel_ready_future(channel)
  deadline = time.monotonic() + JOB_SERVER_STARTUP_SECS
  try:
    while True:
      if process.poll() is not None:
        pytest.fail(
            'The job server exited with code %s during start-up.\n'
            'Command: %s\nLog (%s):\n%s' % (
                process.returncode,
                ' '.join(cmd),
                log_path,
                _tail(server.log_text())),
            pytrace=False)
      try:
        ready.result(timeout=0.25)
        break
      except grpc.FutureTimeoutError:
        if time.monotonic() > deadline:
          process.kill()
          pytest.fail(
              'The job server did not accept gRPC connections on %s within '
              '%d s.\nCommand: %s\nLog (%s):\n%s' % (
                  server.endpoint,
                  JOB_SERVER_STARTUP_SECS,
                  ' '.join(cmd),
                  log_path,
                  _tail(server.log_text())),
              pytrace=False)
  finally:
    channel.close()

  yield server

  died_early = process.poll()
  if process.poll() is None:
    process.terminate()
    try:
      process.wait(15)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()
  if died_early is not None:
    pytest.fail(
        'The job server exited by itself (code %s) during the session.\n'
        'Log (%s):\n%s' % (died_early, log_path, _tail(server.log_text())),
        pytrace=False)


@pytest.fixture(scope='session')
def job_server(binary, tmp_path_factory, request):
  root = tmp_path_factory.mktemp('jobserver')
  request.config.stash[_JOB_SERVER_LOG] = root / 'job-server.log'
  with started_job_server(binary, root) as server:
    yield server


def go_pipeline(name: str, package: str = '') -> str:
  """Builds the Go program itests/go/<name> (or the Go `package`, e.g. one
  of Beam's examples, as `name`) with scripts/go-pipelines.sh and returns
  its path."""
  built = subprocess.run(['bash', str(REPO_ROOT / 'scripts' / 'go-pipelines.sh'), name] + ([package] if package else []),
                         capture_output=True, text=True, timeout=1200)
  assert built.returncode == 0, built.stderr[-4000:]
  return built.stdout.strip().splitlines()[-1]


def java_jars(*args) -> str:
  """A directory of Beam's Java jars, fetched by scripts/java-harness.sh:
  the Java SDK harness, or with '--expansion-service' Beam's Java
  expansion service."""
  run = subprocess.run(['bash', str(REPO_ROOT / 'scripts' / 'java-harness.sh')] + list(args),
                       capture_output=True, text=True, timeout=1200)
  assert run.returncode == 0, run.stderr[-4000:]
  return run.stdout.strip().splitlines()[-1]


@pytest.fixture(scope='session')
def sdk_image_job_server(binary, tmp_path_factory):
  """A job server that runs environments naming Beam's SDK images as
  processes of its own: Java's harness (--java-harness-dir) and Python's
  (--python-harness-command, beam_kafka.boot)."""
  harness = java_jars()
  with started_job_server(binary, tmp_path_factory.mktemp('sdk-image-job-server'),
                          ['--java-harness-dir', harness,
                           '--python-harness-command', '%s -m beam_kafka.boot' % sys.executable]) as server:
    yield server


@pytest.fixture(scope='session', autouse=True)
def _stop_runner_job_servers():
  """Stops the job servers KafkaStreamsRunner started in this process."""
  yield
  beam_kafka_runner.stop_job_servers()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
  log_path = item.config.stash.get(_JOB_SERVER_LOG, None)
  try:
    offset = log_path.stat().st_size if log_path else 0
  except OSError:
    offset = 0
  item.stash[_LOG_OFFSET] = offset


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  outcome = yield
  report = outcome.get_result()
  if report.when != 'call' or not report.failed:
    return
  log_path = item.config.stash.get(_JOB_SERVER_LOG, None)
  if not log_path or not log_path.exists():
    return
  with open(log_path, 'rb') as f:
    f.seek(item.stash.get(_LOG_OFFSET, 0))
    text = f.read().decode('utf-8', 'replace')
  report.sections.append(
      ('beam-kafka job-server log during this test (%s)' % log_path,
       _tail(text) or '(nothing)'))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
  log_path = config.stash.get(_JOB_SERVER_LOG, None)
  if exitstatus == 0 or not log_path or not log_path.exists():
    return
  terminalreporter.section('beam-kafka job-server log (tail)')
  terminalreporter.write_line('full log: %s' % log_path)
  terminalreporter.write_line(
      _tail(log_path.read_bytes().decode('utf-8', 'replace')))


# ---------------------------------------------------------------------------
# Helpers for tests


def make_app_id(name: str) -> str:
  """A unique application id: itest-<test>-<uuid8> (legal in topic names)."""
  safe = re.sub(r'[^A-Za-z0-9._-]+', '-', name).strip('-.')[:40] or 'test'
  return 'itest-%s-%s' % (safe, uuid.uuid4().hex[:8])


@pytest.fixture
def app_id(request):
  return make_app_id(request.node.name)


def kafka_args(broker: str,
               app_id: Optional[str],
               state_dir: Optional[Path] = None) -> List[str]:
  """The runner options every test pipeline passes."""
  args = [
      '--bootstrap_servers=%s' % broker,
      '--job_server_timeout=%d' % JOB_SERVER_TIMEOUT_SECS,
  ]
  if app_id is not None:
    args.append('--application_id=%s' % app_id)
  if state_dir is not None:
    args.append('--state_dir=%s' % state_dir)
  return args


# Beam's client runs `pip freeze` at every submission (half a second here)
# to stage a list of its packages, which no runner needs to run a pipeline;
# the tests skip it (test_example and the wheel's check keep Beam's default).
NO_SUBMISSION_ENVIRONMENT = 'disable_logging_submission_environment'


def portable_args(job_server: JobServer) -> List[str]:
  """Submit with Beam's own PortableRunner to the session's job server."""
  return [
      '--runner=PortableRunner',
      '--job_endpoint=%s' % job_server.endpoint,
      '--environment_type=LOOPBACK',
      '--experiments=%s' % NO_SUBMISSION_ENVIRONMENT,
  ]


class Collector:
  """Records elements as a side effect, one line each, in a file.

  Under LOOPBACK the DoFns run in this process, so the file is readable once
  the pipeline is DONE. Lines are compared as a list: duplicates count.
  """
  def __init__(self, path: Path):
    self.path = path

  def recorder(self):
    path = str(self.path)

    def record(element):
      with open(path, 'a', encoding='utf-8') as f:
        f.write('%s\n' % (element, ))
      return element

    return record

  def lines(self) -> List[str]:
    if not self.path.exists():
      return []
    return self.path.read_text(encoding='utf-8').splitlines()

  def exists(self) -> bool:
    return self.path.exists()


@pytest.fixture
def collector(tmp_path):
  return Collector(tmp_path / 'collected.txt')


def read_from_start(job_server: JobServer, broker: str, topic: str,
                    offset_reset: str = 'earliest', **kwargs):
  """Beam's ReadFromKafka of `topic` from its first offset (or where
  `offset_reset` says), expanded by the session's job server; `kwargs` go
  to ReadFromKafka."""
  from apache_beam.io.kafka import ReadFromKafka
  return ReadFromKafka(
      consumer_config={
          'bootstrap.servers': broker, 'auto.offset.reset': offset_reset
      },
      topics=[topic],
      expansion_service='localhost:%d' % job_server.expansion_port,
      **kwargs)


def write_to(job_server: JobServer, broker: str, topic: str, **kwargs):
  """Beam's WriteToKafka to `topic` on the test broker, expanded by the
  session's job server; `kwargs` go to WriteToKafka."""
  from apache_beam.io.kafka import WriteToKafka
  return WriteToKafka(
      producer_config={'bootstrap.servers': broker},
      topic=topic,
      expansion_service='localhost:%d' % job_server.expansion_port,
      **kwargs)
