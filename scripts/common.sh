# Shared settings for the project's scripts. Source it; do not run it.
# Everything fetched or built lands under $BEAM_KAFKA_CACHE, a cache that may be
# deleted at any time: the scripts fetch or build again what is missing.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export BEAM_KAFKA_CACHE="${BEAM_KAFKA_CACHE:-$HOME/.cache/beam-kafka}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$BEAM_KAFKA_CACHE/target}"
BEAM_VERSION="2.73.0"
KAFKA_VERSION="4.1.1"
KAFKA_SCALA="2.13"
log() { printf '[beam-kafka] %s\n' "$*" >&2; }
die() { printf '[beam-kafka] error: %s\n' "$*" >&2; exit 1; }
mkdir -p "$BEAM_KAFKA_CACHE"
