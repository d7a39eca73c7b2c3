#!/bin/bash
# The one script a session runs on a lent GPU machine (the device tool),
# from the repository root with gpu-bundle/ (bench/gpu/bundle.sh, carried):
#   1. speed    the speed bench, bench/gpu/speed.py: its speed-<gpu>.txt and
#               .json straight into $OUT (budget 300 s, timeout 330 s);
#   2. check    bench/gpu/device-check.sh: every plan against the reference
#               executor, the pipeline, gossip and data-parallel runs
#               (timeout 130 s: its last part, the timings, may be cut);
#   3. profile  stretto-run --profile of gpt-small in f32 and tf32 (speed.py
#               profiled bf16), in f32 with STRETTO_ATTENTION=simt (the
#               fused attention on CUDA cores against the default, on tensor
#               cores) and with STRETTO_ATTENTION=gemm (the GEMM path), and
#               gpt-mini in f32 (timeout 100 s in all).
# Each phase runs under `timeout`, so the whole stays under the device
# tool's 10 minutes a call; better, run `speed` and then, at once (the
# machine stays warm 30 s), `check profile` as two calls, so the speed
# results come back even if the machine stops answering later (it did
# once, 2026-12-05, and that call brought back nothing). The
# device tool brings back at most 8 files from $OUT, so $OUT gets:
#   speed-<gpu>.txt, speed-<gpu>.json   the speed bench's results
#   device-check.txt, device-check-summary.txt
#   profiles.txt                        phase 3
#   on-device.txt                       each phase's command, exit status and
#                                       seconds; nvidia-smi before and after
#   on-device-rest.tar.gz               everything else (logs, metrics files;
#                                       no checkpoints)
#
#   bash bench/gpu/on-device.sh                  # on the GPU machine (OUT set by the tool)
#   bash bench/gpu/on-device.sh speed            # some phases only, in this order
#   bash bench/gpu/on-device.sh --dry-run DIR    # here, without a GPU, on the bundle of
#                                                # `bundle.sh --smoke DIR`: every phase's
#                                                # logic on the CPU at the smoke size,
#                                                # then checks what $OUT holds
#
# Environment: OUT (default gpu-results; --dry-run: DIR/on-device-out),
# SPEED_TIMEOUT, CHECK_TIMEOUT, PROFILE_TIMEOUT (seconds: 330, 130, 100),
# SPEED_BUDGET (speed.py --budget-s, 300), PYTHON (python3).
# Exit status: 0 when every phase passed, 1 when one failed or timed out,
# 77 (skipped) without --dry-run where there is no NVIDIA GPU.
set -u
DRY=0
OUT=$(realpath -m "${OUT:-gpu-results}")
PY=${PYTHON:-python3}
if [ "${1:-}" = "--dry-run" ]; then
  DRY=1
  DIR=$(realpath -m "${2:?usage: on-device.sh --dry-run DIR (the folder of bundle.sh --smoke DIR)}")
  shift 2
  OUT=$DIR/on-device-out
fi
cd "$(dirname "$0")/../.."
B=gpu-bundle
[ $DRY -eq 1 ] && B=$DIR/gpu-bundle
PHASES=("$@")
[ ${#PHASES[@]} -gt 0 ] || PHASES=(speed check profile)
SPEED_TIMEOUT=${SPEED_TIMEOUT:-330}
CHECK_TIMEOUT=${CHECK_TIMEOUT:-130}
PROFILE_TIMEOUT=${PROFILE_TIMEOUT:-100}
SPEED_BUDGET=${SPEED_BUDGET:-300}

if [ $DRY -eq 0 ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "SKIPPED: no NVIDIA GPU here (nvidia-smi -L lists none); --dry-run DIR checks the script logic"
  exit 77
fi
[ -d "$B" ] || { echo "no $B: run bench/gpu/bundle.sh first (and carry gpu-bundle)"; exit 1; }
B=$(cd "$B" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
find "$OUT" -mindepth 1 -delete
if [ $DRY -eq 1 ]; then WORK=$(cd "$DIR" && pwd)/on-device-work; else WORK=${TMPDIR:-/tmp}/stretto-on-device; fi
rm -rf "$WORK" && mkdir -p "$WORK"
LOG=$OUT/on-device.txt
FAILED=0
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }
# A phase: its command under `timeout`, its output into WORK/NAME.log.
phase() { # name seconds command...
  local name=$1 secs=$2
  shift 2
  say "== $name: timeout $secs $*"
  local t0=$SECONDS
  timeout --kill-after=10 "$secs" "$@" > "$WORK/$name.log" 2>&1
  local rc=$?
  tail -n 5 "$WORK/$name.log" | sed 's/^/   | /' | tee -a "$LOG"
  case $rc in
    0) say "== $name: ok, $((SECONDS - t0)) s" ;;
    124|137) say "== $name: TIMED OUT after $((SECONDS - t0)) s (limit $secs s)"; FAILED=$((FAILED + 1)) ;;
    *) say "== $name: FAILED, exit status $rc, $((SECONDS - t0)) s"; FAILED=$((FAILED + 1)) ;;
  esac
}

CMD="bench/gpu/on-device.sh"
[ $DRY -eq 1 ] && CMD="$CMD --dry-run $DIR"
python3 bench/hostinfo.py --gpu --command "$CMD ${PHASES[*]}" >> "$LOG"
[ -f "$B/bundle-info.txt" ] && say "bundle: $(head -1 "$B/bundle-info.txt")"
smi() { nvidia-smi --query-gpu=name,temperature.gpu,clocks.sm,clocks.mem,power.draw,memory.used \
          --format=csv 2>&1 | sed "s/^/nvidia-smi $1: /" >> "$LOG"; }
[ $DRY -eq 0 ] && smi before

# stretto-run's libraries and the plans, unpacked into WORK (the bundle
# stays as it is: device-check.sh unpacks it in place).
mkdir -p "$WORK/lib" "$WORK/plans"
for f in "$B"/lib/*.gz; do [ -e "$f" ] && gunzip -c "$f" > "$WORK/lib/$(basename "$f" .gz)"; done
EXTRA=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | tr '\n' ':')
EXTRA=$EXTRA$($PY -c 'import nvidia, os; print(":".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null)
export STRETTO_CACHE_DIR=${STRETTO_CACHE_DIR:-/tmp/stretto-cache}
plan() { # name -> the unpacked plan's path
  local p=$B/plans/$1.plan
  [ -f "$p" ] && { echo "$p"; return; }
  [ -f "$WORK/plans/$1.plan" ] || gunzip -c "$p.gz" > "$WORK/plans/$1.plan"
  echo "$WORK/plans/$1.plan"
}
data() {
  [ -f "$B/data/kjv.txt" ] && { echo "$B/data/kjv.txt"; return; }
  [ -f "$WORK/kjv.txt" ] || gunzip -c "$B/data/kjv.txt.gz" > "$WORK/kjv.txt"
  echo "$WORK/kjv.txt"
}

for ph in "${PHASES[@]}"; do
  case $ph in
    speed)
      if [ $DRY -eq 1 ]; then
        phase speed "$SPEED_TIMEOUT" env STRETTO_SMOKE_DIR="$WORK" "$PY" bench/gpu/speed.py --smoke \
          --no-torch --bundle "$B" --out-dir "$OUT"
      else
        phase speed "$SPEED_TIMEOUT" env PYTHONUNBUFFERED=1 "$PY" bench/gpu/speed.py --bundle "$B" \
          --out-dir "$OUT" --budget-s "$SPEED_BUDGET"
      fi ;;
    check)
      if [ $DRY -eq 1 ]; then
        phase check "$CHECK_TIMEOUT" bench/gpu/device-check.sh --dry-run "$DIR"
        src=$DIR/gpu-results
      else
        phase check "$CHECK_TIMEOUT" env OUT="$WORK/device-check" bench/gpu/device-check.sh
        src=$WORK/device-check
      fi
      [ -f "$src/device-check.txt" ] && cp "$src/device-check.txt" "$OUT/device-check.txt"
      [ -f "$src/summary.txt" ] && cp "$src/summary.txt" "$OUT/device-check-summary.txt"
      [ $DRY -eq 1 ] && cp -r "$src" "$WORK/device-check" ;;
    profile)
      dev=cuda
      [ $DRY -eq 1 ] && dev=cpu
      SR=$B/bin/stretto-run
      precisions="f32 tf32"
      # (a stretto-run without --precision tf32, or the CPU, which refuses it)
      if ! LD_LIBRARY_PATH=$WORK/lib:$B/lib "$SR" --help | grep -q 'f32|tf32\|tf32|'; then precisions=f32
      elif [ $dev = cpu ]; then precisions=f32; fi
      {
        echo "#!/bin/bash"
        echo "export LD_LIBRARY_PATH='$WORK/lib:$B/lib:$EXTRA'"
        for p in $precisions; do
          echo "echo '\$ stretto-run gpt-small.plan --device=$dev --precision $p --steps 6 --profile --quiet'"
          echo "'$SR' '$(plan gpt-small)' --data '$(data)' --device=$dev --precision $p --steps 6 --profile --quiet || exit"
        done
        # The attention on CUDA cores and on the GEMM path (S materialised)
        # beside the tensor-core kernels the runs above use: measured.
        for a in simt gemm; do
          echo "echo '\$ STRETTO_ATTENTION=$a stretto-run gpt-small.plan --device=$dev --precision f32 --steps 6 --profile --quiet'"
          echo "STRETTO_ATTENTION=$a '$SR' '$(plan gpt-small)' --data '$(data)' --device=$dev --precision f32 --steps 6 --profile --quiet || exit"
        done
        echo "echo '\$ stretto-run gpt-mini.plan --device=$dev --precision f32 --steps 20 --profile --quiet'"
        echo "'$SR' '$(plan gpt-mini)' --data '$(data)' --device=$dev --precision f32 --steps 20 --profile --quiet"
      } > "$WORK/profile.sh"
      phase profile "$PROFILE_TIMEOUT" bash "$WORK/profile.sh"
      { python3 bench/hostinfo.py --gpu --command "bench/gpu/on-device.sh profile"; echo
        cat "$WORK/profile.log"; } > "$OUT/profiles.txt" ;;
    *) say "unknown phase '$ph' (speed, check, profile)"; FAILED=$((FAILED + 1)) ;;
  esac
done

[ $DRY -eq 0 ] && smi after
# Everything else, one file (the device tool brings back 8 at most).
tar czf "$OUT/on-device-rest.tar.gz" -C "$WORK" --exclude='*.bin' --exclude='*.safetensors' \
  --exclude='kernel-cache' --exclude='*.plan' --exclude='lib' --exclude='kjv.txt' . 2>>"$LOG"
say "on-device: ${#PHASES[@]} phase(s), $FAILED failed; \$OUT: $(ls "$OUT" | tr '\n' ' ')"

if [ $DRY -eq 1 ]; then
  # What the device tool brings back: 8 files, 16 MiB each, plain names.
  bad=0
  n=$(find "$OUT" -type f | wc -l)
  [ "$n" -le 8 ] || { say "FAILED: $n files in \$OUT, the device tool brings back 8"; bad=1; }
  while IFS= read -r f; do
    [ "$(stat -c %s "$f")" -le $((16 * 1024 * 1024)) ] || { say "FAILED: $f is over 16 MiB"; bad=1; }
    [[ $(basename "$f") =~ ^[A-Za-z0-9._-]+$ ]] || { say "FAILED: $f: a name the tool refuses"; bad=1; }
  done < <(find "$OUT" -type f)
  for want in speed-cpu-smoke.txt speed-cpu-smoke.json device-check.txt device-check-summary.txt \
              profiles.txt on-device.txt on-device-rest.tar.gz; do
    case " ${PHASES[*]} " in
      *" speed "*) ;; *) case $want in speed-*) continue ;; esac ;;
    esac
    case " ${PHASES[*]} " in
      *" check "*) ;; *) case $want in device-check*) continue ;; esac ;;
    esac
    case " ${PHASES[*]} " in
      *" profile "*) ;; *) case $want in profiles.txt) continue ;; esac ;;
    esac
    [ -s "$OUT/$want" ] || { say "FAILED: \$OUT lacks $want"; bad=1; }
  done
  grep -q 'time by op kind' "$OUT/profiles.txt" 2>/dev/null || case " ${PHASES[*]} " in
    *" profile "*) say "FAILED: profiles.txt holds no profile"; bad=1 ;; esac
  [ $bad -eq 0 ] && say "ok: \$OUT holds what the device tool brings back ($n files)"
  say "dry run: every phase's logic ran on the CPU at the smoke size; nothing about a GPU was measured"
  [ $FAILED -eq 0 ] && [ $bad -eq 0 ]
  exit
fi
[ $FAILED -eq 0 ]
