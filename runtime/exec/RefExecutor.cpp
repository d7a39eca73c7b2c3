//===- RefExecutor.cpp - the numerical oracle -----------------------------===//
//
// Runs a Graph node by node with plain loops. Kernels are templated on the
// compute type T (float or double) so the same code is the f32 and the f64
// oracle. Clarity over speed; the only concessions are OpenMP over the rows
// of matmul/attention (a GPT step is otherwise unbearably slow) and freeing
// each intermediate after its last use.
//
//===----------------------------------------------------------------------===//

#include "stretto/Runtime/RefExecutor.h"
#include "stretto/Runtime/OpTable.h"
#include "exec/OpSemantics.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace stretto {

using namespace ops;

namespace {

template <typename T> using Buf = std::vector<T>;

// Index helpers

// out[i] = in[sum_d idx_d * inStride[d]] over the out index space. Covers
// broadcasting (stride 0) and transposition (permuted strides).
template <typename T>
Buf<T> gather(const Buf<T> &in, const Shape &out,
              const std::vector<int64_t> &inStride) {
  int64_t n = numElements(out);
  Buf<T> res(n);
  int r = static_cast<int>(out.size());
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  for (int64_t e = 0; e < n; ++e) {
    res[e] = in[off];
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < out[d]) {
        off += inStride[d];
        break;
      }
      off -= inStride[d] * (out[d] - 1);
      idx[d] = 0;
    }
  }
  return res;
}

template <typename T>
Buf<T> expand(const Buf<T> &in, const Shape &inShape, const Shape &out) {
  if (inShape == out)
    return in;
  return gather(in, out, broadcastStrides(inShape, out));
}

// A row-major matmul of one [M, K] x [K, N] block into a zeroed `c`.
// i-k-j order keeps the inner loop contiguous so it vectorises.
template <typename T>
void matmulRows(const T *a, const T *b, T *c, int64_t m, int64_t k,
                int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      T aip = a[i * k + p];
      const T *brow = b + p * n;
      T *crow = c + i * n;
      for (int64_t j = 0; j < n; ++j)
        crow[j] += aip * brow[j];
    }
}

// BLAS GEMM for Gemm nodes (the compiled path; Matmul keeps plain loops).
// c[b] = alpha * op(a[b]) * op(b[b or 0]), row-major.
inline void blasGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, const float *b, float *c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(ta ? m : k), b, static_cast<int>(tb ? k : n), 0.0f, c,
              static_cast<int>(n));
}
inline void blasGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                     const double *a, const double *b, double *c) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(ta ? m : k), b, static_cast<int>(tb ? k : n), 0.0, c,
              static_cast<int>(n));
}
template <typename T>
void gemm(const Buf<T> &a, const Buf<T> &b, Buf<T> &c, int64_t batch, int64_t m, int64_t n,
          int64_t k, bool ta, bool tb, bool rhsBatched, T alpha) {
  // A shared rhs with an untransposed lhs folds the batch into the rows.
  if (!rhsBatched && !ta) {
    blasGemm(ta, tb, batch * m, n, k, alpha, a.data(), b.data(), c.data());
    return;
  }
  for (int64_t i = 0; i < batch; ++i)
    blasGemm(ta, tb, m, n, k, alpha, a.data() + i * m * k,
             b.data() + (rhsBatched ? i * k * n : 0), c.data() + i * m * n);
}

// [batch, M, K] x [K, N] (rhsBatched = false) or [batch, K, N] -> [batch, M, N]
template <typename T>
Buf<T> matmul(const Buf<T> &a, const Buf<T> &b, int64_t batch, int64_t m,
              int64_t k, int64_t n, bool rhsBatched) {
  Buf<T> c(batch * m * n, T(0));
  int64_t rows = batch * m;
  // Threads only pay off past ~32k multiply-adds; tiny test graphs stay serial.
#pragma omp parallel for schedule(static) if (rows * k * n > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t bi = r / m;
    const T *bmat = b.data() + (rhsBatched ? bi * k * n : 0);
    matmulRows(a.data() + r * k, bmat, c.data() + r * n, 1, k, n);
  }
  return c;
}

template <typename T> Buf<T> transpose2D(const Buf<T> &x, int64_t r, int64_t c) {
  Buf<T> t(x.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      t[j * r + i] = x[i * c + j];
  return t;
}

// Fused kernels

// Softmax over rows of length L; when causal, the row's position in its
// [T, T] block is (row % T) and entries past it are 0.
template <typename T>
Buf<T> softmax(const Buf<T> &x, int64_t len, bool causal) {
  Buf<T> y(x.size(), T(0));
  int64_t rows = len ? static_cast<int64_t>(x.size()) / len : 0;
#pragma omp parallel for schedule(static) if (x.size() > 32768)
  for (int64_t r = 0; r < rows; ++r)
    softmaxRow(x.data() + r * len, y.data() + r * len, len, causal, r % len);
  return y;
}

// LayerNorm (beta != nullptr) or RmsNorm (beta == nullptr) over rows of d.
template <typename T>
Buf<T> normRows(const Buf<T> &x, const Buf<T> &gamma, const Buf<T> *beta,
                int64_t d, T eps) {
  Buf<T> y(x.size());
  int64_t rows = d ? static_cast<int64_t>(x.size()) / d : 0;
  for (int64_t r = 0; r < rows; ++r)
    normRow(x.data() + r * d, gamma.data(), beta ? beta->data() : nullptr, y.data() + r * d, d,
            eps);
  return y;
}

// norm_grad: [rows + 2 (RmsNorm: 1), d] stacking dx, dgamma and dbeta.
template <typename T>
Buf<T> normGrad(const Buf<T> &x, const Buf<T> &gamma, const Buf<T> &dy, int64_t d, T eps,
                bool centered) {
  int64_t rows = d ? static_cast<int64_t>(x.size()) / d : 0;
  Buf<T> out((rows + (centered ? 2 : 1)) * d);
  const int64_t per = normChunkRows(rows), chunks = (rows + per - 1) / per;
  std::vector<T> pg(chunks * d), pb(centered ? chunks * d : 0);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r0 = c * per;
    normGradChunk(x.data() + r0 * d, gamma.data(), dy.data() + r0 * d, out.data() + r0 * d,
                  std::min(per, rows - r0), d, eps, centered, pg.data() + c * d,
                  centered ? pb.data() + c * d : nullptr);
  }
  T *dgamma = out.data() + rows * d;
  normParamGrads(pg.data(), centered ? pb.data() : nullptr, chunks, d, dgamma,
                 centered ? dgamma + d : nullptr);
  return out;
}

// q [B.., Tq, D], k [B.., Tk, D], v [B.., Tk, Dv] -> [B.., Tq, Dv]. bf16
// (train.attention's): the weights rounded to bf16 where the online softmax
// makes them (attentionChunkWeights).
template <typename T>
Buf<T> attention(const Buf<T> &q, const Buf<T> &k, const Buf<T> &v, int64_t batch, int64_t tq,
                 int64_t tk, int64_t d, int64_t dv, T scale, bool causal, bool bf16) {
  Buf<T> out(batch * tq * dv, T(0));
  int64_t rows = batch * tq;
#pragma omp parallel for schedule(static) if (rows * tk * (d + dv) > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t b = r / tq, i = r % tq;
    const T *qi = q.data() + r * d;
    const T *kb = k.data() + b * tk * d;
    const T *vb = v.data() + b * tk * dv;
    int64_t end = causal ? i + 1 : tk;
    Buf<T> s(end);
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < end; ++j) {
      T dot = 0;
      for (int64_t p = 0; p < d; ++p)
        dot += qi[p] * kb[j * d + p];
      s[j] = dot * scale;
      mx = std::max(mx, s[j]);
    }
    if (bf16) {
      attentionChunkWeights(s.data(), end);
      T *o = out.data() + r * dv;
      for (int64_t j = 0; j < end; ++j)
        for (int64_t c = 0; c < dv; ++c)
          o[c] += s[j] * vb[j * dv + c];
      continue;
    }
    T sum = 0;
    for (int64_t j = 0; j < end; ++j)
      sum += (s[j] = std::exp(s[j] - mx));
    T *o = out.data() + r * dv;
    for (int64_t j = 0; j < end; ++j) {
      T p = s[j] / sum;
      for (int64_t c = 0; c < dv; ++c)
        o[c] += p * vb[j * dv + c];
    }
  }
  return out;
}

// attention's vector-Jacobian product for the result gradient g: dq, dk and
// dv ([B.., T, D] each) stacked. Per row i of a block: p = softmax(scale
// q_i kᵀ) over the keys it sees, dp_j = g_i · v_j,
// ds_j = p_j (dp_j - sum_l p_l dp_l) scale; dq_i = sum_j ds_j k_j,
// dk_j += ds_j q_i, dv_j += p_j g_i. Blocks in parallel, rows in order.
// bf16 (train.attention_grad's): p_j and ds_j rounded to bf16 before the
// three products.
template <typename T>
Buf<T> attentionGrad(const Buf<T> &q, const Buf<T> &k, const Buf<T> &v, const Buf<T> &g,
                     int64_t batch, int64_t t, int64_t d, T scale, bool causal, bool bf16) {
  auto operand = [bf16](T x) {
    return bf16 ? static_cast<T>(roundToBF16(static_cast<float>(x))) : x;
  };
  const int64_t n = batch * t * d;
  Buf<T> out(3 * n, T(0));
  T *dq = out.data(), *dk = out.data() + n, *dv = out.data() + 2 * n;
#pragma omp parallel for schedule(static) if (batch * t * t * d > 32768)
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t base = b * t * d;
    Buf<T> p(t), dp(t);
    for (int64_t i = 0; i < t; ++i) {
      const T *qi = q.data() + base + i * d, *gi = g.data() + base + i * d;
      int64_t end = causal ? i + 1 : t;
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < end; ++j) {
        T dot = 0, dotv = 0;
        for (int64_t c = 0; c < d; ++c) {
          dot += qi[c] * k[base + j * d + c];
          dotv += gi[c] * v[base + j * d + c];
        }
        p[j] = dot * scale;
        dp[j] = dotv;
        mx = std::max(mx, p[j]);
      }
      T sum = 0;
      for (int64_t j = 0; j < end; ++j)
        sum += (p[j] = std::exp(p[j] - mx));
      T inner = 0;
      for (int64_t j = 0; j < end; ++j) {
        p[j] /= sum;
        inner += p[j] * dp[j];
      }
      for (int64_t j = 0; j < end; ++j) {
        const T ds = operand(p[j] * (dp[j] - inner) * scale), pj = operand(p[j]);
        for (int64_t c = 0; c < d; ++c) {
          dq[base + i * d + c] += ds * k[base + j * d + c];
          dk[base + j * d + c] += ds * qi[c];
          dv[base + j * d + c] += pj * gi[c];
        }
      }
    }
  }
  return out;
}

// Newton-Schulz orthogonalisation of g [m, n]; bf16: every matrix of the
// iteration rounded to bf16 where it is made (train.newton_schulz's bf16).
template <typename T>
Buf<T> newtonSchulz(const Buf<T> &g, int64_t m, int64_t n, int64_t steps,
                    T a, T b, T c, bool bf16) {
  auto rounded = [&](Buf<T> &v) {
    if (bf16)
      for (T &e : v)
        e = kernelmath::st_round_bf16(e);
  };
  T norm = 0;
  for (T v : g)
    norm += v * v;
  norm = std::sqrt(norm) + T(1e-7);
  Buf<T> x(g.size());
  for (size_t i = 0; i < g.size(); ++i)
    x[i] = g[i] / norm;
  rounded(x);
  // Work on the wide orientation so X X^T is the small Gram matrix.
  bool tr = m > n;
  if (tr) {
    x = transpose2D(x, m, n);
    std::swap(m, n);
  }
  for (int64_t s = 0; s < steps; ++s) {
    Buf<T> xt = transpose2D(x, m, n);
    Buf<T> A = matmul(x, xt, 1, m, n, m, false);  // [m, m]
    rounded(A);
    Buf<T> AA = matmul(A, A, 1, m, m, m, false);
    Buf<T> B(A.size());
    for (size_t i = 0; i < A.size(); ++i)
      B[i] = b * A[i] + c * AA[i];
    rounded(B);
    Buf<T> BX = matmul(B, x, 1, m, m, n, false);  // [m, n]
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = a * x[i] + BX[i];
    rounded(x);
  }
  if (tr)
    x = transpose2D(x, m, n);
  return x;
}

} // namespace

// Executor

namespace {
// One node being run by the reference executor: what its op handlers read;
// a handler leaves the node's value in `out`.
template <typename T> struct RefCall {
  size_t i; // the node's index in its phase
  const Node &n;
  const std::vector<Node> &nodes;
  std::vector<Buf<T>> &vals;
  const std::vector<size_t> &lastUse;
  const std::map<std::string, HostTensor> &inputs;
  int64_t t; // the optimizer step
  std::map<std::string, HostTensor> &writes;
  StepResult &result;
  Buf<T> out;

  const Buf<T> &in(int k) const { return vals[n.operands[k]]; }
  const Shape &inShape(int k) const { return nodes[n.operands[k]].shape; }
};
} // namespace

struct RefExecutor::Impl {
  Graph graph;
  Precision precision;
  // State in double: f32 (and bf16) values are exact in double, so one
  // store serves both precisions without loss.
  std::map<std::string, HostTensor> state;
  int64_t counter = 0;
  // Sum of each parameter's Grad over the micro-batches since the last
  // update, and how many micro-batches that was.
  std::map<std::string, HostTensor> gradSum;
  int64_t gradCount = 0;
  // lastUse[phase][i]: the last node reading node i's value (i if none).
  std::vector<size_t> lastUse[3];
  Phase cur = Phase::Step; // the phase being run, for messages

  Impl(const Graph &g, Precision p) : graph(g), precision(p) {
    graph.validate();
    for (Phase ph : {Phase::Step, Phase::Update, Phase::Outer}) {
      const std::vector<Node> &nodes = graph.phase(ph);
      std::vector<size_t> &last = lastUse[static_cast<int>(ph)];
      last.resize(nodes.size());
      for (size_t i = 0; i < nodes.size(); ++i) {
        last[i] = i;
        for (int o : nodes[i].operands)
          last[o] = std::max(last[o], i);
      }
    }
    initialize(0);
  }

  [[noreturn]] void fail(size_t i, const std::string &msg) const {
    const Node &n = graph.phase(cur)[i];
    std::ostringstream os;
    os << opKindName(n.kind) << " (node " << i << ") at "
       << (n.loc.empty() ? std::string("<unknown>") : n.loc) << ": " << msg;
    throw std::runtime_error(os.str());
  }

  // What a value of dtype `t` holds once stored in this precision.
  double storable(double v, DType t) const {
    if (precision == Precision::F64)
      return v;
    float f = static_cast<float>(v);
    return t == DType::BF16 ? roundToBF16(f) : f;
  }

  void initialize(uint64_t seed) {
    state.clear();
    for (const StateDecl &s : graph.states) {
      HostTensor &t = state[s.name];
      t.shape = s.shape;
      t.data.resize(numElements(s.shape));
      for (int64_t i = 0; i < static_cast<int64_t>(t.data.size()); ++i)
        t.data[i] = storable(initialValue(s, seed, i), s.dtype);
    }
    // Versions and anchors start equal to their parameter.
    for (const StateDecl &s : graph.states)
      if (!s.copyOf.empty())
        state[s.name].data = state.at(s.copyOf).data;
    counter = 0;
    gradSum.clear();
    gradCount = 0;
  }

  void checkInputs(const std::map<std::string, HostTensor> &inputs) const {
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      const Node &n = graph.nodes[i];
      if (n.kind != OpKind::Input)
        continue;
      if (subset && std::find(subset->begin(), subset->end(), static_cast<int>(i)) == subset->end())
        continue;
      checkInput(n, inputs);
    }
  }

  // Converts a row id held in T to an index, or throws naming the node.
  template <typename T>
  int64_t rowId(size_t node, T v, int64_t limit, const char *what) const {
    double d = static_cast<double>(v);
    std::string bad = badId(d, limit, what);
    if (!bad.empty())
      fail(node, bad);
    return static_cast<int64_t>(d);
  }

  // Nodes whose values evaluate() copies out (StepResult::probes).
  std::vector<int> probes;
  // Partial runs (pipeline stages): which nodes to run (null: all), where
  // values live between calls, and reads served from another state.
  const std::vector<int> *subset = nullptr;
  ValueEnv *env = nullptr;
  const std::map<std::string, std::string> *redirect = nullptr;
  // Compiled kernels for Kernel nodes (RefExecutor::setKernels).
  std::map<std::string, RefExecutor::KernelFn> kernels;
  // Gossip exchange (RefExecutor::setCollective); empty: identity.
  Collective collective;

  template <typename T>
  StepResult run(const std::map<std::string, HostTensor> &inputs, int64_t t,
                 std::map<std::string, HostTensor> &writes);

  template <typename T> Buf<T> fromHost(const std::vector<double> &src, DType dt) const {
    Buf<T> b(src.size());
    for (size_t i = 0; i < src.size(); ++i)
      b[i] = static_cast<T>(storable(src[i], dt));
    return b;
  }
  template <typename T> static HostTensor toHost(const Buf<T> &b, const Shape &shape) {
    return HostTensor{shape, std::vector<double>(b.begin(), b.end())};
  }

  // Each op kind's reference implementation, in one table (OpTable.h).
  template <typename T> using Handler = void (Impl::*)(RefCall<T> &);
  template <typename T> static const OpTable<Handler<T>> &ops();
  template <typename T> void opBinary(RefCall<T> &nc);
  template <typename T> void opUnary(RefCall<T> &nc);
  template <typename T> void opInput(RefCall<T> &nc);
  template <typename T> void opRead(RefCall<T> &nc);
  template <typename T> void opWrite(RefCall<T> &nc);
  template <typename T> void opGrad(RefCall<T> &nc);
  template <typename T> void opAccumulatedGrad(RefCall<T> &nc);
  template <typename T> void opTransfer(RefCall<T> &nc);
  template <typename T> void opStageSum(RefCall<T> &nc);
  template <typename T> void opGossipMix(RefCall<T> &nc);
  template <typename T> void opKernel(RefCall<T> &nc);
  template <typename T> void opGemm(RefCall<T> &nc);
  template <typename T> void opDescend(RefCall<T> &nc);
  template <typename T> void opYield(RefCall<T> &nc);
  template <typename T> void opConstant(RefCall<T> &nc);
  template <typename T> void opStepCount(RefCall<T> &nc);
  template <typename T> void opMatmul(RefCall<T> &nc);
  template <typename T> void opTranspose(RefCall<T> &nc);
  template <typename T> void opReshape(RefCall<T> &nc);
  template <typename T> void opBroadcast(RefCall<T> &nc);
  template <typename T> void opReduceSum(RefCall<T> &nc);
  template <typename T> void opSliceOrPad(RefCall<T> &nc);
  template <typename T> void opSoftmax(RefCall<T> &nc);
  template <typename T> void opNorm(RefCall<T> &nc);
  template <typename T> void opNormGrad(RefCall<T> &nc);
  template <typename T> void opAttention(RefCall<T> &nc);
  template <typename T> void opAttentionGrad(RefCall<T> &nc);
  template <typename T> void opEmbedding(RefCall<T> &nc);
  template <typename T> void opScatterRows(RefCall<T> &nc);
  template <typename T> void opOneHot(RefCall<T> &nc);
  template <typename T> void opCrossEntropy(RefCall<T> &nc);
  template <typename T> void opNewtonSchulz(RefCall<T> &nc);

  StepResult dispatch(Phase phase, const std::map<std::string, HostTensor> &inputs,
                      int64_t t, std::map<std::string, HostTensor> &writes) {
    cur = phase;
    if (precision == Precision::F32)
      return run<float>(inputs, t, writes);
    return run<double>(inputs, t, writes);
  }

  void commit(std::map<std::string, HostTensor> &writes) {
    for (auto &w : writes)
      state[w.first] = std::move(w.second);
  }
};

template <typename T>
StepResult
RefExecutor::Impl::run(const std::map<std::string, HostTensor> &inputs,
                       int64_t t, std::map<std::string, HostTensor> &writes) {
  if (cur == Phase::Step)
    checkInputs(inputs);
  const std::vector<Node> &nodes = graph.phase(cur);
  // A partial run keeps every value (later calls may read it): no last use.
  std::vector<size_t> keepAll;
  if (env)
    keepAll.assign(nodes.size(), std::numeric_limits<size_t>::max());
  const std::vector<size_t> &lastUse = env ? keepAll : this->lastUse[static_cast<int>(cur)];
  std::vector<Buf<T>> local;
  std::vector<Buf<T>> &vals = env ? env->values<T>() : local;
  vals.resize(nodes.size());
  StepResult result;

  size_t count = subset ? subset->size() : nodes.size();
  for (size_t step = 0; step < count; ++step) {
    size_t i = subset ? static_cast<size_t>((*subset)[step]) : step;
    const Node &n = nodes[i];
    RefCall<T> nc{i, n, nodes, vals, lastUse, inputs, t, writes, result, {}};
    Handler<T> h = ops<T>()[n.kind];
    if (!h)
      fail(i, "no reference implementation");
    (this->*h)(nc);
    Buf<T> &out = nc.out;

    if (std::is_same<T, float>::value && n.dtype == DType::BF16 && n.kind != OpKind::NormGrad)
      for (T &v : out)
        v = static_cast<T>(roundToBF16(static_cast<float>(v)));
    vals[i] = std::move(out);
    if (std::find(probes.begin(), probes.end(), static_cast<int>(i)) != probes.end())
      result.probes[static_cast<int>(i)] =
          HostTensor{n.shape, std::vector<double>(vals[i].begin(), vals[i].end())};

    // Drop every buffer whose last reader was this node (or nobody).
    for (int o : n.operands)
      if (lastUse[o] == i)
        Buf<T>().swap(vals[o]);
    if (lastUse[i] == i)
      Buf<T>().swap(vals[i]);
  }
  return result;
}

template <typename T> const OpTable<RefExecutor::Impl::Handler<T>> &RefExecutor::Impl::ops() {
  static const OpTable<Handler<T>> table =
      OpTable<Handler<T>>("reference")
          .onClass(OpClass::Binary, &Impl::template opBinary<T>)
          .onClass(OpClass::Unary, &Impl::template opUnary<T>)
          .on({OpKind::Input}, &Impl::template opInput<T>)
          .on({OpKind::Read}, &Impl::template opRead<T>)
          .on({OpKind::Write}, &Impl::template opWrite<T>)
          .on({OpKind::Grad}, &Impl::template opGrad<T>)
          .on({OpKind::AccumulatedGrad}, &Impl::template opAccumulatedGrad<T>)
          .on({OpKind::Transfer}, &Impl::template opTransfer<T>)
          .on({OpKind::StageSum}, &Impl::template opStageSum<T>)
          .on({OpKind::GossipMix}, &Impl::template opGossipMix<T>)
          .on({OpKind::Kernel}, &Impl::template opKernel<T>)
          .on({OpKind::Gemm}, &Impl::template opGemm<T>)
          .on({OpKind::Descend}, &Impl::template opDescend<T>)
          .on({OpKind::Yield}, &Impl::template opYield<T>)
          .on({OpKind::Constant}, &Impl::template opConstant<T>)
          .on({OpKind::StepCount}, &Impl::template opStepCount<T>)
          .on({OpKind::Matmul}, &Impl::template opMatmul<T>)
          .on({OpKind::Transpose}, &Impl::template opTranspose<T>)
          .on({OpKind::Reshape}, &Impl::template opReshape<T>)
          .on({OpKind::Broadcast}, &Impl::template opBroadcast<T>)
          .on({OpKind::ReduceSum}, &Impl::template opReduceSum<T>)
          .on({OpKind::Slice, OpKind::Pad}, &Impl::template opSliceOrPad<T>)
          .on({OpKind::Softmax}, &Impl::template opSoftmax<T>)
          .on({OpKind::LayerNorm, OpKind::RmsNorm}, &Impl::template opNorm<T>)
          .on({OpKind::NormGrad}, &Impl::template opNormGrad<T>)
          .on({OpKind::Attention}, &Impl::template opAttention<T>)
          .on({OpKind::AttentionGrad}, &Impl::template opAttentionGrad<T>)
          .on({OpKind::Embedding}, &Impl::template opEmbedding<T>)
          .on({OpKind::ScatterRows}, &Impl::template opScatterRows<T>)
          .on({OpKind::OneHot}, &Impl::template opOneHot<T>)
          .on({OpKind::CrossEntropy}, &Impl::template opCrossEntropy<T>)
          .on({OpKind::NewtonSchulz}, &Impl::template opNewtonSchulz<T>);
  return table;
}

std::vector<OpTableCoverage> referenceOpTables() {
  OpTableCoverage f32 = coverageOf(RefExecutor::Impl::ops<float>()),
                  f64 = coverageOf(RefExecutor::Impl::ops<double>());
  f32.backend += " f32";
  f64.backend += " f64";
  return {f32, f64};
}

template <typename T> void RefExecutor::Impl::opBinary(RefCall<T> &nc) {
  Buf<T> a = expand(nc.in(0), nc.inShape(0), nc.n.shape);
  Buf<T> b = expand(nc.in(1), nc.inShape(1), nc.n.shape);
  nc.out.resize(a.size());
  for (size_t e = 0; e < a.size(); ++e)
    nc.out[e] = binaryOp(nc.n.kind, a[e], b[e]);
}

template <typename T> void RefExecutor::Impl::opUnary(RefCall<T> &nc) {
  nc.out = expand(nc.in(0), nc.inShape(0), nc.n.shape);
  for (T &v : nc.out)
    v = unaryOp(nc.n.kind, v);
}

template <typename T> void RefExecutor::Impl::opInput(RefCall<T> &nc) {
  nc.out = fromHost<T>(nc.inputs.at(nc.n.name).data, nc.n.dtype);
}

template <typename T> void RefExecutor::Impl::opRead(RefCall<T> &nc) {
  const std::string *name = &nc.n.name;
  if (redirect)
    if (auto r = redirect->find(nc.n.name); r != redirect->end())
      name = &r->second;
  auto w = nc.writes.find(*name);
  const HostTensor &h = w != nc.writes.end() ? w->second : state.at(*name);
  nc.out = fromHost<T>(h.data, nc.n.dtype);
}

template <typename T> void RefExecutor::Impl::opWrite(RefCall<T> &nc) {
  DType dt = graph.findState(nc.n.name)->dtype;
  HostTensor h = toHost(nc.in(0), nc.inShape(0));
  for (double &v : h.data)
    v = storable(v, dt);
  nc.writes[nc.n.name] = std::move(h);
}

template <typename T> void RefExecutor::Impl::opGrad(RefCall<T> &nc) {
  nc.result.grads[nc.n.name] = toHost(nc.in(0), nc.inShape(0));
}

template <typename T> void RefExecutor::Impl::opAccumulatedGrad(RefCall<T> &nc) {
  auto it = gradSum.find(nc.n.name);
  if (it == gradSum.end() || gradCount == 0)
    fail(nc.i, "no gradient of '" + nc.n.name + "' was computed since the last update");
  HostTensor mean = it->second;
  for (double &v : mean.data)
    v /= static_cast<double>(gradCount);
  nc.out = fromHost<T>(mean.data, nc.n.dtype);
}

template <typename T> void RefExecutor::Impl::opTransfer(RefCall<T> &nc) { nc.out = nc.in(0); }

template <typename T> void RefExecutor::Impl::opStageSum(RefCall<T> &nc) {
  double sum = 0;
  for (size_t k = 0; k < nc.n.operands.size(); ++k)
    sum += toHost(nc.in(static_cast<int>(k)), nc.inShape(static_cast<int>(k))).data.at(0);
  if (!nc.n.ints.empty()) { // a pipeline stage's copy: all-reduced over the stages
    if (!collective)
      fail(nc.i, "stage_sum of a pipeline stage runs only under the pipeline runtime");
    sum = collective(nc.n, HostTensor{nc.n.shape, {sum}}).data.at(0);
  }
  nc.out = fromHost<T>({sum}, nc.n.dtype);
}

template <typename T> void RefExecutor::Impl::opGossipMix(RefCall<T> &nc) {
  if (collective)
    nc.out = fromHost<T>(collective(nc.n, toHost(nc.in(0), nc.inShape(0))).data, nc.n.dtype);
  else
    nc.out = nc.in(0);
  if (nc.out.size() != static_cast<size_t>(numElements(nc.n.shape)))
    fail(nc.i, "the collective returned " + std::to_string(nc.out.size()) + " values for shape " +
                   shapeToString(nc.n.shape));
}

template <typename T> void RefExecutor::Impl::opKernel(RefCall<T> &nc) {
  // A fused elementwise kernel compiled from the kernel dialect; its
  // element type is the precision's (f32 kernels need F32).
  auto it = kernels.find(nc.n.name);
  if (it == kernels.end())
    fail(nc.i, "compiled kernel '" + nc.n.name + "' was not provided");
  if ((nc.n.dtype == DType::F64) != std::is_same<T, double>::value)
    fail(nc.i, "kernel '" + nc.n.name + "' element type differs from the executor precision");
  std::vector<const void *> ins;
  for (size_t k = 0; k < nc.n.operands.size(); ++k)
    ins.push_back(nc.in(static_cast<int>(k)).data());
  nc.out.resize(numElements(nc.n.shape));
  void *outs[1] = {nc.out.data()};
  it->second(ins.data(), outs);
}

template <typename T> void RefExecutor::Impl::opGemm(RefCall<T> &nc) {
  GemmDims g = gemmDims(nc.n, nc.inShape(0), nc.inShape(1));
  nc.out.assign(numElements(nc.n.shape), T(0));
  gemm(nc.in(0), nc.in(1), nc.out, g.batch, g.m, g.n, g.k, g.ta, g.tb, g.rhsBatched,
       static_cast<T>(g.alpha));
  // (kernel-gemm-epilogue: before any rounding)
  applyGemmEpilogue(nc.n, g, nc.out.data(), nc.in(1).data(),
                    nc.n.operands.size() == 3 ? nc.in(2).data() : nullptr);
}

template <typename T> void RefExecutor::Impl::opDescend(RefCall<T> &nc) {
  const Buf<T> &p = nc.in(0), &dir = nc.in(1);
  T lr = nc.in(2)[0];
  nc.out.resize(p.size());
  for (size_t e = 0; e < p.size(); ++e)
    nc.out[e] = p[e] - lr * dir[e];
}

template <typename T> void RefExecutor::Impl::opYield(RefCall<T> &nc) {
  for (size_t k = 0; k < nc.n.operands.size(); ++k)
    nc.result.outputs.push_back(static_cast<double>(nc.in(k)[0]));
}

template <typename T> void RefExecutor::Impl::opConstant(RefCall<T> &nc) {
  int64_t cnt = numElements(nc.n.shape);
  nc.out = nc.n.data.size() == 1 ? fromHost<T>(std::vector<double>(cnt, nc.n.data[0]), nc.n.dtype)
                                 : fromHost<T>(nc.n.data, nc.n.dtype);
}

template <typename T> void RefExecutor::Impl::opStepCount(RefCall<T> &nc) {
  nc.out.assign(1, static_cast<T>(nc.t));
}

template <typename T> void RefExecutor::Impl::opMatmul(RefCall<T> &nc) {
  const Shape &as = nc.inShape(0), &bs = nc.inShape(1);
  int64_t m = as[as.size() - 2], k = as.back(), nn = bs.back();
  int64_t batch = numElements(Shape(as.begin(), as.end() - 2));
  nc.out = matmul(nc.in(0), nc.in(1), batch, m, k, nn, bs.size() > 2);
}

template <typename T> void RefExecutor::Impl::opTranspose(RefCall<T> &nc) {
  std::vector<int64_t> inSt = stridesOf(nc.inShape(0)), st(nc.n.ints.size());
  for (size_t d = 0; d < nc.n.ints.size(); ++d)
    st[d] = inSt[nc.n.ints[d]];
  nc.out = gather(nc.in(0), nc.n.shape, st);
}

template <typename T> void RefExecutor::Impl::opReshape(RefCall<T> &nc) {
  // Reuse the operand's buffer when nothing else reads it later.
  if (nc.lastUse[nc.n.operands[0]] == nc.i)
    nc.out = std::move(nc.vals[nc.n.operands[0]]);
  else
    nc.out = nc.in(0);
}

template <typename T> void RefExecutor::Impl::opBroadcast(RefCall<T> &nc) {
  nc.out = expand(nc.in(0), nc.inShape(0), nc.n.shape);
}

template <typename T> void RefExecutor::Impl::opReduceSum(RefCall<T> &nc) {
  nc.out.assign(numElements(nc.n.shape), T(0));
  reduceSumWalk(nc.in(0).data(), nc.inShape(0), nc.n.ints, nc.out.data());
}

template <typename T> void RefExecutor::Impl::opSliceOrPad(RefCall<T> &nc) {
  bool isSlice = nc.n.kind == OpKind::Slice;
  Window w = windowOf(nc.n, nc.inShape(0));
  const Buf<T> &x = nc.in(0);
  nc.out.assign(numElements(nc.n.shape), T(0));
  for (int64_t o = 0; o < w.outer; ++o)
    for (int64_t e = 0; e < w.smallA * w.inner; ++e) {
      int64_t bi = w.bigStart(o) + e, si = w.smallStart(o) + e;
      if (isSlice)
        nc.out[si] = x[bi];
      else
        nc.out[bi] = x[si];
    }
}

template <typename T> void RefExecutor::Impl::opSoftmax(RefCall<T> &nc) {
  nc.out = softmax(nc.in(0), nc.n.shape.back(), nc.n.flag);
}

template <typename T> void RefExecutor::Impl::opNorm(RefCall<T> &nc) {
  nc.out = normRows(nc.in(0), nc.in(1), nc.n.kind == OpKind::LayerNorm ? &nc.in(2) : nullptr,
                    nc.n.shape.back(), static_cast<T>(nc.n.floats[0]));
}

template <typename T> void RefExecutor::Impl::opNormGrad(RefCall<T> &nc) {
  nc.out = normGrad(nc.in(0), nc.in(1), nc.in(2), nc.inShape(0).back(),
                    static_cast<T>(nc.n.floats[0]), nc.n.flag);
  // The rows' epilogue (kernel-norm-grad-epilogue); the run loop does not
  // round this node's result as a whole, whose gain and bias rows stay f32
  // (and in f64, as every bf16 node, nothing is rounded).
  const bool round = std::is_same<T, float>::value && nc.n.dtype == DType::BF16;
  if (round || nc.n.operands.size() == 4)
    normGradEpilogue(nc.out.data(), nc.n.operands.size() == 4 ? nc.in(3).data() : nullptr,
                     static_cast<int64_t>(nc.in(0).size()), round);
}

// A packed attention (kernel-attention-layout) as its definition says
// (onHeadBlocks): the attention of the heads gathered into blocks.
template <typename T> void runPackedAttention(RefCall<T> &nc) {
  const bool grad = nc.n.kind == OpKind::AttentionGrad;
  const T scale = static_cast<T>(nc.n.floats[0]);
  Buf<T> blocks, result;
  nc.out.assign(static_cast<size_t>(numElements(nc.n.shape)), T(0));
  onHeadBlocks<T>(nc.inShape(0), nc.in(0).data(), grad ? nc.in(1).data() : nullptr, blocks,
                  result, nc.out.data(),
                  [&](const AttentionDims &a, const T *q, const T *k, const T *v, const T *g,
                      T *out) {
                    const int64_t n = a.batch * a.tq * a.d;
                    auto buf = [n](const T *p) { return Buf<T>(p, p + n); };
                    const Buf<T> r =
                        grad ? attentionGrad(buf(q), buf(k), buf(v), buf(g), a.batch, a.tq, a.d,
                                             scale, nc.n.flag, attentionRoundsProducts(nc.n))
                             : attention(buf(q), buf(k), buf(v), a.batch, a.tq, a.tk, a.d, a.dv,
                                         scale, nc.n.flag, attentionRoundsProducts(nc.n));
                    std::copy(r.begin(), r.end(), out);
                  });
}

template <typename T> void RefExecutor::Impl::opAttention(RefCall<T> &nc) {
  if (packedAttention(nc.n))
    return runPackedAttention(nc);
  AttentionDims a = attentionDims(nc.inShape(0), nc.inShape(1), nc.inShape(2));
  nc.out = attention(nc.in(0), nc.in(1), nc.in(2), a.batch, a.tq, a.tk, a.d, a.dv,
                     static_cast<T>(nc.n.floats[0]), nc.n.flag, attentionRoundsProducts(nc.n));
}

template <typename T> void RefExecutor::Impl::opAttentionGrad(RefCall<T> &nc) {
  if (packedAttention(nc.n))
    return runPackedAttention(nc);
  const Shape &qs = nc.inShape(0);
  int64_t t = qs[qs.size() - 2], d = qs.back();
  nc.out = attentionGrad(nc.in(0), nc.in(1), nc.in(2), nc.in(3),
                         numElements(Shape(qs.begin(), qs.end() - 2)), t, d,
                         static_cast<T>(nc.n.floats[0]), nc.n.flag, attentionRoundsProducts(nc.n));
}

template <typename T> void RefExecutor::Impl::opEmbedding(RefCall<T> &nc) {
  const Buf<T> &table = nc.in(0), &ids = nc.in(1);
  int64_t v = nc.inShape(0)[0], d = nc.inShape(0)[1];
  nc.out.resize(ids.size() * d);
  for (size_t r = 0; r < ids.size(); ++r) {
    int64_t id = rowId(nc.i, ids[r], v, "id");
    std::copy(table.begin() + id * d, table.begin() + (id + 1) * d, nc.out.begin() + r * d);
  }
}

template <typename T> void RefExecutor::Impl::opScatterRows(RefCall<T> &nc) {
  const Buf<T> &ids = nc.in(0), &g = nc.in(1);
  int64_t v = nc.n.shape[0], d = nc.n.shape[1];
  nc.out.assign(v * d, T(0));
  for (size_t r = 0; r < ids.size(); ++r) {
    int64_t id = rowId(nc.i, ids[r], v, "id");
    for (int64_t c = 0; c < d; ++c)
      nc.out[id * d + c] += g[r * d + c];
  }
}

template <typename T> void RefExecutor::Impl::opOneHot(RefCall<T> &nc) {
  const Buf<T> &ids = nc.in(0);
  int64_t c = nc.n.shape.back();
  nc.out.assign(ids.size() * c, T(0));
  for (size_t r = 0; r < ids.size(); ++r)
    nc.out[r * c + rowId(nc.i, ids[r], c, "class id")] = T(1);
}

template <typename T> void RefExecutor::Impl::opCrossEntropy(RefCall<T> &nc) {
  const Buf<T> &logits = nc.in(0), &tgt = nc.in(1);
  int64_t c = nc.inShape(0).back();
  T total = 0;
  for (size_t r = 0; r < tgt.size(); ++r) {
    int64_t y = rowId(nc.i, tgt[r], c, "target");
    total += kernelmath::st_cross_entropy_row(logits.data() + r * c, c, y);
  }
  nc.out.assign(1, tgt.empty() ? T(0) : total / T(tgt.size()));
}

// One matrix, or a batch: each operand on its own, the results stacked.
template <typename T> void RefExecutor::Impl::opNewtonSchulz(RefCall<T> &nc) {
  const Shape &g = nc.inShape(0);
  nc.out.clear();
  for (size_t k = 0; k < nc.n.operands.size(); ++k) {
    Buf<T> o = newtonSchulz(nc.in(static_cast<int>(k)), g[0], g[1], nc.n.ints[0],
                            static_cast<T>(nc.n.floats[0]), static_cast<T>(nc.n.floats[1]),
                            static_cast<T>(nc.n.floats[2]), nc.n.flag);
    nc.out.insert(nc.out.end(), o.begin(), o.end());
  }
}

RefExecutor::RefExecutor(const Graph &graph, Precision precision)
    : impl(new Impl(graph, precision)) {}

RefExecutor::~RefExecutor() { delete impl; }

void RefExecutor::initialize(uint64_t seed) { impl->initialize(seed); }

StepResult RefExecutor::step(const std::map<std::string, HostTensor> &inputs) {
  StepResult r = microStep(inputs);
  update();
  return r;
}

StepResult RefExecutor::microStep(const std::map<std::string, HostTensor> &inputs) {
  // Writes collect in an overlay (Reads see them at once) and commit only
  // when the whole phase succeeded, so a throwing step leaves no half update.
  std::map<std::string, HostTensor> writes;
  StepResult r = impl->dispatch(Phase::Step, inputs, impl->counter + 1, writes);
  impl->commit(writes);
  accumulateGrads(r);
  return r;
}

StepResult RefExecutor::runNodes(const std::vector<int> &nodes, ValueEnv &env,
                                 const std::map<std::string, HostTensor> &inputs,
                                 const std::map<std::string, std::string> &redirect) {
  std::map<std::string, HostTensor> writes;
  impl->subset = &nodes;
  impl->env = &env;
  impl->redirect = &redirect;
  StepResult r;
  try {
    r = impl->dispatch(Phase::Step, inputs, impl->counter + 1, writes);
  } catch (...) {
    impl->subset = nullptr, impl->env = nullptr, impl->redirect = nullptr;
    throw;
  }
  impl->subset = nullptr, impl->env = nullptr, impl->redirect = nullptr;
  impl->commit(writes);
  return r;
}

HostTensor RefExecutor::envValue(ValueEnv &env, int node) const {
  const Node &n = impl->graph.nodes.at(node);
  if (impl->precision == Precision::F32) {
    auto &v = env.values<float>().at(node);
    return HostTensor{n.shape, std::vector<double>(v.begin(), v.end())};
  }
  auto &v = env.values<double>().at(node);
  return HostTensor{n.shape, v};
}

void RefExecutor::accumulateGrads(const StepResult &r) {
  for (auto &[name, g] : r.grads) {
    auto [it, fresh] = impl->gradSum.try_emplace(name, g);
    if (!fresh)
      for (size_t e = 0; e < g.data.size(); ++e)
        it->second.data[e] += g.data[e];
  }
  ++impl->gradCount;
}

void RefExecutor::reduceGradSums(const std::function<void(GradSums &)> &reduce, int64_t ranks,
                                 bool) {
  GradSums sums;
  for (auto &[name, t] : impl->gradSum)
    sums.f64.emplace_back(t.data.data(), t.data.size());
  reduce(sums);
  impl->gradCount *= ranks;
}

void RefExecutor::update() {
  std::map<std::string, HostTensor> writes;
  impl->dispatch(Phase::Update, {}, impl->counter + 1, writes);
  impl->commit(writes);
  impl->gradSum.clear();
  impl->gradCount = 0;
  ++impl->counter;
}

void RefExecutor::outerStep() {
  std::map<std::string, HostTensor> writes;
  impl->dispatch(Phase::Outer, {}, impl->counter, writes);
  impl->commit(writes);
}

StepResult
RefExecutor::evaluate(const std::map<std::string, HostTensor> &inputs,
                      const std::vector<int> &probes) {
  std::map<std::string, HostTensor> writes;
  impl->probes = probes;
  StepResult r = impl->dispatch(Phase::Step, inputs, impl->counter + 1, writes);
  impl->probes.clear();
  return r;
}

HostTensor RefExecutor::getState(const std::string &name) const {
  auto it = impl->state.find(name);
  if (it == impl->state.end())
    throw std::runtime_error("getState: no state named '" + name + "'");
  return it->second;
}

std::string RefExecutor::nonFiniteState() const {
  for (const StateDecl &d : impl->graph.states) {
    auto it = impl->state.find(d.name);
    if (it == impl->state.end())
      continue;
    for (double v : it->second.data)
      if (!std::isfinite(v))
        return "'" + d.name + "' holds " + std::to_string(v);
  }
  return "";
}

void RefExecutor::setState(const std::string &name, const HostTensor &value) {
  const StateDecl *s = impl->graph.findState(name);
  if (!s)
    throw std::runtime_error("setState: no state named '" + name + "'");
  checkStateValue(name, s->shape, value);
  HostTensor t = value;
  for (double &v : t.data)
    v = impl->storable(v, s->dtype);
  impl->state[name] = std::move(t);
}

int64_t RefExecutor::stepCount() const { return impl->counter; }

void RefExecutor::setStepCount(int64_t t) { impl->counter = t; }

void RefExecutor::setCollective(Collective fn) { impl->collective = std::move(fn); }

void RefExecutor::setKernels(std::map<std::string, KernelFn> kernels) {
  impl->kernels = std::move(kernels);
}

} // namespace stretto
