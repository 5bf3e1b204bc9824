"""Changes to the Python SDK harness's costs, not its behaviour, made by
beam_kafka.boot in the harnesses it starts.

Each one is left out (Beam's own code runs) when this SDK release is shaped
differently from what it expects, so a newer SDK is never broken by it.
"""

import sys
import threading

from beam_kafka import state_socket

# Objects that refer to nothing the cache would count: sys.getsizeof is all
# of their weight.
_FLAT_TYPES = frozenset((int, float, bool, str, bytes, type(None)))
# Longer lists are weighed by objsize, whose cost then matters less.
_FLAT_LIST_MAX = 64

# Futures of state writes a user-state context commits, per bundle thread.
_commit_scope = threading.local()


def cheap_cache_sizing():
  """Beam's state cache measures a value on every put with objsize, which
  first walks the globals of every loaded module (so as not to count them):
  for a read-modify-write counter that walk was 60% of the harness's CPU.
  Cached state values are the pipeline's decoded elements, which never are
  module globals, so the walk is skipped; and a short list of numbers,
  strings or bytes (a value or counter state's whole content) is weighed
  without objsize at all, which was still a sixth of the harness's time."""
  try:
    import inspect

    import objsize
    from apache_beam.runners.worker import statecache
    sized = statecache.get_deep_size
    if 'exclude_modules_globals' not in inspect.signature(
        objsize.get_deep_size).parameters:
      return
    size_func, referents_func, filter_func = (
        statecache._size_func, statecache._get_referents_func,
        statecache._filter_func)
  except (ImportError, AttributeError, TypeError, ValueError):
    return

  def get_deep_size(*objs):
    if len(objs) == 1 and type(objs[0]) is list:
      weight = _flat_list_weight(objs[0])
      if weight is not None:
        return weight
    return objsize.get_deep_size(
        *objs,
        get_size_func=size_func,
        get_referents_func=referents_func,
        filter_func=filter_func,
        exclude_modules_globals=False)

  get_deep_size.__doc__ = sized.__doc__
  statecache.get_deep_size = get_deep_size


def _flat_list_weight(values):
  """What objsize would weigh a short list of flat values at (more when a
  value appears twice: objsize counts shared objects once), or None."""
  if len(values) > _FLAT_LIST_MAX:
    return None
  weight = sys.getsizeof(values)
  for value in values:
    if type(value) not in _FLAT_TYPES:
      return None
    weight += sys.getsizeof(value)
  return weight


# The longest sleep of the state-sampling thread (Beam's: 200 ms). Each
# running bundle's thread wakes this often; at 2 ms, the wake-ups of a
# harness's concurrent bundles cost a third more SDK CPU under backlog.
SAMPLING_PERIOD_MS = 20


def prompt_state_sampler():
  """Beam's state sampler (the time each transform takes: its msecs
  metrics) starts a thread when a bundle starts, sleeping in growing steps
  from 2 ms up to 200 ms, and joins it when the bundle ends, so the
  bundle's response waits out the rest of the current sleep: measured here,
  3.6 ms after a 30 ms bundle, 20 ms after a 100 ms one, 44 ms after a
  500 ms one, the harness idle meanwhile. Starting the thread also waits
  for it to take the GIL, on a busy harness often milliseconds.

  Here a bundle's end only tells the thread to stop: it stops at its next
  step unless the processor's next bundle began meanwhile, which it then
  goes on sampling (one thread per processor, so nothing is counted twice),
  and its steps are at most SAMPLING_PERIOD_MS."""
  try:
    import _thread
    import inspect

    from apache_beam.runners.worker import statesampler
    sampler = statesampler.StateSampler
    if getattr(sampler, 'beam_kafka_prompt', False):
      return
    if 'sampling_period_ms' not in inspect.signature(sampler).parameters:
      return
    set_tracker = statesampler.set_current_tracker
    for name in ('run', 'reset', 'started', 'finished'):
      getattr(sampler, name)
  except (ImportError, AttributeError, TypeError, ValueError):
    return

  class PromptStateSampler(sampler):
    beam_kafka_prompt = True

    def __init__(
        self, prefix, counter_factory, sampling_period_ms=SAMPLING_PERIOD_MS):
      super().__init__(
          prefix,
          counter_factory,
          sampling_period_ms=min(sampling_period_ms, SAMPLING_PERIOD_MS))
      self._sampling = _thread.allocate_lock()
      # A bundle runs (the thread must sample); the thread runs.
      self._wanted = self._alive = False

    def start(self):
      self.tracked_thread = threading.current_thread()
      set_tracker(self)
      with self._sampling:
        self._wanted = True
        # Not reset since it stopped (a bundle that awaits finalization):
        # the thread would otherwise find it finished at once, again and again.
        self.finished = False
        if not self._alive:
          self._alive = True
          _thread.start_new_thread(self._sample, ())
      self.started = True

    def stop(self):
      set_tracker(None)
      with self._sampling:
        self._wanted = False
        # Read by the thread at its next step (under the sampler's own lock).
        self.finished = True

    def reset(self):
      super().reset()
      with self._sampling:
        if not self._wanted:
          # Beam's reset clears `finished`: the thread, still to see it at
          # its next step, would sample the idle processor for ever.
          self.finished = True

    def _sample(self):
      try:
        while True:
          self.run()  # returns once it saw `finished`
          with self._sampling:
            if not self._wanted:
              self._alive = False
              return
      except BaseException:
        with self._sampling:
          self._alive = False  # the next bundle starts another
        raise

  PromptStateSampler.__name__ = PromptStateSampler.__qualname__ = (
      sampler.__name__)
  statesampler.StateSampler = PromptStateSampler


def pipelined_state_commits():
  """At the end of a bundle the SDK writes each key's changed state (a clear
  and an append per bag, value or set) and waits for the runner's answer
  before it writes the next key's: a bundle that touched 200 keys waited for
  200 round trips one after another (on a busy machine each takes
  milliseconds: thread wake-ups on both sides). Here a
  bundle's writes are all sent first and their answers awaited together
  before the bundle ends, as the SDK already does within one ordered-list
  state. Requests travel in order on the one State API stream, and the
  bundle still reports success only after every write was acknowledged, so
  what the runner sees is unchanged."""
  try:
    from apache_beam.runners.worker import bundle_processor as bp
    context = bp.FnApiUserStateContext
    states = (bp.SynchronousBagRuntimeState, bp.SynchronousSetRuntimeState)
  except (ImportError, AttributeError):
    return
  if getattr(context.commit, 'beam_kafka_pipelined', False):
    return
  context_commit = context.commit

  def commit_context(self):
    try:
      all_states = self._all_states
    except AttributeError:
      return context_commit(self)
    outer = getattr(_commit_scope, 'futures', None)
    futures = _commit_scope.futures = []
    try:
      with state_socket.batched(getattr(self, '_state_handler', None)):
        for state in all_states.values():
          state.commit()
    finally:
      _commit_scope.futures = outer
    for future in futures:
      future.get()

  commit_context.beam_kafka_pipelined = True
  context.commit = commit_context
  for cls in states:
    cls.commit = _deferring_commit(cls.commit)


def _deferring_commit(original):
  """A bag or set state's commit that, inside a context's commit, leaves the
  wait for its last request to the context."""

  def commit(self):
    futures = getattr(_commit_scope, 'futures', None)
    try:
      handler, key = self._state_handler, self._state_key
      cleared, added = self._cleared, self._added_elements
      coder = self._value_coder
    except AttributeError:
      futures = None
    if futures is None:
      return original(self)
    last = None
    if cleared:
      last = handler.clear(key)
    if added:
      last = handler.extend(key, coder.get_impl(), added)
    if last is not None:
      # Answers come in request order: the last one covers the clear too.
      futures.append(last)

  commit.__doc__ = original.__doc__
  return commit
