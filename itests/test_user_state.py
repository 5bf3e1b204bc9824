"""User state of a stateful ParDo on the real broker: per key, kept in the
task's store and changelog, committed with the input offsets, so a job
stopped and started again with the same application id goes on counting."""

import collections
import typing

import apache_beam as beam
from apache_beam.coders import StrUtf8Coder
from apache_beam.coders import VarIntCoder
from apache_beam.io.kafka import WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import userstate
from apache_beam.utils.timestamp import Timestamp

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import unique_topic
from test_restart import _cancel
from test_restart import _wait_for

KEYS = [b'k0', b'k1', b'k2']


class _RunningCount(beam.DoFn):
  """Emits key:n for the n-th element of each key."""
  COUNT = userstate.ReadModifyWriteStateSpec('count', VarIntCoder())

  def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
    n = (count.read() or 0) + 1
    count.write(n)
    yield kv[0], b'%s:%d' % (kv[0], n)


def running_counts(out):
  """The counts `_RunningCount` wrote per key, sorted: exactly-once output
  is 1..n for a key seen n times."""
  counts = collections.defaultdict(list)
  for _, key, value in out:
    k, n = value.split(b':')
    assert k == key
    counts[key].append(int(n))
  return {k: sorted(v) for k, v in counts.items()}


def _run(job_server, broker, app_id, tmp_path, source, sink):
  args = portable_args(job_server) + kafka_args(
      broker, app_id, tmp_path / 'state') + ['--streaming', '--internal_parallelism=2']
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | read_from_start(job_server, broker, source)
      | beam.Map(lambda kv: (kv[1], b'')).with_output_types(typing.Tuple[bytes, bytes])
      | beam.ParDo(_RunningCount()).with_output_types(typing.Tuple[bytes, bytes])
      | WriteToKafka(
          producer_config={'bootstrap.servers': broker},
          topic=sink,
          expansion_service='localhost:%d' % job_server.expansion_port))
  return p.run()


def _produce(broker, source, n):
  produce(broker, source, [(i % 2, None, KEYS[i % 3], None) for i in range(n)])


def test_a_restarted_job_keeps_counting_from_its_committed_state(
    job_server, broker, tmp_path):
  source, sink = unique_topic('state-in'), unique_topic('state-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  app_id = make_app_id('state')

  _produce(broker, source, 30)
  first = _run(job_server, broker, app_id, tmp_path, source, sink)
  out = _wait_for(broker, sink, 30, timeout=90)
  _cancel(first)
  assert len(out) == 30, out

  _produce(broker, source, 30)
  second = _run(job_server, broker, app_id, tmp_path, source, sink)
  out = _wait_for(broker, sink, 60, timeout=90)
  _cancel(second)

  # Each key counted 1..20 once: nothing lost, repeated or restarted at 1.
  assert running_counts(out) == {k: list(range(1, 21)) for k in KEYS}


class _Distinct(beam.DoFn):
  """Set state: the distinct values of a key so far."""
  SEEN = userstate.SetStateSpec('seen', StrUtf8Coder())

  def process(self, kv, seen=beam.DoFn.StateParam(SEEN)):
    seen.add(kv[1][1])
    yield 'set %s@%d:%s' % (kv[0], kv[1][0], ','.join(sorted(seen.read())))


class _SortedLog(beam.DoFn):
  """Ordered-list state: values by sort key, whatever order they came in;
  'clear' drops sort keys [0, 5)."""
  LOG = userstate.OrderedListStateSpec('log', StrUtf8Coder())

  def process(self, kv, log=beam.DoFn.StateParam(LOG)):
    key, (n, value) = kv
    if value == 'clear':
      log.clear_range(Timestamp(micros=0), Timestamp(micros=5))
    else:
      log.add((Timestamp(micros=n), value))
    yield 'list %s@%d:%s' % (key, n, ','.join(v for _, v in log.read()))


def test_set_and_ordered_list_state(job_server, broker, tmp_path, collector):
  source = unique_topic('kinds')
  create_topic(broker, source, 1)
  rows = [('a', 7, 'x'), ('b', 3, 'p'), ('a', 2, 'y'), ('a', 9, 'x'),
          ('b', 1, 'q'), ('a', 4, 'z'), ('b', 8, 'p'), ('a', 0, 'clear')]
  produce(broker, source, [(0, None, b'%s|%d|%s' % (k.encode(), n, v.encode()), None)
                           for k, n, v in rows])
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('kinds'), tmp_path / 'state')
  p = beam.Pipeline(options=PipelineOptions(args))
  keyed = (
      p
      | read_from_start(job_server, broker, source, max_num_records=len(rows))
      | beam.Map(lambda kv: kv[1].decode().split('|'))
      | beam.Map(lambda f: (f[0], (int(f[1]), f[2]))))
  _ = keyed | 'Set' >> beam.ParDo(_Distinct()) | 'CollectSet' >> beam.Map(collector.recorder())
  _ = keyed | 'List' >> beam.ParDo(_SortedLog()) | 'CollectList' >> beam.Map(collector.recorder())
  assert p.run().wait_until_finish() == PipelineState.DONE

  # The state after each key's last row (a: the clear, b: sort key 8).
  lines = dict(line.split(':') for line in collector.lines())
  assert len(lines) == 2 * len(rows), sorted(collector.lines())
  last = {k: lines[k] for k in ('set a@0', 'set b@8', 'list a@0', 'list b@8')}
  assert last == {
      'set a@0': 'clear,x,y,z',
      'set b@8': 'p,q',
      # a: sort keys 2 (y), 4 (z), 7 (x), 9 (x); the clear dropped keys 0..4.
      'list a@0': 'x,x',
      'list b@8': 'q,p,p',
  }, sorted(collector.lines())
