"""Beam's own Go examples, unmodified, against the job server: they cannot
pass runner options (Go refuses flags a program does not define), so the job
server names the application after the job and uses its own Kafka servers
(--default-bootstrap-servers)."""

import collections
import random
import re
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import go_pipeline
from conftest import started_job_server

WORD = re.compile(r"[a-zA-Z]+('[a-z])?")  # the example's own pattern


@pytest.fixture(scope='module')
def defaulting_job_server(binary, broker, tmp_path_factory):
  with started_job_server(binary, tmp_path_factory.mktemp('go-examples'),
                          ['--default-bootstrap-servers', broker]) as server:
    yield server


def _text(seed, lines=400):
  rng = random.Random(seed)
  vocabulary = ['king', 'lear', "fool's", 'Cordelia', 'storm', 'o', "heav'n", 'night', 'A']
  return '\n'.join(
      ' '.join(rng.choice(vocabulary) + rng.choice(['', ',', '.', '!']) for _ in range(rng.randrange(0, 12)))
      for _ in range(lines)) + '\n'


def _wordcount_exact(job_server, tmp_path, seed, environment_flags):
  """Runs Beam's Go wordcount example on a local file and checks its counts
  against the example's own pattern; returns the finished run."""
  binary = go_pipeline_example('wordcount')
  text = _text(seed)
  source = tmp_path / 'input.txt'
  source.write_text(text)
  out = tmp_path / 'counts.txt'
  run = subprocess.run([
      binary,
      '--runner=universal',
      '--endpoint=%s' % job_server.endpoint,
      '--input=%s' % source,
      '--output=%s' % out,
  ] + [flag.replace('{binary}', binary) for flag in environment_flags],
      capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, 'the example failed:\n%s\njob server:\n%s' % (
      run.stderr[-4000:], job_server.log_text()[-4000:])
  counts = collections.Counter(m.group(0) for m in WORD.finditer(text))
  assert sorted(out.read_text().splitlines()) == sorted('%s: %d' % kv for kv in counts.items())
  return run


def test_beams_go_wordcount_example_runs_unmodified(defaulting_job_server, tmp_path):
  run = _wordcount_exact(defaulting_job_server, tmp_path, 4, ['--environment_type=LOOPBACK'])
  assert 'no --application_id was given' in run.stderr


def test_go_wordcount_on_harnesses_the_job_server_starts(defaulting_job_server, tmp_path):
  """Go's default environment, Beam's Go SDK image: the job server runs the
  program's staged worker binary as its harness (no Docker), so the job
  does not depend on the submitting program's process."""
  log_start = len(defaulting_job_server.log_text())
  # The program itself is the worker binary (else Go's SDK compiles one).
  run = _wordcount_exact(defaulting_job_server, tmp_path, 5,
                         ['--environment_type=DOCKER', '--worker_binary={binary}'])
  log = defaulting_job_server.log_text(log_start)
  assert "of environment 'go'" in log or 'Go harness' in log, log[-3000:]
  # What the harnesses were given (a copy of the binary, the options) goes
  # with the job, once its harnesses stopped (after its final state).
  job_id = re.search(r'Submitted job: (\S+?)"?$', run.stderr, re.M).group(1)
  work = Path(tempfile.gettempdir(), 'beam-kafka-harnesses', job_id)
  deadline = time.monotonic() + 30
  while work.exists() and time.monotonic() < deadline:
    time.sleep(0.2)
  assert not work.exists(), sorted(work.rglob('*'))


def go_pipeline_example(name):
  """Builds Beam's Go example `name` at the pinned SDK version."""
  return go_pipeline(name, 'github.com/apache/beam/sdks/v2/go/examples/' + name)
