"""LOOPBACK SDK harnesses as processes, for ``--sdk_worker_parallelism``.

Beam's LOOPBACK worker pool runs every harness the runner asks for as a
thread of the submitting process, so however many it starts, user code runs
on one core (the GIL). When ``--sdk_worker_parallelism`` is not 1,
``KafkaStreamsRunner`` starts a worker pool of its own instead: each harness
is a process running ``python -m beam_kafka.boot`` with this interpreter and
this process's ``sys.path``, so it imports whatever the pipeline's code
imports here. Code that relies on sharing memory with the submitting
process (a DoFn appending to a global list) needs LOOPBACK threads: leave
``--sdk_worker_parallelism`` at 1 for it.
"""

import logging
import os
import shlex
import stat
import sys
import tempfile

from apache_beam.options.pipeline_options import PortableOptions
from apache_beam.portability import python_urns
from apache_beam.runners.portability import portable_runner
from apache_beam.runners.worker import worker_pool_main
from apache_beam.transforms import environments

_LOGGER = logging.getLogger(__name__)


def wants_process_workers(options) -> bool:
  """Whether the LOOPBACK harnesses should be processes: the user asked for
  other than one harness (0 lets the runner use every core)."""
  value = options.view_as(PortableOptions).sdk_worker_parallelism
  try:
    return int(value) != 1
  except (TypeError, ValueError):
    return False


def _boot_script(directory: str) -> str:
  """An executable that starts ``beam_kafka.boot`` the way Beam's worker
  pool starts a container's boot program (it passes ``--id`` and the
  endpoints). Its stdout goes to stderr: the pool keeps the process's stdout
  in a pipe nobody reads, and a DoFn printing enough would block on it."""
  path = os.path.join(directory, 'beam-kafka-boot')
  with open(path, 'w') as f:
    f.write('#!/bin/sh\n')
    f.write('PYTHONPATH=%s; export PYTHONPATH\n' %
            shlex.quote(os.pathsep.join(p for p in sys.path if p)))
    f.write('exec %s -m beam_kafka.boot "$@" >&2\n' %
            shlex.quote(sys.executable))
  os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
  return path


def start_process_workers(pipeline, options):
  """Like ``PortableRunner.start_and_replace_loopback_environments``, with
  a worker pool that starts each harness as a process. Returns the cleanup
  callbacks."""
  portable_options = options.view_as(PortableOptions)
  cleanups = []
  for env in pipeline.components.environments.values():
    if env.urn != python_urns.EMBEDDED_PYTHON_LOOPBACK:
      continue
    directory = tempfile.mkdtemp(prefix='beam-kafka-workers-')
    address, server = worker_pool_main.BeamFnExternalWorkerPoolServicer.start(
        use_process=True, container_executable=_boot_script(directory))
    _LOGGER.info(
        'SDK harnesses run as processes (--sdk_worker_parallelism=%s), '
        'started by the worker pool at %s', portable_options.
        sdk_worker_parallelism, address)
    external = portable_runner.PortableOptions(
        environment_type='EXTERNAL', environment_config=address)
    replacement = environments.ExternalEnvironment.from_options(
        external).to_runner_api(None)
    env.urn = replacement.urn
    env.payload = replacement.payload
    cleanups.append(lambda server=server: server.stop(1))
    cleanups.append(lambda d=directory: _remove(d))
  return cleanups


def _remove(directory):
  try:
    os.remove(os.path.join(directory, 'beam-kafka-boot'))
    os.rmdir(directory)
  except OSError:
    pass
