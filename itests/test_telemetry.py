"""OpenTelemetry export, on the real broker and binary: a streaming job on a
job server that exports over OTLP/gRPC to a real OTLP receiver (built on
the official protobufs), and a batch job on one exporting over
OTLP/HTTP. Every metric the dashboard may query arrives with its kind,
unit and attributes; the user's counter and a commit cycle's span too.
And with --metrics-port alone, Prometheus can scrape the same metrics."""

import time

import pytest

from conftest import make_app_id
from dashboard_check import EXPORTED
from dashboard_check import load_dashboard
from dashboard_check import metric_names_in_queries
from dashboard_check import prometheus_name
from kafka_topics import unique_topic
from observed import COUNTER_NAME
from observed import COUNTER_NAMESPACE
from observed import ObservedServer
from observed import StreamingJob
from observed import portable
from otlp_receiver import OtlpReceiver

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from conftest import kafka_args

FAST = {'OTEL_METRIC_EXPORT_INTERVAL': '1000', 'OTEL_BSP_SCHEDULE_DELAY': '500'}
USER_METRIC = 'beam.user.%s.%s' % (COUNTER_NAMESPACE, COUNTER_NAME)


@pytest.fixture(scope='module')
def receiver():
  with OtlpReceiver() as r:
    yield r


@pytest.fixture(scope='module')
def grpc_server(binary, tmp_path_factory, receiver):
  s = ObservedServer(
      binary, tmp_path_factory.mktemp('otlp-grpc'),
      extra=['--otlp-endpoint', receiver.grpc_endpoint, '--otlp-protocol', 'grpc'],
      env=dict(FAST, OTEL_SERVICE_NAME='beam-kafka-itest'))
  yield s
  s.stop()


def _points_of(receiver, name, app_id):
  return [(m, p) for m in receiver.metrics_named(name) for p in m['points']
          if p['attributes'].get('beam_kafka.application.id') == app_id]


def test_task_metrics_user_counters_and_commit_spans_arrive(
    grpc_server, receiver, broker, tmp_path):
  app_id = make_app_id('otlp')
  job = StreamingJob(
      grpc_server, broker, app_id, tmp_path, unique_topic('otlp-in'),
      unique_topic('otlp-out')).start()
  try:
    wanted = [m.name for m in EXPORTED] + [USER_METRIC]

    def all_arrived():
      return all(_points_of(receiver, n, app_id) for n in wanted) and any(
          s['attributes'].get('beam_kafka.application.id') == app_id
          for s in receiver.spans_named('beam_kafka.commit_cycle'))

    arrived = receiver.wait_for(all_arrived, timeout=120)
    missing = [n for n in wanted if not _points_of(receiver, n, app_id)]
    assert arrived, 'never exported: %s\nlog:\n%s' % (missing, grpc_server.log()[-4000:])
  finally:
    job.cancel()

  for m in EXPORTED:
    points = _points_of(receiver, m.name, app_id)
    metric = points[0][0]
    assert (metric['kind'], metric['unit']) == (m.kind, m.unit), metric
    if m.kind == 'sum':
      assert metric['monotonic'] == m.monotonic, metric
    assert metric['transport'] == 'grpc'
    for _, p in points:
      a = p['attributes']
      assert a['beam_kafka.job.id'], a
      assert ':' in a['beam_kafka.copy'], a
      if m.scope == 'task':
        assert a['beam_kafka.task'].count('_') == 1, a
        assert a['beam_kafka.sub_topology'] == a['beam_kafka.task'].split('_')[0]
  states = {p['attributes']['beam_kafka.job.state']
            for _, p in _points_of(receiver, 'beam_kafka.job.state', app_id)}
  assert 'RUNNING' in states, states
  # The resource says which service and copy.
  resource = _points_of(receiver, 'beam_kafka.job.uptime', app_id)[0][0]['resource']
  assert resource['service.name'] == 'beam-kafka-itest', resource
  assert resource['process.pid'] == grpc_server.process.pid, resource
  assert resource['service.version'], resource
  assert resource['service.instance.id'].endswith(':%d' % grpc_server.process.pid)

  # Records were read (30 before the start) and written.
  read = max(p['value'] for _, p in _points_of(
      receiver, 'messaging.client.consumed.messages', app_id)
             if p['attributes']['beam_kafka.sub_topology'] == '0')
  assert read >= 1
  consumed_by_task = {}
  for _, p in _points_of(receiver, 'messaging.client.consumed.messages', app_id):
    task = p['attributes']['beam_kafka.task']
    consumed_by_task[task] = max(consumed_by_task.get(task, 0), p['value'])
  assert sum(v for t, v in consumed_by_task.items() if t.startswith('0_')) == 30

  # The user's counter, attempted and committed, named by namespace and name.
  user = _points_of(receiver, USER_METRIC, app_id)
  states = {p['attributes']['beam.metric.state'] for _, p in user}
  assert states == {'attempted', 'committed'}, user
  assert max(p['value'] for _, p in user
             if p['attributes']['beam.metric.state'] == 'attempted') == 30
  assert all(p['attributes']['beam.metric.namespace'] == COUNTER_NAMESPACE
             for _, p in user)

  # A commit cycle's span: with its task, and a sane duration.
  spans = [s for s in receiver.spans_named('beam_kafka.commit_cycle')
           if s['attributes'].get('beam_kafka.application.id') == app_id]
  span = spans[0]
  assert span['end_unix_nano'] >= span['start_unix_nano'] > 0
  assert span['attributes']['beam_kafka.task']
  assert 'beam_kafka.cycle.output_watermark' in span['attributes']
  assert span['resource']['service.name'] == 'beam-kafka-itest'
  # Job lifecycle and restore spans.
  assert any(s['attributes'].get('beam_kafka.application.id') == app_id
             for s in receiver.spans_named('beam_kafka.job.prepare'))
  for name in ['beam_kafka.job.plan', 'beam_kafka.job.harnesses',
               'beam_kafka.job.start', 'beam_kafka.task.restore']:
    assert any(s['attributes'].get('beam_kafka.application.id') == app_id
               for s in receiver.spans_named(name)), name

  # The dashboard's queries name only metrics that arrived.
  seen = {}
  for m in EXPORTED:
    for prom in prometheus_name(m.name, m.unit, m.kind, m.monotonic):
      seen[prom] = m
  queried = metric_names_in_queries(load_dashboard())
  assert queried and queried <= set(seen), queried - set(seen)


@pytest.fixture(scope='module')
def http_server(binary, tmp_path_factory, receiver):
  s = ObservedServer(
      binary, tmp_path_factory.mktemp('otlp-http'),
      extra=['--otlp-endpoint', receiver.http_endpoint],
      env=dict(FAST, OTEL_EXPORTER_OTLP_PROTOCOL='http/protobuf'))
  yield s
  s.stop()


def test_a_batch_job_exports_over_http(http_server, receiver, broker, tmp_path):
  app_id = make_app_id('otlp-http')
  args = portable(http_server) + kafka_args(broker, app_id, tmp_path / 'state')
  p = beam.Pipeline(options=PipelineOptions(args))
  _ = (
      p | beam.Create(['a', 'b', 'a'])
      | beam.Map(lambda w: (w, 1))
      | beam.CombinePerKey(sum))
  result = p.run()
  assert result.wait_until_finish() == PipelineState.DONE

  def commits_over_http():
    return any(m['transport'] == 'http' for m, _ in _points_of(
        receiver, 'beam_kafka.task.commits', app_id)) and any(
            s['transport'] == 'http' and
            s['attributes'].get('beam_kafka.application.id') == app_id
            for s in receiver.spans_named('beam_kafka.commit_cycle'))

  assert receiver.wait_for(commits_over_http, timeout=60), http_server.log()[-3000:]
  resource = _points_of(receiver, 'beam_kafka.task.commits', app_id)[0][0]['resource']
  assert resource['service.name'] == 'beam-kafka', resource


@pytest.fixture(scope='module')
def scraped_server(binary, tmp_path_factory):
  s = ObservedServer(binary, tmp_path_factory.mktemp('prometheus'),
                     extra=['--metrics-port', '0'])
  yield s
  s.stop()


def test_prometheus_scrape_without_a_collector(scraped_server, broker, tmp_path):
  """--metrics-port alone: /metrics serves what the dashboard queries, named
  as a collector would name it."""
  import re
  import urllib.request
  m = re.search(r'Prometheus metrics on (http://\S+)', scraped_server.log())
  assert m, scraped_server.log()
  url = m.group(1)
  app_id = make_app_id('prometheus')
  job = StreamingJob(scraped_server, broker, app_id, tmp_path,
                     unique_topic('prom-in'), unique_topic('prom-out')).start()
  try:
    wanted = {}
    for e in EXPORTED:
      for name in prometheus_name(e.name, e.unit, e.kind, e.monotonic):
        wanted[name] = e
    label = 'beam_kafka_application_id="%s"' % app_id
    deadline = time.monotonic() + 90
    while True:
      text = urllib.request.urlopen(url, timeout=10).read().decode()
      ours = [l for l in text.splitlines() if label in l]
      present = {l.split('{', 1)[0] for l in ours}
      user = [l for l in ours if l.startswith('beam_user_%s_%s' % (COUNTER_NAMESPACE, COUNTER_NAME))]
      if set(wanted) <= present and user:
        break
      assert time.monotonic() < deadline, 'missing: %s' % sorted(set(wanted) - present)
      time.sleep(1)
  finally:
    job.cancel()
  assert '# TYPE messaging_client_consumed_messages_total counter' in text
  assert '# TYPE beam_kafka_task_commit_duration_seconds histogram' in text
  assert re.search(r'^target_info\{.*service_name="beam-kafka"', text, re.M), text[:2000]
  consumed = [l for l in ours if l.startswith('messaging_client_consumed_messages_total{')]
  assert all('beam_kafka_task="' in l for l in consumed), consumed
  assert sum(float(l.rsplit(' ', 1)[1]) for l in consumed
             if 'beam_kafka_sub_topology="0"' in l) == 30, consumed
  queried = metric_names_in_queries(load_dashboard())
  assert queried <= present, queried - present
