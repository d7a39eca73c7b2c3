#!/usr/bin/env bash
# Installs every Debian package the build and the tests need. Idempotent:
# does nothing when they are all present.
set -euo pipefail
PACKAGES=(
  cmake ninja-build g++ python3 pkg-config
  llvm-19-dev libmlir-19-dev mlir-19-tools llvm-19-tools   # MLIR 19, FileCheck, lit
  libtomlplusplus-dev libfmt-dev libopenblas-dev libopenblas-openmp-dev libgtest-dev
  libgloo-dev openmpi-bin iproute2                         # multi-process runs and their tests
  clang-14 libclang-rt-14-dev                              # libFuzzer targets
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Test-only Python packages (the safetensors export check). Best effort: the
# test reports itself unsupported when they are missing.
if ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check safetensors numpy 2>/dev/null ||
    echo "setup: could not pip-install safetensors/numpy; the safetensors test will be skipped"
fi
