#!/usr/bin/env bash
# Builds the beam-kafka wheel: the Python package (KafkaStreamsRunner) with the
# beam-kafka binary inside (maturin, "bin" bindings; a manylinux wheel), and
# prints its path.
#
#   scripts/wheel.sh [--release] [--out DIR] [--check BOOTSTRAP]
#
#   --release          an optimised binary, as published (the default is a
#                      debug build: the tests' build with OpenSSL linked in,
#                      feature vendored-openssl, compiled once per cache)
#   --out DIR          where the wheel goes (default $BEAM_KAFKA_CACHE/wheels)
#   --check BOOTSTRAP  then install the wheel into an empty virtualenv, as a
#                      user would with `pip install beam-kafka`, and run
#                      examples/hello_kafka.py there against that broker with
#                      no source checkout, cache or PATH to find another binary
#
# RocksDB is compiled into the binary, so the wheel runs anywhere manylinux
# allows (`maturin --auditwheel check`), unless ROCKSDB_LIB_DIR is set (as
# scripts/test.sh's CI tier sets it, see use_prebuilt_rocksdb in common.sh):
# then the binary links that prebuilt RocksDB and the wheel is for this
# machine only. --release always compiles RocksDB.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
profile=dev
out="$BEAM_KAFKA_CACHE/wheels"
check=""
while (($#)); do
  case "$1" in
    --release) profile=release ;;
    --out) out="$2"; shift ;;
    --check) check="$2"; shift ;;
    *) die "unknown argument $1 (see the header of scripts/wheel.sh)" ;;
  esac
  shift
done

MATURIN_VERSION="1.16.0"
tools="$BEAM_KAFKA_CACHE/venv-maturin-$MATURIN_VERSION"
if [[ ! -f "$tools/.complete" ]]; then
  log "installing maturin $MATURIN_VERSION into $tools"
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q "maturin==$MATURIN_VERSION" >&2
  touch "$tools/.complete"
fi

"$REPO_ROOT/scripts/setup.sh"
mkdir -p "$out"
rm -f "$out"/beam_kafka-*.whl
[[ "$profile" == release ]] && unset ROCKSDB_LIB_DIR
audit=check
if [[ -n "${ROCKSDB_LIB_DIR:-}" ]]; then
  audit=skip
  log "building the wheel ($profile profile) with the prebuilt RocksDB in $ROCKSDB_LIB_DIR: for this machine only"
else
  log "building the wheel ($profile profile)"
fi
# The binary links OpenSSL statically (rdkafka's ssl-vendored) and RocksDB,
# so it needs nothing beyond what manylinux allows; `check` fails the build
# otherwise, where `repair` would patchelf the binary inside the shared cargo target.
(cd "$REPO_ROOT/python" && "$tools/bin/maturin" build --locked \
  --profile "$profile" --auditwheel "$audit" --out "$out" >&2) || die "maturin could not build the wheel"
wheel="$(ls "$out"/beam_kafka-*.whl)"

if [[ -n "$check" ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  log "installing $(basename "$wheel") into an empty virtualenv"
  python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install -q --upgrade pip >&2
  "$tmp/venv/bin/pip" install -q "$wheel" >&2
  cp "$REPO_ROOT/examples/hello_kafka.py" "$tmp/hello_kafka.py"
  log "running hello_kafka.py from the installed wheel against $check"
  # No checkout beside the example, an empty cache, no cargo target and a
  # PATH without our bin/: only the wheel's own binary can be found.
  user_env=(env -u CARGO_TARGET_DIR -u BEAM_KAFKA_BINARY BEAM_KAFKA_CACHE="$tmp/empty-cache" PATH="/usr/bin:/bin")
  found="$(cd "$tmp" && "${user_env[@]}" "$tmp/venv/bin/python" -c 'from beam_kafka.runner import find_binary; print(find_binary())')"
  [[ "$found" == "$tmp/venv/bin/beam-kafka" ]] || die "the installed runner would run $found, not the wheel's own binary"
  (cd "$tmp" && "${user_env[@]}" "$tmp/venv/bin/python" hello_kafka.py --bootstrap_servers="$check" \
    >"$tmp/hello.log" 2>&1) || { cat "$tmp/hello.log" >&2; die "hello_kafka.py failed with the installed wheel"; }
  installed="$("$tmp/venv/bin/beam-kafka" --version)"
  package="$("$tmp/venv/bin/python" -c 'import beam_kafka; print(beam_kafka.__version__)')"
  [[ "$installed" == "beam-kafka $package" ]] || die "the wheel's binary says '$installed' but its package is $package"
  grep -E 'OK' "$tmp/hello.log" >&2 || true
  log "the wheel works: $installed, apache-beam $("$tmp/venv/bin/python" -c 'import apache_beam; print(apache_beam.__version__)')"
fi
echo "$wheel"
