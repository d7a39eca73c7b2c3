//===- Partition.cpp - train-partition -----------------------------------===//
//
// Assigns every op of the model-level step to a pipeline stage and makes
// cross-stage uses explicit with train.transfer.
//
// 1. Layer of each op: the largest layer among its operands, where a read of
//    a parameter gives the parameter's `layer` (embeddings come before layer
//    0, other unlayered parameters — final norm, head — after the last).
// 2. Partition units (embed, block<l>, head) to stages: explicit unit
//    ranges (`stage_units = ["embed..block1", "block2..head"]`), explicit
//    layer ranges (the embedding joins the first stage, the head the last),
//    or the contiguous split minimising the largest stage cost (the DP of
//    stretto/Tune/Partition.h) over measured unit costs (`unit-costs`) or
//    the static per-layer cost model.
// 3. Ops that depend on no parameter (inputs, one-hot of targets) take the
//    smallest stage among their users; constants and scalars stay unstaged.
// 4. A transfer per (value, consumer stage) is inserted before the first
//    consumer.
//
//===----------------------------------------------------------------------===//
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include "stretto/Support/Flops.h"
#include "stretto/Tune/Partition.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace stretto::train {
#define GEN_PASS_DEF_TRAINPARTITION
#include "Train/TrainPasses.h.inc"
} // namespace stretto::train

using namespace mlir;
using namespace stretto::train;

int64_t stretto::train::getStage(Operation *op) {
  if (auto a = op->getAttrOfType<IntegerAttr>("stage"))
    return a.getInt();
  return -1;
}

void stretto::train::setStage(Operation *op, int64_t stage) {
  if (stage >= 0)
    op->setAttr("stage", IntegerAttr::get(IntegerType::get(op->getContext(), 64), stage));
}

void stretto::train::tagStages(Operation *after, Operation *before, int64_t stage) {
  if (stage < 0)
    return;
  Block *block = before->getBlock();
  auto it = after ? std::next(Block::iterator(after)) : block->begin();
  for (; &*it != before; ++it) {
    if (auto t = dyn_cast<TransferOp>(*it))
      setStage(t, t.getTo()); // a transfer runs where its value arrives
    else if (getStage(&*it) < 0 && !isa<ConstantOp>(*it))
      setStage(&*it, stage);
  }
}

std::vector<std::string> stretto::train::partitionUnits(ModelOp model) {
  int64_t layers = 0;
  bool embed = false, head = false;
  for (ParamOp p : model.getBody().getOps<ParamOp>()) {
    if (auto l = p->getAttrOfType<IntegerAttr>("layer")) {
      layers = std::max(layers, l.getInt() + 1);
      continue;
    }
    auto role = p->getAttrOfType<StringAttr>("role");
    (role && role.getValue() == "embedding" ? embed : head) = true;
  }
  std::vector<std::string> units;
  if (layers == 0)
    return units;
  if (embed)
    units.push_back("embed");
  for (int64_t l = 0; l < layers; ++l)
    units.push_back("block" + std::to_string(l));
  if (head)
    units.push_back("head");
  return units;
}

namespace {

/// Rough cost of an op: FLOPs plus bytes of its result (the activation a
/// stage keeps or sends). Only ratios between layers matter.
double opCost(Operation *op) {
  auto numel = [](Value v) {
    return static_cast<double>(cast<RankedTensorType>(v.getType()).getNumElements());
  };
  if (op->getNumResults() != 1 || !isa<RankedTensorType>(op->getResult(0).getType()))
    return 0;
  double out = numel(op->getResult(0));
  double flops = llvm::TypeSwitch<Operation *, double>(op)
                     .Case([&](MatmulOp m) {
                       return 2.0 * out * cast<RankedTensorType>(m.getLhs().getType()).getShape().back();
                     })
                     .Case([&](AttentionOp a) {
                       auto q = cast<RankedTensorType>(a.getQ().getType()).getShape();
                       auto k = cast<RankedTensorType>(a.getK().getType()).getShape();
                       auto v = cast<RankedTensorType>(a.getV().getType()).getShape();
                       double tq = double(q[q.size() - 2]), d = double(q.back());
                       double blocks = numel(a.getQ()) / std::max(tq * d, 1.0);
                       return stretto::attentionFlops(blocks, tq, double(k[k.size() - 2]), d,
                                                      double(v.back()));
                     })
                     .Case([&](AttentionGradOp a) {
                       auto q = cast<RankedTensorType>(a.getQ().getType()).getShape();
                       double t = double(q[q.size() - 2]), d = double(q.back());
                       double blocks = numel(a.getQ()) / std::max(t * d, 1.0);
                       return stretto::attentionGradFlops(blocks, t, d);
                     })
                     .Default([&](Operation *) { return out; });
  return flops + 4.0 * out;
}

/// The model's partition units and where each op of its step belongs.
/// Units: "embed" (the unlayered embeddings), "block<l>" (layer l), "head"
/// (the other unlayered parameters: final norm, head, and the loss after
/// them). Unit v is layer v − 1; embed and head exist when some parameter
/// belongs to them.
struct Units {
  static constexpr int64_t kNone = -2; // an op that depends on no parameter
  ModelOp model;
  Block &body;
  int64_t layers = 0;
  std::vector<int64_t> present; // present unit indices, in order
  DenseMap<Operation *, int64_t> layerOf;

  Units(ModelOp model, Block &body) : model(model), body(body) {}

  /// Layers of parameters; unlayered embeddings go before layer 0, the rest
  /// (final norm, head) after the last layer. Fails without any layer.
  LogicalResult collect() {
    for (ParamOp p : model.getBody().getOps<ParamOp>())
      if (auto l = p->getAttrOfType<IntegerAttr>("layer"))
        layers = std::max(layers, l.getInt() + 1);
    if (layers == 0)
      return model.emitError() << "no parameter has a 'layer' attribute, so there are no "
                                  "layers to partition";
    for (Operation &op : body) {
      int64_t l = kNone;
      if (auto read = dyn_cast<ReadOp>(op)) {
        if (auto p =
                dyn_cast_or_null<ParamOp>(SymbolTable::lookupSymbolIn(model, read.getVarAttr())))
          l = paramLayer(p);
      } else {
        for (Value v : op.getOperands())
          if (Operation *def = v.getDefiningOp())
            l = std::max(l, layerOf.lookup(def));
      }
      layerOf[&op] = l;
    }
    std::vector<bool> has(layers + 2, false);
    for (int64_t l = 0; l < layers; ++l)
      has[l + 1] = true;
    for (ParamOp p : model.getBody().getOps<ParamOp>())
      has[paramLayer(p) + 1] = true;
    for (int64_t v = 0; v < layers + 2; ++v)
      if (has[v])
        present.push_back(v);
    return success();
  }
  int64_t paramLayer(ParamOp p) const {
    if (auto l = p->getAttrOfType<IntegerAttr>("layer"))
      return l.getInt();
    auto role = p->getAttrOfType<StringAttr>("role");
    return role && role.getValue() == "embedding" ? -1 : layers;
  }
  int64_t count() const { return static_cast<int64_t>(present.size()); }
  std::string name(int64_t v) const {
    return v == 0 ? "embed" : v == layers + 1 ? "head" : "block" + std::to_string(v - 1);
  }
  /// The first two and the last unit, for messages.
  std::string list() const {
    std::string out = name(present.front());
    if (present.size() > 1)
      out += ", " + name(present[1]);
    if (present.size() > 3)
      out += ", ...";
    if (present.size() > 2)
      out += ", " + name(present.back());
    return out;
  }
  /// The place of unit `n` among the present units; -1 when none is called so.
  int64_t position(StringRef n) const {
    for (int64_t i = 0; i < count(); ++i)
      if (name(present[i]) == n)
        return i;
    return -1;
  }
};

struct PartitionPass : public stretto::train::impl::TrainPartitionBase<PartitionPass> {
  using TrainPartitionBase::TrainPartitionBase;
  void runOnOperation() override;

private:
  /// stageOfUnit[v]: the stage of unit v (layer v − 1), from one of the four
  /// sources (unit ranges, layer ranges, measured costs, the static model).
  LogicalResult byUnitRanges(const Units &u, ArrayRef<std::string> ranges, int64_t S,
                             std::vector<int64_t> &stageOfUnit);
  LogicalResult byLayerRanges(const Units &u, ArrayRef<int64_t> flat, int64_t S,
                              std::vector<int64_t> &stageOfUnit);
  LogicalResult balanced(const Units &u, int64_t S, std::vector<int64_t> &stageOfUnit);
  /// Stages of ops and parameters, the stage_units attribute, and a
  /// train.transfer per (value, consumer stage).
  void assign(const Units &u, int64_t S, const std::vector<int64_t> &stageOfUnit);
};

/// stageOfUnit from a stage per layer (embed with layer 0, head with the last).
void fromLayers(const std::vector<int64_t> &stageOfLayer, std::vector<int64_t> &stageOfUnit) {
  const int64_t layers = static_cast<int64_t>(stageOfLayer.size());
  for (int64_t l = 0; l < layers; ++l)
    stageOfUnit[l + 1] = stageOfLayer[l];
  stageOfUnit[0] = stageOfLayer.front();
  stageOfUnit[layers + 1] = stageOfLayer.back();
}

} // namespace

void PartitionPass::runOnOperation() {
  ModelOp model = getOperation();
  StepOp step = model.getStep();
  if (!step) {
    model.emitError() << "has no 'train.step' to partition";
    return signalPassFailure();
  }
  if (!step.getBody().getOps<GradOp>().empty() || model.getUpdate()) {
    model.emitError() << "train-partition runs on the model-level step, before train-autodiff";
    return signalPassFailure();
  }
  int64_t S = stages > 0 ? int64_t(stages) : model.getTrainerInt("stages", 1);
  Units u(model, step.getBody().front());
  if (failed(u.collect()))
    return signalPassFailure();

  // Where the partition comes from: explicit unit ranges (option, then
  // trainer), explicit layer ranges (option, then trainer), measured unit
  // costs, or the static cost model.
  SmallVector<std::string> unitRanges(unitsOption.begin(), unitsOption.end());
  SmallVector<int64_t> flat(ranges.begin(), ranges.end());
  if (unitRanges.empty() && flat.empty()) {
    auto unitsAttr = model.getTrainerOption("stage_units");
    auto rangesAttr = model.getTrainerOption("stage_ranges");
    if (unitsAttr && rangesAttr) {
      model.emitError() << "the trainer gives both stage_units and stage_ranges; give one";
      return signalPassFailure();
    }
    if (auto arr = dyn_cast_or_null<ArrayAttr>(unitsAttr))
      for (Attribute x : arr)
        unitRanges.push_back(cast<StringAttr>(x).getValue().str());
    if (auto arr = dyn_cast_or_null<ArrayAttr>(rangesAttr))
      for (Attribute pair : arr)
        for (Attribute x : cast<ArrayAttr>(pair))
          flat.push_back(cast<IntegerAttr>(x).getInt());
  }
  int64_t maxStages = unitRanges.empty() && unitCosts.empty() ? u.layers : u.count();
  if (S < 1 || S > maxStages) {
    model.emitError() << "cannot split " << maxStages
                      << (maxStages == u.layers ? " layer(s)" : " partition unit(s)") << " into "
                      << S << " stage(s)";
    return signalPassFailure();
  }
  std::vector<int64_t> stageOfUnit(u.layers + 2, 0);
  LogicalResult chosen = !unitRanges.empty() ? byUnitRanges(u, unitRanges, S, stageOfUnit)
                         : !flat.empty()     ? byLayerRanges(u, flat, S, stageOfUnit)
                                             : balanced(u, S, stageOfUnit);
  if (failed(chosen))
    return signalPassFailure();
  assign(u, S, stageOfUnit);
}

LogicalResult PartitionPass::byUnitRanges(const Units &u, ArrayRef<std::string> unitRanges,
                                          int64_t S, std::vector<int64_t> &stageOfUnit) {
  ModelOp model = u.model;
  if (static_cast<int64_t>(unitRanges.size()) != S)
    return model.emitError() << "stage_units gives " << unitRanges.size() << " stage(s) for " << S
                             << " stage(s)";
  int64_t expect = 0;
  for (int64_t s = 0; s < S; ++s) {
    StringRef spec = unitRanges[s];
    auto [firstName, lastName] = spec.split("..");
    if (lastName.empty())
      lastName = firstName;
    int64_t first = u.position(firstName.trim()), last = u.position(lastName.trim());
    for (auto [name, pos] : {std::pair{firstName.trim(), first}, {lastName.trim(), last}})
      if (pos < 0)
        return model.emitError() << "stage_units: stage " << s << " ('" << spec
                                 << "') names unknown unit '" << name << "'; the units are "
                                 << u.list();
    if (last < first || first != expect) {
      auto diag = model.emitError() << "stage_units: stage " << s << " is '" << spec << "' but ";
      if (last < first)
        diag << u.name(u.present[last]) << " comes before " << u.name(u.present[first]);
      else if (first < expect)
        diag << "it overlaps the previous stage, which ends at " << u.name(u.present[expect - 1]);
      else
        diag << "units " << u.name(u.present[expect]) << ".." << u.name(u.present[first - 1])
             << " belong to no stage";
      return diag;
    }
    for (int64_t i = first; i <= last; ++i)
      stageOfUnit[u.present[i]] = s;
    expect = last + 1;
  }
  if (expect != u.count())
    return model.emitError() << "stage_units: units " << u.name(u.present[expect]) << ".."
                             << u.name(u.present.back()) << " belong to no stage";
  return success();
}

LogicalResult PartitionPass::byLayerRanges(const Units &u, ArrayRef<int64_t> flat, int64_t S,
                                           std::vector<int64_t> &stageOfUnit) {
  ModelOp model = u.model;
  const int64_t layers = u.layers;
  std::vector<int64_t> stageOfLayer(layers, 0);
  if (flat.size() % 2 || static_cast<int64_t>(flat.size() / 2) != S)
    return model.emitError() << "stage_ranges gives " << flat.size() / 2 << " range(s) for " << S
                             << " stage(s)";
  int64_t expect = 0;
  for (int64_t s = 0; s < S; ++s) {
    int64_t first = flat[2 * s], end = flat[2 * s + 1];
    if (first != expect || end <= first || end > layers) {
      auto diag = model.emitError()
                  << "stage_ranges: stage " << s << " is [" << first << ", " << end << ") but ";
      if (first < expect)
        diag << "it overlaps the previous stage, which ends at " << expect;
      else if (first > expect)
        diag << "layers [" << expect << ", " << first << ") belong to no stage";
      else if (end > layers)
        diag << "the model has " << layers << " layers";
      else
        diag << "it is empty";
      return diag;
    }
    for (int64_t l = first; l < end; ++l)
      stageOfLayer[l] = s;
    expect = end;
  }
  if (expect != layers)
    return model.emitError() << "stage_ranges: layers [" << expect << ", " << layers
                             << ") belong to no stage";
  fromLayers(stageOfLayer, stageOfUnit);
  return success();
}

LogicalResult PartitionPass::balanced(const Units &u, int64_t S,
                                      std::vector<int64_t> &stageOfUnit) {
  // The smallest largest stage cost (the DP of stretto-tune with one
  // micro-batch and no updates or limits: a min-max of sums). With measured
  // unit costs the units are split; with the static cost model (FLOPs plus
  // activation bytes per layer) the embedding's cost counts for layer 0 and
  // the head's for the last layer.
  stretto::tune::CostModel cm;
  cm.schedule = stretto::tune::Sched::TwoBW;
  if (unitCosts.empty()) {
    cm.units.resize(u.layers);
    for (Operation &op : u.body) {
      int64_t l = u.layerOf.lookup(&op);
      if (l != Units::kNone)
        cm.units[std::clamp<int64_t>(l, 0, u.layers - 1)].forward += opCost(&op);
    }
    stretto::tune::Candidate best = stretto::tune::searchPartition(cm, int(S));
    std::vector<int64_t> stageOfLayer(u.layers, 0);
    for (int64_t s = 0; s < S; ++s)
      for (int l = best.bounds[s]; l < best.bounds[s + 1]; ++l)
        stageOfLayer[l] = s;
    fromLayers(stageOfLayer, stageOfUnit);
    return success();
  }
  if (static_cast<int64_t>(unitCosts.size()) != u.count())
    return ModelOp(u.model).emitError()
           << "unit-costs gives " << unitCosts.size() << " cost(s) for the " << u.count()
           << " partition units (" << u.list() << ")";
  for (int64_t i = 0; i < u.count(); ++i) {
    if (!(unitCosts[i] >= 0) || std::isinf(unitCosts[i]))
      return ModelOp(u.model).emitError() << "unit-costs: the cost of " << u.name(u.present[i])
                                          << " must be a finite number >= 0, got " << unitCosts[i];
    stretto::tune::UnitProfile p;
    p.name = u.name(u.present[i]);
    p.forward = unitCosts[i];
    cm.units.push_back(p);
  }
  stretto::tune::Candidate best = stretto::tune::searchPartition(cm, int(S));
  for (int64_t s = 0; s < S; ++s)
    for (int i = best.bounds[s]; i < best.bounds[s + 1]; ++i)
      stageOfUnit[u.present[i]] = s;
  return success();
}

void PartitionPass::assign(const Units &u, int64_t S, const std::vector<int64_t> &stageOfUnit) {
  ModelOp model = u.model;
  Block &body = u.body;
  auto stageOf = [&](int64_t layer) -> int64_t {
    if (layer == Units::kNone)
      return -1;
    return stageOfUnit[std::clamp<int64_t>(layer, -1, u.layers) + 1];
  };
  // The units of each stage, for people reading the IR.
  SmallVector<Attribute> names;
  for (int64_t s = 0; s < S; ++s) {
    std::string first, last;
    for (int64_t v : u.present)
      if (stageOfUnit[v] == s) {
        if (first.empty())
          first = u.name(v);
        last = u.name(v);
      }
    names.push_back(StringAttr::get(&getContext(), first == last ? first : first + ".." + last));
  }
  model->setAttr("stage_units", ArrayAttr::get(&getContext(), names));

  // Stages of ops; parameter-free tensor ops follow their first user.
  for (Operation &op : body)
    if (!isa<ConstantOp, YieldOp>(op))
      setStage(&op, stageOf(u.layerOf.lookup(&op)));
  for (Operation &op : llvm::reverse(body)) {
    if (getStage(&op) >= 0 || isa<ConstantOp, YieldOp>(op) || op.getNumResults() != 1)
      continue;
    if (cast<RankedTensorType>(op.getResult(0).getType()).getRank() == 0)
      continue; // scalars: computed wherever used
    int64_t s = std::numeric_limits<int64_t>::max();
    for (Operation *user : op.getUsers())
      if (getStage(user) >= 0)
        s = std::min(s, getStage(user));
    if (s != std::numeric_limits<int64_t>::max())
      setStage(&op, s);
  }
  for (ParamOp p : model.getBody().getOps<ParamOp>())
    setStage(p, stageOf(u.paramLayer(p)));

  // Transfers: one per (value, consumer stage), before the first consumer.
  DenseMap<std::pair<Value, int64_t>, Value> moved;
  for (Operation &op : llvm::make_early_inc_range(body)) {
    int64_t s = getStage(&op);
    if (s < 0 || isa<TransferOp>(op))
      continue;
    for (OpOperand &use : op.getOpOperands()) {
      Operation *def = use.get().getDefiningOp();
      int64_t from = def ? getStage(def) : -1;
      if (from < 0 || from == s)
        continue;
      Value &t = moved[{use.get(), s}];
      if (!t) {
        OpBuilder b(&op);
        auto transfer = b.create<TransferOp>(op.getLoc(), use.get().getType(), use.get(), from, s);
        setStage(transfer, s);
        t = transfer;
      }
      use.set(t);
    }
  }
  model->setAttr("stages", IntegerAttr::get(IntegerType::get(&getContext(), 64), S));
}
