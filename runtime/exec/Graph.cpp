//===- Graph.cpp - MLIR-free training-step graph --------------------------===//
//
// Shape helpers, op names, structural validation, deterministic state
// initialisation and bf16 rounding. Everything here must give bit-identical
// results on every host, so no library RNG and no unspecified evaluation
// order.
//
//===----------------------------------------------------------------------===//

#include "stretto/Runtime/Graph.h"
#include "stretto/Runtime/OpTable.h"
#include "stretto/Support/Broadcast.h"
#include "stretto/Support/KernelMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace stretto {

int64_t numElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shapeToString(const Shape &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::BF16:
    return "bf16";
  case DType::F64:
    return "f64";
  case DType::I32:
    return "i32";
  }
  return "?";
}

namespace {
struct OpRow {
  OpKind kind;
  const char *name;
  int arity;
};
constexpr OpRow kOps[] = {
#define STRETTO_OP(Kind, name, arity, cls, fn) {OpKind::Kind, name, arity},
#include "stretto/Ops.def"
#undef STRETTO_OP
};
// The enum is declared from the same table, so row i is enumerator i.
const OpRow &row(OpKind k) { return kOps[static_cast<size_t>(k)]; }
} // namespace

const char *opKindName(OpKind k) { return row(k).name; }
int opArity(OpKind k) { return row(k).arity; }
bool opKindFromName(const std::string &name, OpKind &kind) {
  for (const OpRow &r : kOps)
    if (name == r.name) {
      kind = r.kind;
      return true;
    }
  return false;
}
const std::vector<OpKind> &allOpKinds() {
  static const std::vector<OpKind> all = [] {
    std::vector<OpKind> v;
    for (const OpRow &r : kOps)
      v.push_back(r.kind);
    return v;
  }();
  return all;
}

const StateDecl *Graph::findState(const std::string &name) const {
  for (const StateDecl &s : states)
    if (s.name == name)
      return &s;
  return nullptr;
}

// Validation

namespace {

[[noreturn]] void fail(size_t index, const Node &n, const std::string &msg) {
  std::ostringstream os;
  os << "graph node " << index << " (" << opKindName(n.kind) << ")";
  if (!n.name.empty())
    os << " '" << n.name << "'";
  os << " at " << (n.loc.empty() ? std::string("<unknown>") : n.loc) << ": "
     << msg;
  throw std::runtime_error(os.str());
}

using stretto::broadcastsTo; // stretto/Support/Broadcast.h

Shape dropLast(const Shape &s) { return Shape(s.begin(), s.end() - 1); }

} // namespace

namespace {

// One node under validation: what the per-kind checks read.
struct NodeCheck {
  const Graph &g;
  const std::vector<Node> &nodes;
  size_t i;
  const Node &n;
  int have; // operand count

  [[noreturn]] void fail(const std::string &msg) const { stretto::fail(i, n, msg); }
  const Shape &opShape(int k) const { return nodes[n.operands[k]].shape; }
  void needShape(const Shape &expected, const char *what) const {
    if (n.shape != expected)
      fail(std::string(what) + ": result shape " + shapeToString(n.shape) + ", expected " +
           shapeToString(expected));
  }
  void needInts(size_t count) const {
    if (n.ints.size() != count)
      fail("expects " + std::to_string(count) + " int attribute(s), has " +
           std::to_string(n.ints.size()));
  }
  void needFloats(size_t count) const {
    if (n.floats.size() < count)
      fail("expects " + std::to_string(count) + " float attribute(s), has " +
           std::to_string(n.floats.size()));
  }
};

using Check = void (*)(const NodeCheck &);

// What holds for every node whatever its kind: arity, operands that name
// earlier nodes with values, no negative dimension.
void checkOperands(const NodeCheck &nc) {
  const Node &n = nc.n;
  int want = opArity(n.kind);
  if (want >= 0 && nc.have != want)
    nc.fail("expects " + std::to_string(want) + " operand(s), has " + std::to_string(nc.have));
  if (want < 0 && nc.have == 0 && n.kind != OpKind::Kernel)
    nc.fail("expects at least one operand");
  for (int o : n.operands)
    if (o < 0 || static_cast<size_t>(o) >= nc.i)
      nc.fail("operand index " + std::to_string(o) + " does not name an earlier node");
  for (int o : n.operands) {
    OpKind ok = nc.nodes[o].kind;
    if (ok == OpKind::Write || ok == OpKind::Grad || ok == OpKind::Yield)
      nc.fail("operand " + std::to_string(o) + " is a sink (" + opKindName(ok) +
              ") and has no value");
  }
  for (int64_t d : n.shape)
    if (d < 0)
      nc.fail("negative dimension in shape " + shapeToString(n.shape));
}

void checkElementwise(const NodeCheck &nc) {
  for (int k = 0; k < nc.have; ++k)
    if (!broadcastsTo(nc.opShape(k), nc.n.shape))
      nc.fail("operand " + std::to_string(k) + " of shape " + shapeToString(nc.opShape(k)) +
              " does not broadcast to " + shapeToString(nc.n.shape));
}

// Kinds whose operands and attributes checkOperands covers: accumulated
// gradients, and the compiled nodes (their kernels were checked when
// compiled).
void checkNothingMore(const NodeCheck &) {}

void checkNamed(const NodeCheck &nc) {
  if (nc.n.name.empty())
    nc.fail("needs a name");
}

void checkState(const NodeCheck &nc) {
  const StateDecl *s = nc.g.findState(nc.n.name);
  if (!s)
    nc.fail("no state named '" + nc.n.name + "'");
  const Shape &vs = nc.n.kind == OpKind::Read ? nc.n.shape : nc.opShape(0);
  if (vs != s->shape)
    nc.fail("value shape " + shapeToString(vs) + " != state shape " + shapeToString(s->shape));
}

void checkConstant(const NodeCheck &nc) {
  if (nc.n.data.size() != 1 && static_cast<int64_t>(nc.n.data.size()) != numElements(nc.n.shape))
    nc.fail("has " + std::to_string(nc.n.data.size()) + " values for shape " +
            shapeToString(nc.n.shape));
}

void checkStepCount(const NodeCheck &nc) {
  if (numElements(nc.n.shape) != 1)
    nc.fail("result must be a scalar");
}

void checkYield(const NodeCheck &nc) {
  for (int k = 0; k < nc.have; ++k)
    if (numElements(nc.opShape(k)) != 1)
      nc.fail("operand " + std::to_string(k) + " of shape " + shapeToString(nc.opShape(k)) +
              " is not a scalar");
}

void checkMatmul(const NodeCheck &nc) {
  const Shape &a = nc.opShape(0), &b = nc.opShape(1);
  if (a.size() < 2 || b.size() < 2)
    nc.fail("operands must have rank >= 2");
  if (a.back() != b[b.size() - 2])
    nc.fail("contraction mismatch: lhs " + shapeToString(a) + " x rhs " + shapeToString(b));
  if (b.size() > 2 && (b.size() != a.size() || !std::equal(a.begin(), a.end() - 2, b.begin())))
    nc.fail("batch dims differ: lhs " + shapeToString(a) + " x rhs " + shapeToString(b));
  Shape out(a.begin(), a.end() - 1);
  out.push_back(b.back());
  nc.needShape(out, "matmul");
}

void checkGemm(const NodeCheck &nc) {
  if (nc.have != 2 && nc.have != 3)
    nc.fail("expects 2 operands (a, b) or 3 (a, b, bias or DGELU's x), has " +
            std::to_string(nc.have));
  if (nc.n.ints.size() < 2 || nc.n.ints.size() > 3 ||
      (nc.n.ints.size() == 3 && !(nc.n.ints[2] == 1 && nc.have == 3) &&
       !(nc.n.ints[2] == 2 && nc.have == 2) && nc.n.ints[2] != 3))
    nc.fail("ints are {transpose_a, transpose_b}, {transpose_a, transpose_b, 1} for a DGELU "
            "epilogue (with a third operand), {transpose_a, transpose_b, 2} for the bias "
            "gradient (with two) or {transpose_a, transpose_b, 3} for GELU with its auxiliary "
            "output (with a bias or none)");
  if (nc.opShape(0).size() < 2 || nc.opShape(1).size() < 2)
    nc.fail("operands must have rank >= 2");
  GemmEpilogue e = gemmEpilogue(nc.n);
  if (e == GemmEpilogue::BiasGrad &&
      (nc.opShape(0).size() != 2 || nc.opShape(1).size() != 2 || nc.n.ints[1] != 0 ||
       nc.n.shape.size() != 2 || nc.n.shape.back() != nc.opShape(1).back()))
    nc.fail("the bias gradient needs 2-D operands, b not transposed, and a result [M + 1, N] "
            "with b's N columns");
  if (e == GemmEpilogue::GeluAux) {
    const Shape &a = nc.opShape(0), &b = nc.opShape(1), &r = nc.n.shape;
    const int64_t m = nc.n.ints[0] ? a.back() : a[a.size() - 2],
                  n = nc.n.ints[1] ? b[b.size() - 2] : b.back();
    if (r.size() != a.size() + 1 || r[0] != 2 || r[r.size() - 2] != m || r.back() != n)
      nc.fail("GELU with its auxiliary output makes [2, ...product] (gelu(sum), then the sum), "
              "not " +
              shapeToString(r));
  }
  if ((e == GemmEpilogue::Bias || (e == GemmEpilogue::GeluAux && nc.have == 3)) &&
      (nc.n.shape.empty() || nc.opShape(2) != Shape{nc.n.shape.back()}))
    nc.fail("bias of shape " + shapeToString(nc.opShape(2)) + " is not one value per column of " +
            shapeToString(nc.n.shape));
  if (e == GemmEpilogue::DGelu && nc.opShape(2) != nc.n.shape)
    nc.fail("DGELU's x of shape " + shapeToString(nc.opShape(2)) + " is not the result's shape " +
            shapeToString(nc.n.shape));
}

void checkTranspose(const NodeCheck &nc) {
  const Shape &in = nc.opShape(0);
  if (nc.n.ints.size() != in.size())
    nc.fail("permutation length differs from rank");
  std::vector<bool> seen(in.size(), false);
  Shape out;
  for (int64_t p : nc.n.ints) {
    if (p < 0 || p >= static_cast<int64_t>(in.size()) || seen[p])
      nc.fail("ints are not a permutation");
    seen[p] = true;
    out.push_back(in[p]);
  }
  nc.needShape(out, "transpose");
}

void checkReshape(const NodeCheck &nc) {
  if (numElements(nc.opShape(0)) != numElements(nc.n.shape))
    nc.fail("cannot reshape " + shapeToString(nc.opShape(0)) + " to " + shapeToString(nc.n.shape));
}

void checkBroadcast(const NodeCheck &nc) {
  if (!broadcastsTo(nc.opShape(0), nc.n.shape))
    nc.fail(shapeToString(nc.opShape(0)) + " does not broadcast to " + shapeToString(nc.n.shape));
}

void checkReduceSum(const NodeCheck &nc) {
  const Shape &in = nc.opShape(0);
  Shape out;
  size_t next = 0;
  for (size_t d = 0; d < in.size(); ++d) {
    if (next < nc.n.ints.size() && nc.n.ints[next] == static_cast<int64_t>(d)) {
      ++next;
      continue;
    }
    out.push_back(in[d]);
  }
  if (next != nc.n.ints.size())
    nc.fail("reduced dims must be sorted, unique and < rank");
  nc.needShape(out, "reduce_sum");
}

void checkSliceOrPad(const NodeCheck &nc) {
  nc.needInts(2);
  bool isSlice = nc.n.kind == OpKind::Slice;
  const Shape &big = isSlice ? nc.opShape(0) : nc.n.shape;
  const Shape &small = isSlice ? nc.n.shape : nc.opShape(0);
  int64_t axis = nc.n.ints[0], offset = nc.n.ints[1];
  if (big.size() != small.size() || axis < 0 || axis >= static_cast<int64_t>(big.size()))
    nc.fail("bad axis or rank");
  for (size_t d = 0; d < big.size(); ++d)
    if (static_cast<int64_t>(d) != axis && big[d] != small[d])
      nc.fail("shapes " + shapeToString(nc.opShape(0)) + " and " + shapeToString(nc.n.shape) +
              " differ off the axis");
  if (offset < 0 || offset + small[axis] > big[axis])
    nc.fail("offset " + std::to_string(offset) + " out of range");
}

void checkSoftmax(const NodeCheck &nc) {
  nc.needShape(nc.opShape(0), "softmax");
  if (nc.n.shape.empty())
    nc.fail("operand must have rank >= 1");
  if (nc.n.flag &&
      (nc.n.shape.size() < 2 || nc.n.shape.back() != nc.n.shape[nc.n.shape.size() - 2]))
    nc.fail("causal softmax needs [..., T, T]");
}

void checkNorm(const NodeCheck &nc) {
  const Shape &x = nc.opShape(0);
  nc.needShape(x, opKindName(nc.n.kind));
  nc.needFloats(1);
  if (x.empty())
    nc.fail("operand must have rank >= 1");
  for (int k = 1; k < nc.have; ++k)
    if (numElements(nc.opShape(k)) != x.back())
      nc.fail("affine operand " + std::to_string(k) + " of shape " + shapeToString(nc.opShape(k)) +
              " does not match " + std::to_string(x.back()) + " features");
}

void checkNormGrad(const NodeCheck &nc) {
  if (nc.have != 3 && nc.have != 4)
    nc.fail("expects 3 operands (x, gamma, dy) or 4 (and an addend), has " +
            std::to_string(nc.have));
  const Shape &x = nc.opShape(0);
  nc.needFloats(1);
  if (x.empty())
    nc.fail("operand must have rank >= 1");
  if (numElements(nc.opShape(1)) != x.back())
    nc.fail("gamma of shape " + shapeToString(nc.opShape(1)) + " does not match " +
            std::to_string(x.back()) + " features");
  if (nc.opShape(2) != x)
    nc.fail("grad " + shapeToString(nc.opShape(2)) + " and x " + shapeToString(x) +
            " must share one shape");
  if (nc.have == 4 && nc.opShape(3) != x)
    nc.fail("addend " + shapeToString(nc.opShape(3)) + " and x " + shapeToString(x) +
            " must share one shape");
  const int64_t d = x.back(), rows = d ? numElements(x) / d : 0;
  nc.needShape(Shape{rows + (nc.n.flag ? 2 : 1), d}, "norm_grad");
}

// kernel-attention-layout's packed qkv [B, T, 3, H, D] (operand 0), and
// the [B, T, H, D] of its rows.
Shape checkPackedQkv(const NodeCheck &nc) {
  const Shape &qkv = nc.opShape(0);
  if (qkv.size() != 5 || qkv[2] != 3)
    nc.fail("packed qkv " + shapeToString(qkv) + " must be [B, T, 3, H, D]");
  if (qkv[1] == 0 || qkv[4] == 0)
    nc.fail("qkv " + shapeToString(qkv) + ": attention needs at least one query, key and feature");
  return Shape{qkv[0], qkv[1], qkv[3], qkv[4]};
}

// ints: none, or {0|1} (1: train.attention's or attention_grad's `bf16`).
void checkRoundingFlag(const NodeCheck &nc) {
  if (nc.n.ints.size() > 1 || (nc.n.ints.size() == 1 && nc.n.ints[0] != 0 && nc.n.ints[0] != 1))
    nc.fail("ints must be {} or {0|1} (1: P and dS rounded to bf16), got " +
            std::to_string(nc.n.ints.size()) + " values");
}

void checkAttention(const NodeCheck &nc) {
  nc.needFloats(1);
  checkRoundingFlag(nc);
  if (nc.have == 1) {
    nc.needShape(checkPackedQkv(nc), "attention");
    return;
  }
  if (nc.have != 3)
    nc.fail("expects 3 operands (q, k, v) or 1 (a packed qkv), has " + std::to_string(nc.have));
  const Shape &q = nc.opShape(0), &k = nc.opShape(1), &v = nc.opShape(2);
  if (q.size() < 2 || k.size() != q.size() || v.size() != q.size() ||
      !std::equal(q.begin(), q.end() - 2, k.begin()) ||
      !std::equal(q.begin(), q.end() - 2, v.begin()) || q.back() != k.back() ||
      k[k.size() - 2] != v[v.size() - 2])
    nc.fail("q " + shapeToString(q) + ", k " + shapeToString(k) + ", v " + shapeToString(v) +
            " do not agree");
  if (nc.n.flag && q[q.size() - 2] != k[k.size() - 2])
    nc.fail("causal attention needs equal query and key lengths");
  if (q[q.size() - 2] == 0 || k[k.size() - 2] == 0 || q.back() == 0 || v.back() == 0)
    nc.fail("q " + shapeToString(q) + ", k " + shapeToString(k) + ", v " + shapeToString(v) +
            ": attention needs at least one query, key and feature");
  Shape out = dropLast(q);
  out.push_back(v.back());
  nc.needShape(out, "attention");
}

void checkAttentionGrad(const NodeCheck &nc) {
  nc.needFloats(1);
  checkRoundingFlag(nc);
  if (nc.have == 2) {
    const Shape rows = checkPackedQkv(nc);
    if (nc.opShape(1) != rows)
      nc.fail("grad " + shapeToString(nc.opShape(1)) + " must be " + shapeToString(rows) +
              " ([B, T, H, D] of qkv " + shapeToString(nc.opShape(0)) + ")");
    nc.needShape(nc.opShape(0), "attention_grad");
    return;
  }
  if (nc.have != 4)
    nc.fail("expects 4 operands (q, k, v, grad) or 2 (a packed qkv, grad), has " +
            std::to_string(nc.have));
  const Shape &q = nc.opShape(0);
  for (int k = 1; k < 4; ++k)
    if (nc.opShape(k) != q)
      nc.fail("q " + shapeToString(q) + ", k " + shapeToString(nc.opShape(1)) + ", v " +
              shapeToString(nc.opShape(2)) + ", grad " + shapeToString(nc.opShape(3)) +
              " must share one shape");
  if (q.size() < 2)
    nc.fail("q " + shapeToString(q) + " needs at least [T, D]");
  if (q[q.size() - 2] == 0 || q.back() == 0)
    nc.fail("q " + shapeToString(q) + ": attention needs at least one query, key and feature");
  Shape out{3};
  out.insert(out.end(), q.begin(), q.end());
  nc.needShape(out, "attention_grad");
}

void checkEmbedding(const NodeCheck &nc) {
  const Shape &table = nc.opShape(0);
  if (table.size() != 2)
    nc.fail("table must be [V, D]");
  Shape out = nc.opShape(1);
  out.push_back(table[1]);
  nc.needShape(out, "embedding");
}

void checkScatterRows(const NodeCheck &nc) {
  if (nc.n.shape.size() != 2)
    nc.fail("result must be [V, D]");
  Shape g = nc.opShape(0);
  g.push_back(nc.n.shape[1]);
  if (nc.opShape(1) != g)
    nc.fail("gradient shape " + shapeToString(nc.opShape(1)) + ", expected " + shapeToString(g));
}

void checkOneHot(const NodeCheck &nc) {
  if (nc.n.shape.empty())
    nc.fail("result must have a class dim");
  Shape out = nc.opShape(0);
  out.push_back(nc.n.shape.back());
  nc.needShape(out, "one_hot");
}

void checkCrossEntropy(const NodeCheck &nc) {
  if (nc.opShape(0).empty() || dropLast(nc.opShape(0)) != nc.opShape(1))
    nc.fail("logits " + shapeToString(nc.opShape(0)) + " and targets " +
            shapeToString(nc.opShape(1)) + " do not agree");
  if (numElements(nc.n.shape) != 1)
    nc.fail("result must be a scalar");
}

void checkStageSum(const NodeCheck &nc) {
  if (nc.n.ints.size() > 1 || (nc.n.ints.size() == 1 && nc.n.ints[0] != 1))
    nc.fail("stage_sum's only int is 1 (all-reduce over the stages)");
  for (size_t k = 0; k < nc.n.operands.size(); ++k)
    if (numElements(nc.opShape(k)) != 1)
      nc.fail("stage_sum sums scalars, got " + shapeToString(nc.opShape(k)));
  if (numElements(nc.n.shape) != 1)
    nc.fail("result must be a scalar");
}

void checkTransfer(const NodeCheck &nc) {
  nc.needInts(2);
  nc.needShape(nc.opShape(0), "transfer");
}

void checkDescend(const NodeCheck &nc) {
  nc.needShape(nc.opShape(0), "descend");
  if (nc.opShape(1) != nc.opShape(0) || numElements(nc.opShape(2)) != 1)
    nc.fail("descend needs a direction shaped like the parameter and a scalar lr");
}

void checkGossipMix(const NodeCheck &nc) {
  nc.needFloats(1);
  nc.needShape(nc.opShape(0), "gossip_mix");
  if (!(nc.n.floats[0] > 0 && nc.n.floats[0] <= 1))
    nc.fail("alpha must be in (0, 1], got " + std::to_string(nc.n.floats[0]));
}

void checkNewtonSchulz(const NodeCheck &nc) {
  nc.needInts(1);
  nc.needFloats(3);
  if (nc.opShape(0).size() != 2)
    nc.fail("operand must be a matrix");
  for (int k = 1; k < nc.have; ++k)
    if (nc.opShape(k) != nc.opShape(0))
      nc.fail("a batch needs matrices of one shape: operand " + std::to_string(k) + " is " +
              shapeToString(nc.opShape(k)) + ", operand 0 " + shapeToString(nc.opShape(0)));
  Shape want = nc.opShape(0);
  if (nc.have > 1)
    want.insert(want.begin(), nc.have);
  nc.needShape(want, "newton_schulz");
}

// Each kind's own checks, in one table (OpTable.h).
const OpTable<Check> &checks() {
  static const OpTable<Check> table =
      OpTable<Check>("validator")
          .onClass(OpClass::Binary, checkElementwise)
          .onClass(OpClass::Unary, checkElementwise)
          .on({OpKind::AccumulatedGrad, OpKind::Kernel}, checkNothingMore)
          .on({OpKind::Gemm}, checkGemm)
          .on({OpKind::Input, OpKind::Grad}, checkNamed)
          .on({OpKind::Read, OpKind::Write}, checkState)
          .on({OpKind::Constant}, checkConstant)
          .on({OpKind::StepCount}, checkStepCount)
          .on({OpKind::Yield}, checkYield)
          .on({OpKind::Matmul}, checkMatmul)
          .on({OpKind::Transpose}, checkTranspose)
          .on({OpKind::Reshape}, checkReshape)
          .on({OpKind::Broadcast}, checkBroadcast)
          .on({OpKind::ReduceSum}, checkReduceSum)
          .on({OpKind::Slice, OpKind::Pad}, checkSliceOrPad)
          .on({OpKind::Softmax}, checkSoftmax)
          .on({OpKind::LayerNorm, OpKind::RmsNorm}, checkNorm)
          .on({OpKind::NormGrad}, checkNormGrad)
          .on({OpKind::Attention}, checkAttention)
          .on({OpKind::AttentionGrad}, checkAttentionGrad)
          .on({OpKind::Embedding}, checkEmbedding)
          .on({OpKind::ScatterRows}, checkScatterRows)
          .on({OpKind::OneHot}, checkOneHot)
          .on({OpKind::CrossEntropy}, checkCrossEntropy)
          .on({OpKind::StageSum}, checkStageSum)
          .on({OpKind::Transfer}, checkTransfer)
          .on({OpKind::Descend}, checkDescend)
          .on({OpKind::GossipMix}, checkGossipMix)
          .on({OpKind::NewtonSchulz}, checkNewtonSchulz);
  return table;
}

void validatePhase(const Graph &g, const std::vector<Node> &nodes) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node &n = nodes[i];
    NodeCheck nc{g, nodes, i, n, static_cast<int>(n.operands.size())};
    checkOperands(nc);
    Check check = checks()[n.kind];
    if (!check)
      nc.fail("the graph validator has no checks for this kind");
    check(nc);
  }
}

} // namespace

OpTableCoverage validatorOpTable() { return coverageOf(checks()); }

void Graph::validate() const {
  validatePhase(*this, nodes);
  validatePhase(*this, update);
  validatePhase(*this, outer);
}

// Initialisation and rounding

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a64(const std::string &s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

// 53 random bits -> (0, 1]; never 0 so log() in Box-Muller stays finite.
double unitOpenClosed(uint64_t bits) {
  return static_cast<double>((bits >> 11) + 1) * 0x1.0p-53;
}

// Value = f(seed, name, index) only, so any device or shard can produce any
// element independently:
//   key  = splitmix64(splitmix64(seed) ^ fnv1a64(name))
//   u_j  = unitOpenClosed(splitmix64(key ^ splitmix64(2 * index + j)))
//   Normal:  scale * sqrt(-2 ln u_0) * cos(2 pi u_1)
//   Uniform: scale * (2 u_0 - 1 - 2^-53), strictly inside (-scale, scale)
double initialValue(const StateDecl &s, uint64_t seed, int64_t index) {
  switch (s.init) {
  case InitKind::Zeros:
    return 0.0;
  case InitKind::Ones:
    return 1.0;
  case InitKind::Normal:
  case InitKind::Uniform:
    break;
  }
  uint64_t key = splitmix64(splitmix64(seed) ^ fnv1a64(s.name));
  uint64_t ctr = 2 * static_cast<uint64_t>(index);
  double u0 = unitOpenClosed(splitmix64(key ^ splitmix64(ctr)));
  if (s.init == InitKind::Uniform)
    return s.scale * (2.0 * u0 - 1.0 - 0x1.0p-53);
  double u1 = unitOpenClosed(splitmix64(key ^ splitmix64(ctr + 1)));
  const double twoPi = 6.283185307179586476925286766559;
  return s.scale * std::sqrt(-2.0 * std::log(u0)) * std::cos(twoPi * u1);
}

float roundToBF16(float x) {
  // One definition for every executor and the kernels (KernelMath.inc).
  return kernelmath::st_round_bf16(x);
}

} // namespace stretto
