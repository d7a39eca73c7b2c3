//===- BatchNewtonSchulz.cpp - train-batch-newton-schulz -------------------===//
//
// Muon (Jordan et al., 2024) orthogonalises each matrix parameter's update
// by its own Newton-Schulz iteration: five steps of three GEMMs on a matrix
// of a few million elements. A GPT's matrices come in a few shapes (per
// layer: QKV, the attention's projection, the MLP's two), so the
// iterations of one shape can share their launches: a batched GEMM over k
// matrices where there were k GEMMs. This pass makes those batches:
// train.newton_schulz ops that agree on everything but their input become
// one train.newton_schulz_batch, each result a slice of its stacked result.
//
// The optimizer writes the update parameter by parameter (its momentum,
// its iteration, its step), so a later parameter's input is made after an
// earlier parameter's result is read. The batch goes before the first
// reader of any of its results; an input made later moves there with the
// ops it needs, where that keeps every state's reads and writes in order
// and moves nothing that depends on a result of the batch.
//
//===----------------------------------------------------------------------===//
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

#include <map>
#include <tuple>

namespace stretto::train {
#define GEN_PASS_DEF_TRAINBATCHNEWTONSCHULZ
#include "Train/TrainPasses.h.inc"
} // namespace stretto::train

using namespace mlir;
using namespace stretto::train;

namespace {

struct BatchNewtonSchulzPass
    : public stretto::train::impl::TrainBatchNewtonSchulzBase<BatchNewtonSchulzPass> {
  using TrainBatchNewtonSchulzBase::TrainBatchNewtonSchulzBase;
  void runOnOperation() override;
};

int64_t elementsOf(NewtonSchulzOp ns) {
  return cast<RankedTensorType>(ns.getInput().getType()).getNumElements();
}

// What an op does to the model's state, for moving ops past each other:
// nothing (pure), reads or writes of one named variable, or something
// unknown (never moved past anything that is not pure).
struct Effect {
  enum Kind { Pure, Reads, Writes, Unknown } kind;
  std::string var;
};

Effect effectOf(Operation *op) {
  if (auto r = dyn_cast<ReadOp>(op))
    return {Effect::Reads, r.getVar().str()};
  if (auto w = dyn_cast<WriteOp>(op))
    return {Effect::Writes, w.getVar().str()};
  if (auto g = dyn_cast<AccumulatedGradOp>(op)) // (no op of the update writes a gradient sum)
    return {Effect::Reads, "grad:" + g.getVar().str()};
  if (op->getNumRegions() == 0 && isMemoryEffectFree(op))
    return {Effect::Pure, ""};
  return {Effect::Unknown, ""};
}

bool conflict(Operation *x, Operation *y) {
  Effect ex = effectOf(x), ey = effectOf(y);
  if (ex.kind == Effect::Pure || ey.kind == Effect::Pure)
    return false;
  if (ex.kind == Effect::Unknown || ey.kind == Effect::Unknown)
    return true;
  return ex.var == ey.var && (ex.kind == Effect::Writes || ey.kind == Effect::Writes);
}

// One block's batches: members are joined one at a time, each join moving
// the new member's input before the batch's first reader where needed.
class Batcher {
public:
  explicit Batcher(Block &block) : block(block) {}

  // The op of the block before which a batch of `members` must sit: the
  // first reader of any member's result (the terminator if none is read).
  Operation *anchorOf(ArrayRef<NewtonSchulzOp> members) {
    Operation *anchor = block.getTerminator();
    for (NewtonSchulzOp m : members)
      for (Operation *user : m.getResult().getUsers())
        if (Operation *u = block.findAncestorOpInBlock(*user); u && u->isBeforeInBlock(anchor))
          anchor = u;
    return anchor;
  }

  // Joins `n` to `batch` if its input can be made before the batch's
  // anchor: moves the ops that make it there and says true, or changes
  // nothing and says false.
  bool join(SmallVector<NewtonSchulzOp> &batch, NewtonSchulzOp n) {
    SmallVector<NewtonSchulzOp> members(batch);
    members.push_back(n);
    Operation *anchor = anchorOf(members);
    Operation *def = n.getInput().getDefiningOp();
    def = def ? block.findAncestorOpInBlock(*def) : nullptr;
    if (!def || def->isBeforeInBlock(anchor)) {
      batch.push_back(n);
      return true;
    }
    // The ops from the anchor on that the input needs...
    llvm::SetVector<Operation *> slice;
    SmallVector<Operation *> work{def};
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (op->isBeforeInBlock(anchor) || !slice.insert(op))
        continue;
      if (op->getNumRegions() != 0)
        return false;
      for (Value v : op->getOperands())
        if (Operation *d = v.getDefiningOp())
          if (Operation *in = block.findAncestorOpInBlock(*d))
            work.push_back(in);
    }
    // ... none of them a member or a reader of a member's result...
    llvm::SetVector<Operation *> readers;
    for (NewtonSchulzOp m : members)
      readers.insert(m.getOperation());
    for (size_t i = 0; i < readers.size(); ++i)
      for (Value r : readers[i]->getResults())
        for (Operation *user : r.getUsers())
          if (Operation *u = block.findAncestorOpInBlock(*user))
            readers.insert(u);
    for (Operation *op : slice)
      if (readers.contains(op))
        return false;
    // ... and each movable past the ops it would move before.
    for (Operation *op : slice)
      for (Operation *y = anchor; y != op; y = y->getNextNode())
        if (!slice.contains(y) && conflict(op, y))
          return false;
    SmallVector<Operation *> ordered(slice.begin(), slice.end());
    llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    for (Operation *op : ordered)
      op->moveBefore(anchor);
    batch.push_back(n);
    return true;
  }

  // Replaces the batch's ops by one train.newton_schulz_batch before their
  // anchor and a slice and a reshape per result.
  void emit(ArrayRef<NewtonSchulzOp> batch) {
    Operation *anchor = anchorOf(batch);
    NewtonSchulzOp first = batch.front();
    auto in = cast<RankedTensorType>(first.getInput().getType());
    const int64_t k = static_cast<int64_t>(batch.size()), m = in.getDimSize(0),
                  n = in.getDimSize(1);
    SmallVector<Location> locs;
    SmallVector<Value> inputs;
    for (NewtonSchulzOp ns : batch) {
      locs.push_back(ns.getLoc());
      inputs.push_back(ns.getInput());
    }
    OpBuilder b(anchor);
    Location loc = b.getFusedLoc(locs);
    auto stacked = RankedTensorType::get({k, m, n}, in.getElementType());
    auto one = RankedTensorType::get({1, m, n}, in.getElementType());
    auto op =
        b.create<NewtonSchulzBatchOp>(loc, stacked, inputs, first.getStepsAttr(), first.getAAttr(),
                                      first.getBAttr(), first.getCAttr(), first.getBf16Attr());
    Attribute stage = first->getAttr("stage");
    auto staged = [&](Operation *o) {
      if (stage)
        o->setAttr("stage", stage);
      return o;
    };
    staged(op);
    for (size_t i = 0; i < batch.size(); ++i) {
      NewtonSchulzOp ns = batch[i];
      auto slice = b.create<SliceOp>(ns.getLoc(), one, op.getResult(), 0, static_cast<int64_t>(i));
      auto matrix = b.create<ReshapeOp>(ns.getLoc(), in, slice.getResult());
      staged(slice);
      staged(matrix);
      ns.getResult().replaceAllUsesWith(matrix.getResult());
      ns.erase();
    }
  }

private:
  Block &block;
};

// Ops that may share a batch: the same matrix type, steps, coefficients,
// bf16 and stage, in one block.
using Key = std::tuple<Block *, const void *, int64_t, double, double, double, bool, const void *>;

Key keyOf(NewtonSchulzOp ns) {
  Attribute stage = ns->getAttr("stage");
  return Key(ns->getBlock(), ns.getInput().getType().getAsOpaquePointer(),
             static_cast<int64_t>(ns.getSteps()), ns.getA().convertToDouble(),
             ns.getB().convertToDouble(), ns.getC().convertToDouble(), ns.getBf16(),
             stage ? stage.getAsOpaquePointer() : nullptr);
}

void BatchNewtonSchulzPass::runOnOperation() {
  if (maxElements < 1) {
    getOperation().emitError() << "train-batch-newton-schulz: max-elements must be at least 1, got "
                               << static_cast<int64_t>(maxElements);
    return signalPassFailure();
  }
  // Each kind's ops in program order, the kinds in the order of their first op.
  std::map<Key, size_t> index;
  std::vector<SmallVector<NewtonSchulzOp>> kinds;
  getOperation().walk([&](NewtonSchulzOp ns) {
    auto [it, fresh] = index.emplace(keyOf(ns), kinds.size());
    if (fresh)
      kinds.emplace_back();
    kinds[it->second].push_back(ns);
  });
  for (SmallVector<NewtonSchulzOp> &pending : kinds) {
    Batcher batcher(*pending.front()->getBlock());
    while (pending.size() >= 2) {
      SmallVector<NewtonSchulzOp> batch{pending.front()}, rest;
      int64_t elements = elementsOf(pending.front());
      for (NewtonSchulzOp ns : llvm::drop_begin(pending))
        if (elements + elementsOf(ns) > maxElements || !batcher.join(batch, ns))
          rest.push_back(ns);
        else
          elements += elementsOf(ns);
      if (batch.size() >= 2)
        batcher.emit(batch);
      pending = std::move(rest);
    }
  }
}

} // namespace
