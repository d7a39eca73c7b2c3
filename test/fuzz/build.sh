#!/usr/bin/env bash
# Builds the libFuzzer harnesses of Stretto.
#
#   test/fuzz/build.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR is the CMake build folder (its dialects/ holds the generated
# Train/*.inc headers; run `ninja -C BUILD_DIR StrettoTrainIncGen` first if
# they are missing). OUT_DIR receives obj/*.o, config-fuzzer and mlir-fuzzer.
#
# The project sources the harnesses exercise are compiled with
# -fsanitize=fuzzer-no-link,address (coverage + ASan in our code) and
# WITHOUT -DNDEBUG, so LLVM/MLIR header assertions (cast<>, ArrayRef bounds)
# inside our code fire instead of being silent undefined behaviour. Objects
# are compiled once, shared by both harnesses, and rebuilt only when a
# source or a header they depend on changed. Compiles one file at a time.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
BUILD_DIR=$(cd "$1" && pwd)
mkdir -p "$2"
OUT_DIR=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

CXX=${STRETTO_FUZZ_CXX:-clang++-14}
LLVM_PREFIX=${STRETTO_LLVM_PREFIX:-/usr/lib/llvm-19}

if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "$0: error: $CXX not found (set STRETTO_FUZZ_CXX)" >&2
  exit 1
fi
if [ ! -f "$BUILD_DIR/dialects/Train/TrainOps.h.inc" ]; then
  echo "$0: error: $BUILD_DIR/dialects/Train/TrainOps.h.inc is missing;" \
       "run: ninja -C $BUILD_DIR StrettoTrainIncGen" >&2
  exit 1
fi

COMMON=(-std=c++17 -O1 -g -fno-omit-frame-pointer
        -I"$ROOT/include" -I"$BUILD_DIR/include" -I"$BUILD_DIR/dialects"
        -isystem "$LLVM_PREFIX/include")  # toml++ is header-only, in /usr/include (default path)
LIB_FLAGS=(-fsanitize=fuzzer-no-link,address)
LINK=(-L"$LLVM_PREFIX/lib" -lMLIR -lLLVM -Wl,-rpath,"$LLVM_PREFIX/lib")

mkdir -p "$OUT_DIR/obj"

# up_to_date OBJ: OBJ exists and is newer than every file in its .d list.
up_to_date() {
  local obj=$1 dep=${1%.o}.d f
  [ -f "$obj" ] && [ -f "$dep" ] || return 1
  # The .d file is "obj: a b \\\n c ..."; drop the target and line breaks.
  for f in $(sed -e '1s/^[^:]*://' -e 's/\\$//' "$dep"); do
    [ -e "$f" ] || return 1
    [ "$f" -nt "$obj" ] && return 1
  done
  # The flags are part of the recipe: rebuild when this script changes.
  [ "$HERE/build.sh" -nt "$obj" ] && return 1
  return 0
}

# compile SRC OBJ FLAGS...
compile() {
  local src=$1 obj=$2
  shift 2
  if up_to_date "$obj"; then
    return 0
  fi
  echo "[fuzz] compiling ${src#$ROOT/}"
  "$CXX" "${COMMON[@]}" "$@" -MMD -MF "${obj%.o}.d" -c "$src" -o "$obj.tmp"
  mv "$obj.tmp" "$obj"
}

LIB_SRCS=(dialects/Train/TrainDialect.cpp dialects/Train/TrainOps.cpp
          dialects/Train/TrainVJP.cpp lib/Frontend/Import.cpp)
for s in "${LIB_SRCS[@]}"; do
  compile "$ROOT/$s" "$OUT_DIR/obj/$(basename "${s%.cpp}").o" "${LIB_FLAGS[@]}"
done
DIALECT_OBJS=("$OUT_DIR/obj/TrainDialect.o" "$OUT_DIR/obj/TrainOps.o" "$OUT_DIR/obj/TrainVJP.o")

# link NAME OBJ...: relink when an input is newer than the binary.
link() {
  local name=$1 out="$OUT_DIR/$1" f stale=0
  shift
  [ -x "$out" ] || stale=1
  for f in "$@"; do
    [ "$f" -nt "$out" ] && stale=1
  done
  if [ $stale = 1 ]; then
    echo "[fuzz] linking $name"
    "$CXX" -fsanitize=fuzzer,address -g "$@" "${LINK[@]}" -o "$out.tmp"
    mv "$out.tmp" "$out"
  fi
}

compile "$HERE/ConfigFuzzer.cpp" "$OUT_DIR/obj/ConfigFuzzer.o" -fsanitize=fuzzer,address
compile "$HERE/MLIRFuzzer.cpp" "$OUT_DIR/obj/MLIRFuzzer.o" -fsanitize=fuzzer,address
link config-fuzzer "$OUT_DIR/obj/ConfigFuzzer.o" "$OUT_DIR/obj/Import.o" "${DIALECT_OBJS[@]}"
link mlir-fuzzer "$OUT_DIR/obj/MLIRFuzzer.o" "${DIALECT_OBJS[@]}"
echo "[fuzz] fuzzers in $OUT_DIR: config-fuzzer mlir-fuzzer"
