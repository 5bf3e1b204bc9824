"""The State API on a plain socket, in the harnesses beam_kafka.boot starts.

Through grpc-python each state answer passes four threads one at a time (the
request queue's, gRPC's polling thread, the response reader and the bundle's
own), and every hand-over waits for the scheduler. On a loaded 2-core
machine that capped a harness at about 200 answers a second, and a stateful
DoFn of new keys spent 96% of its bundles waiting. The runner also listens
on a plain socket (BEAM_KAFKA_STATE_SOCKET, set for the harnesses it starts):
here the bundle's thread writes its request itself, and one reader thread
hands over every answer that arrived in one wake-up.

Frames both ways: a 4-byte big-endian length, then the bytes. The first one
is the worker id; then StateRequests one way and StateResponses the other,
in order. The handler is Beam's GrpcStateHandler with its transport and
its futures' waits replaced (`_answer_class`), so Beam's caching handler and everything
above it are unchanged.
Where the socket cannot be reached, the harness uses gRPC as before.
"""

import contextlib
import logging
import os
import socket
import struct
import threading

ENV = 'BEAM_KAFKA_STATE_SOCKET'
_LEN = struct.Struct('>I')
_LOG = logging.getLogger(__name__)
# Handlers on the socket made in this process (a check that it is used).
stats = {'handlers': 0}


def install(factory=None, environ=os.environ):
  """Makes the SDK's state handler factory (or `factory`, a subclass of it)
  use the socket when the runner gave one; leaves Beam's code alone when
  this SDK is shaped differently."""
  address = environ.get(ENV)
  worker_id = environ.get('WORKER_ID')
  if not address or not worker_id:
    return
  try:
    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.runners.worker import sdk_worker
    factory = factory or sdk_worker.GrpcStateHandlerFactory
    base = sdk_worker.GrpcStateHandler
    caching = sdk_worker.GlobalCachingStateHandler
    future = sdk_worker._Future
    create = factory.create_state_handler
    for name in ('_request', '_blocking_request', 'get_raw', 'process_instruction_id'):
      getattr(base, name)
  except (ImportError, AttributeError):
    return
  handler_class = _handler_class(base, future, beam_fn_api_pb2)

  def create_state_handler(self, api_service_descriptor):
    cached = getattr(self, '_state_handler_cache', None)
    if not api_service_descriptor or cached is None or api_service_descriptor.url in cached:
      return create(self, api_service_descriptor)
    url = api_service_descriptor.url
    with self._lock:
      if url in cached:
        return cached[url]
      try:
        handler = handler_class(address, worker_id)
      except OSError as e:
        _LOG.warning('The runner\'s state socket %s cannot be reached (%s): state goes through gRPC.',
                     address, e)
      else:
        cached[url] = caching(self._state_cache, handler)
        stats['handlers'] += 1
        return cached[url]
    return create(self, api_service_descriptor)  # takes the lock itself

  create_state_handler.__doc__ = create.__doc__
  factory.create_state_handler = create_state_handler


def _answer_class(future_base):
  """The answer to one request: Beam's future (`future_base`; Beam tells
  its futures from plain values by their class) with its wait replaced.
  Beam's future makes an Event, itself a Condition with its lock, for every
  request: at three requests a record that was a sixth of a stateful
  harness's time. Answers share their handler's Condition instead; a
  waiting bundle thread wakes when answers arrive and looks whether its
  own is among them."""

  class Answer(future_base):

    def __init__(self, arrived, send_batch):  # pylint: disable=super-init-not-called
      self._arrived = arrived
      self._send_batch = send_batch
      self._ready = False

    def fill(self, value):
      """Sets the answer without waking anyone (the reader wakes the
      waiters once for all the answers one read brought)."""
      self._value = value
      self._ready = True

    def set(self, value):
      with self._arrived:
        self.fill(value)
        self._arrived.notify_all()
      return self

    def wait(self, timeout=None):
      if self._ready:
        return True
      # A request of this thread's batch may be this one: it goes now.
      self._send_batch()
      with self._arrived:
        return self._arrived.wait_for(lambda: self._ready, timeout)

    def get(self, timeout=None):
      if self.wait(timeout):
        return self._value
      raise LookupError()

  return Answer


def _handler_class(base, future_base, pb):
  answer_class = _answer_class(future_base)

  class SocketStateHandler(base):
    """GrpcStateHandler's requests and futures on a socket."""

    def __init__(self, address, worker_id):  # pylint: disable=super-init-not-called
      host, _, port = address.rpartition(':')
      self._lock = threading.Lock()
      self._write_lock = threading.Lock()
      self._responses_by_id = {}
      self._arrived = threading.Condition()
      self._last_id = 0
      self._exception = None
      self._done = False
      self._context = threading.local()
      self._batch = threading.local()  # .frames: requests held by `batched`
      self._requests = None  # GrpcStateHandler's queue: unused here
      self._sock = socket.create_connection((host.strip('[]'), int(port)), timeout=10)
      self._sock.settimeout(None)
      self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
      hello = worker_id.encode()
      self._sock.sendall(_LEN.pack(len(hello)) + hello)
      reader = threading.Thread(target=self._read, name='read_state_socket', daemon=True)
      reader.start()

    def start(self):
      pass  # the reader started with the connection

    def _request(self, request):
      request.id = self._next_id()
      request.instruction_id = self._context.process_instruction_id
      self._responses_by_id[request.id] = future = answer_class(self._arrived, self._send_batch)
      data = request.SerializeToString()
      frames = getattr(self._batch, 'frames', None)
      if frames is not None:
        frames.append(_LEN.pack(len(data)))
        frames.append(data)
      else:
        self._send(_LEN.pack(len(data)) + data)
      return future

    def _send(self, data):
      try:
        with self._write_lock:
          self._sock.sendall(data)
      except OSError as e:
        self._fail(e)

    @contextlib.contextmanager
    def batched(self):
      """Requests this thread makes inside go out in one write, at the end
      or when it waits for an answer: each write gives the GIL up, and on a
      busy machine getting it back cost more than the write."""
      if getattr(self._batch, 'frames', None) is not None:
        yield  # an outer batch sends them
        return
      self._batch.frames = []
      try:
        yield
      finally:
        self._send_batch()
        self._batch.frames = None

    def _send_batch(self):
      frames = getattr(self._batch, 'frames', None)
      if frames:
        self._batch.frames = []
        self._send(b''.join(frames))

    def done(self):
      self._done = True
      try:
        self._sock.shutdown(socket.SHUT_RDWR)
      except OSError:
        pass

    def _read(self):
      buf = bytearray()
      try:
        while True:
          chunk = self._sock.recv(1 << 16)
          if not chunk:
            raise ConnectionError('the runner closed the state socket')
          buf += chunk
          answered = False
          while len(buf) >= 4:
            (n,) = _LEN.unpack_from(buf)
            if len(buf) < 4 + n:
              break
            response = pb.StateResponse.FromString(bytes(buf[4:4 + n]))
            del buf[:4 + n]
            future = self._responses_by_id.pop(response.id, None)
            if future is not None:
              future.fill(response)
              answered = True
          if answered:
            with self._arrived:
              self._arrived.notify_all()
      except Exception as e:  # pylint: disable=broad-except
        if not self._done:
          self._fail(e)

    def _fail(self, error):
      """Every waiting request ends with the error, as a failed gRPC stream
      ends them: its bundle fails, and the runner retries it."""
      if self._exception is None:
        self._exception = error if isinstance(error, Exception) else RuntimeError(str(error))
      for request_id in list(self._responses_by_id):
        future = self._responses_by_id.pop(request_id, None)
        if future is not None:
          future.set(pb.StateResponse(id=request_id, error='the state socket failed: %s' % error))

  return SocketStateHandler


def batched(handler):
  """`SocketStateHandler.batched` of the socket under a (caching) state
  handler; nothing when its requests go through gRPC."""
  underlying = getattr(handler, '_underlying', handler)
  batch = getattr(underlying, 'batched', None)
  return batch() if batch is not None else contextlib.nullcontext()
