"""Several `beam-kafka run` copies of one application share its tasks through
the consumer group; copies killed with SIGKILL lose and duplicate nothing."""

import collections
import os
import re
import signal
import threading
import time

import typing

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.io.kafka import WriteToKafka
from apache_beam.transforms import userstate

from conftest import make_app_id
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import read_committed
from kafka_topics import unique_topic
from test_run_command import _run_command
from test_run_command import _save_word_count

WORDS = [b'red', b'green', b'blue']
SESSION_TIMEOUT_MS = 6000


class Copy:
  """One `beam-kafka run` process; its output is kept for assertions."""
  def __init__(self, binary, pipeline, broker, app_id, state_dir, extra=(),
               run_flags=(), session_timeout_ms=SESSION_TIMEOUT_MS):
    # None: the group's session timeout (--group_protocol=consumer).
    session = () if session_timeout_ms is None else (
        '--session_timeout_ms=%d' % session_timeout_ms,)
    self.proc = _run_command(binary, pipeline, broker, app_id, state_dir,
                             *session, '--streaming', *extra,
                             run_flags=run_flags)
    self.lines = []
    self._reader = threading.Thread(target=self._read, daemon=True)
    self._reader.start()

  def _read(self):
    for raw in self.proc.stdout:
      self.lines.append(raw.decode(errors='replace').rstrip())

  def tasks_running(self):
    counts = [int(n) for n in re.findall(r'running (\d+) task\(s\)', '\n'.join(self.lines))]
    return counts[-1] if counts else 0

  def tasks(self):
    """The tasks this copy said it runs last."""
    runs = re.findall(r'running \d+ task\(s\) of application \S+ on \S+: ([0-9_ ]*)', '\n'.join(self.lines))
    return runs[-1].split() if runs else []

  def stop(self, sig=signal.SIGTERM):
    if self.proc.poll() is None:
      self.proc.send_signal(sig)
    self.proc.wait(60)
    self._reader.join(5)
    return self.proc.returncode

  def log(self):
    notable = [l for l in self.lines if ' ERROR ' in l or ' WARN ' in l]
    return '\n'.join(notable[-20:] + ['...'] + self.lines[-15:])


def _wait(condition, timeout, what, copies=()):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if condition():
      return
    time.sleep(0.3)
  logs = ''.join('\n--- copy %d:\n%s' % (i, c.log()) for i, c in enumerate(copies) if c)
  raise AssertionError('timed out waiting for %s%s' % (what, logs))


def _totals(broker, sink, expected_total, timeout):
  """Per-word sums over every (word, window) pane in the sink; asserts no
  pane appears twice."""
  deadline = time.monotonic() + timeout
  while True:
    out = read_committed(broker, sink, expected=1, timeout=5, settle=0.5)
    sums = collections.Counter()
    for _, key, value in out:
      sums[key] += int(value)
    if sum(sums.values()) >= expected_total or time.monotonic() > deadline:
      return out, sums
    time.sleep(1)


def _setup(job_server, broker, tmp_path, name, combine=True):
  source, sink = unique_topic(name + '-in'), unique_topic(name + '-out')
  create_topic(broker, source, 4)
  create_topic(broker, sink, 1)
  pipeline = tmp_path / (name + '.pb')
  _save_word_count(job_server, broker, source, sink, pipeline, window_secs=2,
                   with_window_key=True, combine=combine)
  return source, sink, pipeline


def _produce_words(broker, source, start, n):
  produce(broker, source, [(i % 4, None, WORDS[i % 3], None)
                           for i in range(start, start + n)])


def _check(out, sums, total, story=''):
  keys = [key for _, key, _ in out]
  assert len(keys) == len(set(keys)), 'a pane was written twice: %s' % sorted(keys)
  per_word = collections.Counter()
  for key, n in sums.items():
    per_word[key.split(b'@')[0]] += n
  want = collections.Counter(WORDS[i % 3] for i in range(total))
  if per_word != want and os.environ.get('BEAM_KAFKA_CHAOS_STORY'):
    with open(os.environ['BEAM_KAFKA_CHAOS_STORY'], 'w') as f:
      f.write('%s\n%s\n' % (sorted(sums.items()), story))
  assert per_word == want, (sorted(sums.items()), story)


def test_two_copies_share_the_tasks(job_server, binary, broker, tmp_path):
  source, sink, pipeline = _setup(job_server, broker, tmp_path, 'share')
  app_id = make_app_id('share')
  _produce_words(broker, source, 0, 120)
  a = Copy(binary, pipeline, broker, app_id, tmp_path / 'a')
  b = None
  try:
    _wait(lambda: a.tasks_running() > 0, 60, 'the first copy to run')
    alone = a.tasks_running()
    b = Copy(binary, pipeline, broker, app_id, tmp_path / 'b')
    _wait(lambda: b.tasks_running() > 0 and a.tasks_running() < alone, 90,
          'the second copy to take a share', (a, b))
    _produce_words(broker, source, 120, 120)
    out, sums = _totals(broker, sink, 240, timeout=90)
    share = (a.tasks_running(), b.tasks_running())
  finally:
    codes = [c.stop() for c in (a, b) if c is not None]
  # Each ran part of the tasks while both were up (stopping one moves its
  # share to the other).
  assert 0 < share[0] < alone and 0 < share[1] < alone, (alone, share)
  assert share[0] + share[1] == alone, (alone, share)
  assert codes == [0, 0], (a.log(), b.log() if b else '')
  _check(out, sums, 240)


class _Stream:
  """Writes 12 records every 0.2 s until stopped, so kills land mid-flow."""
  def __init__(self, broker, source, write=_produce_words):
    self.broker, self.source, self.produced = broker, source, 0
    self._write = write
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)
    self._thread.start()

  def _run(self):
    while not self._stop.is_set():
      self._write(self.broker, self.source, self.produced, 12)
      self.produced += 12
      time.sleep(0.2)

  def stop(self):
    self._stop.set()
    self._thread.join(30)
    return self.produced


def _save_story(everyone):
  """Every copy's whole log, for scripts/inspect_app.py and a reader, when
  BEAM_KAFKA_CHAOS_STORY names where."""
  if os.environ.get('BEAM_KAFKA_CHAOS_STORY'):
    for i, c in enumerate(everyone):
      with open('%s.copy%d.log' % (os.environ['BEAM_KAFKA_CHAOS_STORY'], i), 'w') as f:
        f.write('\n'.join(c.lines))


def _kill_three_under_stream(binary, pipeline, broker, source, app_id, tmp_path,
                             everyone, write=_produce_words, extra=()):
  """Runs 3 copies under a steady stream and SIGKILLs one (restarting it with
  a fresh state directory) three times; every copy started goes to
  `everyone`. Returns the copies alive and how many records were produced."""
  copies = [Copy(binary, pipeline, broker, app_id, tmp_path / ('c%d' % i), extra)
            for i in range(3)]
  everyone.extend(copies)
  _wait(lambda: sum(c.tasks_running() for c in copies) > 0, 60,
        'the copies to run')
  stream = _Stream(broker, source, write)
  try:
    for kill in range(3):
      time.sleep(2)
      victim = kill % 3
      victim_log = copies[victim].log
      assert copies[victim].stop(signal.SIGKILL) == -signal.SIGKILL, (
          'the copy had already ended:\n%s' % victim_log())
      copies[victim] = Copy(binary, pipeline, broker, app_id,
                            tmp_path / ('c%d-%d' % (victim, kill)), extra)
      everyone.append(copies[victim])
    time.sleep(2)
  finally:
    produced = stream.stop()
  return copies, produced


@pytest.mark.parametrize('combine', [False, True],
                         ids=['group_by_key', 'combine_per_key'])
def test_copies_killed_with_sigkill_lose_and_duplicate_nothing(
    job_server, binary, broker, tmp_path, combine):
  # A plain GroupByKey (as issue 5 asks), and the same count with combiner
  # lifting (partial sums before the shuffle, so a lost or repeated source
  # bundle changes a sum instead of a count).
  source, sink, pipeline = _setup(job_server, broker, tmp_path, 'chaos',
                                  combine=combine)
  app_id = make_app_id('chaos')
  everyone = []
  try:
    _, produced = _kill_three_under_stream(binary, pipeline, broker, source,
                                           app_id, tmp_path, everyone)
    out, sums = _totals(broker, sink, produced, timeout=150)
  finally:
    for c in everyone:
      c.stop()
  story = 'app %s, source %s, sink %s\n' % (app_id, source, sink) + '\n'.join(
      '%d: %s' % (i, l) for i, c in enumerate(everyone) for l in c.lines
      if 'task' in l and ('running' in l or 'stopped' in l) or ' ERROR ' in l)
  _save_story(everyone)
  _check(out, sums, produced, story)


class _RunningCount(beam.DoFn):
  """User state under SIGKILL: emits word@n for the n-th occurrence of a word."""
  COUNT = userstate.ReadModifyWriteStateSpec('count', VarIntCoder())

  def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
    n = (count.read() or 0) + 1
    count.write(n)
    yield b'%s@%d' % (kv[0], n), b'1'


def save_keyed_pipeline(job_server, broker, source, sink, path, to_kv, dofn, **read_args):
  """Saves ReadFromKafka(source) -> to_kv -> ParDo(dofn) -> WriteToKafka(sink),
  both KV of bytes, for `beam-kafka run` copies."""
  p = beam.Pipeline()
  _ = (
      p
      | read_from_start(job_server, broker, source, **read_args)
      | beam.Map(to_kv).with_output_types(typing.Tuple[bytes, bytes])
      | beam.ParDo(dofn).with_output_types(typing.Tuple[bytes, bytes])
      | WriteToKafka(producer_config={'bootstrap.servers': broker}, topic=sink,
                     expansion_service='localhost:%d' % job_server.expansion_port))
  path.write_bytes(p.to_runner_api().SerializeToString())


def _word_key(kv):
  return kv[1], b''


def running_count_job(job_server, broker, tmp_path, name):
  """A saved `_RunningCount` job per word over 4 source partitions: its
  source, sink, pipeline file and a fresh application id."""
  source, sink = unique_topic(name + '-in'), unique_topic(name + '-out')
  create_topic(broker, source, 4)
  create_topic(broker, sink, 1)
  pipeline = tmp_path / (name + '.pb')
  save_keyed_pipeline(job_server, broker, source, sink, pipeline, _word_key, _RunningCount())
  return source, sink, pipeline, make_app_id(name)


def assert_each_word_counted_once(out, produced, story=''):
  """Every word of the `produced` records counted 1..N once in `out`: no
  update lost, repeated or restarted."""
  counts = collections.defaultdict(list)
  for _, key, _ in out:
    word, n = key.split(b'@')
    counts[word].append(int(n))
  want = collections.Counter(WORDS[i % 3] for i in range(produced))
  assert {w: sorted(ns) for w, ns in counts.items()} == {
      w: list(range(1, n + 1)) for w, n in want.items()}, story


def test_copies_killed_with_sigkill_keep_a_stateful_count_exact(
    job_server, binary, broker, tmp_path):
  # With the SDK's state cache on: a task moving to a copy that ran it
  # before must not read what that copy's harness cached back then.
  out, produced, app_id = _running_count_killed(
      job_server, binary, broker, tmp_path, 'stateful', ['--max_cache_memory_usage_mb=100'])
  assert_each_word_counted_once(out, produced, app_id)


def test_a_copy_killed_mid_transaction_is_fenced_by_the_next_owner_of_its_tasks(
    job_server, binary, broker, tmp_path):
  # A copy's tasks share one transaction, whose id is one of its tasks'.
  # Here transactions may stay open 15 minutes, so what the killed copy left
  # open is aborted in time only if the survivor, starting its tasks,
  # fences their ids: otherwise read_committed readers (the survivor's
  # tasks, the sink's reader) wait for it and the count never completes.
  source, sink, pipeline, app_id = running_count_job(job_server, broker, tmp_path, 'fence')
  extra = ['--transaction_timeout_ms=900000']
  a = b = None
  try:
    # The hardest case: b takes task 1_0, the downstream stage's only task,
    # whose id a's producer of that stage carried while a ran alone, and
    # which comes back to a when b dies. Kept, that producer would fence
    # nobody. The group's assignor gives 1_0 to whichever member id sorts
    # first, so a pair where a got it makes way for a new pair.
    for attempt in range(12):
      a = Copy(binary, pipeline, broker, app_id, tmp_path / ('a%d' % attempt), extra)
      _wait(lambda: a.tasks_running() > 0, 60, 'the first copy to run', (a,))
      alone = a.tasks_running()
      b = Copy(binary, pipeline, broker, app_id, tmp_path / ('b%d' % attempt), extra)
      _wait(lambda: b.tasks_running() > 0 and a.tasks_running() + b.tasks_running() == alone, 90,
            'the second copy to take a share', (a, b))
      if '1_0' in b.tasks():
        break
      for c in (b, a):
        c.stop()
      a = b = None
    assert b is not None, 'no second copy got task 1_0 in 12 pairs'
    stream = _Stream(broker, source)
    try:
      time.sleep(3)
      assert b.stop(signal.SIGKILL) == -signal.SIGKILL, b.log()
      killed_at = len(a.lines)
      time.sleep(2)
    finally:
      produced = stream.stop()
    out, _ = _totals(broker, sink, produced, timeout=120)
  finally:
    for c in (a, b):
      if c is not None:
        c.stop()
    _save_story([c for c in (a, b) if c is not None])
  assert_each_word_counted_once(out, produced, app_id)
  # With b dead, nobody can fence the survivor's producers: one found fenced
  # carried an id the survivor took back without initialising it again,
  # which fenced nobody (the count above survives that only when b's open
  # transaction held no offsets of the task's input).
  fenced = [l for l in a.lines[killed_at:] if 'fenced by a newer instance' in l]
  assert not fenced, '\n'.join(fenced[:5])


def _running_count_killed(job_server, binary, broker, tmp_path, name, extra):
  """A running count's copies SIGKILLed under a stream (`extra`: their
  flags): its output once it counted every record, how many were produced,
  and its application id."""
  source, sink, pipeline, app_id = running_count_job(job_server, broker, tmp_path, name)
  everyone = []
  try:
    _, produced = _kill_three_under_stream(binary, pipeline, broker, source,
                                           app_id, tmp_path, everyone, extra=extra)
    # Every output record's value is 1: the sum is the record count.
    out, _ = _totals(broker, sink, produced, timeout=150)
  finally:
    for c in everyone:
      c.stop()
  _save_story(everyone)
  return out, produced, app_id



SDF_COUNT, SDF_STEP = 60, 8


def test_copies_killed_with_sigkill_at_least_once_lose_nothing_and_restore_whole_counts(
    job_server, binary, broker, tmp_path):
  """at_least_once has no transactions: a kill may repeat work (a count can
  run past the records' number), but no update is lost and every restored
  count is one the job wrote whole, so each word's counts run 1..max without
  a gap. (A stopped task's changelog writes land before its next owner
  restores; a restore never mixes two versions of a value.)"""
  out, produced, app_id = _running_count_killed(
      job_server, binary, broker, tmp_path, 'alo', ['--processing_guarantee=at_least_once'])
  counts = collections.defaultdict(set)
  for _, key, _ in out:
    word, n = key.split(b'@')
    counts[word].add(int(n))
  want = collections.Counter(WORDS[i % 3] for i in range(produced))
  for word, n in want.items():
    top = max(counts[word], default=0)
    assert top >= n, '%s: counted to %d of %d records (%s)' % (word, top, n, app_id)
    assert counts[word] == set(range(1, top + 1)), '%s: a gap in %s (%s)' % (
        word, sorted(set(range(1, top + 1)) - counts[word])[:10], app_id)


class _CountUpTo(beam.DoFn):
  """A self-checkpointing splittable DoFn, like an unbounded source: for a
  record, emits record:0 .. record:SDF_COUNT-1, SDF_STEP at a time, and defers
  the rest of its restriction after each step."""
  class Range(beam.transforms.core.RestrictionProvider):
    def initial_restriction(self, element):
      from apache_beam.io.restriction_trackers import OffsetRange
      return OffsetRange(0, SDF_COUNT)

    def create_tracker(self, restriction):
      from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
      return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
      return restriction.size()

  @beam.DoFn.unbounded_per_element()
  def process(self, kv, tracker=beam.DoFn.RestrictionParam(Range())):
    from apache_beam.utils.timestamp import Duration
    at = tracker.current_restriction().start
    for i in range(at, at + SDF_STEP):
      if not tracker.try_claim(i):
        return
      yield b'%s:%d' % (kv[0], i), b'1'
    tracker.defer_remainder(Duration(seconds=0.05))


def _produce_numbers(broker, source, start, n):
  produce(broker, source, [(i % 4, None, b'%d' % i, None)
                           for i in range(start, start + n)])


def test_copies_killed_with_sigkill_resume_splittable_dofn_checkpoints_exactly(
    job_server, binary, broker, tmp_path):
  """Every record's restriction is checkpointed many times (each residual is
  durable task state until it runs again); copies killed mid-stream lose no
  residual and run none twice."""
  source, sink = unique_topic('sdf-in'), unique_topic('sdf-out')
  create_topic(broker, source, 4)
  create_topic(broker, sink, 1)
  pipeline = tmp_path / 'sdf.pb'
  save_keyed_pipeline(job_server, broker, source, sink, pipeline, _word_key, _CountUpTo())
  app_id = make_app_id('sdf')
  everyone = []
  try:
    _, produced = _kill_three_under_stream(binary, pipeline, broker, source,
                                           app_id, tmp_path, everyone,
                                           write=_produce_numbers)
    out, _ = _totals(broker, sink, produced * SDF_COUNT, timeout=180)
  finally:
    for c in everyone:
      c.stop()
  keys = collections.Counter(key for _, key, _ in out)
  twice = sorted(k for k, n in keys.items() if n > 1)
  assert not twice, 'written twice: %s' % twice[:20]
  want = {b'%d:%d' % (r, i) for r in range(produced) for i in range(SDF_COUNT)}
  missing = sorted(want - set(keys))
  assert not missing, '%d missing, e.g. %s' % (len(missing), missing[:20])
  assert set(keys) == want


def test_two_copies_drained_both_end_done(job_server, binary, broker, tmp_path):
  """A drained (or bounded) job run as several copies is DONE in every copy:
  a copy hears on the control topic of the terminal tasks that finished in
  the others (before, each waited for every terminal task and heard only of
  its own, so neither ever ended)."""
  from test_drain import _drain
  source, sink, pipeline = _setup(job_server, broker, tmp_path, 'drain2')
  app_id = make_app_id('drain2')
  _produce_words(broker, source, 0, 60)
  a = Copy(binary, pipeline, broker, app_id, tmp_path / 'a')
  b = Copy(binary, pipeline, broker, app_id, tmp_path / 'b')
  try:
    _wait(lambda: a.tasks_running() > 0 and b.tasks_running() > 0, 90, 'both copies to run tasks')
    out, sums = _totals(broker, sink, 60, timeout=90)
    _drain(binary, broker, app_id)
    codes = [c.proc.wait(120) for c in (a, b)]
  finally:
    for c in (a, b):
      c.stop(signal.SIGKILL)
  assert codes == [0, 0], (a.log(), b.log())
  for c in (a, b):
    assert any('DONE' in line for line in c.lines), c.log()
  _check(out, sums, 60)
