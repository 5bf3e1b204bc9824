#!/usr/bin/env bash
# Runs Beam's own PortableRunnerTest suite against the beam-kafka job server,
# in batch and in streaming mode (itests/beam_suite), and prints one line per
# mode:   beam-suite batch: N passed, N failed, N skipped (wall S s, ...)
#
#   scripts/beam-suite.sh [batch|streaming|triggers] [extra pytest args]
#
# `triggers` is Beam's trigger_test.py (TriggerPipelineTest and the
# TestStream transcript tests) through TestPipeline (test_trigger_suite.py);
# with no mode, everything runs.
#
# Uses the broker at BEAM_KAFKA_TEST_BOOTSTRAP (default localhost:19092; the
# test session starts one there when none answers) and the binary beam_kafka
# finds (BEAM_KAFKA_BINARY, else this tree's build: run scripts/build.sh first).
#   BEAM_KAFKA_SUITE_PARALLELISM=4   run every pipeline with internal_parallelism=4
#   BEAM_KAFKA_SUITE_IGNORE_SKIPS=1  also run the tests itests/beam_suite/skips.py skips
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PY="$("$REPO_ROOT/scripts/python-env.sh")"

select=()
case "${1:-}" in
  batch) select=(-k BatchSuiteTest); shift ;;
  streaming) select=(-k StreamingSuiteTest); shift ;;
  triggers) select=(-k "TriggerPipelineSuiteTest or TranscriptSuiteTest"); shift ;;
esac

cd "$REPO_ROOT"
set +e
"$PY" -m pytest itests/beam_suite -rs "${select[@]}" "$@"
rc=$?
set -e
exit $rc
