"""examples/hello_kafka.py, run as a user would run it."""

import os
import subprocess
import sys
import time

import pytest

from conftest import JOB_SERVER_TIMEOUT_SECS
from conftest import REPO_ROOT

EXAMPLE = REPO_ROOT / 'examples' / 'hello_kafka.py'


def _processes_mentioning(text):
  """Pids of live processes whose command line contains ``text``."""
  pids = []
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open('/proc/%s/cmdline' % entry, 'rb') as f:
        cmdline = f.read().replace(b'\0', b' ').decode('utf-8', 'replace')
    except OSError:
      continue
    if text in cmdline:
      pids.append(int(entry))
  return pids


def _run_example(args, tmp_path):
  env = dict(os.environ)
  env['PYTHONPATH'] = os.pathsep.join(
      [str(REPO_ROOT / 'python')] +
      ([env['PYTHONPATH']] if env.get('PYTHONPATH') else []))
  # The runner's temporary artifacts directory lands here, which makes its
  # job server recognisable by command line.
  env['TMPDIR'] = str(tmp_path)
  return subprocess.run([sys.executable, str(EXAMPLE)] + args,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        env=env,
                        cwd=str(REPO_ROOT),
                        timeout=200,
                        check=False)


@pytest.mark.timeout_seconds(240)
def test_hello_kafka_with_its_own_job_server(binary, broker, tmp_path):
  run = _run_example([
      '--beam_kafka_binary=%s' % binary,
      '--bootstrap_servers=%s' % broker,
      '--job_server_timeout=%d' % JOB_SERVER_TIMEOUT_SECS,
  ],
                     tmp_path)
  out = run.stdout.decode(errors='replace')
  err = run.stderr.decode(errors='replace')
  assert run.returncode == 0, 'stdout:\n%s\nstderr:\n%s' % (out, err[-8000:])
  assert 'hello_kafka: OK (13 elements)' in out, out

  # The job server the runner started ended with the program.
  deadline = time.monotonic() + 10
  while _processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
    time.sleep(0.2)
  assert _processes_mentioning(str(tmp_path)) == []


def test_hello_kafka_on_a_running_job_server(broker, job_server, tmp_path):
  run = _run_example([
      '--runner=PortableRunner',
      '--job_endpoint=%s' % job_server.endpoint,
      '--environment_type=LOOPBACK',
      '--bootstrap_servers=%s' % broker,
      '--job_server_timeout=%d' % JOB_SERVER_TIMEOUT_SECS,
  ],
                     tmp_path)
  out = run.stdout.decode(errors='replace')
  err = run.stderr.decode(errors='replace')
  assert run.returncode == 0, 'stdout:\n%s\nstderr:\n%s' % (out, err[-8000:])
  assert 'hello_kafka: OK (13 elements)' in out, out
