//===- Graph.cpp - MLIR-free training-step graph --------------------------===//
//
// Shape helpers, op names, structural validation, deterministic state
// initialisation and bf16 rounding. Everything here must give bit-identical
// results on every host, so no library RNG and no unspecified evaluation
// order.
//
//===----------------------------------------------------------------------===//

#include "stretto/Runtime/Graph.h"
#include "stretto/Support/Broadcast.h"

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

static void validatePhase(const Graph &g, const std::vector<Node> &nodes);

void Graph::validate() const {
  validatePhase(*this, nodes);
  validatePhase(*this, update);
  validatePhase(*this, outer);
}

static void validatePhase(const Graph &g, const std::vector<Node> &nodes) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node &n = nodes[i];
    int want = opArity(n.kind);
    int have = static_cast<int>(n.operands.size());
    if (want >= 0 && have != want)
      fail(i, n, "expects " + std::to_string(want) + " operand(s), has " +
                     std::to_string(have));
    if (want < 0 && have == 0 && n.kind != OpKind::Kernel)
      fail(i, n, "expects at least one operand");
    for (int o : n.operands)
      if (o < 0 || static_cast<size_t>(o) >= i)
        fail(i, n, "operand index " + std::to_string(o) +
                       " does not name an earlier node");
    for (int o : n.operands) {
      OpKind ok = nodes[o].kind;
      if (ok == OpKind::Write || ok == OpKind::Grad || ok == OpKind::Yield)
        fail(i, n, "operand " + std::to_string(o) + " is a sink (" +
                       opKindName(ok) + ") and has no value");
    }
    for (int64_t d : n.shape)
      if (d < 0)
        fail(i, n, "negative dimension in shape " + shapeToString(n.shape));

    auto opShape = [&](int k) -> const Shape & {
      return nodes[n.operands[k]].shape;
    };
    auto needShape = [&](const Shape &expected, const char *what) {
      if (n.shape != expected)
        fail(i, n, std::string(what) + ": result shape " +
                       shapeToString(n.shape) + ", expected " +
                       shapeToString(expected));
    };
    auto needInts = [&](size_t count) {
      if (n.ints.size() != count)
        fail(i, n, "expects " + std::to_string(count) + " int attribute(s), has " +
                       std::to_string(n.ints.size()));
    };
    auto needFloats = [&](size_t count) {
      if (n.floats.size() < count)
        fail(i, n, "expects " + std::to_string(count) +
                       " float attribute(s), has " +
                       std::to_string(n.floats.size()));
    };

    if (isElementwise(n.kind)) {
      for (int k = 0; k < have; ++k)
        if (!broadcastsTo(opShape(k), n.shape))
          fail(i, n, "operand " + std::to_string(k) + " of shape " +
                         shapeToString(opShape(k)) +
                         " does not broadcast to " + shapeToString(n.shape));
      continue;
    }

    switch (n.kind) {
    case OpKind::Input:
    case OpKind::Grad:
      if (n.name.empty())
        fail(i, n, "needs a name");
      break;
    case OpKind::Read:
    case OpKind::Write: {
      const StateDecl *s = g.findState(n.name);
      if (!s)
        fail(i, n, "no state named '" + n.name + "'");
      const Shape &vs = n.kind == OpKind::Read ? n.shape : opShape(0);
      if (vs != s->shape)
        fail(i, n, "value shape " + shapeToString(vs) + " != state shape " +
                       shapeToString(s->shape));
      break;
    }
    case OpKind::Constant:
      if (n.data.size() != 1 &&
          static_cast<int64_t>(n.data.size()) != numElements(n.shape))
        fail(i, n, "has " + std::to_string(n.data.size()) +
                       " values for shape " + shapeToString(n.shape));
      break;
    case OpKind::StepCount:
      if (numElements(n.shape) != 1)
        fail(i, n, "result must be a scalar");
      break;
    case OpKind::Yield:
      for (int k = 0; k < have; ++k)
        if (numElements(opShape(k)) != 1)
          fail(i, n, "operand " + std::to_string(k) + " of shape " +
                         shapeToString(opShape(k)) + " is not a scalar");
      break;
    case OpKind::Matmul: {
      const Shape &a = opShape(0), &b = opShape(1);
      if (a.size() < 2 || b.size() < 2)
        fail(i, n, "operands must have rank >= 2");
      if (a.back() != b[b.size() - 2])
        fail(i, n, "contraction mismatch: lhs " + shapeToString(a) +
                       " x rhs " + shapeToString(b));
      if (b.size() > 2 && (b.size() != a.size() ||
                           !std::equal(a.begin(), a.end() - 2, b.begin())))
        fail(i, n, "batch dims differ: lhs " + shapeToString(a) + " x rhs " +
                       shapeToString(b));
      Shape out(a.begin(), a.end() - 1);
      out.push_back(b.back());
      needShape(out, "matmul");
      break;
    }
    case OpKind::Transpose: {
      const Shape &in = opShape(0);
      if (n.ints.size() != in.size())
        fail(i, n, "permutation length differs from rank");
      std::vector<bool> seen(in.size(), false);
      Shape out;
      for (int64_t p : n.ints) {
        if (p < 0 || p >= static_cast<int64_t>(in.size()) || seen[p])
          fail(i, n, "ints are not a permutation");
        seen[p] = true;
        out.push_back(in[p]);
      }
      needShape(out, "transpose");
      break;
    }
    case OpKind::Reshape:
      if (numElements(opShape(0)) != numElements(n.shape))
        fail(i, n, "cannot reshape " + shapeToString(opShape(0)) + " to " +
                       shapeToString(n.shape));
      break;
    case OpKind::Broadcast:
      if (!broadcastsTo(opShape(0), n.shape))
        fail(i, n, shapeToString(opShape(0)) + " does not broadcast to " +
                       shapeToString(n.shape));
      break;
    case OpKind::ReduceSum: {
      const Shape &in = opShape(0);
      Shape out;
      size_t next = 0;
      for (size_t d = 0; d < in.size(); ++d) {
        if (next < n.ints.size() && n.ints[next] == static_cast<int64_t>(d)) {
          ++next;
          continue;
        }
        out.push_back(in[d]);
      }
      if (next != n.ints.size())
        fail(i, n, "reduced dims must be sorted, unique and < rank");
      needShape(out, "reduce_sum");
      break;
    }
    case OpKind::Slice:
    case OpKind::Pad: {
      needInts(2);
      bool isSlice = n.kind == OpKind::Slice;
      const Shape &big = isSlice ? opShape(0) : n.shape;
      const Shape &small = isSlice ? n.shape : opShape(0);
      int64_t axis = n.ints[0], offset = n.ints[1];
      if (big.size() != small.size() || axis < 0 ||
          axis >= static_cast<int64_t>(big.size()))
        fail(i, n, "bad axis or rank");
      for (size_t d = 0; d < big.size(); ++d)
        if (static_cast<int64_t>(d) != axis && big[d] != small[d])
          fail(i, n, "shapes " + shapeToString(opShape(0)) + " and " +
                         shapeToString(n.shape) + " differ off the axis");
      if (offset < 0 || offset + small[axis] > big[axis])
        fail(i, n, "offset " + std::to_string(offset) + " out of range");
      break;
    }
    case OpKind::Softmax:
      needShape(opShape(0), "softmax");
      if (n.shape.empty())
        fail(i, n, "operand must have rank >= 1");
      if (n.flag && (n.shape.size() < 2 ||
                     n.shape.back() != n.shape[n.shape.size() - 2]))
        fail(i, n, "causal softmax needs [..., T, T]");
      break;
    case OpKind::LayerNorm:
    case OpKind::RmsNorm: {
      const Shape &x = opShape(0);
      needShape(x, opKindName(n.kind));
      needFloats(1);
      if (x.empty())
        fail(i, n, "operand must have rank >= 1");
      for (int k = 1; k < have; ++k)
        if (numElements(opShape(k)) != x.back())
          fail(i, n, "affine operand " + std::to_string(k) + " of shape " +
                         shapeToString(opShape(k)) + " does not match " +
                         std::to_string(x.back()) + " features");
      break;
    }
    case OpKind::NormGrad: {
      const Shape &x = opShape(0);
      needFloats(1);
      if (x.empty())
        fail(i, n, "operand must have rank >= 1");
      if (numElements(opShape(1)) != x.back())
        fail(i, n, "gamma of shape " + shapeToString(opShape(1)) + " does not match " +
                       std::to_string(x.back()) + " features");
      if (opShape(2) != x)
        fail(i, n, "grad " + shapeToString(opShape(2)) + " and x " + shapeToString(x) +
                       " must share one shape");
      const int64_t d = x.back(), rows = d ? numElements(x) / d : 0;
      needShape(Shape{rows + (n.flag ? 2 : 1), d}, "norm_grad");
      break;
    }
    case OpKind::Attention: {
      const Shape &q = opShape(0), &k = opShape(1), &v = opShape(2);
      needFloats(1);
      if (q.size() < 2 || k.size() != q.size() || v.size() != q.size() ||
          !std::equal(q.begin(), q.end() - 2, k.begin()) ||
          !std::equal(q.begin(), q.end() - 2, v.begin()) ||
          q.back() != k.back() || k[k.size() - 2] != v[v.size() - 2])
        fail(i, n, "q " + shapeToString(q) + ", k " + shapeToString(k) +
                       ", v " + shapeToString(v) + " do not agree");
      if (n.flag && q[q.size() - 2] != k[k.size() - 2])
        fail(i, n, "causal attention needs equal query and key lengths");
      if (q[q.size() - 2] == 0 || k[k.size() - 2] == 0 || q.back() == 0 || v.back() == 0)
        fail(i, n, "q " + shapeToString(q) + ", k " + shapeToString(k) + ", v " +
                       shapeToString(v) + ": attention needs at least one query, key and feature");
      Shape out = dropLast(q);
      out.push_back(v.back());
      needShape(out, "attention");
      break;
    }
    case OpKind::AttentionGrad: {
      const Shape &q = opShape(0);
      needFloats(1);
      for (int k = 1; k < 4; ++k)
        if (opShape(k) != q)
          fail(i, n, "q " + shapeToString(q) + ", k " + shapeToString(opShape(1)) + ", v " +
                         shapeToString(opShape(2)) + ", grad " + shapeToString(opShape(3)) +
                         " must share one shape");
      if (q.size() < 2)
        fail(i, n, "q " + shapeToString(q) + " needs at least [T, D]");
      if (q[q.size() - 2] == 0 || q.back() == 0)
        fail(i, n, "q " + shapeToString(q) + ": attention needs at least one query, key and feature");
      Shape out{3};
      out.insert(out.end(), q.begin(), q.end());
      needShape(out, "attention_grad");
      break;
    }
    case OpKind::Embedding: {
      const Shape &table = opShape(0);
      if (table.size() != 2)
        fail(i, n, "table must be [V, D]");
      Shape out = opShape(1);
      out.push_back(table[1]);
      needShape(out, "embedding");
      break;
    }
    case OpKind::ScatterRows: {
      if (n.shape.size() != 2)
        fail(i, n, "result must be [V, D]");
      Shape g = opShape(0);
      g.push_back(n.shape[1]);
      if (opShape(1) != g)
        fail(i, n, "gradient shape " + shapeToString(opShape(1)) +
                       ", expected " + shapeToString(g));
      break;
    }
    case OpKind::OneHot: {
      if (n.shape.empty())
        fail(i, n, "result must have a class dim");
      Shape out = opShape(0);
      out.push_back(n.shape.back());
      needShape(out, "one_hot");
      break;
    }
    case OpKind::CrossEntropy:
      if (opShape(0).empty() || dropLast(opShape(0)) != opShape(1))
        fail(i, n, "logits " + shapeToString(opShape(0)) + " and targets " +
                       shapeToString(opShape(1)) + " do not agree");
      if (numElements(n.shape) != 1)
        fail(i, n, "result must be a scalar");
      break;
    case OpKind::StageSum:
      if (n.ints.size() > 1 || (n.ints.size() == 1 && n.ints[0] != 1))
        fail(i, n, "stage_sum's only int is 1 (all-reduce over the stages)");
      for (size_t k = 0; k < n.operands.size(); ++k)
        if (numElements(opShape(k)) != 1)
          fail(i, n, "stage_sum sums scalars, got " + shapeToString(opShape(k)));
      if (numElements(n.shape) != 1)
        fail(i, n, "result must be a scalar");
      break;
    case OpKind::Transfer:
      needInts(2);
      needShape(opShape(0), "transfer");
      break;
    case OpKind::Descend:
      needShape(opShape(0), "descend");
      if (opShape(1) != opShape(0) || numElements(opShape(2)) != 1)
        fail(i, n, "descend needs a direction shaped like the parameter and a scalar lr");
      break;
    case OpKind::GossipMix:
      needFloats(1);
      needShape(opShape(0), "gossip_mix");
      if (!(n.floats[0] > 0 && n.floats[0] <= 1))
        fail(i, n, "alpha must be in (0, 1], got " + std::to_string(n.floats[0]));
      break;
    case OpKind::NewtonSchulz:
      needInts(1);
      needFloats(3);
      if (opShape(0).size() != 2)
        fail(i, n, "operand must be a matrix");
      needShape(opShape(0), "newton_schulz");
      break;
    default:
      break;
    }
  }
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
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    // NaN: keep sign and top payload, force quiet so truncation can't make Inf.
    bits = (bits & 0xFFFF0000u) | 0x00400000u;
  } else {
    // Round to nearest even on the 16 dropped bits; overflow correctly
    // carries into the exponent (and to Inf past the largest bf16).
    uint32_t lsb = (bits >> 16) & 1u;
    bits += 0x7FFFu + lsb;
    bits &= 0xFFFF0000u;
  }
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

} // namespace stretto
