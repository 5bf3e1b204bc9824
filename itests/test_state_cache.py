"""The SDK's state cache (`--max_cache_memory_usage_mb`) across copies: a
task that moves to another copy and back must not read what the first
copy's harness cached before the move."""

import collections

from kafka_topics import produce
from kafka_topics import read_committed
from test_copies import Copy
from test_copies import _wait
from test_copies import running_count_job

# Many keys, so every shuffle partition (every counting task) holds some.
KEYS = [b'k%02d' % i for i in range(40)]
CACHE = ['--max_cache_memory_usage_mb=100']


def _produce_round(broker, source):
  """One record per key, spread over the source's 4 partitions."""
  produce(broker, source, [(i % 4, None, k, None) for i, k in enumerate(KEYS)])


def _counts(broker, sink, rounds, timeout=120):
  """Each key's counts in the sink, once it holds `rounds` per key."""
  latest = []

  def enough():
    latest[:] = read_committed(broker, sink, expected=1, timeout=5, settle=0.5)
    return len(latest) >= rounds * len(KEYS)

  _wait(enough, timeout, '%d counts per key' % rounds)
  counts = collections.defaultdict(list)
  for _, key, _ in latest:
    word, n = key.split(b'@')
    counts[word].append(int(n))
  return {k: sorted(ns) for k, ns in counts.items()}


def test_a_task_moved_away_and_back_never_reads_stale_cached_state(
    job_server, binary, broker, tmp_path):
  source, sink, pipeline, app_id = running_count_job(job_server, broker, tmp_path, 'cache')
  a = Copy(binary, pipeline, broker, app_id, tmp_path / 'a', CACHE)
  b = None
  try:
    _wait(lambda: a.tasks_running() > 0, 60, 'the first copy to run')
    alone = a.tasks_running()
    # 1. Copy a counts every key once: its harness caches every count.
    _produce_round(broker, source)
    _counts(broker, sink, 1)
    # 2. Copy b takes a share of the tasks and counts every key again:
    #    the state of b's tasks moves past what a's harness cached.
    b = Copy(binary, pipeline, broker, app_id, tmp_path / 'b', CACHE)
    _wait(lambda: b.tasks_running() > 0 and a.tasks_running() < alone, 90,
          'the second copy to take a share')
    share = (a.tasks_running(), b.tasks_running())
    _produce_round(broker, source)
    _counts(broker, sink, 2)
    # 3. b stops: its tasks move back to a, whose harness still caches
    #    those keys' counts from step 1.
    assert b.stop() == 0, b.log()
    _wait(lambda: a.tasks_running() == alone, 90, 'the tasks to come back')
    _produce_round(broker, source)
    counts = _counts(broker, sink, 3)
  finally:
    for c in (a, b):
      if c is not None:
        c.stop()
  assert 0 < share[1] < alone, ('b ran no share of the tasks', alone, share)
  # A stale read would count 2 again (from a's cached 1) for every key of a
  # task that moved, instead of 3.
  assert counts == {k: [1, 2, 3] for k in KEYS}, (counts, a.log())
