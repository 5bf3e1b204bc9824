#!/usr/bin/env bash
# Creates (once) the Python virtualenv with the pinned apache-beam and our runner
# package, and prints the path of its python.
#   --runtime                      only what running a pipeline needs (the demo)
#   BEAM_KAFKA_PYTHON_SDK=2.77.0   another apache-beam release instead of the pin
#                                  (a venv of its own; `scripts/test.sh --full` runs
#                                  Beam's suite on the oldest and the newest release)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
REQ="$REPO_ROOT/python/requirements.txt"
if [[ -n "${BEAM_KAFKA_PYTHON_SDK:-}" ]]; then
  [[ "$BEAM_KAFKA_PYTHON_SDK" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "BEAM_KAFKA_PYTHON_SDK must be a release like 2.77.0"
  mkdir -p "$BEAM_KAFKA_CACHE"
  sdk_req="$BEAM_KAFKA_CACHE/requirements-beam-$BEAM_KAFKA_PYTHON_SDK.txt"
  sed "s/^apache-beam==.*/apache-beam==$BEAM_KAFKA_PYTHON_SDK/" "$REQ" > "$sdk_req.tmp" && mv "$sdk_req.tmp" "$sdk_req"
  REQ="$sdk_req"
fi
key="$(cat "$REQ" "$REPO_ROOT/python/pyproject.toml" | sha256sum | head -c 12)"
VENV="$BEAM_KAFKA_CACHE/venv-$key"
# In two steps: what running a pipeline needs (apache-beam; `--runtime`
# stops there, for the demo), then the tests' tools in the same venv.
if [[ ! -f "$VENV/.complete" ]]; then
  if [[ ! -f "$VENV/.runtime-complete" ]]; then
    PY="${PYTHON:-python3}"
    command -v "$PY" >/dev/null || die "python3 is needed"
    log "creating the Python environment $VENV (apache-beam from PyPI; a few minutes the first time)"
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip >&2
    beam="$(grep -E '^apache-beam(\[[^]]*\])?==' "$REQ")" || die "$REQ names no apache-beam release"
    "$VENV/bin/pip" install -q "$beam" >&2
    touch "$VENV/.runtime-complete"
  fi
  if [[ "${1:-}" != "--runtime" ]]; then
    log "adding the tests' Python packages to $VENV"
    "$VENV/bin/pip" install -q -r "$REQ" >&2
    touch "$VENV/.complete"
  fi
fi
# The runner package comes from this checkout through a .pth file, so a change
# to python/ needs no reinstall and no build backend runs (the package's own
# build, scripts/wheel.sh, compiles the binary into a wheel).
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$REPO_ROOT/python" > "$site/beam_kafka_checkout.pth"
echo "$VENV/bin/python"
