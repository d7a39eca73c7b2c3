//===- AttentionLayout.cpp - kernel-attention-layout ----------------------===//
//
// Replaces a train.attention whose q, k and v are the three parts of one
// fused QKV projection, split into heads by a transpose, and whose result
// is only transposed back, by a kernel.attention that reads the heads
// where the projection wrote them and writes its result where the output
// projection reads it; likewise its train.attention_grad (see
// KernelPasses.td). The head transposes go: two copies of q, k, v and one
// of the output and of its gradient, a step.
//
//===----------------------------------------------------------------------===//
#include "stretto/Kernel/Emitter.h"
#include "stretto/Kernel/Passes.h"

namespace stretto::kernel {
#define GEN_PASS_DEF_KERNELATTENTIONLAYOUT
#include "Kernel/KernelPasses.h.inc"
} // namespace stretto::kernel

using namespace mlir;
using namespace stretto;
using kernel::sameStage;

namespace {

bool isPerm(train::TransposeOp t, ArrayRef<int64_t> perm) { return t && t.getPerm() == perm; }

/// The transpose of x [B, T, 3, H, D] to [3, B, H, T, D] whose part `part`
/// (a leading slice, reshaped to [B, H, T, D]) `head` is, on `at`'s stage.
train::TransposeOp headSplit(Value head, int64_t part, Operation *at) {
  auto reshape = head.getDefiningOp<train::ReshapeOp>();
  if (!reshape || !sameStage(reshape, at))
    return {};
  auto slice = reshape.getInput().getDefiningOp<train::SliceOp>();
  if (!slice || slice.getAxis() != 0 || slice.getOffset() != part || !sameStage(slice, at) ||
      cast<RankedTensorType>(slice.getType()).getDimSize(0) != 1)
    return {};
  auto split = slice.getInput().getDefiningOp<train::TransposeOp>();
  if (!isPerm(split, {2, 0, 3, 1, 4}) || !sameStage(split, at) ||
      cast<RankedTensorType>(split.getInput().getType()).getDimSize(2) != 3)
    return {};
  return split;
}

/// The packed [B, T, 3, H, D] that q, k and v are parts 0, 1 and 2 of.
Value packedQkv(Value q, Value k, Value v, Operation *at) {
  train::TransposeOp split = headSplit(q, 0, at);
  if (!split || headSplit(k, 1, at) != split || headSplit(v, 2, at) != split)
    return {};
  return split.getInput();
}

/// Every user of `v` is a transpose by `perm` on `at`'s stage (and there is
/// one at least): the transposes.
SmallVector<train::TransposeOp> onlyTransposedBy(Value v, ArrayRef<int64_t> perm, Operation *at) {
  SmallVector<train::TransposeOp> out;
  for (Operation *user : v.getUsers()) {
    auto t = dyn_cast<train::TransposeOp>(user);
    if (!isPerm(t, perm) || !sameStage(t, at))
      return {};
    out.push_back(t);
  }
  return out;
}

/// `from`'s attributes for its kernel op: scale, causal, the stage, and
/// kernel.store_bf16 as store_bf16.
void carryAttributes(Operation *from, Operation *to) {
  for (NamedAttribute a : from->getAttrs()) {
    if (a.getName() == kernel::kStoreBf16Attr)
      to->setAttr("store_bf16", UnitAttr::get(from->getContext()));
    else
      to->setAttr(a.getName(), a.getValue());
  }
}

/// Erases `ops` (a chain's layout ops, users before producers) left unused.
void eraseUnused(SmallVectorImpl<Operation *> &ops) {
  for (Operation *op : ops)
    if (op->use_empty())
      op->erase();
}

struct AttentionLayoutPass : stretto::kernel::impl::KernelAttentionLayoutBase<AttentionLayoutPass> {
  void runOnOperation() override {
    SmallVector<Operation *> dead;
    // (the q, k, v chain ops, users first: reshape, slice, then transpose)
    auto noteChain = [&](ValueRange heads) {
      for (Value h : heads) {
        auto reshape = h.getDefiningOp<train::ReshapeOp>();
        dead.push_back(reshape);
        dead.push_back(reshape.getInput().getDefiningOp());
      }
      dead.push_back(heads[0]
                         .getDefiningOp<train::ReshapeOp>()
                         .getInput()
                         .getDefiningOp<train::SliceOp>()
                         .getInput()
                         .getDefiningOp());
    };
    // `old` (q, k, v its operands 0 to 2) by `packed`, which its merges'
    // readers read.
    auto replace = [&](Operation *old, Operation *packed, ArrayRef<train::TransposeOp> merges) {
      carryAttributes(old, packed);
      for (train::TransposeOp t : merges) {
        t.getResult().replaceAllUsesWith(packed->getResult(0));
        t.erase();
      }
      noteChain(old->getOperands().take_front(3));
      old->erase();
    };
    // (collected first: a rewrite erases ops after the one it visits)
    SmallVector<train::AttentionOp> forwards;
    SmallVector<train::AttentionGradOp> backwards;
    getOperation().walk([&](train::AttentionOp op) { forwards.push_back(op); });
    getOperation().walk([&](train::AttentionGradOp op) { backwards.push_back(op); });
    for (train::AttentionOp op : forwards) {
      Value qkv = packedQkv(op.getQ(), op.getK(), op.getV(), op);
      SmallVector<train::TransposeOp> merges = onlyTransposedBy(op.getResult(), {0, 2, 1, 3}, op);
      if (!qkv || merges.empty())
        continue;
      OpBuilder b(op);
      auto packed =
          b.create<kernel::AttentionOp>(op.getLoc(), merges[0].getType(), qkv, op.getScale(),
                                        op.getCausal(), false, op.getBf16());
      replace(op, packed, merges);
    }
    for (train::AttentionGradOp op : backwards) {
      Value qkv = packedQkv(op.getQ(), op.getK(), op.getV(), op);
      auto split = op.getGrad().getDefiningOp<train::TransposeOp>();
      SmallVector<train::TransposeOp> merges =
          onlyTransposedBy(op.getResult(), {1, 3, 0, 2, 4}, op);
      if (!qkv || !isPerm(split, {0, 2, 1, 3}) || !sameStage(split, op) || merges.empty() ||
          merges[0].getType() != qkv.getType())
        continue;
      OpBuilder b(op);
      auto packed =
          b.create<kernel::AttentionGradOp>(op.getLoc(), qkv.getType(), qkv, split.getInput(),
                                            op.getScale(), op.getCausal(), false, op.getBf16());
      dead.push_back(split);
      replace(op, packed, merges);
    }
    // Chains shared by an attention and its gradient are noted twice: erase
    // each op once, users before producers.
    SmallVector<Operation *> unique;
    for (Operation *op : dead)
      if (!llvm::is_contained(unique, op))
        unique.push_back(op);
    eraseUnused(unique);
  }
};

} // namespace
