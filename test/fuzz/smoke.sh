#!/usr/bin/env bash
# ctest `fuzz-smoke`: builds the fuzzers if needed, replays every saved
# regression input, then fuzzes each harness briefly from its seed corpus.
# Fails on any crash, sanitizer report, timeout or out-of-memory.
#
#   test/fuzz/smoke.sh BUILD_DIR OUT_DIR
#
# Each fuzzing run executes STRETTO_FUZZ_RUNS inputs (default 200000) from a
# fixed seed, so every machine fuzzes the same inputs and a failure
# reproduces (a time limit made slow and fast machines test different
# inputs); STRETTO_FUZZ_SECONDS (default 90) only caps a pathologically slow
# run. New inputs go to a temporary folder, never into the seed corpus.
#
# It reports how many inputs each harness ran. A run that the time cap cut
# short did not test what this check promises: unless something failed
# (exit 1), the script then exits 77, which ctest reports as skipped
# (SKIP_RETURN_CODE), never as passed.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD_DIR=$1
OUT_DIR=$2
SECONDS_EACH=${STRETTO_FUZZ_SECONDS:-90}
RUNS_EACH=${STRETTO_FUZZ_RUNS:-200000}

"$HERE/build.sh" "$BUILD_DIR" "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/stretto-fuzz-smoke.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# Fixed seed: the same inputs every run, so a failure here reproduces.
COMMON=(-max_len=4096 -timeout=10 -rss_limit_mb=2048 -seed=1
        -print_final_stats=1 -artifact_prefix="$WORK/")

status=0
short=()   # harnesses the time cap stopped before RUNS_EACH inputs
summary=() # "kind: ran N of M inputs"
for kind in config mlir plan; do
  fuzzer="$OUT_DIR/$kind-fuzzer"
  seeds="$HERE/corpus/$kind"
  regressions=()
  if [ -d "$HERE/regressions/$kind" ]; then
    while IFS= read -r -d '' f; do regressions+=("$f"); done \
      < <(find "$HERE/regressions/$kind" -type f -print0 | sort -z)
  fi

  # 1. Each saved finding must now run cleanly (one process each, so every
  #    failing input is named).
  if [ ${#regressions[@]} -gt 0 ]; then
    echo "[fuzz-smoke] $kind: replaying ${#regressions[@]} regression inputs"
    for r in "${regressions[@]}"; do
      if ! "$fuzzer" "${COMMON[@]}" "$r" > "$WORK/replay.log" 2>&1; then
        echo "[fuzz-smoke] FAIL: regression input ${r#$HERE/} crashes:" >&2
        grep -a -E "ERROR|Assertion|runtime error|fuzzer: |SUMMARY|^    #[0-9] " "$WORK/replay.log" \
          | head -20 >&2
        status=1
      fi
    done
  fi

  # 2. A short fuzzing run from the seeds.
  mkdir -p "$WORK/$kind-corpus"
  echo "[fuzz-smoke] $kind: fuzzing $RUNS_EACH inputs from $(ls "$seeds" | wc -l) seeds"
  if ! "$fuzzer" "${COMMON[@]}" -runs="$RUNS_EACH" -max_total_time="$SECONDS_EACH" \
       "$WORK/$kind-corpus" "$seeds" > "$WORK/$kind-fuzz.log" 2>&1; then
    echo "[fuzz-smoke] FAIL: $kind-fuzzer found a problem:" >&2
    tail -60 "$WORK/$kind-fuzz.log" >&2
    for a in "$WORK"/crash-* "$WORK"/timeout-* "$WORK"/oom-* "$WORK"/leak-*; do
      [ -e "$a" ] || continue
      mkdir -p "$OUT_DIR/smoke-artifacts"
      cp "$a" "$OUT_DIR/smoke-artifacts/$kind-$(basename "$a")"
      echo "[fuzz-smoke] input saved as $OUT_DIR/smoke-artifacts/$kind-$(basename "$a")" >&2
    done
    status=1
    summary+=("$kind: failed (above)")
  else
    grep -a -E "stat::number_of_executed_units|stat::peak_rss_mb" "$WORK/$kind-fuzz.log" \
      | sed "s/^/[fuzz-smoke] $kind: /"
    ran=$(grep -a -o -E "stat::number_of_executed_units: *[0-9]+" "$WORK/$kind-fuzz.log" \
          | grep -o -E "[0-9]+$" | tail -1 || true)
    ran=${ran:-0}
    summary+=("$kind: ran $ran of $RUNS_EACH inputs")
    if [ "$ran" -lt "$RUNS_EACH" ]; then
      echo "[fuzz-smoke] $kind: the ${SECONDS_EACH} s cap stopped fuzzing after $ran of" \
           "$RUNS_EACH inputs" >&2
      short+=("$kind")
    fi
  fi
done
for line in "${summary[@]}"; do
  echo "[fuzz-smoke] $line"
done
if [ $status != 0 ]; then
  exit $status
fi
if [ ${#short[@]} -gt 0 ]; then
  echo "[fuzz-smoke] SKIPPED: cut short by the time cap (${short[*]}); raise" \
       "STRETTO_FUZZ_SECONDS or run on a less loaded machine" >&2
  exit 77
fi
echo "[fuzz-smoke] OK: every harness ran $RUNS_EACH inputs"
exit 0
