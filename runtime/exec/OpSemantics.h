//===- OpSemantics.h - op semantics shared by the executors -----*- C++ -*-===//
//
// Internal to runtime/: what the reference executor and the compiled plan
// executor must agree on by construction, written once: the scalar
// functions of the elementwise ops, index arithmetic (strides, broadcasting,
// slice/pad windows), the generic reduce-sum walk, and the checks on inputs
// and ids (with their messages).
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_OPSEMANTICS_H
#define STRETTO_RUNTIME_OPSEMANTICS_H

#include "stretto/Runtime/Executor.h"
#include "stretto/Runtime/Graph.h"
#include "stretto/Support/KernelMath.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace stretto::ops {

inline bool isBinary(OpKind k) { return opClass(k) == OpClass::Binary; }
inline bool isUnary(OpKind k) { return opClass(k) == OpClass::Unary; }

// The element-wise ops call the scalar functions of the op table
// (st_<fn> of Support/KernelMath.inc), the same the generated kernels and
// the CUDA runtime call, so every executor rounds alike.
#define STRETTO_BINARY_Binary(Kind, fn)                                                          \
  case OpKind::Kind:                                                                             \
    return kernelmath::st_##fn(a, b);
#define STRETTO_UNARY_Unary(Kind, fn)                                                            \
  case OpKind::Kind:                                                                             \
    return kernelmath::st_##fn(x);
#define STRETTO_BINARY_Unary(Kind, fn)
#define STRETTO_UNARY_Binary(Kind, fn)
#define STRETTO_OTHER(Kind, fn)
#define STRETTO_BINARY_Io STRETTO_OTHER
#define STRETTO_BINARY_Layout STRETTO_OTHER
#define STRETTO_BINARY_Fused STRETTO_OTHER
#define STRETTO_BINARY_Pipeline STRETTO_OTHER
#define STRETTO_BINARY_Optimizer STRETTO_OTHER
#define STRETTO_BINARY_Gossip STRETTO_OTHER
#define STRETTO_BINARY_Compiled STRETTO_OTHER
#define STRETTO_UNARY_Io STRETTO_OTHER
#define STRETTO_UNARY_Layout STRETTO_OTHER
#define STRETTO_UNARY_Fused STRETTO_OTHER
#define STRETTO_UNARY_Pipeline STRETTO_OTHER
#define STRETTO_UNARY_Optimizer STRETTO_OTHER
#define STRETTO_UNARY_Gossip STRETTO_OTHER
#define STRETTO_UNARY_Compiled STRETTO_OTHER

template <typename T> T binaryOp(OpKind k, T a, T b) {
  switch (k) {
#define STRETTO_OP(Kind, name, arity, cls, fn) STRETTO_BINARY_##cls(Kind, fn)
#include "stretto/Ops.def"
#undef STRETTO_OP
  default: break;
  }
  throw std::logic_error("not a binary op");
}

template <typename T> T unaryOp(OpKind k, T x) {
  switch (k) {
#define STRETTO_OP(Kind, name, arity, cls, fn) STRETTO_UNARY_##cls(Kind, fn)
#include "stretto/Ops.def"
#undef STRETTO_OP
  default: break;
  }
  throw std::logic_error("not a unary op");
}

// The row ops are KernelMath.inc's st_softmax_row, st_softmax_grad_row
// and st_norm_row: one definition for the reference executor, the compiled
// runtime, the generated kernel.rows kernels (lib/Kernel/Emitter.cpp calls
// them) and the CUDA runtime.
// Softmax of one row of `len` whose causal position is `pos` (entries past
// it are 0 when causal).
template <typename T>
void softmaxRow(const T *xr, T *yr, int64_t len, bool causal, int64_t pos) {
  kernelmath::st_softmax_row(xr, yr, len, causal ? pos + 1 : len);
}

// attention_grad's row: with P's row in pr and dP's row in sr, sr becomes
// dS = P (dP - sum_j P dP) scale, 0 past the causal position `pos`. The
// compiled runtime's per-block backward and the CUDA runtime's
// st_softmax_grad_rows use it. (The reference executor computes
// attention_grad its own way, row by row.)
template <typename T>
void softmaxGradRow(const T *pr, T *sr, int64_t len, bool causal, int64_t pos, T scale) {
  kernelmath::st_softmax_grad_row(pr, sr, len, causal ? pos + 1 : len, scale);
}

// LayerNorm (beta != nullptr: biased variance) or RmsNorm of one row of d.
template <typename T>
void normRow(const T *xr, const T *gamma, const T *beta, T *yr, int64_t d, T eps) {
  kernelmath::st_norm_row(xr, gamma, beta, yr, d, eps);
}

// norm_grad (KernelMath.inc's st_norm_grad_row and the chunked parameter
// sums): a chunk of n rows' dx and the chunk's partial dgamma (dbeta)
// sums; then normParamGrads adds the chunks' partials in order.
template <typename T>
void normGradChunk(const T *x, const T *gamma, const T *dy, T *dx, int64_t n, int64_t d, T eps,
                   bool centered, T *pg, T *pb) {
  kernelmath::st_norm_grad_chunk(x, gamma, dy, dx, n, d, eps, centered, pg, pb);
}
// norm_grad's epilogue (kernel-norm-grad-epilogue) on n elements of dx,
// in place: rounded to bf16 where `round`, plus the addend where there is
// one (rounded again): bf16(addend + bf16(dx)), as the residual add's
// kernel it replaces computed it.
template <typename T> void normGradEpilogue(T *dx, const T *addend, int64_t n, bool round) {
  const int epi = (round ? kernelmath::ST_NG_ROUND : 0) | (addend ? kernelmath::ST_NG_ADD : 0);
  for (int64_t e = 0; e < n; ++e)
    dx[e] = kernelmath::st_norm_grad_epilogue(epi, dx[e], addend ? addend[e] : T(0));
}
// dgamma (and dbeta; pb, dbeta null: RmsNorm) from `chunks` partials.
template <typename T>
void normParamGrads(const T *pg, const T *pb, int64_t chunks, int64_t d, T *dgamma, T *dbeta) {
  for (int64_t j = 0; j < d; ++j) {
    dgamma[j] = kernelmath::st_norm_param_combine(pg, chunks, d, j);
    if (pb)
      dbeta[j] = kernelmath::st_norm_param_combine(pb, chunks, d, j);
  }
}
inline int64_t normChunkRows(int64_t rows) { return kernelmath::st_norm_chunk_rows(rows); }

// Row-major strides of `shape`.
inline std::vector<int64_t> stridesOf(const Shape &shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d)
    st[d] = st[d + 1] * shape[d + 1];
  return st;
}

// Strides of `in` seen from the index space of `out` (numpy broadcasting:
// missing or size-1 dims have stride 0).
inline std::vector<int64_t> broadcastStrides(const Shape &in, const Shape &out) {
  std::vector<int64_t> st(out.size(), 0);
  std::vector<int64_t> inSt = stridesOf(in);
  size_t off = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    st[off + d] = in[d] == 1 ? 0 : inSt[d];
  return st;
}

// How a ReduceSum's summed dims lie in its operand (size-1 dims ignored):
// none (a copy), one contiguous block [lo, hi) — the operand is then
// [outer, nred, inner] and out[o, j] = sum_r x[o, r, j] — or scattered.
struct ReducedBlock {
  bool any = false, contiguous = true;
  int lo = -1, hi = -1;
  int64_t outer = 1, nred = 1, inner = 1; // when contiguous
};
inline ReducedBlock reducedBlock(const Shape &s, const std::vector<int64_t> &dims) {
  ReducedBlock b;
  std::vector<char> red(s.size(), 0);
  for (int64_t d : dims)
    red[d] = 1;
  for (int d = 0; d < static_cast<int>(s.size()); ++d) {
    if (!red[d] || s[d] == 1)
      continue;
    if (b.lo < 0)
      b.lo = d;
    else if (b.hi != d)
      b.contiguous = false;
    b.hi = d + 1;
  }
  b.any = b.lo >= 0;
  if (b.any && b.contiguous)
    for (int d = 0; d < static_cast<int>(s.size()); ++d)
      (d < b.lo ? b.outer : d < b.hi ? b.nred : b.inner) *= s[d];
  return b;
}

// out (zeroed, shape `in` without `dims`) += x, walking x in order: the
// reference's summation order for any set of reduced dims.
template <typename T>
void reduceSumWalk(const T *x, const Shape &in, const std::vector<int64_t> &dims, T *out) {
  std::vector<int64_t> outSt(in.size(), 0);
  {
    Shape outShape;
    for (size_t d = 0; d < in.size(); ++d)
      if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end())
        outShape.push_back(in[d]);
    std::vector<int64_t> ost = stridesOf(outShape);
    for (size_t d = 0, od = 0; d < in.size(); ++d)
      if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end())
        outSt[d] = ost[od++];
  }
  std::vector<int64_t> idx(in.size(), 0);
  int64_t off = 0, total = numElements(in);
  for (int64_t e = 0; e < total; ++e) {
    out[off] += x[e];
    for (int d = static_cast<int>(in.size()) - 1; d >= 0; --d) {
      if (++idx[d] < in[d]) {
        off += outSt[d];
        break;
      }
      off -= outSt[d] * (in[d] - 1);
      idx[d] = 0;
    }
  }
}

// The window of a Slice (big operand -> small result) or Pad (small operand
// -> big result) along `axis`: `outer` blocks of `smallA * inner` contiguous
// elements, at offset `offset * inner` inside blocks of `bigA * inner`.
struct Window {
  int64_t outer, inner, bigA, smallA, offset;
  int64_t bigStart(int64_t o) const { return (o * bigA + offset) * inner; }
  int64_t smallStart(int64_t o) const { return o * smallA * inner; }
};

inline Window windowOf(const Node &n, const Shape &operand) {
  bool isSlice = n.kind == OpKind::Slice;
  const Shape &big = isSlice ? operand : n.shape;
  const Shape &small = isSlice ? n.shape : operand;
  int64_t axis = n.ints[0];
  return Window{numElements(Shape(big.begin(), big.begin() + axis)),
                numElements(Shape(big.begin() + axis + 1, big.end())), big[axis], small[axis],
                n.ints[1]};
}

// Attention's operands q [B.., Tq, D], k [B.., Tk, D], v [B.., Tk, Dv].
struct AttentionDims {
  int64_t batch, tq, tk, d, dv;
};
inline AttentionDims attentionDims(const Shape &q, const Shape &k, const Shape &v) {
  return AttentionDims{numElements(Shape(q.begin(), q.end() - 2)), q[q.size() - 2],
                       k[k.size() - 2], q.back(), v.back()};
}

// An attention (or its gradient) in kernel-attention-layout's packed form:
// one operand qkv [B, T, 3, H, D] (the gradient: and g [B, T, H, D])
// instead of q, k, v [B, H, T, D] (and g); the result [B, T, H, D] (the
// gradient's: dq, dk, dv as the parts of [B, T, 3, H, D]).
inline bool packedAttention(const Node &n) {
  return n.operands.size() == (n.kind == OpKind::Attention ? 1u : 2u);
}
// A packed qkv's problem: B H blocks of T queries and keys of D features.
inline AttentionDims packedAttentionDims(const Shape &qkv) {
  return AttentionDims{qkv[0] * qkv[3], qkv[1], qkv[1], qkv[4], qkv[4]};
}

// An Attention or AttentionGrad node whose products read P (and dS)
// rounded to bf16 (train.attention's and train.attention_grad's `bf16`:
// ints {1}).
inline bool attentionRoundsProducts(const Node &n) {
  return (n.kind == OpKind::Attention || n.kind == OpKind::AttentionGrad) && !n.ints.empty() &&
         n.ints[0] == 1;
}

// train.attention {bf16}'s weights, as the fused kernels' online softmax
// makes them 32 keys at a time: over the chunks [32c, 32c + 32) of the n
// keys a query row sees, m_c = max(m_{c-1}, the chunk's scores) and the
// weight of key j of chunk c is bf16(e^(s_j - m_c)), rounded, times
// e^(m_c - m_last) / l, with l = sum_c e^(m_c - m_last) sum_{j in c}
// e^(s_j - m_c) unrounded; the row's output is the weights times V. The n
// scores of `s` become the weights in place (the kernels rescale chunk by
// chunk instead: the values agree to f32 rounding).
constexpr int64_t kAttentionChunk = 32;
template <typename T> void attentionChunkWeights(T *s, int64_t n) {
  if (n <= 0)
    return;
  const int64_t chunks = (n + kAttentionChunk - 1) / kAttentionChunk;
  std::vector<T> top(static_cast<size_t>(chunks)), sums(static_cast<size_t>(chunks), T(0));
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t j = c * kAttentionChunk; j < std::min(n, (c + 1) * kAttentionChunk); ++j)
      m = std::max(m, s[j]);
    top[c] = m;
  }
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t j = c * kAttentionChunk; j < std::min(n, (c + 1) * kAttentionChunk); ++j) {
      const T e = std::exp(s[j] - top[c]);
      sums[c] += e;
      s[j] = static_cast<T>(roundToBF16(static_cast<float>(e)));
    }
  T l = 0;
  for (int64_t c = 0; c < chunks; ++c)
    l += std::exp(top[c] - top[chunks - 1]) * sums[c];
  for (int64_t c = 0; c < chunks; ++c) {
    const T f = std::exp(top[c] - top[chunks - 1]) / l;
    for (int64_t j = c * kAttentionChunk; j < std::min(n, (c + 1) * kAttentionChunk); ++j)
      s[j] *= f;
  }
}

// An Attention or AttentionGrad node's problem, packed or not.
inline AttentionDims attentionDimsOf(const Node &n, const std::vector<Node> &nodes) {
  if (packedAttention(n))
    return packedAttentionDims(nodes[n.operands[0]].shape);
  return attentionDims(nodes[n.operands[0]].shape, nodes[n.operands[1]].shape,
                       nodes[n.operands[2]].shape);
}

// Where block bh's rows of a [.., T, D] operand lie: element (bh, t, d) at
// (bh / heads) sb + (bh % heads) sh + t st + d (plus the part's offset).
// Dense [BH, T, D]: heads 1, sb = T D, st = D. Part p of P of a packed
// [B, T, P, H, D]: heads H, sb = T P H D, sh = D, st = P H D, offset
// p H D. RuntimeOps.cu's StRows is the same three strides.
struct HeadRows {
  int64_t heads = 1, sb = 0, sh = 0, st = 0, offset = 0;
  int64_t at(int64_t bh, int64_t t) const {
    return offset + (bh / heads) * sb + (bh % heads) * sh + t * st;
  }
};
inline HeadRows denseHeadRows(int64_t t, int64_t d) { return HeadRows{1, t * d, 0, d, 0}; }
// Part `part` of `parts` of [B, T, parts, H, D], with T, H and D those of
// the packed qkv [B, T, 3, H, D] (parts 1: its [B, T, H, D] rows).
inline HeadRows packedHeadRows(const Shape &qkv, int64_t parts, int64_t part) {
  const int64_t t = qkv[1], h = qkv[3], d = qkv[4];
  return HeadRows{h, t * parts * h * d, d, parts * h * d, part * h * d};
}
// dst [BH, T, D] = src's rows `r`; and back.
template <typename T>
void gatherHeads(const T *src, const HeadRows &r, int64_t bh, int64_t t, int64_t d, T *dst) {
  for (int64_t b = 0; b < bh; ++b)
    for (int64_t i = 0; i < t; ++i)
      std::copy(src + r.at(b, i), src + r.at(b, i) + d, dst + (b * t + i) * d);
}
template <typename T>
void scatterHeads(const T *src, const HeadRows &r, int64_t bh, int64_t t, int64_t d, T *dst) {
  for (int64_t b = 0; b < bh; ++b)
    for (int64_t i = 0; i < t; ++i)
      std::copy(src + (b * t + i) * d, src + (b * t + i + 1) * d, dst + r.at(b, i));
}
// A packed attention (or its gradient) run on [B H, T, D] blocks, as the
// packed form is defined: q, k, v (and g) gathered from qkv `x` (and `g`)
// into `blocks`, `run(dims, q, k, v, g, result)` computing the blocks'
// result (the gradient's: dq, dk, dv stacked), put back at `out` in the
// packed layout. g null: the forward.
template <typename T, typename Run>
void onHeadBlocks(const Shape &qkv, const T *x, const T *g, std::vector<T> &blocks,
                  std::vector<T> &result, T *out, Run run) {
  const AttentionDims a = packedAttentionDims(qkv);
  const int64_t n = a.batch * a.tq * a.d, parts = g ? 3 : 1;
  blocks.resize((g ? 4 : 3) * n);
  result.resize(parts * n);
  T *q = blocks.data();
  for (int64_t p = 0; p < 3; ++p)
    gatherHeads(x, packedHeadRows(qkv, 3, p), a.batch, a.tq, a.d, q + p * n);
  if (g)
    gatherHeads(g, packedHeadRows(qkv, 1, 0), a.batch, a.tq, a.d, q + 3 * n);
  run(a, q, q + n, q + 2 * n, g ? q + 3 * n : nullptr, result.data());
  for (int64_t p = 0; p < parts; ++p)
    scatterHeads(result.data() + p * n, packedHeadRows(qkv, parts, p), a.batch, a.tq, a.d, out);
}

// A Gemm node's problem: `batch` products op(a) [m, k] x op(b) [k, n]; b is
// shared by the batch unless `rhsBatched`.
struct GemmDims {
  int64_t batch, m, n, k;
  bool ta, tb, rhsBatched;
  double alpha;
};
inline GemmDims gemmDims(const Node &node, const Shape &a, const Shape &b) {
  bool ta = node.ints[0] != 0, tb = node.ints[1] != 0;
  // (the bias gradient's row follows the product's M rows; GELU's
  // auxiliary output is the second of a leading 2)
  const int64_t extra = gemmEpilogue(node) == GemmEpilogue::BiasGrad ? 1 : 0;
  return GemmDims{numElements(Shape(a.begin(), a.end() - 2)),
                  node.shape[node.shape.size() - 2] - extra,
                  node.shape.back(),
                  ta ? a[a.size() - 2] : a.back(),
                  ta,
                  tb,
                  b.size() > 2,
                  node.floats.empty() ? 1.0 : node.floats[0]};
}

// What a Gemm node's epilogue (kernel-gemm-epilogue) makes of its product
// `out`, in place and before any rounding: `third` (the node's third
// operand) added to every row as its bias, each value multiplied by
// gelu'(third) (DGELU), the column sums of b [k, n] written after the
// product's m rows (the bias gradient), each summed in increasing row
// order as reduceSumWalk sums, or (GELU with its auxiliary output) the
// sum s = product + third (a bias; none: null) after the product's values
// and gelu(s) in their place. Nothing without an epilogue.
template <typename T>
void applyGemmEpilogue(const Node &node, const GemmDims &g, T *out, const T *b, const T *third) {
  const int64_t count = g.batch * g.m * g.n;
  switch (gemmEpilogue(node)) {
  case GemmEpilogue::GeluAux:
    for (int64_t i = 0; i < count; ++i) {
      const T s = third ? out[i] + third[i % g.n] : out[i];
      out[count + i] = s;
      out[i] = kernelmath::st_gelu(s);
    }
    break;
  case GemmEpilogue::Bias:
    for (int64_t r = 0; r < count / g.n; ++r)
      for (int64_t j = 0; j < g.n; ++j)
        out[r * g.n + j] += third[j];
    break;
  case GemmEpilogue::DGelu:
    for (int64_t i = 0; i < count; ++i)
      out[i] *= kernelmath::st_gelu_grad(third[i]);
    break;
  case GemmEpilogue::BiasGrad: {
    T *sums = out + count;
    std::fill(sums, sums + g.n, T(0));
    for (int64_t r = 0; r < g.k; ++r)
      for (int64_t j = 0; j < g.n; ++j)
        sums[j] += b[r * g.n + j];
    break;
  }
  case GemmEpilogue::None:
    break;
  }
}

// Throws the message both executors give for a missing or mis-shaped input.
inline void checkInput(const Node &n, const TensorMap &inputs) {
  auto it = inputs.find(n.name);
  if (it == inputs.end())
    throw std::runtime_error("missing input '" + n.name + "' (expected shape " +
                             shapeToString(n.shape) + ")");
  const HostTensor &h = it->second;
  if (h.shape != n.shape)
    throw std::runtime_error("input '" + n.name + "': expected shape " + shapeToString(n.shape) +
                             ", got " + shapeToString(h.shape));
  if (static_cast<int64_t>(h.data.size()) != numElements(n.shape))
    throw std::runtime_error("input '" + n.name + "': shape " + shapeToString(h.shape) +
                             " needs " + std::to_string(numElements(n.shape)) + " values, got " +
                             std::to_string(h.data.size()));
}

// "" when `v` is an integer in [0, limit), else the message naming it.
inline std::string badId(double v, int64_t limit, const char *what) {
  if (v >= 0 && v < static_cast<double>(limit) && v == std::floor(v))
    return "";
  std::ostringstream os;
  os << what << " ";
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    os << static_cast<int64_t>(v); // print 1000000, not 1e+06
  else
    os << v;
  os << " out of range [0, " << limit << ")";
  return os.str();
}

// Throws the message both executors give for a setState of the wrong shape.
inline void checkStateValue(const std::string &name, const Shape &shape, const HostTensor &value) {
  if (value.shape != shape || static_cast<int64_t>(value.data.size()) != numElements(shape))
    throw std::runtime_error("setState '" + name + "': expected shape " + shapeToString(shape) +
                             ", got " + shapeToString(value.shape) + " with " +
                             std::to_string(value.data.size()) + " values");
}

} // namespace stretto::ops

#endif
