"""Beam's own PortableRunnerTest suite, run against `beam-kafka job-server`.

Each test class below subclasses Beam's
`apache_beam.runners.portability.portable_runner_test.PortableRunnerTest` the
way Beam's Flink harness (`flink_runner_test.py`) does: the suite starts the
job server itself as a subprocess (`_use_subprocesses`, `_subprocess_command`),
the SDK harness runs in this process (LOOPBACK), and every pipeline gets our
runner's options: the test broker, a fresh application id, and the internal
parallelism. The suite runs twice, once per mode:

  BatchSuiteTest       streaming=False
  StreamingSuiteTest   streaming=True

Tests that need a runner feature not built yet are skipped with the feature
named; the table is in `skips.py`. Every other test must pass.

Environment:
  BEAM_KAFKA_TEST_BOOTSTRAP       broker (see ../conftest.py: started when none answers)
  BEAM_KAFKA_BINARY               the binary (else found as beam_kafka finds it)
  BEAM_KAFKA_SUITE_PARALLELISM    --internal_parallelism of every pipeline (default 1)
  BEAM_KAFKA_SUITE_OPTIONS        more runner options, "name=value ..." (e.g.
                                  "max_bundle_size=1 processing_guarantee=at_least_once")
  BEAM_KAFKA_SUITE_IGNORE_SKIPS   1: run the tests skips.py would skip (to find
                                  the ones a new feature made pass)
  BEAM_KAFKA_SUITE_TEST_TIMEOUT   wall-time limit of one test in seconds (default
                                  180); a job the test leaves running is cancelled
  BEAM_KAFKA_SUITE_JOB_TIMEOUT    --job_server_timeout in seconds (default 120):
                                  the deadline of each Job API call

Run: scripts/beam-suite.sh (both modes, prints per-mode counts), or
  "$(scripts/python-env.sh)" -m pytest itests/beam_suite -rs
"""

import collections
import logging
import os
import re
import subprocess
import time
import uuid

import pytest

# Beam's suite module imports Beam's test-only dependencies (the `test` extra
# of apache-beam). Without them, skip this module instead of failing the
# collection of every integration test.
for _module, _package in (('hamcrest', 'PyHamcrest'), ('tenacity', 'tenacity')):
  pytest.importorskip(
      _module,
      reason='Beam\'s PortableRunnerTest suite needs %s (apache-beam[test]); '
      'install it in the test virtualenv (python/requirements.txt)' % _package)

import grpc

import apache_beam as beam

from apache_beam.options.pipeline_options import DebugOptions
from apache_beam.options.pipeline_options import PortableOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.portability.api import beam_job_api_pb2_grpc
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
from apache_beam.transforms import userstate
# Import the module, not the class: pytest collects every unittest.TestCase
# subclass it finds in a test module's namespace, and Beam's own
# PortableRunnerTest (in-process job service) must not run here.
from apache_beam.runners.portability import portable_runner_test
from apache_beam.runners.portability.fn_api_runner import fn_runner_test

import skips
from conftest import NO_SUBMISSION_ENVIRONMENT

PARALLELISM = int(os.environ.get('BEAM_KAFKA_SUITE_PARALLELISM', '1'))
IGNORE_SKIPS = os.environ.get('BEAM_KAFKA_SUITE_IGNORE_SKIPS', '') not in (
    '', '0', 'false')
JOB_SERVER_TIMEOUT_SECS = int(
    os.environ.get('BEAM_KAFKA_SUITE_JOB_TIMEOUT', '120'))
# Extra runner options for every pipeline, "name=value" separated by spaces.
EXTRA_OPTIONS = os.environ.get('BEAM_KAFKA_SUITE_OPTIONS', '')
# Wall-time limit of one suite test (enforced by ../conftest.py). Our job
# server answers the client's early GetStateStream with NOT_FOUND, so the
# client waits for a job without a deadline: this limit is what ends a hang.
TEST_TIMEOUT_SECS = float(os.environ.get('BEAM_KAFKA_SUITE_TEST_TIMEOUT', '180'))
# Graceful stop of the job server at the end of a class before SIGKILL.
STOP_GRACE_SECS = 15
LOG_TAIL_LINES = 200

pytestmark = pytest.mark.timeout_seconds(TEST_TIMEOUT_SECS)

_LOGGER = logging.getLogger(__name__)
_ACTIVE_STATES = frozenset((
    beam_job_api_pb2.JobState.STARTING,
    beam_job_api_pb2.JobState.RUNNING,
    beam_job_api_pb2.JobState.DRAINING,
    beam_job_api_pb2.JobState.CANCELLING,
))

# class name -> mode, filled by the class definitions below.
_MODES = collections.OrderedDict()

_LOG_AT_START = pytest.StashKey[tuple]()
_PLUGIN_NAME = 'beam-kafka-suite-report'
# mode -> [time.monotonic() of its first test's setup, of its last test's end]
_WALL = {}


def _app_id(mode: str, test_name: str) -> str:
  """A fresh application id: letters, digits, '.', '_', '-' only."""
  name = re.sub(r'^test_', '', test_name)
  name = re.sub(r'[^A-Za-z0-9._-]+', '-', name).strip('-.')[:60] or 'test'
  return 'suite-%s-%s-%s' % (mode, name, uuid.uuid4().hex[:8])


def _extra_options():
  """BEAM_KAFKA_SUITE_OPTIONS as a dict; integer values as ints."""
  result = {}
  for item in EXTRA_OPTIONS.split():
    name, sep, value = item.partition('=')
    if not sep or not name:
      raise ValueError(
          'BEAM_KAFKA_SUITE_OPTIONS: expected name=value, got %r' % item)
    result[name.lstrip('-')] = int(value) if re.fullmatch(r'-?\d+', value) else value
  return result


def _tail(path, start=0, lines=LOG_TAIL_LINES):
  try:
    with open(path, 'rb') as f:
      f.seek(start)
      text = f.read().decode('utf-8', 'replace')
  except OSError:
    return ''
  return '\n'.join(text.splitlines()[-lines:])


class _SuiteReport:
  """Per-mode counts at the end of the session, and the job server's log in
  the report of a failed suite test. Registered once, by the first suite test
  that runs (a test module cannot declare hooks itself)."""
  @pytest.hookimpl(hookwrapper=True)
  def pytest_runtest_makereport(self, item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != 'call' or not report.failed:
      return
    log_at_start = item.stash.get(_LOG_AT_START, None)
    if not log_at_start:
      return
    path, offset = log_at_start
    report.sections.append(
        ('beam-kafka job-server log during this test (%s)' % path,
         _tail(path, offset) or '(nothing)'))

  def pytest_runtest_logfinish(self, nodeid, location):
    del location
    parts = nodeid.split('::')
    mode = _MODES.get(parts[-2]) if len(parts) >= 3 else None
    if mode in _WALL:
      _WALL[mode][1] = time.monotonic()

  def pytest_terminal_summary(self, terminalreporter):
    outcomes = {}  # nodeid -> (mode, outcome)
    seconds = collections.defaultdict(float)
    for reports in terminalreporter.stats.values():
      for report in reports:
        if not isinstance(report, pytest.TestReport):
          continue
        parts = report.nodeid.split('::')
        mode = _MODES.get(parts[-2]) if len(parts) >= 3 else None
        if mode is None:
          continue
        seconds[mode] += report.duration
        previous = outcomes.get(report.nodeid, (mode, None))[1]
        if report.failed:
          outcome = 'failed'
        elif report.skipped:
          outcome = 'skipped'
        elif report.when == 'call':
          outcome = 'passed'
        else:
          outcome = None
        rank = {None: 0, 'passed': 1, 'skipped': 2, 'failed': 3}
        if rank[outcome] > rank[previous]:
          outcomes[report.nodeid] = (mode, outcome)
    if not seconds:
      return
    terminalreporter.section('beam-kafka: Beam PortableRunnerTest suite')
    for mode in dict.fromkeys(_MODES.values()):
      if mode not in seconds:
        continue
      counts = collections.Counter(
          o for m, o in outcomes.values() if m == mode)
      start, end = _WALL.get(mode, (0.0, 0.0))
      terminalreporter.write_line(
          'beam-suite %s: %d passed, %d failed, %d skipped '
          '(wall %.1f s, internal_parallelism=%d, apache-beam %s%s)' % (
              mode,
              counts['passed'],
              counts['failed'],
              counts['skipped'],
              max(end - start, seconds[mode]),
              PARALLELISM,
              beam.__version__,
              ', skip list ignored' if IGNORE_SKIPS else ''))
      if IGNORE_SKIPS:
        continue
      # Skipped tests per feature they wait for (a test may wait for several).
      waiting = collections.Counter()
      upstream = 0
      for nodeid, (m, outcome) in outcomes.items():
        if m != mode or outcome != 'skipped':
          continue
        missing = skips.missing_features(nodeid.split('::')[-1], mode)
        if missing and not skips.UPSTREAM_PORTABLE_SKIPS.get(
            nodeid.split('::')[-1]):
          waiting.update(missing)
        else:
          upstream += 1
      terminalreporter.write_line(
          '  skipped: %d by upstream Beam; waiting for %s' % (
              upstream,
              ', '.join('%s %d' % (f, waiting[f])
                        for f in skips.NOT_BUILT if waiting[f]) or 'nothing'))


class _BeamKafkaSuite:
  """What turns Beam's PortableRunnerTest into a test of beam-kafka.

  A mixin, not a TestCase, so pytest does not collect it by itself.
  """
  MODE = None  # 'batch' or 'streaming'
  STREAMING = False

  # Controls the job service: started by the suite as a subprocess from
  # _subprocess_command (see PortableRunnerTest._create_job_endpoint).
  _use_subprocesses = True

  # Set by _suite_context before the first test of the class runs.
  _binary = None
  _bootstrap = None
  _suite_dir = None

  @pytest.fixture(autouse=True)
  def _suite_context(self, request, broker, binary, tmp_path_factory):
    cls = type(self)
    now = time.monotonic()
    _WALL.setdefault(cls.MODE, [now, now])
    if cls.__dict__.get('_suite_dir') is None:
      cls._binary = binary
      cls._bootstrap = broker
      cls._suite_dir = tmp_path_factory.mktemp('beam-suite-%s' % cls.MODE)
    config = request.config
    if not config.pluginmanager.has_plugin(_PLUGIN_NAME):
      config.pluginmanager.register(_SuiteReport(), _PLUGIN_NAME)
    log_path = cls._job_server_log()
    try:
      offset = log_path.stat().st_size
    except OSError:
      offset = 0
    request.node.stash[_LOG_AT_START] = (log_path, offset)
    yield
    cls._cancel_active_jobs()

  @classmethod
  def _cancel_active_jobs(cls):
    """Cancels jobs a test left running (it failed or timed out while its
    pipeline ran), so they do not slow down or disturb the next tests."""
    endpoint = cls.__dict__.get('_job_endpoint')
    if not endpoint:
      return
    with grpc.insecure_channel(endpoint) as channel:
      stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
      try:
        jobs = stub.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=10)
        for job in jobs.job_info:
          if job.state in _ACTIVE_STATES:
            _LOGGER.warning(
                'cancelling job %s (%s), still %s after its test',
                job.job_id,
                job.job_name,
                beam_job_api_pb2.JobState.Enum.Name(job.state))
            stub.Cancel(
                beam_job_api_pb2.CancelJobRequest(job_id=job.job_id),
                timeout=10)
      except grpc.RpcError as e:
        _LOGGER.warning('could not cancel leftover jobs on %s: %s', endpoint, e)

  @classmethod
  def _job_server_log(cls):
    return cls._suite_dir / 'job-server.log'

  @classmethod
  def _subprocess_command(cls, job_port, expansion_port):
    del expansion_port  # no expansion service in use: let it pick a port
    artifacts_dir = cls._suite_dir / 'artifacts'
    artifacts_dir.mkdir(exist_ok=True)
    # The suite starts the command with Popen and no redirection; `exec`
    # keeps one process (so the suite's kill reaches the server) and sends
    # its output to a log file instead of the test output.
    return [
        '/bin/sh',
        '-c',
        'NO_COLOR=1; export NO_COLOR; exec "$@" >>"$0" 2>&1',
        str(cls._job_server_log()),
        cls._binary,
        'job-server',
        '--job-port',
        str(job_port),
        '--artifact-port',
        '0',
        '--expansion-port',
        '0',
        '--artifacts-dir',
        str(artifacts_dir),
        '--bind',
        '127.0.0.1',
    ]

  @classmethod
  def tearDownClass(cls):
    process = cls.__dict__.get('_subprocess')
    if process is not None and process.poll() is None:
      process.terminate()
      try:
        process.wait(STOP_GRACE_SECS)
      except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    super().tearDownClass()

  def setUp(self):
    if not IGNORE_SKIPS:
      reason = skips.skip_reason(self._testMethodName, self.MODE)
      if reason:
        self.skipTest(reason)
    super().setUp()

  def create_options(self):
    options = super().create_options()
    portable = options.view_as(PortableOptions)
    portable.environment_type = 'LOOPBACK'
    portable.environment_config = None
    portable.job_server_timeout = JOB_SERVER_TIMEOUT_SECS
    options.view_as(StandardOptions).streaming = self.STREAMING
    # No `pip freeze` at each submission (see conftest.portable_args).
    options.view_as(DebugOptions).add_experiment(NO_SUBMISSION_ENVIRONMENT)
    # Our runner's options are not declared by any PipelineOptions class in
    # this process; the job server advertises them (DescribePipelineOptions)
    # and PortableRunner applies these overrides to the flags it adds for
    # them, as Beam's Flink harness does for `parallelism`.
    options._all_options.update({  # pylint: disable=protected-access
        'bootstrap_servers': self._bootstrap,
        'application_id': _app_id(self.MODE, self._testMethodName),
        'internal_parallelism': PARALLELISM,
    })
    options._all_options.update(_extra_options())  # pylint: disable=protected-access
    return options

  def create_pipeline(self, is_drain=False):
    """A pipeline for our job server; `is_drain`: its application is drained
    before it runs, so it runs drained from its first element on (as Beam's
    own runner runs these tests: restrictions truncated before processing)."""
    options = self.create_options()
    if is_drain:
      app_id = options._all_options['application_id']  # pylint: disable=protected-access
      subprocess.run([
          self._binary, 'drain', '--',
          '--application_id=%s' % app_id,
          '--bootstrap_servers=%s' % self._bootstrap
      ],
                     check=True,
                     stdout=subprocess.DEVNULL,
                     timeout=60)
    return beam.Pipeline(self.get_runner(), options)

  # PortableRunnerTest skips these ("Portable runners don't support drain
  # yet"); this runner drains, so they run as Beam's runner runs them.
  def test_sdf_default_truncate_when_bounded(self):
    fn_runner_test.FnApiRunnerTest.test_sdf_default_truncate_when_bounded(self)

  def test_sdf_default_truncate_when_unbounded(self):
    fn_runner_test.FnApiRunnerTest.test_sdf_default_truncate_when_unbounded(
        self)

  def test_sdf_with_truncate(self):
    fn_runner_test.FnApiRunnerTest.test_sdf_with_truncate(self)

  def test_draining_sdf_with_sdf_initiated_checkpointing(self):
    fn_runner_test.FnApiRunnerTest.test_draining_sdf_with_sdf_initiated_checkpointing(
        self)

  # Upstream skips it for every runner ("TestStream not yet supported") and
  # leaves its assertion commented out: this is its pipeline with the
  # assertion it was written for.
  def test_teststream_pardo_timers(self):
    timer_spec = userstate.TimerSpec('timer', userstate.TimeDomain.WATERMARK)

    class TimerDoFn(beam.DoFn):
      def process(self, element, timer=beam.DoFn.TimerParam(timer_spec)):
        unused_key, ts = element
        timer.set(ts)
        timer.set(2 * ts)

      @userstate.on_timer(timer_spec)
      def process_timer(self):
        yield 'fired'

    ts = (
        test_stream.TestStream().add_elements([('k1', 10)])  # Set timer for 20
        .advance_watermark_to(100).add_elements([('k2', 100)])  # Set timer for 200
        .advance_watermark_to(1000))

    with self.create_pipeline() as p:
      actual = (
          p
          | ts
          | beam.ParDo(TimerDoFn())
          | beam.Map(lambda x, ts=beam.DoFn.TimestampParam: (x, ts)))
      expected = [('fired', ts) for ts in (20, 200)]
      assert_that(actual, equal_to(expected))


class BatchSuiteTest(_BeamKafkaSuite, portable_runner_test.PortableRunnerTest):
  MODE = 'batch'
  STREAMING = False


class StreamingSuiteTest(_BeamKafkaSuite,
                         portable_runner_test.PortableRunnerTest):
  MODE = 'streaming'
  STREAMING = True


for _cls in (BatchSuiteTest, StreamingSuiteTest):
  _MODES[_cls.__name__] = _cls.MODE
del _cls
