"""Which of Beam's PortableRunnerTest tests beam-kafka cannot pass yet, and why.

Data, not logic: when a feature lands, delete it from NOT_BUILT. Every test
whose needs are then all built runs again, and must pass; a test that still
fails needs a feature not listed for it here (add it to NEEDS, or fix the bug).
Run the suite with BEAM_KAFKA_SUITE_IGNORE_SKIPS=1 to try the skipped tests too.

A test not in NEEDS needs nothing beyond what is built and must pass. Tests that
Beam itself skips for every runner (`@unittest.skip`, or `SkipTest` raised in
PortableRunnerTest) are not listed: their own skip still applies, with
upstream's reason. The classification follows what each test's pipeline
sends a runner (measured with apache-beam 2.73.0); note that `beam.Create` of
more than one element, `assert_that` and `Reshuffle` all contain a GroupByKey.
"""

from typing import Optional

# Features a test can need that beam-kafka does not have yet. Remove a feature
# from this list when it is built.
GBK = 'GroupByKey'
SIDE_INPUTS = 'side inputs'
USER_STATE = 'user state'
TIMERS = 'timers'
SDF = 'splittable DoFn'
FINALIZATION = 'bundle finalization'
TEST_STREAM = 'TestStream'
CUSTOM_WINDOW_FN = 'custom WindowFn'

NOT_BUILT = []

# test name -> every not-yet-built feature it needs, in both modes.
# GroupByKey includes Reshuffle, CombinePerKey and assert_that (and thus
# Create of several elements); CombineGlobally adds a side input (its default
# value); PeriodicImpulse and Read are splittable DoFns.
NEEDS = {
    'test_assert_that': (GBK, ),
    'test_batch_pardo': (GBK, ),
    'test_batch_pardo_dofn_params': (GBK, ),
    'test_batch_pardo_fusion_break': (GBK, SIDE_INPUTS),
    'test_batch_pardo_overlapping_windows': (GBK, ),
    'test_batch_pardo_override_type_inference': (GBK, ),
    'test_batch_pardo_window_param': (GBK, ),
    'test_batch_rebatch_pardos': (GBK, ),
    'test_batch_to_element_pardo': (GBK, SIDE_INPUTS),
    'test_callbacks_with_exception': (GBK, FINALIZATION),
    'test_combine_per_key': (GBK, ),
    'test_create': (GBK, ),
    'test_create_value_provider_pipeline_option': (GBK, ),
    'test_custom_merging_window': (GBK, CUSTOM_WINDOW_FN),
    'test_custom_window_type': (GBK, CUSTOM_WINDOW_FN),
    'test_element_to_batch_pardo': (GBK, ),
    'test_error_message_includes_stage': (GBK, ),
    'test_first_pane': (GBK, ),
    'test_flatmap_numpy_array': (GBK, ),
    'test_flatten': (GBK, ),
    'test_flatten_and_gbk': (GBK, ),
    'test_flatten_same_pcollections': (GBK, ),
    'test_flattened_side_input': (GBK, SIDE_INPUTS),
    'test_gbk_side_input': (GBK, SIDE_INPUTS),
    'test_group_by_key': (GBK, ),
    'test_group_by_key_with_empty_pcoll_elements': (GBK, ),
    'test_metrics': (GBK, ),
    'test_multimap_multiside_input': (GBK, SIDE_INPUTS),
    'test_multimap_side_input': (GBK, SIDE_INPUTS),
    'test_multimap_side_input_type_coercion': (GBK, SIDE_INPUTS),
    'test_no_subtransform_composite': (GBK, ),
    'test_pack_combiners': (GBK, SIDE_INPUTS),
    'test_pardo': (GBK, ),
    'test_pardo_dynamic_timer': (GBK, USER_STATE, TIMERS),
    'test_pardo_et_timer_with_no_firing': (GBK, USER_STATE, TIMERS, SDF),
    'test_pardo_et_timer_with_no_reset': (GBK, USER_STATE, TIMERS, SDF),
    'test_pardo_et_timer_with_no_reset_and_no_clear': (GBK, USER_STATE, TIMERS, SDF),
    'test_pardo_side_and_main_outputs': (GBK, ),
    'test_pardo_side_input_dependencies': (SIDE_INPUTS, ),
    'test_pardo_side_inputs': (GBK, SIDE_INPUTS),
    'test_pardo_side_outputs': (GBK, ),
    'test_pardo_state_only': (GBK, USER_STATE),
    'test_pardo_state_timers': (GBK, USER_STATE, TIMERS),
    'test_pardo_state_timers_non_standard_coder': (GBK, USER_STATE, TIMERS),
    'test_pardo_state_with_custom_key_coder': (GBK, USER_STATE),
    'test_pardo_timers': (GBK, USER_STATE, TIMERS),
    'test_pardo_timers_clear': (GBK, USER_STATE, TIMERS),
    'test_pardo_unfusable_side_inputs': (GBK, SIDE_INPUTS),
    'test_pardo_unfusable_side_inputs_with_separation': (GBK, SIDE_INPUTS),
    'test_pardo_windowed_side_inputs': (GBK, SIDE_INPUTS),
    'test_read': (GBK, SDF),
    'test_register_finalizations': (GBK, SDF, FINALIZATION),
    'test_reshuffle': (GBK, ),
    'test_reshuffle_after_custom_window': (GBK, ),
    'test_sdf': (GBK, SDF),
    'test_sdf_synthetic_source': (GBK, SDF, SIDE_INPUTS),
    # Only asserts that the pipeline fails, so a Prepare refusal passes it:
    # run it once splittable DoFns run.
    'test_sdf_with_check_done_failed': (GBK, SDF),
    'test_sdf_with_dofn_as_restriction_provider': (GBK, SDF),
    'test_sdf_with_dofn_as_watermark_estimator': (GBK, SDF),
    'test_sdf_with_sdf_initiated_checkpointing': (GBK, SDF),
    'test_sdf_with_watermark_tracking': (GBK, SDF),
    'test_sliding_windows': (GBK, SDF),
    'test_teststream_pardo_timers': (TEST_STREAM, USER_STATE, TIMERS),
    'test_windowed_combine_per_key': (GBK, ),
    'test_windowed_pardo_state_timers': (GBK, USER_STATE, TIMERS),
    'test_windowing': (GBK, ),
}

# Extra needs of one mode only: mode -> {test name -> features}.
MODE_NEEDS = {
    'batch': {},
    'streaming': {},
}

# Skips upstream applies to PortableRunnerTest by its class name (so they miss
# our subclasses): mirrored here with upstream's reason. Not about a feature
# of ours; they stay skipped when every feature is built. Empty now: the
# PeriodicImpulse timer tests upstream skips there (issue 35168) pass here,
# since residuals wait for the delay their DoFn asked for and hold the
# watermark where its estimator put it.
UPSTREAM_PORTABLE_SKIPS = {}


def missing_features(test_name: str, mode: str):
  """The not-yet-built features `test_name` needs in `mode`, in NOT_BUILT order."""
  needs = set(NEEDS.get(test_name, ()))
  needs.update(MODE_NEEDS.get(mode, {}).get(test_name, ()))
  unknown = needs.difference(NOT_BUILT).difference(_BUILT_OR_KNOWN)
  if unknown:
    raise ValueError('skips.py: %s needs unknown features %s' %
                     (test_name, sorted(unknown)))
  return [f for f in NOT_BUILT if f in needs]


def skip_reason(test_name: str, mode: str) -> Optional[str]:
  """Why `test_name` is skipped in `mode` ('batch'/'streaming'), or None."""
  upstream = UPSTREAM_PORTABLE_SKIPS.get(test_name)
  if upstream:
    return ('skipped upstream for PortableRunnerTest subclasses (%s)' %
            upstream)
  missing = missing_features(test_name, mode)
  if missing:
    return 'needs %s (not built yet)' % ', '.join(missing)
  return None


# Every feature name NEEDS may use, built or not (guards against typos once a
# feature leaves NOT_BUILT).
_BUILT_OR_KNOWN = {
    GBK,
    SIDE_INPUTS,
    USER_STATE,
    TIMERS,
    SDF,
    FINALIZATION,
    TEST_STREAM,
    CUSTOM_WINDOW_FN,
}
