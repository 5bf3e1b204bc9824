"""Incremental rebalancing (`--group_protocol=consumer`, KIP-848): a running
exactly-once stateful job scaled 1 -> 3 -> 1 copies under a steady input.
Only the tasks whose partitions move stop (each commits a last cycle before
its partitions go, and no task stops otherwise); every task a copy keeps runs
on, its commit cycles going on through the rebalance. The output is exact,
and the copies catch up with the input within 30 s of each change.

The brokers' range assignor is not fully sticky: as copies join or leave one
at a time, a copy's range may shift (seen: copy a holding partition 2 was
given partitions 0 and 1 when b left, and 2 went to c until c left too), so
a copy may hand a task over and take it back within one step. The check is
on the tasks a copy kept throughout, and the copies leave together."""

import json
import re
import signal
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition

from test_copies import Copy
from test_copies import _Stream
from test_copies import _wait
from test_copies import assert_each_word_counted_once
from test_copies import running_count_job

# Four tasks in each of the job's two sub-topologies.
KIP848 = ['--group_protocol=consumer', '--internal_parallelism=4']


class _OutputCount:
  """Counts the sink's committed records as they come, and when."""
  def __init__(self, broker, sink):
    self._consumer = Consumer({
        'bootstrap.servers': broker, 'group.id': 'count-%s' % sink,
        'isolation.level': 'read_committed', 'enable.auto.commit': False})
    self._consumer.assign([TopicPartition(sink, 0, 0)])
    self.records = []
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)
    self._thread.start()

  def _run(self):
    while not self._stop.is_set():
      for m in self._consumer.consume(500, 0.2):
        if not m.error():
          self.records.append((m.partition(), m.key(), m.value()))

  def stop(self):
    self._stop.set()
    self._thread.join(10)
    self._consumer.close()


class _TimedStream(_Stream):
  """The steady input, remembering how much was produced when."""
  def __init__(self, broker, source):
    self.history = []
    super().__init__(broker, source)

  def _run(self):
    while not self._stop.is_set():
      self._write(self.broker, self.source, self.produced, 12)
      self.produced += 12
      self.history.append((time.monotonic(), self.produced))
      time.sleep(0.2)

  def produced_by(self, when):
    done = [n for t, n in self.history if t <= when]
    return done[-1] if done else 0


def _status_url(copy):
  found = re.findall(r'status page on (http://\S+/)', '\n'.join(copy.lines))
  return found[-1] if found else None


def _own_tasks(copy):
  """{task: (incarnation, commits)} of the tasks this copy runs, from its
  own status API."""
  url = _status_url(copy)
  if not url:
    return {}
  with urllib.request.urlopen(url + 'api/jobs', timeout=10) as r:
    jobs = json.loads(r.read())['jobs']
  if not jobs:
    return {}
  with urllib.request.urlopen(url + 'api/jobs/%s' % jobs[0]['id'], timeout=10) as r:
    job = json.loads(r.read())
  me = [c['copy'] for c in job.get('copies', []) if c.get('this')]
  return {t['task']: (t['incarnation'], t['commits']) for t in job['tasks']
          if t['state'] == 'Running' and (not me or t['copy'] == me[0])}


def _handed_over(copy, since=0):
  """The tasks this copy handed over to another (after its line `since`)."""
  return set(re.findall(r'task handed over: .* task=(\S+)', '\n'.join(copy.lines[since:])))


def _start(binary, pipeline, broker, app_id, tmp_path, name, guarantee):
  return Copy(binary, pipeline, broker, app_id, tmp_path / name,
              extra=KIP848 + ['--processing_guarantee=%s' % guarantee],
              run_flags=['--ui-port', '0'], session_timeout_ms=None)


def _caught_up(stream, output, within, what, copies):
  """Waits (up to `within` s) until the output holds one record for every
  input record produced more than a second ago; returns how long it took."""
  began = time.monotonic()
  _wait(lambda: len(output.records) >= stream.produced_by(time.monotonic() - 1.0),
        within, 'the copies catching up after %s (output %d, produced %d)' % (
            what, len(output.records), stream.produced), copies)
  return time.monotonic() - began


def _assert_kept_running(before, after, copy, what):
  """Every task of `before` still runs in `copy`, as the same incarnation,
  and committed since."""
  story = '\n'.join(l for l in copy.lines if re.search(
      r'running \d+ task|handed over|no longer assigned|stopped|WARN|ERROR', l))
  for task, (incarnation, commits) in before.items():
    assert task in after, '%s: task %s left copy a\n%s' % (what, task, story)
    assert after[task][0] == incarnation, (
        '%s: task %s restarted (%s)\n%s' % (what, task, after[task], story))
    assert after[task][1] > commits, (
        '%s: task %s committed nothing since (%s)' % (what, task, after[task]))


@pytest.mark.parametrize('guarantee', ['exactly_once', 'at_least_once'])
def test_scaling_one_to_three_to_one_stops_only_the_tasks_that_move(
    job_server, binary, broker, tmp_path, guarantee):
  # Without transactions too: a task handing over takes no more input, so
  # nothing it wrote is written again by its next owner.
  source, sink, pipeline, app_id = running_count_job(job_server, broker, tmp_path, 'incr')
  a = _start(binary, pipeline, broker, app_id, tmp_path, 'a', guarantee)
  others, stream, output = [], None, None
  try:
    _wait(lambda: len(a.tasks()) == 8 and set(_own_tasks(a)) == set(a.tasks()),
          120, 'copy a running every task', [a])
    every_task = set(_own_tasks(a))
    output = _OutputCount(broker, sink)
    stream = _TimedStream(broker, source)
    _caught_up(stream, output, 60, 'the start', [a])

    # 1 -> 3: copy a hands tasks over; those it keeps run on.
    before = _own_tasks(a)
    others = [_start(binary, pipeline, broker, app_id, tmp_path, n, guarantee)
              for n in ('b', 'c')]
    everyone = [a] + others
    _wait(lambda: all(_own_tasks(c) for c in everyone) and
          set().union(*(_own_tasks(c) for c in everyone)) == every_task and
          sum(len(_own_tasks(c)) for c in everyone) == len(every_task),
          90, 'the three copies sharing the tasks', everyone)
    took = _caught_up(stream, output, 30, 'scaling out', everyone)
    # The group may move a task away and back as the copies join one by
    # one; a task that never left copy a never stopped there.
    moved = _handed_over(a)
    assert moved, 'copy a handed no task over:\n%s' % a.log()
    kept = {t: v for t, v in before.items() if t in _own_tasks(a) and t not in moved}
    _assert_kept_running(kept, _own_tasks(a), a, 'scaling out')
    for c in everyone:
      assert not [l for l in c.lines if 'stopped (' in l], c.log()
    rehomed = [l for c in everyone for l in c.lines if 'now carries task' in l]
    print('\n'.join(rehomed))
    print('1 -> 3: copy a handed %d task(s) over and kept %d running; caught up in %.1f s'
          % (len(moved), len(kept), took))

    # 3 -> 1: copies b and c leave together (each commits its tasks first).
    before, mark = _own_tasks(a), len(a.lines)
    for c in others:
      c.proc.send_signal(signal.SIGTERM)
    for c in others:
      assert c.stop() == 0, c.log()
    _wait(lambda: set(_own_tasks(a)) == every_task, 90,
          'copy a running every task again', [a])
    took = _caught_up(stream, output, 30, 'scaling in', [a])
    moved = _handed_over(a, mark)
    kept = {t: v for t, v in before.items() if t not in moved}
    _assert_kept_running(kept, _own_tasks(a), a, 'scaling in')
    assert not [l for l in a.lines if 'stopped (' in l], a.log()
    print('3 -> 1: copy a kept %d of its %d task(s) running (%d handed over and back); '
          'caught up in %.1f s' % (len(kept), len(before), len(moved), took))

    produced = stream.stop()
    _wait(lambda: len(output.records) >= produced, 60, 'every record counted', [a])
    time.sleep(2)
    assert_each_word_counted_once(output.records, produced, app_id)
    assert len(output.records) == produced
    assert not [l for l in a.lines if ' ERROR ' in l], a.log()
  finally:
    if stream:
      stream.stop()
    if output:
      output.stop()
    for c in others + [a]:
      c.stop()
