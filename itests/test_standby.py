"""Standby replicas (`--num_standby_replicas`): a copy keeps a warm store of
the tasks another copy runs, tailing their changelogs, and when that copy is
killed with SIGKILL the tasks start from the warm stores: each reads only
what its changelog got after the standby's last read (nothing, here: the
input stopped before the kill). A copy joining while another runs warms up
first: it joins the group once its stores caught up, and the tasks it is
given start from them. The running count stays exact."""

import re
import signal
import time

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition

from test_copies import Copy
from test_copies import _Stream
from test_copies import _wait
from test_copies import assert_each_word_counted_once
from test_copies import running_count_job
from kafka_topics import read_committed

STANDBY = ['--num_standby_replicas=1', '--internal_parallelism=4']


def _changelog_ends(broker, app_id, tasks):
  """The high offset of each task's changelog partition ('s_p' -> offset)."""
  c = Consumer({'bootstrap.servers': broker, 'group.id': 'ends-%s' % app_id})
  try:
    ends = {}
    for task in tasks:
      sub, part = task.split('_')
      topic = '__beam_%s_state_%s-changelog' % (app_id, sub)
      ends[task] = c.get_watermark_offsets(TopicPartition(topic, int(part)), timeout=10)[1]
    return ends
  finally:
    c.close()


def _standby_starts(copy):
  """task -> the changelog offset its standby store was current to."""
  found = re.findall(r'task (\d+_\d+) starts from this copy\'s standby store, current to changelog offset (\d+)',
                     '\n'.join(copy.lines))
  return {t: int(n) for t, n in found}


def test_a_killed_copys_tasks_start_from_the_standby_stores_of_the_other(
    job_server, binary, broker, tmp_path):
  source, sink, pipeline, app_id = running_count_job(job_server, broker, tmp_path, 'standby')
  a = Copy(binary, pipeline, broker, app_id, tmp_path / 'a', extra=STANDBY)
  b = None
  try:
    _wait(lambda: a.tasks_running() > 0, 120, 'copy a to run its tasks', [a])
    b = Copy(binary, pipeline, broker, app_id, tmp_path / 'b', extra=STANDBY)
    _wait(lambda: a.tasks() and b.tasks() and len(a.tasks()) + len(b.tasks()) == 8, 120,
          'the two copies to share the 8 tasks', [a, b])
    stream = _Stream(broker, source)
    time.sleep(6)
    produced = stream.stop()
    _wait(lambda: len(read_committed(broker, sink, expected=produced, timeout=5)) >= produced, 120,
          'every record counted', [a, b])
    a_tasks = a.tasks()
    # b stands by for every task of a (two copies, one replica each).
    _wait(lambda: all("standing by for task %s" % t in '\n'.join(b.lines) for t in a_tasks), 60,
          "b to stand by for a's tasks %s" % a_tasks, [a, b])
    ends = _changelog_ends(broker, app_id, a_tasks)
    time.sleep(3)  # the standby reads what the changelogs hold
    a.stop(signal.SIGKILL)
    _wait(lambda: len(b.tasks()) == 8, 120, 'b to take over every task', [b])
    starts = _standby_starts(b)
    stateful = [t for t in a_tasks if ends[t] > 0]
    assert stateful, 'a ran tasks that wrote state: %s' % ends
    for t in stateful:
      # read_committed: the standby is current past the last transaction
      # marker it read (one may land after its last read).
      assert t in starts and starts[t] >= ends[t] - 1, (t, starts, ends, b.log())
    stream = _Stream(broker, source)
    time.sleep(3)
    more = stream.stop()
    _wait(lambda: len(read_committed(broker, sink, expected=produced + more, timeout=5)) >= produced + more,
          120, 'the records after the kill counted', [b])
    out = read_committed(broker, sink, expected=produced + more, timeout=10, settle=2)
    assert_each_word_counted_once(out, produced + more, b.log())
  finally:
    for c in (a, b):
      if c:
        c.stop()


def test_a_joining_copy_warms_up_before_it_takes_tasks(job_server, binary, broker, tmp_path):
  source, sink, pipeline, app_id = running_count_job(job_server, broker, tmp_path, 'warmup')
  a = Copy(binary, pipeline, broker, app_id, tmp_path / 'a', extra=STANDBY)
  b = None
  stream = None
  try:
    _wait(lambda: a.tasks_running() == 8, 120, 'copy a to run all 8 tasks', [a])
    stream = _Stream(broker, source)
    time.sleep(6)
    # Scale out under the steady input: b warms every task a runs first.
    b = Copy(binary, pipeline, broker, app_id, tmp_path / 'b', extra=STANDBY)
    _wait(lambda: b.tasks_running() > 0, 120, 'b to take some tasks', [a, b])
    log = '\n'.join(b.lines)
    warmed = re.search(r'warmed up in [0-9.]+ s: (\d+) standby store\(s\)', log)
    assert warmed and int(warmed.group(1)) == 8, b.log()
    first_tasks = re.search(r'running [1-9]\d* task\(s\)', log)
    assert warmed.start() < first_tasks.start(), 'b ran tasks before it warmed up:\n' + b.log()
    # Every task b was given that had state started from its warm store.
    ends = _changelog_ends(broker, app_id, b.tasks())
    starts = _standby_starts(b)
    stateful = [t for t in b.tasks() if ends[t] > 0]
    assert stateful and all(t in starts for t in stateful), (stateful, starts, b.log())
    produced = stream.stop()
    stream = None
    out = read_committed(broker, sink, expected=produced, timeout=120, settle=2)
    assert_each_word_counted_once(out, produced, a.log() + b.log())
  finally:
    if stream:
      stream.stop()
    for c in (a, b):
      if c:
        c.stop()
