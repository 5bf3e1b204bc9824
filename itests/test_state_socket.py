"""beam_kafka.state_socket, the harness's end of the runner's state socket,
against a stand-in for the runner's end: framing, answers matched to their
requests, and a failed socket ending every wait. Pure checks, no broker
(the runner's end is tested in fnapi; a booted harness using both ends is
in test_environments)."""

import socket
import struct
import threading

import pytest

from beam_kafka import state_socket

_LEN = struct.Struct('>I')


def _handler_class():
  from apache_beam.portability.api import beam_fn_api_pb2
  from apache_beam.runners.worker import sdk_worker
  return state_socket._handler_class(sdk_worker.GrpcStateHandler, sdk_worker._Future, beam_fn_api_pb2)


def _read_frame(conn):
  head = b''
  while len(head) < 4:
    got = conn.recv(4 - len(head))
    if not got:
      return None
    head += got
  (n,) = _LEN.unpack(head)
  body = b''
  while len(body) < n:
    body += conn.recv(n - len(body))
  return body


class _Runner:
  """Accepts one connection; `serve(n)` reads n requests and answers them
  in reverse order, so answers must be matched by id, not by position."""

  def __init__(self):
    self.listener = socket.socket()
    self.listener.bind(('127.0.0.1', 0))
    self.listener.listen(1)
    self.address = '127.0.0.1:%d' % self.listener.getsockname()[1]
    self.conn, self.hello, self.requests = None, None, []

  def accept(self):
    self.conn, _ = self.listener.accept()
    self.hello = _read_frame(self.conn)

  def serve(self, n):
    from apache_beam.portability.api import beam_fn_api_pb2 as pb
    got = [pb.StateRequest.FromString(_read_frame(self.conn)) for _ in range(n)]
    self.requests += got
    out = b''
    for r in reversed(got):
      data = r.state_key.bag_user_state.key + b'!'
      response = pb.StateResponse(id=r.id, get=pb.StateGetResponse(data=data)).SerializeToString()
      out += _LEN.pack(len(response)) + response
    self.conn.sendall(out)


def _get(key):
  from apache_beam.portability.api import beam_fn_api_pb2 as pb
  return pb.StateRequest(
      state_key=pb.StateKey(bag_user_state=pb.StateKey.BagUserState(transform_id='t', user_state_id='s', key=key)),
      get=pb.StateGetRequest())


def _connected():
  runner = _Runner()
  accepted = threading.Thread(target=runner.accept)
  accepted.start()
  handler = _handler_class()(runner.address, 'worker-7')
  accepted.join(10)
  return runner, handler


def test_requests_carry_their_bundle_and_answers_reach_their_own_request():
  runner, handler = _connected()
  try:
    assert runner.hello == b'worker-7', 'the first frame is the worker id'
    handler._context.process_instruction_id = 'bundle-1'
    futures = [handler._request(_get(k)) for k in (b'a', b'b', b'c')]
    runner.serve(3)
    assert [r.instruction_id for r in runner.requests] == ['bundle-1'] * 3
    assert len({r.id for r in runner.requests}) == 3
    assert [f.get().get.data for f in futures] == [b'a!', b'b!', b'c!']
    # Beam's blocking read, unchanged above the transport.
    served = threading.Thread(target=runner.serve, args=(1,))
    served.start()
    data, token = handler.get_raw(_get(b'd').state_key)
    served.join(10)
    assert (data, token) == (b'd!', b'')
  finally:
    handler.done()
    runner.listener.close()


def test_a_batch_goes_out_in_one_write_at_its_end_or_when_its_thread_waits():
  runner, handler = _connected()
  try:
    handler._context.process_instruction_id = 'bundle-1'
    runner.conn.settimeout(0.2)
    with state_socket.batched(handler):
      held = [handler._request(_get(k)) for k in (b'a', b'b')]
      with state_socket.batched(handler):  # inner: the outer batch sends
        held.append(handler._request(_get(b'c')))
      with pytest.raises(socket.timeout):
        runner.conn.recv(1, socket.MSG_PEEK)
    runner.conn.settimeout(10)
    runner.serve(3)
    assert [f.get().get.data for f in held] == [b'a!', b'b!', b'c!']
    # A wait inside the batch sends what it holds first (no deadlock).
    served = threading.Thread(target=runner.serve, args=(2,))
    served.start()
    with state_socket.batched(handler):
      first = handler._request(_get(b'd'))
      second = handler._request(_get(b'e'))
      assert first.get(timeout=10).get.data == b'd!'
      assert second.get(timeout=10).get.data == b'e!'
    served.join(10)
    # Under a caching handler the socket's batch is found; gRPC has none.
    class Caching:
      _underlying = handler
    with state_socket.batched(Caching()):
      third = handler._request(_get(b'f'))
    runner.serve(1)
    assert third.get(timeout=10).get.data == b'f!'
    with state_socket.batched(object()):
      pass
  finally:
    handler.done()
    runner.listener.close()


def test_an_answer_wakes_a_waiter_that_came_first_and_times_out_without_one():
  from apache_beam.runners.worker import sdk_worker
  answer_class = state_socket._answer_class(sdk_worker._Future)
  arrived = threading.Condition()
  early, never = answer_class(arrived, lambda: None), answer_class(arrived, lambda: None)
  got = []
  waiter = threading.Thread(target=lambda: got.append(early.get()))
  waiter.start()
  waiter.join(0.2)
  assert waiter.is_alive(), 'get returned before the answer was set'
  early.set('answer')
  waiter.join(10)
  assert got == ['answer']
  assert not never.wait(0.05)
  with pytest.raises(LookupError):
    never.get(timeout=0.05)
  # An answer filled without a wake-up is still seen by the next wait.
  later = answer_class(arrived, lambda: None)
  later.fill('filled')
  assert later.get(timeout=0) == 'filled'
  # Beam combines futures (a bag's appends) and wraps what is no future of
  # its own as a value: an answer must count as one of its futures.
  combined = sdk_worker._DeferredCall(lambda *answers: answers, early, later)
  assert combined.get() == ('answer', 'filled')


def test_a_closed_socket_fails_every_waiting_request_and_the_next_ones():
  runner, handler = _connected()
  try:
    handler._context.process_instruction_id = 'bundle-1'
    waiting = handler._request(_get(b'a'))
    _read_frame(runner.conn)
    runner.conn.close()
    assert waiting.wait(10), 'a request waited on a closed socket'
    assert 'state socket failed' in waiting.get().error
    with pytest.raises(Exception):
      handler.get_raw(_get(b'b').state_key)
  finally:
    runner.listener.close()


def test_an_unreachable_socket_leaves_the_harness_on_grpc():
  from apache_beam.runners.worker import sdk_worker
  from apache_beam.runners.worker import statecache
  from apache_beam.portability.api import endpoints_pb2

  class Factory(sdk_worker.GrpcStateHandlerFactory):
    pass

  dead = socket.socket()
  dead.bind(('127.0.0.1', 0))
  address = '127.0.0.1:%d' % dead.getsockname()[1]
  dead.close()  # nothing listens there now
  state_socket.install(Factory, {state_socket.ENV: address, 'WORKER_ID': 'w'})
  factory = Factory(statecache.StateCache(0))
  try:
    handler = factory.create_state_handler(endpoints_pb2.ApiServiceDescriptor(url='localhost:1'))
    assert type(handler._underlying) is sdk_worker.GrpcStateHandler
  finally:
    factory.close()
  # Without the variable nothing is patched.
  class Untouched(sdk_worker.GrpcStateHandlerFactory):
    pass
  state_socket.install(Untouched, {})
  assert 'create_state_handler' not in Untouched.__dict__


def test_the_factory_hands_out_the_socket_handler_when_the_runner_gave_one():
  from apache_beam.runners.worker import sdk_worker
  from apache_beam.runners.worker import statecache
  from apache_beam.portability.api import endpoints_pb2

  class Factory(sdk_worker.GrpcStateHandlerFactory):
    pass

  runner = _Runner()
  accepted = threading.Thread(target=runner.accept)
  accepted.start()
  state_socket.install(Factory, {state_socket.ENV: runner.address, 'WORKER_ID': 'w-9'})
  factory = Factory(statecache.StateCache(0))
  before = state_socket.stats['handlers']
  try:
    url = endpoints_pb2.ApiServiceDescriptor(url='localhost:1')
    handler = factory.create_state_handler(url)
    accepted.join(10)
    assert type(handler._underlying).__name__ == 'SocketStateHandler'
    assert isinstance(handler._underlying, sdk_worker.GrpcStateHandler)
    assert runner.hello == b'w-9'
    assert factory.create_state_handler(url) is handler, 'one handler per URL'
    assert state_socket.stats['handlers'] == before + 1
  finally:
    factory.close()
    runner.listener.close()
