"""A new version of a running streaming pipeline, submitted with Dataflow's
--update under the same application id, takes over the earlier version's
state: a stateless step added and a DoFn's code changed keep a stateful
DoFn's counts going and a window's buffer, exactly (it fires once); a new
stateful DoFn starts empty; a failed version is rolled back by submitting
the one before it. An incompatible version (a key coder changed) is refused
before anything changes, naming the transform, and the running version goes
on."""

import collections
import time
import typing

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.io.kafka import WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import window
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import unique_topic
from test_restart import _cancel
from test_restart import _wait_for

STRING_DESER = 'org.apache.kafka.common.serialization.StringDeserializer'
KEYS = ['x', 'y', 'z']
WINDOW_MS = 60_000
BASE = 1_700_000_000_000 - 1_700_000_000_000 % WINDOW_MS


class RunningCount(beam.DoFn):
  """How many elements each key has had, ever: state an update must keep."""
  COUNT = ReadModifyWriteStateSpec('count', VarIntCoder())

  def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
    n = (count.read() or 0) + 1
    count.write(n)
    yield kv[0], n


class Broken(beam.DoFn):
  """A stateful step whose version fails on its first element."""
  SEEN = ReadModifyWriteStateSpec('seen', VarIntCoder())

  def process(self, kv, seen=beam.DoFn.StateParam(SEEN)):
    raise ValueError('version 4 is broken')


def _format(tag):
  return beam.Map(lambda kv: (str(kv[0]).encode(), tag + b'%d' % kv[1])).with_output_types(typing.Tuple[bytes, bytes])


def _pipeline(job_server, broker, app, state, source, sink, version, extra=()):
  """Version 1: key → running count, and per-minute sums. Version 2: a
  stateless step added before the count, the format's code changed.
  Version 3: version 2 and a new stateful count. Version 4: version 3 and a
  new stateful step that fails. Version 'renamed': version 1 with the
  count and the sums renamed. Version 'int': the key's coder changed."""
  args = portable_args(job_server) + kafka_args(broker, app, state) + ['--streaming'] + list(extra)
  p = beam.Pipeline(options=PipelineOptions(args))
  read = p | read_from_start(
      job_server, broker, source, value_deserializer=STRING_DESER, timestamp_policy=ReadFromKafka.create_time_policy)
  if version == 'int':
    keyed = read | 'Key' >> beam.Map(lambda kv: (len(kv[1]), 1)).with_output_types(typing.Tuple[int, int])
  else:
    keyed = read | 'Key' >> beam.Map(lambda kv: (kv[1], 1)).with_output_types(typing.Tuple[str, int])
  if version in (2, 3, 4):
    keyed = keyed | 'Lower' >> beam.Map(lambda kv: (kv[0].lower(), kv[1])).with_output_types(typing.Tuple[str, int])
  renamed = version == 'renamed'
  counts = [
      keyed
      | ('Counter' if renamed else 'RunningCount') >> beam.ParDo(RunningCount())
      | 'Format' >> _format(b'v2:' if version in (2, 3, 4, 'renamed') else b'')
  ]
  if version in (3, 4):
    counts.append(keyed | 'NewCount' >> beam.ParDo(RunningCount()) | 'FormatNew' >> _format(b'new:'))
  if version == 4:
    counts.append(keyed | 'Broken' >> beam.ParDo(Broken()) | 'FormatBroken' >> _format(b'broken:'))
  counts.append(
      keyed
      | 'Window' >> beam.WindowInto(window.FixedWindows(WINDOW_MS // 1000))
      | ('Total' if renamed else 'Sum') >> beam.CombinePerKey(sum)
      | 'FormatSum' >> beam.Map(lambda kv, w=beam.DoFn.WindowParam: (b'%s@%d' % (str(kv[0]).encode(), int(w.start)), b'sum:%d' % kv[1]))
      .with_output_types(typing.Tuple[bytes, bytes]))
  _ = (
      counts
      | beam.Flatten().with_output_types(typing.Tuple[bytes, bytes])
      | WriteToKafka(
          producer_config={'bootstrap.servers': broker},
          topic=sink,
          expansion_service='localhost:%d' % job_server.expansion_port))
  return p.run()


def _produce(broker, source, per_key, start):
  """`per_key` records of each key, in the minute after `start`."""
  records = [(i % 2, None, KEYS[i % 3].encode(), start + i) for i in range(per_key * len(KEYS))]
  produce(broker, source, records)


def _tick(broker, source, at):
  """A record on each partition at `at`: the watermark passes what is before it."""
  produce(broker, source, [(p, None, b'tick', at) for p in range(2)])


def _topics(broker):
  """A new source of 2 partitions and a sink of 1."""
  source, sink = unique_topic('update-in'), unique_topic('update-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  return source, sink


def _version_one_counted(job_server, broker, tmp_path, name):
  """New topics, 5 records of each key, and version 1 running under a new
  application id once it counted them: (source, sink, app, state, result)."""
  source, sink = _topics(broker)
  app, state = make_app_id(name), tmp_path / 'state'
  _produce(broker, source, 5, BASE)
  result = _pipeline(job_server, broker, app, state, source, sink, 1, HOLD)
  assert len(_wait_for(broker, sink, 15, timeout=120)) == 15, 'version 1 did not count the first records'
  return source, sink, app, state, result


def _counts(out):
  """Each key's running counts as (tag, count) in order of count, and each
  key and window's sums (the ticks left out)."""
  by_key, sums = collections.defaultdict(list), collections.defaultdict(list)
  for _, key, value in out:
    key = key.decode()
    if key.startswith('tick'):
      continue
    tag, _, n = value.rpartition(b':')
    if tag == b'sum':
      sums[key].append(int(n))
    else:
      by_key[key].append((tag.decode(), int(n)))
  return {k: sorted(v, key=lambda tn: (tn[0] == 'new', tn[1])) for k, v in by_key.items()}, dict(sums)


def _running(out):
  return _counts(out)[0]


def _assert_counted_on(out, first, last, window_sum=None):
  """Each key counted 1..first by version 1 (untagged), then on to `last`
  by version 2 (tagged); with `window_sum`, each key's first minute fired
  once, with that sum."""
  running, sums = _counts(out)
  expected = [('', n) for n in range(1, first + 1)] + [('v2', n) for n in range(first + 1, last + 1)]
  assert running == {k: expected for k in KEYS}, running
  if window_sum is not None:
    assert sums == {'%s@%d' % (k, BASE // 1000): [window_sum] for k in KEYS}, sums


# A version's first run holds windows back (no idle partition moves the
# watermark); ticks move it.
HOLD = ['--read_idle_timeout_ms=3600000']


def test_a_stateless_step_added_and_a_changed_dofn_carry_the_counts_and_windows_over(job_server, broker, tmp_path):
  source, sink = _topics(broker)
  app, state = make_app_id('update'), tmp_path / 'state'
  _produce(broker, source, 10, BASE)

  first = _pipeline(job_server, broker, app, state, source, sink, 1, HOLD)
  assert len(_wait_for(broker, sink, 30, timeout=120)) == 30, 'version 1 did not count the first records'
  time.sleep(2)  # a few commit cycles: the open window's buffer is in the changelog
  _cancel(first)

  # Without --update, another version is refused and told about it.
  refused = _pipeline(job_server, broker, app, state, source, sink, 2, HOLD)
  with pytest.raises(RuntimeError) as excinfo:
    refused.wait_until_finish()
  assert '--update' in str(excinfo.value), excinfo.value

  second = _pipeline(job_server, broker, app, state, source, sink, 2, HOLD + ['--update'])
  _produce(broker, source, 10, BASE + 1_000)
  _tick(broker, source, BASE + 3 * WINDOW_MS)
  # 30 + 30 counts, 2 of the ticks, and the first minute's 3 sums.
  out = _wait_for(broker, sink, 65, timeout=120)
  _cancel(second)

  # Each key's first minute fires once, with both versions' records.
  _assert_counted_on(out, 10, 20, window_sum=20)


def test_a_new_stateful_transform_starts_empty_and_a_failed_update_rolls_back(job_server, broker, tmp_path):
  source, sink, app, state, first = _version_one_counted(job_server, broker, tmp_path, 'update-rollback')
  _cancel(first)

  third = _pipeline(job_server, broker, app, state, source, sink, 3, HOLD + ['--update'])
  _produce(broker, source, 5, BASE + 1_000)
  assert len(_wait_for(broker, sink, 45, timeout=120)) == 45, 'version 3 did not count on'
  _cancel(third)

  # Version 4 adds a stateful step that fails: the job fails, having
  # committed nothing of the records it was given.
  _produce(broker, source, 5, BASE + 2_000)
  fourth = _pipeline(job_server, broker, app, state, source, sink, 4, HOLD + ['--update'])
  with pytest.raises(RuntimeError, match='version 4 is broken'):
    fourth.wait_until_finish()
  assert fourth.state == PipelineState.FAILED

  # Version 3 again: a rollback (its plan is the one before version 4's),
  # so dropping version 4's stateful step needs no mapping.
  back = _pipeline(job_server, broker, app, state, source, sink, 3, HOLD + ['--update'])
  out = _wait_for(broker, sink, 75, timeout=120)
  _cancel(back)
  running = _running(out)
  expected = [('', n) for n in range(1, 6)] + [('v2', n) for n in range(6, 16)] + [('new', n) for n in range(1, 11)]
  assert running == {k: expected for k in KEYS}, running
  assert not any(v.startswith(b'broken:') for _, _, v in out)


def test_transforms_renamed_with_a_mapping_keep_their_state(job_server, broker, tmp_path):
  source, sink, app, state, first = _version_one_counted(job_server, broker, tmp_path, 'update-renamed')
  time.sleep(2)
  _cancel(first)

  # Renamed without a mapping: the earlier state would be lost.
  refused = _pipeline(job_server, broker, app, state, source, sink, 'renamed', HOLD + ['--update'])
  with pytest.raises(RuntimeError, match="stateful 'RunningCount' is gone"):
    refused.wait_until_finish()

  mapping = '--transform_name_mapping={"RunningCount": "Counter", "Sum": "Total"}'
  renamed = _pipeline(job_server, broker, app, state, source, sink, 'renamed', HOLD + ['--update', mapping])
  _produce(broker, source, 5, BASE + 1_000)
  assert len(_wait_for(broker, sink, 30, timeout=120)) == 30
  _cancel(renamed)

  # The renamed version again, as a restarted copy would run it: with the
  # same flags, and with none (the rename is on record).
  for extra in ([mapping, '--update'], []):
    again = _pipeline(job_server, broker, app, state, source, sink, 'renamed', HOLD + extra)
    time.sleep(3)
    _cancel(again)
  final = _pipeline(job_server, broker, app, state, source, sink, 'renamed', HOLD)
  _produce(broker, source, 5, BASE + 2_000)
  _tick(broker, source, BASE + 3 * WINDOW_MS)
  out = _wait_for(broker, sink, 50, timeout=120)
  _cancel(final)
  _assert_counted_on(out, 5, 15, window_sum=15)


def test_a_changed_key_coder_is_refused_naming_the_transform_and_the_running_version_goes_on(
    job_server, broker, tmp_path):
  source, sink, app, state, running = _version_one_counted(job_server, broker, tmp_path, 'update-refused')

  refused = _pipeline(job_server, broker, app, state, source, sink, 'int', ['--update'])
  with pytest.raises(RuntimeError) as excinfo:
    refused.wait_until_finish()
  why = str(excinfo.value)
  assert refused.state == PipelineState.FAILED
  assert 'nothing was changed' in why and "'RunningCount'" in why, why
  assert 'string_utf8' in why and 'varint' in why, why

  # The running version never noticed: it counts on from its state.
  _produce(broker, source, 5, BASE + 1_000)
  out = _wait_for(broker, sink, 30, timeout=120)
  _cancel(running)
  _assert_counted_on(out, 10, 10)


def test_an_update_while_the_earlier_version_runs_takes_over_and_that_one_steps_down(job_server, broker, tmp_path):
  source, sink, app, state, running = _version_one_counted(job_server, broker, tmp_path, 'update-busy')
  time.sleep(3)  # it has reported itself on the copies topic

  # As Dataflow's --update replaces a running job: the new version takes
  # over, and the running one stops once it sees the new one on record.
  second = _pipeline(job_server, broker, app, state, source, sink, 2, HOLD + ['--update'])
  with pytest.raises(RuntimeError, match='now runs another version of the pipeline'):
    running.wait_until_finish()
  assert running.state == PipelineState.CANCELLED
  _produce(broker, source, 5, BASE + 1_000)
  assert len(_wait_for(broker, sink, 30, timeout=120)) == 30

  # Going back while the new version runs would make the two take turns.
  back = _pipeline(job_server, broker, app, state, source, sink, 1, HOLD + ['--update'])
  with pytest.raises(RuntimeError, match='whose copies are still running'):
    back.wait_until_finish()
  out = _wait_for(broker, sink, 30, timeout=30)
  _cancel(second)
  _assert_counted_on(out, 5, 10)
