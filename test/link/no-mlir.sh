#!/bin/sh
# stretto-run is the runtime alone: it must link no MLIR or LLVM library,
# neither a shared one (ldd) nor static code (no mlir:: or llvm:: symbol).
# Usage: no-mlir.sh BINARY [expect-mlir]. With expect-mlir the binary must
# contain MLIR (stretto-train): that shows the check can fail.
bin=$1
want=${2:-none}
[ -x "$bin" ] || { echo "FAIL: $bin is not an executable"; exit 1; }
total=$(nm -C "$bin" 2>/dev/null | wc -l)
if [ "$total" -lt 100 ]; then
  echo "FAIL: $bin has no symbol table ($total symbols): the check would prove nothing"
  exit 1
fi
shared=$(ldd "$bin" | grep -Ei 'lib(MLIR|LLVM)' || true)
symbols=$(nm -C "$bin" | grep -cE ' (mlir|llvm)::' || true)
if [ "$want" = expect-mlir ]; then
  if [ -z "$shared" ] && [ "$symbols" = 0 ]; then
    echo "FAIL: $bin was expected to contain MLIR, and the check found none"
    exit 1
  fi
  echo "ok: $bin contains MLIR/LLVM (${symbols} symbols; shared: $(echo $shared | wc -w) words)"
  exit 0
fi
if [ -n "$shared" ]; then
  echo "FAIL: $bin links MLIR/LLVM shared libraries:"
  echo "$shared"
  exit 1
fi
if [ "$symbols" != 0 ]; then
  echo "FAIL: $bin contains $symbols mlir::/llvm:: symbols, e.g.:"
  nm -C "$bin" | grep -E ' (mlir|llvm)::' | head -5
  exit 1
fi
echo "ok: $bin links no MLIR or LLVM ($total symbols checked)"
