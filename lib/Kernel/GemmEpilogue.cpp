//===- GemmEpilogue.cpp - kernel-gemm-epilogue ----------------------------===//
//
// Moves a bias add, or a multiplication by GELU's derivative, that every
// reader of a GEMM makes first into the GEMM (`bias`, `dgelu`: cuBLASLt's
// BIAS and DGELU epilogues on the GPU), and drops the readers left doing
// nothing; a GELU after a GEMM, with the sum kept for its backward
// (`gelu_aux`: GELU_AUX), and a bias gradient beside a weight gradient
// (`bias_grad`: BGRADA) become one GEMM with a packed result (see
// KernelPasses.td).
//
//===----------------------------------------------------------------------===//
#include "stretto/Kernel/Emitter.h"
#include "stretto/Kernel/Passes.h"

#include "mlir/IR/Dominance.h"

namespace stretto::kernel {
#define GEN_PASS_DEF_KERNELGEMMEPILOGUE
#include "Kernel/KernelPasses.h.inc"
} // namespace stretto::kernel

using namespace mlir;
using namespace stretto;
using kernel::sameStage;

namespace {

/// What one reader of a GEMM makes of the product first, that the GEMM can
/// make itself: `op` (a kernel.add of a vector: the bias; a kernel.mul by
/// gelu_grad(x): DGELU) in the body of `kernel`, whose block argument
/// `gemmArg` is the product; `operand` (the vector, or x) is the kernel's
/// input `operandArg`. `scale`: the gelu_grad, erased with the mul when
/// nothing else reads it.
struct Fold {
  enum Kind { Bias, DGelu } kind = Bias;
  kernel::ElementwiseOp kernel;
  unsigned gemmArg = 0, operandArg = 0;
  Operation *op = nullptr, *scale = nullptr;
  Value operand;
};

/// The block argument of `body` that `v` is (not `not`), or null.
BlockArgument argOf(Value v, Block &body, unsigned other) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || arg.getOwner() != &body || arg.getArgNumber() == other)
    return nullptr;
  return arg;
}

/// The fold `use`'s reader allows on the GEMM's result of `type`, if any:
/// the product's one use in its body adds a vector of its N columns (f32,
/// not stored in bf16: the epilogue reads f32), or multiplies it by
/// gelu_grad of another input of the result's type.
std::optional<Fold> foldOf(OpOperand &use, RankedTensorType type) {
  auto e = dyn_cast<kernel::ElementwiseOp>(use.getOwner());
  if (!e || e->getNumResults() != 1 || e.getResultType().getShape() != type.getShape() ||
      !sameStage(e, use.get().getDefiningOp()) ||
      e->getBlock() != use.get().getDefiningOp()->getBlock())
    return std::nullopt;
  if (llvm::count(e.getInputs(), use.get()) != 1)
    return std::nullopt;
  Block &body = e.getBodyBlock();
  Fold f;
  f.kernel = e, f.gemmArg = use.getOperandNumber();
  // (a product rounded before its add or scaling keeps its rounding point:
  // not folded; train-mixed-precision rounds neither a bias-added product
  // nor one scaled by gelu_grad)
  Value product = body.getArgument(f.gemmArg);
  if (!product.hasOneUse())
    return std::nullopt;
  f.op = *product.getUsers().begin();
  if (!isa<kernel::AddOp, kernel::MulOp>(f.op) || f.op->getOperand(0) == f.op->getOperand(1))
    return std::nullopt;
  Value other = f.op->getOperand(0) == product ? f.op->getOperand(1) : f.op->getOperand(0);
  BlockArgument arg;
  if (isa<kernel::AddOp>(f.op)) {
    arg = argOf(other, body, f.gemmArg);
    if (!arg)
      return std::nullopt;
    auto bt = cast<RankedTensorType>(e.getInputs()[arg.getArgNumber()].getType());
    if (bt.getRank() != 1 || bt.getDimSize(0) != type.getShape().back() ||
        bt.getElementType() != type.getElementType() ||
        kernel::storedInBf16(e.getInputs()[arg.getArgNumber()]))
      return std::nullopt;
  } else {
    f.kind = Fold::DGelu;
    f.scale = other.getDefiningOp<kernel::GeluGradOp>();
    if (!f.scale)
      return std::nullopt;
    arg = argOf(f.scale->getOperand(0), body, f.gemmArg);
    if (!arg || e.getInputs()[arg.getArgNumber()].getType() != type)
      return std::nullopt;
  }
  f.operandArg = arg.getArgNumber();
  f.operand = e.getInputs()[f.operandArg];
  return f;
}

/// Makes `bias` available at `gemm`: it is already, or it is read from
/// state (a train.read: no operands) after it with no write in between,
/// and the read moves up.
bool availableAt(Value bias, Operation *gemm, DominanceInfo &dom) {
  if (dom.properlyDominates(bias, gemm))
    return true;
  Operation *def = bias.getDefiningOp();
  if (!def || !isa<train::ReadOp>(def) || def->getBlock() != gemm->getBlock())
    return false;
  for (Operation *op = gemm->getNextNode(); op && op != def; op = op->getNextNode())
    if (isa<train::WriteOp>(op))
      return false;
  def->moveBefore(gemm);
  return true;
}

/// A kernel that now hands its one operand on unchanged: yields it, or
/// yields its rounding where the operand is rounded and stored in bf16
/// already and the kernel stores in bf16 too.
bool handsOn(kernel::ElementwiseOp e, kernel::GemmOp gemm) {
  if (e.getInputs().size() != 1)
    return false;
  Block &body = e.getBodyBlock();
  Value y = cast<kernel::YieldOp>(body.getTerminator()).getValues()[0];
  if (y == body.getArgument(0))
    return body.getOperations().size() == 1 && !e.getStoreBf16() && !gemm.getStoreBf16();
  auto r = y.getDefiningOp<kernel::RoundBf16Op>();
  return r && r.getOperand() == body.getArgument(0) && body.getOperations().size() == 2 &&
         e.getStoreBf16() && gemm.getStoreBf16();
}

/// The train.reduce_sum (same block and stage as `g`) that sums b, or
/// another reshape of the same values with b's N columns last, over every
/// dim but the last (the [rows, N] view's column sums): the bias gradient
/// beside the weight gradient `g` makes from the same dy.
train::ReduceSumOp columnSumsOfB(kernel::GemmOp g) {
  Value root = g.getB();
  const int64_t n = cast<RankedTensorType>(root.getType()).getShape().back();
  while (auto r = root.getDefiningOp<train::ReshapeOp>())
    root = r.getInput();
  SmallVector<Value> views{root};
  for (size_t i = 0; i < views.size(); ++i)
    for (Operation *u : views[i].getUsers()) {
      if (auto r = dyn_cast<train::ReshapeOp>(u)) {
        views.push_back(r.getResult());
        continue;
      }
      auto sum = dyn_cast<train::ReduceSumOp>(u);
      if (!sum || sum->getBlock() != g->getBlock() || !sameStage(sum, g))
        continue;
      auto in = cast<RankedTensorType>(sum.getInput().getType());
      if (in.getShape().back() != n)
        continue;
      ArrayRef<int64_t> dims = sum.getDims();
      bool allButLast = static_cast<int64_t>(dims.size()) == in.getRank() - 1;
      for (size_t d = 0; d < dims.size() && allButLast; ++d)
        allButLast = dims[d] == static_cast<int64_t>(d);
      if (allButLast)
        return sum;
    }
  return nullptr;
}

/// Whether every user of `op` comes after `at` in their block.
bool usedAfter(Operation *op, Operation *at) {
  return llvm::all_of(op->getUsers(), [&](Operation *u) {
    return u->getBlock() == at->getBlock() && at->isBeforeInBlock(u);
  });
}

struct GemmEpiloguePass : stretto::kernel::impl::KernelGemmEpilogueBase<GemmEpiloguePass> {
  void runOnOperation() override {
    DominanceInfo dom(getOperation());
    SmallVector<kernel::GemmOp> gemms;
    getOperation().walk([&](kernel::GemmOp g) { gemms.push_back(g); });
    for (kernel::GemmOp g : gemms) {
      fold(g, dom);
      if (!foldGeluAux(g)) // (each erases g when it folds)
        foldBiasGrad(g);
    }
  }

  /// Whether `e` is a kernel.elementwise reading only v (same block and
  /// stage as `at`) whose body is `ops` applied to it in turn, then yielded.
  static bool onlyApplies(Operation *user, Value v, Operation *at, ArrayRef<StringRef> ops) {
    auto e = dyn_cast<kernel::ElementwiseOp>(user);
    if (!e || e.getInputs().size() != 1 || e.getInputs()[0] != v ||
        e->getBlock() != at->getBlock() || !sameStage(e, at))
      return false;
    Block &body = e.getBodyBlock();
    if (body.getOperations().size() != ops.size() + 1)
      return false;
    Value cur = body.getArgument(0);
    auto op = body.begin();
    for (StringRef name : ops) {
      if (op->getName().getStringRef() != name || op->getNumOperands() != 1 ||
          op->getOperand(0) != cur)
        return false;
      cur = op->getResult(0);
      ++op;
    }
    return cast<kernel::YieldOp>(body.getTerminator()).getValues()[0] == cur;
  }

  /// A linear layer's sum (a GEMM, with its bias or none, f32, not stored
  /// rounded) whose readers are one kernel applying GELU to it (and rounding
  /// the result to bf16, stored so) and others that read the sum itself
  /// (f32: the GELU's backward) or, where the GELU's result is rounded, only
  /// its rounding (stored so): one GEMM with `gelu_aux` makes both, its
  /// result [2, ...] holding gelu(sum) and the sum (cuBLASLt's GELU_AUX
  /// epilogue); the GELU's result and the sum are views of it, and the
  /// GELU kernel and the roundings go.
  bool foldGeluAux(kernel::GemmOp g) {
    auto type = cast<RankedTensorType>(g.getType());
    if (g.getDgelu() || g.getBiasGrad() || g.getGeluAux() || g.getStoreBf16() ||
        !type.getElementType().isF32())
      return false;
    Value sum = g.getResult();
    Operation *gelu = nullptr;
    bool rounded = false;
    for (Operation *u : sum.getUsers()) {
      const bool r = onlyApplies(u, sum, g, {"kernel.gelu", "kernel.round_bf16"});
      if (!r && !onlyApplies(u, sum, g, {"kernel.gelu"}))
        continue;
      if (gelu && gelu != u)
        return false; // (two GELU kernels of one sum)
      gelu = u, rounded = r;
    }
    if (!gelu || rounded != cast<kernel::ElementwiseOp>(gelu).getStoreBf16())
      return false;
    SmallVector<Operation *> others;
    for (Operation *u : sum.getUsers())
      if (u != gelu && !llvm::is_contained(others, u))
        others.push_back(u);
    if (others.empty())
      return false; // (nothing reads the sum: a plain GELU after the GEMM)
    // Where the GELU's result is rounded, the sum stored beside it is too:
    // its other readers may only round it first (and store it so).
    if (rounded && !llvm::all_of(others, [&](Operation *u) {
          return onlyApplies(u, sum, g, {"kernel.round_bf16"}) &&
                 cast<kernel::ElementwiseOp>(u).getStoreBf16();
        }))
      return false;
    OpBuilder b(g);
    SmallVector<int64_t> shape{2};
    shape.append(type.getShape().begin(), type.getShape().end());
    auto packed = b.create<kernel::GemmOp>(
        g.getLoc(), RankedTensorType::get(shape, type.getElementType()), g.getA(), g.getB(),
        g.getBias(), Value(), g.getTransposeAAttr(), g.getTransposeBAttr(), g.getAlphaAttr(),
        rounded ? b.getUnitAttr() : UnitAttr(), UnitAttr(), b.getUnitAttr());
    auto staged = [&](Operation *op) {
      if (Attribute stage = g->getAttr("stage"))
        op->setAttr("stage", stage);
      return op->getResult(0);
    };
    staged(packed);
    SmallVector<int64_t> one{1};
    one.append(type.getShape().begin(), type.getShape().end());
    auto half = [&](int64_t at) { // gelu(sum) (0) or the sum (1), as type
      Value row = staged(b.create<train::SliceOp>(g.getLoc(),
                                                  RankedTensorType::get(one, type.getElementType()),
                                                  packed.getResult(), 0, at));
      return staged(b.create<train::ReshapeOp>(g.getLoc(), type, row));
    };
    Value y = half(0), s = half(1);
    gelu->getResult(0).replaceAllUsesWith(y);
    gelu->erase();
    for (Operation *u : others) {
      if (rounded) {
        u->getResult(0).replaceAllUsesWith(s);
        u->erase();
      }
    }
    if (!rounded)
      sum.replaceAllUsesWith(s);
    g.erase();
    return true;
  }

  /// A weight gradient op(a) b (2-D, b = dy not transposed, f32, no other
  /// epilogue) whose b is also summed over its rows by a train.reduce_sum
  /// (the layer's bias gradient) makes those sums as its result's extra
  /// row (`bias_grad`); the product and the sums are views of it.
  void foldBiasGrad(kernel::GemmOp g) {
    auto a = cast<RankedTensorType>(g.getA().getType());
    auto type = cast<RankedTensorType>(g.getType());
    if (g.getBias() || g.getDgelu() || g.getBiasGrad() || g.getStoreBf16() || g.getTransposeB() ||
        g.getAlpha().convertToDouble() != 1.0 || a.getRank() != 2 || type.getRank() != 2 ||
        !type.getElementType().isF32())
      return;
    train::ReduceSumOp sum = columnSumsOfB(g);
    if (!sum)
      return;
    // Made where the later of the two was, if the earlier one's readers
    // all come after that.
    Operation *at = g->isBeforeInBlock(sum) ? sum.getOperation() : g.getOperation();
    Operation *earlier = at == g.getOperation() ? sum.getOperation() : g.getOperation();
    if (!usedAfter(earlier, at))
      return;
    OpBuilder b(at);
    const int64_t m = type.getDimSize(0), n = type.getDimSize(1);
    auto packed = b.create<kernel::GemmOp>(
        g.getLoc(), RankedTensorType::get({m + 1, n}, type.getElementType()), g.getA(), g.getB(),
        Value(), Value(), g.getTransposeAAttr(), UnitAttr(), g.getAlphaAttr(), UnitAttr(),
        b.getUnitAttr(), UnitAttr());
    if (Attribute stage = g->getAttr("stage"))
      packed->setAttr("stage", stage);
    auto view = [&](Operation *op) {
      if (Attribute stage = g->getAttr("stage"))
        op->setAttr("stage", stage);
      return op->getResult(0);
    };
    Value product = view(b.create<train::SliceOp>(g.getLoc(), type, packed.getResult(), 0, 0));
    Value row = view(b.create<train::SliceOp>(sum.getLoc(),
                                              RankedTensorType::get({1, n}, type.getElementType()),
                                              packed.getResult(), 0, m));
    Value sums = view(b.create<train::ReshapeOp>(sum.getLoc(), sum.getType(), row));
    g.getResult().replaceAllUsesWith(product);
    sum.getResult().replaceAllUsesWith(sums);
    Value input = sum.getInput();
    sum.erase();
    g.erase();
    // (the reshapes that only fed the sum go too)
    while (auto r = input.getDefiningOp<train::ReshapeOp>()) {
      if (!r->use_empty())
        break;
      input = r.getInput();
      r.erase();
    }
  }

  void fold(kernel::GemmOp g, DominanceInfo &dom) {
    if (g.getBias() || g.getDgelu() || g.getResult().use_empty())
      return;
    auto type = cast<RankedTensorType>(g.getType());
    SmallVector<Fold> folds;
    for (OpOperand &use : g.getResult().getUses()) {
      std::optional<Fold> f = foldOf(use, type);
      if (!f || (!folds.empty() &&
                 (f->kind != folds.front().kind || f->operand != folds.front().operand)))
        return;
      folds.push_back(*f);
    }
    if (!availableAt(folds.front().operand, g, dom))
      return;
    if (folds.front().kind == Fold::Bias)
      g.getBiasMutable().assign(folds.front().operand);
    else
      g.getDgeluMutable().assign(folds.front().operand);
    // Each reader reads the sum (or the scaled product) where it read the
    // product.
    for (Fold &f : folds) {
      Block &body = f.kernel.getBodyBlock();
      f.op->getResult(0).replaceAllUsesWith(body.getArgument(f.gemmArg));
      f.op->erase();
      if (f.scale && f.scale->use_empty())
        f.scale->erase();
      if (body.getArgument(f.operandArg).use_empty()) {
        f.kernel.getInputsMutable().erase(f.operandArg);
        body.eraseArgument(f.operandArg);
      }
    }
    // A result each reader rounds first is stored rounded (kernel-bf16-storage's
    // rule; in a bf16 plan a linear layer's output is its rounded sum, a
    // GELU's input gradient its rounded scaled product).
    if (!g.getStoreBf16() && type.getElementType().isF32() &&
        kernel::roundedFirstByEveryReader(g.getResult()))
      g.setStoreBf16(true);
    for (Fold &f : folds) {
      if (handsOn(f.kernel, g)) {
        f.kernel.getResult(0).replaceAllUsesWith(g.getResult());
        f.kernel.erase();
      }
    }
  }
};

} // namespace
