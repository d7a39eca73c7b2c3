#!/usr/bin/env bash
# Installs every Debian package the build and the tests need. Idempotent:
# does nothing when they are all present.
set -euo pipefail
PACKAGES=(
  cmake ninja-build g++ python3 pkg-config
  llvm-19-dev libmlir-19-dev mlir-19-tools llvm-19-tools   # MLIR 19, FileCheck, lit
  libtomlplusplus-dev libfmt-dev libopenblas-dev libgtest-dev
  clang-14 libclang-rt-14-dev                              # libFuzzer targets
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
