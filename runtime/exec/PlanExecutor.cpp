//===- PlanExecutor.cpp - the compiled CPU runtime ------------------------===//
//
// See PlanExecutor.h. Where a row op can follow the reference executor's
// order of floating-point operations at no cost it does (softmax, norms,
// cross-entropy, column sums), so those values match the oracle bit for bit;
// row sums use 16 partial sums (vectorised), and attention (BLAS products,
// lane-split rows, st_exp_f), matmul and Newton-Schulz (BLAS) match within
// f32 rounding. Every order is
// fixed, independent of the thread count.
//
//===----------------------------------------------------------------------===//

#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Runtime/Gemm.h"
#include "stretto/Support/Flops.h"
#include "exec/PlanImpl.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

namespace stretto {

using namespace ops;
using namespace planning;

namespace {

// Offset of the first element of output row `row` (all dims but the last)
// through strides `st`.
int64_t rowOffset(int64_t row, const Shape &out, const std::vector<int64_t> &st) {
  int64_t off = 0;
  for (int d = static_cast<int>(out.size()) - 2; d >= 0; --d) {
    off += (row % out[d]) * st[d];
    row /= out[d];
  }
  return off;
}

// out[idx] = in[sum_d idx_d * st[d]] over the index space `out`: transposes
// and broadcasts. Parallel over rows; a contiguous or broadcast inner dim
// is a copy or a fill.
void stridedGather(const float *in, const Shape &out, const std::vector<int64_t> &st, float *dst) {
  if (out.empty()) {
    dst[0] = in[0];
    return;
  }
  int64_t inner = out.back(), rows = numElements(out) / std::max<int64_t>(inner, 1);
  int64_t s = st.back();
#pragma omp parallel for schedule(static) if (rows * inner > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float *src = in + rowOffset(r, out, st);
    float *d = dst + r * inner;
    if (s == 1)
      std::memcpy(d, src, sizeof(float) * inner);
    else if (s == 0)
      std::fill(d, d + inner, src[0]);
    else
      for (int64_t j = 0; j < inner; ++j)
        d[j] = src[j * s];
  }
}

// c = alpha * op(a) * op(b) for `batch` blocks; a shared rhs with an
// untransposed lhs folds the batch into the rows (one large GEMM).
void batchedGemm(const float *a, const float *b, float *c, int64_t batch, int64_t m, int64_t n,
                 int64_t k, bool ta, bool tb, bool rhsBatched, float alpha) {
  auto one = [&](int64_t rows, const float *ap, const float *bp, float *cp) {
    sgemm(ta, tb, static_cast<int>(rows), static_cast<int>(n), static_cast<int>(k), alpha, ap,
          ta ? static_cast<int>(rows) : static_cast<int>(k), bp,
          tb ? static_cast<int>(k) : static_cast<int>(n), 0.0f, cp, static_cast<int>(n));
  };
  if (!rhsBatched && !ta) {
    one(batch * m, a, b, c);
    return;
  }
  // Many small matrices (attention's per-head products): one matrix per
  // thread beats splitting each small GEMM over every thread. Inside the
  // parallel region the GEMM library (OpenBLAS's OpenMP build, oneDNN) runs
  // single-threaded.
  if (batch >= 2 * omp_get_max_threads() && m * n * k <= (int64_t(1) << 22)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < batch; ++i)
      one(m, a + i * m * k, b + (rhsBatched ? i * k * n : 0), c + i * m * n);
    return;
  }
  for (int64_t i = 0; i < batch; ++i)
    one(m, a + i * m * k, b + (rhsBatched ? i * k * n : 0), c + i * m * n);
}

// Sum of n floats with 16 interleaved partial sums (vectorisable; a fixed
// order, so the result does not depend on threads). The reference sums
// serially: results agree within f32 rounding, not bit for bit.
float sumFloats(const float *x, int64_t n) {
  float acc[16] = {0};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l)
      acc[l] += x[j + l];
  float s = 0.0f;
  for (int l = 0; l < 16; ++l)
    s += acc[l];
  for (; j < n; ++j)
    s += x[j];
  return s;
}

// Row sums in blocks of kSumBlock, each by sumFloats, blocks added in order:
// the order of a fused row-sum kernel (kernel.reduce), so both give the
// same bits.
constexpr int64_t kSumBlock = 16384;
float blockedSum(const float *x, int64_t n) {
  float s = 0.0f;
  for (int64_t b = 0; b < n; b += kSumBlock)
    s += sumFloats(x + b, std::min(kSumBlock, n - b));
  return s;
}

// Per-ISA variants need x86-64 and a compiler that knows the x86-64-v3/v4
// target names (GCC 12, Clang 12); elsewhere the row loops are built once.
#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 12) ||                     \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12))
#define ST_ROW_VARIANTS 1
#else
#define ST_ROW_VARIANTS 0
#endif

// The ISA the row loops below run: the best this CPU has, capped by
// STRETTO_RUNTIME_ISA=baseline|avx2|avx512 (set by benchmarks that emulate
// an older host: kernel_bench.py --emulate-avx2). Chosen once per process;
// the PlanExecutor constructor refuses a value it does not know.
enum class RowIsa { Baseline, V3, V4 };
const char *const kRowIsaNames[] = {"x86-64", "x86-64-v3 (AVX2)", "x86-64-v4 (AVX-512)"};

// STRETTO_RUNTIME_ISA as a cap (unset or empty: none); false for a value it
// does not know.
bool rowIsaCap(RowIsa &cap) {
  const char *e = std::getenv("STRETTO_RUNTIME_ISA");
  cap = RowIsa::V4;
  if (!e || !*e || !std::strcmp(e, "avx512"))
    return true;
  if (!std::strcmp(e, "avx2"))
    cap = RowIsa::V3;
  else if (!std::strcmp(e, "baseline"))
    cap = RowIsa::Baseline;
  else
    return false;
  return true;
}

RowIsa rowLoopIsa() {
  static const RowIsa isa = [] {
    RowIsa best = RowIsa::Baseline;
#if ST_ROW_VARIANTS
    // The x86-64-v3 and -v4 feature sets, feature by feature (older
    // compilers do not know the level names here).
    __builtin_cpu_init();
    const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c");
    const bool v4 = v3 && __builtin_cpu_supports("avx512f") &&
                    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd");
    best = v4 ? RowIsa::V4 : v3 ? RowIsa::V3 : RowIsa::Baseline;
#endif
    RowIsa cap;
    rowIsaCap(cap); // (an unknown value was refused when the executor was built)
    return std::min(best, cap);
  }();
  return isa;
}

void checkRowIsaEnv() {
  RowIsa cap;
  if (!rowIsaCap(cap))
    throw std::runtime_error(std::string("STRETTO_RUNTIME_ISA='") +
                             std::getenv("STRETTO_RUNTIME_ISA") +
                             "': expected baseline, avx2 or avx512");
}

// The row loops (softmax, norms, cross-entropy, attention's rows, column
// sums) are built for three ISAs: the runtime is otherwise built for
// baseline x86-64, and these loops are what vectorises. ST_ROW_LOOP(type,
// name, callee, params, args) defines `type name params`, which runs
// `callee args` built for baseline x86-64, x86-64-v3 (AVX2, FMA) or
// x86-64-v4 (AVX-512), chosen once per process (rowLoopIsa); the variants
// are flattened, so the callee and everything it calls (KernelMath.inc)
// are compiled for their ISA. No FP contraction (-ffp-contract=off,
// runtime/CMakeLists.txt), so every variant gives the same bits.
#if ST_ROW_VARIANTS
#define ST_ROW_VARIANT(isa) __attribute__((target("arch=x86-64-" #isa), flatten))
#define ST_ROW_LOOP(type, name, callee, params, args)                                            \
  ST_ROW_VARIANT(v3) type name##V3 params { return callee args; }                                \
  ST_ROW_VARIANT(v4) type name##V4 params { return callee args; }                                \
  type name params {                                                                             \
    switch (rowLoopIsa()) {                                                                      \
    case RowIsa::V4: return name##V4 args;                                                       \
    case RowIsa::V3: return name##V3 args;                                                       \
    default: return callee args;                                                                 \
    }                                                                                            \
  }
#else
#define ST_ROW_LOOP(type, name, callee, params, args)                                            \
  type name params { return callee args; }
#endif

// One row each (called inside the parallel loops below).
ST_ROW_LOOP(void, softmaxRowAnyIsa, softmaxRow<float>,
            (const float *x, float *y, int64_t len, bool causal, int64_t pos),
            (x, y, len, causal, pos))
ST_ROW_LOOP(void, normRowAnyIsa, normRow<float>,
            (const float *x, const float *gamma, const float *beta, float *y, int64_t d,
             float eps),
            (x, gamma, beta, y, d, eps))
ST_ROW_LOOP(void, normGradChunkAnyIsa, normGradChunk<float>,
            (const float *x, const float *gamma, const float *dy, float *dx, int64_t n,
             int64_t d, float eps, bool centered, float *pg, float *pb),
            (x, gamma, dy, dx, n, d, eps, centered, pg, pb))
ST_ROW_LOOP(float, crossEntropyRow, kernelmath::st_cross_entropy_row<float>,
            (const float *x, int64_t c, int64_t target), (x, c, target))

void softmaxRows(const float *x, float *y, int64_t rows, int64_t len, bool causal,
                 int64_t causalPeriod) {
#pragma omp parallel for schedule(static) if (rows * len > 32768)
  for (int64_t r = 0; r < rows; ++r)
    softmaxRowAnyIsa(x + r * len, y + r * len, len, causal, r % causalPeriod);
}

// Attention's softmax, in place, over rows r0 .. r0+rn-1 of S (row stride
// ld) and their first kn columns; causal: row r sees columns 0..r and the
// rest of its kn are 0. KernelMath's st_softmax_row: lane-split max and
// sum, st_exp_f, so the row vectorises (glibc's expf and one running sum
// made this loop as slow as the block's two GEMMs). The reference
// executor's attention keeps its own loops (its own order): the two agree
// to f32 rounding, as the BLAS products already made them.
inline void attentionSoftmaxRowsBody(float *S, int64_t ld, int64_t r0, int64_t rn, int64_t kn,
                                     bool causal) {
  for (int64_t r = r0; r < r0 + rn; ++r)
    softmaxRow(S + r * ld, S + r * ld, kn, causal, r);
}
ST_ROW_LOOP(void, attentionSoftmaxRows, attentionSoftmaxRowsBody,
            (float *S, int64_t ld, int64_t r0, int64_t rn, int64_t kn, bool causal),
            (S, ld, r0, rn, kn, causal))

// attention_grad's dS rows (OpSemantics softmaxGradRow) over the same
// window: P's rows in P, dP's in dS (row stride ld), dS in place.
inline void attentionGradRowsBody(const float *P, float *dS, int64_t ld, int64_t r0, int64_t rn,
                                  int64_t kn, bool causal, float scale) {
  for (int64_t r = r0; r < r0 + rn; ++r)
    softmaxGradRow(P + r * ld, dS + r * ld, kn, causal, r, scale);
}
ST_ROW_LOOP(void, attentionGradRows, attentionGradRowsBody,
            (const float *P, float *dS, int64_t ld, int64_t r0, int64_t rn, int64_t kn,
             bool causal, float scale),
            (P, dS, ld, r0, rn, kn, causal, scale))

// dst[j] = sum_r src[r * ld + j] for j < w, each in increasing r (the
// reference's order). A full block of kColumnBlock sums in a local array
// (registers once vectorised: dst may alias nothing the compiler can see,
// so summing into dst loaded and stored it every row); twice the speed.
constexpr int64_t kColumnBlock = 64;
inline void columnSumsBody(const float *src, float *dst, int64_t rows, int64_t ld, int64_t w) {
  if (w == kColumnBlock) {
    float acc[kColumnBlock] = {};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < kColumnBlock; ++j)
        acc[j] += src[r * ld + j];
    for (int64_t j = 0; j < kColumnBlock; ++j)
      dst[j] = acc[j];
    return;
  }
  for (int64_t j = 0; j < w; ++j)
    dst[j] = 0.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < w; ++j)
      dst[j] += src[r * ld + j];
}
ST_ROW_LOOP(void, columnSums, columnSumsBody,
            (const float *src, float *dst, int64_t rows, int64_t ld, int64_t w),
            (src, dst, rows, ld, w))

// Causal attention skips the products above the diagonal: query rows go in
// blocks of kQueryBlock, and block [r0, r0 + rn) multiplies only keys
// 0 .. r0 + rn - 1 (kn). With T = 128, a quarter of every product's work.
constexpr int64_t kQueryBlock = 64;
struct QueryBlock {
  int64_t r0, rn, kn;
};
std::vector<QueryBlock> queryBlocks(int64_t tq, int64_t tk, bool causal) {
  if (!causal)
    return {{0, tq, tk}};
  std::vector<QueryBlock> blocks;
  for (int64_t r0 = 0; r0 < tq; r0 += kQueryBlock) {
    int64_t rn = std::min(kQueryBlock, tq - r0);
    blocks.push_back({r0, rn, r0 + rn});
  }
  return blocks;
}

} // namespace
// The host device

namespace {

class HostDevice final : public PlanDevice {
public:
  explicit HostDevice(std::map<std::string, PlanExecutor::KernelFn> k) : kernels(std::move(k)) {}
  const char *name() const override { return "cpu"; }
  bool hasKernel(const std::string &name) const override { return kernels.count(name) != 0; }
  float *alloc(int64_t n) override {
    // 64-byte aligned (kAlign floats), zeroed.
    size_t bytes = static_cast<size_t>(alignUp(n)) * sizeof(float);
    void *p = std::aligned_alloc(kAlign * sizeof(float), bytes);
    if (!p)
      throw std::bad_alloc();
    std::memset(p, 0, bytes);
    return static_cast<float *>(p);
  }
  void release(float *p) override { std::free(p); }
  void upload(float *dst, const float *host, int64_t n) override {
    std::memcpy(dst, host, sizeof(float) * n);
  }
  void download(float *host, const float *src, int64_t n) override {
    std::memcpy(host, src, sizeof(float) * n);
  }
  void copy(float *dst, const float *src, int64_t n) override {
    std::memmove(dst, src, sizeof(float) * n);
  }
  void accumulate(float *dst, const float *src, int64_t n) override {
    for (int64_t e = 0; e < n; ++e)
      dst[e] += src[e];
  }
  void divide(float *dst, int64_t n, float d) override {
    for (int64_t e = 0; e < n; ++e)
      dst[e] /= d;
  }
  void exec(PlanExecutor::Impl &rt, const PhasePlan &p, int i, const TensorMap &inputs,
            int64_t t, StepResult &result) override;

  // Each op kind's implementation on the host, in one table (OpTable.h).
  using Handler = void (HostDevice::*)(NodeCall &);
  static const OpTable<Handler> &ops();
  STRETTO_PLAN_DEVICE_HANDLERS

private:
  std::map<std::string, PlanExecutor::KernelFn> kernels;
  std::vector<float> rounded; // bf16 GEMM operands
  // opAttention before any rounding of its result, of [B.., T, D] operands
  void attentionF32(NodeCall &nc, const AttentionDims &a, const float *q, const float *k,
                    const float *v, float *out);
  void attentionGradF32(NodeCall &nc, const AttentionDims &a, const float *q, const float *k,
                        const float *v, const float *g, float *out); // likewise
  void packedAttentionF32(NodeCall &nc);                             // either, of a packed qkv
  // opNewtonSchulz's iteration of one matrix g (of operand 0's shape) into out.
  void newtonSchulzOne(NodeCall &nc, const float *g, float *out);

  // bf16 GEMMs: each operand is replaced by a copy rounded to bf16 (round
  // to nearest even); BLAS then sums the exact products in f32, which is
  // what a bf16 x bf16 -> f32 tensor-core GEMM computes.
  void roundOperands(std::initializer_list<const float **> ptrs,
                     std::initializer_list<int64_t> counts) {
    int64_t total = 0;
    for (int64_t c : counts)
      total += alignUp(c);
    if (static_cast<int64_t>(rounded.size()) < total)
      rounded.resize(total);
    float *dst = rounded.data();
    auto c = counts.begin();
    for (const float **pp : ptrs) {
      const float *src = *pp;
      int64_t n = *c++;
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t e = 0; e < n; ++e)
        dst[e] = roundToBF16(src[e]);
      *pp = dst;
      dst += alignUp(n);
    }
  }
};

} // namespace


StepResult PlanExecutor::Impl::run(const PhasePlan &p, const TensorMap &inputs, int64_t t,
                                   bool probesOut, const std::vector<int> &probes) {
  cur = p.phase;
  if (p.phase == Phase::Step)
    checkInputs(p.order, inputs);
  ensure(arena, p.arenaFloats);
  const std::vector<Node> &nodes = graph.phase(p.phase);
  val.assign(nodes.size(), nullptr);
  StepResult result = runRange(p, 0, p.order.size(), arena.data, inputs, t);
  if (probesOut)
    for (int k : probes)
      result.probes[k] = hostTensor(nodes[k].shape, val[k], p.slots[k].half, p.slots[k].halfLead);
  return result;
}

// Bytes of value v of plan p as stored: two an element for a bf16 value
// held in two.
static double storedBytes(const PhasePlan &p, const std::vector<Node> &nodes, int v) {
  const double n = static_cast<double>(numElements(nodes[v].shape));
  const double lead = static_cast<double>(p.slots[v].halfLead); // (two bytes each)
  return (p.slots[v].half ? 2.0 : 4.0) * (n - lead) + 2.0 * lead;
}

bool PlanExecutor::Impl::runLaunchGroup(const PhasePlan &p, const std::vector<int> &members,
                                        const std::string &key, const std::function<bool()> &run) {
  if (!profiling)
    return run();
  auto t0 = std::chrono::steady_clock::now();
  if (!run())
    return false;
  dev->finish();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto &e = profile[OpKind::Kernel];
  e.first += sec;
  ++e.second;
  const std::vector<Node> &nodes = graph.phase(p.phase);
  KernelTime &k = kernelProfile[key + "[" + std::to_string(members.size()) + "]"];
  k.seconds += sec;
  ++k.calls;
  const std::set<int> inside(members.begin(), members.end());
  std::set<int> read;
  for (int m : members) {
    k.bytes += storedBytes(p, nodes, m);
    for (int o : nodes[m].operands)
      if (!inside.count(o) && read.insert(o).second)
        k.bytes += storedBytes(p, nodes, o);
  }
  return true;
}

StepResult PlanExecutor::Impl::runRange(const PhasePlan &p, size_t begin, size_t end,
                                        float *arenaBase, const TensorMap &inputs, int64_t t) {
  cur = p.phase;
  const std::vector<Node> &nodes = graph.phase(p.phase);
  StepResult result;
  auto bind = [&](int i) {
    const Slot &s = p.slots[i];
    switch (s.where) {
    case Where::Arena: val[i] = arenaBase + s.offset; break;
    case Where::State: val[i] = states[s.ref].data; break;
    case Where::GradSum: val[i] = gradSums[s.ref].data; break;
    case Where::Constant: val[i] = constants[s.ref].data; break;
    case Where::Alias: val[i] = val[s.ref] + s.offset; break;
    case Where::None: break;
    }
  };
  size_t group = 0; // the next multi-tensor group (PhasePlan::groups)
  while (group < p.groups.size() && static_cast<size_t>(p.groups[group].first) < begin)
    ++group;
  size_t chain = 0; // the next chain run (PhasePlan::chains)
  while (chain < p.chains.size() && static_cast<size_t>(p.chains[chain].first) < begin)
    ++chain;
  for (size_t k = begin; k < end; ++k) {
    if (chain < p.chains.size() && static_cast<size_t>(p.chains[chain].first) == k &&
        static_cast<size_t>(p.chains[chain].end) <= end) {
      const PhasePlan::ChainRun &run = p.chains[chain++];
      std::vector<int> members(p.order.begin() + run.first, p.order.begin() + run.end);
      for (int m : members)
        bind(m);
      if (runLaunchGroup(p, members, dev->chainKernel(run.signature),
                         [&] { return dev->execChain(*this, p, run); })) {
        k = static_cast<size_t>(run.end) - 1;
        while (group < p.groups.size() && p.groups[group].first < run.end)
          ++group;
        continue;
      }
    }
    if (group < p.groups.size() && static_cast<size_t>(p.groups[group].first) == k &&
        static_cast<size_t>(p.groups[group].second) <= end) {
      std::vector<int> members(p.order.begin() + p.groups[group].first,
                               p.order.begin() + p.groups[group].second);
      ++group;
      for (int m : members)
        bind(m);
      if (runLaunchGroup(p, members, dev->multiKernel(nodes[members.front()].name),
                         [&] { return dev->execGroup(*this, p, members); })) {
        k += members.size() - 1;
        continue;
      }
    }
    int i = p.order[k];
    bind(i);
    if (!profiling) {
      dev->exec(*this, p, i, inputs, t, result);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    dev->exec(*this, p, i, inputs, t, result);
    dev->finish();
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto &e = profile[nodes[i].kind];
    e.first += sec;
    ++e.second;
    const Node &pn = nodes[i];
    const bool memoryOp = pn.kind == OpKind::ReduceSum || pn.kind == OpKind::Transpose;
    if (pn.kind == OpKind::Kernel || pn.kind == OpKind::Gemm || pn.kind == OpKind::Attention ||
        pn.kind == OpKind::AttentionGrad || memoryOp) {
      std::string key = pn.kind == OpKind::Kernel ? pn.name : std::string(opKindName(pn.kind));
      if (pn.kind != OpKind::Kernel) {
        for (int o : pn.operands)
          key += " " + shapeToString(nodes[o].shape);
        if (pn.kind == OpKind::Gemm) { // (and its epilogue: GemmEpilogue's order)
          static const char *const kEpilogue[] = {"", " +bias", " *dgelu", " +bias_grad",
                                                  " gelu+aux"};
          key += " t" + std::to_string(pn.ints[0]) + std::to_string(pn.ints[1]) +
                 kEpilogue[static_cast<int>(gemmEpilogue(pn))];
        }
        if (memoryOp)
          key += " -> " + shapeToString(pn.shape);
      }
      auto &k = kernelProfile[key];
      k.seconds += sec;
      ++k.calls;
      if (pn.kind == OpKind::Kernel || memoryOp) {
        k.bytes += storedBytes(p, nodes, i);
        for (int o : pn.operands)
          k.bytes += storedBytes(p, nodes, o);
      } else if (pn.kind == OpKind::Gemm) {
        GemmDims g = gemmDims(pn, nodes[pn.operands[0]].shape, nodes[pn.operands[1]].shape);
        k.flops += 2.0 * g.batch * g.m * g.n * g.k;
      } else {
        const AttentionDims a = attentionDimsOf(pn, nodes);
        k.flops += pn.kind == OpKind::Attention
                       ? attentionFlops(double(a.batch), double(a.tq), double(a.tk), double(a.d),
                                        double(a.dv))
                       : attentionGradFlops(double(a.batch), double(a.tq), double(a.d));
      }
    }
  }
  dev->collect(result);
  return result;
}

// A micro-step or an update, run eagerly or replayed from a CUDA graph.
// Graphs need a device that records (a GPU), no profiling and
// STRETTO_CUDA_GRAPHS not 0. A key's first run is eager: it loads kernels,
// sizes the scratch, picks GEMM algorithms and page-locks input slots; its
// second is recorded, then launched; later ones only launch (the inputs'
// host work, then one graph). A run that needs the host mid-way (a
// collective, a download) is left eager for good. Graphs hold addresses:
// when a buffer moves (a larger arena for an evaluation), all are dropped,
// and each kind runs eagerly once more (its tables and scratch follow the
// move) before it is recorded again.
StepResult PlanExecutor::Impl::recorded(int64_t key, const TensorMap &inputs, int64_t t,
                                        const std::function<StepResult()> &body) {
  if (!graphsWanted || profiling || !dev->canRecord())
    return body();
  const int64_t epoch = memoryEpoch + dev->memoryEpoch();
  if (epoch != recordedEpoch) {
    bool any = false;
    for (auto &[k, r] : recordings) { // each kind runs eagerly once more
      any = any || r.graph >= 0;
      r.graph = -1;
      r.runs = 0;
    }
    if (any)
      dev->dropRecordings();
    recordedEpoch = epoch;
  }
  Recorded &r = recordings[key];
  if (r.graph >= 0) {
    cur = key == 0 || key == 1 ? Phase::Step : Phase::Update;
    if (cur == Phase::Step)
      checkInputs(stepPlan.order, inputs);
    StepResult result;
    dev->replay(r.graph, inputs, t, result);
    ++stats.graphLaunches;
    return result;
  }
  if (r.never || r.runs++ == 0)
    return body();
  // The driver refusing a capture (begin or end) turns graphs off for this
  // executor, with one line on stderr; the run goes on eagerly. An error
  // of the run itself (a bad id) is the run's.
  auto refused = [&](const std::exception &e) {
    std::fprintf(stderr, "stretto: CUDA graphs off for this run (%s)\n", e.what());
    graphsWanted = false;
    return body();
  };
  try {
    dev->beginRecording();
  } catch (const std::exception &e) {
    return refused(e);
  }
  try {
    body();
  } catch (const NotRecordable &) {
    dev->abandonRecording();
    r.never = true;
    return body(); // nothing ran: the recording only queued
  } catch (...) {
    dev->abandonRecording();
    throw;
  }
  try {
    r.graph = dev->endRecording();
  } catch (const std::exception &e) {
    return refused(e);
  }
  ++stats.graphsRecorded;
  StepResult result;
  dev->replay(r.graph, inputs, t, result);
  ++stats.graphLaunches;
  return result;
}

void HostDevice::exec(PlanExecutor::Impl &rt, const PhasePlan &p, int i, const TensorMap &inputs,
                      int64_t t, StepResult &result) {
  NodeCall nc(rt, p, i, inputs, t, result);
  runNode(*this, ops(), nc);
}

const OpTable<HostDevice::Handler> &HostDevice::ops() {
  static const OpTable<Handler> table = planDeviceOps<HostDevice>("compiled CPU");
  return table;
}

OpTableCoverage hostOpTable() { return coverageOf(HostDevice::ops()); }

// An unfused elementwise op (the fusion pass leaves few): broadcast operands
// through their strides, row by row.
void HostDevice::opBinary(NodeCall &nc) {
  const Node &n = nc.n;
  float *out = nc.out;
  std::vector<int64_t> sa = broadcastStrides(nc.inShape(0), n.shape),
                       sb = broadcastStrides(nc.inShape(1), n.shape);
  const float *a = nc.in(0), *b = nc.in(1);
  if (n.shape.empty()) {
    out[0] = binaryOp(n.kind, a[0], b[0]);
    return;
  }
  int64_t inner = n.shape.back(), rows = nc.count / std::max<int64_t>(inner, 1);
  int64_t ia = sa.back(), ib = sb.back();
#pragma omp parallel for schedule(static) if (nc.count > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float *ar = a + rowOffset(r, n.shape, sa), *br = b + rowOffset(r, n.shape, sb);
    float *o = out + r * inner;
    for (int64_t j = 0; j < inner; ++j)
      o[j] = binaryOp(n.kind, ar[j * ia], br[j * ib]);
  }
}

void HostDevice::opUnary(NodeCall &nc) {
  const Node &n = nc.n;
  float *out = nc.out;
  const int64_t count = nc.count;
  if (nc.inShape(0) == n.shape) {
    const float *a = nc.in(0);
#pragma omp parallel for schedule(static) if (count > 65536)
    for (int64_t e = 0; e < count; ++e)
      out[e] = unaryOp(n.kind, a[e]);
  } else {
    stridedGather(nc.in(0), n.shape, broadcastStrides(nc.inShape(0), n.shape), out);
    for (int64_t e = 0; e < count; ++e)
      out[e] = unaryOp(n.kind, out[e]);
  }
}

void HostDevice::opInput(NodeCall &nc) {
  const std::vector<double> &src = nc.inputs.at(nc.n.name).data;
  for (int64_t e = 0; e < nc.count; ++e)
    nc.out[e] = static_cast<float>(src[e]);
}

void HostDevice::opRead(NodeCall &nc) {
  if (nc.p.slots[nc.i].where == Where::Arena) // a copy (see plan)
    std::memcpy(nc.out, nc.rt.readSource(nc.n).data, sizeof(float) * nc.count);
}

void HostDevice::opNothing(NodeCall &) {}

void HostDevice::opStepCount(NodeCall &nc) { nc.out[0] = static_cast<float>(nc.t); }

void HostDevice::opYield(NodeCall &nc) {
  for (size_t k = 0; k < nc.n.operands.size(); ++k)
    nc.result.outputs.push_back(static_cast<double>(nc.in(static_cast<int>(k))[0]));
}

void HostDevice::opKernel(NodeCall &nc) {
  const void *ins[16];
  std::vector<const void *> big;
  const void *const *args = ins;
  if (nc.n.operands.size() <= 16) {
    for (size_t k = 0; k < nc.n.operands.size(); ++k)
      ins[k] = nc.in(static_cast<int>(k));
  } else {
    for (size_t k = 0; k < nc.n.operands.size(); ++k)
      big.push_back(nc.in(static_cast<int>(k)));
    args = big.data();
  }
  void *outs[1] = {nc.out};
  kernels.at(nc.n.name)(args, outs);
}

void HostDevice::opGemm(NodeCall &nc) {
  GemmDims g = gemmDims(nc.n, nc.inShape(0), nc.inShape(1));
  const float *a = nc.in(0), *b = nc.in(1);
  if (nc.bf16Inside) // (BF16Operands: bf16 values already)
    roundOperands({&a, &b}, {numElements(nc.inShape(0)), numElements(nc.inShape(1))});
  batchedGemm(a, b, nc.out, g.batch, g.m, g.n, g.k, g.ta, g.tb, g.rhsBatched,
              static_cast<float>(g.alpha));
  // (kernel-gemm-epilogue: in f32, before the rounding below)
  applyGemmEpilogue(nc.n, g, nc.out, static_cast<const float *>(nc.in(1)),
                    nc.n.operands.size() == 3 ? static_cast<const float *>(nc.in(2)) : nullptr);
  if (nc.n.dtype == DType::BF16) // stored in bf16 (kernel-bf16-storage): rounded, in f32
    for (int64_t e = 0; e < nc.count; ++e)
      nc.out[e] = roundToBF16(nc.out[e]);
}

void HostDevice::opMatmul(NodeCall &nc) {
  const Shape &as = nc.inShape(0), &bs = nc.inShape(1);
  int64_t m = as[as.size() - 2], k = as.back(), nn = bs.back();
  int64_t batch = numElements(Shape(as.begin(), as.end() - 2));
  const float *a = nc.in(0), *b = nc.in(1);
  if (nc.bf16Inside)
    roundOperands({&a, &b}, {numElements(as), numElements(bs)});
  batchedGemm(a, b, nc.out, batch, m, nn, k, false, false, bs.size() > 2, 1.0f);
}

void HostDevice::opTranspose(NodeCall &nc) {
  std::vector<int64_t> inSt = stridesOf(nc.inShape(0)), st(nc.n.ints.size());
  for (size_t d = 0; d < nc.n.ints.size(); ++d)
    st[d] = inSt[nc.n.ints[d]];
  stridedGather(nc.in(0), nc.n.shape, st, nc.out);
}

void HostDevice::opBroadcast(NodeCall &nc) {
  stridedGather(nc.in(0), nc.n.shape, broadcastStrides(nc.inShape(0), nc.n.shape), nc.out);
}

void HostDevice::opReduceSum(NodeCall &nc) {
  const Shape &s = nc.inShape(0);
  const float *x = nc.in(0);
  // Contiguous reduced block: out[o, j] = sum_r x[o, r, j], summed in
  // increasing r like the reference.
  ReducedBlock rb = reducedBlock(s, nc.n.ints);
  if (!rb.any) { // only size-1 dims summed: a copy
    std::memcpy(nc.out, x, sizeof(float) * nc.count);
    return;
  }
  if (rb.contiguous) {
    const int64_t outer = rb.outer, nred = rb.nred, inner = rb.inner;
    if (inner == 1 && outer == 1 && nred > kSumBlock) {
      // One long sum (the gradient norm's): fixed blocks in parallel, then
      // the block sums in order, so any thread count gives the same bits.
      const int64_t blocks = (nred + kSumBlock - 1) / kSumBlock;
      float *part = nc.rt.scratchFloats(blocks);
#pragma omp parallel for schedule(static)
      for (int64_t bl = 0; bl < blocks; ++bl)
        part[bl] = sumFloats(x + bl * kSumBlock, std::min(kSumBlock, nred - bl * kSumBlock));
      float acc = 0.0f;
      for (int64_t bl = 0; bl < blocks; ++bl)
        acc += part[bl];
      nc.out[0] = acc;
    } else if (inner == 1) {
#pragma omp parallel for schedule(static) if (outer * nred > 65536)
      for (int64_t o = 0; o < outer; ++o)
        nc.out[o] = blockedSum(x + o * nred, nred);
    } else {
      // Column sums: split the (outer, inner) output among threads in
      // blocks of kColumnBlock columns; each block sums its rows in order.
      int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (outer * nred * inner > 65536)
      for (int64_t ob = 0; ob < outer * blocks; ++ob) {
        int64_t o = ob / blocks, j0 = (ob % blocks) * kColumnBlock;
        columnSums(x + o * nred * inner + j0, nc.out + o * inner + j0, nred, inner,
                   std::min(kColumnBlock, inner - j0));
      }
    }
    return;
  }
  // General: walk the input in order (the reference's loop).
  std::fill(nc.out, nc.out + nc.count, 0.0f);
  reduceSumWalk(x, s, nc.n.ints, nc.out);
}

void HostDevice::opSliceOrPad(NodeCall &nc) {
  bool isSlice = nc.n.kind == OpKind::Slice;
  if (isSlice && nc.p.slots[nc.i].where == Where::Alias)
    return; // a view of its operand (PlanImpl.h)
  Window w = windowOf(nc.n, nc.inShape(0));
  const float *x = nc.in(0);
  if (!isSlice)
    std::fill(nc.out, nc.out + nc.count, 0.0f);
#pragma omp parallel for schedule(static) if (nc.count > 65536)
  for (int64_t o = 0; o < w.outer; ++o) {
    if (isSlice)
      std::memcpy(nc.out + w.smallStart(o), x + w.bigStart(o), sizeof(float) * w.smallA * w.inner);
    else
      std::memcpy(nc.out + w.bigStart(o), x + w.smallStart(o), sizeof(float) * w.smallA * w.inner);
  }
}

void HostDevice::opSoftmax(NodeCall &nc) {
  int64_t len = nc.n.shape.back();
  softmaxRows(nc.in(0), nc.out, nc.count / std::max<int64_t>(len, 1), len, nc.n.flag, len);
}

void HostDevice::opNorm(NodeCall &nc) {
  const float *x = nc.in(0), *gamma = nc.in(1);
  const float *beta = nc.n.kind == OpKind::LayerNorm ? nc.in(2) : nullptr;
  int64_t d = nc.n.shape.back(), rows = nc.count / std::max<int64_t>(d, 1);
  float eps = static_cast<float>(nc.n.floats[0]);
#pragma omp parallel for schedule(static) if (nc.count > 32768)
  for (int64_t r = 0; r < rows; ++r)
    normRowAnyIsa(x + r * d, gamma, beta, nc.out + r * d, d, eps);
}

void HostDevice::opNormGrad(NodeCall &nc) {
  // Chunks of rows (normChunkRows: a function of the row count only), a
  // chunk per thread at a time: each row's dx, and the chunk's partial
  // dgamma (dbeta) sums while the row is in cache; then the chunks'
  // partials add in order. The reference's bits for any thread count.
  const float *x = nc.in(0), *gamma = nc.in(1), *dy = nc.in(2);
  const int64_t d = nc.inShape(0).back(), rows = d ? numElements(nc.inShape(0)) / d : 0;
  const float eps = static_cast<float>(nc.n.floats[0]);
  const int64_t per = normChunkRows(rows), chunks = (rows + per - 1) / per;
  float *pg = nc.rt.scratchFloats((nc.n.flag ? 2 : 1) * chunks * d);
  float *pb = nc.n.flag ? pg + chunks * d : nullptr;
#pragma omp parallel for schedule(static) if (rows * d > 32768)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r0 = c * per;
    normGradChunkAnyIsa(x + r0 * d, gamma, dy + r0 * d, nc.out + r0 * d, std::min(per, rows - r0),
                        d, eps, nc.n.flag, pg + c * d, pb ? pb + c * d : nullptr);
  }
  float *dgamma = nc.out + rows * d;
  normParamGrads(pg, pb, chunks, d, dgamma, pb ? dgamma + d : nullptr);
  // The rows' epilogue (kernel-norm-grad-epilogue): rounded in four bytes
  // here, the addend added.
  const bool round = nc.n.dtype == DType::BF16;
  if (round || nc.n.operands.size() == 4)
    normGradEpilogue(nc.out, nc.n.operands.size() == 4 ? nc.in(3) : nullptr, rows * d, round);
}

// A result stored in bf16 (kernel-bf16-storage folded the rounding kernel
// into the attention): rounded where it lies, four bytes an element here.
void roundStoredBf16(NodeCall &nc) {
  if (nc.n.dtype == DType::BF16)
    for (int64_t e = 0; e < nc.count; ++e)
      nc.out[e] = roundToBF16(nc.out[e]);
}

void HostDevice::opAttention(NodeCall &nc) {
  if (packedAttention(nc.n))
    packedAttentionF32(nc);
  else
    attentionF32(nc, attentionDims(nc.inShape(0), nc.inShape(1), nc.inShape(2)), nc.in(0), nc.in(1),
                 nc.in(2), nc.out);
  roundStoredBf16(nc);
}

void HostDevice::opAttentionGrad(NodeCall &nc) {
  if (packedAttention(nc.n))
    packedAttentionF32(nc);
  else
    attentionGradF32(nc, attentionDims(nc.inShape(0), nc.inShape(1), nc.inShape(2)), nc.in(0),
                     nc.in(1), nc.in(2), nc.in(3), nc.out);
  roundStoredBf16(nc);
}

// A packed attention (kernel-attention-layout) on the host: the heads
// gathered into [B H, T, D] blocks (the copies the transposes made before),
// the blocks' attention, the result put back in the packed layout.
void HostDevice::packedAttentionF32(NodeCall &nc) {
  thread_local std::vector<float> blocks, result;
  const bool grad = nc.n.kind == OpKind::AttentionGrad;
  onHeadBlocks<float>(nc.inShape(0), nc.in(0), grad ? nc.in(1) : nullptr, blocks, result, nc.out,
                      [&](const AttentionDims &a, const float *q, const float *k, const float *v,
                          const float *g, float *out) {
                        if (grad)
                          attentionGradF32(nc, a, q, k, v, g, out);
                        else
                          attentionF32(nc, a, q, k, v, out);
                      });
}

void HostDevice::attentionF32(NodeCall &nc, const AttentionDims &a, const float *q, const float *k,
                              const float *v, float *out) {
  // Per batch block: S = scale Q K^T (BLAS), masked softmax over rows,
  // O = P V (BLAS); S for all blocks lives in the scratch buffer.
  const int64_t batch = a.batch, tq = a.tq, tk = a.tk, d = a.d, dv = a.dv;
  float scale = static_cast<float>(nc.n.floats[0]);
  if (nc.bf16Inside)
    roundOperands({&q, &k, &v}, {batch * tq * d, batch * tk * d, batch * tk * dv});
  float *S = nc.rt.scratchFloats(batch * tq * tk);
  const std::vector<QueryBlock> blocks = queryBlocks(tq, tk, nc.n.flag);
  // One (batch, head) block per thread; the GEMM library runs
  // single-threaded inside the region. Causal: query row i sees keys 0..i
  // (tq == tk, checked by the verifier), and each query block multiplies
  // only the keys it sees (queryBlocks).
#pragma omp parallel for schedule(static) if (batch > 1)
  for (int64_t b = 0; b < batch; ++b) {
    float *Sb = S + b * tq * tk;
    const float *qb = q + b * tq * d, *kb = k + b * tk * d, *vb = v + b * tk * dv;
    for (const QueryBlock &qk : blocks) {
      const int rn = static_cast<int>(qk.rn), kn = static_cast<int>(qk.kn);
      float *Sr = Sb + qk.r0 * tk;
      sgemm(false, true, rn, kn, static_cast<int>(d), scale, qb + qk.r0 * d, static_cast<int>(d),
            kb, static_cast<int>(d), 0.0f, Sr, static_cast<int>(tk));
      if (attentionRoundsProducts(nc.n)) { // (train.attention {bf16}: OpSemantics.h)
        for (int64_t r = qk.r0; r < qk.r0 + qk.rn; ++r) {
          const int64_t seen = nc.n.flag ? std::min(r + 1, qk.kn) : qk.kn;
          attentionChunkWeights(Sb + r * tk, seen);
          std::fill(Sb + r * tk + seen, Sb + r * tk + qk.kn, 0.0f);
        }
      } else {
        attentionSoftmaxRows(Sb, tk, qk.r0, qk.rn, qk.kn, nc.n.flag);
      }
      // bf16: P is the second product's operand (the CUDA device rounds it too).
      if (nc.bf16Inside && !attentionRoundsProducts(nc.n))
        for (int64_t r = 0; r < qk.rn; ++r)
          for (int64_t j = 0; j < qk.kn; ++j)
            Sr[r * tk + j] = roundToBF16(Sr[r * tk + j]);
      sgemm(false, false, rn, static_cast<int>(dv), kn, 1.0f, Sr, static_cast<int>(tk), vb,
            static_cast<int>(dv), 0.0f, out + (b * tq + qk.r0) * dv, static_cast<int>(dv));
    }
  }
}

void HostDevice::attentionGradF32(NodeCall &nc, const AttentionDims &a, const float *q,
                                  const float *k, const float *v, const float *g, float *out) {
  // attention's backward, fused per (batch, head) block: P (recomputed)
  // and dP, then dS in dP's place, live only in the block's scratch (two
  // T x T matrices per thread), never as [B, H, T, T] tensors.
  //   S = scale Q Kᵀ -> P = softmax rows;  dP = G Vᵀ
  //   dS = P (dP - rowsum(P dP)) scale (0 past the causal diagonal)
  //   dV = Pᵀ G, dQ = dS K, dK = dSᵀ Q
  const int64_t t = a.tq, d = a.d, batch = a.batch, elems = batch * t * d;
  if (elems == 0)
    return; // an empty batch (no queries or features: refused by validation)
  const float scale = static_cast<float>(nc.n.floats[0]);
  if (nc.bf16Inside)
    roundOperands({&q, &k, &v, &g}, {elems, elems, elems, elems});
  const bool roundPdS = nc.bf16Inside || attentionRoundsProducts(nc.n);
  const int threads = omp_get_max_threads();
  float *scratch = nc.rt.scratchFloats(static_cast<int64_t>(threads) * 2 * t * t);
  const int ti = static_cast<int>(t), di = static_cast<int>(d);
  // Causal: query block [r0, r0 + rn) sees keys 0 .. kn-1 (queryBlocks),
  // so its P and dS rows end there. dV and dK gather over query rows:
  // the last block (kn = T) writes all T rows, the earlier ones add into
  // their first kn.
  const std::vector<QueryBlock> blocks = queryBlocks(t, t, nc.n.flag);
#pragma omp parallel for schedule(static) if (batch > 1)
  for (int64_t b = 0; b < batch; ++b) {
    float *P = scratch + static_cast<int64_t>(omp_get_thread_num()) * 2 * t * t;
    float *dS = P + t * t;
    const int64_t o = b * t * d;
    for (const QueryBlock &qk : blocks) {
      const int rn = static_cast<int>(qk.rn), kn = static_cast<int>(qk.kn);
      sgemm(false, true, rn, kn, di, scale, q + o + qk.r0 * d, di, k + o, di, 0.0f, P + qk.r0 * t,
            ti);
      attentionSoftmaxRows(P, t, qk.r0, qk.rn, qk.kn, nc.n.flag);
      sgemm(false, true, rn, kn, di, 1.0f, g + o + qk.r0 * d, di, v + o, di, 0.0f, dS + qk.r0 * t,
            ti);
      attentionGradRows(P, dS, t, qk.r0, qk.rn, qk.kn, nc.n.flag, scale);
      // bf16: P and dS are operands of the products below.
      if (roundPdS)
        for (int64_t r = qk.r0; r < qk.r0 + qk.rn; ++r)
          for (int64_t j = 0; j < qk.kn; ++j) {
            P[r * t + j] = roundToBF16(P[r * t + j]);
            dS[r * t + j] = roundToBF16(dS[r * t + j]);
          }
    }
    for (size_t i = blocks.size(); i-- > 0;) {
      const QueryBlock &qk = blocks[i];
      const int rn = static_cast<int>(qk.rn), kn = static_cast<int>(qk.kn);
      const float beta = i + 1 == blocks.size() ? 0.0f : 1.0f;
      const float *Pr = P + qk.r0 * t, *dSr = dS + qk.r0 * t;
      sgemm(true, false, kn, di, rn, 1.0f, Pr, ti, g + o + qk.r0 * d, di, beta, out + 2 * elems + o,
            di);
      sgemm(false, false, rn, di, kn, 1.0f, dSr, ti, k + o, di, 0.0f, out + o + qk.r0 * d, di);
      sgemm(true, false, kn, di, rn, 1.0f, dSr, ti, q + o + qk.r0 * d, di, beta, out + elems + o,
            di);
    }
  }
}

void HostDevice::opEmbedding(NodeCall &nc) {
  const float *table = nc.in(0), *ids = nc.in(1);
  int64_t vocab = nc.inShape(0)[0], d = nc.inShape(0)[1], rows = numElements(nc.inShape(1));
  nc.rt.checkIds(nc.i, ids, rows, vocab, "id");
#pragma omp parallel for schedule(static) if (rows * d > 65536)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(nc.out + r * d, table + static_cast<int64_t>(ids[r]) * d, sizeof(float) * d);
}

void HostDevice::opScatterRows(NodeCall &nc) {
  const float *ids = nc.in(0), *g = nc.in(1);
  int64_t vocab = nc.n.shape[0], d = nc.n.shape[1], rows = numElements(nc.inShape(0));
  nc.rt.checkIds(nc.i, ids, rows, vocab, "id");
  std::fill(nc.out, nc.out + nc.count, 0.0f);
  // Rows in order (the reference's summation order); columns in parallel.
  int64_t blocks = (d + 63) / 64;
#pragma omp parallel for schedule(static) if (rows * d > 65536)
  for (int64_t bl = 0; bl < blocks; ++bl) {
    int64_t j0 = bl * 64, j1 = std::min(d, j0 + 64);
    for (int64_t r = 0; r < rows; ++r) {
      float *dst = nc.out + static_cast<int64_t>(ids[r]) * d;
      const float *src = g + r * d;
      for (int64_t j = j0; j < j1; ++j)
        dst[j] += src[j];
    }
  }
}

void HostDevice::opOneHot(NodeCall &nc) {
  const float *ids = nc.in(0);
  int64_t c = nc.n.shape.back(), rows = numElements(nc.inShape(0));
  nc.rt.checkIds(nc.i, ids, rows, c, "class id");
  std::fill(nc.out, nc.out + nc.count, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    nc.out[r * c + static_cast<int64_t>(ids[r])] = 1.0f;
}

void HostDevice::opCrossEntropy(NodeCall &nc) {
  const float *logits = nc.in(0), *tgt = nc.in(1);
  int64_t c = nc.inShape(0).back(), rows = numElements(nc.inShape(1));
  nc.rt.checkIds(nc.i, tgt, rows, c, "target");
  float *loss = nc.rt.scratchFloats(rows);
#pragma omp parallel for schedule(static) if (rows * c > 32768)
  for (int64_t r = 0; r < rows; ++r)
    loss[r] = crossEntropyRow(logits + r * c, c, static_cast<int64_t>(tgt[r]));
  float total = 0;
  for (int64_t r = 0; r < rows; ++r)
    total += loss[r];
  nc.out[0] = rows ? total / static_cast<float>(rows) : 0.0f;
}

void HostDevice::opStageSum(NodeCall &nc) {
  double sum = 0;
  for (size_t k = 0; k < nc.n.operands.size(); ++k)
    sum += nc.in(static_cast<int>(k))[0];
  if (!nc.n.ints.empty()) { // a pipeline stage's copy: all-reduced over the stages
    if (!nc.rt.collective)
      nc.rt.fail(nc.i, "stage_sum of a pipeline stage runs only under the pipeline runtime");
    sum = nc.rt.collective(nc.n, HostTensor{nc.n.shape, {sum}}).data.at(0);
  }
  nc.out[0] = static_cast<float>(sum);
}

void HostDevice::opGossipMix(NodeCall &nc) {
  // The replica's exchange with this round's peers (setCollective).
  if (!nc.rt.collective) {
    std::memcpy(nc.out, nc.in(0), sizeof(float) * nc.count);
    return;
  }
  HostTensor z{nc.n.shape, std::vector<double>(nc.in(0), nc.in(0) + nc.count)};
  HostTensor mixed = nc.rt.collective(nc.n, z);
  if (static_cast<int64_t>(mixed.data.size()) != nc.count)
    nc.rt.fail(nc.i, "the collective returned " + std::to_string(mixed.data.size()) +
                         " values for shape " + shapeToString(nc.n.shape));
  for (int64_t e = 0; e < nc.count; ++e)
    nc.out[e] = static_cast<float>(mixed.data[e]);
}

void HostDevice::opDescend(NodeCall &nc) {
  const float *pp = nc.in(0), *dir = nc.in(1);
  float lr = nc.in(2)[0];
#pragma omp parallel for schedule(static) if (nc.count > 65536)
  for (int64_t e = 0; e < nc.count; ++e)
    nc.out[e] = pp[e] - lr * dir[e];
}

// One matrix, or a batch (each operand on its own, the results stacked).
void HostDevice::opNewtonSchulz(NodeCall &nc) {
  const int64_t count = numElements(nc.inShape(0));
  for (size_t k = 0; k < nc.n.operands.size(); ++k)
    newtonSchulzOne(nc, nc.in(static_cast<int>(k)), nc.out + k * count);
}

void HostDevice::newtonSchulzOne(NodeCall &nc, const float *g, float *out) {
  int64_t m = nc.inShape(0)[0], nn = nc.inShape(0)[1], steps = nc.n.ints[0];
  const int64_t count = m * nn;
  float a = static_cast<float>(nc.n.floats[0]), b = static_cast<float>(nc.n.floats[1]),
        c = static_cast<float>(nc.n.floats[2]);
  float norm = 0;
  for (int64_t e = 0; e < count; ++e)
    norm += g[e] * g[e];
  norm = std::sqrt(norm) + 1e-7f;
  // Work on the wide orientation so X X^T is the small Gram matrix:
  // X [r, s] with r <= s; scratch holds X, A, AA (=B) and BX.
  bool tr = m > nn;
  int64_t r = tr ? nn : m, s = tr ? m : nn;
  float *X = nc.rt.scratchFloats(2 * r * s + 2 * r * r);
  float *A = X + r * s, *B = A + r * r, *BX = B + r * r;
  if (tr) {
    for (int64_t i2 = 0; i2 < m; ++i2)
      for (int64_t j = 0; j < nn; ++j)
        X[j * m + i2] = g[i2 * nn + j] / norm;
  } else {
    for (int64_t e = 0; e < count; ++e)
      X[e] = g[e] / norm;
  }
  // bf16 (train.newton_schulz's bf16): X, A, B and each step's X rounded.
  auto rounded = [&](float *v, int64_t count) {
    if (nc.n.flag)
      for (int64_t e = 0; e < count; ++e)
        v[e] = roundToBF16(v[e]);
  };
  rounded(X, r * s);
  const int ir = static_cast<int>(r), is = static_cast<int>(s);
  for (int64_t st = 0; st < steps; ++st) {
    sgemm(false, true, ir, ir, is, 1.0f, X, is, X, is, 0.0f, A, ir);
    rounded(A, r * r);
    // B = b A + c A A
    sgemm(false, false, ir, ir, ir, c, A, ir, A, ir, 0.0f, B, ir);
    for (int64_t e = 0; e < r * r; ++e)
      B[e] += b * A[e];
    rounded(B, r * r);
    sgemm(false, false, ir, is, ir, 1.0f, B, ir, X, is, 0.0f, BX, is);
    for (int64_t e = 0; e < r * s; ++e)
      X[e] = a * X[e] + BX[e];
    rounded(X, r * s);
  }
  if (tr) {
    for (int64_t i2 = 0; i2 < m; ++i2)
      for (int64_t j = 0; j < nn; ++j)
        out[i2 * nn + j] = X[j * m + i2];
  } else {
    std::memcpy(out, X, sizeof(float) * count);
  }
}

// PlanExecutor

PlanExecutor::PlanExecutor(const Graph &graph, std::map<std::string, KernelFn> kernels,
                           GemmPrecision gemm)
    : impl((checkRowIsaEnv(), std::make_unique<Impl>(
                                  graph, std::make_unique<HostDevice>(std::move(kernels)), gemm))) {
  if (gemm == GemmPrecision::TF32)
    throw std::invalid_argument("TF32 GEMMs run on a GPU's tensor cores; the compiled CPU "
                                "runtime computes in f32");
}

const char *PlanExecutor::rowLoopIsaName() {
  checkRowIsaEnv();
  return kRowIsaNames[static_cast<int>(rowLoopIsa())];
}

PlanExecutor::PlanExecutor(std::unique_ptr<Impl> i) : impl(std::move(i)) {}

std::string PlanExecutor::deviceName() const { return impl->dev->name(); }

PlanExecutor::~PlanExecutor() = default;

bool PlanExecutor::supports(const Graph &graph, std::string &why) {
  for (const StateDecl &s : graph.states)
    if (s.dtype != DType::F32) {
      why = std::string("state '") + s.name + "' is " + dtypeName(s.dtype) + " (only f32 so far)";
      return false;
    }
  for (Phase ph : {Phase::Step, Phase::Update, Phase::Outer})
    for (const Node &n : graph.phase(ph))
      if (n.dtype != DType::F32 && n.dtype != DType::I32 && !isSink(n.kind) &&
          !(n.dtype == DType::BF16 &&
            (n.kind == OpKind::Kernel || n.kind == OpKind::Gemm || n.kind == OpKind::Attention ||
             n.kind == OpKind::AttentionGrad || n.kind == OpKind::NormGrad))) { // store_bf16
        why = std::string(opKindName(n.kind)) + " at " + n.loc + " is " + dtypeName(n.dtype) +
              " (only f32 so far)";
        return false;
      }
  return true;
}

void PlanExecutor::initialize(uint64_t seed) { impl->initialize(seed); }

StepResult PlanExecutor::microStep(const TensorMap &inputs) {
  const PhasePlan &p = impl->stepPlan;
  const int64_t t = impl->counter + 1;
  StepResult r = impl->recorded(impl->gradCount == 0 ? 0 : 1, inputs, t, [&] {
    StepResult out = impl->run(p, inputs, t, false, {});
    // The phase succeeded: commit its writes and gradients.
    for (auto [s, node] : p.writes)
      impl->commit(s, impl->val[node]);
    for (auto [g, node] : p.grads)
      impl->addGrad(g, impl->val[node]);
    return out;
  });
  ++impl->gradCount;
  return r;
}

void PlanExecutor::reduceGradSums(const std::function<void(GradSums &)> &reduce,
                                  int64_t ranks, bool onDevice) {
  GradSums sums;
  if (onDevice && impl->dev->onDevice()) {
    // Reduced where they are (NCCL): the device's addresses and stream.
    for (planning::DeviceBuffer &b : impl->gradSums)
      sums.device.f32.emplace_back(b.data, static_cast<size_t>(b.size));
    sums.device.stream = impl->dev->stream();
    sums.device.idle = [dev = impl->dev.get()] { return dev->idle(); };
    reduce(sums);
    impl->gradCount *= ranks;
    return;
  }
  // Else sums on a device are staged through the host.
  std::vector<std::vector<float>> staged;
  const bool host = impl->dev->name() == std::string("cpu");
  for (planning::DeviceBuffer &b : impl->gradSums) {
    if (host) {
      sums.f32.emplace_back(b.data, static_cast<size_t>(b.size));
    } else {
      staged.emplace_back(static_cast<size_t>(b.size));
      impl->dev->download(staged.back().data(), b.data, b.size);
      sums.f32.emplace_back(staged.back().data(), staged.back().size());
    }
  }
  reduce(sums);
  if (!host)
    for (size_t i = 0; i < staged.size(); ++i)
      impl->dev->upload(impl->gradSums[i].data, staged[i].data(), impl->gradSums[i].size);
  impl->gradCount *= ranks;
}

void PlanExecutor::update() {
  if (impl->gradCount == 0 && !impl->gradSums.empty())
    throw std::runtime_error("update: no gradient was computed since the last update");
  const PhasePlan &p = impl->updatePlan;
  impl->recorded(2 + impl->gradCount, {}, impl->counter + 1, [&] {
    impl->dev->beginUpdate();
    if (impl->gradCount > 1)
      for (planning::DeviceBuffer &sum : impl->gradSums)
        impl->dev->divide(sum.data, sum.size, static_cast<float>(impl->gradCount));
    StepResult out = impl->run(p, {}, impl->counter + 1, false, {});
    for (auto [s, node] : p.writes)
      impl->commit(s, impl->val[node]);
    return out;
  });
  impl->gradCount = 0;
  ++impl->counter;
}

bool PlanExecutor::queuesSteps() const { return impl->dev->queues(); }

void PlanExecutor::queueStep(const std::vector<TensorMap> &batches) {
  if (!impl->dev->queues())
    return Executor::queueStep(batches);
  Impl::QueuedStep q;
  std::vector<std::pair<const float *, int64_t>> later;
  impl->dev->deferYields(&later);
  try {
    for (const TensorMap &b : batches) {
      const size_t before = later.size();
      StepResult r = microStep(b); // (an eager run's yields come at once)
      if (!r.outputs.empty())
        q.losses.emplace_back(r.outputs[0], nullptr);
      else if (later.size() > before)
        q.losses.emplace_back(0.0, later[before].first);
      else
        throw std::runtime_error("queueStep: the step phase yields no loss");
    }
    update();
  } catch (...) {
    impl->dev->deferYields(nullptr);
    throw;
  }
  impl->dev->deferYields(nullptr);
  std::vector<std::pair<const float *, int64_t>> all;
  for (const planning::DeviceBuffer &b : impl->states)
    all.emplace_back(b.data, b.size);
  q.nonFiniteFlag = impl->dev->queueNonFiniteCheck(all);
  q.fence = impl->dev->fence();
  impl->queued.push_back(std::move(q));
}

Executor::StepOutcome PlanExecutor::finishStep() {
  if (!impl->dev->queues())
    return Executor::finishStep();
  if (impl->queued.empty())
    throw std::runtime_error("finishStep: no step is queued");
  Impl::QueuedStep q = std::move(impl->queued.front());
  impl->queued.erase(impl->queued.begin());
  impl->dev->waitFence(q.fence);
  StepOutcome o;
  o.updated = true;
  std::vector<const float *> read{q.nonFiniteFlag};
  for (auto [known, at] : q.losses) {
    o.lossSum += at ? static_cast<double>(*at) : known;
    read.push_back(at);
  }
  const bool bad = q.nonFiniteFlag && *q.nonFiniteFlag != 0;
  impl->dev->releaseResults(read);
  if (bad) { // which one: asked again
    o.nonFinite = nonFiniteState();
    if (o.nonFinite.empty())
      o.nonFinite = "a state (found by the device's check)";
  }
  return o;
}

void PlanExecutor::outerStep() {
  // The Outer phase sees the step count of the last update (no +1).
  const PhasePlan &p = impl->outerPlan;
  impl->run(p, {}, impl->counter, false, {});
  for (auto [s, node] : p.writes)
    impl->commit(s, impl->val[node]);
}

void PlanExecutor::setCollective(Collective fn) { impl->collective = std::move(fn); }

void PlanExecutor::preparePartialRuns(const std::vector<std::vector<int>> &parts,
                                      const std::vector<int> &keep) {
  std::vector<int> order;
  impl->partStart.clear();
  for (const std::vector<int> &part : parts) {
    impl->partStart.push_back(order.size());
    order.insert(order.end(), part.begin(), part.end());
  }
  std::vector<int> seen(impl->graph.nodes.size(), 0);
  for (int i : order) {
    if (i < 0 || i >= static_cast<int>(seen.size()) || seen[i]++)
      throw std::runtime_error("preparePartialRuns: node " + std::to_string(i) +
                               " is not a step node or is listed twice");
  }
  impl->partStart.push_back(order.size());
  impl->parts = parts;
  impl->partPlan = impl->plan(Phase::Step, order, keep, /*snapshotReads=*/true);
}

StepResult PlanExecutor::runNodes(const std::vector<int> &nodes, ValueEnv &env,
                                  const TensorMap &inputs,
                                  const std::map<std::string, std::string> &redirect) {
  size_t part = 0;
  while (part < impl->parts.size() && impl->parts[part] != nodes)
    ++part;
  if (part == impl->parts.size())
    throw std::runtime_error("runNodes: this node list was not given to preparePartialRuns");
  const PhasePlan &p = impl->partPlan;
  impl->cur = Phase::Step;
  impl->checkInputs(nodes, inputs);
  if (!env.arena || env.arenaFloats < p.arenaFloats) {
    PlanDevice *dev = impl->dev.get();
    env.arena = std::shared_ptr<float>(dev->alloc(std::max<int64_t>(p.arenaFloats, 1)),
                                       [dev](float *f) { dev->release(f); });
    env.arenaFloats = p.arenaFloats;
  }
  env.pointers.resize(impl->graph.nodes.size(), nullptr);
  // This micro-batch's value pointers live in its env between the parts.
  std::swap(impl->val, env.pointers);
  impl->redirect = &redirect;
  StepResult r;
  try {
    r = impl->runRange(p, impl->partStart[part], impl->partStart[part + 1], env.arena.get(),
                       inputs, impl->counter + 1);
  } catch (...) {
    impl->redirect = nullptr;
    std::swap(impl->val, env.pointers);
    throw;
  }
  impl->redirect = nullptr;
  std::swap(impl->val, env.pointers);
  // Writes commit now; gradients are returned (accumulateGrads adds them).
  std::vector<char> inPart(impl->graph.nodes.size(), 0);
  for (int i : nodes)
    inPart[i] = 1;
  for (int i : nodes) {
    const Node &n = impl->graph.nodes[i];
    if (n.kind == OpKind::Write)
      impl->commit(impl->stateIndex.at(n.name), env.pointers[n.operands[0]]);
    else if (n.kind == OpKind::Grad)
      r.grads[n.name] = impl->hostTensor(impl->graph.nodes[n.operands[0]].shape,
                                         env.pointers[n.operands[0]]);
  }
  return r;
}

HostTensor PlanExecutor::envValue(ValueEnv &env, int node) const {
  const Node &n = impl->graph.nodes.at(node);
  if (static_cast<size_t>(node) >= env.pointers.size() || !env.pointers[node])
    throw std::runtime_error("envValue: node " + std::to_string(node) + " has no value yet");
  return impl->hostTensor(n.shape, env.pointers[node]);
}

void PlanExecutor::accumulateGrads(const StepResult &r) {
  for (auto &[name, g] : r.grads) {
    auto it = impl->gradIndex.find(name);
    if (it == impl->gradIndex.end())
      throw std::runtime_error("accumulateGrads: no parameter '" + name + "' has a gradient");
    std::vector<float> v(g.data.begin(), g.data.end());
    planning::DeviceBuffer &sum = impl->gradSums[it->second];
    if (static_cast<int64_t>(v.size()) != sum.size)
      throw std::runtime_error("accumulateGrads: '" + name + "' has " + std::to_string(v.size()) +
                               " values, its gradient " + std::to_string(sum.size));
    if (impl->gradCount == 0) {
      impl->dev->upload(sum.data, v.data(), sum.size);
    } else {
      planning::DeviceBuffer tmp = impl->allocate(sum.size);
      impl->dev->upload(tmp.data, v.data(), sum.size);
      impl->dev->accumulate(sum.data, tmp.data, sum.size);
      impl->dev->finish();
      impl->release(tmp);
    }
  }
  ++impl->gradCount;
}

StepResult PlanExecutor::evaluate(const TensorMap &inputs, const std::vector<int> &probes) {
  const PhasePlan &p = impl->evalPlan(probes);
  return impl->run(p, inputs, impl->counter + 1, true, probes);
}

HostTensor PlanExecutor::getState(const std::string &name) const {
  auto it = impl->stateIndex.find(name);
  if (it == impl->stateIndex.end())
    throw std::runtime_error("getState: no state named '" + name + "'");
  return impl->hostTensor(impl->graph.states[it->second].shape, impl->states[it->second].data);
}

std::string PlanExecutor::nonFiniteState() const {
  const bool host = impl->dev->name() == std::string("cpu");
  if (!host) { // one pass on the device; the states come up only when one is bad
    std::vector<std::pair<const float *, int64_t>> all;
    for (const planning::DeviceBuffer &b : impl->states)
      all.emplace_back(b.data, b.size);
    if (!impl->dev->anyNonFinite(all))
      return "";
  }
  std::vector<float> staged;
  for (size_t i = 0; i < impl->graph.states.size(); ++i) {
    const float *p = impl->states[i].data;
    const int64_t n = impl->states[i].size;
    if (!host) { // a device's states are read through the host
      staged.resize(static_cast<size_t>(n));
      impl->dev->download(staged.data(), p, n);
      p = staged.data();
    }
    // One pass that vectorises: x - x is 0 for finite x, NaN for inf/NaN.
    float acc = 0;
    for (int64_t k = 0; k < n; ++k)
      acc += p[k] - p[k];
    if (acc == 0)
      continue;
    for (int64_t k = 0; k < n; ++k)
      if (!std::isfinite(p[k]))
        return "'" + impl->graph.states[i].name + "' holds " + std::to_string(p[k]);
  }
  return "";
}

void PlanExecutor::setState(const std::string &name, const HostTensor &value) {
  auto it = impl->stateIndex.find(name);
  if (it == impl->stateIndex.end())
    throw std::runtime_error("setState: no state named '" + name + "'");
  ops::checkStateValue(name, impl->graph.states[it->second].shape, value);
  std::vector<float> v(value.data.begin(), value.data.end());
  impl->dev->upload(impl->states[it->second].data, v.data(), impl->states[it->second].size);
}

int64_t PlanExecutor::stepCount() const { return impl->counter; }
void PlanExecutor::setStepCount(int64_t t) { impl->counter = t; }
const PlanStats &PlanExecutor::stats() const { return impl->stats; }
void PlanExecutor::setProfiling(bool on) {
  impl->profiling = on;
  impl->profile.clear();
  impl->kernelProfile.clear();
}

namespace {
// The device's copy bandwidth (bytes read + written per second), timed as
// the profile times an op (queued, then finished): the median of 5 copies
// of 256 MB on a GPU, 64 MB on the CPU. The yardstick for the kernels'
// GB/s: a kernel that moves its bytes as fast as a copy is at bandwidth.
double copyBandwidth(PlanDevice &dev) {
  const int64_t n = dev.onDevice() ? int64_t(1) << 26 : int64_t(1) << 24;
  float *a = dev.alloc(n), *b = dev.alloc(n);
  std::vector<double> secs;
  dev.copy(b, a, n); // first touch
  dev.finish();
  for (int k = 0; k < 5; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    dev.copy(b, a, n);
    dev.finish();
    secs.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count());
  }
  dev.release(a);
  dev.release(b);
  std::sort(secs.begin(), secs.end());
  return secs[2] > 0 ? 8.0 * static_cast<double>(n) / secs[2] : 0.0;
}
} // namespace

std::string PlanExecutor::profileReport() const {
  double total = 0;
  for (auto &[k, e] : impl->profile)
    total += e.first;
  std::vector<std::pair<double, OpKind>> order;
  for (auto &[k, e] : impl->profile)
    order.push_back({e.first, k});
  std::sort(order.rbegin(), order.rend());
  std::ostringstream os;
  char line[160];
  std::snprintf(line, sizeof line, "%-16s %10s %8s %7s\n", "op", "seconds", "calls", "share");
  os << line;
  for (auto &[sec, k] : order) {
    std::snprintf(line, sizeof line, "%-16s %10.4f %8lld %6.1f%%\n", opKindName(k), sec,
                  static_cast<long long>(impl->profile.at(k).second),
                  total > 0 ? 100 * sec / total : 0.0);
    os << line;
  }
  // The slowest fused kernels, by name (their sources: --dump), and the
  // other ops by operand shapes. Fused kernels, sums and transposes with
  // their bytes per second (operands and result read or written once: the
  // least traffic they need), GEMMs and attention with their FLOP/s.
  std::vector<std::pair<double, std::string>> ks;
  for (auto &[name, e] : impl->kernelProfile)
    ks.push_back({e.seconds, name});
  std::sort(ks.rbegin(), ks.rend());
  double copy = 0;
  if (!ks.empty()) {
    copy = copyBandwidth(*impl->dev);
    std::snprintf(line, sizeof line,
                  "device copy: %.1f GB/s (read + written, median of 5 copies, "
                  "this run)\n",
                  copy / 1e9);
    os << line;
    os << "slowest kernels, GEMMs, attention, sums and transposes (by operand shapes):\n";
  }
  // STRETTO_PROFILE_TOP=N lists N of them (default 12).
  size_t top = 12;
  if (const char *env = std::getenv("STRETTO_PROFILE_TOP"))
    top = static_cast<size_t>(std::max(0L, std::strtol(env, nullptr, 10)));
  for (size_t k = 0; k < std::min<size_t>(ks.size(), top); ++k) {
    const Impl::KernelTime &e = impl->kernelProfile.at(ks[k].second);
    char rate[32] = "";
    if (e.seconds > 0 && e.bytes > 0)
      std::snprintf(rate, sizeof rate, "%7.1f GB/s %4.0f%% of copy",
                    e.bytes / e.seconds / 1e9,
                    copy > 0 ? 100 * e.bytes / e.seconds / copy : 0.0);
    else if (e.seconds > 0 && e.flops > 0)
      std::snprintf(rate, sizeof rate, "%5.1f GFLOP/s", e.flops / e.seconds / 1e9);
    std::snprintf(line, sizeof line, "  %-48s %10.4f %6.1f%% %s\n", ks[k].second.c_str(),
                  ks[k].first, total > 0 ? 100 * ks[k].first / total : 0.0, rate);
    os << line;
  }
  // All fused kernels together against memory bandwidth.
  double kSec = 0, kBytes = 0;
  for (auto &[name, e] : impl->kernelProfile)
    if (e.bytes > 0 && name.find(' ') == std::string::npos) // (not reduce_sum, transpose)
      kSec += e.seconds, kBytes += e.bytes;
  if (kSec > 0) {
    std::snprintf(line, sizeof line, "fused kernels: %.4f s, %.1f GB moved at least, %.1f GB/s\n",
                  kSec, kBytes / 1e9, kBytes / kSec / 1e9);
    os << line;
  }
  // Memory-bound ops that move 1 MB or more a call, against the copy: the
  // bar is 70 % of it for each.
  int big = 0, fast = 0;
  double bigSec = 0, slowSec = 0;
  for (auto &[name, e] : impl->kernelProfile) {
    if (e.bytes <= 0 || e.calls == 0 || e.seconds <= 0 ||
        e.bytes / e.calls < 1e6)
      continue;
    ++big;
    bigSec += e.seconds;
    if (copy > 0 && e.bytes / e.seconds >= 0.7 * copy)
      ++fast;
    else
      slowSec += e.seconds;
  }
  if (big > 0 && copy > 0) {
    std::snprintf(line, sizeof line,
                  "memory-bound ops of 1 MB or more: %d of %d at >= 70%% of "
                  "the copy; the "
                  "others take %.4f s of their %.4f s\n",
                  fast, big, slowSec, bigSec);
    os << line;
  }
  return os.str();
}

std::string PlanExecutor::describe() const {
  std::ostringstream os;
  const PlanStats &s = impl->stats;
  os << "// buffer plan: step arena " << s.stepArenaBytes << " B, update arena "
     << s.updateArenaBytes << " B, persistent " << s.persistentBytes << " B, peak "
     << s.peakBytes() << " B (intermediates without reuse: " << s.unplannedBytes << " B)\n";
  for (const PhasePlan *p : {&impl->stepPlan, &impl->updatePlan, &impl->outerPlan}) {
    const std::vector<Node> &nodes = impl->graph.phase(p->phase);
    if (nodes.empty())
      continue;
    os << "// "
       << (p->phase == Phase::Step ? "step" : p->phase == Phase::Update ? "update" : "outer")
       << "\n";
    for (int i : p->order) {
      const Node &n = nodes[i];
      const Slot &sl = p->slots[i];
      os << "%" << i << " = " << opKindName(n.kind);
      if (!n.name.empty())
        os << " \"" << n.name << "\"";
      for (int o : n.operands)
        os << " %" << o;
      if (!isSink(n.kind))
        os << " : " << shapeToString(n.shape);
      switch (sl.where) {
      case Where::Arena:
        os << "  -> arena[" << sl.offset * 4 << ", +" << sl.size * 4 << " B)";
        if (sl.dies == std::numeric_limits<int>::max())
          os << " live to the end";
        else
          os << " free after %" << p->order[sl.dies];
        break;
      case Where::State: os << "  -> state '" << impl->graph.states[sl.ref].name << "'"; break;
      case Where::GradSum: os << "  -> gradient sum"; break;
      case Where::Constant: os << "  -> constant"; break;
      case Where::Alias:
        os << "  -> alias of %" << sl.ref;
        if (sl.offset)
          os << " + " << sl.offset * 4 << " B";
        break;
      case Where::None: break;
      }
      os << "\n";
    }
  }
  return os.str();
}

} // namespace stretto
