#!/usr/bin/env bash
# Reads one large text file (default 100 MB) with ReadFromText at
# internal_parallelism=4 and prints which tasks read it: the long form of
# itests/test_files.py::test_a_large_file_is_read_in_splits_spread_over_the_tasks
# (CI runs it with a 12 MB file).
#
#   scripts/large-file-read.sh [MB]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PY="$("$REPO_ROOT/scripts/python-env.sh")"
cd "$REPO_ROOT"
BEAM_KAFKA_LARGE_FILE_MB="${1:-100}" "$PY" -m pytest -s -q \
  "itests/test_files.py::test_a_large_file_is_read_in_splits_spread_over_the_tasks"
