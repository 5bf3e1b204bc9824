#!/usr/bin/env bash
# Creates (once) the Python virtualenv with the pinned apache-beam and our runner
# package, and prints the path of its python.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
REQ="$REPO_ROOT/python/requirements.txt"
key="$(cat "$REQ" "$REPO_ROOT/python/pyproject.toml" | sha256sum | head -c 12)"
VENV="$BEAM_KAFKA_CACHE/venv-$key"
if [[ ! -f "$VENV/.complete" ]]; then
  PY="${PYTHON:-python3}"
  command -v "$PY" >/dev/null || die "python3 is needed"
  log "creating the Python environment $VENV (apache-beam from PyPI; a few minutes the first time)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >&2
  "$VENV/bin/pip" install -q -r "$REQ" >&2
  touch "$VENV/.complete"
fi
# The runner package is installed editable so a change to python/ needs no reinstall.
if ! "$VENV/bin/python" -c 'import beam_kafka' 2>/dev/null; then
  "$VENV/bin/pip" install -q --no-deps -e "$REPO_ROOT/python" >&2
fi
echo "$VENV/bin/python"
