#!/bin/bash
# Packs what a GPU machine needs to check and time the CUDA runtime, into
# gpu-bundle/ (git-ignored): stretto-run (the runtime alone, no MLIR), the
# shared libraries it needs beyond glibc, trainer plans of the examples, and
# the corpus. Run here after `make build`; then, on a machine with a GPU
# (the device tool: carry gpu-bundle, run bench/gpu/device-check.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
B=gpu-bundle
rm -rf $B && mkdir -p $B/bin $B/lib $B/plans $B/data
cp $BUILD/bin/stretto-run $B/bin/
for lib in $(ldd $BUILD/bin/stretto-run | awk '/=>/ {print $3}'); do
  case $(basename "$lib") in
    libc.so*|libm.so*) ;; # the machine's own glibc
    *) cp -L "$lib" $B/lib/ ;;
  esac
done
cp data/kjv.txt $B/data/
export STRETTO_CACHE_DIR=${STRETTO_CACHE_DIR:-/tmp/stretto-bundle-cache}
plan() { # name config overrides...
  local name=$1 config=$2
  shift 2
  $BUILD/bin/stretto-train "$config" "$@" --save-plan $B/plans/$name.plan --quiet
}
plan mlp-sgd examples/mlp.toml
plan gpt-tiny examples/gpt-tiny.toml
plan gpt-tiny-muon examples/gpt-tiny.toml train.optimizer=muon
plan gpt-tiny-2bw-ef examples/gpt-tiny.toml train.sync=2bw train.ef_lambda=0.5 train.optimizer=sgd train.lr=0.1
plan gpt-tiny-micro2 examples/gpt-tiny.toml train.micro_batches=2
plan gpt-mini examples/gpt-mini.toml
plan pipe2-gpt-tiny-2bw examples/gpt-tiny.toml train.stages=2 train.micro_batches=4 \
  train.sync=2bw train.ef_lambda=0.5 train.grad_clip=0
plan gossip4-gpt-tiny examples/gpt-tiny.toml train.sync=gossip train.replicas=4 \
  train.local_steps=5 train.topology=ring
cp bench/gpu/device-check.sh $B/
# The device tool carries at most 64 MiB with the repository: compressed
# (device-check.sh unpacks them).
gzip -9 $B/plans/*.plan $B/lib/libopenblas.so.0 $B/data/kjv.txt
du -sh $B
# The bundle's size, under the host header, for the README.
R=bench/results/gpu/bundle.txt
mkdir -p "$(dirname $R)"
{
  python3 bench/hostinfo.py --command "bench/gpu/bundle.sh"
  echo
  echo "total (du -sb $B): $(du -sb $B | cut -f1) bytes; (du -sh) $(du -sh $B | cut -f1)"
  echo "files (bytes):"
  (cd $B && find . -type f -printf '%s %p\n' | sort -k2)
} > $R
echo "wrote $R"
