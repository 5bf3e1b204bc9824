"""A rolling restart with static membership (`--group_instance_id`, one name
per copy, as a Kubernetes StatefulSet's pod names give): a copy stopped and
started again under its name within the session timeout gets its own tasks
back without a rebalance, so the other copy's tasks never stop, and the
records written while it was away are processed exactly once."""

import re

from kafka_topics import produce
from kafka_topics import read_committed
from test_copies import Copy
from test_copies import _wait
from test_copies import assert_each_word_counted_once
from test_copies import running_count_job
from test_source_growth import _words

# Long enough for a copy's restart (its harness starts before it rejoins).
SESSION_TIMEOUT_MS = 30000


def _running_lines(copy):
  return [l for l in copy.lines if re.search(r'running \d+ task\(s\)', l)]


def test_a_copy_restarted_under_its_name_leaves_the_other_copys_tasks_running(
    job_server, binary, broker, tmp_path):
  source, sink, pipeline, app_id = running_count_job(job_server, broker, tmp_path, 'roll')

  def start(name):
    return Copy(binary, pipeline, broker, app_id, tmp_path / name,
                extra=['--group_instance_id=%s-%s' % (app_id, name)],
                session_timeout_ms=SESSION_TIMEOUT_MS)

  a, b = start('a'), start('b')
  b2 = None
  try:
    _wait(lambda: a.tasks() and b.tasks() and
          not set(a.tasks()) & set(b.tasks()), 120,
          'both copies holding tasks', [a, b])
    produce(broker, source, _words([0, 1, 2, 3], 0, 30))
    read_committed(broker, sink, expected=30, timeout=90, settle=0)
    a_tasks, b_tasks = a.tasks(), b.tasks()
    a_said = _running_lines(a)

    assert b.stop() == 0
    # Written while copy b is away: its partitions wait for it.
    produce(broker, source, _words([0, 1, 2, 3], 30, 30))
    b2 = start('b')
    _wait(lambda: sorted(b2.tasks()) == sorted(b_tasks), 90,
          'the restarted copy running its own tasks again', [a, b2])
    produce(broker, source, _words([0, 1, 2, 3], 60, 30))
    out = read_committed(broker, sink, expected=90, timeout=120, settle=3)
    assert_each_word_counted_once(out, 90, app_id)
    assert len(out) == 90

    # Copy a never stopped a task: no rebalance reached it.
    assert a.tasks() == a_tasks
    assert _running_lines(a) == a_said, '\n'.join(_running_lines(a))
    assert not [l for l in a.lines if 'stopped (' in l], a.log()
  finally:
    for c in (b2, b, a):
      if c:
        c.stop()
