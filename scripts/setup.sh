#!/usr/bin/env bash
# Installs every Debian package the build and the tests need, and the
# test-only Python packages in a virtual environment under the build folder
# (Debian 12 has no `python3 -m pip` for the system Python, and PEP 668
# forbids installing into it). Idempotent: does nothing when all is there.
#   scripts/setup.sh [BUILD_DIR]     (default: build)
set -euo pipefail
BUILD_DIR="${1:-build}"
PACKAGES=(
  cmake ninja-build g++ python3 pkg-config
  python3-venv python3-numpy                               # the tests' Python environment
  llvm-19-dev libmlir-19-dev mlir-19-tools llvm-19-tools   # MLIR 19, FileCheck, lit
  libtomlplusplus-dev libfmt-dev libopenblas-dev libopenblas-openmp-dev libgtest-dev
  libgloo-dev openmpi-bin iproute2                         # multi-process runs and their tests
  clang-14 libclang-rt-14-dev                              # libFuzzer targets
  libdnnl2                                  # oneDNN: the compiled runtime's GEMMs (dlopen)
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

# Test-only Python packages (the safetensors export check): a virtual
# environment in $BUILD_DIR/pyenv that sees the system's numpy and gets
# safetensors from PyPI. lit runs its Python tests with this interpreter.
VENV="$BUILD_DIR/pyenv"
if ! "$VENV/bin/python3" -c "import safetensors, numpy" 2>/dev/null; then
  echo "setup: creating $VENV (safetensors, numpy) for the tests"
  rm -rf "$VENV"
  mkdir -p "$BUILD_DIR"
  if ! { python3 -m venv --system-site-packages "$VENV" &&
         "$VENV/bin/python3" -m pip install --quiet --disable-pip-version-check safetensors numpy; }; then
    echo "setup: could not set up $VENV with safetensors and numpy; the safetensors test will be" \
         "reported unsupported" >&2
    [ -z "${STRETTO_REQUIRE_PYTHON_TESTS:-}" ] || exit 1
  fi
fi

# Optional: JAX and optax for the AdamW parity check against optax
# (bench/parity/optax_adamw.py, test/lit/Train/parity-optax.test). Without
# them that test is reported unsupported, never passed. STRETTO_NO_JAX=1
# skips this step.
if [ -z "${STRETTO_NO_JAX:-}" ] && [ -x "$VENV/bin/python3" ] &&
   ! "$VENV/bin/python3" -c "import jax, optax" 2>/dev/null; then
  echo "setup: installing jax and optax into $VENV (the optax parity check)"
  "$VENV/bin/python3" -m pip install --quiet --disable-pip-version-check jax optax ||
    echo "setup: could not install jax and optax; the optax parity check will be reported" \
         "unsupported" >&2
fi
