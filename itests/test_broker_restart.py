"""A broker that crashes and comes back is a non-event: under a running
exactly-once job with user state, the broker is SIGKILLed, stays down for
20 s and restarts on its data. The job's tasks wait and restart from their
last commit; the job reaches DONE and every count is written exactly once.

The broker here is the test's own (its own port and data), so the other
tests' broker never goes down."""

import threading
import time
import typing

import pytest

import apache_beam as beam
from apache_beam.io.kafka import WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from conftest import kafka_args
from conftest import make_app_id
from conftest import portable_args
from conftest import read_from_start
from kafka_topics import create_topic
from kafka_topics import produce
from kafka_topics import read_committed
from kafka_topics import unique_topic
from own_broker import kafka
from own_broker import own_broker
from test_user_state import KEYS
from test_user_state import _RunningCount
from test_user_state import running_counts

DOWN_SECS = 20
HALF = 1500


@pytest.fixture(scope='module')
def own():
  with own_broker(29092) as port:
    yield 'localhost:%d' % port, str(port)


def _slow(kv):
  time.sleep(0.004)  # the job is mid-way when the broker dies
  return kv[1], b''


def _produce(broker, source, start, n):
  produce(broker, source,
          [(i % 2, None, KEYS[i % 3], None) for i in range(start, start + n)])


@pytest.mark.timeout_seconds(420)
def test_a_broker_down_for_20_seconds_under_an_exactly_once_job(
    job_server, own, tmp_path):
  broker, port = own
  source, sink = unique_topic('bounce-in'), unique_topic('bounce-out')
  create_topic(broker, source, 2)
  create_topic(broker, sink, 1)
  _produce(broker, source, 0, HALF)
  # With the SDK's state cache on: the restarted tasks run in the same
  # harness, whose cache holds the aborted cycle's writes under the old
  # incarnation's token; a count read from there would repeat or skip.
  args = portable_args(job_server) + kafka_args(
      broker, make_app_id('bounce'), tmp_path / 'state') + [
          '--max_cache_memory_usage_mb=100']
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p
      | read_from_start(job_server, broker, source, max_num_records=2 * HALF)
      | beam.Map(_slow).with_output_types(typing.Tuple[bytes, bytes])
      | beam.ParDo(_RunningCount()).with_output_types(typing.Tuple[bytes, bytes])
      | WriteToKafka(
          producer_config={'bootstrap.servers': broker},
          topic=sink,
          expansion_service='localhost:%d' % job_server.expansion_port))
  result = p.run()
  # Wait until outputs are being committed, then crash the broker.
  deadline = time.monotonic() + 120
  while not read_committed(broker, sink, expected=1, timeout=2, settle=0):
    assert time.monotonic() < deadline, 'no output after 120 s'
    assert result.state not in (PipelineState.FAILED, PipelineState.DONE)
  kafka('kill', port)
  time.sleep(DOWN_SECS)
  assert result.state == PipelineState.RUNNING, 'an outage must not end the job'
  kafka('resume', port)
  _produce(broker, source, HALF, HALF)
  ended = {}
  waiter = threading.Thread(
      target=lambda: ended.setdefault('state', result.wait_until_finish()))
  waiter.start()
  waiter.join(240)
  assert ended.get('state') == PipelineState.DONE, result.state

  out = read_committed(broker, sink, expected=2 * HALF, timeout=60)
  # Each key counted 1..1000 once: nothing lost, repeated or restarted.
  assert running_counts(out) == {k: list(range(1, 2 * HALF // 3 + 1)) for k in KEYS}
