#!/bin/bash
# Packs what a GPU machine needs to check and time the CUDA runtime, into
# gpu-bundle/ (git-ignored): stretto-run (the runtime alone, no MLIR), the
# shared libraries it needs beyond glibc, trainer plans of the examples
# (gpt-small's for the speed bench), the corpus, device-check.sh and
# compare_runs.py, the speed bench (src/: bench/gpu/speed.py and the files
# it imports, in the repository's layout, and the example configs) and
# bundle-info.txt (the commit it was bundled from: the GPU machine's copy of
# the tree may have no git history). Run here after `make build`; then, on
# a machine with a GPU (the device tool: carry gpu-bundle, run
# bench/gpu/on-device.sh, or device-check.sh / speed.py alone).
#
#   bench/gpu/bundle.sh                 # gpu-bundle/, and bench/results/gpu/bundle.txt
#   bench/gpu/bundle.sh --smoke DIR     # DIR/gpu-bundle with the plans at the smoke
#                                       # model's size, DIR/bundle.txt (never
#                                       # bench/results); then device-check.sh --dry-run DIR
#
# BUILD names the build folder (default build; STRETTO_BUILD too). Exit
# status non-zero when a step fails or (--smoke) the bundle lacks a file
# device-check.sh, speed.py or on-device.sh reads.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-${STRETTO_BUILD:-build}}
B=gpu-bundle
R=bench/results/gpu/bundle.txt
SMOKE=()
GZIP=-9
if [ "${1:-}" = "--smoke" ]; then
  DIR=${2:?usage: bundle.sh --smoke DIR}
  case "$(realpath -m "$DIR")/" in
    "$(realpath bench/results)"/*|"$(realpath docs)"/*)
      echo "bundle.sh --smoke: $DIR is inside bench/results or docs" >&2; exit 1 ;;
  esac
  mkdir -p "$DIR"
  B=$DIR/gpu-bundle
  R=$DIR/bundle.txt
  # The smoke model (bench/benchutil.py SMOKE_MODEL, whose kernels the
  # other smoke tests share); fast gzip: the same steps, seconds.
  SMOKE=(model.name=smoke model.layers=1 model.heads=2 model.d_model=16 model.seq_len=8
         model.batch=4 model.vocab=256)
  GZIP=-1
  export STRETTO_CACHE_DIR=${STRETTO_CACHE_DIR:-$DIR/kernel-cache}
fi
rm -rf "$B" && mkdir -p "$B/bin" "$B/lib" "$B/plans" "$B/data"
cp "$BUILD/bin/stretto-run" "$B/bin/"
for lib in $(ldd "$BUILD/bin/stretto-run" | awk '/=>/ {print $3}'); do
  case $(basename "$lib") in
    libc.so*|libm.so*) ;; # the machine's own glibc
    *) cp -L "$lib" "$B/lib/" ;;
  esac
done
cp data/kjv.txt "$B/data/"
export STRETTO_CACHE_DIR=${STRETTO_CACHE_DIR:-/tmp/stretto-bundle-cache}
plan() { # name config overrides...
  local name=$1 config=$2
  shift 2
  local size=()
  case $config in *gpt*) size=("${SMOKE[@]}") ;; esac
  # (the plan's own overrides last: a 2-stage plan keeps its 2 layers)
  "$BUILD/bin/stretto-train" "$config" ${size[@]+"${size[@]}"} "$@" \
    --save-plan "$B/plans/$name.plan" --quiet
}
plan mlp-sgd examples/mlp.toml
plan gpt-tiny examples/gpt-tiny.toml
plan gpt-tiny-muon examples/gpt-tiny.toml train.optimizer=muon
plan gpt-tiny-2bw-ef examples/gpt-tiny.toml train.sync=2bw train.ef_lambda=0.5 train.optimizer=sgd train.lr=0.1
plan gpt-tiny-micro2 examples/gpt-tiny.toml train.micro_batches=2
plan gpt-mini examples/gpt-mini.toml
plan pipe2-gpt-tiny-2bw examples/gpt-tiny.toml train.stages=2 train.micro_batches=4 \
  train.sync=2bw train.ef_lambda=0.5 train.grad_clip=0 model.layers=2
plan gossip4-gpt-tiny examples/gpt-tiny.toml train.sync=gossip train.replicas=4 \
  train.local_steps=5 train.topology=ring
# The speed bench's third model (bench/gpu/speed.py). One validation batch
# instead of 8: a run's last step validates, and the bench starts 9+ runs of
# it (the timed steps, the model and its step are the same).
plan gpt-small examples/gpt-small.toml train.eval_batches=1
# bf16 storage (train-mixed-precision): the speed bench's bf16 column, and
# device-check.sh's --check of bf16 storage on the GPU.
plan gpt-tiny-bf16 examples/gpt-tiny.toml train.precision=bf16
# Muon in a bf16 plan: its Newton-Schulz on bf16 GEMMs (train.newton_schulz's bf16).
plan gpt-tiny-muon-bf16 examples/gpt-tiny.toml train.optimizer=muon train.precision=bf16
plan gpt-mini-bf16 examples/gpt-mini.toml train.precision=bf16
plan gpt-small-bf16 examples/gpt-small.toml train.eval_batches=1 train.precision=bf16
cp bench/gpu/device-check.sh bench/gpu/compare_runs.py "$B/"
# The speed bench and what it imports, in the repository's layout (so that
# `python3 gpu-bundle/src/bench/gpu/speed.py --bundle gpu-bundle` runs
# where the repository is not).
mkdir -p "$B/src/bench/gpu" "$B/src/bench/parity" "$B/src/examples"
cp bench/gpu/speed.py bench/gpu/on-device.sh "$B/src/bench/gpu/"
cp bench/benchutil.py bench/hostinfo.py bench/kernel_bench.py "$B/src/bench/"
cp bench/parity/torch_gpt.py bench/parity/parity_common.py "$B/src/bench/parity/"
cp examples/gpt-tiny.toml examples/gpt-mini.toml examples/gpt-small.toml "$B/src/examples/"
{
  dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)
  echo "bundled by bench/gpu/bundle.sh${SMOKE[*]:+ --smoke} on $(date -u +%Y-%m-%dT%H:%M:%SZ) from commit" \
       "$(git rev-parse HEAD 2>/dev/null || echo unknown)$([ "$dirty" -gt 0 ] && echo " + uncommitted changes to $dirty tracked file(s)" || echo " (clean tree)");" \
       "stretto-run from $(realpath "$BUILD")/bin"
} > "$B/bundle-info.txt"
# The device tool carries at most 64 MiB with the repository: compressed
# (device-check.sh unpacks them).
gzip $GZIP "$B"/plans/*.plan "$B/lib/libopenblas.so.0" "$B/data/kjv.txt"
du -sh "$B"
# The bundle's size, under the host header, for the README.
mkdir -p "$(dirname "$R")"
{
  python3 bench/hostinfo.py --command "bench/gpu/bundle.sh${SMOKE[*]:+ --smoke}"
  echo
  echo "total (du -sb $B): $(du -sb "$B" | cut -f1) bytes; (du -sh) $(du -sh "$B" | cut -f1)"
  echo "files (bytes):"
  (cd "$B" && find . -type f -printf '%s %p\n' | sort -k2)
} > "$R"
echo "wrote $R"
if [ ${#SMOKE[@]} -gt 0 ]; then
  # What device-check.sh, speed.py and on-device.sh read, and the device tool's 64 MiB.
  missing=0
  for f in bin/stretto-run device-check.sh compare_runs.py data/kjv.txt.gz lib/libopenblas.so.0.gz \
           plans/{mlp-sgd,gpt-tiny,gpt-tiny-muon,gpt-tiny-2bw-ef,gpt-tiny-micro2,gpt-mini,gpt-small,pipe2-gpt-tiny-2bw,gossip4-gpt-tiny}.plan.gz \
           bundle-info.txt src/bench/gpu/{speed.py,on-device.sh} src/bench/{benchutil,hostinfo,kernel_bench}.py \
           src/bench/parity/{torch_gpt,parity_common}.py src/examples/gpt-{tiny,mini,small}.toml; do
    [ -s "$B/$f" ] || { echo "FAILED: the bundle lacks $f"; missing=1; }
  done
  bytes=$(du -sb "$B" | cut -f1)
  [ "$bytes" -lt $((64 * 1024 * 1024)) ] || { echo "FAILED: $bytes bytes, over 64 MiB"; missing=1; }
  LD_LIBRARY_PATH=$B/lib "$B/bin/stretto-run" --help >/dev/null ||
    { echo "FAILED: the bundled stretto-run does not start"; missing=1; }
  [ $missing -eq 0 ] && echo "ok: the bundle holds every file device-check.sh and speed.py read, $bytes bytes"
  exit $missing
fi
