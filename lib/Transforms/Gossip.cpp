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

struct GossipPass : public stretto::train::impl::TrainGossipBase<GossipPass> {
  using TrainGossipBase::TrainGossipBase;
  void runOnOperation() override;
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
  auto error = [&]() {
    signalPassFailure();
    return model.emitError();
  };
  if (!model.getUpdate()) {
    error() << "has no 'train.update'; run train-optimizer before train-gossip";
    return;
  }
  if (OuterOp existing = model.getOuter()) {
    signalPassFailure();
    existing.emitError() << "already exists; run train-gossip once";
    return;
  }

  // Options: explicit pass option, else the trainer dictionary, else default.
  int64_t r = replicas > 0 ? int64_t(replicas) : model.getTrainerInt("replicas", 1);
  if (replicas < 0 || r < 1) {
    error() << "replicas must be >= 1, got " << (replicas < 0 ? int64_t(replicas) : r);
    return;
  }
  SmallVector<int64_t> steps;
  if (!localSteps.empty()) {
    auto parsed = parseSteps(localSteps);
    if (failed(parsed)) {
      error() << "local-steps '" << localSteps
              << "' must be one integer >= 0 or a comma list of them, one per replica";
      return;
    }
    steps = *parsed;
  } else if (auto list = dyn_cast_or_null<DenseI64ArrayAttr>(
                 model.getTrainerOption("local_steps"))) {
    steps.assign(list.asArrayRef().begin(), list.asArrayRef().end());
  } else {
    steps.push_back(model.getTrainerInt("local_steps", 1));
  }
  if (steps.size() != 1 && static_cast<int64_t>(steps.size()) != r) {
    error() << "local-steps has " << steps.size() << " entries for " << r
            << " replicas; give one value for all or one per replica";
    return;
  }

  StringRef sync = model.getTrainerString("sync", "sync");
  std::string topo = !topology.empty() ? topology
                     : model.getTrainerOption("topology")
                         ? model.getTrainerString("topology", "").str()
                         : (sync == "diloco" ? "complete" : "one-peer");
  if (!llvm::is_contained(kTopologies, StringRef(topo))) {
    error() << "unknown topology '" << topo
            << "'; expected complete, ring, exponential, one-peer or two-peer";
    return;
  }
  if (sync == "diloco" && topo != "complete") {
    error() << "trainer.sync is 'diloco', which averages over all replicas, but the topology is '"
            << topo << "'; use sync = \"gossip\" or topology complete";
    return;
  }

  double eta = outerLr >= 0 ? double(outerLr) : model.getTrainerFloat("outer_lr", 0.7);
  if (!(eta > 0)) {
    error() << "outer-lr must be > 0, got " << num(eta);
    return;
  }
  double gamma = momentum >= 0 ? double(momentum)
                               : model.getTrainerFloat("outer_momentum",
                                                       topo == "complete" ? 0.9 : 0.5);
  if (!(gamma >= 0 && gamma < 1)) {
    error() << "momentum (outer acceleration γ) must be in [0, 1), got " << num(gamma);
    return;
  }
  double a = alpha >= 0 ? double(alpha) : model.getTrainerFloat("gossip_alpha", 1.0);
  if (!(a > 0 && a <= 1)) {
    error() << "alpha must be in (0, 1], got " << num(a);
    return;
  }
  std::string placement = !gammaPlacement.empty()
                              ? gammaPlacement
                              : model.getTrainerString("gamma_placement", "before-mixing").str();
  if (placement != "before-mixing" && placement != "after-mixing") {
    error() << "unknown gamma-placement '" << placement
            << "'; expected before-mixing or after-mixing";
    return;
  }
  int64_t drawSeed = seed >= 0 ? int64_t(seed)
                               : model.getTrainerInt("gossip_seed",
                                                     model.getTrainerInt("seed", 0));

  SmallVector<ParamOp> params = llvm::to_vector(model.getBody().getOps<ParamOp>());
  if (params.empty()) {
    error() << "has no 'train.param' to synchronise";
    return;
  }

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
  outer->setAttr("replicas", attrs.getI64IntegerAttr(r));
  outer->setAttr("local_steps", attrs.getDenseI64ArrayAttr(steps));
  outer->setAttr("topology", attrs.getStringAttr(topo));
  outer->setAttr("gossip_seed", attrs.getI64IntegerAttr(drawSeed));
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
    FlatSymbolRefAttr prevRef = gamma > 0 ? declare(p, "gossip_y_prev") : FlatSymbolRefAttr();

    Value local = b.create<ReadOp>(ploc, type, pref);
    Value anchor = b.create<ReadOp>(ploc, type, anchorRef);
    Value drift = b.create<SubOp>(ploc, local, anchor);
    Value y = b.create<AddOp>(ploc, anchor, b.create<MulOp>(ploc, scalar(eta), drift));
    Value momentumTerm; // γ·(y − y_prev)
    if (prevRef) {
      Value prev = b.create<ReadOp>(ploc, type, prevRef);
      momentumTerm = b.create<MulOp>(ploc, scalar(gamma), b.create<SubOp>(ploc, y, prev));
      b.create<WriteOp>(ploc, y, prevRef);
    }
    Value next;
    if (placement == "before-mixing") {
      Value z = momentumTerm ? Value(b.create<AddOp>(ploc, y, momentumTerm)) : y;
      next = b.create<GossipMixOp>(ploc, type, z, APFloat(a));
    } else {
      Value w = b.create<GossipMixOp>(ploc, type, y, APFloat(a));
      next = momentumTerm ? Value(b.create<AddOp>(ploc, w, momentumTerm)) : w;
    }
    b.create<WriteOp>(ploc, next, anchorRef);
    b.create<WriteOp>(ploc, next, pref);
  }
}
