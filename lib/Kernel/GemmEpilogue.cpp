//===- GemmEpilogue.cpp - kernel-gemm-epilogue ----------------------------===//
//
// Moves a bias add that every reader of a GEMM makes first into the GEMM
// (`bias`: cuBLASLt's BIAS epilogue on the GPU), and drops the readers left
// doing nothing (see KernelPasses.td).
//
//===----------------------------------------------------------------------===//
#include "stretto/Kernel/Emitter.h"
#include "stretto/Kernel/Passes.h"

#include "mlir/IR/Dominance.h"

namespace stretto::kernel {
#define GEN_PASS_DEF_KERNELGEMMEPILOGUE
#include "Kernel/KernelPasses.h.inc"
} // namespace stretto::kernel

using namespace mlir;
using namespace stretto;

namespace {

/// One reader's bias add: `add` adds block argument `biasArg` (operand
/// `bias` of the kernel) to block argument `gemmArg`, the GEMM's result.
struct BiasAdd {
  kernel::ElementwiseOp kernel;
  unsigned gemmArg = 0, biasArg = 0;
  kernel::AddOp add;
  Value bias;
};

bool sameStage(Operation *a, Operation *b) { return a->getAttr("stage") == b->getAttr("stage"); }

/// The bias add `user` makes first to operand `operand` (the GEMM's result
/// of `type`), if it makes one.
std::optional<BiasAdd> biasAddOf(OpOperand &use, RankedTensorType type) {
  auto e = dyn_cast<kernel::ElementwiseOp>(use.getOwner());
  if (!e || e->getNumResults() != 1 || e.getResultType().getShape() != type.getShape() ||
      !sameStage(e, use.get().getDefiningOp()) ||
      e->getBlock() != use.get().getDefiningOp()->getBlock())
    return std::nullopt;
  if (llvm::count(e.getInputs(), use.get()) != 1)
    return std::nullopt;
  Block &body = e.getBodyBlock();
  BiasAdd b{e, use.getOperandNumber(), 0, nullptr, {}};
  // (a product rounded before its bias add keeps its rounding point: not
  // folded; train-mixed-precision does not round a bias-added product)
  Value product = body.getArgument(b.gemmArg);
  if (!product.hasOneUse())
    return std::nullopt;
  Operation *next = *product.getUsers().begin();
  b.add = dyn_cast<kernel::AddOp>(next);
  if (!b.add)
    return std::nullopt;
  auto arg = dyn_cast<BlockArgument>(b.add.getLhs() == product ? b.add.getRhs() : b.add.getLhs());
  if (!arg || arg.getOwner() != &body || arg.getArgNumber() == b.gemmArg)
    return std::nullopt;
  b.biasArg = arg.getArgNumber();
  b.bias = e.getInputs()[b.biasArg];
  auto bt = cast<RankedTensorType>(b.bias.getType());
  if (bt.getRank() != 1 || bt.getDimSize(0) != type.getShape().back() ||
      bt.getElementType() != type.getElementType() || kernel::storedInBf16(b.bias))
    return std::nullopt;
  return b;
}

/// Makes `bias` available at `gemm`: it is already, or it is read from
/// state (a train.read: no operands) after it with no write in between,
/// and the read moves up.
bool availableAt(Value bias, Operation *gemm, DominanceInfo &dom) {
  if (dom.properlyDominates(bias, gemm))
    return true;
  Operation *def = bias.getDefiningOp();
  if (!def || !isa<train::ReadOp>(def) || def->getBlock() != gemm->getBlock())
    return false;
  for (Operation *op = gemm->getNextNode(); op && op != def; op = op->getNextNode())
    if (isa<train::WriteOp>(op))
      return false;
  def->moveBefore(gemm);
  return true;
}

/// A kernel that now hands its one operand on unchanged: yields it, or
/// yields its rounding where the operand is rounded and stored in bf16
/// already and the kernel stores in bf16 too.
bool handsOn(kernel::ElementwiseOp e, kernel::GemmOp gemm) {
  if (e.getInputs().size() != 1)
    return false;
  Block &body = e.getBodyBlock();
  Value y = cast<kernel::YieldOp>(body.getTerminator()).getValues()[0];
  if (y == body.getArgument(0))
    return body.getOperations().size() == 1 && !e.getStoreBf16() && !gemm.getStoreBf16();
  auto r = y.getDefiningOp<kernel::RoundBf16Op>();
  return r && r.getOperand() == body.getArgument(0) && body.getOperations().size() == 2 &&
         e.getStoreBf16() && gemm.getStoreBf16();
}

struct GemmEpiloguePass : stretto::kernel::impl::KernelGemmEpilogueBase<GemmEpiloguePass> {
  void runOnOperation() override {
    DominanceInfo dom(getOperation());
    SmallVector<kernel::GemmOp> gemms;
    getOperation().walk([&](kernel::GemmOp g) { gemms.push_back(g); });
    for (kernel::GemmOp g : gemms)
      fold(g, dom);
  }

  void fold(kernel::GemmOp g, DominanceInfo &dom) {
    if (g.getBias() || g.getResult().use_empty())
      return;
    auto type = cast<RankedTensorType>(g.getType());
    SmallVector<BiasAdd> adds;
    for (OpOperand &use : g.getResult().getUses()) {
      std::optional<BiasAdd> b = biasAddOf(use, type);
      if (!b || (!adds.empty() && b->bias != adds.front().bias))
        return;
      adds.push_back(*b);
    }
    if (!availableAt(adds.front().bias, g, dom))
      return;
    g.getBiasMutable().assign(adds.front().bias);
    // Each reader reads the sum where it read the product.
    for (BiasAdd &b : adds) {
      Block &body = b.kernel.getBodyBlock();
      b.add.getResult().replaceAllUsesWith(body.getArgument(b.gemmArg));
      b.add.erase();
      if (body.getArgument(b.biasArg).use_empty()) {
        b.kernel.getInputsMutable().erase(b.biasArg);
        body.eraseArgument(b.biasArg);
      }
    }
    // A sum each reader rounds first is stored rounded (kernel-bf16-storage's
    // rule; in a bf16 plan a linear layer's output is its rounded sum).
    if (!g.getStoreBf16() && type.getElementType().isF32() &&
        kernel::roundedFirstByEveryReader(g.getResult()))
      g.setStoreBf16(true);
    for (BiasAdd &b : adds) {
      if (handsOn(b.kernel, g)) {
        b.kernel.getResult(0).replaceAllUsesWith(g.getResult());
        b.kernel.erase();
      }
    }
  }
};

} // namespace
