//===- Optimizer.cpp - train-optimizer -----------------------------------===//
//
// Adds the `train.update` phase: for every `train.grad` of the step, the
// optimizer update of its parameter from the micro-batch mean gradient. The
// order of the emitted IR is: learning-rate schedule, global-norm clipping
// (needs every gradient), then one update per parameter, each ending in
// `train.descend`. State is
// declared as `train.state @<param>.<slot>` so that it is visible, saved in
// checkpoints and versioned by later passes like any parameter.
//
//===----------------------------------------------------------------------===//
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#include <cmath>

namespace stretto::train {
#define GEN_PASS_DEF_TRAINOPTIMIZER
#include "Train/TrainPasses.h.inc"
} // namespace stretto::train

using namespace mlir;
using namespace stretto::train;

namespace {

enum class Method { SGD, AdamW, Muon };

/// Hyper-parameters, read from the model's trainer dictionary. Defaults follow
/// common GPT practice (nanoGPT, modded-nanogpt); docs/design.md §4.3 lists
/// them.
struct Recipe {
  Method method = Method::AdamW;
  double lr, muonLr, weightDecay, beta1, beta2, eps, momentum, muonMomentum;
  double gradClip, minLrRatio;
  int64_t warmup, total;
  std::string schedule;
  bool muonRmsScale;

  explicit Recipe(ModelOp m) {
    lr = m.getTrainerFloat("lr", 1e-3);
    muonLr = m.getTrainerFloat("muon_lr", 0.02);
    weightDecay = m.getTrainerFloat("weight_decay", 0.0);
    beta1 = m.getTrainerFloat("beta1", 0.9);
    beta2 = m.getTrainerFloat("beta2", 0.95);
    eps = m.getTrainerFloat("eps", 1e-8);
    momentum = m.getTrainerFloat("momentum", 0.9);
    muonMomentum = m.getTrainerFloat("muon_momentum", 0.95);
    gradClip = m.getTrainerFloat("grad_clip", 0.0);
    minLrRatio = m.getTrainerFloat("min_lr_ratio", 0.1);
    warmup = m.getTrainerInt("warmup_steps", 0);
    total = m.getTrainerInt("total_steps", 1);
    schedule = m.getTrainerString("schedule", "constant").str();
    muonRmsScale = m.getTrainerString("muon_scale", "shape") == "rms";
  }
};

/// Builder vocabulary for update formulas on tensors of one element type.
struct Math {
  OpBuilder &b;
  Location loc;
  Type elem;

  Value c(double x) { return b.create<ConstantOp>(loc, RankedTensorType::get({}, elem), x); }
  Value add(Value x, Value y) { return b.create<AddOp>(loc, x, y); }
  Value sub(Value x, Value y) { return b.create<SubOp>(loc, x, y); }
  Value mul(Value x, Value y) { return b.create<MulOp>(loc, x, y); }
  Value div(Value x, Value y) { return b.create<DivOp>(loc, x, y); }
  Value min(Value x, Value y) { return b.create<MinOp>(loc, x, y); }
  Value max(Value x, Value y) { return b.create<MaxOp>(loc, x, y); }
  Value sqrt(Value x) { return b.create<SqrtOp>(loc, x); }
  Value sumAll(Value x) {
    int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
    if (rank == 0)
      return x;
    return b.create<ReduceSumOp>(loc, x, llvm::to_vector(llvm::seq<int64_t>(0, rank)));
  }
  /// beta * s + (1 - beta) * g: exponential moving average.
  Value ema(Value s, Value g, double beta) {
    return add(mul(c(beta), s), mul(c(1.0 - beta), g));
  }
};

struct OptimizerPass : public stretto::train::impl::TrainOptimizerBase<OptimizerPass> {
  using TrainOptimizerBase::TrainOptimizerBase;
  void runOnOperation() override;

  ModelOp model;
  OpBuilder *declBuilder = nullptr; // inserts train.state before train.step
  SymbolTable *symbols = nullptr;

  /// Declares `@<param>.<slot>` (zeros) and returns its current value.
  std::pair<FlatSymbolRefAttr, Value> slot(OpBuilder &b, ParamOp param, StringRef name) {
    std::string sym = (param.getSymName() + "." + name).str();
    auto state = declBuilder->create<StateOp>(param.getLoc(), sym, param.getType(),
                                              InitKind::zeros, APFloat(0.0));
    state->setAttr("of", FlatSymbolRefAttr::get(param.getSymNameAttr()));
    // A user symbol may already have this name: insert() renames ours.
    symbols->insert(state, Block::iterator(state));
    setStage(state, getStage(param));
    auto ref = FlatSymbolRefAttr::get(state.getSymNameAttr());
    return {ref, b.create<ReadOp>(param.getLoc(), param.getTensorType(), ref)};
  }

  /// The recipe from the pass options and the trainer dictionary, checked;
  /// `elem` the gradients' one element type. Emits the error and fails.
  LogicalResult readRecipe(Recipe &r, ArrayRef<GradOp> grads, Type &elem);
  /// The learning-rate multiplier at step `t`: linear warm-up, then the
  /// constant, cosine or linear decay.
  Value lrMultiplier(Math &m, const Recipe &r, Value t);
  /// min(1, clip / (‖g‖ + 1e-6)) over every mean gradient (per stage, then
  /// train.stage_sum, on a partitioned model).
  Value clipScale(Math &m, OpBuilder &b, const Recipe &r, ArrayRef<GradOp> grads,
                  ArrayRef<Value> meanGrads);
  /// The update direction of a parameter and the learning rate it takes.
  struct Step {
    Value direction, lr;
  };
  Step muonStep(OpBuilder &b, Math &pm, const Recipe &r, ParamOp param, Value g, Value lr);
  Step sgdStep(OpBuilder &b, Math &pm, const Recipe &r, ParamOp param, Value g, Value lr);
  Step adamStep(OpBuilder &b, Math &pm, const Recipe &r, ParamOp param, Value g, Value lr,
                Value bc1, Value bc2);

  static bool usesMuon(ParamOp p) {
    if (p.getTensorType().getRank() != 2)
      return false;
    auto role = p->getAttrOfType<StringAttr>("role");
    return !role || role.getValue() == "matrix";
  }
};

} // namespace

void OptimizerPass::runOnOperation() {
  model = getOperation();
  StepOp step = model.getStep();
  if (!step)
    return;
  SmallVector<GradOp> grads = llvm::to_vector(step.getBody().getOps<GradOp>());
  if (grads.empty()) {
    model.emitError() << "has no 'train.grad' ops; run train-autodiff first";
    return signalPassFailure();
  }
  if (model.getUpdate()) {
    model.getUpdate().emitError() << "already exists; run train-optimizer once";
    return signalPassFailure();
  }
  Recipe r(model);
  Type elem;
  if (failed(readRecipe(r, grads, elem)))
    return signalPassFailure();

  SymbolTable table(model);
  symbols = &table;
  OpBuilder decl(step);
  declBuilder = &decl;
  // The update phase, after the step: it sees the micro-batch mean of each
  // train.grad through train.accumulated_grad.
  Location loc = step.getLoc();
  OpBuilder mb = OpBuilder::atBlockEnd(&model.getBody().front());
  auto update = mb.create<UpdateOp>(loc);
  OpBuilder b = OpBuilder::atBlockEnd(&update.getBody().emplaceBlock());
  auto yield = b.create<YieldOp>(loc);
  b.setInsertionPoint(yield);
  Math m{b, loc, elem};

  Value t = b.create<StepCountOp>(loc, RankedTensorType::get({}, elem));
  Value mult = lrMultiplier(m, r, t);
  SmallVector<Value> meanGrads;
  for (GradOp g : grads)
    meanGrads.push_back(b.create<AccumulatedGradOp>(g.getLoc(), g.getValue().getType(),
                                                    g.getVarAttr()));
  Value clip = r.gradClip > 0 ? clipScale(m, b, r, grads, meanGrads) : Value();
  Value adamLr = m.mul(m.c(r.lr), mult);
  Value muonLr = m.mul(m.c(r.muonLr), mult);
  // Adam's bias corrections 1 - beta^t, shared by all params; shared
  // scalars come before the per-parameter updates, unstaged, so every
  // stage computes its own copy.
  Value bc1, bc2;
  if (r.method != Method::SGD) {
    bc1 = m.sub(m.c(1.0), b.create<PowOp>(loc, m.c(r.beta1), t));
    bc2 = m.sub(m.c(1.0), b.create<PowOp>(loc, m.c(r.beta2), t));
  }
  for (auto [gradOp, meanGrad] : llvm::zip(grads, meanGrads)) {
    auto param = cast<ParamOp>(SymbolTable::lookupSymbolIn(model, gradOp.getVarAttr()));
    setStage(meanGrad.getDefiningOp(), getStage(param));
    Operation *before = yield->getPrevNode();
    Location ploc = gradOp.getLoc();
    Math pm{b, ploc, elem};
    Value g = clip ? pm.mul(meanGrad, clip) : meanGrad;
    auto pref = gradOp.getVarAttr();
    Value p = b.create<ReadOp>(ploc, param.getTensorType(), pref);
    Step st = r.method == Method::Muon && usesMuon(param) ? muonStep(b, pm, r, param, g, muonLr)
              : r.method == Method::SGD                   ? sgdStep(b, pm, r, param, g, adamLr)
                                        : adamStep(b, pm, r, param, g, adamLr, bc1, bc2);
    // Decoupled weight decay: p ← p − lr·(direction + wd·p).
    if (param.getTensorType().getRank() >= 2 && r.weightDecay > 0)
      st.direction = pm.add(st.direction, pm.mul(pm.c(r.weightDecay), p));
    b.create<WriteOp>(ploc, b.create<DescendOp>(ploc, p, st.direction, st.lr), pref);
    tagStages(before, yield, getStage(param)); // the update runs on the param's stage
  }
}

LogicalResult OptimizerPass::readRecipe(Recipe &r, ArrayRef<GradOp> grads, Type &elem) {
  StringRef method =
      optimizer.empty() ? model.getTrainerString("optimizer", "adamw") : StringRef(optimizer);
  if (method == "sgd")
    r.method = Method::SGD;
  else if (method == "adamw")
    r.method = Method::AdamW;
  else if (method == "muon")
    r.method = Method::Muon;
  else
    return model.emitError() << "unknown optimizer '" << method << "'; expected sgd, adamw or muon";
  if (!muonScale.empty()) {
    if (muonScale != "shape" && muonScale != "rms")
      return model.emitError() << "unknown muon-scale '" << muonScale << "'; expected shape or rms";
    r.muonRmsScale = muonScale == "rms";
  }
  if (r.schedule != "constant" && r.total <= r.warmup)
    return model.emitError() << "schedule '" << r.schedule << "' needs total_steps (" << r.total
                             << ") > warmup_steps (" << r.warmup
                             << "); lower warmup_steps or raise steps";
  // One element type for the schedule and clipping scalars: there is no
  // conversion op yet, so mixed-precision parameters are rejected.
  GradOp first = grads.front();
  elem = cast<RankedTensorType>(first.getValue().getType()).getElementType();
  for (GradOp g : grads)
    if (cast<RankedTensorType>(g.getValue().getType()).getElementType() != elem)
      return g.emitError() << "gradient of " << g.getVarAttr() << " is " << g.getValue().getType()
                           << " but the first gradient has element type " << elem
                           << "; train-optimizer needs one element type for all parameters";
  if (r.schedule != "constant" && !model.getTrainerOption("total_steps"))
    return model.emitError() << "schedule '" << r.schedule
                             << "' decays over trainer.total_steps, which is not set";
  return success();
}

Value OptimizerPass::lrMultiplier(Math &m, const Recipe &r, Value t) {
  Value mult = m.c(1.0);
  if (r.warmup > 0)
    mult = m.min(m.c(1.0), m.div(t, m.c(static_cast<double>(r.warmup))));
  if (r.schedule == "constant")
    return mult;
  Value progress = m.div(m.sub(t, m.c(static_cast<double>(r.warmup))),
                         m.c(static_cast<double>(r.total - r.warmup)));
  progress = m.min(m.c(1.0), m.max(m.c(0.0), progress));
  Value shape; // in [0, 1], 1 at the start of decay
  if (r.schedule == "cosine")
    shape = m.mul(m.c(0.5), m.add(m.c(1.0), m.b.create<CosOp>(m.loc, m.mul(m.c(M_PI), progress))));
  else
    shape = m.sub(m.c(1.0), progress);
  return m.mul(mult, m.add(m.c(r.minLrRatio), m.mul(m.c(1.0 - r.minLrRatio), shape)));
}

Value OptimizerPass::clipScale(Math &m, OpBuilder &b, const Recipe &r, ArrayRef<GradOp> grads,
                               ArrayRef<Value> meanGrads) {
  // ‖g‖² over every parameter. A partitioned model sums each stage's
  // parameters on that stage, and train.stage_sum adds the stages'
  // partials (the pipeline runtime all-reduces them).
  const int64_t stages = model->hasAttr("stages") ? model.getTrainerInt("stages", 1) : 1;
  Value sq;
  if (stages <= 1) {
    sq = m.c(0.0);
    for (Value g : meanGrads)
      sq = m.add(sq, m.sumAll(m.mul(g, g)));
  } else {
    SmallVector<Value> partials;
    for (int64_t s = 0; s < stages; ++s) {
      Operation *before = b.getInsertionPoint() == b.getBlock()->begin()
                              ? nullptr
                              : &*std::prev(b.getInsertionPoint());
      Value part = m.c(0.0);
      for (auto [gradOp, g] : llvm::zip(grads, meanGrads)) {
        GradOp grad = gradOp;
        auto param = cast<ParamOp>(SymbolTable::lookupSymbolIn(model, grad.getVarAttr()));
        if (getStage(param) == s)
          part = m.add(part, m.sumAll(m.mul(g, g)));
      }
      // Everything computed for this partial runs on stage s.
      tagStages(before, &*b.getInsertionPoint(), s);
      partials.push_back(part);
    }
    sq = b.create<StageSumOp>(m.loc, partials.front().getType(), partials);
  }
  return m.min(m.c(1.0), m.div(m.c(r.gradClip), m.add(m.sqrt(sq), m.c(1e-6))));
}

OptimizerPass::Step OptimizerPass::muonStep(OpBuilder &b, Math &pm, const Recipe &r, ParamOp param,
                                            Value g, Value lr) {
  // M ← βM + (1−β)g; U = (1−β)g + βM (Nesterov); O = NS5(U).
  Location ploc = pm.loc;
  auto [mref, mom] = slot(b, param, "muon_m");
  Value mNew = pm.ema(mom, g, r.muonMomentum);
  b.create<WriteOp>(ploc, mNew, mref);
  Value u = pm.ema(mNew, g, r.muonMomentum);
  Value o = b.create<NewtonSchulzOp>(ploc, u.getType(), u, 5, APFloat(3.4445), APFloat(-4.7750),
                                     APFloat(2.0315));
  // Our weights are [in, out] (x·W), PyTorch's [out, in]: Muon's
  // sqrt(max(1, out/in)) is sqrt(max(1, cols/rows)) here, unless the
  // parameter says it is laid out as PyTorch's (exported nn.Linear
  // weights, kind = "llama": layout = "out_in").
  auto s = param.getTensorType().getShape();
  auto layout = param->getAttrOfType<StringAttr>("layout");
  bool outIn = layout && layout.getValue() == "out_in";
  double fanIn = outIn ? s[1] : s[0], fanOut = outIn ? s[0] : s[1];
  double scale = r.muonRmsScale ? 0.2 * std::sqrt(std::max(fanIn, fanOut))
                                : std::sqrt(std::max(1.0, fanOut / fanIn));
  return {pm.mul(o, pm.c(scale)), lr};
}

OptimizerPass::Step OptimizerPass::sgdStep(OpBuilder &b, Math &pm, const Recipe &r, ParamOp param,
                                           Value g, Value lr) {
  // b ← μb + g; step along b.
  auto [bref, buf] = slot(b, param, "momentum");
  Value bNew = pm.add(pm.mul(pm.c(r.momentum), buf), g);
  b.create<WriteOp>(pm.loc, bNew, bref);
  return {bNew, lr};
}

OptimizerPass::Step OptimizerPass::adamStep(OpBuilder &b, Math &pm, const Recipe &r, ParamOp param,
                                            Value g, Value lr, Value bc1, Value bc2) {
  // AdamW (also the fallback group of Muon).
  auto [mref, mom] = slot(b, param, "adam_m");
  auto [vref, var] = slot(b, param, "adam_v");
  Value mNew = pm.ema(mom, g, r.beta1);
  Value vNew = pm.ema(var, pm.mul(g, g), r.beta2);
  b.create<WriteOp>(pm.loc, mNew, mref);
  b.create<WriteOp>(pm.loc, vNew, vref);
  return {pm.div(pm.div(mNew, bc1), pm.add(pm.sqrt(pm.div(vNew, bc2)), pm.c(r.eps))), lr};
}
