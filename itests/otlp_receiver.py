"""A small, real OpenTelemetry OTLP receiver for the integration tests.

It accepts metrics and traces over OTLP/gRPC and OTLP/HTTP (protobuf), decoded
with the official protobufs of the `opentelemetry-proto` package, and keeps
what arrived as plain dicts and lists for assertions:

  with OtlpReceiver() as otlp:
    ... export to otlp.grpc_endpoint or otlp.http_endpoint ...
    assert otlp.wait_for(lambda: 'my.metric' in otlp.metric_names())
    point = otlp.metrics_named('my.metric')[-1]['points'][0]
"""

import gzip
import http.server
import threading
import time
from concurrent import futures

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

PROTOBUF = 'application/x-protobuf'

# ---------------------------------------------------------------------------
# Flattening of the OTLP messages into plain Python values.


def any_value(value):
  """An OTLP AnyValue as a Python value (None when unset)."""
  which = value.WhichOneof('value')
  if which == 'array_value':
    return [any_value(v) for v in value.array_value.values]
  if which == 'kvlist_value':
    return attributes(value.kvlist_value.values)
  return None if which is None else getattr(value, which)


def attributes(key_values):
  """A repeated KeyValue field as a dict."""
  return {kv.key: any_value(kv.value) for kv in key_values}


def _point(point, value, with_sum):
  flat = {
      'attributes': attributes(point.attributes),
      'value': value,
      'start_time_unix_nano': point.start_time_unix_nano,
      'time_unix_nano': point.time_unix_nano,
  }
  if with_sum:
    flat['sum'] = point.sum if point.HasField('sum') else None
  return flat


def flatten_metrics(request, transport):
  """The metrics of an ExportMetricsServiceRequest, one dict per Metric."""
  out = []
  for rm in request.resource_metrics:
    resource = attributes(rm.resource.attributes)
    for sm in rm.scope_metrics:
      for metric in sm.metrics:
        kind = metric.WhichOneof('data')  # sum, gauge, histogram, ...
        data = getattr(metric, kind) if kind else None
        points = []
        for p in (data.data_points if data is not None else []):
          if kind in ('sum', 'gauge'):
            which = p.WhichOneof('value')  # as_int or as_double
            points.append(_point(p, getattr(p, which) if which else None,
                                 with_sum=False))
          elif kind == 'summary':  # its sum is a plain double
            flat = _point(p, p.count, with_sum=False)
            flat['sum'] = p.sum
            points.append(flat)
          else:  # histogram and exponential_histogram: value is the count
            points.append(_point(p, p.count, with_sum=True))
        out.append({
            'name': metric.name,
            'unit': metric.unit,
            'description': metric.description,
            'kind': kind,
            'monotonic': data.is_monotonic if kind == 'sum' else None,
            'resource': resource,
            'scope': sm.scope.name,
            'points': points,
            'transport': transport,
        })
  return out


def flatten_spans(request, transport):
  """The spans of an ExportTraceServiceRequest, one dict per Span."""
  out = []
  for rs in request.resource_spans:
    resource = attributes(rs.resource.attributes)
    for ss in rs.scope_spans:
      for span in ss.spans:
        out.append({
            'name': span.name,
            'kind': trace_pb2.Span.SpanKind.Name(span.kind),  # SPAN_KIND_...
            'trace_id': span.trace_id.hex(),
            'span_id': span.span_id.hex(),
            'parent_span_id': span.parent_span_id.hex(),  # '' for a root
            'start_unix_nano': span.start_time_unix_nano,
            'end_unix_nano': span.end_time_unix_nano,
            'attributes': attributes(span.attributes),
            # STATUS_CODE_UNSET, STATUS_CODE_OK or STATUS_CODE_ERROR
            'status_code': trace_pb2.Status.StatusCode.Name(span.status.code),
            'resource': resource,
            'scope': ss.scope.name,
            'transport': transport,
        })
  return out


# ---------------------------------------------------------------------------
# The two transports. Both hand each decoded request to OtlpReceiver._add.


class _MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):

  def __init__(self, receiver):
    self._receiver = receiver

  def Export(self, request, context):
    self._receiver._add(flatten_metrics(request, 'grpc'), [])
    return metrics_service_pb2.ExportMetricsServiceResponse()


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):

  def __init__(self, receiver):
    self._receiver = receiver

  def Export(self, request, context):
    self._receiver._add([], flatten_spans(request, 'grpc'))
    return trace_service_pb2.ExportTraceServiceResponse()


class _HttpHandler(http.server.BaseHTTPRequestHandler):
  """POST /v1/metrics and /v1/traces with protobuf bodies (OTLP/HTTP)."""
  protocol_version = 'HTTP/1.1'  # keep-alive, as exporters' clients expect
  timeout = 30  # seconds; closes idle keep-alive connections

  def do_POST(self):
    receiver = self.server.receiver
    route = {
        '/v1/metrics': (metrics_service_pb2.ExportMetricsServiceRequest,
                        metrics_service_pb2.ExportMetricsServiceResponse),
        '/v1/traces': (trace_service_pb2.ExportTraceServiceRequest,
                       trace_service_pb2.ExportTraceServiceResponse),
    }.get(self.path.split('?')[0])
    body = self._read_body()  # read even on errors, to keep the connection
    if route is None:
      return self.send_error(404)
    content_type = self.headers.get('Content-Type', '').split(';')[0].strip()
    if content_type != PROTOBUF:
      return self.send_error(415, 'only %s is supported' % PROTOBUF)
    request_type, response_type = route
    try:
      if self.headers.get('Content-Encoding', '').lower() == 'gzip':
        body = gzip.decompress(body)
      request = request_type.FromString(body)
    except Exception as e:  # pylint: disable=broad-except
      return self.send_error(400, 'undecodable request: %s' % e)
    if request_type is metrics_service_pb2.ExportMetricsServiceRequest:
      receiver._add(flatten_metrics(request, 'http'), [])
    else:
      receiver._add([], flatten_spans(request, 'http'))
    payload = response_type().SerializeToString()
    self.send_response(200)
    self.send_header('Content-Type', PROTOBUF)
    self.send_header('Content-Length', str(len(payload)))
    self.end_headers()
    self.wfile.write(payload)

  def _read_body(self):
    if self.headers.get('Transfer-Encoding', '').lower() != 'chunked':
      return self.rfile.read(int(self.headers.get('Content-Length') or 0))
    chunks = []
    while True:  # chunk: "<hex size>[;ext]\r\n<data>\r\n"; size 0 ends
      size = int(self.rfile.readline().split(b';')[0].strip(), 16)
      if size == 0:
        while self.rfile.readline() not in (b'\r\n', b'\n', b''):
          pass  # trailers
        return b''.join(chunks)
      chunks.append(self.rfile.read(size))
      self.rfile.readline()

  def log_message(self, fmt, *args):  # quiet: tests print what they need
    pass


# ---------------------------------------------------------------------------


class OtlpReceiver:
  """Receives OTLP metrics and traces on 127.0.0.1 (gRPC and HTTP ports)."""

  def __init__(self, count_only=False):
    # count_only: keep counts, not data (a long benchmark run).
    self._count_only = count_only
    self.received = {'metrics': 0, 'spans': 0}
    self._lock = threading.Lock()
    self._metrics = []
    self._spans = []
    self._grpc_server = None
    self._http_server = None
    self._http_thread = None
    self.grpc_endpoint = None
    self.http_endpoint = None

  def start(self):
    self._grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
        _MetricsService(self), self._grpc_server)
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
        _TraceService(self), self._grpc_server)
    grpc_port = self._grpc_server.add_insecure_port('127.0.0.1:0')
    self._grpc_server.start()
    self.grpc_endpoint = 'http://127.0.0.1:%d' % grpc_port

    self._http_server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                        _HttpHandler)
    self._http_server.daemon_threads = True
    self._http_server.receiver = self
    self._http_thread = threading.Thread(
        target=self._http_server.serve_forever, name='otlp-http', daemon=True)
    self._http_thread.start()
    self.http_endpoint = 'http://127.0.0.1:%d' % self._http_server.server_port
    return self

  def stop(self):
    if self._http_server is not None:
      self._http_server.shutdown()
      self._http_server.server_close()
      self._http_thread.join(timeout=10)
      self._http_server = None
    if self._grpc_server is not None:
      self._grpc_server.stop(grace=None).wait(timeout=10)
      self._grpc_server = None

  def __enter__(self):
    return self.start()

  def __exit__(self, *exc_info):
    self.stop()

  def _add(self, metrics, spans):
    with self._lock:
      self.received['metrics'] += len(metrics)
      self.received['spans'] += len(spans)
      if self._count_only:
        return
      self._metrics.extend(metrics)
      self._spans.extend(spans)

  # What arrived (copies, safe to use while exports continue).

  @property
  def metrics(self):
    with self._lock:
      return list(self._metrics)

  @property
  def spans(self):
    with self._lock:
      return list(self._spans)

  def metric_names(self):
    """The names of the metrics received so far, as a set."""
    return {m['name'] for m in self.metrics}

  def metrics_named(self, name):
    """Every received Metric of that name, oldest first (one per export)."""
    return [m for m in self.metrics if m['name'] == name]

  def spans_named(self, name):
    return [s for s in self.spans if s['name'] == name]

  def wait_for(self, predicate, timeout=60.0, interval=0.2):
    """Polls predicate() until it is true (True) or timeout passes (False)."""
    deadline = time.monotonic() + timeout
    while True:
      if predicate():
        return True
      if time.monotonic() >= deadline:
        return False
      time.sleep(interval)

  def clear(self):
    with self._lock:
      self._metrics.clear()
      self._spans.clear()


def main():
  """A receiver of its own, for a benchmark: prints its endpoints, then
  what it received when stopped (SIGTERM or Ctrl-C)."""
  import signal
  stop = threading.Event()
  signal.signal(signal.SIGTERM, lambda *_: stop.set())
  with OtlpReceiver(count_only=True) as r:
    print('grpc %s http %s' % (r.grpc_endpoint, r.http_endpoint), flush=True)
    try:
      stop.wait()
    except KeyboardInterrupt:
      pass
    print('received %(metrics)d metric(s), %(spans)d span(s)' % r.received, flush=True)


if __name__ == '__main__':
  main()
