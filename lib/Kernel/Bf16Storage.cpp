//===- Bf16Storage.cpp - kernel-bf16-storage ------------------------------===//
//
// Marks the fused kernels whose values may live in two bytes: a single-result
// f32 `kernel.elementwise` that yields a `kernel.round_bf16` (its values are
// bf16 already: the mixed-precision pass's rounding points) and whose every
// reader can take bf16 as it is (see KernelPasses.td). The values do not
// change; where they are stored does.
//
//===----------------------------------------------------------------------===//
#include "stretto/Kernel/Passes.h"

namespace stretto::kernel {
#define GEN_PASS_DEF_KERNELBF16STORAGE
#include "Kernel/KernelPasses.h.inc"
} // namespace stretto::kernel

using namespace mlir;
using namespace stretto;

namespace {

/// Every user of `v` reads bf16 where it is: a GEMM (cuBLASLt's bf16
/// operands), a fused elementwise or reduce kernel (its loads widen), a
/// train.reduce_sum (the CUDA runtime's column sums widen), or a reshape or
/// transpose (bf16 moved as bf16) whose users do too.
bool readAsBf16(Value v) {
  if (v.use_empty())
    return false;
  for (Operation *user : v.getUsers()) {
    if (isa<kernel::GemmOp, kernel::ElementwiseOp, kernel::ReduceOp, train::ReduceSumOp>(user))
      continue;
    if (isa<train::ReshapeOp, train::TransposeOp>(user) && readAsBf16(user->getResult(0)))
      continue;
    return false;
  }
  return true;
}

struct Bf16StoragePass : stretto::kernel::impl::KernelBf16StorageBase<Bf16StoragePass> {
  void runOnOperation() override {
    getOperation().walk([&](kernel::ElementwiseOp op) {
      if (op.getNumResults() != 1 || !op.getResultType().getElementType().isF32())
        return;
      auto yield = cast<kernel::YieldOp>(op.getBodyBlock().getTerminator());
      if (!yield.getValues()[0].getDefiningOp<kernel::RoundBf16Op>())
        return;
      if (readAsBf16(op.getResult(0)))
        op.setStoreBf16(true);
    });
  }
};

} // namespace
