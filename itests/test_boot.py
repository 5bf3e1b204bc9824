"""beam_kafka.boot's choices for the harnesses it starts: the SDK's state
cache on by default, sized cheaply, a bundle's state writes sent together,
and a state sampler that does not hold up a bundle's end. Pure checks, no
broker."""

from beam_kafka import boot
from beam_kafka import harness_tuning


def test_the_state_cache_is_on_unless_set_or_turned_off():
  on = boot._state_cache_options({'max_cache_memory_usage_mb': 0.0, 'job_name': 'j'})
  assert on == {'max_cache_memory_usage_mb': boot.DEFAULT_STATE_CACHE_MB, 'job_name': 'j'}
  # JSON structs carry numbers as floats; an absent option is Beam's 0 too.
  assert boot._state_cache_options({})['max_cache_memory_usage_mb'] == boot.DEFAULT_STATE_CACHE_MB
  assert boot._state_cache_options({'max_cache_memory_usage_mb': 7.0})['max_cache_memory_usage_mb'] == 7.0
  off = {'max_cache_memory_usage_mb': 0.0, 'experiments': ['x', boot.NO_STATE_CACHE]}
  assert boot._state_cache_options(off) == off
  odd = {'max_cache_memory_usage_mb': 'lots'}
  assert boot._state_cache_options(odd) == odd, 'left for the SDK to refuse'


def test_cheap_sizing_still_weighs_values_and_the_cache_still_evicts():
  from apache_beam.runners.worker import statecache
  before = statecache.get_deep_size
  weighed = [before([i, 'x' * i]) for i in range(50)]
  harness_tuning.cheap_cache_sizing()
  try:
    assert statecache.get_deep_size is not before
    cheap = [statecache.get_deep_size([i, 'x' * i]) for i in range(50)]
    # Only shared objects the full walk leaves out (module globals such as
    # small ints) may count now: never less than before.
    assert all(c >= w > 0 for c, w in zip(cheap, weighed)), (cheap, weighed)
    assert statecache.get_deep_size(['x' * 10_000]) > 10_000
    # Values that hold other objects are walked, not only the list.
    assert statecache.get_deep_size([{'k': 'x' * 10_000}]) > 10_000
    assert statecache.get_deep_size([[b'y' * 10_000]]) > 10_000
    cache = statecache.StateCache(30_000)
    for k in range(10):
      cache.put(k, ['x' * 10_000])
    assert cache.peek(9) == ['x' * 10_000]
    assert cache.peek(0) is None, 'the oldest values left a cache over its weight'
  finally:
    statecache.get_deep_size = before


class _RecordingStateHandler:
  """Stands in for the SDK's caching state handler: records each request
  and each wait for an answer, in order; `error` answers a key's append
  with an error."""

  def __init__(self, error_key=None):
    self.log = []
    self.error_key = error_key

  def _future(self, kind, state_key):
    log, key = self.log, state_key.bag_user_state.key
    log.append((kind, key))
    failed = kind == 'append' and key == self.error_key

    class Future:
      def get(self):
        log.append(('wait', key))
        if failed:
          raise RuntimeError('state write refused for %r' % key)

    return Future()

  def clear(self, state_key):
    return self._future('clear', state_key)

  def extend(self, state_key, coder, values):
    assert list(values), 'an append carries values'
    return self._future('append', state_key)


def _commit_three_keys(handler):
  from apache_beam.coders import StrUtf8Coder, VarIntCoder
  from apache_beam.runners.worker import bundle_processor
  from apache_beam.transforms import userstate
  from apache_beam.transforms.window import GlobalWindow, GlobalWindows
  context = bundle_processor.FnApiUserStateContext(
      handler, 'count', StrUtf8Coder(), GlobalWindows().get_window_coder())
  count = userstate.ReadModifyWriteStateSpec('count', VarIntCoder())
  # (Set state compacts at random when added to: a bag keeps this exact.)
  seen = userstate.BagStateSpec('seen', VarIntCoder())
  for n, key in enumerate(['a', 'b', 'c']):
    context.get_state(count, key, GlobalWindow()).write(n)
    context.get_state(seen, key, GlobalWindow()).add(n)
  context.commit()


def test_a_bundles_state_writes_are_sent_together_then_all_awaited():
  import pytest
  from apache_beam.runners.worker import bundle_processor
  saved = {c: c.commit for c in (
      bundle_processor.FnApiUserStateContext,
      bundle_processor.SynchronousBagRuntimeState,
      bundle_processor.SynchronousSetRuntimeState)}
  beam_order = _RecordingStateHandler()
  _commit_three_keys(beam_order)
  assert [k for k, _ in beam_order.log].count('wait') == 6
  assert beam_order.log[2][0] == 'wait', "Beam's own commit waits per state"
  harness_tuning.pipelined_state_commits()
  harness_tuning.pipelined_state_commits()  # a second call changes nothing
  try:
    handler = _RecordingStateHandler()
    _commit_three_keys(handler)
    kinds = [k for k, _ in handler.log]
    # Every request goes out first, in Beam's order, and each state's last
    # one is awaited before the commit returns.
    assert kinds == ['clear', 'append', 'append'] * 3 + ['wait'] * 6, handler.log
    requests = [r for r in handler.log if r[0] != 'wait']
    assert requests == [r for r in beam_order.log if r[0] != 'wait']
    assert sorted(k for kind, k in handler.log if kind == 'wait') == sorted(
        k for kind, k in beam_order.log if kind == 'wait')
    # A write the runner refuses still fails the bundle.
    with pytest.raises(RuntimeError, match='refused'):
      _commit_three_keys(_RecordingStateHandler(error_key=b'\x01b'))
  finally:
    for cls, commit in saved.items():
      cls.commit = commit


def _sampled_bundle(sampler, state, seconds):
  """A bundle on `sampler` that spends `seconds` in `state`; its wall time."""
  import time
  sampler.reset()
  began = time.perf_counter()
  sampler.start()
  with state:
    time.sleep(seconds)
  sampler.stop()
  return time.perf_counter() - began


def test_one_sampling_thread_per_processor_that_ends_when_bundles_do():
  import _thread
  import time
  from apache_beam.runners.common import NameContext
  from apache_beam.runners.worker import statesampler
  from apache_beam.utils import counters
  beams = statesampler.StateSampler
  harness_tuning.prompt_state_sampler()
  harness_tuning.prompt_state_sampler()  # a second call changes nothing
  try:
    assert statesampler.StateSampler.__mro__[1] is beams
    threads = _thread._count()
    sampler = statesampler.StateSampler('s', counters.CounterFactory())
    state = sampler.scoped_state(NameContext('step'), 'process')
    for seconds in (0.2, 0.3, 0.2):
      wall = _sampled_bundle(sampler, state, seconds)
      # Sampled, and by one thread: never more time than the bundle took
      # (two threads would count it twice), give or take a step.
      assert 0 < state.nsecs / 1e9 <= wall + 0.1, (state.nsecs, wall)
      assert _thread._count() <= threads + 1
    # A bundle awaiting finalization is not reset before the next starts:
    # that one is sampled too.
    before = state.nsecs
    sampler.start()
    with state:
      time.sleep(0.2)
    sampler.stop()
    assert state.nsecs > before
    sampler.reset()  # as the processor's release does, after the stop
    deadline = time.monotonic() + 10
    while sampler._alive and time.monotonic() < deadline:
      time.sleep(0.01)
    assert not sampler._alive, 'the thread sampled an idle processor'
    assert _thread._count() == threads
  finally:
    statesampler.StateSampler = beams


def test_a_harness_that_fails_ends_its_process_despite_threads_left_behind():
  """A failure at start ends the process even when the SDK left a
  non-daemon thread running (a harness that neither connects nor exits
  would hold the runner for its whole connect timeout)."""
  import subprocess
  import sys
  import time
  script = (
      'import sys, threading, time\n'
      'from beam_kafka import boot\n'
      'def failing():\n'
      '  threading.Thread(target=time.sleep, args=(600,)).start()\n'
      '  sys.exit(2)\n'
      'boot._run_and_exit(failing)\n')
  started = time.monotonic()
  ended = subprocess.run([sys.executable, '-c', script], timeout=60, check=False)
  assert ended.returncode == 2
  assert time.monotonic() - started < 30
