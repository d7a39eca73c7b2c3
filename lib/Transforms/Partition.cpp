//===- Partition.cpp - train-partition -----------------------------------===//
//
// Assigns every op of the model-level step to a pipeline stage and makes
// cross-stage uses explicit with train.transfer.
//
// 1. Layer of each op: the largest layer among its operands, where a read of
//    a parameter gives the parameter's `layer` (embeddings come before layer
//    0, other unlayered parameters — final norm, head — after the last).
// 2. Layers to stages: explicit [first, end) ranges, or the contiguous split
//    minimising the largest stage cost (dynamic programming over layers).
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
                       auto s = cast<RankedTensorType>(a.getQ().getType()).getShape();
                       return 4.0 * out * s[2]; // QKᵀ and PV: 2·T·D each per row
                     })
                     .Default([&](Operation *) { return out; });
  return flops + 4.0 * out;
}

struct PartitionPass : public stretto::train::impl::TrainPartitionBase<PartitionPass> {
  using TrainPartitionBase::TrainPartitionBase;
  void runOnOperation() override;
};

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

  // Layers of parameters; unlayered embeddings go before layer 0, the rest
  // (final norm, head) after the last layer.
  int64_t layers = 0;
  for (ParamOp p : model.getBody().getOps<ParamOp>())
    if (auto l = p->getAttrOfType<IntegerAttr>("layer"))
      layers = std::max(layers, l.getInt() + 1);
  if (layers == 0) {
    model.emitError() << "no parameter has a 'layer' attribute, so there are no layers to "
                         "partition";
    return signalPassFailure();
  }
  if (S < 1 || S > layers) {
    model.emitError() << "cannot split " << layers << " layer(s) into " << S << " stage(s)";
    return signalPassFailure();
  }
  auto paramLayer = [&](ParamOp p) -> int64_t {
    if (auto l = p->getAttrOfType<IntegerAttr>("layer"))
      return l.getInt();
    auto role = p->getAttrOfType<StringAttr>("role");
    return role && role.getValue() == "embedding" ? -1 : layers;
  };

  // 1. Layer of every op (-2: depends on no parameter).
  const int64_t none = -2;
  DenseMap<Operation *, int64_t> layerOf;
  Block &body = step.getBody().front();
  for (Operation &op : body) {
    int64_t l = none;
    if (auto read = dyn_cast<ReadOp>(op)) {
      if (auto p = dyn_cast_or_null<ParamOp>(SymbolTable::lookupSymbolIn(model, read.getVarAttr())))
        l = paramLayer(p);
    } else {
      for (Value v : op.getOperands())
        if (Operation *def = v.getDefiningOp())
          l = std::max(l, layerOf.lookup(def));
    }
    layerOf[&op] = l;
  }

  // 2. Layers -> stages.
  std::vector<int64_t> stageOfLayer(layers, 0);
  SmallVector<int64_t> flat(ranges.begin(), ranges.end());
  if (flat.empty())
    if (auto arr = dyn_cast_or_null<ArrayAttr>(model.getTrainerOption("stage_ranges")))
      for (Attribute pair : arr)
        for (Attribute x : cast<ArrayAttr>(pair))
          flat.push_back(cast<IntegerAttr>(x).getInt());
  if (!flat.empty()) {
    if (flat.size() % 2 || static_cast<int64_t>(flat.size() / 2) != S) {
      model.emitError() << "stage_ranges gives " << flat.size() / 2 << " range(s) for " << S
                        << " stage(s)";
      return signalPassFailure();
    }
    int64_t expect = 0;
    for (int64_t s = 0; s < S; ++s) {
      int64_t first = flat[2 * s], end = flat[2 * s + 1];
      if (first != expect || end <= first || end > layers) {
        auto diag = model.emitError() << "stage_ranges: stage " << s << " is [" << first << ", "
                                      << end << ") but ";
        if (first < expect)
          diag << "it overlaps the previous stage, which ends at " << expect;
        else if (first > expect)
          diag << "layers [" << expect << ", " << first << ") belong to no stage";
        else if (end > layers)
          diag << "the model has " << layers << " layers";
        else
          diag << "it is empty";
        return signalPassFailure();
      }
      for (int64_t l = first; l < end; ++l)
        stageOfLayer[l] = s;
      expect = end;
    }
    if (expect != layers) {
      model.emitError() << "stage_ranges: layers [" << expect << ", " << layers
                        << ") belong to no stage";
      return signalPassFailure();
    }
  } else {
    // Balanced: the embedding's cost counts for layer 0, the head's for the
    // last layer. best[s][l]: smallest max-cost of layers [0, l) in s stages.
    std::vector<double> cost(layers, 0.0);
    for (Operation &op : body) {
      int64_t l = layerOf.lookup(&op);
      if (l == none)
        continue;
      cost[std::clamp<int64_t>(l, 0, layers - 1)] += opCost(&op);
    }
    std::vector<double> prefix(layers + 1, 0.0);
    for (int64_t l = 0; l < layers; ++l)
      prefix[l + 1] = prefix[l] + cost[l];
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> best(S + 1, std::vector<double>(layers + 1, inf));
    std::vector<std::vector<int64_t>> cut(S + 1, std::vector<int64_t>(layers + 1, 0));
    best[0][0] = 0;
    for (int64_t s = 1; s <= S; ++s)
      for (int64_t l = s; l <= layers; ++l)
        for (int64_t k = s - 1; k < l; ++k) {
          double c = std::max(best[s - 1][k], prefix[l] - prefix[k]);
          if (c < best[s][l])
            best[s][l] = c, cut[s][l] = k;
        }
    for (int64_t s = S, l = layers; s > 0; --s) {
      int64_t k = cut[s][l];
      for (int64_t j = k; j < l; ++j)
        stageOfLayer[j] = s - 1;
      l = k;
    }
  }
  auto stageOf = [&](int64_t layer) -> int64_t {
    if (layer == none)
      return -1;
    return stageOfLayer[std::clamp<int64_t>(layer, 0, layers - 1)];
  };

  // 3. Stages of ops; parameter-free tensor ops follow their first user.
  for (Operation &op : body)
    if (!isa<ConstantOp, YieldOp>(op))
      setStage(&op, stageOf(layerOf.lookup(&op)));
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
    setStage(p, stageOf(paramLayer(p)));

  // 4. Transfers: one per (value, consumer stage), before the first consumer.
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
