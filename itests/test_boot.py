"""beam_kafka.boot's choices for the harnesses it starts: the SDK's state
cache on by default, sized cheaply. Pure checks, no broker."""

from beam_kafka import boot


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
  boot._cheap_cache_sizing()
  try:
    assert statecache.get_deep_size is not before
    cheap = [statecache.get_deep_size([i, 'x' * i]) for i in range(50)]
    # Only shared objects the full walk leaves out (module globals such as
    # small ints) may count now: never less than before.
    assert all(c >= w > 0 for c, w in zip(cheap, weighed)), (cheap, weighed)
    assert statecache.get_deep_size(['x' * 10_000]) > 10_000
    cache = statecache.StateCache(30_000)
    for k in range(10):
      cache.put(k, ['x' * 10_000])
    assert cache.peek(9) == ['x' * 10_000]
    assert cache.peek(0) is None, 'the oldest values left a cache over its weight'
  finally:
    statecache.get_deep_size = before
