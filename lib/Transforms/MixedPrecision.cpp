//===- MixedPrecision.cpp - train-mixed-precision --------------------------===//
//
// Decides which of the step's values are stored in bf16 and makes that
// explicit: a `train.round_bf16` after each such producer, so that every
// executor (the reference one included) rounds at the same points and the
// check against the reference stays exact about where rounding happens.
// Arithmetic stays f32 (the tensor types are the compute type).
//
// Stored in bf16 (rounded):
//   - activations and their gradients: the results of the step's compute
//     ops that depend on the batch (a train.input);
//   - the operands of every GEMM: each weight (or float input) a matmul
//     reads gets one bf16 copy per step (the master stays f32 for
//     everything else: biases, norms' gains, the embedding gather, the
//     optimizer).
// Kept in f32:
//   - parameters, optimizer states and everything of the update and outer
//     phases (this pass adds no rounding there; it only marks Muon's
//     Newton-Schulz iteration `bf16`, whose matrices are then stored in
//     bf16 and multiplied on bf16 tensor cores);
//   - reductions and statistics: reduce_sum (bias gradients), scatter_rows
//     (the embedding's gradient), cross_entropy (the loss), norm_grad's
//     gain and bias rows, stage sums, every scalar;
//   - values the step hands on (train.grad, train.write, train.yield), so
//     the weight gradients that matmuls produce stay f32;
//   - a matmul's product that is only read by bias adds (a vector of its
//     columns added): the linear layer's output is the sum, rounded once,
//     as a GEMM's bias epilogue makes it (kernel-gemm-epilogue);
//   - a matmul's product that is only multiplied by a gelu_grad, and that
//     gelu_grad (a GELU's backward): the product of the two is rounded
//     once, as a GEMM's DGELU epilogue makes it (kernel-gemm-epilogue);
//   - a linear layer's output (product or bias sum) as a GELU reads it:
//     the GELU of the f32 sum is rounded, as a GEMM's GELU_AUX epilogue
//     makes it; the sum's other readers (the backward) read it rounded.
// The fused ops (softmax, norms, attention) compute their statistics in f32
// inside the op; only their outputs are rounded, and attention's products
// read its weights P (and the backward's dS) rounded (`bf16` on
// train.attention and train.attention_grad: they are GEMM operands, as
// FlashAttention multiplies them in 16 bits; the forward rounds them where
// its online softmax makes them, 32 keys at a time). View ops (reshape,
// transpose, slice, broadcast, pad, transfer) move values unchanged and
// are never rounded themselves, except a slice out of norm_grad's packed
// result (the activation gradient rows; the other rows stay f32).
//
//===----------------------------------------------------------------------===//
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#include "llvm/ADT/DenseSet.h"

namespace stretto::train {
#define GEN_PASS_DEF_TRAINMIXEDPRECISION
#include "Train/TrainPasses.h.inc"
} // namespace stretto::train

using namespace mlir;
using namespace stretto::train;

namespace {

bool isView(Operation *op) {
  return isa<ReshapeOp, TransposeOp, SliceOp, BroadcastOp, PadOp, TransferOp>(op);
}

/// Ops whose results are reductions, statistics or hand-offs: stored f32.
bool keepsF32(Operation *op) {
  return isa<ReadOp, InputOp, ConstantOp, StepCountOp, ReduceSumOp, ScatterRowsOp, CrossEntropyOp,
             NormGradOp, StageSumOp, NewtonSchulzOp, NewtonSchulzBatchOp, DescendOp>(op);
}

/// Ops whose result is bf16-exact when their float operands are: they pick
/// or compare values (or make 0/1) without rounding.
bool keepsExact(Operation *op) {
  return isView(op) || isa<NegOp, ReluOp, MaxOp, MinOp, GtOp, OneHotOp, RoundBf16Op>(op);
}

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

bool isScalar(Value v) { return cast<RankedTensorType>(v.getType()).getRank() == 0; }

/// A constant whose every value is a bf16.
bool exactConstant(ConstantOp c) {
  auto dense = dyn_cast<DenseFPElementsAttr>(c.getValue());
  if (!dense)
    return false;
  for (APFloat f : dense.getValues<APFloat>()) {
    bool lost = false;
    APFloat r = f;
    r.convert(APFloat::BFloat(), APFloat::rmNearestTiesToEven, &lost);
    if (lost)
      return false;
  }
  return true;
}

struct MixedPrecisionPass
    : public stretto::train::impl::TrainMixedPrecisionBase<MixedPrecisionPass> {
  using TrainMixedPrecisionBase::TrainMixedPrecisionBase;
  void runOnOperation() override;

  llvm::DenseSet<Value> handedOn, batch, exact;

  RoundBf16Op roundAfter(OpBuilder &b, Value v, Operation *stageOf) {
    if (Operation *def = v.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(v.getParentBlock());
    auto r = b.create<RoundBf16Op>(v.getLoc(), v);
    setStage(r, getStage(stageOf));
    exact.insert(r);
    if (batch.contains(v))
      batch.insert(r);
    return r;
  }
  /// The values the step hands on, and (backwards through views) what they
  /// are views of.
  void findHandedOn(Block &body);
  /// One bf16 copy of each weight (or float input) that a matmul reads
  /// (through views).
  void copyGemmWeights(Block &body, OpBuilder &b);
  /// The producers of activations and their gradients, in program order.
  void roundActivations(Block &body, OpBuilder &b);
  /// Whatever a matmul still reads unrounded (the safety net).
  void roundGemmOperands(Block &body, OpBuilder &b);
};

void MixedPrecisionPass::findHandedOn(Block &body) {
  for (Operation &op : llvm::reverse(body)) {
    if (isa<GradOp, WriteOp, YieldOp, StageSumOp>(op))
      for (Value v : op.getOperands())
        handedOn.insert(v);
    if (isView(&op) && handedOn.contains(op.getResult(0)))
      handedOn.insert(op.getOperand(0));
  }
}

/// A matmul whose every reader adds a vector of its result's columns to
/// it (a linear layer's bias): the product is not rounded before the sum.
static bool onlyBiasAdded(Operation *op) {
  if (!isa<MatmulOp>(op) || op->getResult(0).use_empty())
    return false;
  Value r = op->getResult(0);
  int64_t cols = cast<RankedTensorType>(r.getType()).getShape().back();
  return llvm::all_of(r.getUsers(), [&](Operation *u) {
    if (!isa<AddOp>(u) || u->getOperand(0) == u->getOperand(1))
      return false;
    Value other = u->getOperand(0) == r ? u->getOperand(1) : u->getOperand(0);
    auto t = cast<RankedTensorType>(other.getType());
    return t.getRank() == 1 && t.getDimSize(0) == cols;
  });
}

/// The other operand of `mul` (a train.mul of two same-typed operands, one
/// of them v), or null.
static Value otherFactor(Operation *mul, Value v) {
  if (!isa<MulOp>(mul) || mul->getOperand(0) == mul->getOperand(1) ||
      mul->getOperand(0).getType() != mul->getOperand(1).getType())
    return nullptr;
  return mul->getOperand(0) == v ? mul->getOperand(1) : mul->getOperand(0);
}

/// Whether `op`, an Op with readers, is only multiplied by values whose
/// producers satisfy `factor`.
template <typename Op>
static bool onlyMultipliedBy(Operation *op, llvm::function_ref<bool(Operation *)> factor) {
  if (!isa<Op>(op) || op->getResult(0).use_empty())
    return false;
  Value r = op->getResult(0);
  return llvm::all_of(r.getUsers(), [&](Operation *u) {
    Value other = otherFactor(u, r);
    return other && other.getDefiningOp() && factor(other.getDefiningOp());
  });
}

/// A matmul whose every reader multiplies it by a gelu_grad (a GELU's
/// backward: the gradient of its output times GELU's derivative): the
/// product is not rounded before that product.
static bool onlyGeluGradScaled(Operation *op) {
  return onlyMultipliedBy<MatmulOp>(op, [](Operation *f) { return isa<GeluGradOp>(f); });
}

/// A gelu_grad whose every reader multiplies it by such a matmul's product:
/// not rounded either, so that the product is rounded once, as a GEMM's
/// DGELU epilogue makes it (kernel-gemm-epilogue).
static bool onlyScalesGemms(Operation *op) {
  return onlyMultipliedBy<GeluGradOp>(op, onlyGeluGradScaled);
}

/// A linear layer's output: a matmul's product, or its sum with a bias
/// that the product alone is added to (onlyBiasAdded).
static bool isLinearOutput(Operation *op) {
  if (isa<MatmulOp>(op))
    return true;
  if (!isa<AddOp>(op))
    return false;
  return llvm::any_of(op->getOperands(), [](Value v) {
    return v.getDefiningOp() && onlyBiasAdded(v.getDefiningOp());
  });
}

/// Whether every use of v reaches a matmul operand through views only.
static bool onlyFeedsMatmuls(Value v) {
  for (Operation *u : v.getUsers()) {
    if (isa<MatmulOp>(u))
      continue;
    if (!isView(u) || !onlyFeedsMatmuls(u->getResult(0)))
      return false;
  }
  return !v.use_empty();
}

void MixedPrecisionPass::copyGemmWeights(Block &body, OpBuilder &b) {
  for (Operation *read : llvm::to_vector(llvm::make_pointer_range(body))) {
    if (!isa<ReadOp, InputOp>(read))
      continue;
    Value w = read->getResult(0);
    SmallVector<OpOperand *> gemmUses;
    for (OpOperand &use : w.getUses()) {
      Operation *u = use.getOwner();
      if (isa<MatmulOp>(u) || (isView(u) && onlyFeedsMatmuls(u->getResult(0))))
        gemmUses.push_back(&use);
    }
    if (gemmUses.empty() || !isFloatTensor(w))
      continue;
    RoundBf16Op copy = roundAfter(b, w, read);
    for (OpOperand *use : gemmUses)
      use->set(copy);
  }
}

void MixedPrecisionPass::roundActivations(Block &body, OpBuilder &b) {
  for (Operation *op : llvm::to_vector(llvm::make_pointer_range(body))) {
    bool fromBatch = isa<InputOp>(op), allExact = true;
    for (Value v : op->getOperands()) {
      fromBatch |= batch.contains(v);
      if (isFloatTensor(v) && !exact.contains(v))
        allExact = false;
    }
    for (Value r : op->getResults())
      if (fromBatch)
        batch.insert(r);
    if (auto c = dyn_cast<ConstantOp>(op); c && exactConstant(c))
      exact.insert(c.getResult());
    if (isa<RoundBf16Op>(op) || (keepsExact(op) && allExact)) {
      for (Value r : op->getResults())
        exact.insert(r);
      continue;
    }
    // A slice of norm_grad's packed result: the activation-gradient rows
    // are rounded here (the gain and bias rows stay f32).
    bool packedRows =
        isa<SliceOp>(op) && isa_and_nonnull<NormGradOp>(op->getOperand(0).getDefiningOp());
    if ((isView(op) && !packedRows) || keepsF32(op) || isa<GradOp, WriteOp, YieldOp>(op) ||
        onlyBiasAdded(op) || onlyGeluGradScaled(op) || onlyScalesGemms(op))
      continue;
    // A GELU of a linear layer's output reads the f32 sum, as cuBLASLt's
    // GELU epilogue applies it before rounding (kernel-gemm-epilogue's
    // gelu_aux); the other readers (the GELU's backward) read the rounded
    // sum, which the epilogue stores as its auxiliary output.
    const bool geluReadsSum = isLinearOutput(op);
    for (Value r : op->getResults()) {
      if (!isFloatTensor(r) || isScalar(r) || !fromBatch || handedOn.contains(r) || r.use_empty())
        continue;
      SmallVector<OpOperand *> rounded;
      for (OpOperand &use : r.getUses())
        if (!(geluReadsSum && isa<GeluOp>(use.getOwner())))
          rounded.push_back(&use);
      // Nothing to round, or already rounded (the pass ran before).
      if (llvm::all_of(rounded, [](OpOperand *u) { return isa<RoundBf16Op>(u->getOwner()); }))
        continue;
      RoundBf16Op round = roundAfter(b, r, op);
      for (OpOperand *use : rounded)
        use->set(round);
    }
  }
}

void MixedPrecisionPass::roundGemmOperands(Block &body, OpBuilder &b) {
  llvm::DenseMap<Value, Value> rounded;
  for (MatmulOp mm : llvm::to_vector(body.getOps<MatmulOp>())) {
    for (OpOperand &use : mm->getOpOperands()) {
      Value v = use.get();
      if (exact.contains(v))
        continue;
      Value &r = rounded[v];
      if (!r)
        r = roundAfter(b, v, v.getDefiningOp() ? v.getDefiningOp() : mm.getOperation());
      use.set(r);
    }
  }
}

void MixedPrecisionPass::runOnOperation() {
  ModelOp model = getOperation();
  StepOp step = model.getStep();
  if (!step || step.getBody().empty()) {
    model.emitError() << "train-mixed-precision needs the model's train.step phase";
    return signalPassFailure();
  }
  Block &body = step.getBody().front();
  bool hasGrad = !body.getOps<GradOp>().empty();
  bool readsParams = llvm::any_of(body.getOps<ReadOp>(), [&](ReadOp r) {
    return isa_and_nonnull<ParamOp>(SymbolTable::lookupSymbolIn(model, r.getVarAttr()));
  });
  if (readsParams && !hasGrad) {
    step.emitError() << "train-mixed-precision runs after train-autodiff (the backward's "
                        "activation gradients are stored in bf16 too); this step has no "
                        "train.grad";
    return signalPassFailure();
  }
  // The tensor types are the compute type: f32. A bf16 or f64 model is
  // refused (it has no f32 to keep).
  WalkResult typed = step.walk([&](Operation *op) {
    for (Value v : op->getResults())
      if (isFloatTensor(v) && !cast<RankedTensorType>(v.getType()).getElementType().isF32()) {
        op->emitError() << "train-mixed-precision expects f32 tensors (the compute type; bf16 "
                           "is the storage it assigns), found "
                        << v.getType();
        return WalkResult::interrupt();
      }
    return WalkResult::advance();
  });
  if (typed.wasInterrupted())
    return signalPassFailure();

  OpBuilder b(&getContext());
  findHandedOn(body);
  copyGemmWeights(body, b);
  roundActivations(body, b);
  roundGemmOperands(body, b);
  // Muon's orthogonalisation on bf16 tensor cores (its matrices rounded to
  // bf16, the products summed in f32), as Muon's reference runs it.
  model.walk([&](NewtonSchulzOp ns) { ns.setBf16(true); });
  model.walk([&](NewtonSchulzBatchOp ns) { ns.setBf16(true); });
  model.walk([&](AttentionOp a) { a.setBf16(true); });
  model.walk([&](AttentionGradOp a) { a.setBf16(true); });
  // The plan records it (the runtime's GEMMs then take bf16 operands).
  NamedAttrList trainer(model.getTrainerAttr() ? model.getTrainerAttr()
                                               : DictionaryAttr::get(&getContext()));
  trainer.set("precision", StringAttr::get(&getContext(), "bf16"));
  model.setTrainerAttr(trainer.getDictionary(&getContext()));
}

} // namespace
