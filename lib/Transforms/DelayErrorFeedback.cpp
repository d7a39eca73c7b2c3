//===- DelayErrorFeedback.cpp - train-delay-ef ---------------------------===//
//
// Update-level error feedback for a one-step gradient delay (spec of record,
// docs/design.md §4.2; seed: Zmushko et al., ICML 2026):
//   u(t) = Opt(g(x(t−1)));  x(t+1) = x(t) − γ·[u(t) + λ·(u(t) − u(t−1))],
// with u(−1) = u(0). Every `train.descend %p, %u, %lr` of the update phase
// gets one extra state @p.ef_u holding u(t−1). The correction is masked on
// the first step (step_count > 1), which is what u(−1) = u(0) means.
//
//===----------------------------------------------------------------------===//
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace stretto::train {
#define GEN_PASS_DEF_TRAINDELAYERRORFEEDBACK
#include "Train/TrainPasses.h.inc"
} // namespace stretto::train

using namespace mlir;
using namespace stretto::train;

namespace {
struct DelayErrorFeedbackPass
    : public stretto::train::impl::TrainDelayErrorFeedbackBase<DelayErrorFeedbackPass> {
  using TrainDelayErrorFeedbackBase::TrainDelayErrorFeedbackBase;
  void runOnOperation() override;
};
} // namespace

void DelayErrorFeedbackPass::runOnOperation() {
  ModelOp model = getOperation();
  UpdateOp update = model.getUpdate();
  if (!update) {
    model.emitError() << "train-delay-ef needs the train.update phase; run train-optimizer first";
    return signalPassFailure();
  }
  double lam = lambda >= 0 ? double(lambda) : model.getTrainerFloat("ef_lambda", 1.0);
  if (!(lam >= 0.0 && lam <= 1.0)) {
    model.emitError() << "train-delay-ef: lambda must be in [0, 1], got " << lam;
    return signalPassFailure();
  }
  SmallVector<DescendOp> descents = llvm::to_vector(update.getBody().getOps<DescendOp>());
  if (descents.empty()) {
    model.emitError() << "train-delay-ef found no train.descend to correct";
    return signalPassFailure();
  }
  SymbolTable symbols(model);
  OpBuilder decl(model.getStep());
  Block &body = update.getBody().front();
  OpBuilder b = OpBuilder::atBlockBegin(&body);
  // The first-step mask, shared by every parameter (unstaged scalar).
  Type elem = cast<RankedTensorType>(descents.front().getLr().getType()).getElementType();
  auto scalar = RankedTensorType::get({}, elem);
  Value t = b.create<StepCountOp>(update.getLoc(), scalar);
  Value one = b.create<ConstantOp>(update.getLoc(), scalar, 1.0);
  Value lamConst = b.create<ConstantOp>(update.getLoc(), scalar, lam);
  Value first = b.create<GtOp>(update.getLoc(), t, one); // separate statements:
  Value lamMasked = b.create<MulOp>(update.getLoc(), lamConst, first); // fixed op order

  for (DescendOp d : descents) {
    auto written = dyn_cast<WriteOp>(*d->getUsers().begin());
    if (!d->hasOneUse() || !written) {
      d.emitError() << "expected the descend result to be written to its parameter";
      return signalPassFailure();
    }
    StringRef param = written.getVar();
    Location loc = d.getLoc();
    int64_t stage = getStage(d);
    auto state = decl.create<StateOp>(loc, (param + ".ef_u").str(), d.getParam().getType(),
                                      InitKind::zeros, APFloat(0.0));
    state->setAttr("of", written.getVarAttr());
    symbols.insert(state, Block::iterator(state));
    setStage(state, stage);
    auto ref = FlatSymbolRefAttr::get(state.getSymNameAttr());

    OpBuilder pb(d);
    Operation *before = d->getPrevNode();
    Value u = d.getDirection();
    Value uPrev = pb.create<ReadOp>(loc, d.getParam().getType(), ref);
    // u + λ·(u − u_prev); λ is 0 on the first step.
    Value diff = pb.create<SubOp>(loc, u, uPrev);
    Value corrected = pb.create<AddOp>(loc, u, pb.create<MulOp>(loc, lamMasked, diff));
    pb.create<WriteOp>(loc, u, ref);
    d.getDirectionMutable().assign(corrected);
    if (before)
      tagStages(before, d, stage);
  }
  model->setAttr("ef_lambda", FloatAttr::get(Float64Type::get(&getContext()), lam));
}
