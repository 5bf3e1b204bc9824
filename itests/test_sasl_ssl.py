"""Every runner client over SASL_SSL: a broker of the test's own with a TLS
listener (a throwaway CA made by scripts/kafka.sh) that requires SCRAM-SHA-512.
The job's only way in is that listener, so any client the runner creates
without the user's --kafka_property settings could not connect. A wrong
password ends the job within seconds, naming authentication."""

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
from own_broker import broker_dir
from own_broker import own_broker
from test_user_state import KEYS
from test_user_state import _RunningCount
from test_user_state import running_counts

N = 300


@pytest.fixture(scope='module')
def secure_broker():
  """(plaintext address for the test's own setup, client properties of the
  SASL_SSL listener)."""
  with own_broker(29500, secure=True) as port:
    props = {}
    with open(broker_dir(port) / 'client.properties') as f:
      for line in f:
        if '=' in line:
          k, v = line.strip().split('=', 1)
          props[k] = v
    yield 'localhost:%d' % port, props


def _topics(plain, partitions):
  source, sink = unique_topic('tls-in'), unique_topic('tls-out')
  create_topic(plain, source, partitions)
  create_topic(plain, sink, 1)
  return source, sink


def _options(job_server, props, app_id, tmp_path, password=None):
  secure = dict(props)
  if password is not None:
    secure['sasl.password'] = password
  return portable_args(job_server) + kafka_args(
      secure.pop('bootstrap.servers'), app_id, tmp_path / 'state') + [
          '--kafka_property=%s=%s' % kv for kv in sorted(secure.items())]


def _pipeline(job_server, props, source, sink, options):
  p = beam.Pipeline(options=PipelineOptions(options))
  # The transforms name the same cluster: the runner's client settings
  # (--kafka_property) apply to them, credentials included.
  # A side input: its topic is read whole by a consumer of its own.
  suffix = p | 'Suffix' >> beam.Create([b''])
  _ = (
      p
      | read_from_start(job_server, props['bootstrap.servers'], source,
                        max_num_records=N)
      | beam.Map(lambda kv, s: (kv[1] + s, b''),
                 s=beam.pvalue.AsSingleton(suffix)).with_output_types(
                     typing.Tuple[bytes, bytes])
      | beam.ParDo(_RunningCount()).with_output_types(
          typing.Tuple[bytes, bytes])
      | WriteToKafka(
          producer_config={'bootstrap.servers': props['bootstrap.servers']},
          topic=sink,
          expansion_service='localhost:%d' % job_server.expansion_port))
  return p


@pytest.mark.timeout_seconds(300)
def test_a_stateful_topic_to_topic_job_runs_entirely_over_sasl_ssl(
    job_server, secure_broker, tmp_path):
  plain, props = secure_broker
  source, sink = _topics(plain, 2)
  produce(plain, source, [(i % 2, None, KEYS[i % 3], None) for i in range(N)])
  options = _options(job_server, props, make_app_id('tls'), tmp_path)
  result = _pipeline(job_server, props, source, sink, options).run()
  assert result.wait_until_finish() == PipelineState.DONE
  out = read_committed(plain, sink, expected=N, timeout=60)
  assert running_counts(out) == {k: list(range(1, N // 3 + 1)) for k in KEYS}


@pytest.mark.timeout_seconds(120)
def test_a_wrong_password_fails_the_job_within_seconds_naming_authentication(
    job_server, secure_broker, tmp_path):
  plain, props = secure_broker
  source, sink = _topics(plain, 1)
  options = _options(job_server, props, make_app_id('tls-bad'), tmp_path,
                     password='not-the-password')
  p = _pipeline(job_server, props, source, sink, options)
  began = time.monotonic()
  with pytest.raises(Exception) as excinfo:
    p.run().wait_until_finish()
  took = time.monotonic() - began
  assert 'uthentication' in str(excinfo.value), excinfo.value
  assert 'not-the-password' not in str(excinfo.value)
  assert took < 30, 'took %.0f s' % took
