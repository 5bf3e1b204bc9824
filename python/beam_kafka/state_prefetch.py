"""User state a bundle is about to read, asked for before it reads it.

Beam's Python harness reads a key's user state when the DoFn first touches
it, one blocking State API round trip per key: a bundle of N keys not in the
state cache waits for N round trips in a row. On a loaded machine a round
trip took 5-25 ms (four Python threads wake per request), so a stateful
pipeline whose keys are new (a cold cache, many keys, a task that just
moved here) fell behind at 1,000 records/s with the CPU half idle.

Here, when a chunk of a bundle's input arrives for a stateful DoFn, the
harness sends the get of every state of every key in it that the cache does
not hold, all at once, and the DoFn's read then takes the answer to its own
earlier request: one round trip per chunk instead of one per key. Which
states to fetch is learned: those the DoFn read before (a state it only
writes is never fetched). Nothing else changes: the answers go through
Beam's own cache-loading path, and a bundle's writes still reach the runner
only when it commits (so an answer cannot be older than what the bundle
itself changed: the DoFn reads its own changes from the state object).
"""

import contextlib
import logging
import threading

from beam_kafka import state_socket

# Prefetches a bundle may have waiting at once (bounds the requests a huge
# chunk of new keys sends before the first element runs).
MAX_PENDING = 4096

# (transform id, user state id) of bag-backed user states a DoFn has read.
_read_states = set()
# Transform id -> a user-state context of that stateful ParDo (every bundle
# processor of one descriptor makes its own; any one gives the coders).
_contexts = {}
_lock = threading.Lock()
_LOG = logging.getLogger(__name__)
_warned = []
# Reads answered by a prefetch (a check that prefetching happens).
stats = {'prefetched_reads': 0}


def install():
  """Patches the harness; leaves Beam's code alone when this SDK release is
  shaped differently from what this expects."""
  try:
    from apache_beam.coders import coder_impl
    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.runners.worker import bundle_processor, sdk_worker
    data_input = bundle_processor.DataInputOperation
    context = bundle_processor.FnApiUserStateContext
    grpc_handler = sdk_worker.GrpcStateHandler
    for cls, names in ((data_input, ('process_encoded', 'output')),
                       (context, ('__init__', '_create_state')),
                       (grpc_handler, ('get_raw', '_request', 'process_instruction_id'))):
      for name in names:
        getattr(cls, name)
    sdk_worker.GlobalCachingStateHandler._get_cache_token
  except (ImportError, AttributeError):
    return
  _patch_contexts(context)
  _patch_handler(grpc_handler)
  _patch_input(data_input, coder_impl, beam_fn_api_pb2, grpc_handler)


def _patch_contexts(context):
  init = context.__init__

  def __init__(self, state_handler, transform_id, *args, **kwargs):
    init(self, state_handler, transform_id, *args, **kwargs)
    with _lock:
      _contexts[transform_id] = self

  __init__.__doc__ = init.__doc__
  context.__init__ = __init__


def _patch_handler(handler):
  get_raw, scope = handler.get_raw, handler.process_instruction_id

  def get_raw_prefetched(self, state_key, continuation_token=None):
    if not continuation_token:
      pending = getattr(self._context, 'prefetched', None)
      future = pending.pop(state_key.SerializeToString(), None) if pending else None
      if future is not None:
        response = _await(self, future)
        stats['prefetched_reads'] += 1
        return response.get.data, response.get.continuation_token
      if state_key.HasField('bag_user_state'):
        b = state_key.bag_user_state
        if (b.transform_id, b.user_state_id) not in _read_states:
          with _lock:
            _read_states.add((b.transform_id, b.user_state_id))
    return get_raw(self, state_key, continuation_token)

  @contextlib.contextmanager
  def process_instruction_id(self, bundle_id):
    # Answers a bundle did not use are dropped with it.
    self._context.prefetched = {}
    try:
      with scope(self, bundle_id):
        yield
    finally:
      self._context.prefetched = {}

  get_raw_prefetched.__doc__ = get_raw.__doc__
  handler.get_raw = get_raw_prefetched
  handler.process_instruction_id = process_instruction_id


def _await(handler, future):
  """What GrpcStateHandler._blocking_request does after sending."""
  while not future.wait(timeout=1):
    if handler._exception:
      raise handler._exception
    if handler._done:
      raise RuntimeError('the State API stream ended')
  response = future.get()
  if response.error:
    raise RuntimeError(response.error)
  return response


def _patch_input(data_input, coder_impl, pb, grpc_handler):
  process_encoded = data_input.process_encoded

  def process_encoded_prefetching(self, encoded_windowed_values):
    targets = _targets(self, grpc_handler)
    if not targets:
      return process_encoded(self, encoded_windowed_values)
    values = []
    input_stream = coder_impl.create_InputStream(encoded_windowed_values)
    while input_stream.size() > 0:
      try:
        values.append(self.windowed_coder_impl.decode_from_stream(input_stream, True))
      except Exception as exn:
        raise ValueError('Error decoding input stream with coder %s in step %s' %
                         (self.windowed_coder, self.name_context.step_name)) from exn
    for ctx, names in targets:
      try:
        _prefetch(ctx, names, values, pb)
      except Exception as e:  # only a lost shortcut: the DoFn's reads still go out
        if not _warned:
          _warned.append(e)
          _LOG.warning('user state prefetch failed, reads go one by one: %s', e)
    # Beam's loop: a split may stop the bundle before any element.
    for value in values:
      with self.splitting_lock:
        if self.index == self.stop - 1:
          return
        self.index += 1
      self.output(value)

  process_encoded_prefetching.__doc__ = process_encoded.__doc__
  data_input.process_encoded = process_encoded_prefetching


def _targets(op, grpc_handler):
  """The stateful ParDos this input feeds directly, with the states they
  read before (`_prefetch` skips them when state is not cached)."""
  if not _read_states:
    return ()
  targets = []
  for consumer in getattr(op, 'consumer', None) or ():
    name_context = getattr(consumer, 'name_context', None)
    ctx = _contexts.get(getattr(name_context, 'transform_id', None))
    if ctx is None:
      continue
    handler = getattr(ctx, '_state_handler', None)
    if not (isinstance(getattr(handler, '_underlying', None), grpc_handler) and
            hasattr(handler, '_state_cache') and hasattr(handler, '_get_cache_token')):
      continue
    names = [n for t, n in tuple(_read_states) if t == ctx._transform_id]
    if names:
      targets.append((ctx, names))
  return targets


def _prefetch(ctx, names, values, pb):
  handler = ctx._state_handler
  grpc = handler._underlying
  pending = getattr(grpc._context, 'prefetched', None)
  if pending is None:
    return
  with state_socket.batched(grpc):
    _request_missing(ctx, handler, grpc, pending, names, values, pb)


def _request_missing(ctx, handler, grpc, pending, names, values, pb):
  tid = ctx._transform_id
  token = None
  seen = set()  # a chunk under a backlog repeats its keys many times
  for value in values:
    try:
      key = ctx._key_coder.encode_nested(value.value[0])
    except Exception:  # not a keyed element: leave it to the DoFn
      return
    for window in value.windows:
      encoded_window = ctx._window_coder.encode(window)
      if (key, encoded_window) in seen:
        continue
      seen.add((key, encoded_window))
      for name in names:
        if len(pending) >= MAX_PENDING:
          return
        state_key = pb.StateKey(bag_user_state=pb.StateKey.BagUserState(
            transform_id=tid, user_state_id=name, window=encoded_window, key=key))
        if token is None:
          token = handler._get_cache_token(state_key)
          if not token:
            return  # cache disabled: every read goes to the runner lazily
        cache_key = state_key.SerializeToString()
        if cache_key in pending or _cached(handler._state_cache, (cache_key, token)):
          continue
        pending[cache_key] = grpc._request(
            pb.StateRequest(state_key=state_key, get=pb.StateGetRequest()))


def _cached(cache, key):
  """Whether the cache holds (or is loading) `key`, without counting a hit
  or a miss in its statistics."""
  entries, lock = getattr(cache, '_cache', None), getattr(cache, '_lock', None)
  if entries is None or lock is None:
    return cache.peek(key) is not None
  with lock:
    return key in entries
