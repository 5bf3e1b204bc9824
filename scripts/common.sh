# Shared settings for the project's scripts. Source it; do not run it.
# Everything fetched or built lands under $BEAM_KAFKA_CACHE, a cache that may be
# deleted at any time: the scripts fetch or build again what is missing.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export BEAM_KAFKA_CACHE="${BEAM_KAFKA_CACHE:-$HOME/.cache/beam-kafka}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$BEAM_KAFKA_CACHE/target}"
BEAM_VERSION="2.73.0"
# The Python SDK releases the runner supports: CI runs Beam's suite on both
# ends (runtime/src/sdk_version.rs refuses others at Prepare; keep in step).
BEAM_PYTHON_SDK_OLDEST="$BEAM_VERSION"
BEAM_PYTHON_SDK_NEWEST="2.77.0"
KAFKA_VERSION="4.1.1"
KAFKA_SCALA="2.13"
log() { printf '[beam-kafka] %s\n' "$*" >&2; }
die() { printf '[beam-kafka] error: %s\n' "$*" >&2; exit 1; }
mkdir -p "$BEAM_KAFKA_CACHE"

# Makes sure a broker answers at $1 (host:port): starts a local one on that
# port when none does and the host is local, and stops it when the calling
# script exits. Sets up the machine, the build (`--release` as $2 for an
# optimised one) and the venv first, and sets DEMO_PY to the venv's python
# and DEMO_BINARY to the runner's binary.
prepare_demo() {
  local servers="$1"
  "$REPO_ROOT/scripts/setup.sh" >&2
  DEMO_BINARY="$("$REPO_ROOT/scripts/build.sh" ${2:-})"
  DEMO_PY="$("$REPO_ROOT/scripts/python-env.sh")"
  if ! "$REPO_ROOT/scripts/kafka.sh" status "${servers##*:}" 2>/dev/null; then
    if [[ "${servers%%:*}" != "localhost" && "${servers%%:*}" != "127.0.0.1" ]]; then
      die "no Kafka broker answers at $servers"
    fi
    "$REPO_ROOT/scripts/kafka.sh" start "${servers##*:}"
    DEMO_STARTED_PORT="${servers##*:}"
    trap '"$REPO_ROOT/scripts/kafka.sh" stop "$DEMO_STARTED_PORT"' EXIT
  fi
}
