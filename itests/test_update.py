"""A new version of a running streaming pipeline, submitted with Dataflow's
--update under the same application id, takes over the earlier version's
state: a stateless step added and a DoFn's code changed keep a stateful
DoFn's counts going, exactly. An incompatible version (a key coder changed)
is refused before anything changes, naming the transform, and the running
version goes on."""

import collections
import time
import typing

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.io.kafka import WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import read_committed
from kafka_topics import unique_topic

STRING_DESER = 'org.apache.kafka.common.serialization.StringDeserializer'
KEYS = ['x', 'y', 'z']


class RunningCount(beam.DoFn):
  """How many elements each key has had, ever: state an update must keep."""
  COUNT = ReadModifyWriteStateSpec('count', VarIntCoder())

  def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
    n = (count.read() or 0) + 1
    count.write(n)
    yield kv[0], n


def _pipeline(job_server, broker, app, state, source, sink, version, extra=()):
  """Version 1: key → count → format. Version 2: a stateless step added
  before the count, and the format's code changed. Version 'int': the
  key's coder changed (incompatible)."""
  args = portable_args(job_server) + kafka_args(broker, app, state) + ['--streaming'] + list(extra)
  p = beam.Pipeline(options=PipelineOptions(args))
  read = p | read_from_start(job_server, broker, source, value_deserializer=STRING_DESER)
  if version == 'int':
    keyed = read | 'Key' >> beam.Map(lambda kv: (len(kv[1]), 1)).with_output_types(typing.Tuple[int, int])
  else:
    keyed = read | 'Key' >> beam.Map(lambda kv: (kv[1], 1)).with_output_types(typing.Tuple[str, int])
  if version == 2:
    keyed = keyed | 'Lower' >> beam.Map(lambda kv: (kv[0].lower(), kv[1])).with_output_types(typing.Tuple[str, int])
  tag = b'v2:' if version == 2 else b''
  _ = (
      keyed
      | 'RunningCount' >> beam.ParDo(RunningCount())
      | 'Format' >> beam.Map(lambda kv: (str(kv[0]).encode(), tag + b'%d' % kv[1])).with_output_types(typing.Tuple[bytes, bytes])
      | WriteToKafka(
          producer_config={'bootstrap.servers': broker},
          topic=sink,
          expansion_service='localhost:%d' % job_server.expansion_port))
  return p.run()


def _produce(broker, source, per_key, start):
  records = [(i % 2, None, KEYS[i % 3].encode(), start + i) for i in range(per_key * len(KEYS))]
  produce(broker, source, records)


def _wait_for(broker, sink, count, timeout):
  deadline = time.monotonic() + timeout
  out = []
  while time.monotonic() < deadline:
    out = read_committed(broker, sink, expected=count, timeout=5, settle=0.5)
    if len(out) >= count:
      break
  return out


def _cancel(result):
  result.cancel()
  with pytest.raises(RuntimeError, match='CANCELLED'):
    result.wait_until_finish()


def _counts(out):
  """Each key's outputs, as (tag, count) pairs in order of count."""
  by_key = collections.defaultdict(list)
  for _, key, value in out:
    tag, _, n = value.rpartition(b':')
    by_key[key.decode()].append((tag.decode(), int(n)))
  return {k: sorted(v, key=lambda tn: tn[1]) for k, v in by_key.items()}


def test_a_stateless_step_added_and_a_changed_dofn_carry_the_counts_over(job_server, broker, tmp_path):
  source, sink = unique_topic('update-in'), unique_topic('update-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  app, state = make_app_id('update'), tmp_path / 'state'
  _produce(broker, source, 10, 1_700_000_000_000)

  first = _pipeline(job_server, broker, app, state, source, sink, 1)
  assert len(_wait_for(broker, sink, 30, timeout=120)) == 30, 'version 1 did not count the first records'
  _cancel(first)

  # Without --update, another version is refused and told about it.
  refused = _pipeline(job_server, broker, app, state, source, sink, 2)
  with pytest.raises(RuntimeError) as excinfo:
    refused.wait_until_finish()
  print(excinfo.value)
  assert '--update' in str(excinfo.value), excinfo.value

  second = _pipeline(job_server, broker, app, state, source, sink, 2, ['--update'])
  _produce(broker, source, 10, 1_700_000_100_000)
  out = _wait_for(broker, sink, 60, timeout=120)
  _cancel(second)

  assert len(out) == 60, 'expected 30 counts from each version, got %d' % len(out)
  expected = [('', n) for n in range(1, 11)] + [('v2', n) for n in range(11, 21)]
  assert _counts(out) == {k: expected for k in KEYS}, _counts(out)


def test_a_changed_key_coder_is_refused_naming_the_transform_and_the_running_version_goes_on(
    job_server, broker, tmp_path):
  source, sink = unique_topic('update-in'), unique_topic('update-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  app, state = make_app_id('update-refused'), tmp_path / 'state'
  _produce(broker, source, 5, 1_700_000_000_000)
  running = _pipeline(job_server, broker, app, state, source, sink, 1)
  assert len(_wait_for(broker, sink, 15, timeout=120)) == 15

  refused = _pipeline(job_server, broker, app, state, source, sink, 'int', ['--update'])
  with pytest.raises(RuntimeError) as excinfo:
    refused.wait_until_finish()
  why = str(excinfo.value)
  print(why)
  assert refused.state == PipelineState.FAILED
  assert 'nothing was changed' in why and "'RunningCount'" in why, why
  assert 'string_utf8' in why and 'varint' in why, why

  # The running version never noticed: it counts on from its state.
  _produce(broker, source, 5, 1_700_000_100_000)
  out = _wait_for(broker, sink, 30, timeout=120)
  _cancel(running)
  assert _counts(out) == {k: [('', n) for n in range(1, 11)] for k in KEYS}, _counts(out)
