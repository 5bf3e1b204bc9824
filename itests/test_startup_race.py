"""Copies started together race for the group's partitions: assignments
change several times in the first seconds, tasks start, are fenced and
restart. Every record must still be counted once, and every copy must stop
promptly when asked, even one caught starting a task.

`bench/startup.sh ROUNDS` repeats this (the race rarely goes wrong; a soak
finds what one run cannot)."""

import os
import shutil
import time

import pytest

from test_copies import Copy
from test_copies import _Stream
from test_copies import _totals
from test_copies import assert_each_word_counted_once
from test_copies import running_count_job

ROUNDS = int(os.environ.get('BEAM_KAFKA_STARTUP_ROUNDS', '1'))
# More flags for every copy (e.g. a longer poll, which widens the window of
# a batch held across a task's restart).
EXTRA = os.environ.get('BEAM_KAFKA_STARTUP_EXTRA', '').split()


@pytest.mark.parametrize('round_', range(ROUNDS))
def test_copies_started_together_count_every_record_once_and_stop_promptly(
    job_server, binary, broker, tmp_path, round_):
  source, sink, pipeline, app_id = running_count_job(job_server, broker, tmp_path, 'race')
  copies = [Copy(binary, pipeline, broker, app_id, tmp_path / ('c%d' % i),
                 ['--max_cache_memory_usage_mb=100'] + EXTRA) for i in range(3)]
  codes = []
  try:
    # Records flow while the copies are still joining the group.
    stream = _Stream(broker, source)
    time.sleep(5)
    produced = stream.stop()
    out, _ = _totals(broker, sink, produced, timeout=90)
  finally:
    for c in copies:
      try:
        codes.append(c.stop())
      except Exception as e:  # a copy that hangs on SIGTERM
        codes.append(repr(e))
        c.proc.kill()
    _keep_logs(app_id, copies)
  assert_each_word_counted_once(out, produced, app_id)
  # SIGTERM is honoured within the stop timeout, whatever a copy was doing.
  assert codes == [0, 0, 0], '\n'.join(c.log() for c in copies)
  _drop_logs(app_id)


def _keep_logs(app_id, copies):
  """Each copy's whole log under BEAM_KAFKA_STARTUP_LOGS/APP_ID (the soak's
  evidence; `_drop_logs` removes a round's that went right)."""
  root = os.environ.get('BEAM_KAFKA_STARTUP_LOGS')
  if not root:
    return
  where = os.path.join(root, app_id)
  os.makedirs(where, exist_ok=True)
  for i, c in enumerate(copies):
    with open(os.path.join(where, 'copy%d.log' % i), 'w') as f:
      f.write('\n'.join(c.lines))


def _drop_logs(app_id):
  root = os.environ.get('BEAM_KAFKA_STARTUP_LOGS')
  if root:
    shutil.rmtree(os.path.join(root, app_id), ignore_errors=True)
