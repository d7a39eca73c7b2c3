//===- LowerMatmul.cpp - kernel-lower-matmul ------------------------------===//
//
// train.matmul -> kernel.gemm, with last-two-dims transposes folded into the
// GEMM's transpose flags (see KernelPasses.td).
//
//===----------------------------------------------------------------------===//
#include "stretto/Kernel/Passes.h"

#include "mlir/IR/Builders.h"

namespace stretto::kernel {
#define GEN_PASS_DEF_KERNELLOWERMATMUL
#include "Kernel/KernelPasses.h.inc"
} // namespace stretto::kernel

using namespace mlir;
using namespace stretto;

namespace {

// The input of a train.transpose that swaps the last two dims only, or null.
Value swappedInput(Value v) {
  auto t = v.getDefiningOp<train::TransposeOp>();
  if (!t)
    return nullptr;
  ArrayRef<int64_t> perm = t.getPerm();
  int64_t n = perm.size();
  if (n < 2 || perm[n - 2] != n - 1 || perm[n - 1] != n - 2)
    return nullptr;
  for (int64_t i = 0; i < n - 2; ++i)
    if (perm[i] != i)
      return nullptr;
  return t.getInput();
}

struct LowerMatmulPass : stretto::kernel::impl::KernelLowerMatmulBase<LowerMatmulPass> {
  void runOnOperation() override {
    SmallVector<train::MatmulOp> matmuls;
    getOperation().walk([&](train::MatmulOp op) { matmuls.push_back(op); });
    for (train::MatmulOp mm : matmuls) {
      Value a = mm.getLhs(), b = mm.getRhs();
      Value a0 = swappedInput(a), b0 = swappedInput(b);
      OpBuilder builder(mm);
      auto gemm = builder.create<kernel::GemmOp>(
          mm.getLoc(), mm.getResult().getType(), a0 ? a0 : a, b0 ? b0 : b, Value(), Value(),
          a0 ? builder.getUnitAttr() : UnitAttr(), b0 ? builder.getUnitAttr() : UnitAttr(),
          builder.getF64FloatAttr(1.0), UnitAttr(), UnitAttr(), UnitAttr());
      if (Attribute stage = mm->getAttr("stage"))
        gemm->setAttr("stage", stage);
      mm.getResult().replaceAllUsesWith(gemm.getResult());
      mm.erase();
      for (Value v : {a, b})
        if (Operation *t = v.getDefiningOp<train::TransposeOp>())
          if (t->use_empty())
            t->erase();
    }
  }
};

} // namespace
