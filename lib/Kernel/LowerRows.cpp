//===- LowerRows.cpp - kernel-lower-rows ----------------------------------===//
//
// train.softmax / train.layer_norm / train.rms_norm -> kernel.rows (see
// KernelPasses.td).
//
//===----------------------------------------------------------------------===//
#include "stretto/Kernel/Passes.h"

#include "mlir/IR/Builders.h"

namespace stretto::kernel {
#define GEN_PASS_DEF_KERNELLOWERROWS
#include "Kernel/KernelPasses.h.inc"
} // namespace stretto::kernel

using namespace mlir;
using namespace stretto;

namespace {

struct LowerRowsPass : stretto::kernel::impl::KernelLowerRowsBase<LowerRowsPass> {
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (isa<train::SoftmaxOp, train::LayerNormOp, train::RmsNormOp>(op))
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      OpBuilder b(op);
      SmallVector<Value> params(op->getOperands().drop_front());
      StringRef fn = isa<train::SoftmaxOp>(op) ? "softmax"
                     : isa<train::LayerNormOp>(op) ? "layer_norm"
                                                   : "rms_norm";
      auto rows = b.create<kernel::RowsOp>(op->getLoc(), op->getResult(0).getType(),
                                           op->getOperand(0), params, b.getStringAttr(fn),
                                           /*causal=*/nullptr, /*eps=*/nullptr,
                                           /*store_bf16=*/nullptr);
      if (auto s = dyn_cast<train::SoftmaxOp>(op); s && s.getCausal())
        rows.setCausal(true);
      if (auto eps = op->getAttrOfType<FloatAttr>("eps"))
        rows.setEpsAttr(eps);
      if (Attribute stage = op->getAttr("stage"))
        rows->setAttr("stage", stage);
      op->getResult(0).replaceAllUsesWith(rows.getResult());
      op->erase();
    }
  }
};

} // namespace
