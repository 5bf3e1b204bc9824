"""Map and set user state, which the Python SDK does not have, through a real
Go SDK pipeline (itests/go/mapstate, Beam's Go SDK) submitted to the job
server like any other: the multimap user state protocol (Put, Get, Remove,
Clear and Keys of a map; Add, Contains and Keys of a set) and Go's way of
passing runner options (its flags, inside go_options)."""

import collections
import subprocess

from conftest import go_pipeline
from conftest import make_app_id

WORDS = ['apple', 'pear', 'peach', 'apple', 'apple', 'pear']


def _expected_lines(words):
  """What countFn sees, from a model of a map and a set per word."""
  counters, seen, lines = collections.defaultdict(dict), collections.defaultdict(set), []
  for w in words:
    m, s = counters[w], seen[w]
    n = m.get('count', 0) + 1
    m['count'] = n
    m['at%d' % n] = n
    s.add('s%d' % n)
    if n == 2:
      m.pop('at1', None)
    if n == 3:
      m.clear()
      m['count'] = n
    lines.append('%s n=%d keys=%s seen=%s has_s1=%s' % (
        w, n, ','.join(sorted(m)), ','.join(sorted(s)), 'true' if 's1' in s else 'false'))
  return sorted(lines)


def test_go_map_and_set_state(job_server, broker, tmp_path):
  binary = go_pipeline('mapstate')
  out = tmp_path / 'lines.txt'
  app_id = make_app_id('go-map-state')
  # Through the product's Go package (beamkafka.dev/go/beamkafka): its
  # runner, and the runner's options as flags the program does not define,
  # a repeated one among them.
  run = subprocess.run([
      binary,
      '--runner=beamkafka',
      '--endpoint=%s' % job_server.endpoint,
      '--environment_type=LOOPBACK',
      '--internal_parallelism=2',
      '--kafka_property=socket.keepalive.enable=true',
      '--kafka_property=reconnect.backoff.ms=100',
      '--job_name=go-map-state',
      '--output=%s' % out,
      '--words=%s' % ','.join(WORDS),
      '--bootstrap_servers=%s' % broker,
      '--application_id=%s' % app_id,
      '--state_dir=%s' % (tmp_path / 'state'),
  ], capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, 'the Go pipeline failed:\n%s\njob server:\n%s' % (
      run.stderr[-4000:], job_server.log_text()[-4000:])
  assert sorted(out.read_text().splitlines()) == _expected_lines(WORDS)
  assert 'application %s' % app_id in job_server.log_text(), 'it ran elsewhere'


def test_a_go_programs_repeated_option_reaches_the_job_server_whole(
    job_server, broker, tmp_path):
  # The second --kafka_property is not key=value: the job server names it,
  # so it got both values apart.
  run = subprocess.run([
      go_pipeline('mapstate'),
      '--runner=beamkafka',
      '--endpoint=%s' % job_server.endpoint,
      '--environment_type=LOOPBACK',
      '--output=%s' % (tmp_path / 'lines.txt'),
      '--bootstrap_servers=%s' % broker,
      '--kafka_property=socket.keepalive.enable=true',
      '--kafka_property=novalue',
  ], capture_output=True, text=True, timeout=300)
  assert run.returncode != 0
  assert "'novalue' is not key=value" in run.stderr, run.stderr[-4000:]
  assert 'socket.keepalive.enable' not in run.stderr, run.stderr[-4000:]
