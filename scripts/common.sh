# Shared settings for the project's scripts. Source it; do not run it.
# Everything fetched or built lands under $BEAM_KAFKA_CACHE, a cache that may be
# deleted at any time: the scripts fetch or build again what is missing.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export BEAM_KAFKA_CACHE="${BEAM_KAFKA_CACHE:-$HOME/.cache/beam-kafka}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$BEAM_KAFKA_CACHE/target}"
BEAM_VERSION="2.73.0"
# The Python SDK releases the runner supports: CI runs Beam's suite on the
# oldest and the wheel's check on the newest, `scripts/test.sh --full` the
# suite on both (runtime/src/plan/sdk_version.rs refuses others at Prepare;
# keep in step).
BEAM_PYTHON_SDK_OLDEST="$BEAM_VERSION"
BEAM_PYTHON_SDK_NEWEST="2.77.0"
KAFKA_VERSION="4.3.2"
KAFKA_SCALA="2.13"
log() { printf '[beam-kafka %s +%ds] %s\n' "$(date +%H:%M:%S)" "$SECONDS" "$*" >&2; }
die() { printf '[beam-kafka] error: %s\n' "$*" >&2; exit 1; }

# Holds an exclusive lock named $1 until the calling shell (or subshell)
# exits: scripts filling the same cache entry at once (the itests' two
# workers, say) take turns.
cache_lock() {
  mkdir -p "$BEAM_KAFKA_CACHE/locks"
  local fd
  exec {fd}>"$BEAM_KAFKA_CACHE/locks/$1.lock"
  flock "$fd"
}

# Copies the runtime jars of the Maven project POM into OUT (replacing what
# was there), logging to LOG; OUT/.complete marks a finished copy. One Maven
# at a time fills the local repository.
maven_copy_jars() {
  local pom="$1" out="$2" logfile="$3"
  rm -rf "$out"
  ( cache_lock maven-repository
  mvn -q -B -f "$pom" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DoutputDirectory="$out" -DincludeScope=runtime >"$logfile" 2>&1 ) || return 1
  touch "$out/.complete"
}
mkdir -p "$BEAM_KAFKA_CACHE"

# Makes sure a broker answers at $1 (host:port): a local one is started when
# none does, and its stop is added to the calling script's `cleanup` array
# (commands the script runs at exit).
ensure_broker() {
  local servers="$1"
  "$REPO_ROOT/scripts/kafka.sh" status "${servers##*:}" 2>/dev/null && return 0
  case "${servers%%:*}" in localhost|127.0.0.1) ;; *) die "no Kafka broker answers at $servers" ;; esac
  "$REPO_ROOT/scripts/kafka.sh" start "${servers##*:}"
  cleanup+=("\"$REPO_ROOT/scripts/kafka.sh\" stop ${servers##*:}")
}

# $1 free local ports, space separated.
free_ports() {
  python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])' "$1"
}

# RocksDB: the debug build links the library inside RocksDB's own Java
# artifact (org.rocksdb:rocksdbjni on Maven Central, pinned here: the same
# RocksDB release as Cargo.lock's librocksdb-sys, whose C API it exports)
# instead of compiling RocksDB's C++, most of a cold build. The binaries find
# it through their rpath (actors/build.rs). Release builds and wheels compile
# it from source, as does BEAM_KAFKA_ROCKSDB=source, another platform than
# x86-64 glibc Linux, or a Cargo.lock that moved to another RocksDB.
ROCKSDB_JNI_VERSION="11.8.1"
ROCKSDB_JNI_SHA256="628ed387887f4a431df480857954df2a28b4389bfe24858ccdec611cabf65dbf"
use_prebuilt_rocksdb() {
  [[ "${BEAM_KAFKA_ROCKSDB:-prebuilt}" == "source" ]] && return 0
  [[ "$(uname -s)-$(uname -m)" == "Linux-x86_64" ]] || return 0
  # (Output taken whole: `grep -q` on a pipe would end ldd early, failing the pipe.)
  local libc; libc="$(ldd --version 2>&1 || true)"
  [[ "${libc,,}" == *"glibc"* || "${libc,,}" == *"gnu libc"* ]] || return 0
  local locked
  locked="$(grep -A1 '^name = "librocksdb-sys"' "$REPO_ROOT/Cargo.lock" | sed -n 's/^version = ".*+\(.*\)"/\1/p')"
  if [[ "$locked" != "$ROCKSDB_JNI_VERSION" ]]; then
    log "Cargo.lock builds RocksDB $locked, the prebuilt one pinned in scripts/common.sh is $ROCKSDB_JNI_VERSION: compiling RocksDB from source"
    return 0
  fi
  local dir="$BEAM_KAFKA_CACHE/rocksdb-$ROCKSDB_JNI_VERSION"
  if [[ ! -f "$dir/librocksdb.so" ]]; then
    log "fetching RocksDB $ROCKSDB_JNI_VERSION (org.rocksdb:rocksdbjni) from Maven Central"
    local tmp; tmp="$(mktemp -d)"
    curl -fsSL -o "$tmp/rocksdbjni.jar" \
      "https://repo1.maven.org/maven2/org/rocksdb/rocksdbjni/$ROCKSDB_JNI_VERSION/rocksdbjni-$ROCKSDB_JNI_VERSION.jar" \
      || die "cannot fetch rocksdbjni $ROCKSDB_JNI_VERSION from Maven Central (BEAM_KAFKA_ROCKSDB=source compiles RocksDB instead)"
    echo "$ROCKSDB_JNI_SHA256  $tmp/rocksdbjni.jar" | sha256sum -c --quiet - \
      || die "rocksdbjni-$ROCKSDB_JNI_VERSION.jar does not have the pinned checksum"
    unzip -q -o "$tmp/rocksdbjni.jar" librocksdbjni-linux64.so -d "$tmp"
    mkdir -p "$dir"
    mv "$tmp/librocksdbjni-linux64.so" "$dir/librocksdb.so"
    rm -rf "$tmp"
  fi
  export ROCKSDB_LIB_DIR="$dir"
}

# Builds the binary (`--release` as $2 for an optimised one) while the venv
# ($1: python-env.sh's argument, "--runtime" or "") and Kafka's jars download,
# and sets BUILT_BINARY and BUILT_PY. Beam's protos come first: the build
# would fetch them with Maven too, and two Mavens must not fill one local
# repository at once.
build_while_fetching() {
  [[ "${2:-}" == "--release" ]] || use_prebuilt_rocksdb
  "$REPO_ROOT/scripts/beam-protos.sh" >/dev/null
  local venv_out; venv_out="$(mktemp)"
  "$REPO_ROOT/scripts/python-env.sh" ${1:+"$1"} >"$venv_out" &
  FETCH_VENV_PID=$!
  "$REPO_ROOT/scripts/kafka.sh" fetch >&2 &
  FETCH_KAFKA_PID=$!
  trap 'kill "$FETCH_VENV_PID" "$FETCH_KAFKA_PID" 2>/dev/null || true' EXIT
  BUILT_BINARY="$("$REPO_ROOT/scripts/build.sh" ${2:-})"
  wait "$FETCH_VENV_PID" || die "could not create the Python environment (see above)"
  wait "$FETCH_KAFKA_PID" || die "could not fetch Kafka's jars (see above)"
  trap - EXIT
  BUILT_PY="$(cat "$venv_out")"; rm -f "$venv_out"
}

# Makes sure a broker answers at $1 (host:port): starts a local one on that
# port when none does and the host is local, and stops it when the calling
# script exits. Sets up the machine, the build (`--release` as $2 for an
# optimised one) and the venv first, and sets DEMO_PY to the venv's python
# and DEMO_BINARY to the runner's binary. The venv holds only what running a
# pipeline needs, unless DEMO_VENV is set empty (then the tests' tools too).
prepare_demo() {
  local servers="$1"
  "$REPO_ROOT/scripts/setup.sh" >&2
  build_while_fetching "${DEMO_VENV-"--runtime"}" ${2:-}
  DEMO_BINARY="$BUILT_BINARY"; DEMO_PY="$BUILT_PY"
  if ! "$REPO_ROOT/scripts/kafka.sh" status "${servers##*:}" 2>/dev/null; then
    if [[ "${servers%%:*}" != "localhost" && "${servers%%:*}" != "127.0.0.1" ]]; then
      die "no Kafka broker answers at $servers"
    fi
    "$REPO_ROOT/scripts/kafka.sh" start "${servers##*:}"
    DEMO_STARTED_PORT="${servers##*:}"
    trap '"$REPO_ROOT/scripts/kafka.sh" stop "$DEMO_STARTED_PORT"' EXIT
  fi
}

# The Go toolchain the Go scripts use: the machine's when it is 1.21 or later
# (those fetch the version a go.mod asks for by themselves), else this one
# from the Go module proxy, into the cache. Prints the go command.
GO_TOOLCHAIN="1.26.1"
go_command() {
  if command -v go >/dev/null && go version | grep -qE 'go1\.(2[1-9]|[3-9][0-9])'; then
    echo go
    return
  fi
  local dir="$BEAM_KAFKA_CACHE/go-toolchain/go$GO_TOOLCHAIN"
  if [[ ! -x "$dir/bin/go" ]]; then
    local arch
    case "$(uname -m)" in x86_64) arch=amd64 ;; aarch64|arm64) arch=arm64 ;; *) die "no Go toolchain for $(uname -m)" ;; esac
    local mod="golang.org/toolchain@v0.0.1-go$GO_TOOLCHAIN.linux-$arch"
    log "fetching the Go toolchain $GO_TOOLCHAIN from the Go module proxy"
    local tmp; tmp="$(mktemp -d)"
    curl -fsSL -o "$tmp/go.zip" "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go$GO_TOOLCHAIN.linux-$arch.zip" \
      || die "cannot fetch the Go toolchain from proxy.golang.org"
    unzip -q "$tmp/go.zip" -d "$tmp"
    mkdir -p "$(dirname "$dir")"
    rm -rf "$dir" && mv "$tmp/$mod" "$dir" && rm -rf "$tmp"
    chmod +x "$dir/bin/"* "$dir/pkg/tool/"*/* 2>/dev/null || true
  fi
  echo "$dir/bin/go"
}
