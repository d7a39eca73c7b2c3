//===- Bf16Storage.cpp - kernel-bf16-storage ------------------------------===//
//
// Marks the fused kernels whose values may live in two bytes: a single-result
// f32 `kernel.elementwise` that yields a `kernel.round_bf16` (its values are
// bf16 already: the mixed-precision pass's rounding points) and whose every
// reader can take bf16 as it is, and a `kernel.gemm` whose every reader
// rounds its result to bf16 before using it (see KernelPasses.td). The
// values do not change; where they are stored does.
//
//===----------------------------------------------------------------------===//
#include "stretto/Kernel/Emitter.h"
#include "stretto/Kernel/Passes.h"

namespace stretto::kernel {
#define GEN_PASS_DEF_KERNELBF16STORAGE
#include "Kernel/KernelPasses.h.inc"
} // namespace stretto::kernel

using namespace mlir;
using namespace stretto;

namespace {

/// Whether `slice` takes whole leading rows of its input (every dim before
/// its axis is 1): one contiguous range, which the runtimes make a view.
bool leadingRowSlice(train::SliceOp slice) {
  auto in = cast<RankedTensorType>(slice.getInput().getType());
  for (int64_t d = 0; d < slice.getAxis(); ++d)
    if (in.getDimSize(d) != 1)
      return false;
  return true;
}

/// Every user of `v` reads bf16 where it is: a GEMM (cuBLASLt's bf16
/// operands), a fused elementwise or reduce kernel (its loads widen), a
/// train.reduce_sum (the CUDA runtime's column sums widen), a norm's
/// kernel.rows as its input x or train.norm_grad as x or dy (the row functions
/// widen), an attention or its gradient as q, k, v or g (the fused
/// kernels' loads widen), or a reshape, transpose (bf16 moved as bf16) or
/// leading-row slice (a view) whose users do too.
bool readAsBf16(Value v) {
  if (v.use_empty())
    return false;
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    if (isa<kernel::GemmOp, kernel::ElementwiseOp, kernel::ReduceOp, train::ReduceSumOp>(user))
      continue;
    if (auto rows = dyn_cast<kernel::RowsOp>(user);
        rows && rows.getFn() != "softmax" && use.getOperandNumber() == 0)
      continue;
    if (isa<train::NormGradOp>(user) && use.getOperandNumber() != 1)
      continue; // (x and dy; the row functions widen them)
    if (isa<train::AttentionOp, train::AttentionGradOp, kernel::AttentionOp,
            kernel::AttentionGradOp>(user))
      continue; // (every operand is q, k, v or the output's gradient)
    if (isa<train::ReshapeOp, train::TransposeOp>(user) && readAsBf16(user->getResult(0)))
      continue;
    if (auto slice = dyn_cast<train::SliceOp>(user);
        slice && leadingRowSlice(slice) && readAsBf16(slice.getResult()))
      continue;
    return false;
  }
  return true;
}

struct Bf16StoragePass : stretto::kernel::impl::KernelBf16StorageBase<Bf16StoragePass> {
  void runOnOperation() override {
    // A GEMM result that each reader rounds first: cuBLASLt writes it in
    // bf16.
    getOperation().walk([&](kernel::GemmOp op) {
      if (cast<RankedTensorType>(op.getType()).getElementType().isF32() &&
          kernel::roundedFirstByEveryReader(op.getResult()))
        op.setStoreBf16(true);
    });
    getOperation().walk([&](kernel::ElementwiseOp op) {
      if (op.getNumResults() != 1 || !op.getResultType().getElementType().isF32())
        return;
      auto yield = cast<kernel::YieldOp>(op.getBodyBlock().getTerminator());
      if (!yield.getValues()[0].getDefiningOp<kernel::RoundBf16Op>())
        return;
      if (readAsBf16(op.getResult(0)))
        op.setStoreBf16(true);
    });
    // A kernel that only rounds a value stored rounded in two bytes already
    // (a store_bf16 GEMM's, a view of one) and is stored so itself copies
    // it: its readers read the value where it is.
    SmallVector<kernel::ElementwiseOp> copies;
    getOperation().walk([&](kernel::ElementwiseOp op) {
      if (!op.getStoreBf16() || op.getInputs().size() != 1 ||
          op.getInputs()[0].getType() != op.getResult(0).getType() ||
          !kernel::storedInBf16(op.getInputs()[0]))
        return;
      Block &body = op.getBodyBlock();
      auto round = cast<kernel::YieldOp>(body.getTerminator())
                       .getValues()[0]
                       .getDefiningOp<kernel::RoundBf16Op>();
      if (body.getOperations().size() != 2 || !round || round->getOperand(0) != body.getArgument(0))
        return;
      op.getResult(0).replaceAllUsesWith(op.getInputs()[0]);
      copies.push_back(op);
    });
    for (kernel::ElementwiseOp op : copies)
      op.erase();
    // An attention (or its gradient), or a norm's kernel.rows, whose one
    // reader is such a kernel that only rounds it: it rounds and stores its
    // result itself (the attention's kernel.store_bf16, the rows op's
    // store_bf16), and the kernel goes. Rounding where the kernel rounded
    // changes no value.
    SmallVector<kernel::ElementwiseOp> folded;
    getOperation().walk([&](kernel::ElementwiseOp op) {
      if (!op.getStoreBf16() || op.getInputs().size() != 1)
        return;
      Operation *from = op.getInputs()[0].getDefiningOp();
      auto rows = dyn_cast_or_null<kernel::RowsOp>(from);
      if (!from || !from->getResult(0).hasOneUse() ||
          !(isa<train::AttentionOp, train::AttentionGradOp>(from) ||
            (rows && rows.getFn() != "softmax" &&
             cast<RankedTensorType>(rows.getType()).getElementType().isF32())))
        return;
      Block &body = op.getBodyBlock();
      auto yield = cast<kernel::YieldOp>(body.getTerminator());
      auto round = yield.getValues()[0].getDefiningOp<kernel::RoundBf16Op>();
      if (body.getOperations().size() != 2 || !round ||
          round->getOperand(0) != body.getArgument(0))
        return;
      if (rows)
        rows.setStoreBf16(true);
      else
        from->setAttr(kernel::kStoreBf16Attr, UnitAttr::get(from->getContext()));
      op.getResult(0).replaceAllUsesWith(from->getResult(0));
      folded.push_back(op);
    });
    for (kernel::ElementwiseOp op : folded)
      op.erase();
  }
};

} // namespace

/// Every reader of `v` (through reshapes) is a fused kernel that rounds it
/// to bf16 before anything else: every use of its block argument is a
/// kernel.round_bf16. Storing v rounded then changes no value.
bool stretto::kernel::roundedFirstByEveryReader(Value v) {
  if (v.use_empty())
    return false;
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    if (auto r = dyn_cast<train::ReshapeOp>(user)) {
      if (!roundedFirstByEveryReader(r.getResult()))
        return false;
      continue;
    }
    Block *body = isa<kernel::ElementwiseOp>(user)
                      ? &cast<kernel::ElementwiseOp>(user).getBodyBlock()
                  : isa<kernel::ReduceOp>(user) ? &cast<kernel::ReduceOp>(user).getBodyBlock()
                                                : nullptr;
    if (!body)
      return false;
    for (Operation *argUser : body->getArgument(use.getOperandNumber()).getUsers())
      if (!isa<kernel::RoundBf16Op>(argUser))
        return false;
  }
  return true;
}
