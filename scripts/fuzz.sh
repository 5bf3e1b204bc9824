#!/usr/bin/env bash
# Fuzzes the pure core's decoders with libFuzzer (cargo fuzz), each target
# for a set time, and says what each found.
#
#   scripts/fuzz.sh [seconds per target, default 600] [target ...]
#
# Targets (runtime/fuzz/fuzz_targets): pipeline (Prepare's checks, planning,
# lowering), coder (coder specs and encoded elements), row (expansion
# requests and rows), record (envelopes, packed records, store keys),
# changelog (state restored from changelog entries), state_request (State
# API requests against user state). A crash leaves its input under
# $BEAM_KAFKA_CACHE/fuzz/artifacts/<target>/; turn it into a regression test.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SECONDS_PER_TARGET="${1:-600}"
shift || true
TARGETS=("$@")
if [[ ${#TARGETS[@]} -eq 0 ]]; then TARGETS=(pipeline coder row record changelog state_request); fi
CARGO_FUZZ_VERSION="0.13.2"
TOOLS="$BEAM_KAFKA_CACHE/tools"
export PATH="$TOOLS/bin:$PATH"
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  log "installing cargo-fuzz $CARGO_FUZZ_VERSION into $TOOLS"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --root "$TOOLS" >&2
fi
# cargo fuzz passes nightly-only flags; a stable toolchain may take them
# when told it is building itself (no sanitizer is used: the code is safe
# Rust, and what we look for is panics, overflows, hangs and huge allocations).
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then toolchain=(+nightly); else export RUSTC_BOOTSTRAP=1; fi
# FUZZ_DIR holds corpora, crash inputs and logs; CI uses its own (and its
# own build), so a long run can go on beside it.
FUZZ_DIR="${FUZZ_DIR:-$BEAM_KAFKA_CACHE/fuzz}"
export CARGO_TARGET_DIR="$FUZZ_DIR/target"
mkdir -p "$FUZZ_DIR"
"$REPO_ROOT/scripts/setup.sh" >&2
PY="$("$REPO_ROOT/scripts/python-env.sh")"
"$PY" "$REPO_ROOT/runtime/fuzz/seeds.py" "$FUZZ_DIR/seeds"
cd "$REPO_ROOT/runtime"
log "building the fuzz targets"
cargo "${toolchain[@]}" fuzz build -s none -O --debug-assertions >&2
summary=()
failed=0
for t in "${TARGETS[@]}"; do
  corpus="$FUZZ_DIR/corpus/$t"; artifacts="$FUZZ_DIR/artifacts/$t/$(date +%Y%m%d-%H%M%S)"
  mkdir -p "$corpus" "$artifacts"
  if [[ -d "$FUZZ_DIR/seeds/$t" ]]; then cp -n "$FUZZ_DIR/seeds/$t"/* "$corpus/" 2>/dev/null || true; fi
  log "fuzzing $t for ${SECONDS_PER_TARGET}s"
  out="$FUZZ_DIR/$t.log"
  set +e
  cargo "${toolchain[@]}" fuzz run -s none -O --debug-assertions "$t" "$corpus" -- \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -max_len=65536 -artifact_prefix="$artifacts/" -print_final_stats=1 >"$out" 2>&1
  rc=$?
  set -e
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$out" | grep -oE '[0-9]+$' || echo "?")
  crashes=$(find "$artifacts" -type f | wc -l)
  if [[ $rc -ne 0 || $crashes -ne 0 ]]; then failed=1; fi
  summary+=("$t: rc=$rc, $execs executions, $crashes crash input(s) in $artifacts")
done
printf '%s\n' "${summary[@]}"
exit "$failed"
