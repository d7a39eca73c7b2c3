#!/usr/bin/env bash
# Builds the libFuzzer harnesses of Stretto.
#
#   test/fuzz/build.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR is the CMake build folder (its dialects/ holds the generated
# Train/*.inc headers; run `ninja -C BUILD_DIR StrettoTrainIncGen` first if
# they are missing). OUT_DIR receives obj/*.o, config-fuzzer, mlir-fuzzer and
# plan-fuzzer.
#
# The project sources the harnesses exercise are compiled with
# -fsanitize=fuzzer-no-link,address,undefined (coverage, ASan and UBSan in
# our code) and WITHOUT -DNDEBUG, so LLVM/MLIR header assertions (cast<>,
# ArrayRef bounds) inside our code fire instead of being silent undefined
# behaviour. Objects are compiled once, shared by both harnesses, and rebuilt
# only when a source, a header they depend on, or the flags changed.
# Compiles one file at a time (fine on 2 shared cores).
#
# Environment: STRETTO_FUZZ_CXX (default clang++-14), STRETTO_FUZZ_UBSAN=0
# (ASan only), STRETTO_LLVM_PREFIX (default /usr/lib/llvm-19).
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
for inc in dialects/Train/TrainOps.h.inc dialects/Kernel/KernelOps.h.inc \
           dialects/Kernel/KernelPasses.h.inc include/stretto/Support/KernelMathText.h; do
  if [ ! -f "$BUILD_DIR/$inc" ]; then
    echo "$0: error: $BUILD_DIR/$inc is missing; build the project first" >&2
    exit 1
  fi
done

COMMON=(-std=c++17 -O1 -g -fno-omit-frame-pointer
        -I"$ROOT/include" -I"$BUILD_DIR/include" -I"$BUILD_DIR/dialects"
        -isystem "$LLVM_PREFIX/include")  # toml++ is header-only, in /usr/include (default path)
# UBSan (on unless STRETTO_FUZZ_UBSAN=0) turns signed overflow in shape and
# offset arithmetic into a crash the fuzzer records. `unreachable` is left
# out: toml++ 3.3 reaches one on some non-ASCII text (toml++ issue #190).
SAN=address
NO_SAN=()
if [ "${STRETTO_FUZZ_UBSAN:-1}" != 0 ]; then
  SAN=address,undefined
  # After every -fsanitize= (the last flag wins).
  NO_SAN=(-fno-sanitize=vptr,function,unreachable -fno-sanitize-recover=all)
fi
LIB_FLAGS=(-fsanitize=fuzzer-no-link,$SAN "${NO_SAN[@]}")
# toml++'s internal TOML_ASSERT/TOML_ASSERT_ASSUME checks are off, as in the
# project's g++ release build (there they compile to nothing): a few fire on
# malformed TOML inside toml++ 3.3 itself (regressions/config/toml-assert-*) and would
# stop the fuzzer before it reaches our code. ASan still checks toml++.
TOML_FLAGS=(-D'TOML_ASSERT(expr)=((void)0)')
LINK=(-L"$LLVM_PREFIX/lib" -lMLIR -lLLVM -Wl,-rpath,"$LLVM_PREFIX/lib")

mkdir -p "$OUT_DIR/obj"
# Objects built with other flags are stale.
FLAGS_ID="$CXX ${COMMON[*]} ${LIB_FLAGS[*]} ${TOML_FLAGS[*]}"
if [ "$(cat "$OUT_DIR/obj/flags" 2>/dev/null)" != "$FLAGS_ID" ]; then
  rm -f "$OUT_DIR"/obj/*.o "$OUT_DIR"/obj/*.d
  printf '%s\n' "$FLAGS_ID" > "$OUT_DIR/obj/flags"
fi

# up_to_date OBJ: OBJ exists and is newer than every file in its .d list.
up_to_date() {
  local obj=$1 dep=${1%.o}.d f
  [ -f "$obj" ] && [ -f "$dep" ] || return 1
  # The .d file is "obj: a b \\\n c ..."; drop the target and line breaks.
  for f in $(sed -e '1s/^[^:]*://' -e 's/\\$//' "$dep"); do
    [ -e "$f" ] || return 1
    [ "$f" -nt "$obj" ] && return 1
  done
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
          dialects/Train/TrainVJP.cpp lib/Frontend/Import.cpp
          dialects/Kernel/KernelOps.cpp lib/Kernel/Emitter.cpp lib/Kernel/FuseElementwise.cpp
          lib/Kernel/FuseReductions.cpp lib/Kernel/LowerRows.cpp lib/Kernel/LowerMatmul.cpp)
for s in "${LIB_SRCS[@]}"; do
  compile "$ROOT/$s" "$OUT_DIR/obj/$(basename "${s%.cpp}").o" "${LIB_FLAGS[@]}" "${TOML_FLAGS[@]}"
done
# The runtime's MLIR-free sources: the plan-file parser, and the op table
# (runtime/exec/Graph.cpp) that the fusion pass and the emitter ask as well.
for s in runtime/io/PlanFile.cpp runtime/exec/Graph.cpp runtime/io/Checkpoint.cpp; do
  compile "$ROOT/$s" "$OUT_DIR/obj/rt-$(basename "${s%.cpp}").o" "${LIB_FLAGS[@]}"
done
DIALECT_OBJS=("$OUT_DIR/obj/TrainDialect.o" "$OUT_DIR/obj/TrainOps.o" "$OUT_DIR/obj/TrainVJP.o")
KERNEL_OBJS=("$OUT_DIR/obj/KernelOps.o" "$OUT_DIR/obj/Emitter.o" "$OUT_DIR/obj/FuseElementwise.o"
             "$OUT_DIR/obj/FuseReductions.o" "$OUT_DIR/obj/LowerRows.o" "$OUT_DIR/obj/LowerMatmul.o"
             "$OUT_DIR/obj/rt-Graph.o")  # the op table the fusion pass and emitter ask

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
    "$CXX" -fsanitize=fuzzer,$SAN -g "$@" "${LINK[@]}" -o "$out.tmp"
    mv "$out.tmp" "$out"
  fi
}

compile "$HERE/ConfigFuzzer.cpp" "$OUT_DIR/obj/ConfigFuzzer.o" -fsanitize=fuzzer,$SAN "${NO_SAN[@]}"
compile "$HERE/MLIRFuzzer.cpp" "$OUT_DIR/obj/MLIRFuzzer.o" -fsanitize=fuzzer,$SAN "${NO_SAN[@]}"
link config-fuzzer "$OUT_DIR/obj/ConfigFuzzer.o" "$OUT_DIR/obj/Import.o" "${DIALECT_OBJS[@]}"
link mlir-fuzzer "$OUT_DIR/obj/MLIRFuzzer.o" "${DIALECT_OBJS[@]}" "${KERNEL_OBJS[@]}"
compile "$HERE/PlanFuzzer.cpp" "$OUT_DIR/obj/PlanFuzzer.o" -fsanitize=fuzzer,$SAN "${NO_SAN[@]}"
link plan-fuzzer "$OUT_DIR/obj/PlanFuzzer.o" "$OUT_DIR/obj/rt-PlanFile.o" "$OUT_DIR/obj/rt-Graph.o" \
  "$OUT_DIR/obj/rt-Checkpoint.o"
echo "[fuzz] fuzzers in $OUT_DIR: config-fuzzer mlir-fuzzer plan-fuzzer"
