//===- TwoBufferWeights.cpp - train-2bw ----------------------------------===//
//
// PipeDream-2BW weight versioning (Narayanan et al., ICML 2021). For every
// parameter p with an update:
//   - declare @p.prev, a copy of p at initialisation (x(-1) = x(0));
//   - in the step, read @p.prev instead of @p (the micro-batches of step t
//     compute g(x(t-1)));
//   - in the update, before p is overwritten, store its current value x(t)
//     in @p.prev.
// Sequentially this is exactly x(t+1) = x(t) - γ·Opt(g(x(t-1))); a pipelined
// runtime overlaps steps because each micro-batch reads the version it needs.
//
//===----------------------------------------------------------------------===//
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace stretto::train {
#define GEN_PASS_DEF_TRAINTWOBUFFERWEIGHTS
#include "Train/TrainPasses.h.inc"
} // namespace stretto::train

using namespace mlir;
using namespace stretto::train;

namespace {
struct TwoBufferWeightsPass
    : public stretto::train::impl::TrainTwoBufferWeightsBase<TwoBufferWeightsPass> {
  void runOnOperation() override;
};
} // namespace

void TwoBufferWeightsPass::runOnOperation() {
  ModelOp model = getOperation();
  UpdateOp update = model.getUpdate();
  if (!update || !model.getStep()) {
    model.emitError() << "train-2bw needs the train.update phase; run train-optimizer first";
    return signalPassFailure();
  }
  SymbolTable symbols(model);
  OpBuilder decl(model.getStep());
  unsigned versioned = 0;
  for (ParamOp param : llvm::to_vector(model.getBody().getOps<ParamOp>())) {
    // The update's final write of this parameter.
    WriteOp finalWrite;
    for (WriteOp w : update.getBody().getOps<WriteOp>())
      if (w.getVar() == param.getSymName())
        finalWrite = w;
    if (!finalWrite)
      continue; // not trained: nothing is delayed
    if (symbols.lookup((param.getSymName() + ".prev").str()) &&
        param->hasAttr("versioned")) {
      param.emitError() << "already has two versions; run train-2bw once";
      return signalPassFailure();
    }
    auto prev = decl.create<StateOp>(param.getLoc(), (param.getSymName() + ".prev").str(),
                                     param.getType(), InitKind::zeros, APFloat(0.0));
    prev->setAttr("of", FlatSymbolRefAttr::get(param.getSymNameAttr()));
    prev->setAttr("copy_of", FlatSymbolRefAttr::get(param.getSymNameAttr()));
    symbols.insert(prev, Block::iterator(prev));
    setStage(prev, getStage(param));
    param->setAttr("versioned", UnitAttr::get(&getContext()));
    auto prevRef = FlatSymbolRefAttr::get(prev.getSymNameAttr());

    // Micro-batches read the previous version.
    for (ReadOp read : model.getStep().getBody().getOps<ReadOp>())
      if (read.getVar() == param.getSymName())
        read.setVarAttr(prevRef);

    // Rotate: @p.prev := x(t) just before @p := x(t+1).
    OpBuilder b(finalWrite);
    auto current = b.create<ReadOp>(finalWrite.getLoc(), param.getTensorType(),
                                    FlatSymbolRefAttr::get(param.getSymNameAttr()));
    auto keep = b.create<WriteOp>(finalWrite.getLoc(), current, prevRef);
    setStage(current, getStage(param));
    setStage(keep, getStage(param));
    ++versioned;
  }
  if (!versioned) {
    model.emitError() << "train-2bw found no parameter update to version";
    return signalPassFailure();
  }
}
