"""KafkaStreamsRunner: submits Beam pipelines to the beam-kafka job server.

With ``--job_endpoint`` the runner talks to an already running job server,
exactly like ``PortableRunner``. Without it, the runner finds the
``beam-kafka`` executable (see :func:`find_binary`), starts
``beam-kafka job-server`` on free ports with a temporary artifacts directory
and submits to it.

One job server is started per Python process (per binary and port settings)
and shared by every pipeline the process runs. It lives until the interpreter
exits, not only until ``wait_until_finish()`` returns, because the result
object keeps using it afterwards (``result.state``, ``result.metrics()``).
Call :func:`stop_job_servers` to stop it earlier.
"""

import atexit
import collections
import logging
import os
import re
import shutil
import socket
import subprocess
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict
from typing import List
from typing import Optional
from typing import Tuple

import grpc

from apache_beam.options.pipeline_options import JobServerOptions
from apache_beam.options.pipeline_options import PortableOptions
from apache_beam.portability.api import beam_job_api_pb2_grpc
from apache_beam.runners.portability import job_server
from apache_beam.runners.portability import portable_runner
from apache_beam.transforms.external import BeamJarExpansionService
from apache_beam.transforms.external import ExternalTransform

from beam_kafka import workers
from beam_kafka.options import KafkaStreamsRunnerOptions

__all__ = [
    'BinaryNotFoundError',
    'KafkaStreamsJobServer',
    'KafkaStreamsRunner',
    'binary_candidates',
    'find_binary',
    'running_job_servers',
    'stop_job_servers',
]

_LOGGER = logging.getLogger(__name__)

BINARY_NAME = 'beam-kafka'

# How long a freshly started job server may take to accept gRPC connections.
STARTUP_TIMEOUT_SECS = 60.0
# How long a job server may take to exit after SIGTERM before it is killed.
STOP_TIMEOUT_SECS = 10.0


# ---------------------------------------------------------------------------
# Finding the binary


class BinaryNotFoundError(RuntimeError):
  """No usable beam-kafka executable was found."""


def _repo_root() -> Path:
  # <repo>/python/beam_kafka/runner.py -> <repo>
  return Path(__file__).resolve().parent.parent.parent


def _is_executable_file(path) -> bool:
  return os.path.isfile(path) and os.access(path, os.X_OK)


def binary_candidates() -> List[Tuple[str, str]]:
  """The implicit places searched for the binary, in order.

  Returns (description, path) pairs; neither the ``--beam_kafka_binary``
  option, ``$BEAM_KAFKA_BINARY`` nor PATH are included.
  """
  repo = _repo_root()
  candidates = []
  # Installed from the wheel, the package's own binary comes first: a build
  # lying around in the cache must not stand in for it.
  installed = ('installed with the beam-kafka package',
               os.path.join(sysconfig.get_path('scripts'), BINARY_NAME))
  in_checkout = (repo / 'Cargo.toml').is_file()
  if not in_checkout:
    candidates.append(installed)
  candidates.append(('source checkout', str(repo / 'bin' / BINARY_NAME)))
  cargo_target = os.environ.get('CARGO_TARGET_DIR')
  if cargo_target:
    for profile in ('release', 'debug'):
      candidates.append(('$CARGO_TARGET_DIR',
                         os.path.join(cargo_target, profile, BINARY_NAME)))
  for profile in ('release', 'debug'):
    candidates.append(
        ('source checkout target', str(repo / 'target' / profile / BINARY_NAME)))
  cache = os.environ.get('BEAM_KAFKA_CACHE') or os.path.join(
      os.path.expanduser('~'), '.cache', 'beam-kafka')
  for profile in ('release', 'debug'):
    candidates.append(
        ('$BEAM_KAFKA_CACHE', os.path.join(cache, 'target', profile,
                                           BINARY_NAME)))
  if in_checkout:
    candidates.append(installed)
  return candidates


def _explicit_binary(path: str, origin: str) -> str:
  resolved = os.path.abspath(os.path.expanduser(path))
  if not os.path.exists(resolved):
    raise BinaryNotFoundError(
        '%s points to %s, which does not exist.' % (origin, resolved))
  if not _is_executable_file(resolved):
    raise BinaryNotFoundError(
        '%s points to %s, which is not an executable file.' %
        (origin, resolved))
  return resolved


def find_binary(explicit: Optional[str] = None) -> str:
  """Returns the path of the beam-kafka executable to run as job server.

  Order: ``explicit`` (the ``--beam_kafka_binary`` option), the environment
  variable ``BEAM_KAFKA_BINARY``, the binary the wheel installed next to this
  interpreter (a package not in a source checkout), the build of a source
  checkout (``<repo>/bin/beam-kafka``, ``$CARGO_TARGET_DIR/{release,debug}``,
  ``<repo>/target/{release,debug}``,
  ``$BEAM_KAFKA_CACHE/target/{release,debug}``), then ``beam-kafka`` on PATH.
  An explicit path that is not an executable file is an error; it is never
  silently replaced by another binary.
  """
  if explicit:
    return _explicit_binary(explicit, '--beam_kafka_binary')
  from_env = os.environ.get('BEAM_KAFKA_BINARY')
  if from_env:
    return _explicit_binary(from_env, 'The environment variable '
                            'BEAM_KAFKA_BINARY')
  searched = []
  for _, path in binary_candidates():
    if _is_executable_file(path):
      return os.path.abspath(path)
    searched.append(path)
  on_path = shutil.which(BINARY_NAME)
  if on_path:
    return os.path.abspath(on_path)
  searched.append('%s on PATH' % BINARY_NAME)
  raise BinaryNotFoundError(
      'Could not find the beam-kafka job server executable. Searched:\n  ' +
      '\n  '.join(searched) + '\n'
      'Build it with scripts/build.sh in a beam-kafka source checkout, or '
      'pass --beam_kafka_binary=/path/to/beam-kafka (or set '
      'BEAM_KAFKA_BINARY), or give the address of a running job server '
      'with --job_endpoint=host:port.')


# ---------------------------------------------------------------------------
# The job server process

_ANSI_ESCAPE = re.compile(r'\x1b\[[0-9;]*[A-Za-z]')
_LEVEL_WORD = re.compile(r'\b(ERROR|WARN|WARNING|INFO|DEBUG|TRACE)\b')
_LEVELS = {
    'ERROR': logging.ERROR,
    'WARN': logging.WARNING,
    'WARNING': logging.WARNING,
    'INFO': logging.INFO,
    'DEBUG': logging.DEBUG,
    'TRACE': logging.DEBUG,
}


# How often start() chooses new ports when one it chose was taken meanwhile.
PORT_ATTEMPTS = 3
_ADDRESS_IN_USE = 'Address already in use'


class _PortTaken(RuntimeError):
  """The job server exited because a port chosen for it was taken."""


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


class KafkaStreamsJobServer(job_server.JobServer):
  """Runs ``beam-kafka job-server`` as a child process.

  ``start()`` is idempotent and returns a JobService stub once the job port
  accepts gRPC connections; ``stop()`` terminates the process (SIGTERM, then
  SIGKILL after a grace period) and removes the artifacts directory if this
  object created it. The server's log (its stderr and stdout) is forwarded to
  the Python logger ``beam_kafka.job_server`` with the levels it names.
  """
  def __init__(
      self,
      binary: str,
      job_port: int = 0,
      artifact_port: int = 0,
      expansion_port: int = 0,
      artifacts_dir: Optional[str] = None,
      startup_timeout: float = STARTUP_TIMEOUT_SECS):
    self.binary = binary
    self._requested_job_port = int(job_port or 0)
    self._artifact_port = int(artifact_port or 0)
    self._expansion_port = int(expansion_port or 0)
    self._requested_expansion_port = int(expansion_port or 0)
    self._requested_artifacts_dir = artifacts_dir
    self._startup_timeout = startup_timeout
    self._lock = threading.RLock()
    self._process = None  # type: Optional[subprocess.Popen]
    self._channel = None
    self._stub = None
    self._endpoint = None  # type: Optional[str]
    self._artifacts_dir = None  # type: Optional[str]
    self._owns_artifacts_dir = False
    self._log_thread = None
    self._log_tail = collections.deque(maxlen=200)
    self._logger = logging.getLogger('beam_kafka.job_server')

  # -- introspection -------------------------------------------------------
  @property
  def endpoint(self) -> Optional[str]:
    return self._endpoint

  @property
  def expansion_endpoint(self) -> Optional[str]:
    """host:port of the server's expansion service (ReadFromKafka and
    WriteToKafka), known once the server started."""
    if self._endpoint is None:
      return None
    return 'localhost:%d' % self._expansion_port

  @property
  def artifacts_dir(self) -> Optional[str]:
    return self._artifacts_dir

  @property
  def pid(self) -> Optional[int]:
    return self._process.pid if self._process is not None else None

  @property
  def process(self) -> Optional[subprocess.Popen]:
    return self._process

  def is_running(self) -> bool:
    return self._process is not None and self._process.poll() is None

  def log_tail(self) -> str:
    return '\n'.join(self._log_tail)

  def command(self, job_port: int, artifacts_dir: str) -> List[str]:
    return [
        self.binary,
        'job-server',
        '--job-port',
        str(job_port),
        '--artifact-port',
        str(self._artifact_port),
        '--expansion-port',
        str(self._expansion_port),
        '--artifacts-dir',
        artifacts_dir,
        # Private to this process and its user: the user's options (any
        # environment, state_dir or Kafka property) are theirs to choose.
        '--trust-clients',
    ]

  # -- lifecycle -------------------------------------------------------------
  def start(self) -> beam_job_api_pb2_grpc.JobServiceStub:
    with self._lock:
      if self._stub is not None and self.is_running():
        return self._stub
      if self._process is not None:
        # It died since the last start: report and start afresh.
        _LOGGER.warning(
            'The beam-kafka job server (pid %s) exited with code %s; '
            'starting a new one. Its last output:\n%s',
            self._process.pid,
            self._process.returncode,
            self.log_tail())
        self.stop()
      for attempt in range(PORT_ATTEMPTS):
        try:
          return self._start_locked()
        except _PortTaken:
          # A port chosen here was taken before the server bound it.
          self.stop()
          if attempt + 1 == PORT_ATTEMPTS:
            raise
          _LOGGER.info('a chosen port was taken meanwhile; choosing again')
        except BaseException:
          self.stop()
          raise

  def _start_locked(self):
    if self._requested_artifacts_dir:
      self._artifacts_dir = os.path.abspath(self._requested_artifacts_dir)
      os.makedirs(self._artifacts_dir, exist_ok=True)
      self._owns_artifacts_dir = False
    else:
      self._artifacts_dir = tempfile.mkdtemp(prefix='beam-kafka-artifacts-')
      self._owns_artifacts_dir = True
    job_port = self._requested_job_port or _free_port()
    # Chosen here (not by the server) so the client knows where to expand.
    self._expansion_port = self._requested_expansion_port or _free_port()
    self._endpoint = 'localhost:%d' % job_port
    cmd = self.command(job_port, self._artifacts_dir)
    env = dict(os.environ)
    env.setdefault('NO_COLOR', '1')
    _LOGGER.info('Starting the beam-kafka job server: %s', ' '.join(cmd))
    self._log_tail.clear()
    self._process = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env)
    self._log_thread = threading.Thread(
        target=self._pump_log,
        args=(self._process, ),
        name='beam-kafka-job-server-log',
        daemon=True)
    self._log_thread.start()

    self._channel = grpc.insecure_channel(self._endpoint)
    ready = grpc.channel_ready_future(self._channel)
    deadline = time.monotonic() + self._startup_timeout
    while True:
      code = self._process.poll()
      if code is not None:
        self._log_thread.join(2)
        chose_ports = not (
            self._requested_job_port and self._requested_expansion_port)
        error = _PortTaken if chose_ports and _ADDRESS_IN_USE in (
            self.log_tail()) else RuntimeError
        raise error(
            'The beam-kafka job server exited with code %s during start-up '
            '(command: %s). Its output:\n%s' %
            (code, ' '.join(cmd), self.log_tail()))
      try:
        ready.result(timeout=0.25)
        break
      except grpc.FutureTimeoutError:
        if time.monotonic() > deadline:
          raise TimeoutError(
              'The beam-kafka job server did not accept connections on %s '
              'within %.0f s (command: %s). Its output:\n%s' % (
                  self._endpoint,
                  self._startup_timeout,
                  ' '.join(cmd),
                  self.log_tail()))
    self._stub = beam_job_api_pb2_grpc.JobServiceStub(self._channel)
    _LOGGER.info(
        'beam-kafka job server ready on %s (pid %d, binary %s)',
        self._endpoint,
        self._process.pid,
        self.binary)
    return self._stub

  def _pump_log(self, process):
    for raw in iter(process.stdout.readline, b''):
      line = _ANSI_ESCAPE.sub('', raw.decode('utf-8', 'backslashreplace'))
      line = line.rstrip()
      if not line:
        continue
      self._log_tail.append(line)
      match = _LEVEL_WORD.search(line[:80])
      level = _LEVELS[match.group(1)] if match else logging.INFO
      self._logger.log(level, '%s', line)
    process.stdout.close()

  def stop(self) -> None:
    with self._lock:
      if self._channel is not None:
        try:
          self._channel.close()
        except Exception:  # pylint: disable=broad-except
          pass
      self._channel = None
      self._stub = None
      process, self._process = self._process, None
      if process is not None:
        if process.poll() is None:
          process.terminate()
          try:
            process.wait(STOP_TIMEOUT_SECS)
          except subprocess.TimeoutExpired:
            _LOGGER.warning(
                'The beam-kafka job server (pid %d) did not exit within '
                '%.0f s of SIGTERM; killing it.',
                process.pid,
                STOP_TIMEOUT_SECS)
            process.kill()
            process.wait()
        if self._log_thread is not None:
          self._log_thread.join(2)
        _LOGGER.info(
            'beam-kafka job server (pid %d) stopped with code %s',
            process.pid,
            process.returncode)
      self._log_thread = None
      if self._owns_artifacts_dir and self._artifacts_dir:
        shutil.rmtree(self._artifacts_dir, ignore_errors=True)
      self._owns_artifacts_dir = False


# One job server per configuration, shared by all pipelines of the process.
_SERVERS_LOCK = threading.Lock()
_SERVERS = {}  # type: Dict[tuple, KafkaStreamsJobServer]


def _shared_job_server(
    binary, job_port, artifact_port, expansion_port,
    artifacts_dir) -> KafkaStreamsJobServer:
  key = (binary, job_port, artifact_port, expansion_port, artifacts_dir)
  with _SERVERS_LOCK:
    server = _SERVERS.get(key)
    if server is None:
      server = KafkaStreamsJobServer(
          binary,
          job_port=job_port,
          artifact_port=artifact_port,
          expansion_port=expansion_port,
          artifacts_dir=artifacts_dir)
      _SERVERS[key] = server
    return server


def running_job_servers() -> List[KafkaStreamsJobServer]:
  """The job servers this process started that are still running."""
  with _SERVERS_LOCK:
    return [s for s in _SERVERS.values() if s.is_running()]


def stop_job_servers() -> None:
  """Stops every job server this process started (also run at exit)."""
  with _SERVERS_LOCK:
    servers = list(_SERVERS.values())
    _SERVERS.clear()
  for server in servers:
    try:
      server.stop()
    except Exception:  # pylint: disable=broad-except
      _LOGGER.exception('Could not stop the beam-kafka job server')


# Registered at import, i.e. before any pipeline registers its own exit
# handlers (atexit runs last-registered first): a pipeline's LOOPBACK worker
# is stopped before the job server that drives it.
atexit.register(stop_job_servers)

# ---------------------------------------------------------------------------
# The runner


# Beam's standard Kafka transforms (apache_beam.io.kafka).
KAFKA_URN_PREFIX = 'beam:transform:org.apache.beam:kafka_'


class KafkaStreamsRunner(portable_runner.PortableRunner):
  """Runs a Beam pipeline on Apache Kafka with the beam-kafka job server.

  Use ``--runner=beam_kafka.KafkaStreamsRunner``. Without ``--job_endpoint``
  the runner starts a local job server from the beam-kafka binary; with it,
  it submits to that job server like ``PortableRunner``. The SDK environment
  defaults to LOOPBACK (user code runs in this process); with
  ``--sdk_worker_parallelism`` other than 1 its harnesses are processes
  (see :mod:`beam_kafka.workers`), so user code uses more than one core.
  """
  @staticmethod
  def start_and_replace_loopback_environments(pipeline, options):
    if workers.wants_process_workers(options):
      return workers.start_process_workers(pipeline, options)
    return portable_runner.PortableRunner.start_and_replace_loopback_environments(
        pipeline, options)

  def default_environment(self, options):
    portable_options = options.view_as(PortableOptions)
    if (not portable_options.environment_type and
        not portable_options.output_executable_path):
      portable_options.environment_type = 'LOOPBACK'
    return super().default_environment(options)

  def default_job_server(self, options):
    kafka_options = options.view_as(KafkaStreamsRunnerOptions)
    server_options = options.view_as(JobServerOptions)
    binary = find_binary(kafka_options.beam_kafka_binary)
    return _shared_job_server(
        binary,
        int(server_options.job_port or 0),
        int(server_options.artifact_port or 0),
        int(server_options.expansion_port or 0),
        server_options.artifacts_dir or None)

  def apply(self, transform, input, options):
    # Beam's ReadFromKafka / WriteToKafka default to a Java expansion
    # service; on this runner our job server expands them natively.
    if (isinstance(transform, ExternalTransform) and
        getattr(transform, '_urn', '').startswith(KAFKA_URN_PREFIX) and
        isinstance(transform._expansion_service, BeamJarExpansionService)):
      transform._expansion_service = self.expansion_endpoint(options)
    return super().apply(transform, input, options)

  def expansion_endpoint(self, options) -> str:
    """Where this runner's job server expands Kafka transforms."""
    server_options = options.view_as(PortableOptions)
    job_endpoint = server_options.job_endpoint
    if job_endpoint:
      host = job_endpoint.rsplit(':', 1)[0]
      port = options.view_as(JobServerOptions).expansion_port or 8097
      return '%s:%d' % (host, int(port))
    server = self.default_job_server(options)
    server.start()
    return server.expansion_endpoint

