#!/bin/bash
# On a machine with an NVIDIA GPU, from the repository root with
# gpu-bundle/ (bench/gpu/bundle.sh) next to it: checks the CUDA runtime
# against the reference executor on every bundled plan, in f32 and with
# bf16 GEMMs, then times gpt-tiny and gpt-mini on the GPU and on the CPU.
# Writes everything to ${OUT:-gpu-results}/device-check.txt. Prints figures;
# the checks' exit codes are reported, never hidden.
set -u
B=gpu-bundle
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
LOG=$OUT/device-check.txt
# bundle.sh compressed the plans, OpenBLAS and the corpus.
find $B -name '*.gz' -exec gunzip -f {} +
# NVRTC and cuBLASLt: the toolkit's, else PyTorch's wheels.
EXTRA=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | tr '\n' ':')
EXTRA=$EXTRA$(python3 -c 'import nvidia, os; print(":".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/$B/lib:$EXTRA:${LD_LIBRARY_PATH:-}
export STRETTO_CACHE_DIR=/tmp/stretto-cache
run() {
  echo "\$ $*" | tee -a "$LOG"
  timeout 300 "$@" 2>&1 | tee -a "$LOG"
  echo "exit status ${PIPESTATUS[0]}" | tee -a "$LOG"
}
: > "$LOG"
nvidia-smi -L 2>&1 | tee -a "$LOG"
for p in $B/plans/*.plan; do
  case $(basename "$p") in
    pipe*|gossip*) # no --check: the same 20 steps on the GPU and the CPU
      for dev in cuda cpu; do
        run $B/bin/stretto-run "$p" --data $B/data/kjv.txt --device=$dev --steps 20
      done ;;
    *)
      run $B/bin/stretto-run "$p" --data $B/data/kjv.txt --device=cuda --check 5
      run $B/bin/stretto-run "$p" --data $B/data/kjv.txt --device=cuda --precision=bf16 --check 5 ;;
  esac
done
for p in gpt-tiny gpt-mini; do
  for dev in cuda cpu; do
    run $B/bin/stretto-run $B/plans/$p.plan --data $B/data/kjv.txt --device=$dev --steps 100 --log-interval 50
  done
  run $B/bin/stretto-run $B/plans/$p.plan --data $B/data/kjv.txt --device=cuda --precision=bf16 --steps 100 --log-interval 50
  run $B/bin/stretto-run $B/plans/$p.plan --data $B/data/kjv.txt --device=cuda --steps 20 --profile --quiet
done
# NCCL: one rank (NCCL refuses two ranks on one GPU): init, send/recv to
# itself, all-reduce, abort.
run $B/bin/stretto-run --nccl-check
# Two processes on the one GPU: a 2-stage pipeline whose activations and
# cotangents are staged through the host over Gloo.
run $B/bin/stretto-run $B/plans/pipe2-gpt-tiny-2bw.plan --data $B/data/kjv.txt --device=cuda \
  --nproc 2 --timeout 120 --steps 20
# Data parallelism on one rank with NCCL: the gradients all-reduced on the
# GPU by a 1-rank NCCL communicator must give the plain GPU run's losses
# (a 1-rank sum is the identity); with STRETTO_NCCL=0 they go through Gloo.
run $B/bin/stretto-run $B/plans/gpt-tiny.plan --data $B/data/kjv.txt --device=cuda --steps 20 \
  --out /tmp/dp-plain --quiet
run $B/bin/stretto-run $B/plans/gpt-tiny.plan --data $B/data/kjv.txt --device=cuda --steps 20 \
  --nproc 1 --timeout 120 --out /tmp/dp-nccl
if cmp -s <(cut -d, -f1-3 /tmp/dp-plain/metrics.csv) <(cut -d, -f1-3 /tmp/dp-nccl/metrics.csv); then
  echo "check: 1-rank NCCL data parallelism: the plain run's losses" | tee -a "$LOG"
else
  echo "check: 1-rank NCCL data parallelism: LOSSES DIFFER" | tee -a "$LOG"
  diff <(cut -d, -f1-3 /tmp/dp-plain/metrics.csv) <(cut -d, -f1-3 /tmp/dp-nccl/metrics.csv) | head -5 | tee -a "$LOG"
fi
grep -E "^check:|^done:|done:|^nccl-check|NCCL|exit status [^0]" "$LOG" > "$OUT/summary.txt"
cat "$OUT/summary.txt"
