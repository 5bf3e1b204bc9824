"""File sources and sinks: splittable DoFns (ReadFromText is one) and
WriteToText, run as a Beam user runs them."""

import collections
import os
import random
import re
import subprocess
import sys

import pytest

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from conftest import JOB_SERVER_TIMEOUT_SECS
from conftest import REPO_ROOT
from conftest import kafka_args
from conftest import portable_args

WORDS = ['apple', 'banana', 'cherry', "don't", 'élan', 'fig', 'grape']

# Size of the file read in splits; scripts/large-file-read.sh runs the
# same test with 100 MB.
LARGE_FILE_MB = float(os.environ.get('BEAM_KAFKA_LARGE_FILE_MB', '12'))


def _write_words(path, lines, seed):
  rng = random.Random(seed)
  with open(path, 'w', encoding='utf-8') as f:
    for _ in range(lines):
      f.write(' '.join(rng.choice(WORDS) for _ in range(rng.randint(0, 9))))
      f.write('\n')


def _expected_counts(path):
  # The tokenizer of apache_beam.examples.wordcount.
  counts = collections.Counter()
  with open(path, encoding='utf-8') as f:
    for line in f:
      counts.update(re.findall(r'[\w\']+', line, re.UNICODE))
  return counts


def _read_counts(prefix):
  counts = {}
  directory, base = os.path.split(str(prefix))
  shards = [n for n in os.listdir(directory) if n.startswith(base + '-')]
  assert shards, 'no output shard %s-*' % prefix
  for name in shards:
    with open(os.path.join(directory, name), encoding='utf-8') as f:
      for line in f:
        word, _, count = line.rstrip('\n').rpartition(': ')
        assert word not in counts, 'word %r written twice' % word
        counts[word] = int(count)
  return counts


@pytest.mark.timeout_seconds(300)
@pytest.mark.parametrize('guarantee', ['exactly_once', 'at_least_once'])
def test_beams_wordcount_example_runs_unchanged(
    broker, binary, app_id, tmp_path, guarantee):
  """apache_beam.examples.wordcount, with only the runner flags a user adds."""
  source = tmp_path / 'in.txt'
  _write_words(source, 3000, seed=7)
  output = tmp_path / 'out' / 'counts'
  env = dict(os.environ)
  env['PYTHONPATH'] = os.pathsep.join(
      [str(REPO_ROOT / 'python')] +
      ([env['PYTHONPATH']] if env.get('PYTHONPATH') else []))
  env['TMPDIR'] = str(tmp_path)
  run = subprocess.run([
      sys.executable,
      '-m',
      'apache_beam.examples.wordcount',
      '--input=%s' % source,
      '--output=%s' % output,
      '--runner=beam_kafka.KafkaStreamsRunner',
      '--beam_kafka_binary=%s' % binary,
      '--processing_guarantee=%s' % guarantee,
  ] + kafka_args(broker, app_id, tmp_path / 'state'),
                       stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE,
                       env=env,
                       cwd=str(tmp_path),
                       timeout=260,
                       check=False)
  err = run.stderr.decode(errors='replace')
  assert run.returncode == 0, err[-8000:]
  assert _read_counts(output) == dict(_expected_counts(source))


def _line_stats(lines):
  return (
      lines
      | beam.Map(lambda line: (1, len(line), sum(map(ord, line))))
      | beam.CombineGlobally(lambda rows: tuple(map(sum, zip(*rows))) or
                             (0, 0, 0)))


@pytest.mark.timeout_seconds(600)
def test_a_large_file_is_read_in_splits_spread_over_the_tasks(
    broker, job_server, app_id, tmp_path, collector):
  """One file, split by the SDK into restrictions that cross an edge topic
  to internal_parallelism tasks: every line read once, by several tasks."""
  source = tmp_path / 'large.txt'
  rng = random.Random(11)
  expected = [0, 0, 0]
  size = 0
  with open(source, 'w', encoding='ascii') as f:
    while size < LARGE_FILE_MB * 1e6:
      line = 'line %d %s' % (expected[0], 'x' * rng.randint(0, 180))
      f.write(line + '\n')
      size += len(line) + 1
      expected[0] += 1
      expected[1] += len(line)
      expected[2] += sum(map(ord, line))
  log_start = len(job_server.log_text())
  args = portable_args(job_server) + kafka_args(broker, app_id,
                                                tmp_path / 'state')
  p = beam.Pipeline(
      options=PipelineOptions(args + ['--internal_parallelism=4']))
  lines = p | beam.io.ReadFromText(str(source))
  _ = _line_stats(lines) | beam.Map(collector.recorder())
  result = p.run()
  assert result.wait_until_finish() == PipelineState.DONE
  assert collector.lines() == [str(tuple(expected))]
  # Each task of the process step logs, when it finishes, how many
  # bundles it ran: more than one task must have read.
  log = job_server.log_text(log_start)
  busy = [
      m for m in re.finditer(
          r'task finished: \d+ commit cycle\(s\)[^;]*; (\d+) bundle\(s\)'
          r'.*? task=(\d+)_(\d+)', log) if int(m.group(1)) > 0
  ]
  print('tasks that ran bundles:',
        sorted((m.group(2), m.group(3), m.group(1)) for m in busy))
  readers = collections.Counter(m.group(2) for m in busy)
  assert max(readers.values()) > 1, (
      'no sub-topology ran on more than one task: %s' % readers)
