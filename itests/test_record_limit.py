"""Records as large as the brokers take. A job learns the brokers' largest
produce request (socket.request.max.bytes) as it starts and sizes its
topics, producers and consumers to it: a GroupByKey key past the runner's
old fixed 64 MiB goes through a broker that takes it, and a record past a
broker's limit fails at once with a message naming the setting (a request
over it would make the broker drop the connection, retried until timeout).
"""

import pytest

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from own_broker import own_broker

MIB = 1 << 20


def _pipeline(job_server, broker, tmp_path, name):
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id(name), tmp_path / 'state')
  return beam.Pipeline(options=PipelineOptions(args))


def _big_keys(p, key_bytes):
  """Two values under one key of `key_bytes` bytes and one under another,
  grouped; yields (first byte of the key, its size, the values)."""
  return (
      p
      | beam.Create([(b'a', 1), (b'a', 2), (b'b', 3)])
      | beam.MapTuple(lambda k, v: (k * key_bytes, v))
      | beam.GroupByKey()
      | beam.MapTuple(lambda k, vs: '%s:%d:%s' % (k[:1].decode(), len(k), sorted(vs))))


def test_a_key_larger_than_64_mib_is_grouped_where_the_broker_takes_it(
    job_server, broker, tmp_path, collector):
  # The shared test broker takes requests up to 300 MiB.
  size = 80 * MIB
  p = _pipeline(job_server, broker, tmp_path, 'bigkey')
  _ = _big_keys(p, size) | beam.Map(collector.recorder())
  assert p.run().wait_until_finish() == PipelineState.DONE
  assert sorted(collector.lines()) == ['a:%d:[1, 2]' % size, 'b:%d:[3]' % size]


@pytest.fixture(scope='module')
def small_request_broker():
  """A broker that takes produce requests of at most 8 MiB."""
  with own_broker(29700, properties={'socket.request.max.bytes': 8 * MIB}) as port:
    yield 'localhost:%d' % port


def test_a_record_past_the_brokers_request_limit_fails_at_once_naming_it(
    job_server, small_request_broker, tmp_path, collector):
  # Under the limit (8 MiB less the runner's 1 MiB of framing): grouped.
  p = _pipeline(job_server, small_request_broker, tmp_path, 'underlimit')
  _ = _big_keys(p, 6 * MIB) | beam.Map(collector.recorder())
  assert p.run().wait_until_finish() == PipelineState.DONE
  assert sorted(collector.lines()) == ['a:%d:[1, 2]' % (6 * MIB), 'b:%d:[3]' % (6 * MIB)]

  p = _pipeline(job_server, small_request_broker, tmp_path, 'overlimit')
  _ = _big_keys(p, 9 * MIB)
  with pytest.raises(Exception) as excinfo:
    p.run().wait_until_finish()
  text = str(excinfo.value)
  # Refused by the producer (without the learned limit: sent, the
  # connection dropped, retried until "Message timed out").
  assert 'MessageSizeTooLarge' in text and 'socket.request.max.bytes' in text, text
