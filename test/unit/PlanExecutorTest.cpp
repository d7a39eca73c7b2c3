//===- PlanExecutorTest.cpp - the compiled runtime, op by op, vs the oracle ===//
//
// Every op the compiled runtime (PlanExecutor) implements itself is checked
// against the reference executor in f32 on small hand-built graphs with
// awkward shapes (broadcasts, non-contiguous reductions, causal masks,
// transposed GEMMs). Tolerance: 2e-6 relative (+1e-6 absolute) where the
// runtime follows the reference's operation order, 1e-5 where it uses BLAS
// (matmul, attention, Newton-Schulz sum in another order). Also: the buffer
// plan reuses memory, state writes commit atomically and in the reference's
// order, and bad input fails with the node named.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Runtime/RefExecutor.h"
#include "GpuEmulator.h"

#include <gtest/gtest.h>

#include <cstring>

#include <cstdio>
#include <cstdlib>

#include <cmath>
#include <limits>
#include <random>

using namespace stretto;

namespace {

struct Builder {
  Graph g;
  Phase phase = Phase::Step;
  int node(OpKind k, std::vector<int> ops, Shape shape, std::vector<int64_t> ints = {},
           std::vector<double> floats = {}, bool flag = false) {
    Node n;
    n.kind = k;
    n.operands = std::move(ops);
    n.shape = std::move(shape);
    n.ints = std::move(ints);
    n.floats = std::move(floats);
    n.flag = flag;
    n.loc = "test.mlir:" + std::to_string(g.phase(phase).size() + 1) + ":1";
    return g.add(n, phase);
  }
  int input(const std::string &name, Shape shape) {
    int i = node(OpKind::Input, {}, std::move(shape));
    g.phase(phase)[i].name = name;
    return i;
  }
  // A scalar loss so the graph is a valid step: sum of `v`.
  void yieldSum(int v) {
    Shape s = g.phase(phase)[v].shape;
    std::vector<int64_t> dims(s.size());
    for (size_t d = 0; d < s.size(); ++d)
      dims[d] = static_cast<int64_t>(d);
    int r = s.empty() ? v : node(OpKind::ReduceSum, {v}, {}, dims);
    node(OpKind::Yield, {r}, {});
  }
};

HostTensor random(const Shape &shape, uint64_t seed, double lo = -2, double hi = 2) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  HostTensor t{shape, std::vector<double>(numElements(shape))};
  for (double &v : t.data)
    v = static_cast<float>(u(rng));
  return t;
}

HostTensor ids(const Shape &shape, int64_t limit, uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostTensor t{shape, std::vector<double>(numElements(shape))};
  for (double &v : t.data)
    v = static_cast<double>(rng() % static_cast<uint64_t>(limit));
  return t;
}

// Evaluates node `probe` on both executors and compares element by element.
void expectSame(Builder &b, int probe, const TensorMap &inputs, double rel = 2e-6,
                const std::string &what = "") {
  RefExecutor ref(b.g, Precision::F32);
  StepResult r = ref.evaluate(inputs, {probe});
  // The host device, and the CUDA device's code on the emulated GPU.
  PlanExecutor host(b.g, {});
  std::unique_ptr<PlanExecutor> gpu = emulatedGpuExecutor(b.g, {});
  for (PlanExecutor *plan : {&host, gpu.get()}) {
    StepResult p = plan->evaluate(inputs, {probe});
    std::string on = what + " on " + plan->deviceName();
    const HostTensor &x = r.probes.at(probe), &y = p.probes.at(probe);
    ASSERT_EQ(x.shape, y.shape) << on;
    ASSERT_EQ(x.data.size(), y.data.size()) << on;
    for (size_t i = 0; i < x.data.size(); ++i)
      ASSERT_NEAR(x.data[i], y.data[i], rel * std::fabs(x.data[i]) + 1e-6)
          << on << ": element " << i << " of " << opKindName(b.g.nodes[probe].kind);
    EXPECT_NEAR(r.outputs.at(0), p.outputs.at(0), 1e-5 * (1 + std::fabs(r.outputs.at(0)))) << on;
  }
}

TEST(PlanExecutor, BinaryOpsBroadcast) {
  for (OpKind k : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Max, OpKind::Min,
                   OpKind::Pow, OpKind::Gt}) {
    Builder b;
    int x = b.input("x", {2, 3, 4}), y = b.input("y", {3, 1});
    int z = b.node(k, {x, y}, {2, 3, 4});
    b.yieldSum(z);
    bool positive = k == OpKind::Pow || k == OpKind::Div;
    expectSame(b, z, {{"x", random({2, 3, 4}, 1, positive ? 0.5 : -2, 2)},
                      {"y", random({3, 1}, 2, positive ? 0.5 : -2, 2)}},
               2e-6, opKindName(k));
  }
}

TEST(PlanExecutor, UnaryOps) {
  for (OpKind k : {OpKind::Neg, OpKind::Exp, OpKind::Log, OpKind::Sqrt, OpKind::Rsqrt,
                   OpKind::Tanh, OpKind::Cos, OpKind::Gelu, OpKind::GeluGrad, OpKind::Relu,
                   OpKind::Silu, OpKind::Erf, OpKind::RoundBf16}) {
    Builder b;
    int x = b.input("x", {5, 7});
    int z = b.node(k, {x}, {5, 7});
    b.yieldSum(z);
    bool positive = k == OpKind::Log || k == OpKind::Sqrt || k == OpKind::Rsqrt;
    expectSame(b, z, {{"x", random({5, 7}, 3, positive ? 0.1 : -3, 3)}}, 2e-6, opKindName(k));
  }
}

TEST(PlanExecutor, LayoutOps) {
  struct Perm {
    Shape in;
    std::vector<int64_t> perm;
  };
  // (The ones that keep the last axis, rows of 16-byte chunks, move rows
  // on the GPU: st_gather_rows; the others element by element.)
  for (const Perm &c : {Perm{{3, 4, 5}, {1, 0, 2}}, Perm{{3, 4, 5}, {2, 0, 1}},
                        Perm{{2, 3, 4, 5}, {0, 2, 1, 3}}, Perm{{4, 6}, {1, 0}},
                        Perm{{2, 5, 3, 4, 8}, {2, 0, 3, 1, 4}}, Perm{{3, 4, 12}, {1, 0, 2}},
                        Perm{{3, 4, 6}, {1, 0, 2}}}) {
    const long long rows = emulatedGpuLaunchesOf("st_gather_rows");
    const bool byRows = c.perm.back() == static_cast<int64_t>(c.perm.size()) - 1 &&
                        c.in.back() % 4 == 0;
    Builder b;
    int x = b.input("x", c.in);
    Shape out(c.perm.size());
    for (size_t d = 0; d < out.size(); ++d)
      out[d] = c.in[c.perm[d]];
    int t = b.node(OpKind::Transpose, {x}, out, c.perm);
    b.yieldSum(t);
    expectSame(b, t, {{"x", random(c.in, 4)}}, 0, "transpose " + shapeToString(out));
    EXPECT_EQ(emulatedGpuLaunchesOf("st_gather_rows") > rows, byRows) << shapeToString(out);
  }
  {
    Builder b;
    int x = b.input("x", {3, 1});
    int t = b.node(OpKind::Broadcast, {x}, {2, 3, 4});
    b.yieldSum(t);
    expectSame(b, t, {{"x", random({3, 1}, 5)}}, 0, "broadcast");
  }
  for (bool slice : {true, false}) {
    Builder b;
    int x = b.input("x", slice ? Shape{2, 7, 3} : Shape{2, 3, 3});
    int t = b.node(slice ? OpKind::Slice : OpKind::Pad, {x}, slice ? Shape{2, 3, 3} : Shape{2, 7, 3},
                   {1, 2});
    b.yieldSum(t);
    expectSame(b, t, {{"x", random(slice ? Shape{2, 7, 3} : Shape{2, 3, 3}, 6)}}, 0,
               slice ? "slice" : "pad");
  }
}

TEST(PlanExecutor, ReduceSumEveryPattern) {
  // Suffix, prefix, middle, non-contiguous, all, and a size-1 dim only.
  Shape in = {4, 5, 6};
  for (std::vector<int64_t> dims : std::vector<std::vector<int64_t>>{
           {2}, {0}, {0, 1}, {1}, {1, 2}, {0, 2}, {0, 1, 2}}) {
    Builder b;
    int x = b.input("x", in);
    Shape out;
    for (int64_t d = 0; d < 3; ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end())
        out.push_back(in[d]);
    int r = b.node(OpKind::ReduceSum, {x}, out, dims);
    b.yieldSum(r);
    std::string what = "reduce_sum over";
    for (int64_t d : dims)
      what += " " + std::to_string(d);
    expectSame(b, r, {{"x", random(in, 7)}}, 2e-6, what);
  }
  // Column sums over 150 columns: two full 64-column blocks (summed in a
  // local array) and a partial one, under an outer dim.
  {
    Builder b;
    Shape wide = {2, 33, 150};
    int x = b.input("x", wide);
    int r = b.node(OpKind::ReduceSum, {x}, {2, 150}, {1});
    b.yieldSum(r);
    expectSame(b, r, {{"x", random(wide, 9)}}, 0, "reduce_sum over the middle of [2, 33, 150]");
  }
  Builder b;
  int x = b.input("x", {4, 1, 6});
  int r = b.node(OpKind::ReduceSum, {x}, {4, 6}, {1});
  b.yieldSum(r);
  expectSame(b, r, {{"x", random({4, 1, 6}, 8)}}, 0, "reduce_sum over a size-1 dim");
}

TEST(PlanExecutor, RowOps) {
  for (bool causal : {false, true}) {
    Builder b;
    int x = b.input("x", {3, 5, 5});
    int s = b.node(OpKind::Softmax, {x}, {3, 5, 5}, {}, {}, causal);
    b.yieldSum(s);
    expectSame(b, s, {{"x", random({3, 5, 5}, 9)}}, 0, causal ? "causal softmax" : "softmax");
  }
  for (bool rms : {false, true}) {
    Builder b;
    int x = b.input("x", {6, 8}), g = b.input("g", {8}), be = b.input("b", {8});
    std::vector<int> ops = {x, g};
    if (!rms)
      ops.push_back(be);
    int n = b.node(rms ? OpKind::RmsNorm : OpKind::LayerNorm, ops, {6, 8}, {}, {1e-5});
    b.yieldSum(n);
    expectSame(b, n, {{"x", random({6, 8}, 10)}, {"g", random({8}, 11)}, {"b", random({8}, 12)}},
               0, rms ? "rms_norm" : "layer_norm");
  }
  // norm_grad: dx rows, then dgamma (and dbeta) summed over the rows in
  // order by column blocks of 64: a partial block (100 = 64 + 36), enough
  // rows for the threaded loops (400 x 100 > 32768), the small case, and
  // 18 chunks of 64 rows (the CUDA runtime adds the chunks' partials eight
  // loads at a time, then the rest). Exact agreement: one definition
  // (KernelMath.inc), one summation order.
  for (bool centered : {true, false})
    for (Shape xs : {Shape{400, 100}, Shape{2, 3, 8}, Shape{1100, 24}}) {
      Builder b;
      const int64_t d = xs.back(), rows = numElements(xs) / d;
      int x = b.input("x", xs), g = b.input("g", {d}), dy = b.input("dy", xs);
      int n = b.node(OpKind::NormGrad, {x, g, dy}, {rows + (centered ? 2 : 1), d}, {}, {1e-5},
                     centered);
      b.yieldSum(n);
      expectSame(b, n,
                 {{"x", random(xs, 13, -3, 5)}, {"g", random({d}, 14)}, {"dy", random(xs, 15)}},
                 0, std::string(centered ? "layer_norm" : "rms_norm") + " norm_grad " +
                        shapeToString(xs));
    }
  for (bool causal : {false, true}) {
    Builder b;
    int64_t tk = causal ? 4 : 6;
    int q = b.input("q", {2, 3, 4, 8}), k = b.input("k", {2, 3, tk, 8}),
        v = b.input("v", {2, 3, tk, 5});
    int a = b.node(OpKind::Attention, {q, k, v}, {2, 3, 4, 5}, {}, {0.35}, causal);
    b.yieldSum(a);
    expectSame(b, a,
               {{"q", random({2, 3, 4, 8}, 13)}, {"k", random({2, 3, tk, 8}, 14)},
                {"v", random({2, 3, tk, 5}, 15)}},
               1e-5, causal ? "causal attention" : "attention");
  }
  // Causal attention over T = 150: three query blocks (64, 64, 22) that
  // each multiply only the keys they see (PlanExecutor's queryBlocks).
  {
    Builder b;
    Shape qs = {1, 2, 150, 8};
    int q = b.input("q", qs), k = b.input("k", qs), v = b.input("v", qs);
    int a = b.node(OpKind::Attention, {q, k, v}, qs, {}, {0.35}, true);
    b.yieldSum(a);
    expectSame(b, a, {{"q", random(qs, 20)}, {"k", random(qs, 21)}, {"v", random(qs, 22)}}, 1e-5,
               "causal attention over three query blocks");
  }
  // One score of 112 in a row of scores under 3: exp overflows unless
  // the row subtracts its true maximum. Every query is (1, .., 1) and key
  // 36 of each block is (40, .., 40) (D = 8, scale 0.35: a score of 112),
  // so the maximum sits in the rows' tails (37 = 2 x 16 + 5 lanes) for the
  // queries that see key 36.
  for (bool causal : {false, true})
    for (bool grad : {false, true}) {
      Builder b;
      Shape qs = {2, 2, 37, 8};
      int q = b.input("q", qs), k = b.input("k", qs), v = b.input("v", qs),
          g = b.input("g", qs);
      Shape out = qs;
      if (grad)
        out.insert(out.begin(), 3);
      int a = grad ? b.node(OpKind::AttentionGrad, {q, k, v, g}, out, {}, {0.35}, causal)
                   : b.node(OpKind::Attention, {q, k, v}, out, {}, {0.35}, causal);
      b.yieldSum(a);
      HostTensor qv = random(qs, 23), kv = random(qs, 24, -1, 1);
      std::fill(qv.data.begin(), qv.data.end(), 1.0);
      for (int64_t blk = 0; blk < 4; ++blk)
        std::fill_n(kv.data.begin() + (blk * 37 + 36) * 8, 8, 40.0);
      expectSame(b, a, {{"q", qv}, {"k", kv}, {"v", random(qs, 25)}, {"g", random(qs, 26)}},
                 1e-5,
                 std::string(causal ? "causal " : "") + (grad ? "attention_grad" : "attention") +
                     " with one score of 112 per row");
    }
  // attention's fused backward: per (batch, head) block through BLAS and
  // a block-sized scratch, against the reference's row loops. T = 37 (not a
  // multiple of any vector width), D = 8, 2 x 3 blocks; and T = 150, whose
  // causal query blocks gather dK and dV over three products each.
  for (int64_t t : {37, 150})
    for (bool causal : {false, true}) {
      Builder b;
      // (one block at T = 150: the yielded sum of every element, checked
      // to 1e-5, must not gather more f32 rounding than that)
      Shape qs = t == 37 ? Shape{2, 3, t, 8} : Shape{1, 1, t, 8}, gs = qs;
      gs.insert(gs.begin(), 3);
      int q = b.input("q", qs), k = b.input("k", qs), v = b.input("v", qs),
          g = b.input("g", qs);
      int a = b.node(OpKind::AttentionGrad, {q, k, v, g}, gs, {}, {0.35}, causal);
      b.yieldSum(a);
      expectSame(b, a,
                 {{"q", random(qs, 16)}, {"k", random(qs, 17)}, {"v", random(qs, 18)},
                  {"g", random(qs, 19)}},
                 1e-5,
                 std::string(causal ? "causal " : "") + "attention_grad, T = " + std::to_string(t));
    }
  // No rows, or no features: refused when the plan is built, naming the
  // node, not a BLAS call with a zero leading dimension inside a parallel
  // region (which terminated the process).
  for (Shape qs : {Shape{2, 3, 0, 8}, Shape{2, 3, 5, 0}})
    for (bool grad : {false, true}) {
      Builder b;
      int q = b.input("q", qs), k = b.input("k", qs), v = b.input("v", qs), g = b.input("g", qs);
      Shape out = qs;
      if (grad)
        out.insert(out.begin(), 3);
      int a = grad ? b.node(OpKind::AttentionGrad, {q, k, v, g}, out, {}, {0.35}, true)
                   : b.node(OpKind::Attention, {q, k, v}, out, {}, {0.35}, true);
      b.yieldSum(a);
      std::string what = std::string(grad ? "attention_grad" : "attention") + " of " +
                         shapeToString(qs);
      try {
        PlanExecutor plan(b.g, {});
        ADD_FAILURE() << what << " was accepted";
      } catch (const std::runtime_error &e) {
        EXPECT_NE(std::string(e.what()).find("needs at least one query, key and feature"),
                  std::string::npos)
            << what << ": " << e.what();
      }
      EXPECT_THROW(RefExecutor(b.g, Precision::F32), std::runtime_error) << what;
    }
}

// STRETTO_RUNTIME_ISA caps the ISA of the runtime's row loops (ctest runs
// the row-op tests under each value: PlanExecutorRowLoops.*).
TEST(PlanExecutor, RowLoopIsaFollowsTheEnvironment) {
  std::string isa = PlanExecutor::rowLoopIsaName();
  const char *env = std::getenv("STRETTO_RUNTIME_ISA");
  if (!env || !*env)
    GTEST_SKIP() << "no STRETTO_RUNTIME_ISA: ctest's PlanExecutorRowLoops.* set it";
  std::string cap = env;
  std::printf("row loops: %s (STRETTO_RUNTIME_ISA=%s)\n", isa.c_str(), cap.c_str());
  if (cap == "baseline")
    EXPECT_EQ(isa, "x86-64");
  else if (cap == "avx2")
    EXPECT_NE(isa, "x86-64-v4 (AVX-512)");
  else
    GTEST_SKIP() << "STRETTO_RUNTIME_ISA=" << cap << " caps nothing below this CPU's best";
}

TEST(PlanExecutor, IdOps) {
  Builder b;
  int table = b.input("table", {10, 4}), tok = b.input("tok", {3, 5}),
      g = b.input("g", {3, 5, 4}), logits = b.input("logits", {3, 5, 10});
  int e = b.node(OpKind::Embedding, {table, tok}, {3, 5, 4});
  int s = b.node(OpKind::ScatterRows, {tok, g}, {10, 4});
  int o = b.node(OpKind::OneHot, {tok}, {3, 5, 10});
  int ce = b.node(OpKind::CrossEntropy, {logits, tok}, {});
  int sum = b.node(OpKind::Add, {ce, b.node(OpKind::ReduceSum, {e}, {}, {0, 1, 2})}, {});
  sum = b.node(OpKind::Add, {sum, b.node(OpKind::ReduceSum, {s}, {}, {0, 1})}, {});
  sum = b.node(OpKind::Add, {sum, b.node(OpKind::ReduceSum, {o}, {}, {0, 1, 2})}, {});
  b.node(OpKind::Yield, {sum}, {});
  TensorMap in = {{"table", random({10, 4}, 16)},
                  {"tok", ids({3, 5}, 10, 17)},
                  {"g", random({3, 5, 4}, 18)},
                  {"logits", random({3, 5, 10}, 19)}};
  for (int probe : {e, s, o, ce})
    expectSame(b, probe, in, 0, opKindName(b.g.nodes[probe].kind));

  // An id out of range fails naming the op and its location.
  in["tok"].data[7] = 10;
  PlanExecutor host(b.g, {});
  std::unique_ptr<PlanExecutor> gpu = emulatedGpuExecutor(b.g, {});
  for (PlanExecutor *plan : {&host, gpu.get()}) {
    try {
      plan->evaluate(in);
      ADD_FAILURE() << "an out-of-range id was accepted on " << plan->deviceName();
    } catch (const std::runtime_error &err) {
      EXPECT_NE(std::string(err.what()).find("embedding (node 4) at test.mlir:5:1: id 10 out of range [0, 10)"),
                std::string::npos)
          << err.what();
    }
  }
}

// scatter_rows over many chunks of rows on the emulated GPU (CudaPlan.cpp's
// opScatterRows: each id's rows linked in order across chunks of 256 rows,
// then summed down the lists a thread per (id, column)) gives the
// reference's sums bit for bit: an id in half the rows (its list crossing
// every chunk), ids at a chunk's first and last rows, ids of one row, and
// ids of none (rows of zeros). Linking a chunk's rows out of order, or
// dropping a chunk's link, fails it.
TEST(PlanExecutor, ScatterRowsOverManyChunksAddsInTheReferencesOrder) {
  const int64_t rows = 2100, vocab = 50, d = 3;
  Builder b;
  int tok = b.input("tok", {rows}), g = b.input("g", {rows, d});
  int s = b.node(OpKind::ScatterRows, {tok, g}, {vocab, d});
  b.yieldSum(s);
  HostTensor t = ids({rows}, 40, 29); // (ids 44 to 49 never appear)
  for (int64_t r = 0; r < rows; r += 2)
    t.data[r] = 7;
  t.data[255] = 41, t.data[256] = 42, t.data[2099] = 43; // a chunk's last, the next's first
  TensorMap in = {{"tok", t}, {"g", random({rows, d}, 31, -3, 3)}};
  RefExecutor ref(b.g, Precision::F32);
  std::unique_ptr<PlanExecutor> gpu = emulatedGpuExecutor(b.g, {});
  const HostTensor want = ref.evaluate(in, {s}).probes.at(s),
                   got = gpu->evaluate(in, {s}).probes.at(s);
  ASSERT_EQ(want.shape, got.shape);
  for (size_t e = 0; e < want.data.size(); ++e)
    ASSERT_EQ(want.data[e], got.data[e]) << "id " << e / d << ", column " << e % d;
  EXPECT_NE(got.data[41 * d], 0.0);
  EXPECT_EQ(got.data[45 * d], 0.0);
}

TEST(PlanExecutor, MatmulGemmNewtonSchulz) {
  for (bool batchedRhs : {false, true}) {
    Builder b;
    Shape rhs = batchedRhs ? Shape{2, 4, 5} : Shape{4, 5};
    int x = b.input("x", {2, 3, 4}), w = b.input("w", rhs);
    int m = b.node(OpKind::Matmul, {x, w}, {2, 3, 5});
    b.yieldSum(m);
    expectSame(b, m, {{"x", random({2, 3, 4}, 20)}, {"w", random(rhs, 21)}}, 1e-5, "matmul");
  }
  {
    Builder b; // alpha op(a) op(b) with both transposed: a [4, 3]^T x b [5, 4]^T
    int a = b.input("a", {4, 3}), w = b.input("w", {5, 4});
    int m = b.node(OpKind::Gemm, {a, w}, {3, 5}, {1, 1}, {0.5});
    b.yieldSum(m);
    expectSame(b, m, {{"a", random({4, 3}, 22)}, {"w", random({5, 4}, 23)}}, 1e-5, "gemm");
  }
  for (Shape s : {Shape{6, 4}, Shape{4, 6}}) {
    Builder b;
    int gr = b.input("g", s);
    int o = b.node(OpKind::NewtonSchulz, {gr}, s, {5}, {3.4445, -4.7750, 2.0315});
    b.yieldSum(o);
    expectSame(b, o, {{"g", random(s, 24)}}, 1e-4, "newton_schulz " + shapeToString(s));
  }
}

// A GEMM with a DGELU epilogue (kernel-gemm-epilogue: a GELU's backward,
// ints {ta, tb, 1}): alpha op(a) op(b) times gelu'(x), element by element,
// on the reference, the host and the emulated GPU, against the product and
// the tanh form's derivative worked out here in f64. A row of 16 goes to
// the emulated cuBLASLt's DGELU epilogue, a row of 6 (not a multiple of 8:
// cuBLASLt's auxiliary leading dimension) to st_dgelu after an f32 product.
TEST(PlanExecutor, GemmDGeluEpilogue) {
  for (int64_t n : {16, 6}) {
    Builder b;
    int a = b.input("a", {5, 8}), w = b.input("w", {n, 8}), x = b.input("x", {5, n});
    int m = b.node(OpKind::Gemm, {a, w, x}, {5, n}, {0, 1, 1}, {0.5});
    b.yieldSum(m);
    const TensorMap in{
        {"a", random({5, 8}, 31)}, {"w", random({n, 8}, 32)}, {"x", random({5, n}, 33, -4, 4)}};
    const long long fallback = emulatedGpuLaunchesOf("st_dgelu");
    expectSame(b, m, in, 2e-6, "dgelu gemm n=" + std::to_string(n));
    EXPECT_EQ(emulatedGpuLaunchesOf("st_dgelu") > fallback, n % 8 != 0) << n;
    const HostTensor got = RefExecutor(b.g, Precision::F64).evaluate(in, {m}).probes.at(m);
    const double k = std::sqrt(2.0 / M_PI);
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double p = 0;
        for (int64_t l = 0; l < 8; ++l)
          p += in.at("a").data[i * 8 + l] * in.at("w").data[j * 8 + l];
        const double xv = in.at("x").data[i * n + j];
        const double t = std::tanh(k * (xv + 0.044715 * xv * xv * xv));
        const double d = 0.5 * (1 + t) + 0.5 * xv * (1 - t * t) * k * (1 + 3 * 0.044715 * xv * xv);
        EXPECT_NEAR(got.data[i * n + j], 0.5 * p * d, 1e-9) << i << ", " << j;
      }
  }
}

// GELU with its auxiliary output (kernel-gemm-epilogue's gelu_aux, ints
// {ta, tb, 3}, a bias or none): a result [2, 5, n] holding gelu(s) and s,
// s = op(a) op(b) + bias, on the reference, the host and the emulated GPU,
// against s and the tanh form of GELU worked out here in f64. A row of 16
// goes to the emulated cuBLASLt's GELU_AUX(_BIAS) epilogue, a row of 6 (not
// a multiple of 8: cuBLASLt's auxiliary leading dimension) to st_gelu_aux
// after an f32 product.
TEST(PlanExecutor, GemmGeluAuxEpilogue) {
  for (int64_t n : {16, 6})
    for (bool bias : {true, false}) {
      Builder b;
      int a = b.input("a", {5, 8}), w = b.input("w", {n, 8}), v = b.input("v", {n});
      std::vector<int> ops{a, w};
      if (bias)
        ops.push_back(v);
      int m = b.node(OpKind::Gemm, ops, {2, 5, n}, {0, 1, 3});
      b.yieldSum(m);
      const TensorMap in{{"a", random({5, 8}, 34, -2, 2)},
                         {"w", random({n, 8}, 35, -2, 2)},
                         {"v", random({n}, 36)}};
      const long long fallback = emulatedGpuLaunchesOf("st_gelu_aux");
      const std::string what = "gelu_aux gemm n=" + std::to_string(n) + (bias ? " +bias" : "");
      expectSame(b, m, in, 2e-6, what);
      EXPECT_EQ(emulatedGpuLaunchesOf("st_gelu_aux") > fallback, n % 8 != 0) << what;
      const HostTensor got = RefExecutor(b.g, Precision::F64).evaluate(in, {m}).probes.at(m);
      const double k = std::sqrt(2.0 / M_PI);
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sum = bias ? in.at("v").data[j] : 0.0;
          for (int64_t l = 0; l < 8; ++l)
            sum += in.at("a").data[i * 8 + l] * in.at("w").data[j * 8 + l];
          const double gelu = 0.5 * sum * (1 + std::tanh(k * (sum + 0.044715 * sum * sum * sum)));
          EXPECT_NEAR(got.data[i * n + j], gelu, 1e-9) << what << ": " << i << ", " << j;
          EXPECT_NEAR(got.data[5 * n + i * n + j], sum, 1e-12) << what << ": " << i << ", " << j;
        }
    }
}

// train.attention's and attention_grad's `bf16` (ints {1}: the weights P,
// and the backward's dS, rounded to bf16 before their products) on the
// host and on the emulated GPU (tensor cores at D = 16, CUDA cores at D = 8,
// the GEMM path at D = 12; the inputs in f32, so only P and dS may be
// rounded; T = 40, two chunks of the forward's 32 keys) against the f64
// reference's roundings: in relative L2 within 1e-4 of the reference with
// them and at least ten times closer to it than to the reference without
// (where an f32 weight and the reference's round to neighbouring bf16
// values, a term moves by 2^-8).
TEST(PlanExecutor, AttentionRoundsPAndDSOnEveryDevice) {
  for (int64_t d : {16, 8, 12}) {
    const Shape s{2, 2, 40, d}, stacked{3, 2, 2, 40, d};
    Builder b;
    int q = b.input("q", s), k = b.input("k", s), v = b.input("v", s), g = b.input("g", s);
    struct Pair {
      const char *what;
      int rounded, exact;
    };
    const Pair pairs[2] = {{"attention", b.node(OpKind::Attention, {q, k, v}, s, {1}, {0.3}, true),
                            b.node(OpKind::Attention, {q, k, v}, s, {}, {0.3}, true)},
                           {"attention_grad",
                            b.node(OpKind::AttentionGrad, {q, k, v, g}, stacked, {1}, {0.3}, true),
                            b.node(OpKind::AttentionGrad, {q, k, v, g}, stacked, {}, {0.3}, true)}};
    int sum = b.node(OpKind::Add, {pairs[1].rounded, pairs[1].exact}, stacked);
    int r0 = b.node(OpKind::ReduceSum, {pairs[0].rounded}, {}, {0, 1, 2, 3});
    int r1 = b.node(OpKind::ReduceSum, {pairs[0].exact}, {}, {0, 1, 2, 3});
    int r2 = b.node(OpKind::ReduceSum, {sum}, {}, {0, 1, 2, 3, 4});
    int r01 = b.node(OpKind::Add, {r0, r1}, {});
    b.yieldSum(b.node(OpKind::Add, {r01, r2}, {}));
    TensorMap in;
    uint64_t seed = 51;
    for (const char *name : {"q", "k", "v", "g"})
      in[name] = random(s, seed++);
    const std::vector<int> probes{pairs[0].rounded, pairs[0].exact, pairs[1].rounded,
                                  pairs[1].exact};
    RefExecutor ref(b.g, Precision::F64);
    StepResult r = ref.evaluate(in, probes);
    auto gap = [](const std::vector<double> &x, const std::vector<double> &want) {
      double dd = 0, ww = 0;
      for (size_t e = 0; e < want.size(); ++e)
        dd += (x[e] - want[e]) * (x[e] - want[e]), ww += want[e] * want[e];
      return std::isnan(dd) ? INFINITY : std::sqrt(dd / ww);
    };
    PlanExecutor host(b.g, {});
    std::unique_ptr<PlanExecutor> gpu = emulatedGpuExecutor(b.g, {});
    for (const Pair &pair : pairs) {
      const std::vector<double> &withR = r.probes.at(pair.rounded).data,
                                &without = r.probes.at(pair.exact).data;
      EXPECT_GT(gap(without, withR), 1e-4) << pair.what << ": the roundings change it";
      for (PlanExecutor *plan : {&host, gpu.get()}) {
        const std::string on =
            std::string(pair.what) + " on " + plan->deviceName() + ", D " + std::to_string(d);
        StepResult p = plan->evaluate(in, probes);
        const std::vector<double> &x = p.probes.at(pair.rounded).data;
        EXPECT_LE(gap(x, withR), 1e-4) << on;
        EXPECT_GE(gap(x, without), 10 * gap(x, withR)) << on << ": not rounded?";
        EXPECT_LE(gap(p.probes.at(pair.exact).data, without), 1e-6) << on;
      }
    }
  }
}

// A weight gradient with its bias gradient (kernel-gemm-epilogue's
// bias_grad, ints {1, 0, 2}): x^T dy in the first rows and dy's column
// sums in the last, on the reference, the host and the emulated GPU (the
// emulated cuBLASLt's BGRADA epilogue; where cuBLASLt refuses it,
// st_column_sums after the plain GEMM), against sums worked out here.
TEST(PlanExecutor, GemmBiasGradEpilogue) {
  for (int64_t k : {4, 3}) { // (3 x 5 values: the sums not 16-byte aligned, a kernel makes them)
    Builder b;
    int x = b.input("x", {6, k}), dy = b.input("dy", {6, 5});
    int m = b.node(OpKind::Gemm, {x, dy}, {k + 1, 5}, {1, 0, 2});
    b.yieldSum(m);
    const TensorMap in{{"x", random({6, k}, 41)}, {"dy", random({6, 5}, 42)}};
    const long long before = emulatedGpuLaunchesOf("st_column_sums");
    expectSame(b, m, in, 2e-6, "bias_grad gemm");
    EXPECT_EQ(emulatedGpuLaunchesOf("st_column_sums") > before, k == 3) << k;
    const HostTensor got = RefExecutor(b.g, Precision::F64).evaluate(in, {m}).probes.at(m);
    for (int64_t j = 0; j < 5; ++j) {
      double sum = 0;
      for (int64_t r = 0; r < 6; ++r)
        sum += in.at("dy").data[r * 5 + j];
      EXPECT_NEAR(got.data[k * 5 + j], sum, 1e-12) << "column " << j;
      for (int64_t i = 0; i < k; ++i) {
        double p = 0;
        for (int64_t r = 0; r < 6; ++r)
          p += in.at("x").data[r * k + i] * in.at("dy").data[r * 5 + j];
        EXPECT_NEAR(got.data[i * 5 + j], p, 1e-12) << i << ", " << j;
      }
    }
    const long long sums = emulatedGpuLaunchesOf("st_column_sums");
    refuseGemmEpilogues(true);
    std::unique_ptr<PlanExecutor> off = emulatedGpuExecutor(b.g, {});
    const HostTensor fallback = off->evaluate(in, {m}).probes.at(m);
    refuseGemmEpilogues(false);
    EXPECT_GT(emulatedGpuLaunchesOf("st_column_sums"), sums) << "no kernel summed the columns";
    std::unique_ptr<PlanExecutor> on = emulatedGpuExecutor(b.g, {});
    EXPECT_EQ(on->evaluate(in, {m}).probes.at(m).data, fallback.data) << "epilogue vs kernel";
  }
}

// Muon's Newton-Schulz in a bf16 plan (the node's flag: train.newton_schulz's
// bf16): X, A, B and each step's X rounded to bf16 where they are made, the
// GEMMs on bf16 operands (on the emulated GPU: the matrices kept in two
// bytes, cuBLASLt's bf16 x bf16 -> f32, A written in bf16, B made by
// st_ns_b16 each step). Every executor's result is bf16 values, the three
// agree within a few bf16 rounding steps (sums in other orders tip a
// rounding now and then), and they differ from the f32 iteration's.
TEST(PlanExecutor, Bf16NewtonSchulzRoundsItsMatrices) {
  for (Shape s : {Shape{6, 4}, Shape{4, 6}, Shape{8, 12}}) {
    Builder b;
    int gr = b.input("g", s);
    int o = b.node(OpKind::NewtonSchulz, {gr}, s, {5}, {3.4445, -4.7750, 2.0315});
    b.g.nodes[o].flag = true;
    b.yieldSum(o);
    Graph f32 = b.g;
    f32.nodes[o].flag = false;
    const TensorMap in{{"g", random(s, 25)}};
    const HostTensor want = RefExecutor(b.g, Precision::F32).evaluate(in, {o}).probes.at(o);
    const HostTensor wide = RefExecutor(f32, Precision::F32).evaluate(in, {o}).probes.at(o);
    double fromF32 = 0;
    for (size_t i = 0; i < want.data.size(); ++i) {
      EXPECT_EQ(roundToBF16(float(want.data[i])), float(want.data[i])) << "element " << i;
      fromF32 = std::max(fromF32, std::fabs(want.data[i] - wide.data[i]));
    }
    EXPECT_GT(fromF32, 1e-4) << "the bf16 iteration gave the f32 one's values";
    PlanExecutor host(b.g, {});
    const long long bSteps = emulatedGpuLaunchesOf("st_ns_b16");
    std::unique_ptr<PlanExecutor> gpu = emulatedGpuExecutor(b.g, {});
    for (PlanExecutor *plan : {&host, gpu.get()}) {
      const HostTensor got = plan->evaluate(in, {o}).probes.at(o);
      ASSERT_EQ(got.data.size(), want.data.size());
      for (size_t i = 0; i < got.data.size(); ++i) {
        EXPECT_EQ(roundToBF16(float(got.data[i])), float(got.data[i])) << "element " << i;
        EXPECT_NEAR(got.data[i], want.data[i], 2e-2 * std::fabs(want.data[i]) + 2e-3)
            << plan->deviceName() << ", " << shapeToString(s) << ", element " << i;
      }
    }
    EXPECT_EQ(emulatedGpuLaunchesOf("st_ns_b16") - bSteps, 5) << "not the bf16 iteration";
  }
}

// norm_grad's epilogue (kernel-norm-grad-epilogue): with an addend its dx
// rows are dx + r, and in a bf16 plan (dtype BF16) bf16(r + bf16(dx)), or
// bf16(dx) without one, while dgamma and dbeta stay as they were: bit for
// bit what the ops it replaces give on the reference (a slice of the rows,
// a rounding, an add, a rounding), on the reference, the host and the
// emulated GPU (RuntimeOps.cu's st_norm_grad_put).
TEST(PlanExecutor, NormGradEpilogueIsTheOpsItReplaces) {
  for (bool centered : {true, false})
    for (bool bf16 : {false, true})
      for (bool addend : {true, false}) {
        for (Shape xs : {Shape{130, 24}, Shape{7, 5}}) { // (7 x 5: the gain at an odd element)
          if (!bf16 && !addend)
            continue; // (nothing to fold)
          const int64_t rows = xs[0], d = xs[1], params = centered ? 2 : 1;
          const TensorMap in{{"x", random(xs, 31, -3, 5)},
                             {"g", random({d}, 32)},
                             {"dy", random(xs, 33)},
                             {"r", random(xs, 34)}};
          const std::string what = std::string(centered ? "layer_norm" : "rms_norm") +
                                   (bf16 ? ", bf16" : ", f32") + (addend ? ", addend " : " ") +
                                   shapeToString(xs);
          // The ops it replaces, on the reference.
          Builder plain;
          int x = plain.input("x", xs), g = plain.input("g", {d}), dy = plain.input("dy", xs),
              r = plain.input("r", xs);
          int n =
              plain.node(OpKind::NormGrad, {x, g, dy}, {rows + params, d}, {}, {1e-5}, centered);
          int v = plain.node(OpKind::Slice, {n}, xs, {0, 0});
          if (bf16)
            v = plain.node(OpKind::RoundBf16, {v}, xs);
          if (addend)
            v = plain.node(OpKind::Add, {r, v}, xs);
          if (addend && bf16)
            v = plain.node(OpKind::RoundBf16, {v}, xs);
          const int pp = plain.node(OpKind::Slice, {n}, {params, d}, {0, rows});
          plain.yieldSum(v);
          const StepResult want = RefExecutor(plain.g, Precision::F32).evaluate(in, {v, pp});
          // The norm_grad that does it.
          Builder fused;
          x = fused.input("x", xs), g = fused.input("g", {d}), dy = fused.input("dy", xs),
          r = fused.input("r", xs);
          std::vector<int> ops{x, g, dy};
          if (addend)
            ops.push_back(r);
          n = fused.node(OpKind::NormGrad, ops, {rows + params, d}, {}, {1e-5}, centered);
          fused.g.nodes[n].dtype = bf16 ? DType::BF16 : DType::F32;
          const int fr = fused.node(OpKind::Slice, {n}, xs, {0, 0});
          const int fp = fused.node(OpKind::Slice, {n}, {params, d}, {0, rows});
          fused.yieldSum(fr);
          RefExecutor ref(fused.g, Precision::F32);
          PlanExecutor host(fused.g, {});
          std::unique_ptr<PlanExecutor> gpu = emulatedGpuExecutor(fused.g, {});
          // A GPU that keeps bf16 values in two bytes (as with a model's CUDA
          // C, here none): the rounded rows in two, dgamma and dbeta after
          // them in four, each read through its slice.
          std::unique_ptr<PlanExecutor> halves =
              emulatedGpuExecutor(fused.g, {}, GemmPrecision::F32, "// no kernels\n");
          for (Executor *e :
               std::initializer_list<Executor *>{&ref, &host, gpu.get(), halves.get()}) {
            const StepResult got = e->evaluate(in, {fr, fp});
            EXPECT_EQ(got.probes.at(fr).data, want.probes.at(v).data) << what << ": the rows";
            EXPECT_EQ(got.probes.at(fp).data, want.probes.at(pp).data) << what << ": dgamma";
          }
          if (bf16)
            for (double e : want.probes.at(v).data)
              ASSERT_EQ(roundToBF16(static_cast<float>(e)), static_cast<float>(e)) << what;
          // Read whole (not through a slice), such a value cannot be.
          if (bf16) {
            fused.g.nodes[fused.g.nodes.size() - 2].operands = {n}; // the loss: its sum
            fused.g.nodes[fused.g.nodes.size() - 2].ints = {0, 1};
            try {
              emulatedGpuExecutor(fused.g, {}, GemmPrecision::F32, "// no kernels\n");
              ADD_FAILURE() << what << ": a whole read of two-byte rows planned";
            } catch (const std::exception &e) {
              EXPECT_NE(std::string(e.what()).find("only slices can read it"), std::string::npos)
                  << e.what();
            }
          }
        }
      }
}

// A batch of Newton-Schulz iterations (train-batch-newton-schulz: k
// operands, result [k, m, n]) is each matrix's own iteration, bit for bit,
// on the reference, the host and the emulated GPU, in f32 and with bf16
// matrices, wide and tall; on the GPU its steps' element-wise updates are
// one launch for the batch (five, not fifteen).
TEST(PlanExecutor, BatchedNewtonSchulzIsEachMatrixOnItsOwn) {
  for (bool bf16 : {false, true})
    for (Shape s : {Shape{4, 6}, Shape{6, 4}}) {
      Builder one, batch;
      TensorMap in;
      std::vector<int> singles, gs;
      for (int k = 0; k < 3; ++k) {
        const std::string name = "g" + std::to_string(k);
        in[name] = random(s, 40 + k);
        int g = one.input(name, s);
        singles.push_back(one.node(OpKind::NewtonSchulz, {g}, s, {5}, {3.4445, -4.7750, 2.0315}));
        one.g.nodes[singles.back()].flag = bf16;
        gs.push_back(batch.input(name, s));
      }
      int o = batch.node(OpKind::NewtonSchulz, gs, {3, s[0], s[1]}, {5}, {3.4445, -4.7750, 2.0315});
      batch.g.nodes[o].flag = bf16;
      int sum = one.node(OpKind::Add, {singles[0], singles[1]}, s);
      one.yieldSum(one.node(OpKind::Add, {sum, singles[2]}, s));
      batch.yieldSum(o);
      // The batch on `batched` against each matrix's own node on `single`.
      auto check = [&](Executor &single, Executor &batched, const std::string &where) {
        const auto want = single.evaluate(in, singles).probes;
        const HostTensor got = batched.evaluate(in, {o}).probes.at(o);
        const size_t n = want.at(singles[0]).data.size();
        ASSERT_EQ(got.data.size(), 3 * n) << where;
        for (size_t k = 0; k < 3; ++k)
          for (size_t e = 0; e < n; ++e)
            ASSERT_EQ(got.data[k * n + e], want.at(singles[k]).data[e])
                << where << ", " << shapeToString(s) << (bf16 ? " bf16" : " f32") << ", matrix "
                << k << ", element " << e;
      };
      RefExecutor refOne(one.g, Precision::F32), refBatch(batch.g, Precision::F32);
      check(refOne, refBatch, "reference");
      PlanExecutor cpuOne(one.g, {}), cpuBatch(batch.g, {});
      check(cpuOne, cpuBatch, "cpu");
      std::unique_ptr<PlanExecutor> gpuOne = emulatedGpuExecutor(one.g, {}),
                                    gpuBatch = emulatedGpuExecutor(batch.g, {});
      const char *step = bf16 ? "st_ns_x16" : "st_scale_add";
      const long long before = emulatedGpuLaunchesOf(step);
      gpuBatch->evaluate(in, {o});
      EXPECT_EQ(emulatedGpuLaunchesOf(step) - before, bf16 ? 6 : 5) << "steps not batched";
      check(*gpuOne, *gpuBatch, "emulated GPU");
    }
}

// A step and an update with states: SGD on w, a counter, and a write whose
// value is another state's old value (it must not see that state's new one).
Graph statefulGraph() {
  Builder b;
  b.g.states = {StateDecl{"w", {3, 4}, DType::F32, InitKind::Normal, 0.5, true},
                StateDecl{"a", {3, 4}, DType::F32, InitKind::Zeros, 0, false},
                StateDecl{"b", {3, 4}, DType::F32, InitKind::Ones, 0, false}};
  int x = b.input("x", {5, 3});
  int w = b.node(OpKind::Read, {}, {3, 4});
  b.g.nodes[w].name = "w";
  int y = b.node(OpKind::Matmul, {x, w}, {5, 4});
  int l = b.node(OpKind::ReduceSum, {b.node(OpKind::Mul, {y, y}, {5, 4})}, {}, {0, 1});
  // d/dw sum((xw)^2) = 2 x^T (x w)
  int xt = b.node(OpKind::Transpose, {x}, {3, 5}, {1, 0});
  int g = b.node(OpKind::Matmul, {xt, y}, {3, 4});
  b.node(OpKind::Grad, {g}, {});
  b.g.nodes.back().name = "w";
  b.node(OpKind::Yield, {l}, {});
  b.phase = Phase::Update;
  int wr = b.node(OpKind::Read, {}, {3, 4});
  b.g.update[wr].name = "w";
  int acc = b.node(OpKind::AccumulatedGrad, {}, {3, 4});
  b.g.update[acc].name = "w";
  int lr = b.node(OpKind::Constant, {}, {});
  b.g.update[lr].data = {0.01};
  int nw = b.node(OpKind::Descend, {wr, acc, lr}, {3, 4});
  b.node(OpKind::Write, {nw}, {});
  b.g.update.back().name = "w";
  int oldB = b.node(OpKind::Read, {}, {3, 4});
  b.g.update[oldB].name = "b";
  int t = b.node(OpKind::StepCount, {}, {});
  int newB = b.node(OpKind::Add, {oldB, t}, {3, 4});
  b.node(OpKind::Write, {newB}, {});
  b.g.update.back().name = "b";
  b.node(OpKind::Write, {oldB}, {}); // a := b as it was before this update
  b.g.update.back().name = "a";
  return b.g;
}

// On the host and on the emulated GPU.
void statesWritesAndMicroBatches(PlanExecutor &plan) {
  Graph g = statefulGraph();
  RefExecutor ref(g, Precision::F32);
  SCOPED_TRACE(plan.deviceName());
  ref.initialize(3);
  plan.initialize(3);
  for (int step = 0; step < 4; ++step) {
    for (int k = 0; k < 2; ++k) { // two micro-batches per step
      TensorMap in = {{"x", random({5, 3}, 100 + step * 2 + k)}};
      double lr = ref.microStep(in).outputs.at(0), lp = plan.microStep(in).outputs.at(0);
      EXPECT_NEAR(lr, lp, 1e-5 * (1 + std::fabs(lr))) << "step " << step;
    }
    ref.update();
    plan.update();
  }
  EXPECT_EQ(plan.stepCount(), 4);
  for (const char *s : {"w", "a", "b"}) {
    HostTensor x = ref.getState(s), y = plan.getState(s);
    for (size_t i = 0; i < x.data.size(); ++i)
      EXPECT_NEAR(x.data[i], y.data[i], 1e-5 * (1 + std::fabs(x.data[i]))) << s << "[" << i << "]";
  }
  // a holds b before the last update: 1 + 1 + 2 + 3; b: 1 + 1 + 2 + 3 + 4.
  EXPECT_EQ(plan.getState("a").data[0], 7.0);
  EXPECT_EQ(plan.getState("b").data[0], 11.0);

  // A failing step changes nothing: same states, no gradient counted.
  HostTensor before = plan.getState("w");
  EXPECT_THROW(plan.microStep({{"x", random({5, 4}, 1)}}), std::runtime_error);
  EXPECT_THROW(plan.update(), std::runtime_error); // no gradient since the last update
  EXPECT_EQ(plan.getState("w").data, before.data);

  // setState / getState round trip, with shape checks.
  HostTensor w = random({3, 4}, 9);
  plan.setState("w", w);
  EXPECT_EQ(plan.getState("w").data, w.data);
  EXPECT_THROW(plan.setState("w", random({4, 3}, 9)), std::runtime_error);
  EXPECT_THROW(plan.getState("nope"), std::runtime_error);
}

TEST(PlanExecutor, StatesWritesAndMicroBatches) {
  PlanExecutor host(statefulGraph(), {});
  statesWritesAndMicroBatches(host);
  statesWritesAndMicroBatches(*emulatedGpuExecutor(statefulGraph(), {}));
}

TEST(PlanExecutor, PlanReusesBuffers) {
  // A chain of 12 elementwise ops on [64, 64]: with reuse the arena holds
  // the input and two live values at a time, not 13.
  Builder b;
  int v = b.input("x", {64, 64});
  for (int i = 0; i < 12; ++i)
    v = b.node(i % 2 ? OpKind::Tanh : OpKind::Neg, {v}, {64, 64});
  b.yieldSum(v);
  PlanExecutor plan(b.g, {});
  const int64_t one = 64 * 64 * 4;
  EXPECT_LE(plan.stats().stepArenaBytes, 3 * one + 64);
  EXPECT_GE(plan.stats().unplannedBytes, 13 * one);
  EXPECT_NE(plan.describe().find("free after"), std::string::npos);
  expectSame(b, v, {{"x", random({64, 64}, 30)}}, 2e-6, "chain");
}

TEST(PlanExecutor, LeadingRowSlicesAreViews) {
  // Slices of whole leading rows of an arena value (attention_grad's dq, dk
  // and dv) cost no copy: they alias their operand at an offset, and keep
  // it alive while they are read. A slice with rows before its window is
  // still a copy.
  Builder b;
  int x = b.input("x", {3, 2, 5});
  int n = b.node(OpKind::Neg, {x}, {3, 2, 5});
  int s1 = b.node(OpKind::Slice, {n}, {1, 2, 5}, {0, 1});
  int s2 = b.node(OpKind::Slice, {n}, {1, 2, 5}, {0, 2});
  int inner = b.node(OpKind::Slice, {s2}, {1, 1, 5}, {1, 1}); // outer dim is 1: a view too
  int copy = b.node(OpKind::Slice, {n}, {3, 1, 5}, {1, 1});   // 3 rows before: a copy
  int t = b.node(OpKind::Tanh, {s1}, {1, 2, 5});             // allocated while n lives
  int sum = b.node(OpKind::Add, {t, s2}, {1, 2, 5});
  int sum2 = b.node(OpKind::Add, {sum, inner}, {1, 2, 5});
  int all = b.node(OpKind::Add, {copy, sum2}, {3, 2, 5});
  b.yieldSum(all);
  PlanExecutor plan(b.g, {});
  std::string d = plan.describe();
  EXPECT_NE(d.find("%" + std::to_string(s1) + " = slice %" + std::to_string(n) +
                   " : [1, 2, 5]  -> alias of %" + std::to_string(n) + " + 40 B"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("alias of %" + std::to_string(n) + " + 80 B"), std::string::npos) << d;
  EXPECT_NE(d.find("alias of %" + std::to_string(s2) + " + 20 B"), std::string::npos) << d;
  EXPECT_EQ(d.find("%" + std::to_string(copy) + " = slice %" + std::to_string(n) +
                   " : [3, 1, 5]  -> alias"),
            std::string::npos)
      << d;
  for (int probe : {s1, s2, inner, copy, all})
    expectSame(b, probe, {{"x", random({3, 2, 5}, 31)}}, 0, "slice views");
}

// Two "compiled kernels" for random graphs: elementwise on 24 floats.
extern "C" void testMix(const void *const *in, void *const *out) {
  const float *a = static_cast<const float *>(in[0]), *b = static_cast<const float *>(in[1]);
  float *o = static_cast<float *>(out[0]);
  for (int i = 0; i < 24; ++i)
    o[i] = 0.5f * a[i] + b[i] + 0.25f;
}
extern "C" void testScale(const void *const *in, void *const *out) {
  const float *a = static_cast<const float *>(in[0]);
  float *o = static_cast<float *>(out[0]);
  for (int i = 0; i < 24; ++i)
    o[i] = 0.9f * a[i] - 0.125f;
}

// Random update phases against the oracle: reads of a state before and
// after kernels that write it, several writes of one state, a state written
// with another's old value, reshapes of reads, values used many times. The
// planner's aliasing, in-place writes and commit order must keep the
// reference's semantics (a write takes effect at once), bit for bit.
TEST(PlanExecutor, RandomUpdatePhasesMatchTheReference) {
  const Shape shape = {4, 6};
  std::map<std::string, PlanExecutor::KernelFn> fns = {{"mix", testMix}, {"scale", testScale}};
  int inPlaceSeen = 0;
  for (uint64_t seed = 1; seed <= 2000; ++seed) {
    std::mt19937_64 rng(seed);
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    Builder b;
    const int S = 4;
    for (int k = 0; k < S; ++k)
      b.g.states.push_back(StateDecl{"s" + std::to_string(k), shape, DType::F32, InitKind::Normal,
                                     0.5, k == 0});
    // Step: a gradient for s0 and a loss.
    int x = b.input("x", shape);
    int r0 = b.node(OpKind::Read, {}, shape);
    b.g.nodes[r0].name = "s0";
    int g = b.node(OpKind::Kernel, {x, r0}, shape);
    b.g.nodes[g].name = "mix";
    b.node(OpKind::Grad, {g}, {});
    b.g.nodes.back().name = "s0";
    b.yieldSum(g);
    // Update: a random program over the states.
    b.phase = Phase::Update;
    std::vector<int> values;
    int acc = b.node(OpKind::AccumulatedGrad, {}, shape);
    b.g.update[acc].name = "s0";
    values.push_back(acc);
    int ops = 6 + static_cast<int>(pick(14));
    for (int k = 0; k < ops; ++k) {
      size_t what = pick(10);
      if (what < 3 || values.size() < 2) { // read, sometimes through a reshape
        int r = b.node(OpKind::Read, {}, shape);
        b.g.update[r].name = "s" + std::to_string(pick(S));
        if (pick(3) == 0) {
          int flat = b.node(OpKind::Reshape, {r}, {24});
          r = b.node(OpKind::Reshape, {flat}, shape);
        }
        values.push_back(r);
      } else if (what < 7) { // a kernel of earlier values
        bool mix = pick(2) == 0;
        int v = mix ? b.node(OpKind::Kernel, {values[pick(values.size())], values[pick(values.size())]},
                             shape)
                    : b.node(OpKind::Kernel, {values[pick(values.size())]}, shape);
        b.g.update[v].name = mix ? "mix" : "scale";
        values.push_back(v);
      } else { // a write of some earlier value
        b.node(OpKind::Write, {values[pick(values.size())]}, {});
        b.g.update.back().name = "s" + std::to_string(pick(S));
      }
    }
    RefExecutor ref(b.g, Precision::F32);
    ref.setKernels(fns);
    PlanExecutor plan(b.g, fns);
    // Every 10th program also on the CUDA device's code (emulated GPU).
    std::unique_ptr<PlanExecutor> gpu = seed % 10 ? nullptr : emulatedGpuExecutor(b.g, fns);
    ref.initialize(seed);
    plan.initialize(seed);
    if (gpu)
      gpu->initialize(seed);
    for (int step = 0; step < 3; ++step) {
      TensorMap in = {{"x", random(shape, seed * 10 + step)}};
      std::vector<double> want = ref.microStep(in).outputs;
      ASSERT_EQ(want, plan.microStep(in).outputs) << "seed " << seed << " step " << step << "\n" << plan.describe();
      if (gpu)
        ASSERT_EQ(want, gpu->microStep(in).outputs) << "GPU, seed " << seed << " step " << step;
      ref.update();
      plan.update();
      if (gpu)
        gpu->update();
    }
    for (int k = 0; k < S; ++k) {
      std::string name = "s" + std::to_string(k);
      ASSERT_EQ(ref.getState(name).data, plan.getState(name).data)
          << "seed " << seed << ", state " << name << "\n"
          << plan.describe();
      if (gpu)
        ASSERT_EQ(ref.getState(name).data, gpu->getState(name).data)
            << "GPU, seed " << seed << ", state " << name;
    }
    inPlaceSeen += plan.describe().find("kernel \"mix\"") != std::string::npos &&
                   plan.describe().find("-> state 's") != std::string::npos;
  }
  EXPECT_GT(inPlaceSeen, 20) << "too few random programs exercised in-place writes";
}

// Random step phases: DAGs of [4, 6] values with many uses, aliases
// (reshape chains), transposes, broadcasts, row reductions, softmax and
// kernels. Buffer reuse must never hand out a buffer that is still to be
// read: every value (probed) and the loss match the oracle bit for bit.
TEST(PlanExecutor, RandomStepGraphsMatchTheReference) {
  const Shape shape = {4, 6};
  std::map<std::string, PlanExecutor::KernelFn> fns = {{"mix", testMix}, {"scale", testScale}};
  for (uint64_t seed = 1; seed <= 500; ++seed) {
    std::mt19937_64 rng(seed);
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    Builder b;
    std::vector<int> values = {b.input("x", shape), b.input("y", shape)};
    int bias = b.input("bias", {6});
    int ops = 5 + static_cast<int>(pick(25));
    for (int k = 0; k < ops; ++k) {
      auto any = [&] { return values[pick(values.size())]; };
      int v = -1;
      switch (pick(8)) {
      case 0: v = b.node(OpKind::Tanh, {any()}, shape); break;
      case 1: v = b.node(OpKind::Mul, {any(), any()}, shape); break;
      case 2: v = b.node(OpKind::Add, {any(), bias}, shape); break;
      case 3: {
        int t = b.node(OpKind::Transpose, {any()}, {6, 4}, {1, 0});
        v = b.node(OpKind::Transpose, {t}, shape, {1, 0});
        break;
      }
      case 4: {
        int flat = b.node(OpKind::Reshape, {any()}, {24});
        v = b.node(OpKind::Reshape, {flat}, shape);
        break;
      }
      case 5: {
        int src = any();
        int r = b.node(OpKind::ReduceSum, {src}, {4}, {1});
        int col = b.node(OpKind::Reshape, {r}, {4, 1});
        v = b.node(OpKind::Sub, {src, col}, shape);
        break;
      }
      case 6: v = b.node(OpKind::Softmax, {any()}, shape); break;
      default:
        v = b.node(OpKind::Kernel, {any(), any()}, shape);
        b.g.nodes[v].name = "mix";
        break;
      }
      values.push_back(v);
    }
    int loss = b.node(OpKind::ReduceSum, {values.back()}, {}, {0, 1});
    b.node(OpKind::Yield, {loss}, {});
    std::vector<int> probes;
    for (size_t k = 0; k < 4; ++k)
      probes.push_back(values[pick(values.size())]);
    std::sort(probes.begin(), probes.end());
    probes.erase(std::unique(probes.begin(), probes.end()), probes.end());
    RefExecutor ref(b.g, Precision::F32);
    ref.setKernels(fns);
    PlanExecutor plan(b.g, fns);
    TensorMap in = {{"x", random(shape, seed)},
                    {"y", random(shape, seed + 1)},
                    {"bias", random({6}, seed + 2)}};
    StepResult r = ref.evaluate(in, probes), p = plan.evaluate(in, probes);
    if (seed % 10 == 0) { // also the CUDA device's code (emulated GPU)
      StepResult q = emulatedGpuExecutor(b.g, fns)->evaluate(in, probes);
      for (int k : probes)
        ASSERT_EQ(r.probes.at(k).data, q.probes.at(k).data) << "GPU, seed " << seed << ", node " << k;
    }
    ASSERT_EQ(r.outputs, p.outputs) << "seed " << seed << "\n" << plan.describe();
    for (int k : probes)
      ASSERT_EQ(r.probes.at(k).data, p.probes.at(k).data)
          << "seed " << seed << ", node " << k << "\n" << plan.describe();
    // The training step (all nodes, planned without probes) gives the same loss.
    ASSERT_EQ(ref.microStep(in).outputs, plan.microStep(in).outputs) << "seed " << seed;
  }
}

// The CUDA runtime's block reductions (runtime/cuda/RuntimeOps.cu: warp
// shuffles, shared memory, __syncthreads) as written, on the emulated GPU's
// block threads, with CudaPlan.cpp's launch shapes (256 threads; a block per
// row): row sums, Newton-Schulz's norm and cross-entropy, against f64; the
// losses' mean against the serial sum, bit for bit.
TEST(PlanExecutor, CudaBlockReductionsOnTheEmulatedGpu) {
  std::unique_ptr<GpuBackend> gpu = emulatedGpu({}, "", /*blockReductions=*/true);
  auto upload = [&](const std::vector<float> &v) {
    GpuBackend::Ptr p = gpu->alloc(v.size() * 4);
    gpu->uploadAsync(p, v.data(), v.size() * 4);
    return p;
  };
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto [rows, len] : {std::pair<int64_t, int64_t>{5, 1000}, {3, 7}, {2, 256}}) {
    std::vector<float> x(rows * len), y(rows);
    for (float &v : x)
      v = u(rng);
    GpuBackend::Ptr dx = upload(x), dy = gpu->alloc(rows * 4);
    const float *xp = reinterpret_cast<const float *>(dx);
    float *yp = reinterpret_cast<float *>(dy);
    void *params[] = {&rows, &len, &xp, &yp};
    gpu->launch(gpu->opsFunction("st_row_sums"), static_cast<unsigned>(rows), 256, params, 4,
                "st_row_sums");
    gpu->downloadSync(y.data(), dy, rows * 4);
    for (int64_t r = 0; r < rows; ++r) {
      double want = 0;
      for (int64_t j = 0; j < len; ++j)
        want += x[r * len + j];
      EXPECT_NEAR(y[r], want, 1e-5 * (1 + std::fabs(want))) << rows << "x" << len << " row " << r;
    }
    gpu->free(dx);
    gpu->free(dy);
  }
  // Newton-Schulz's norm: sums of squares a block per span, then the
  // parts' sum (one part; three with a short last one; the last element
  // large, so a part that stops short of its span's end shows).
  for (auto [n, span] : {std::pair<int64_t, int64_t>{3000, 4096}, {3000, 1024}}) {
    std::vector<float> g(n);
    double sq = 0;
    for (float &v : g)
      v = u(rng);
    g.back() = 50.0f;
    for (float v : g)
      sq += double(v) * v;
    int64_t parts = (n + span - 1) / span;
    GpuBackend::Ptr dg = upload(g), dpart = gpu->alloc(4 * parts), dnorm = gpu->alloc(4);
    const float *gp = reinterpret_cast<const float *>(dg);
    float *pp = reinterpret_cast<float *>(dpart), *np = reinterpret_cast<float *>(dnorm);
    void *sums[] = {&n, &span, &gp, &pp};
    gpu->launch(gpu->opsFunction("st_sumsq_parts"), static_cast<unsigned>(parts), 256, sums, 4,
                "st_sumsq_parts");
    const float *cp = pp;
    void *norm[] = {&parts, &cp, &np};
    gpu->launch(gpu->opsFunction("st_norm_plus_eps"), 1, 256, norm, 3, "st_norm_plus_eps");
    float got = 0;
    gpu->downloadSync(&got, dnorm, 4);
    EXPECT_NEAR(got, std::sqrt(sq) + 1e-7, 1e-6 * std::sqrt(sq)) << n << " in spans of " << span;
    for (GpuBackend::Ptr p : {dg, dpart, dnorm})
      gpu->free(p);
  }

  // The mean of the per-row losses: the block copies 2,048 at a time into
  // shared memory, thread 0 adds them in order: the serial sum, bit for bit
  // (none, a few, and several chunks with a short last one).
  for (int64_t m : {0, 3, 5000}) {
    std::vector<float> v(std::max<int64_t>(m, 1));
    for (float &e : v)
      e = std::ldexp(u(rng), static_cast<int>(rng() % 24) - 12);
    float s = 0.0f;
    for (int64_t e = 0; e < m; ++e)
      s += v[e];
    const float want = m ? s / static_cast<float>(m) : 0.0f;
    GpuBackend::Ptr dv = upload(v), dmean = gpu->alloc(4);
    const float *vp = reinterpret_cast<const float *>(dv);
    float *mp = reinterpret_cast<float *>(dmean);
    void *mean[] = {&m, &vp, &mp};
    gpu->launch(gpu->opsFunction("st_mean"), 1, 256, mean, 3, "st_mean");
    float got = -1;
    gpu->downloadSync(&got, dmean, 4);
    EXPECT_EQ(got, want) << "mean of " << m;
    gpu->free(dv);
    gpu->free(dmean);
  }

  // Cross-entropy with a block per row (a vocabulary of 300 and of 1000).
  for (int64_t c : {300, 1000}) {
    int64_t rows = 3;
    std::vector<float> logits(rows * c), tgt = {0, float(c - 1), float(c / 2)}, loss(rows);
    for (float &v : logits)
      v = 4 * u(rng);
    GpuBackend::Ptr dl = upload(logits), dt = upload(tgt), dloss = gpu->alloc(rows * 4);
    const float *lp = reinterpret_cast<const float *>(dl), *tp = reinterpret_cast<const float *>(dt);
    float *op = reinterpret_cast<float *>(dloss);
    void *ce[] = {&rows, &c, &lp, &tp, &op};
    gpu->launch(gpu->opsFunction("st_cross_entropy_block_rows"), static_cast<unsigned>(rows), 256,
                ce, 5, "st_cross_entropy_block_rows");
    gpu->downloadSync(loss.data(), dloss, rows * 4);
    for (int64_t r = 0; r < rows; ++r) {
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < c; ++j)
        mx = std::max(mx, double(logits[r * c + j]));
      for (int64_t j = 0; j < c; ++j)
        sum += std::exp(logits[r * c + j] - mx);
      double want = std::log(sum) + mx - logits[r * c + int64_t(tgt[r])];
      EXPECT_NEAR(loss[r], want, 1e-5 * (1 + std::fabs(want))) << "c=" << c << " row " << r;
    }
    gpu->free(dl);
    gpu->free(dt);
    gpu->free(dloss);
  }
}

// The CUDA runtime's half-warp row kernels (st_*_rows16: 16 threads a
// row, shuffles) as written, on the emulated GPU's block threads, give the
// thread-per-row kernels' values bit for bit (the reference's order, see
// KernelMath.inc): odd row counts (a warp's second half without a row),
// short and long rows, causal and not, CudaPlan.cpp's launch (256 threads,
// 16 per row) and one small block looping over the rows. The two-pass
// column sums (st_column_partials, st_column_combine) against f64.
TEST(PlanExecutor, CudaHalfWarpRowsOnTheEmulatedGpu) {
  std::unique_ptr<GpuBackend> gpu =
      emulatedGpu({}, "", /*blockReductions=*/true);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  auto upload = [&](const std::vector<float> &v) {
    GpuBackend::Ptr p = gpu->alloc(v.size() * 4);
    gpu->uploadAsync(p, v.data(), v.size() * 4);
    return p;
  };
  auto randomVec = [&](int64_t n) {
    std::vector<float> v(n);
    for (float &x : v)
      x = u(rng);
    return v;
  };
  auto fetch = [&](GpuBackend::Ptr p, int64_t n) {
    std::vector<float> v(n);
    gpu->downloadSync(v.data(), p, n * 4);
    return v;
  };
  auto f = [](GpuBackend::Ptr p) { return reinterpret_cast<float *>(p); };
  auto run = [&](const char *name, unsigned grid, unsigned block,
                 std::vector<void *> params) {
    gpu->launch(gpu->opsFunction(name), grid, block, params.data(),
                static_cast<int>(params.size()), name);
  };
  struct Case {
    int64_t rows, len;
    int causal;
  };
  for (Case c :
       {Case{5, 40, 1}, Case{3, 7, 0}, Case{4, 300, 0}, Case{33, 33, 1}}) {
    SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.len) +
                 (c.causal ? " causal" : ""));
    const int64_t n = c.rows * c.len;
    int64_t period = c.len;
    const unsigned full = static_cast<unsigned>((16 * c.rows + 255) / 256);
    for (auto [grid, block] :
         {std::pair<unsigned, unsigned>{full, 256}, {1, 64}}) {
      std::vector<float> x = randomVec(n), dy = randomVec(n),
                         gamma = randomVec(c.len), beta = randomVec(c.len);
      GpuBackend::Ptr dx = upload(x), ddy = upload(dy), dg = upload(gamma),
                      db = upload(beta);
      GpuBackend::Ptr y1 = gpu->alloc(n * 4), y2 = gpu->alloc(n * 4);
      GpuBackend::Ptr m1 = gpu->alloc(c.rows * 8), m2 = gpu->alloc(c.rows * 8);
      int64_t rows = c.rows, len = c.len;
      int causal = c.causal, centered = 1;
      float eps = 1e-5f, scale = 0.3f;
      const float *xp = f(dx), *dyp = f(ddy), *gp = f(dg), *bp = f(db);
      float *a = f(y1), *b = f(y2), *ma = f(m1), *mb = f(m2), *ra = ma + rows,
            *rb = mb + rows;
      auto same = [&](const char *what, GpuBackend::Ptr p, GpuBackend::Ptr q,
                      int64_t count) {
        std::vector<float> want = fetch(p, count), got = fetch(q, count);
        for (int64_t e = 0; e < count; ++e)
          ASSERT_EQ(std::memcmp(&want[e], &got[e], 4), 0)
              << what << " element " << e << ": " << want[e] << " vs "
              << got[e];
      };
      run("st_softmax_rows", 1, 1, {&rows, &len, &causal, &period, &xp, &a});
      run("st_softmax_rows16", grid, block,
          {&rows, &len, &causal, &period, &xp, &b});
      same("softmax", y1, y2, n);
      // In place, as attention runs it (S = softmax(S)).
      gpu->copyAsync(y2, dx, n * 4);
      const float *bIn = b;
      run("st_softmax_rows16", grid, block,
          {&rows, &len, &causal, &period, &bIn, &b});
      same("softmax in place", y1, y2, n);
      gpu->copyAsync(y1, ddy, n * 4);
      gpu->copyAsync(y2, ddy, n * 4);
      run("st_softmax_grad_rows", 1, 1,
          {&rows, &len, &causal, &period, &scale, &xp, &a});
      run("st_softmax_grad_rows16", grid, block,
          {&rows, &len, &causal, &period, &scale, &xp, &b});
      same("softmax grad", y1, y2, n);
      for (const float *bt : {bp, static_cast<const float *>(nullptr)}) {
        run("st_norm_rows", 1, 1, {&rows, &len, &eps, &xp, &gp, &bt, &a});
        run("st_norm_rows16", grid, block,
            {&rows, &len, &eps, &xp, &gp, &bt, &b});
        same(bt ? "layer norm" : "rms norm", y1, y2, n);
      }
      // (epi: RuntimeOps.cu's ST_NG_* epilogue, none, and rounded with
      // an addend, dy itself)
      for (int cent : {1, 0})
        for (int epi : {0, 1 | 2}) {
          centered = cent;
          const void *add = epi ? static_cast<const void *>(dyp) : nullptr;
          void *av = a, *bv = b;
          run("st_norm_grad_rows", 1, 1,
              {&rows, &len, &eps, &centered, &xp, &gp, &dyp, &epi, &add, &av, &ma, &ra});
          run("st_norm_grad_rows16", grid, block,
              {&rows, &len, &eps, &centered, &xp, &gp, &dyp, &epi, &add, &bv, &mb, &rb});
          same(cent ? "layer norm grad" : "rms norm grad", y1, y2, n);
          same("norm grad mean, rstd", m1, m2, 2 * rows);
        }
      for (GpuBackend::Ptr p : {dx, ddy, dg, db, y1, y2, m1, m2})
        gpu->free(p);
    }
  }
  // Column sums: [outer, nred, inner] -> [outer, inner] over 7 chunks.
  int64_t outer = 2, nred = 333, inner = 37, per = 48, chunks = 7;
  std::vector<float> x = randomVec(outer * nred * inner);
  GpuBackend::Ptr dx = upload(x), dp = gpu->alloc(outer * chunks * inner * 4),
                  dy = gpu->alloc(outer * inner * 4);
  const float *xp = f(dx), *pp = f(dp);
  float *part = f(dp), *yp = f(dy);
  run("st_column_partials", 3, 256,
      {&outer, &nred, &inner, &per, &chunks, &xp, &part});
  run("st_column_combine", 1, 32, {&outer, &chunks, &inner, &pp, &yp});
  std::vector<float> y = fetch(dy, outer * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double want = 0;
      for (int64_t r = 0; r < nred; ++r)
        want += x[(o * nred + r) * inner + j];
      EXPECT_NEAR(y[o * inner + j], want, 1e-5 * (1 + std::fabs(want)))
          << o << ", " << j;
    }
  // The same sums over bf16 values stored in two bytes (kernel-bf16-storage)
  // give the f32 kernels' sums of those values bit for bit; st_gather16
  // moves the bits as they are (a transpose), st_gather_wide widens them.
  std::vector<float> xb(x.size());
  std::vector<uint16_t> bits(x.size());
  for (size_t e = 0; e < x.size(); ++e) {
    xb[e] = roundToBF16(x[e]);
    uint32_t u;
    std::memcpy(&u, &xb[e], 4);
    bits[e] = static_cast<uint16_t>(u >> 16);
  }
  GpuBackend::Ptr d32 = upload(xb), d16 = gpu->alloc(bits.size() * 2),
                  dt16 = gpu->alloc(bits.size() * 2), dw = gpu->alloc(bits.size() * 4),
                  y32 = gpu->alloc(outer * inner * 4), y16 = gpu->alloc(outer * inner * 4);
  gpu->uploadAsync(d16, bits.data(), bits.size() * 2);
  const void *x32 = f(d32), *x16 = reinterpret_cast<const void *>(d16);
  float *o32 = f(y32), *o16 = f(y16);
  auto sameFloats = [&](const char *what, GpuBackend::Ptr p, GpuBackend::Ptr q, int64_t count) {
    std::vector<float> want = fetch(p, count), got = fetch(q, count);
    for (int64_t e = 0; e < count; ++e)
      ASSERT_EQ(std::memcmp(&want[e], &got[e], 4), 0) << what << " element " << e;
  };
  run("st_column_partials", 3, 256, {&outer, &nred, &inner, &per, &chunks, &x32, &part});
  run("st_column_combine", 1, 32, {&outer, &chunks, &inner, &pp, &o32});
  run("st_column_partials16", 3, 256, {&outer, &nred, &inner, &per, &chunks, &x16, &part});
  run("st_column_combine", 1, 32, {&outer, &chunks, &inner, &pp, &o16});
  sameFloats("bf16 column partials", y32, y16, outer * inner);
  run("st_column_sums", 2, 32, {&outer, &nred, &inner, &x32, &o32});
  run("st_column_sums16", 2, 32, {&outer, &nred, &inner, &x16, &o16});
  sameFloats("bf16 column sums", y32, y16, outer * inner);
  // [outer, nred, inner] -> [inner, outer, nred] and back to floats.
  struct Space { // RuntimeOps.cu's StSpace
    int rank = 0;
    int64_t dims[8] = {}, a[8] = {}, b[8] = {};
  } tr, flat;
  tr.rank = 3;
  const int64_t trDims[3] = {inner, outer, nred}, trStrides[3] = {1, nred * inner, inner};
  for (int d = 0; d < 3; ++d)
    tr.dims[d] = trDims[d], tr.a[d] = trStrides[d];
  int64_t total = outer * nred * inner, base = 0;
  void *t16 = reinterpret_cast<void *>(dt16);
  const void *t16in = t16;
  float *wide = f(dw);
  run("st_gather16", 4, 256, {&total, &x16, &base, &t16, &tr});
  run("st_gather_wide", 4, 256, {&total, &t16in, &base, &wide, &flat});
  std::vector<float> back = fetch(dw, total);
  for (int64_t j = 0; j < inner; ++j)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < nred; ++r)
        ASSERT_EQ(back[(j * outer + o) * nred + r], xb[(o * nred + r) * inner + j])
            << j << ", " << o << ", " << r;
  for (GpuBackend::Ptr p : {dx, dp, dy, d32, d16, dt16, dw, y32, y16})
    gpu->free(p);
}

// The CUDA runtime's fused attention (st_flash_*: online softmax, no T x T
// matrix) as launched by CudaPlan.cpp, on the emulated GPU, against the
// attention forward and backward in f64 (S = scale Q K^T, causal rows see
// keys 0..i, P = softmax(S), O = P V; dP = G V^T, dS = P (dP - rowsum(P
// dP)) scale, dQ = dS K, dK = dS^T Q, dV = P^T G) at T = 64, 256 and 1024.
// One attention case on an emulated GPU's fused kernels: forward, dQ, then
// dK and dV, against f64. `tensorCores`: st_flash_mma_* (warp tiles) instead
// of st_flash_*; `bf16Inputs`: q, k, v and g rounded to bf16 first (the
// tensor-core kernels then skip the split parts, all zero). Outputs start
// as NaN, so an element no kernel writes fails. `packed` (tensor cores
// only): q, k, v in kernel-attention-layout's [1, T, 3, H, D] with H the
// case's batch, g and o [1, T, H, D], dq, dk, dv the parts of
// [1, T, 3, H, D]: the kernels read and write the heads in place (StRows).
struct AttentionCase {
  int64_t batch, t, d;
  int causal;
};
struct TestStRows { // RuntimeOps.cu's StRows
  int64_t sb, sh, st;
};
void checkFusedAttention(GpuBackend &gpu, AttentionCase c, bool tensorCores, bool bf16Inputs,
                         uint32_t seed, bool packed = false, bool roundPdS = false) {
  SCOPED_TRACE("batch " + std::to_string(c.batch) + ", T " + std::to_string(c.t) + ", D " +
               std::to_string(c.d) + (c.causal ? ", causal" : "") +
               (tensorCores ? ", tensor cores" : "") + (bf16Inputs ? ", bf16 inputs" : "") +
               (packed ? ", packed" : "") + (roundPdS ? ", P and dS rounded" : ""));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t t = c.t, d = c.d, rows = c.batch * t, n = rows * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> q(n), k(n), v(n), g(n);
  for (auto *x : {&q, &k, &v, &g})
    for (float &e : *x)
      e = bf16Inputs ? roundToBF16(2 * u(rng)) : 2 * u(rng);
  // f64 reference; oR, dqR, dkR, dvR with P and dS rounded to bf16 before
  // their products (train.attention's and attention_grad's `bf16`): the
  // forward's weights 32 keys at a time against the running max, rescaled
  // to the last one.
  std::vector<double> o(n, 0), dq(n, 0), dk(n, 0), dv(n, 0), oR(n, 0), dqR(n, 0), dkR(n, 0),
      dvR(n, 0);
  auto bf = [](double x) { return double(roundToBF16(float(x))); };
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < t; ++i) {
      const int64_t r = b * t + i, end = c.causal ? i + 1 : t;
      std::vector<double> p(end), dp(end);
      double mx = -1e300, sum = 0, inner = 0;
      for (int64_t j = 0; j < end; ++j) {
        double s = 0, gv = 0;
        for (int64_t e = 0; e < d; ++e) {
          s += double(q[r * d + e]) * k[(b * t + j) * d + e];
          gv += double(g[r * d + e]) * v[(b * t + j) * d + e];
        }
        p[j] = s * scale;
        dp[j] = gv;
        mx = std::max(mx, p[j]);
      }
      {
        std::vector<double> w(end);
        double run = -1e300, l = 0;
        std::vector<double> top(end);
        for (int64_t j = 0; j < end; ++j) { // (the running max of j's chunk)
          if (j % 32 == 0)
            for (int64_t u = j; u < std::min(end, j + 32); ++u)
              run = std::max(run, p[u]);
          top[j] = run;
        }
        for (int64_t j = 0; j < end; ++j) {
          const double e = std::exp(p[j] - top[j]), f = std::exp(top[j] - run);
          l += e * f;
          w[j] = bf(e) * f;
        }
        for (int64_t j = 0; j < end; ++j)
          for (int64_t e = 0; e < d; ++e)
            oR[r * d + e] += w[j] / l * v[(b * t + j) * d + e];
      }
      for (int64_t j = 0; j < end; ++j)
        sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t j = 0; j < end; ++j)
        inner += (p[j] /= sum) * dp[j];
      for (int64_t j = 0; j < end; ++j) {
        const double ds = p[j] * (dp[j] - inner) * scale, dsR = bf(ds), pR = bf(p[j]);
        for (int64_t e = 0; e < d; ++e) {
          const int64_t kj = (b * t + j) * d + e;
          o[r * d + e] += p[j] * v[kj];
          dq[r * d + e] += ds * k[kj];
          dk[kj] += ds * q[r * d + e];
          dv[kj] += p[j] * g[r * d + e];
          dqR[r * d + e] += dsR * k[kj];
          dkR[kj] += dsR * q[r * d + e];
          dvR[kj] += pR * g[r * d + e];
        }
      }
    }
  auto upload = [&](const std::vector<float> &x) {
    GpuBackend::Ptr p = gpu.alloc(x.size() * 4);
    gpu.uploadAsync(p, x.data(), x.size() * 4);
    return p;
  };
  // bf16 inputs reach the tensor-core kernels in two bytes (their bits),
  // as kernel-bf16-storage stores them.
  const bool twoBytes = tensorCores && bf16Inputs;
  auto uploadIn = [&](const std::vector<float> &x) {
    if (!twoBytes)
      return upload(x);
    std::vector<uint16_t> bits(x.size());
    for (size_t e = 0; e < x.size(); ++e) {
      uint32_t u;
      std::memcpy(&u, &x[e], 4);
      bits[e] = static_cast<uint16_t>(u >> 16); // (exact: x is bf16)
    }
    GpuBackend::Ptr p = gpu.alloc(bits.size() * 2);
    gpu.uploadAsync(p, bits.data(), bits.size() * 2);
    return p;
  };
  const std::vector<float> nan(3 * n, std::numeric_limits<float>::quiet_NaN());
  // Element (b, i, e) of part `part` of a [1, T, parts, H = batch, D] tensor.
  const int64_t hd = c.batch * d;
  auto packedAt = [&](int64_t parts, int64_t part, int64_t b, int64_t i, int64_t e) {
    return (i * parts + part) * hd + b * d + e;
  };
  auto pack = [&](std::vector<const std::vector<float> *> parts) {
    std::vector<float> x(parts.size() * n);
    for (size_t part = 0; part < parts.size(); ++part)
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t i = 0; i < t; ++i)
          for (int64_t e = 0; e < d; ++e)
            x[packedAt(int64_t(parts.size()), int64_t(part), b, i, e)] =
                (*parts[part])[(b * t + i) * d + e];
    return x;
  };
  GpuBackend::Ptr dQ = uploadIn(packed ? pack({&q, &k, &v}) : q), dK = uploadIn(k),
                  dV = uploadIn(v), dG = uploadIn(packed ? pack({&g}) : g);
  GpuBackend::Ptr out = upload(std::vector<float>(nan.begin(), nan.begin() + n)),
                  grads = upload(nan), stats = gpu.alloc(3 * rows * 4);
  int64_t rowsArg = tensorCores ? c.batch : rows, tq = t, tk = t;
  int causal = c.causal;
  float sc = scale;
  // (a packed part starts hd elements after the one before: two bytes or four)
  auto part = [&](GpuBackend::Ptr base, int64_t p) {
    return twoBytes ? reinterpret_cast<const float *>(reinterpret_cast<uint16_t *>(base) + p * hd)
                    : reinterpret_cast<const float *>(base) + p * hd;
  };
  const float *qp = reinterpret_cast<const float *>(dQ),
              *kp = packed ? part(dQ, 1) : reinterpret_cast<const float *>(dK),
              *vp = packed ? part(dQ, 2) : reinterpret_cast<const float *>(dV),
              *gp = reinterpret_cast<const float *>(dG);
  float *op = reinterpret_cast<float *>(out), *gr = reinterpret_cast<float *>(grads),
        *st = reinterpret_cast<float *>(stats);
  float *gk = gr + (packed ? hd : n), *gv = gr + 2 * (packed ? hd : n);
  int64_t heads = packed ? c.batch : 1;
  TestStRows rq = packed ? TestStRows{t * 3 * hd, d, 3 * hd} : TestStRows{t * d, 0, d};
  TestStRows ro = packed ? TestStRows{t * hd, d, hd} : TestStRows{t * d, 0, d};
  const float *stc = st;
  const std::string prefix = tensorCores ? "st_flash_mma_" : "st_flash_",
                    suffix = "_d" + std::to_string(d);
  auto run = [&](const std::string &pass, std::vector<void *> params) {
    const std::string name = prefix + pass + suffix;
    void *fn = gpu.opsFunction(name);
    ASSERT_NE(fn, nullptr) << name;
    // (tensor cores: a warp per 16 rows; 2 blocks of 2 warps walk the
    // tiles in turn, as a grid smaller than the tiles does; few threads, as
    // the emulated warps exchange fragments through barriers)
    const unsigned grid = tensorCores ? 2u : static_cast<unsigned>((rows + 255) / 256);
    gpu.launch(fn, grid, tensorCores ? 64 : 256, params.data(), static_cast<int>(params.size()),
               name.c_str());
  };
  // (the tensor-core kernels' q, k, v, g bits, and P and dS rounded: 64)
  int halves = (twoBytes ? 15 : 0) | (roundPdS ? 64 : 0), rounds = roundPdS ? 1 : 0;
  if (tensorCores) {
    run("fwd",
        {&rowsArg, &tq, &tk, &causal, &sc, &heads, &rq, &rq, &ro, &qp, &kp, &vp, &halves, &op});
    run("bwd_q", {&rowsArg, &tq, &tk, &causal, &sc, &heads, &rq, &rq, &ro, &qp, &kp, &vp, &gp,
                  &halves, &gr, &st});
    run("bwd_kv", {&rowsArg, &tq, &tk, &causal, &sc, &heads, &rq, &rq, &ro, &qp, &kp, &vp, &gp,
                   &halves, &stc, &gk, &gv});
  } else {
    run("fwd", {&rowsArg, &tq, &tk, &causal, &sc, &qp, &kp, &vp, &op, &rounds});
    run("bwd_q", {&rowsArg, &tq, &tk, &causal, &sc, &qp, &kp, &vp, &gp, &gr, &st, &rounds});
    run("bwd_kv", {&rowsArg, &tq, &tk, &causal, &sc, &qp, &kp, &vp, &gp, &stc, &gk, &gv, &rounds});
  }
  std::vector<float> got(n), gotGrads(3 * n);
  gpu.downloadSync(got.data(), out, n * 4);
  gpu.downloadSync(gotGrads.data(), grads, 3 * n * 4);
  if (packed) { // (back to [batch, T, D] each)
    const std::vector<float> o1 = got, g3 = gotGrads;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t i = 0; i < t; ++i)
        for (int64_t e = 0; e < d; ++e) {
          got[(b * t + i) * d + e] = o1[packedAt(1, 0, b, i, e)];
          for (int64_t p = 0; p < 3; ++p)
            gotGrads[p * n + (b * t + i) * d + e] = g3[packedAt(3, p, b, i, e)];
        }
  }
  // Each tensor within 1e-5 of its largest magnitude (f32 sums of up to
  // 1024 terms in another order than the f64 reference's; the tensor
  // cores' split products leave out terms below 2^-24 of each product).
  auto close = [&](const char *what, const float *x, const std::vector<double> &want) {
    double big = 1e-30, worst = 0;
    for (int64_t e = 0; e < n; ++e)
      big = std::max(big, std::fabs(want[e]));
    for (int64_t e = 0; e < n; ++e)
      worst = std::isnan(x[e]) ? INFINITY : std::max(worst, std::fabs(x[e] - want[e]));
    EXPECT_LE(worst, 1e-5 * big) << what << ": largest difference " << worst << " of " << big;
  };
  if (!roundPdS) {
    close("O", got.data(), o);
    close("dQ", gotGrads.data(), dq);
    close("dK", gotGrads.data() + n, dk);
    close("dV", gotGrads.data() + 2 * n, dv);
  } else {
    // P and dS rounded to bf16: where the kernel's f32 P or dS and the
    // reference's f64 one round to neighbouring bf16 values a term moves by
    // 2^-8 of itself (rare), so O and each gradient are compared in
    // relative L2:
    // within 1e-4 of the rounded reference, and at least ten times closer
    // to it than to the unrounded one (the roundings are there).
    auto gap = [&](const float *x, const std::vector<double> &want) {
      double dd = 0, ww = 0;
      for (int64_t e = 0; e < n; ++e)
        dd += (x[e] - want[e]) * (x[e] - want[e]), ww += want[e] * want[e];
      return std::isnan(dd) ? INFINITY : std::sqrt(dd / std::max(ww, 1e-300));
    };
    const char *names[4] = {"O", "dQ", "dK", "dV"};
    const std::vector<double> *rounded[4] = {&oR, &dqR, &dkR, &dvR},
                              *exact[4] = {&o, &dq, &dk, &dv};
    for (int part = 0; part < 4; ++part) {
      const float *x = part == 0 ? got.data() : gotGrads.data() + (part - 1) * n;
      const double toRounded = gap(x, *rounded[part]), toExact = gap(x, *exact[part]);
      EXPECT_LE(toRounded, 1e-4) << names[part];
      EXPECT_GE(toExact, 10 * toRounded) << names[part] << ": P and dS not rounded?";
    }
  }
  for (GpuBackend::Ptr p : {dQ, dK, dV, dG, out, grads, stats})
    gpu.free(p);
}

TEST(PlanExecutor, CudaFusedAttentionOnTheEmulatedGpu) {
  std::unique_ptr<GpuBackend> gpu = emulatedGpu({}, "");
  uint32_t seed = 3;
  for (AttentionCase c : {AttentionCase{3, 64, 16, 1}, AttentionCase{2, 64, 8, 0},
                          AttentionCase{2, 256, 64, 1}, AttentionCase{1, 1024, 32, 1}})
    checkFusedAttention(*gpu, c, false, false, seed++);
}

// The tensor-core kernels (RuntimeOps.cu's st_flash_mma_*), their mma.sync
// emulated warp by warp from the PTX ISA's fragment layout: f32 accuracy
// from split bf16 parts, at sizes that are and are not multiples of the
// 16-row warp tiles and 32-row steps, causal and not, and on bf16 inputs
// (the parts skipped), read in two bytes. T = 1024 is left to a GPU (the
// emulated warps are slow).
TEST(PlanExecutor, CudaTensorCoreAttentionOnTheEmulatedGpu) {
  std::unique_ptr<GpuBackend> gpu = emulatedGpu({}, "");
  uint32_t seed = 11;
  for (AttentionCase c : {AttentionCase{2, 64, 16, 1}, AttentionCase{2, 40, 32, 0},
                          AttentionCase{1, 37, 16, 1}, AttentionCase{1, 160, 64, 1}})
    checkFusedAttention(*gpu, c, true, false, seed++);
  checkFusedAttention(*gpu, AttentionCase{1, 96, 64, 1}, true, true, seed++);
  // Heads read and written in place (kernel-attention-layout), in four
  // bytes and in two.
  checkFusedAttention(*gpu, AttentionCase{3, 37, 16, 1}, true, false, seed++, true);
  checkFusedAttention(*gpu, AttentionCase{2, 40, 32, 0}, true, false, seed++, true);
  checkFusedAttention(*gpu, AttentionCase{2, 70, 64, 1}, true, true, seed++, true);
}

// train.attention's and attention_grad's `bf16` (a bf16 plan's): the fused
// kernels, on tensor cores and on CUDA cores, multiply P (the forward's 32
// keys at a time) and dS rounded to bf16 (one tensor-core product each
// instead of three), as the f64 reference with those roundings does.
TEST(PlanExecutor, CudaAttentionRoundsPAndDSWhereTheNodeSays) {
  std::unique_ptr<GpuBackend> gpu = emulatedGpu({}, "");
  uint32_t seed = 31;
  checkFusedAttention(*gpu, AttentionCase{2, 64, 16, 1}, true, true, seed++, false, true);
  checkFusedAttention(*gpu, AttentionCase{1, 96, 64, 0}, true, true, seed++, false, true);
  checkFusedAttention(*gpu, AttentionCase{2, 40, 32, 1}, true, true, seed++, true, true);
  checkFusedAttention(*gpu, AttentionCase{2, 64, 8, 1}, false, true, seed++, false, true);
  checkFusedAttention(*gpu, AttentionCase{1, 80, 32, 0}, false, true, seed++, false, true);
}

// A value stored in bf16 in two bytes (a GPU's store_bf16 GEMM result) may
// be read only by ops that read bf16 (kernel-bf16-storage's list): a
// leading-row slice is a view of it, a slice of inner rows and a softmax
// are refused when the executor is made, naming the op and the value.
TEST(PlanExecutor, OnlyBf16ReadersReadTwoByteValues) {
  struct Case {
    OpKind reader;
    int64_t axis;
    const char *error; // "" where the plan is fine
  };
  for (Case c : {Case{OpKind::Slice, 0, ""}, Case{OpKind::Slice, 1, "a slice of inner rows"},
                 Case{OpKind::Softmax, 0, "softmax reads node 2, a value stored in bf16"}}) {
    Builder b;
    int x = b.input("x", {4, 8}), w = b.input("w", {8, 6});
    int y = b.node(OpKind::Gemm, {x, w}, {4, 6}, {0, 0});
    b.g.nodes[y].dtype = DType::BF16; // store_bf16: two bytes on the GPU
    int r = c.reader == OpKind::Slice
                ? b.node(OpKind::Slice, {y}, c.axis == 0 ? Shape{2, 6} : Shape{4, 3}, {c.axis, 1})
                : b.node(OpKind::Softmax, {y}, {4, 6});
    int t = b.node(OpKind::Transpose, {r}, {b.g.nodes[r].shape[1], b.g.nodes[r].shape[0]}, {1, 0});
    int z = b.node(OpKind::Gemm, {t, r}, {b.g.nodes[r].shape[1], b.g.nodes[r].shape[1]}, {0, 0});
    b.yieldSum(z);
    SCOPED_TRACE(opKindName(c.reader) + std::string(" axis ") + std::to_string(c.axis));
    // (the generated CUDA C's presence makes the emulated GPU store two bytes)
    try {
      auto e = emulatedGpuExecutor(b.g, {}, GemmPrecision::BF16Operands, "// no kernels\n");
      EXPECT_STREQ(c.error, "") << "planned";
    } catch (const std::exception &e) {
      EXPECT_NE(std::string(c.error), "");
      EXPECT_NE(std::string(e.what()).find(c.error), std::string::npos) << e.what();
    }
  }
}

TEST(PlanExecutor, RejectsWhatItCannotRun) {
  Graph g = statefulGraph();
  g.states[1].dtype = DType::F64;
  std::string why;
  EXPECT_FALSE(PlanExecutor::supports(g, why));
  EXPECT_NE(why.find("state 'a' is f64"), std::string::npos) << why;
  EXPECT_THROW(PlanExecutor(g, {}), std::runtime_error);

  Graph k = statefulGraph();
  k.nodes[2].kind = OpKind::Kernel; // the matmul, now an unprovided kernel
  k.nodes[2].name = "missing_k0";
  try {
    PlanExecutor p(k, {});
    FAIL() << "a kernel without a function was accepted";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("compiled kernel 'missing_k0' was not provided"),
              std::string::npos)
        << e.what();
  }
}

} // namespace
