//===- TrainVJP.cpp - vector-Jacobian products of `train` ops -------------===//
//
// Each differentiable op builds the cotangents of its operands from the
// cotangent `g` of its result, using only primitive `train` ops (elementwise,
// matmul, transpose, reshape, reductions), so that the backward pass needs
// no op the forward pass does not already have and fusion sees it all.
// Norms and attention recompute their statistics rather than keep them.
//
//===----------------------------------------------------------------------===//
#include "stretto/Dialect/Train/TrainOps.h"

#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace stretto::train;

namespace {
/// Small builder vocabulary for writing VJPs as formulas.
struct Emit {
  OpBuilder &b;
  Location loc;

  static ArrayRef<int64_t> shape(Value v) {
    return cast<RankedTensorType>(v.getType()).getShape();
  }
  static Type elem(Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); }
  static int64_t rank(Value v) { return shape(v).size(); }

  Value c(Value like, double x) {
    return b.create<ConstantOp>(loc, RankedTensorType::get({}, elem(like)), x);
  }
  Value add(Value x, Value y) { return b.create<AddOp>(loc, x, y); }
  Value sub(Value x, Value y) { return b.create<SubOp>(loc, x, y); }
  Value mul(Value x, Value y) { return b.create<MulOp>(loc, x, y); }
  Value div(Value x, Value y) { return b.create<DivOp>(loc, x, y); }
  Value neg(Value x) { return b.create<NegOp>(loc, x); }
  Value gt(Value x, Value y) { return b.create<GtOp>(loc, x, y); }
  Value matmul(Value x, Value y) { return b.create<MatmulOp>(loc, x, y); }
  Value swap(Value x) { return TransposeOp::swapLastTwo(b, loc, x); }
  Value reshape(Value x, ArrayRef<int64_t> s) {
    return b.create<ReshapeOp>(loc, RankedTensorType::get(s, elem(x)), x);
  }
  /// Sum over the last dim, kept as size 1: [..., N] -> [..., 1].
  Value sumLastKeep(Value x) {
    Value s = b.create<ReduceSumOp>(loc, x, ArrayRef<int64_t>{rank(x) - 1});
    SmallVector<int64_t> keep(shape(x));
    keep.back() = 1;
    return reshape(s, keep);
  }
  /// Sums `g` down to the shape of `like` (undoes NumPy broadcasting).
  Value reduceTo(Value g, Type like) {
    ArrayRef<int64_t> target = cast<RankedTensorType>(like).getShape();
    ArrayRef<int64_t> gs = shape(g);
    if (gs == target)
      return g;
    SmallVector<int64_t> dims;
    size_t off = gs.size() - target.size();
    for (size_t d = 0; d < gs.size(); ++d)
      if (d < off || (target[d - off] == 1 && gs[d] != 1))
        dims.push_back(d);
    Value s = dims.empty() ? g : b.create<ReduceSumOp>(loc, g, dims).getResult();
    return shape(s) == target ? s : reshape(s, target);
  }
};
} // namespace

//===--- elementwise binary ---------------------------------------------===//

void AddOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  grads.push_back(e.reduceTo(g, getLhs().getType()));
  grads.push_back(e.reduceTo(g, getRhs().getType()));
}

void SubOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  grads.push_back(e.reduceTo(g, getLhs().getType()));
  grads.push_back(e.reduceTo(e.neg(g), getRhs().getType()));
}

void MulOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  grads.push_back(e.reduceTo(e.mul(g, getRhs()), getLhs().getType()));
  grads.push_back(e.reduceTo(e.mul(g, getLhs()), getRhs().getType()));
}

void DivOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  grads.push_back(e.reduceTo(e.div(g, getRhs()), getLhs().getType()));
  // d(a/b)/db = -(a/b)/b
  grads.push_back(e.reduceTo(e.neg(e.div(e.mul(g, getResult()), getRhs())), getRhs().getType()));
}

// max/min: the gradient goes to rhs only where it strictly wins.
static void minMaxVJP(Emit &e, Value g, Value lhs, Value rhs, Value rhsWins,
                      SmallVectorImpl<Value> &grads) {
  grads.push_back(e.reduceTo(e.mul(g, e.sub(e.c(g, 1.0), rhsWins)), lhs.getType()));
  grads.push_back(e.reduceTo(e.mul(g, rhsWins), rhs.getType()));
}

void MaxOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  minMaxVJP(e, g, getLhs(), getRhs(), e.gt(getRhs(), getLhs()), grads);
}

void MinOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  minMaxVJP(e, g, getLhs(), getRhs(), e.gt(getLhs(), getRhs()), grads);
}

void PowOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  // d(a^p)/da = p * a^(p-1); d(a^p)/dp = a^p * log(a).
  Value pm1 = e.sub(getRhs(), e.c(getRhs(), 1.0));
  Value da = e.mul(getRhs(), b.create<PowOp>(getLoc(), getLhs(), pm1));
  grads.push_back(e.reduceTo(e.mul(g, da), getLhs().getType()));
  Value dp = e.mul(getResult(), b.create<LogOp>(getLoc(), getLhs()));
  grads.push_back(e.reduceTo(e.mul(g, dp), getRhs().getType()));
}

//===--- elementwise unary ----------------------------------------------===//

void NegOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  grads.push_back(Emit{b, getLoc()}.neg(g));
}

void ExpOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  grads.push_back(Emit{b, getLoc()}.mul(g, getResult()));
}

void LogOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  grads.push_back(Emit{b, getLoc()}.div(g, getInput()));
}

void SqrtOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  grads.push_back(e.div(e.mul(g, e.c(g, 0.5)), getResult()));
}

void RsqrtOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  // d(x^-1/2)/dx = -1/2 x^-3/2 = -1/2 r^3
  Value r = getResult();
  grads.push_back(e.mul(g, e.mul(e.c(g, -0.5), e.mul(r, e.mul(r, r)))));
}

void TanhOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  Value y = getResult();
  grads.push_back(e.mul(g, e.sub(e.c(g, 1.0), e.mul(y, y))));
}

void CosOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  // d cos(x)/dx = -sin(x) = -cos(pi/2 - x)
  Value s = b.create<CosOp>(getLoc(), e.sub(e.c(g, M_PI / 2), getInput()));
  grads.push_back(e.neg(e.mul(g, s)));
}

void GeluOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  // y' = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2), t = tanh(u),
  // u = k (x + 0.044715 x^3), k = sqrt(2/pi): one op, whose f32 form shares
  // gelu's exponential (Support/KernelMath.inc), so the backward kernel is
  // one exp, one division and a few multiplies per element.
  grads.push_back(Emit{b, getLoc()}.mul(g, b.create<GeluGradOp>(getLoc(), getInput())));
}

void SiluOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  // y = x s, s = 1 / (1 + e^-x): y' = s (1 + x (1 - s))
  Value x = getInput();
  Value s = e.div(e.c(x, 1.0), e.add(e.c(x, 1.0), b.create<ExpOp>(getLoc(), e.neg(x))));
  grads.push_back(e.mul(g, e.mul(s, e.add(e.c(x, 1.0), e.mul(x, e.sub(e.c(x, 1.0), s))))));
}

void ErfOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  // d erf(x)/dx = 2/sqrt(pi) e^(-x^2)
  Value x = getInput();
  Value d = e.mul(e.c(x, 2.0 / std::sqrt(M_PI)), b.create<ExpOp>(getLoc(), e.neg(e.mul(x, x))));
  grads.push_back(e.mul(g, d));
}

void ReluOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  grads.push_back(e.mul(g, e.gt(getInput(), e.c(g, 0.0))));
}

void RoundBf16Op::buildVJP(OpBuilder &, Value g, SmallVectorImpl<Value> &grads) {
  grads.push_back(g); // a cast: the gradient passes through
}

//===--- layout -----------------------------------------------------------===//

void MatmulOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  Value a = getLhs(), w = getRhs();
  grads.push_back(e.matmul(g, e.swap(w)));
  if (Emit::rank(w) == 2 && Emit::rank(a) > 2) {
    // rhs shared by the batch: fold the batch into rows, dW = A2ᵀ G2.
    int64_t k = Emit::shape(a).back(), n = Emit::shape(g).back();
    int64_t rows = cast<RankedTensorType>(a.getType()).getNumElements() / k;
    Value a2 = e.reshape(a, {rows, k}), g2 = e.reshape(g, {rows, n});
    grads.push_back(e.matmul(e.swap(a2), g2));
  } else {
    grads.push_back(e.matmul(e.swap(a), g));
  }
}

void TransposeOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  ArrayRef<int64_t> perm = getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (size_t d = 0; d < perm.size(); ++d)
    inverse[perm[d]] = d;
  grads.push_back(b.create<TransposeOp>(getLoc(), g, inverse));
}

void ReshapeOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<ReshapeOp>(getLoc(), getInput().getType(), g));
}

void BroadcastOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  grads.push_back(Emit{b, getLoc()}.reduceTo(g, getInput().getType()));
}

void ReduceSumOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  SmallVector<int64_t> keep(Emit::shape(getInput()));
  for (int64_t d : getDims())
    keep[d] = 1;
  Value kept = e.reshape(g, keep);
  grads.push_back(b.create<BroadcastOp>(getLoc(), getInput().getType(), kept));
}

void SliceOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<PadOp>(getLoc(), getInput().getType(), g, getAxis(), getOffset()));
}

void PadOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<SliceOp>(getLoc(), getInput().getType(), g, getAxis(), getOffset()));
}

void TransferOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  // The cotangent travels back the way the value came.
  grads.push_back(b.create<TransferOp>(getLoc(), g.getType(), g, getTo(), getFrom()));
}

//===--- model ops --------------------------------------------------------===//

// dx = y * (g - sum(g * y))  over the last dim.
static Value softmaxVJP(Emit &e, Value y, Value g) {
  return e.mul(y, e.sub(g, e.sumLastKeep(e.mul(g, y))));
}

void SoftmaxOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  grads.push_back(softmaxVJP(e, getResult(), g));
}

// LayerNorm (centered) and RmsNorm: one fused train.norm_grad (see its
// description) stacking dx as rows, dgamma and dbeta; then its parts.
static void normVJP(OpBuilder &b, Location loc, Value x, Value gamma, Value beta, Value g,
                    double eps, SmallVectorImpl<Value> &grads) {
  Emit e{b, loc};
  auto type = cast<RankedTensorType>(x.getType());
  const bool centered = static_cast<bool>(beta);
  const int64_t d = type.getShape().back(), rows = d ? type.getNumElements() / d : 0;
  Type elem = type.getElementType();
  Value all = b.create<NormGradOp>(loc, RankedTensorType::get({rows + (centered ? 2 : 1), d}, elem),
                                   x, gamma, g, Value(), b.getF64FloatAttr(eps),
                                   centered ? b.getUnitAttr() : UnitAttr());
  auto part = [&](int64_t offset, int64_t n, Type like) {
    Value s = b.create<SliceOp>(loc, RankedTensorType::get({n, d}, elem), all,
                                b.getI64IntegerAttr(0), b.getI64IntegerAttr(offset));
    return s.getType() == like ? s : e.reshape(s, cast<RankedTensorType>(like).getShape());
  };
  grads.push_back(part(0, rows, x.getType()));
  grads.push_back(part(rows, 1, gamma.getType()));
  if (centered)
    grads.push_back(part(rows + 1, 1, beta.getType()));
}

void LayerNormOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  normVJP(b, getLoc(), getInput(), getGamma(), getBeta(), g, getEps().convertToDouble(), grads);
}

void RmsNormOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  normVJP(b, getLoc(), getInput(), getGamma(), Value(), g, getEps().convertToDouble(), grads);
}

void AttentionOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  // One fused op (P recomputed per block, see train.attention_grad), then
  // its three parts.
  Emit e{b, getLoc()};
  auto type = cast<RankedTensorType>(getQ().getType());
  SmallVector<int64_t> stacked{3}, part{1};
  stacked.append(type.getShape().begin(), type.getShape().end());
  part.append(type.getShape().begin(), type.getShape().end());
  Value all = b.create<AttentionGradOp>(
      getLoc(), RankedTensorType::get(stacked, type.getElementType()), getQ(), getK(), getV(), g,
      getScaleAttr(), getCausalAttr(), UnitAttr());
  for (int64_t i = 0; i < 3; ++i) {
    Value s = b.create<SliceOp>(getLoc(), RankedTensorType::get(part, type.getElementType()), all,
                                b.getI64IntegerAttr(0), b.getI64IntegerAttr(i));
    grads.push_back(e.reshape(s, type.getShape()));
  }
}

void EmbeddingOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  grads.push_back(
      b.create<ScatterRowsOp>(getLoc(), getTable().getType(), getIds(), g));
  grads.push_back(Value());
}

void CrossEntropyOp::buildVJP(OpBuilder &b, Value g, SmallVectorImpl<Value> &grads) {
  Emit e{b, getLoc()};
  // d(mean NLL)/dlogits = (softmax(logits) - onehot(targets)) / N.
  Value logits = getLogits();
  int64_t positions = cast<RankedTensorType>(getTargets().getType()).getNumElements();
  Value p = b.create<SoftmaxOp>(getLoc(), logits.getType(), logits, false);
  Value onehot = b.create<OneHotOp>(getLoc(), logits.getType(), getTargets());
  Value scale = e.mul(g, e.c(g, 1.0 / static_cast<double>(positions)));
  grads.push_back(e.mul(e.sub(p, onehot), scale));
  grads.push_back(Value());
}
