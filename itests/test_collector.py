"""The runner's telemetry through a real OpenTelemetry Collector (built from
the collector's own modules on the Go module proxy: itests/otelcol), as an
operator wires it: OTLP/gRPC into the collector, its `prometheus` exporter
out, and traces to its `debug` exporter. Every metric the Grafana dashboard
queries is in the collector's exposition under the name the dashboard uses,
and a commit cycle's span passes through."""

import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import free_ports
from conftest import make_app_id
from dashboard_check import load_dashboard
from dashboard_check import metric_names_in_queries
from kafka_topics import unique_topic
from observed import COUNTER_NAME
from observed import COUNTER_NAMESPACE
from observed import ObservedServer
from observed import StreamingJob

REPO_ROOT = Path(__file__).resolve().parent.parent

CONFIG = """
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%(grpc)d
      http:
        endpoint: 127.0.0.1:%(http)d
processors:
  batch:
    timeout: 200ms
exporters:
  prometheus:
    endpoint: 127.0.0.1:%(prometheus)d
  debug:
    verbosity: detailed
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [batch]
      exporters: [prometheus]
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [debug]
"""


@pytest.fixture(scope='module')
def collector(tmp_path_factory):
  built = subprocess.run(
      ['bash', str(REPO_ROOT / 'scripts' / 'go-pipelines.sh'), 'otelcol', '.',
       'itests/otelcol'],
      capture_output=True, text=True, timeout=1800)
  assert built.returncode == 0, built.stderr[-3000:]
  binary = built.stdout.strip().splitlines()[-1]
  root = tmp_path_factory.mktemp('otelcol')
  grpc_port, http_port, prometheus_port = free_ports(3)
  config = root / 'config.yaml'
  config.write_text(CONFIG % {
      'grpc': grpc_port, 'http': http_port, 'prometheus': prometheus_port})
  log_path = root / 'otelcol.log'
  with open(log_path, 'wb') as log:
    proc = subprocess.Popen([binary, '--config', str(config)],
                            stdout=log, stderr=subprocess.STDOUT)
  deadline = time.monotonic() + 60
  while 'Everything is ready' not in log_path.read_text(errors='replace'):
    assert proc.poll() is None, log_path.read_text(errors='replace')
    assert time.monotonic() < deadline, log_path.read_text(errors='replace')
    time.sleep(0.2)
  yield {
      'grpc': 'http://127.0.0.1:%d' % grpc_port,
      'metrics': 'http://127.0.0.1:%d/metrics' % prometheus_port,
      'log': log_path,
  }
  proc.terminate()
  proc.wait(30)


@pytest.fixture(scope='module')
def exporting_server(binary, tmp_path_factory, collector):
  s = ObservedServer(
      binary, tmp_path_factory.mktemp('to-collector'),
      extra=['--otlp-endpoint', collector['grpc'], '--otlp-protocol', 'grpc'],
      env={'OTEL_METRIC_EXPORT_INTERVAL': '1000', 'OTEL_BSP_SCHEDULE_DELAY': '500'})
  yield s
  s.stop()


def test_the_dashboard_reads_what_the_collector_exposes(
    exporting_server, collector, broker, tmp_path):
  app_id = make_app_id('collector')
  job = StreamingJob(exporting_server, broker, app_id, tmp_path,
                     unique_topic('col-in'), unique_topic('col-out')).start()
  queried = metric_names_in_queries(load_dashboard())
  label = 'beam_kafka_application_id="%s"' % app_id
  user = 'beam_user_%s_%s' % (COUNTER_NAMESPACE, COUNTER_NAME)
  try:
    deadline = time.monotonic() + 120
    while True:
      text = urllib.request.urlopen(collector['metrics'], timeout=10).read().decode()
      ours = [l for l in text.splitlines() if label in l]
      present = {l.split('{', 1)[0] for l in ours}
      log = collector['log'].read_text(errors='replace')
      if queried <= present and user in present and 'beam_kafka.commit_cycle' in log:
        break
      assert time.monotonic() < deadline, (
          'missing from the collector: %s; span seen: %s\n%s' % (
              sorted(queried - present), 'beam_kafka.commit_cycle' in log,
              exporting_server.log()[-3000:]))
      time.sleep(1)
  finally:
    job.cancel()
  # Per-task series carry the task; the counter counts the topic's records.
  consumed = [l for l in ours if l.startswith('messaging_client_consumed_messages_total{')]
  assert consumed and all('beam_kafka_task="' in l for l in consumed), consumed
  assert sum(float(l.rsplit(' ', 1)[1]) for l in consumed
             if 'beam_kafka_sub_topology="0"' in l) == 30, consumed
  # The span went through with its task and application.
  span = log[log.index('Name           : beam_kafka.commit_cycle'):][:4000]
  assert re.search(r'beam_kafka\.application\.id: Str\(%s\)' % re.escape(app_id), log), span
  assert 'beam_kafka.task: Str(' in span, span
