//===- Gossip.cpp - train-gossip ------------------------------------------===//
//
// Adds the `train.outer` phase of local-step data parallelism: per parameter,
// the gossip outer optimizer of docs/design.md §4.6 (seed: GASLoC, Cagnasso,
// Belilovsky and Oyallon, arXiv 2606.11081), whose exchange is
// `train.gossip_mix`. On the complete graph with exact averaging it is DiLoCo
// (Douillard et al., 2023) with Nesterov outer SGD, μ = γ. The replicas, their
// local steps, the topology and the seed of the peer draw are attributes of
// `train.outer`: the runtime runs the local loop and draws the peers.
//
//===----------------------------------------------------------------------===//
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"

#include <cstdio>

namespace stretto::train {
#define GEN_PASS_DEF_TRAINGOSSIP
#include "Train/TrainPasses.h.inc"
} // namespace stretto::train

using namespace mlir;
using namespace stretto::train;

namespace {

const char *const kTopologies[] = {"complete", "ring", "exponential", "one-peer", "two-peer"};

/// The outer optimizer's settings: each from the pass option, else the
/// trainer dictionary, else its default.
struct OuterSettings {
  int64_t replicas = 1;
  SmallVector<int64_t> localSteps;
  std::string topology, placement;
  double eta = 0.7, gamma = 0.5, alpha = 1.0;
  int64_t drawSeed = 0;
};

struct GossipPass : public stretto::train::impl::TrainGossipBase<GossipPass> {
  using TrainGossipBase::TrainGossipBase;
  void runOnOperation() override;

private:
  /// Reads and checks the settings; emits the error and fails on a bad one.
  LogicalResult readSettings(ModelOp model, OuterSettings &o);
  LogicalResult readLocalSteps(ModelOp model, OuterSettings &o);
  LogicalResult readTopology(ModelOp model, OuterSettings &o);
  LogicalResult readCoefficients(ModelOp model, OuterSettings &o); // and γ's placement
  /// The train.outer op: per parameter, the outer step toward the local
  /// iterate, the momentum term and the gossip mix.
  void buildOuter(ModelOp model, const OuterSettings &o, ArrayRef<ParamOp> params);
};

/// A number as people write it (1.5, not 1.500000e+00).
std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

/// Parses "20" or "20,20,10" into non-negative integers.
FailureOr<SmallVector<int64_t>> parseSteps(StringRef text) {
  SmallVector<int64_t> out;
  SmallVector<StringRef> parts;
  text.split(parts, ',');
  for (StringRef p : parts) {
    int64_t v;
    if (p.trim().getAsInteger(10, v) || v < 0)
      return failure();
    out.push_back(v);
  }
  return out;
}

} // namespace

void GossipPass::runOnOperation() {
  ModelOp model = getOperation();
  if (!model.getUpdate()) {
    signalPassFailure();
    model.emitError() << "has no 'train.update'; run train-optimizer before train-gossip";
    return;
  }
  if (OuterOp existing = model.getOuter()) {
    signalPassFailure();
    existing.emitError() << "already exists; run train-gossip once";
    return;
  }
  OuterSettings o;
  if (failed(readSettings(model, o)))
    return signalPassFailure();
  SmallVector<ParamOp> params = llvm::to_vector(model.getBody().getOps<ParamOp>());
  if (params.empty()) {
    signalPassFailure();
    model.emitError() << "has no 'train.param' to synchronise";
    return;
  }
  buildOuter(model, o, params);
}

LogicalResult GossipPass::readSettings(ModelOp model, OuterSettings &o) {
  o.replicas = replicas > 0 ? int64_t(replicas) : model.getTrainerInt("replicas", 1);
  if (replicas < 0 || o.replicas < 1)
    return model.emitError() << "replicas must be >= 1, got "
                             << (replicas < 0 ? int64_t(replicas) : o.replicas);
  if (failed(readLocalSteps(model, o)) || failed(readTopology(model, o)) ||
      failed(readCoefficients(model, o)))
    return failure();
  o.drawSeed = seed >= 0 ? int64_t(seed)
                         : model.getTrainerInt("gossip_seed", model.getTrainerInt("seed", 0));
  return success();
}

LogicalResult GossipPass::readLocalSteps(ModelOp model, OuterSettings &o) {
  SmallVector<int64_t> &steps = o.localSteps;
  if (!localSteps.empty()) {
    auto parsed = parseSteps(localSteps);
    if (failed(parsed))
      return model.emitError() << "local-steps '" << localSteps
                               << "' must be one integer >= 0 or a comma list of them, one per "
                                  "replica";
    steps = *parsed;
  } else if (auto list = dyn_cast_or_null<DenseI64ArrayAttr>(
                 model.getTrainerOption("local_steps"))) {
    steps.assign(list.asArrayRef().begin(), list.asArrayRef().end());
  } else {
    steps.push_back(model.getTrainerInt("local_steps", 1));
  }
  if (steps.size() != 1 && static_cast<int64_t>(steps.size()) != o.replicas)
    return model.emitError() << "local-steps has " << steps.size() << " entries for " << o.replicas
                             << " replicas; give one value for all or one per replica";
  return success();
}

LogicalResult GossipPass::readTopology(ModelOp model, OuterSettings &o) {
  StringRef sync = model.getTrainerString("sync", "sync");
  o.topology = !topology.empty()                    ? topology
               : model.getTrainerOption("topology") ? model.getTrainerString("topology", "").str()
                                                    : (sync == "diloco" ? "complete" : "one-peer");
  if (!llvm::is_contained(kTopologies, StringRef(o.topology)))
    return model.emitError() << "unknown topology '" << o.topology
                             << "'; expected complete, ring, exponential, one-peer or two-peer";
  if (sync == "diloco" && o.topology != "complete")
    return model.emitError()
           << "trainer.sync is 'diloco', which averages over all replicas, but the topology is '"
           << o.topology << "'; use sync = \"gossip\" or topology complete";
  return success();
}

LogicalResult GossipPass::readCoefficients(ModelOp model, OuterSettings &o) {
  o.eta = outerLr >= 0 ? double(outerLr) : model.getTrainerFloat("outer_lr", 0.7);
  if (!(o.eta > 0))
    return model.emitError() << "outer-lr must be > 0, got " << num(o.eta);
  o.gamma = momentum >= 0
                ? double(momentum)
                : model.getTrainerFloat("outer_momentum", o.topology == "complete" ? 0.9 : 0.5);
  if (!(o.gamma >= 0 && o.gamma < 1))
    return model.emitError() << "momentum (outer acceleration γ) must be in [0, 1), got "
                             << num(o.gamma);
  o.alpha = alpha >= 0 ? double(alpha) : model.getTrainerFloat("gossip_alpha", 1.0);
  if (!(o.alpha > 0 && o.alpha <= 1))
    return model.emitError() << "alpha must be in (0, 1], got " << num(o.alpha);
  o.placement = !gammaPlacement.empty()
                    ? gammaPlacement
                    : model.getTrainerString("gamma_placement", "before-mixing").str();
  if (o.placement != "before-mixing" && o.placement != "after-mixing")
    return model.emitError() << "unknown gamma-placement '" << o.placement
                             << "'; expected before-mixing or after-mixing";
  return success();
}

void GossipPass::buildOuter(ModelOp model, const OuterSettings &o, ArrayRef<ParamOp> params) {
  // Anchor and previous iterate per parameter, declared after the last
  // param/state so they read as part of the model's state.
  SymbolTable table(model);
  OpBuilder decl(model.getStep());
  auto declare = [&](ParamOp p, StringRef slot) {
    auto s = decl.create<StateOp>(p.getLoc(), (p.getSymName() + "." + slot).str(), p.getType(),
                                  InitKind::zeros, APFloat(0.0));
    s->setAttr("copy_of", FlatSymbolRefAttr::get(p.getSymNameAttr()));
    s->setAttr("of", FlatSymbolRefAttr::get(p.getSymNameAttr()));
    if (Attribute stage = p->getAttr("stage"))
      s->setAttr("stage", stage);
    table.insert(s, Block::iterator(s)); // renames on a collision
    return FlatSymbolRefAttr::get(s.getSymNameAttr());
  };

  Location loc = model.getLoc();
  OpBuilder mb = OpBuilder::atBlockEnd(&model.getBody().front());
  auto outer = mb.create<OuterOp>(loc);
  Builder attrs(&getContext());
  outer->setAttr("replicas", attrs.getI64IntegerAttr(o.replicas));
  outer->setAttr("local_steps", attrs.getDenseI64ArrayAttr(o.localSteps));
  outer->setAttr("topology", attrs.getStringAttr(o.topology));
  outer->setAttr("gossip_seed", attrs.getI64IntegerAttr(o.drawSeed));
  OpBuilder b = OpBuilder::atBlockEnd(&outer.getBody().emplaceBlock());
  auto yield = b.create<YieldOp>(loc);
  b.setInsertionPoint(yield);

  for (ParamOp p : params) {
    Location ploc = p.getLoc();
    RankedTensorType type = p.getTensorType();
    auto scalar = [&](double v) {
      return b.create<ConstantOp>(ploc, RankedTensorType::get({}, type.getElementType()), v);
    };
    auto pref = FlatSymbolRefAttr::get(p.getSymNameAttr());
    FlatSymbolRefAttr anchorRef = declare(p, "gossip_anchor");
    FlatSymbolRefAttr prevRef = o.gamma > 0 ? declare(p, "gossip_y_prev") : FlatSymbolRefAttr();

    Value local = b.create<ReadOp>(ploc, type, pref);
    Value anchor = b.create<ReadOp>(ploc, type, anchorRef);
    Value drift = b.create<SubOp>(ploc, local, anchor);
    Value y = b.create<AddOp>(ploc, anchor, b.create<MulOp>(ploc, scalar(o.eta), drift));
    Value momentumTerm; // γ·(y − y_prev)
    if (prevRef) {
      Value prev = b.create<ReadOp>(ploc, type, prevRef);
      momentumTerm = b.create<MulOp>(ploc, scalar(o.gamma), b.create<SubOp>(ploc, y, prev));
      b.create<WriteOp>(ploc, y, prevRef);
    }
    Value next;
    if (o.placement == "before-mixing") {
      Value z = momentumTerm ? Value(b.create<AddOp>(ploc, y, momentumTerm)) : y;
      next = b.create<GossipMixOp>(ploc, type, z, APFloat(o.alpha));
    } else {
      Value w = b.create<GossipMixOp>(ploc, type, y, APFloat(o.alpha));
      next = momentumTerm ? Value(b.create<AddOp>(ploc, w, momentumTerm)) : w;
    }
    b.create<WriteOp>(ploc, next, anchorRef);
    b.create<WriteOp>(ploc, next, pref);
  }
}
