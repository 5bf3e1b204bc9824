"""Tests of the OTLP receiver itself (otlp_receiver.py): no broker, fast.

Real exports over both transports: gRPC with the generated stubs, HTTP with
urllib (plain and gzip-compressed).
"""

import gzip
import urllib.error
import urllib.request

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from otlp_receiver import OtlpReceiver

T0 = 1_700_000_000_000_000_000
TRACE_ID = bytes(range(16))
SPAN_ID = bytes(range(8))
PARENT_ID = bytes(range(8, 16))


def kv(key, value):
  """A KeyValue; the AnyValue field is chosen from the Python type."""
  any_value = common_pb2.AnyValue()
  if isinstance(value, bool):
    any_value.bool_value = value
  elif isinstance(value, int):
    any_value.int_value = value
  elif isinstance(value, float):
    any_value.double_value = value
  elif isinstance(value, bytes):
    any_value.bytes_value = value
  elif isinstance(value, list):
    any_value.array_value.values.extend(kv('', v).value for v in value)
  elif isinstance(value, dict):
    any_value.kvlist_value.values.extend(kv(k, v) for k, v in value.items())
  else:
    any_value.string_value = value
  return common_pb2.KeyValue(key=key, value=any_value)


RESOURCE = resource_pb2.Resource(attributes=[
    kv('service.name', 'beam-kafka-test'),
    kv('host.cores', 2),
    kv('tags', ['a', 'b']),
    kv('nested', {'x': 1.5, 'y': True}),
    kv('raw', b'\x00\x01'),
])
RESOURCE_DICT = {
    'service.name': 'beam-kafka-test',
    'host.cores': 2,
    'tags': ['a', 'b'],
    'nested': {'x': 1.5, 'y': True},
    'raw': b'\x00\x01',
}
SCOPE = common_pb2.InstrumentationScope(name='beam_kafka', version='1.0')


def metrics_request():
  gauge = metrics_pb2.Metric(
      name='beam_kafka.lag', unit='{record}', description='Consumer lag',
      gauge=metrics_pb2.Gauge(data_points=[
          metrics_pb2.NumberDataPoint(
              attributes=[kv('topic', 'in'), kv('partition', 0)],
              time_unix_nano=T0, as_int=42),
          metrics_pb2.NumberDataPoint(
              attributes=[kv('topic', 'in'), kv('partition', 1)],
              time_unix_nano=T0, as_double=0.5),
      ]))
  histogram = metrics_pb2.Metric(
      name='beam_kafka.bundle.duration', unit='s',
      histogram=metrics_pb2.Histogram(
          aggregation_temporality=(
              metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE),
          data_points=[
              metrics_pb2.HistogramDataPoint(
                  attributes=[kv('stage', 'map')],
                  start_time_unix_nano=T0 - 10, time_unix_nano=T0,
                  count=3, sum=1.25, bucket_counts=[1, 2],
                  explicit_bounds=[0.5]),
          ]))
  total = metrics_pb2.Metric(
      name='beam_kafka.records', unit='{record}',
      sum=metrics_pb2.Sum(
          is_monotonic=True,
          aggregation_temporality=(
              metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE),
          data_points=[metrics_pb2.NumberDataPoint(time_unix_nano=T0,
                                                   as_int=7)]))
  return metrics_service_pb2.ExportMetricsServiceRequest(resource_metrics=[
      metrics_pb2.ResourceMetrics(
          resource=RESOURCE,
          scope_metrics=[
              metrics_pb2.ScopeMetrics(scope=SCOPE,
                                       metrics=[gauge, histogram, total])
          ])
  ])


def trace_request():
  span = trace_pb2.Span(
      trace_id=TRACE_ID, span_id=SPAN_ID, parent_span_id=PARENT_ID,
      name='process bundle', kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
      start_time_unix_nano=T0, end_time_unix_nano=T0 + 5,
      attributes=[kv('stage', 'map'), kv('elements', 10)],
      status=trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_OK))
  return trace_service_pb2.ExportTraceServiceRequest(resource_spans=[
      trace_pb2.ResourceSpans(
          resource=RESOURCE,
          scope_spans=[trace_pb2.ScopeSpans(scope=SCOPE, spans=[span])])
  ])


def post(url, body, content_type='application/x-protobuf', gzipped=False):
  headers = {'Content-Type': content_type}
  if gzipped:
    body = gzip.compress(body)
    headers['Content-Encoding'] = 'gzip'
  req = urllib.request.Request(url, data=body, headers=headers, method='POST')
  with urllib.request.urlopen(req, timeout=10) as response:
    return response.status, response.headers['Content-Type'], response.read()


@pytest.fixture
def otlp():
  with OtlpReceiver() as receiver:
    yield receiver


def check_metrics(otlp, transport):
  assert otlp.metric_names() == {
      'beam_kafka.lag', 'beam_kafka.bundle.duration', 'beam_kafka.records'
  }
  [gauge] = otlp.metrics_named('beam_kafka.lag')
  assert gauge == {
      'name': 'beam_kafka.lag',
      'unit': '{record}',
      'description': 'Consumer lag',
      'kind': 'gauge',
      'monotonic': None,
      'resource': RESOURCE_DICT,
      'scope': 'beam_kafka',
      'points': [
          {'attributes': {'topic': 'in', 'partition': 0}, 'value': 42,
           'start_time_unix_nano': 0, 'time_unix_nano': T0},
          {'attributes': {'topic': 'in', 'partition': 1}, 'value': 0.5,
           'start_time_unix_nano': 0, 'time_unix_nano': T0},
      ],
      'transport': transport,
  }
  assert isinstance(gauge['points'][0]['value'], int)
  [histogram] = otlp.metrics_named('beam_kafka.bundle.duration')
  assert histogram['kind'] == 'histogram'
  assert histogram['monotonic'] is None
  assert histogram['points'] == [{
      'attributes': {'stage': 'map'}, 'value': 3, 'sum': 1.25,
      'start_time_unix_nano': T0 - 10, 'time_unix_nano': T0
  }]
  [total] = otlp.metrics_named('beam_kafka.records')
  assert (total['kind'], total['monotonic']) == ('sum', True)
  assert [p['value'] for p in total['points']] == [7]


def test_metrics_over_grpc(otlp):
  assert otlp.grpc_endpoint.startswith('http://127.0.0.1:')
  with grpc.insecure_channel(otlp.grpc_endpoint[len('http://'):]) as channel:
    stub = metrics_service_pb2_grpc.MetricsServiceStub(channel)
    response = stub.Export(metrics_request(), timeout=10)
  assert response == metrics_service_pb2.ExportMetricsServiceResponse()
  check_metrics(otlp, 'grpc')


def test_metrics_over_http(otlp):
  status, content_type, body = post(otlp.http_endpoint + '/v1/metrics',
                                     metrics_request().SerializeToString())
  assert (status, content_type) == (200, 'application/x-protobuf')
  assert metrics_service_pb2.ExportMetricsServiceResponse.FromString(
      body) == metrics_service_pb2.ExportMetricsServiceResponse()
  check_metrics(otlp, 'http')


def test_gzip_over_http_and_clear(otlp):
  post(otlp.http_endpoint + '/v1/metrics',
       metrics_request().SerializeToString(), gzipped=True)
  check_metrics(otlp, 'http')
  otlp.clear()
  assert otlp.metrics == [] and otlp.metric_names() == set()


def check_span(otlp, transport):
  [span] = otlp.spans_named('process bundle')
  assert span == {
      'name': 'process bundle',
      'kind': 'SPAN_KIND_INTERNAL',
      'trace_id': TRACE_ID.hex(),
      'span_id': SPAN_ID.hex(),
      'parent_span_id': PARENT_ID.hex(),
      'start_unix_nano': T0,
      'end_unix_nano': T0 + 5,
      'attributes': {'stage': 'map', 'elements': 10},
      'status_code': 'STATUS_CODE_OK',
      'resource': RESOURCE_DICT,
      'scope': 'beam_kafka',
      'transport': transport,
  }


def test_trace_over_grpc(otlp):
  with grpc.insecure_channel(otlp.grpc_endpoint[len('http://'):]) as channel:
    trace_service_pb2_grpc.TraceServiceStub(channel).Export(trace_request(),
                                                            timeout=10)
  check_span(otlp, 'grpc')
  assert otlp.metrics == []


def test_trace_over_http(otlp):
  status, content_type, body = post(otlp.http_endpoint + '/v1/traces',
                                    trace_request().SerializeToString())
  assert (status, content_type) == (200, 'application/x-protobuf')
  assert trace_service_pb2.ExportTraceServiceResponse.FromString(body) == (
      trace_service_pb2.ExportTraceServiceResponse())
  check_span(otlp, 'http')


def test_http_rejects_other_paths_and_content_types(otlp):
  with pytest.raises(urllib.error.HTTPError) as e:
    post(otlp.http_endpoint + '/v1/logs', b'')
  assert e.value.code == 404
  with pytest.raises(urllib.error.HTTPError) as e:
    post(otlp.http_endpoint + '/v1/metrics', b'{}', 'application/json')
  assert e.value.code == 415
  assert otlp.metrics == []


def test_wait_for(otlp):
  assert not otlp.wait_for(lambda: otlp.spans, timeout=0.3, interval=0.05)
  post(otlp.http_endpoint + '/v1/traces', trace_request().SerializeToString())
  assert otlp.wait_for(lambda: otlp.spans_named('process bundle'), timeout=5)
