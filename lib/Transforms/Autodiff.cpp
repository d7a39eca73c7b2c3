//===- Autodiff.cpp - train-autodiff -------------------------------------===//
//
// Reverse-mode AD over the single block of `train.step`. Forward ops are kept;
// the backward ops are appended before `train.yield`, in reverse order of the
// forward ops, so each cotangent is complete (all fan-out summed) before the
// VJP that consumes it is built.
//
//===----------------------------------------------------------------------===//
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

namespace stretto::train {
#define GEN_PASS_DEF_TRAINAUTODIFF
#include "Train/TrainPasses.h.inc"
} // namespace stretto::train

using namespace mlir;
using namespace stretto::train;

namespace {
struct AutodiffPass : public stretto::train::impl::TrainAutodiffBase<AutodiffPass> {
  void runOnOperation() override;
};
} // namespace

void AutodiffPass::runOnOperation() {
  ModelOp model = getOperation();
  StepOp step = model.getStep();
  if (!step) {
    model.emitError() << "has no 'train.step' to differentiate";
    return signalPassFailure();
  }
  Block &body = step.getBody().front();
  auto yield = cast<YieldOp>(body.getTerminator());
  if (!step.getBody().getOps<GradOp>().empty()) {
    step.emitError() << "already has 'train.grad' ops; run train-autodiff once";
    return signalPassFailure();
  }
  Value loss = yield.getValues().front();
  if (cast<RankedTensorType>(loss.getType()).getRank() != 0) {
    yield.emitError() << "the loss must be a scalar, got " << loss.getType();
    return signalPassFailure();
  }

  // Values that depend on a parameter: only these get cotangents.
  DenseSet<Value> varying;
  SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator()) {
    forward.push_back(&op);
    if (auto read = dyn_cast<ReadOp>(op)) {
      if (isa_and_nonnull<ParamOp>(SymbolTable::lookupSymbolIn(model, read.getVarAttr())))
        varying.insert(read.getResult());
      continue;
    }
    if (llvm::any_of(op.getOperands(), [&](Value v) { return varying.contains(v); }))
      for (Value r : op.getResults())
        varying.insert(r);
  }
  if (!varying.contains(loss)) {
    yield.emitError() << "the loss does not depend on any parameter";
    return signalPassFailure();
  }

  OpBuilder b(yield);
  DenseMap<Value, Value> cotangent;
  // Cotangents live on the stage of their value (transfers bring them there).
  auto accumulate = [&](Value v, Value g) {
    auto [it, inserted] = cotangent.try_emplace(v, g);
    if (!inserted) {
      it->second = b.create<AddOp>(g.getLoc(), it->second, g);
      if (Operation *def = v.getDefiningOp())
        setStage(it->second.getDefiningOp(), getStage(def));
    }
  };
  cotangent[loss] = b.create<ConstantOp>(yield.getLoc(), loss.getType(), 1.0);

  // Per parameter, in first-read order, so the output order is stable.
  llvm::MapVector<StringRef, std::pair<FlatSymbolRefAttr, Value>> paramGrads;
  for (Operation *op : llvm::reverse(forward)) {
    if (op->getNumResults() != 1)
      continue;
    Value result = op->getResult(0);
    auto it = cotangent.find(result);
    if (it == cotangent.end())
      continue;
    Value g = it->second;
    if (auto read = dyn_cast<ReadOp>(op)) {
      auto &entry = paramGrads[read.getVar()];
      entry.first = read.getVarAttr();
      if (entry.second) {
        entry.second = b.create<AddOp>(read.getLoc(), entry.second, g);
        setStage(entry.second.getDefiningOp(), getStage(read));
      } else {
        entry.second = g;
      }
      continue;
    }
    auto diff = dyn_cast<DifferentiableOpInterface>(op);
    if (!diff) {
      op->emitError() << "'" << op->getName()
                      << "' is not differentiable, but the loss depends on a "
                         "parameter through it";
      return signalPassFailure();
    }
    SmallVector<Value> grads;
    Operation *before = yield->getPrevNode();
    diff.buildVJP(b, g, grads);
    tagStages(before, yield, getStage(op)); // VJP ops run on the op's stage
    assert(grads.size() == op->getNumOperands() && "a VJP must give one value per operand");
    for (auto [operand, grad] : llvm::zip(op->getOperands(), grads))
      if (grad && varying.contains(operand))
        accumulate(operand, grad);
  }

  // Gradients in the order the parameters are declared.
  for (ParamOp param : model.getBody().getOps<ParamOp>()) {
    auto it = paramGrads.find(param.getSymName());
    if (it == paramGrads.end()) {
      param.emitWarning() << "does not reach the loss; it gets no gradient";
      continue;
    }
    auto grad = b.create<GradOp>(param.getLoc(), it->second.second, it->second.first);
    setStage(grad, getStage(param));
  }

  // VJPs build the cotangents of every operand; drop the ones nobody needs
  // (e.g. the gradient of a constant exponent).
  IRRewriter rewriter(b);
  (void)mlir::runRegionDCE(rewriter, step.getBody());
}
