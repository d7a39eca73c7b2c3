//===- RefExecutorTest.cpp - tests of the numerical oracle ----------------===//
//
// Every expectation here is derived by hand or by an independent route (a
// composition of other ops, an eigen-decomposition), never by re-running the
// executor's own loop.
//
//===----------------------------------------------------------------------===//

#include "stretto/Runtime/Graph.h"
#include "stretto/Runtime/RefExecutor.h"

#include "JacobiEigen.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace stretto;

namespace {

using Vec = std::vector<double>;

Node mk(OpKind k, std::vector<int> ops, Shape shape, DType dt = DType::F32) {
  Node n;
  n.kind = k;
  n.operands = std::move(ops);
  n.shape = std::move(shape);
  n.dtype = dt;
  n.loc = "test.mlir:1:1";
  return n;
}

int constant(Graph &g, Shape shape, Vec data, DType dt = DType::F32) {
  Node n = mk(OpKind::Constant, {}, std::move(shape), dt);
  n.data = std::move(data);
  return g.add(n);
}

int input(Graph &g, const std::string &name, Shape shape,
          DType dt = DType::F32) {
  Node n = mk(OpKind::Input, {}, std::move(shape), dt);
  n.name = name;
  return g.add(n);
}

int grad(Graph &g, const std::string &name, int v) {
  Node n = mk(OpKind::Grad, {v}, {});
  n.name = name;
  return g.add(n);
}

// Evaluates `g` with node `v` exposed through a Grad sink named "out".
HostTensor eval(Graph g, int v, const std::map<std::string, HostTensor> &in = {},
                Precision p = Precision::F64) {
  grad(g, "out", v);
  RefExecutor ex(g, p);
  StepResult r = ex.evaluate(in);
  return r.grads.at("out");
}

void expectVec(const Vec &got, const Vec &want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol) << "at element " << i;
}

Vec randomVec(size_t n, unsigned seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  Vec v(n);
  for (double &x : v)
    x = d(rng);
  return v;
}

using stretto::test::jacobiEigenvalues; // JacobiEigen.h

float bitsToFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

} // namespace

// Graph helpers and validation

TEST(Graph, ShapeHelpers) {
  EXPECT_EQ(numElements({}), 1);
  EXPECT_EQ(numElements({2, 3, 4}), 24);
  EXPECT_EQ(numElements({5, 0}), 0);
  EXPECT_EQ(shapeToString({}), "[]");
  EXPECT_EQ(shapeToString({2, 3}), "[2, 3]");
  EXPECT_STREQ(dtypeName(DType::BF16), "bf16");
  EXPECT_STREQ(dtypeName(DType::I32), "i32");
}

TEST(Graph, OpNamesAreSnakeCase) {
  EXPECT_STREQ(opKindName(OpKind::Add), "add");
  EXPECT_STREQ(opKindName(OpKind::Matmul), "matmul");
  EXPECT_STREQ(opKindName(OpKind::LayerNorm), "layer_norm");
  EXPECT_STREQ(opKindName(OpKind::RmsNorm), "rms_norm");
  EXPECT_STREQ(opKindName(OpKind::CrossEntropy), "cross_entropy");
  EXPECT_STREQ(opKindName(OpKind::ScatterRows), "scatter_rows");
  EXPECT_STREQ(opKindName(OpKind::OneHot), "one_hot");
  EXPECT_STREQ(opKindName(OpKind::NewtonSchulz), "newton_schulz");
  EXPECT_STREQ(opKindName(OpKind::StepCount), "step_count");
  EXPECT_STREQ(opKindName(OpKind::ReduceSum), "reduce_sum");
  EXPECT_STREQ(opKindName(OpKind::Rsqrt), "rsqrt");
}

TEST(Graph, FindState) {
  Graph g;
  g.states.push_back({"w", {2}, DType::F32, InitKind::Ones, 0, true});
  ASSERT_NE(g.findState("w"), nullptr);
  EXPECT_EQ(g.findState("w")->shape, Shape({2}));
  EXPECT_EQ(g.findState("v"), nullptr);
}

TEST(Graph, ValidateRejectsForwardReference) {
  Graph g;
  g.add(mk(OpKind::Neg, {1}, {2}));
  g.add(mk(OpKind::Constant, {}, {2}));
  EXPECT_THROW(g.validate(), std::runtime_error);
}

TEST(Graph, ValidateRejectsWrongArity) {
  Graph g;
  int a = constant(g, {2}, {1});
  g.add(mk(OpKind::Add, {a}, {2}));
  EXPECT_THROW(g.validate(), std::runtime_error);
}

TEST(Graph, ValidateMatmulMessageNamesNodeAndLoc) {
  Graph g;
  int a = constant(g, {2, 3}, {1});
  int b = constant(g, {4, 2}, {1});
  Node m = mk(OpKind::Matmul, {a, b}, {2, 2});
  m.loc = "model.py:7:3";
  g.add(m);
  try {
    g.validate();
    FAIL() << "expected a throw";
  } catch (const std::runtime_error &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.py:7:3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("node 2"), std::string::npos) << msg;
  }
}

// kernel-attention-layout's packed forms: attention of one qkv
// [B, T, 3, H, D] -> [B, T, H, D], its gradient of qkv and g [B, T, H, D]
// -> [B, T, 3, H, D]; anything else is refused with the node named.
// Graph::validate's message for `g`, or "" where it passes.
static std::string validationError(const Graph &g) {
  try {
    g.validate();
    return "";
  } catch (const std::runtime_error &e) {
    return e.what();
  }
}

// newton_schulz of one matrix [m, n] -> [m, n], or a batch of k >= 2
// matrices of one shape -> [k, m, n]; anything else is refused.
TEST(Graph, ValidateNewtonSchulzBatches) {
  auto ns = [](std::vector<Shape> in, Shape out) {
    Graph g;
    std::vector<int> ops;
    for (const Shape &s : in)
      ops.push_back(constant(g, s, {1}));
    Node n = mk(OpKind::NewtonSchulz, ops, out);
    n.ints = {5};
    n.floats = {3.4445, -4.7750, 2.0315};
    g.add(n);
    return validationError(g);
  };
  EXPECT_EQ(ns({{4, 6}}, {4, 6}), "");
  EXPECT_EQ(ns({{4, 6}, {4, 6}, {4, 6}}, {3, 4, 6}), "");
  EXPECT_NE(ns({{4, 6}, {6, 4}}, {2, 4, 6})
                .find("a batch needs matrices of one shape: operand 1 is "
                      "[6, 4], operand 0 [4, 6]"),
            std::string::npos)
      << ns({{4, 6}, {6, 4}}, {2, 4, 6});
  EXPECT_NE(ns({{4, 6}, {4, 6}}, {4, 6}).find("expected [2, 4, 6]"), std::string::npos)
      << ns({{4, 6}, {4, 6}}, {4, 6});
  EXPECT_NE(ns({{2, 4, 6}}, {2, 4, 6}).find("operand must be a matrix"), std::string::npos);
}

// norm_grad: x, gamma, dy, and an addend of x's shape where there is one
// (kernel-norm-grad-epilogue).
TEST(Graph, ValidateNormGradAddend) {
  auto grad = [](std::vector<Shape> in) {
    Graph g;
    std::vector<int> ops;
    for (const Shape &s : in)
      ops.push_back(constant(g, s, {1}));
    Node n = mk(OpKind::NormGrad, ops, {6, 8});
    n.floats = {1e-5};
    n.flag = true;
    g.add(n);
    return validationError(g);
  };
  EXPECT_EQ(grad({{4, 8}, {8}, {4, 8}}), "");
  EXPECT_EQ(grad({{4, 8}, {8}, {4, 8}, {4, 8}}), "");
  EXPECT_NE(grad({{4, 8}, {8}, {4, 8}, {8}}).find("addend [8] and x [4, 8] must share one shape"),
            std::string::npos)
      << grad({{4, 8}, {8}, {4, 8}, {8}});
  EXPECT_NE(grad({{4, 8}, {8}}).find("expects 3 operands (x, gamma, dy) or 4"), std::string::npos)
      << grad({{4, 8}, {8}});
}

TEST(Graph, ValidatePackedAttention) {
  auto attention = [](Shape qkv, Shape out, Shape grad) {
    Graph g;
    int x = constant(g, qkv, {1});
    std::vector<int> ops{x};
    if (!grad.empty())
      ops.push_back(constant(g, grad, {1}));
    Node n = mk(grad.empty() ? OpKind::Attention : OpKind::AttentionGrad, ops, out);
    n.floats = {0.5};
    g.add(n);
    return validationError(g);
  };
  EXPECT_EQ(attention({2, 8, 3, 2, 4}, {2, 8, 2, 4}, {}), "");
  EXPECT_EQ(attention({2, 8, 3, 2, 4}, {2, 8, 3, 2, 4}, {2, 8, 2, 4}), "");
  EXPECT_NE(attention({2, 8, 2, 2, 4}, {2, 8, 2, 4}, {}).find("must be [B, T, 3, H, D]"),
            std::string::npos);
  EXPECT_NE(attention({2, 8, 3, 2, 4}, {2, 2, 8, 4}, {}).find("node 1"), std::string::npos);
  EXPECT_NE(attention({2, 8, 3, 2, 4}, {2, 8, 3, 2, 4}, {2, 2, 8, 4})
                .find("grad [2, 2, 8, 4] must be [2, 8, 2, 4]"),
            std::string::npos)
      << attention({2, 8, 3, 2, 4}, {2, 8, 3, 2, 4}, {2, 2, 8, 4});
  EXPECT_NE(attention({2, 0, 3, 2, 4}, {2, 0, 2, 4}, {}).find("at least one query"),
            std::string::npos);
  // attention_grad's ints: none, or {1} (P and dS rounded to bf16) or {0}.
  auto rounding = [](std::vector<int64_t> ints) {
    Graph g;
    int x = constant(g, {2, 8, 3, 2, 4}, {1}), gr = constant(g, {2, 8, 2, 4}, {1});
    Node n = mk(OpKind::AttentionGrad, {x, gr}, {2, 8, 3, 2, 4});
    n.floats = {0.5};
    n.ints = std::move(ints);
    g.add(n);
    return validationError(g);
  };
  EXPECT_EQ(rounding({1}), "");
  EXPECT_EQ(rounding({0}), "");
  EXPECT_NE(rounding({2}).find("ints must be {} or {0|1}"), std::string::npos) << rounding({2});
  EXPECT_NE(rounding({1, 1}).find("ints must be {} or {0|1}"), std::string::npos);
}

// A Gemm node's epilogues (GemmEpilogue): a bias [N], DGELU's x of the
// result's shape (ints {.., 1}), the bias gradient's extra row (ints
// {.., 2}, two operands, b not transposed); anything else is refused.
TEST(Graph, ValidateGemmEpilogues) {
  auto gemm = [](Shape a, Shape b, std::vector<Shape> third, Shape out, std::vector<int64_t> ints) {
    Graph g;
    std::vector<int> ops{constant(g, a, {1}), constant(g, b, {1})};
    for (const Shape &t : third)
      ops.push_back(constant(g, t, {1}));
    Node n = mk(OpKind::Gemm, ops, out);
    n.ints = std::move(ints);
    g.add(n);
    return validationError(g);
  };
  EXPECT_EQ(gemm({4, 3}, {3, 5}, {{5}}, {4, 5}, {0, 0}), "");
  EXPECT_EQ(gemm({4, 3}, {3, 5}, {{4, 5}}, {4, 5}, {0, 0, 1}), "");
  EXPECT_EQ(gemm({6, 3}, {6, 5}, {}, {4, 5}, {1, 0, 2}), "");
  EXPECT_NE(gemm({4, 3}, {3, 5}, {{4, 3}}, {4, 5}, {0, 0, 1}).find("DGELU's x of shape [4, 3]"),
            std::string::npos);
  EXPECT_NE(gemm({4, 3}, {3, 5}, {{4, 5}}, {4, 5}, {0, 0, 2}).find("ints are"), std::string::npos);
  EXPECT_NE(gemm({4, 3}, {3, 5}, {}, {4, 5}, {0, 0, 1}).find("ints are"), std::string::npos);
  EXPECT_NE(gemm({6, 3}, {5, 6}, {}, {4, 5}, {1, 1, 2}).find("b not transposed"),
            std::string::npos);
  // GELU with its auxiliary output: [2, ...product], a bias or none.
  EXPECT_EQ(gemm({4, 3}, {3, 5}, {{5}}, {2, 4, 5}, {0, 0, 3}), "");
  EXPECT_EQ(gemm({4, 3}, {3, 5}, {}, {2, 4, 5}, {0, 0, 3}), "");
  EXPECT_NE(gemm({4, 3}, {3, 5}, {}, {4, 5}, {0, 0, 3}).find("[2, ...product]"), std::string::npos);
  EXPECT_NE(gemm({4, 3}, {3, 5}, {}, {2, 5, 4}, {0, 0, 3}).find("[2, ...product]"),
            std::string::npos);
  EXPECT_NE(gemm({4, 3}, {3, 5}, {{4}}, {2, 4, 5}, {0, 0, 3}).find("bias of shape [4]"),
            std::string::npos);
}

TEST(Graph, ValidateBroadcast) {
  Graph ok;
  int a = constant(ok, {2, 3}, {1});
  int b = constant(ok, {3}, {1});
  ok.add(mk(OpKind::Add, {a, b}, {2, 3}));
  EXPECT_NO_THROW(ok.validate());

  Graph bad;
  a = constant(bad, {2, 3}, {1});
  b = constant(bad, {2}, {1});
  bad.add(mk(OpKind::Add, {a, b}, {2, 3}));
  EXPECT_THROW(bad.validate(), std::runtime_error);
}

// A compiled GEMM takes an optional bias (kernel-gemm-epilogue): one value
// per result column, added to every row of the product before the result
// is rounded (a bf16 result: the sum rounded once). A bias of another
// length, or a fourth operand, is refused naming the node.
TEST(Graph, GemmBiasIsAddedToEveryRowBeforeRounding) {
  auto gemm = [](Graph &g, std::vector<int> ops, Shape shape, DType dt = DType::F32) {
    Node n = mk(OpKind::Gemm, std::move(ops), std::move(shape), dt);
    n.ints = {0, 0};
    n.floats = {1.0};
    return g.add(n);
  };
  {
    Graph g;
    int a = constant(g, {2, 3}, {1, 2, 3, 4, 5, 6});
    int b = constant(g, {3, 2}, {1, 0, 0, 1, 1, 1});
    int c = constant(g, {2}, {0.5, -1});
    int y = gemm(g, {a, b, c}, {2, 2});
    EXPECT_NO_THROW(g.validate());
    expectVec(eval(g, y).data, {4.5, 4, 10.5, 10});
  }
  {
    // 256 + 1 rounds to 256 in bf16 and 256 + 1 + 1 to 258: the product
    // 257 is not rounded before the bias is added.
    Graph g;
    int a = constant(g, {1, 1}, {257});
    int b = constant(g, {1, 1}, {1});
    int c = constant(g, {1}, {1});
    int y = gemm(g, {a, b, c}, {1, 1}, DType::BF16);
    expectVec(eval(g, y, {}, Precision::F32).data, {258});
  }
  for (Shape bias : {Shape{3}, Shape{1, 2}}) {
    Graph g;
    int a = constant(g, {2, 3}, {1});
    int b = constant(g, {3, 2}, {1});
    int c = constant(g, bias, {1});
    gemm(g, {a, b, c}, {2, 2});
    try {
      g.validate();
      FAIL() << "a bias of shape " << shapeToString(bias) << " was taken";
    } catch (const std::runtime_error &e) {
      EXPECT_NE(std::string(e.what()).find("not one value per column"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("node 3"), std::string::npos) << e.what();
    }
  }
  Graph four;
  int a = constant(four, {2, 3}, {1});
  int b = constant(four, {3, 2}, {1});
  int c = constant(four, {2}, {1});
  gemm(four, {a, b, c, c}, {2, 2});
  EXPECT_THROW(four.validate(), std::runtime_error);
}

TEST(Graph, ValidateConstantSize) {
  Graph g;
  constant(g, {2, 2}, {1, 2, 3});
  EXPECT_THROW(g.validate(), std::runtime_error);
}

// Initialisation and bf16

TEST(Init, DeterministicAndNameDependent) {
  StateDecl a{"layer0.w", {100}, DType::F32, InitKind::Normal, 0.02, true};
  StateDecl b = a;
  b.name = "layer1.w";
  int same = 0, sameName = 0;
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(initialValue(a, 42, i), initialValue(a, 42, i));
    same += initialValue(a, 42, i) == initialValue(b, 42, i);
    sameName += initialValue(a, 42, i) == initialValue(a, 43, i);
  }
  EXPECT_EQ(same, 0);
  EXPECT_EQ(sameName, 0);
  EXPECT_NE(initialValue(a, 42, 0), initialValue(a, 42, 1));
}

TEST(Init, NormalStatistics) {
  StateDecl s{"w", {10000}, DType::F32, InitKind::Normal, 0.5, true};
  const int n = 10000;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; ++i) {
    double v = initialValue(s, 7, i);
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sq += v * v;
  }
  double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 4 * 0.5 / std::sqrt(n)); // 4 standard errors
  EXPECT_NEAR(sd, 0.5, 0.5 * 0.04);
}

TEST(Init, UniformZerosOnes) {
  StateDecl u{"u", {10000}, DType::F32, InitKind::Uniform, 0.1, true};
  double sum = 0, sq = 0;
  for (int i = 0; i < 10000; ++i) {
    double v = initialValue(u, 3, i);
    ASSERT_GT(v, -0.1);
    ASSERT_LT(v, 0.1);
    sum += v;
    sq += v * v;
  }
  EXPECT_NEAR(sum / 10000, 0.0, 0.003);
  EXPECT_NEAR(sq / 10000, 0.01 / 3, 0.0003); // var of U(-s,s) is s^2/3
  StateDecl z{"z", {3}, DType::F32, InitKind::Zeros, 0, false};
  StateDecl o{"o", {3}, DType::F32, InitKind::Ones, 0, false};
  EXPECT_EQ(initialValue(z, 1, 2), 0.0);
  EXPECT_EQ(initialValue(o, 1, 2), 1.0);
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(roundToBF16(1.0f), 1.0f);
  // bf16 keeps 7 mantissa bits: the ulp at 1 is 2^-7.
  EXPECT_EQ(roundToBF16(1.0f + std::ldexp(1.0f, -9)), 1.0f);
  EXPECT_EQ(roundToBF16(1.0f + std::ldexp(1.0f, -7)),
            1.0f + std::ldexp(1.0f, -7));
  // Exact tie between 1 and 1+2^-7: the even one (1) wins.
  EXPECT_EQ(roundToBF16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // Tie between 1+2^-7 (odd) and 1+2^-6 (even).
  EXPECT_EQ(roundToBF16(1.0f + std::ldexp(1.0f, -7) + std::ldexp(1.0f, -8)),
            1.0f + std::ldexp(1.0f, -6));
  // Just above a tie rounds up.
  EXPECT_EQ(roundToBF16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(roundToBF16(-3.0f), -3.0f);
  EXPECT_TRUE(std::isnan(roundToBF16(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload lies only in the dropped bits must stay NaN.
  EXPECT_TRUE(std::isnan(roundToBF16(bitsToFloat(0x7F800001u))));
  EXPECT_TRUE(std::isnan(roundToBF16(bitsToFloat(0xFFFFFFFFu))));
  EXPECT_EQ(roundToBF16(-0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(roundToBF16(-0.0f)));
  EXPECT_EQ(roundToBF16(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(roundToBF16(std::numeric_limits<float>::max()),
            std::numeric_limits<float>::infinity());
}

TEST(BF16, NodesRoundInF32Only) {
  Graph g;
  int a = constant(g, {1}, {1.0});
  int b = constant(g, {1}, {std::ldexp(1.0, -9)});
  int s = g.add(mk(OpKind::Add, {a, b}, {1}, DType::BF16));
  EXPECT_EQ(eval(g, s, {}, Precision::F32).data[0], 1.0);
  EXPECT_EQ(eval(g, s, {}, Precision::F64).data[0], 1.0 + std::ldexp(1.0, -9));
}

// Elementwise ops

TEST(Elementwise, BroadcastRowAndColumn) {
  Graph g;
  int a = constant(g, {2, 3}, {1, 2, 3, 4, 5, 6});
  int row = constant(g, {3}, {10, 20, 30});
  int col = constant(g, {2, 1}, {2, 3});
  int add = g.add(mk(OpKind::Add, {a, row}, {2, 3}));
  int mul = g.add(mk(OpKind::Mul, {a, col}, {2, 3}));
  int outer = g.add(mk(OpKind::Sub, {col, row}, {2, 3}));
  expectVec(eval(g, add).data, {11, 22, 33, 14, 25, 36});
  expectVec(eval(g, mul).data, {2, 4, 6, 12, 15, 18});
  expectVec(eval(g, outer).data, {-8, -18, -28, -7, -17, -27});
}

TEST(Elementwise, ScalarBroadcast) {
  Graph g;
  int a = constant(g, {2, 2}, {1, 2, 3, 4});
  int s = constant(g, {}, {2});
  int d = g.add(mk(OpKind::Div, {a, s}, {2, 2}));
  int p = g.add(mk(OpKind::Pow, {a, s}, {2, 2}));
  expectVec(eval(g, d).data, {0.5, 1, 1.5, 2});
  expectVec(eval(g, p).data, {1, 4, 9, 16});
}

TEST(Elementwise, MaxMinGt) {
  Graph g;
  int a = constant(g, {4}, {1, -2, 3, 0});
  int b = constant(g, {4}, {0, 5, 3, -1});
  int mx = g.add(mk(OpKind::Max, {a, b}, {4}));
  int mn = g.add(mk(OpKind::Min, {a, b}, {4}));
  int gt = g.add(mk(OpKind::Gt, {a, b}, {4}));
  expectVec(eval(g, mx).data, {1, 5, 3, 0});
  expectVec(eval(g, mn).data, {0, -2, 3, -1});
  expectVec(eval(g, gt).data, {1, 0, 0, 1});
}

TEST(Elementwise, Unary) {
  Graph g;
  int x = constant(g, {4}, {1, -1, 2, 0.5});
  int pos = constant(g, {3}, {1, 4, 0.25});
  auto un = [&](OpKind k, int v, Shape s) { return g.add(mk(k, {v}, s)); };
  int neg = un(OpKind::Neg, x, {4});
  int ex = un(OpKind::Exp, x, {4});
  int lg = un(OpKind::Log, pos, {3});
  int sq = un(OpKind::Sqrt, pos, {3});
  int rs = un(OpKind::Rsqrt, pos, {3});
  int th = un(OpKind::Tanh, x, {4});
  int cs = un(OpKind::Cos, x, {4});
  int ge = un(OpKind::Gelu, x, {4});
  int re = un(OpKind::Relu, x, {4});
  int ef = un(OpKind::Erf, x, {4});
  const double e = 2.718281828459045;
  expectVec(eval(g, neg).data, {-1, 1, -2, -0.5});
  expectVec(eval(g, ex).data, {e, 1 / e, e * e, std::sqrt(e)}, 1e-12);
  expectVec(eval(g, lg).data, {0, 2 * 0.6931471805599453, -2 * 0.6931471805599453});
  expectVec(eval(g, sq).data, {1, 2, 0.5});
  expectVec(eval(g, rs).data, {1, 0.5, 2});
  expectVec(eval(g, th).data,
            {0.7615941559557649, -0.7615941559557649, 0.9640275800758169,
             0.46211715726000974});
  expectVec(eval(g, cs).data,
            {0.5403023058681398, 0.5403023058681398, -0.4161468365471424,
             0.8775825618903728});
  // Tanh-form GELU reference values.
  expectVec(eval(g, ge).data,
            {0.8411919906082768, -0.15880800939172324, 1.954597694087775,
             0.34571400982514394});
  expectVec(eval(g, re).data, {1, 0, 2, 0.5});
  // erf (math.erf values).
  expectVec(eval(g, ef).data, {0.8427007929497149, -0.8427007929497149, 0.9953222650189527, 0.5204998778130465});
}

// Layout ops

TEST(Layout, Matmul2D) {
  Graph g;
  int a = constant(g, {2, 3}, {1, 2, 3, 4, 5, 6});
  int b = constant(g, {3, 2}, {7, 8, 9, 10, 11, 12});
  int m = g.add(mk(OpKind::Matmul, {a, b}, {2, 2}));
  // [1 2 3; 4 5 6] x [7 8; 9 10; 11 12]
  expectVec(eval(g, m).data, {58, 64, 139, 154});
}

TEST(Layout, MatmulBatchedAndSharedRhs) {
  Graph g;
  int a = constant(g, {2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  int b = constant(g, {2, 2, 2}, {1, 0, 0, 1, 0, 1, 1, 0});
  int shared = constant(g, {2, 3}, {1, 0, 2, 0, 1, -1});
  int bm = g.add(mk(OpKind::Matmul, {a, b}, {2, 2, 2}));
  int sm = g.add(mk(OpKind::Matmul, {a, shared}, {2, 2, 3}));
  // Batch 0 times identity, batch 1 times the swap matrix (swaps columns).
  expectVec(eval(g, bm).data, {1, 2, 3, 4, 6, 5, 8, 7});
  // Row [x y] -> [x, y, 2x - y].
  expectVec(eval(g, sm).data,
            {1, 2, 0, 3, 4, 2, 5, 6, 4, 7, 8, 6});
}

TEST(Layout, MatmulF32MatchesF64) {
  Graph g;
  int a = constant(g, {3, 17, 33}, randomVec(3 * 17 * 33, 1));
  int b = constant(g, {33, 9}, randomVec(33 * 9, 2));
  int m = g.add(mk(OpKind::Matmul, {a, b}, {3, 17, 9}));
  Vec f32 = eval(g, m, {}, Precision::F32).data;
  Vec f64 = eval(g, m, {}, Precision::F64).data;
  expectVec(f32, f64, 1e-4);
}

TEST(Layout, Transpose) {
  Graph g;
  Vec data(24);
  for (int i = 0; i < 24; ++i)
    data[i] = i;
  int x = constant(g, {2, 3, 4}, data);
  Node t = mk(OpKind::Transpose, {x}, {4, 2, 3});
  t.ints = {2, 0, 1};
  int tr = g.add(t);
  HostTensor r = eval(g, tr);
  EXPECT_EQ(r.shape, Shape({4, 2, 3}));
  // out[a][b][c] = in[b][c][a] = 12b + 4c + a
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(r.data[a * 6 + b * 3 + c], 12 * b + 4 * c + a);
}

TEST(Layout, ReshapeBroadcastReduce) {
  Graph g;
  int x = constant(g, {2, 3}, {1, 2, 3, 4, 5, 6});
  int rs = g.add(mk(OpKind::Reshape, {x}, {3, 2}));
  int v = constant(g, {2, 1}, {1, 2});
  int bc = g.add(mk(OpKind::Broadcast, {v}, {2, 2, 3}));
  Node r0 = mk(OpKind::ReduceSum, {x}, {3});
  r0.ints = {0};
  int sum0 = g.add(r0);
  Node r1 = mk(OpKind::ReduceSum, {x}, {2});
  r1.ints = {1};
  int sum1 = g.add(r1);
  Node rall = mk(OpKind::ReduceSum, {x}, {});
  rall.ints = {0, 1};
  int sumAll = g.add(rall);
  int y = constant(g, {2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Node r02 = mk(OpKind::ReduceSum, {y}, {3});
  r02.ints = {0, 2};
  int sum02 = g.add(r02);
  // Reshape result still usable after the reshape (x read later on).
  expectVec(eval(g, rs).data, {1, 2, 3, 4, 5, 6});
  expectVec(eval(g, bc).data, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2});
  expectVec(eval(g, sum0).data, {5, 7, 9});
  expectVec(eval(g, sum1).data, {6, 15});
  expectVec(eval(g, sumAll).data, {21});
  // Over dims 0 and 2: (1+2+7+8), (3+4+9+10), (5+6+11+12)
  expectVec(eval(g, sum02).data, {18, 26, 34});
}

TEST(Layout, SliceAndPad) {
  Graph g;
  int x = constant(g, {2, 5}, {0, 1, 2, 3, 4, 10, 11, 12, 13, 14});
  Node s = mk(OpKind::Slice, {x}, {2, 3});
  s.ints = {1, 1};
  int sl = g.add(s);
  Node p = mk(OpKind::Pad, {sl}, {2, 5});
  p.ints = {1, 2};
  int pd = g.add(p);
  Node s0 = mk(OpKind::Slice, {x}, {1, 5});
  s0.ints = {0, 1};
  int sl0 = g.add(s0);
  Node p0 = mk(OpKind::Pad, {sl0}, {3, 5});
  p0.ints = {0, 0};
  int pd0 = g.add(p0);
  expectVec(eval(g, sl).data, {1, 2, 3, 11, 12, 13});
  expectVec(eval(g, pd).data, {0, 0, 1, 2, 3, 0, 0, 11, 12, 13});
  expectVec(eval(g, sl0).data, {10, 11, 12, 13, 14});
  expectVec(eval(g, pd0).data,
            {10, 11, 12, 13, 14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
}

// Fused model ops

TEST(Fused, Softmax) {
  Graph g;
  int x = constant(g, {2, 3}, {1, 2, 3, 1000, 1000, 1000});
  int sm = g.add(mk(OpKind::Softmax, {x}, {2, 3}));
  const double e = 2.718281828459045, z = 1 + e + e * e;
  // Row 2 is uniform and must not overflow.
  expectVec(eval(g, sm).data,
            {1 / z, e / z, e * e / z, 1.0 / 3, 1.0 / 3, 1.0 / 3});
}

TEST(Fused, CausalSoftmax) {
  Graph g;
  Vec data = randomVec(2 * 4 * 4, 3);
  int x = constant(g, {2, 4, 4}, data);
  Node n = mk(OpKind::Softmax, {x}, {2, 4, 4});
  n.flag = true;
  Vec y = eval(g, g.add(n)).data;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 4; ++i) {
      double sum = 0;
      for (int j = 0; j < 4; ++j) {
        double v = y[(b * 4 + i) * 4 + j];
        if (j > i) {
          EXPECT_EQ(v, 0.0);
        }
        sum += v;
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
  // Row 0 is all on its only visible entry; row 1 is a 2-way softmax:
  // p0 = 1 / (1 + exp(x1 - x0)).
  EXPECT_NEAR(y[0], 1.0, 1e-15);
  EXPECT_NEAR(y[4], 1.0 / (1.0 + std::exp(data[5] - data[4])), 1e-12);
}

TEST(Fused, LayerNorm) {
  Graph g;
  int x = constant(g, {2, 3}, {1, 2, 3, -1, 0, 4});
  int gamma = constant(g, {3}, {1, 2, 1});
  int beta = constant(g, {3}, {0, 0, 10});
  Node n = mk(OpKind::LayerNorm, {x, gamma, beta}, {2, 3});
  n.floats = {1e-5};
  Vec y = eval(g, g.add(n)).data;
  // Row 0: mean 2, biased variance 2/3.
  double s0 = 1 / std::sqrt(2.0 / 3 + 1e-5);
  // Row 1: mean 1, deviations -2, -1, 3, variance 14/3.
  double s1 = 1 / std::sqrt(14.0 / 3 + 1e-5);
  expectVec(y, {-s0, 0, 10 + s0, -2 * s1, -2 * s1, 10 + 3 * s1});
}

TEST(Fused, LayerNormStatistics) {
  Graph g;
  int x = constant(g, {5, 64}, randomVec(5 * 64, 4, 3.0));
  int gamma = constant(g, {64}, {1});
  int beta = constant(g, {64}, {0});
  Node n = mk(OpKind::LayerNorm, {x, gamma, beta}, {5, 64});
  n.floats = {1e-6};
  Vec y = eval(g, g.add(n)).data;
  for (int r = 0; r < 5; ++r) {
    double m = 0, v = 0;
    for (int j = 0; j < 64; ++j)
      m += y[r * 64 + j] / 64;
    for (int j = 0; j < 64; ++j)
      v += (y[r * 64 + j] - m) * (y[r * 64 + j] - m) / 64;
    EXPECT_NEAR(m, 0, 1e-12);
    EXPECT_NEAR(v, 1, 1e-5);
  }
}

TEST(Fused, RmsNorm) {
  Graph g;
  int x = constant(g, {2, 2}, {3, 4, 1, 1});
  int gamma = constant(g, {2}, {1, 2});
  Node n = mk(OpKind::RmsNorm, {x, gamma}, {2, 2});
  n.floats = {0.0};
  // Row 0: rms = sqrt((9+16)/2); row 1: rms = 1.
  double r0 = std::sqrt(12.5);
  expectVec(eval(g, g.add(n)).data, {3 / r0, 8 / r0, 1, 2});
}

// Attention equals softmax(q k^T * scale) v composed from simpler ops.
void checkAttention(bool causal) {
  const int B = 2, H = 2, T = 5, D = 3;
  Shape s = {B, H, T, D};
  Graph g;
  int q = input(g, "q", s), k = input(g, "k", s), v = input(g, "v", s);
  Node att = mk(OpKind::Attention, {q, k, v}, s);
  att.floats = {0.7};
  att.flag = causal;
  grad(g, "fused", g.add(att));

  Node kt = mk(OpKind::Transpose, {k}, {B, H, D, T});
  kt.ints = {0, 1, 3, 2};
  int ktn = g.add(kt);
  int scores = g.add(mk(OpKind::Matmul, {q, ktn}, {B, H, T, T}));
  int scale = constant(g, {}, {0.7});
  int scaled = g.add(mk(OpKind::Mul, {scores, scale}, {B, H, T, T}));
  Node sm = mk(OpKind::Softmax, {scaled}, {B, H, T, T});
  sm.flag = causal;
  int p = g.add(sm);
  grad(g, "composed", g.add(mk(OpKind::Matmul, {p, v}, s)));

  int n = B * H * T * D;
  std::map<std::string, HostTensor> in = {{"q", {s, randomVec(n, 5)}},
                                          {"k", {s, randomVec(n, 6)}},
                                          {"v", {s, randomVec(n, 7)}}};
  RefExecutor ex(g, Precision::F64);
  StepResult r = ex.evaluate(in);
  expectVec(r.grads.at("fused").data, r.grads.at("composed").data, 1e-12);
  if (causal) { // the first query sees only the first value
    for (int d = 0; d < D; ++d)
      EXPECT_NEAR(r.grads.at("fused").data[d], in["v"].data[d], 1e-12);
  }
}

TEST(Fused, AttentionMatchesComposition) { checkAttention(false); }
TEST(Fused, CausalAttentionMatchesComposition) { checkAttention(true); }

TEST(Fused, AttentionByHand) {
  // One head, T = 2, D = 1: scores for query 0 are {0, 1*1*ln3}, so
  // probabilities 1/4, 3/4 over values {2, 6} -> 5.
  Graph g;
  int q = constant(g, {1, 1, 2, 1}, {1, 0});
  int k = constant(g, {1, 1, 2, 1}, {0, 1});
  int v = constant(g, {1, 1, 2, 1}, {2, 6});
  Node att = mk(OpKind::Attention, {q, k, v}, {1, 1, 2, 1});
  att.floats = {std::log(3.0)};
  // Query 1 is all zeros: uniform weights -> 4.
  expectVec(eval(g, g.add(att)).data, {5, 4}, 1e-12);
}

// train.attention's `bf16` (ints {1}): each query row's weights made 32
// keys at a time against the running max of the scores, rounded to bf16,
// rescaled to the last max and divided by the unrounded sum; worked out
// here in f64 at T = 70 (three chunks), causal and not.
TEST(Fused, AttentionRoundsItsWeightsThirtyTwoKeysAtATime) {
  const int64_t T = 70, D = 2;
  const double scale = 1.3;
  const Shape s{1, 1, T, D};
  const Vec q = randomVec(T * D, 31), k = randomVec(T * D, 32), v = randomVec(T * D, 33);
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    auto run = [&](bool rounded) {
      Graph gr;
      Node n =
          mk(OpKind::Attention, {constant(gr, s, q), constant(gr, s, k), constant(gr, s, v)}, s);
      n.floats = {scale};
      n.flag = causal;
      if (rounded)
        n.ints = {1};
      return eval(gr, gr.add(n)).data;
    };
    Vec want(T * D, 0.0);
    for (int64_t i = 0; i < T; ++i) {
      const int64_t end = causal ? i + 1 : T;
      Vec sc(end), top(end);
      double m = -1e300;
      for (int64_t j = 0; j < end; ++j)
        sc[j] = (q[i * D] * k[j * D] + q[i * D + 1] * k[j * D + 1]) * scale;
      for (int64_t c0 = 0; c0 < end; c0 += 32) {
        for (int64_t j = c0; j < std::min(end, c0 + 32); ++j)
          m = std::max(m, sc[j]);
        for (int64_t j = c0; j < std::min(end, c0 + 32); ++j)
          top[j] = m;
      }
      double l = 0;
      for (int64_t j = 0; j < end; ++j)
        l += std::exp(sc[j] - top[j]) * std::exp(top[j] - m);
      for (int64_t j = 0; j < end; ++j) {
        const double w =
            double(roundToBF16(float(std::exp(sc[j] - top[j])))) * std::exp(top[j] - m) / l;
        for (int64_t c = 0; c < D; ++c)
          want[i * D + c] += w * v[j * D + c];
      }
    }
    const Vec got = run(true), plain = run(false);
    expectVec(got, want, 1e-12);
    double differ = 0;
    for (size_t e = 0; e < got.size(); ++e)
      differ = std::max(differ, std::fabs(got[e] - plain[e]));
    EXPECT_GT(differ, 1e-4) << "the roundings matter at these values";
  }
}

// attention_grad's `bf16` (ints {1}): dq, dk and dv from P and dS rounded
// to bf16 before the products, worked out here in f64 from the definition;
// without it the same gradients unrounded (and the two differ).
TEST(Fused, AttentionGradRoundsPAndDSWhereFlagged) {
  const int64_t T = 7, D = 3;
  const double scale = 0.8;
  const Shape s{1, 1, T, D};
  const Vec q = randomVec(T * D, 21), k = randomVec(T * D, 22), v = randomVec(T * D, 23),
            g = randomVec(T * D, 24);
  auto bf = [](double x) { return double(roundToBF16(float(x))); };
  auto run = [&](bool rounded) {
    Graph gr;
    int qn = constant(gr, s, q), kn = constant(gr, s, k), vn = constant(gr, s, v),
        gn = constant(gr, s, g);
    Node n = mk(OpKind::AttentionGrad, {qn, kn, vn, gn}, {3, 1, 1, T, D});
    n.floats = {scale};
    n.flag = true;
    if (rounded)
      n.ints = {1};
    return eval(gr, gr.add(n)).data;
  };
  for (bool rounded : {true, false}) {
    const Vec got = run(rounded);
    Vec want(3 * T * D, 0.0);
    for (int64_t i = 0; i < T; ++i) {
      Vec p(i + 1), dp(i + 1);
      double mx = -1e300, sum = 0, inner = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0, dotv = 0;
        for (int64_t c = 0; c < D; ++c)
          dot += q[i * D + c] * k[j * D + c], dotv += g[i * D + c] * v[j * D + c];
        p[j] = dot * scale, dp[j] = dotv, mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j <= i; ++j)
        sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t j = 0; j <= i; ++j)
        inner += (p[j] /= sum) * dp[j];
      for (int64_t j = 0; j <= i; ++j) {
        double ds = p[j] * (dp[j] - inner) * scale, pj = p[j];
        if (rounded)
          ds = bf(ds), pj = bf(pj);
        for (int64_t c = 0; c < D; ++c) {
          want[i * D + c] += ds * k[j * D + c];
          want[T * D + j * D + c] += ds * q[i * D + c];
          want[2 * T * D + j * D + c] += pj * g[i * D + c];
        }
      }
    }
    SCOPED_TRACE(rounded ? "rounded" : "f32");
    expectVec(got, want, 1e-12);
  }
  // (the roundings matter at these values)
  const Vec a = run(true), b = run(false);
  double differ = 0;
  for (size_t e = 0; e < a.size(); ++e)
    differ = std::max(differ, std::fabs(a[e] - b[e]));
  EXPECT_GT(differ, 1e-4);
}

TEST(Fused, EmbeddingAndOutOfRange) {
  Graph g;
  int table = constant(g, {4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
  int ids = input(g, "ids", {3}, DType::I32);
  Node e = mk(OpKind::Embedding, {table, ids}, {3, 2});
  e.loc = "gpt.toml:12";
  int emb = g.add(e);
  grad(g, "out", emb);
  RefExecutor ex(g, Precision::F32);
  expectVec(ex.evaluate({{"ids", {{3}, {2, 0, 3}}}}).grads.at("out").data,
            {20, 21, 0, 1, 30, 31});
  try {
    ex.evaluate({{"ids", {{3}, {2, 4, 0}}}});
    FAIL() << "expected a throw";
  } catch (const std::runtime_error &err) {
    std::string msg = err.what();
    EXPECT_NE(msg.find("gpt.toml:12"), std::string::npos) << msg;
    EXPECT_NE(msg.find("4"), std::string::npos) << msg;
  }
  EXPECT_THROW(ex.evaluate({{"ids", {{3}, {-1, 0, 0}}}}), std::runtime_error);
}

TEST(Fused, ScatterRowsSumsRepeatedIds) {
  Graph g;
  int ids = constant(g, {3}, {1, 1, 3}, DType::I32);
  int gr = constant(g, {3, 2}, {1, 2, 3, 4, 5, 6});
  int s = g.add(mk(OpKind::ScatterRows, {ids, gr}, {4, 2}));
  expectVec(eval(g, s).data, {0, 0, 4, 6, 0, 0, 5, 6});
}

TEST(Fused, OneHot) {
  Graph g;
  int ids = constant(g, {2}, {2, 0}, DType::I32);
  int oh = g.add(mk(OpKind::OneHot, {ids}, {2, 3}));
  expectVec(eval(g, oh).data, {0, 0, 1, 1, 0, 0});
}

TEST(Fused, CrossEntropy) {
  {
    Graph g; // uniform logits: loss = log(C)
    int l = constant(g, {4, 5}, {0.3});
    int t = constant(g, {4}, {0, 1, 4, 2}, DType::I32);
    int ce = g.add(mk(OpKind::CrossEntropy, {l, t}, {}));
    EXPECT_NEAR(eval(g, ce).data[0], std::log(5.0), 1e-12);
    EXPECT_NEAR(eval(g, ce, {}, Precision::F32).data[0], std::log(5.0), 1e-6);
  }
  {
    Graph g; // mean of two positions, one by hand, one huge and stable
    int l = constant(g, {2, 3}, {1, 2, 3, 1000, 1001, 1000});
    int t = constant(g, {2}, {0, 1}, DType::I32);
    int ce = g.add(mk(OpKind::CrossEntropy, {l, t}, {}));
    double first = 2.40760596444438; // log(e + e^2 + e^3) - 1
    double second = std::log(2 * std::exp(-1.0) + 1);
    double got = eval(g, ce, {}, Precision::F32).data[0];
    EXPECT_NEAR(got, (first + second) / 2, 1e-5);
    EXPECT_NEAR(eval(g, ce).data[0], (first + second) / 2, 1e-12);
  }
  {
    Graph g;
    int l = constant(g, {2, 3}, {0});
    int t = constant(g, {2}, {0, 3}, DType::I32);
    int ce = g.add(mk(OpKind::CrossEntropy, {l, t}, {}));
    EXPECT_THROW(eval(g, ce), std::runtime_error);
  }
}

// Singular values of NS(G) from the eigenvalues of the small Gram matrix.
Vec nsSingularValues(int m, int n, unsigned seed, Vec *out = nullptr) {
  Graph g;
  int x = constant(g, {m, n}, randomVec(m * n, seed));
  Node ns = mk(OpKind::NewtonSchulz, {x}, {m, n});
  ns.ints = {5};
  ns.floats = {3.4445, -4.7750, 2.0315};
  Vec y = eval(g, g.add(ns)).data;
  if (out)
    *out = y;
  int r = std::min(m, n);
  Vec gram(r * r, 0.0);
  for (int a = 0; a < r; ++a)
    for (int b = 0; b < r; ++b)
      for (int k = 0; k < std::max(m, n); ++k)
        gram[a * r + b] += m <= n ? y[a * n + k] * y[b * n + k]
                                  : y[k * n + a] * y[k * n + b];
  Vec ev = jacobiEigenvalues(gram, r);
  for (double &e : ev)
    e = std::sqrt(std::max(e, 0.0));
  return ev;
}

TEST(Fused, NewtonSchulzOrthogonalises) {
  for (auto dims : {std::pair<int, int>{8, 16}, {16, 8}}) {
    Vec sv = nsSingularValues(dims.first, dims.second, 11);
    ASSERT_EQ(sv.size(), 8u);
    for (double s : sv) {
      EXPECT_GT(s, 0.6) << dims.first << "x" << dims.second;
      EXPECT_LT(s, 1.3) << dims.first << "x" << dims.second;
    }
  }
}

TEST(Fused, NewtonSchulzOfTransposeIsTranspose) {
  // NS(G^T) = NS(G)^T: the tall case is handled by transposing.
  Vec g = randomVec(8 * 16, 12);
  Vec gt(g.size());
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 16; ++j)
      gt[j * 8 + i] = g[i * 16 + j];
  auto run = [](const Vec &d, int m, int n) {
    Graph gr;
    int x = constant(gr, {m, n}, d);
    Node ns = mk(OpKind::NewtonSchulz, {x}, {m, n});
    ns.ints = {5};
    ns.floats = {3.4445, -4.7750, 2.0315};
    return eval(gr, gr.add(ns)).data;
  };
  Vec wide = run(g, 8, 16), tall = run(gt, 16, 8);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 16; ++j)
      EXPECT_NEAR(tall[j * 8 + i], wide[i * 16 + j], 1e-12);
}

TEST(Fused, NewtonSchulzOneStepByHand) {
  // G = [3 4] -> X = [0.6 0.8] (norm 5 up to 1e-7); X X^T = 1, so one step
  // with (a, b, c) = (1, 1, 1) gives X * (1 + 1 + 1) = 3X.
  Graph g;
  int x = constant(g, {1, 2}, {3, 4});
  Node ns = mk(OpKind::NewtonSchulz, {x}, {1, 2});
  ns.ints = {1};
  ns.floats = {1, 1, 1};
  expectVec(eval(g, g.add(ns)).data, {1.8, 2.4}, 1e-6);
}

// State, step count, inputs

Graph doublingGraph() {
  Graph g;
  g.states.push_back({"w", {2}, DType::F32, InitKind::Ones, 0, true});
  Node rd = mk(OpKind::Read, {}, {2});
  rd.name = "w";
  int r1 = g.add(rd);
  int two = constant(g, {}, {2});
  int m = g.add(mk(OpKind::Mul, {r1, two}, {2}));
  Node wr = mk(OpKind::Write, {m}, {});
  wr.name = "w";
  g.add(wr);
  int r2 = g.add(rd);
  grad(g, "before", r1);
  grad(g, "after", r2);
  return g;
}

TEST(State, WriteThenReadIsSequential) {
  RefExecutor ex(doublingGraph(), Precision::F64);
  ex.initialize(1);
  StepResult r = ex.step({});
  expectVec(r.grads.at("before").data, {1, 1});
  expectVec(r.grads.at("after").data, {2, 2});
  expectVec(ex.getState("w").data, {2, 2});
  r = ex.step({});
  expectVec(r.grads.at("before").data, {2, 2});
  expectVec(ex.getState("w").data, {4, 4});
}

TEST(State, EvaluateDoesNotCommit) {
  RefExecutor ex(doublingGraph(), Precision::F32);
  ex.initialize(1);
  StepResult a = ex.evaluate({});
  StepResult b = ex.evaluate({});
  expectVec(a.grads.at("after").data, {2, 2});
  expectVec(b.grads.at("after").data, {2, 2});
  expectVec(ex.getState("w").data, {1, 1});
  EXPECT_EQ(ex.stepCount(), 0);
}

TEST(State, SetGetAndInitialize) {
  Graph g;
  g.states.push_back({"w", {3}, DType::F32, InitKind::Normal, 1.0, true});
  g.states.push_back({"h", {3}, DType::BF16, InitKind::Normal, 1.0, true});
  RefExecutor f64(g, Precision::F64), f32(g, Precision::F32);
  f64.initialize(9);
  f32.initialize(9);
  for (int i = 0; i < 3; ++i) {
    double v = initialValue(g.states[0], 9, i);
    EXPECT_EQ(f64.getState("w").data[i], v);
    EXPECT_EQ(f32.getState("w").data[i], static_cast<double>(static_cast<float>(v)));
    double h = initialValue(g.states[1], 9, i);
    EXPECT_EQ(f32.getState("h").data[i], roundToBF16(static_cast<float>(h)));
  }
  f64.setState("w", {{3}, {1, 2, 3}});
  expectVec(f64.getState("w").data, {1, 2, 3});
  EXPECT_THROW(f64.setState("w", {{2}, {1, 2}}), std::runtime_error);
  EXPECT_THROW(f64.setState("nope", {{3}, {1, 2, 3}}), std::runtime_error);
  EXPECT_THROW(f64.getState("nope"), std::runtime_error);
}

TEST(State, StepCountFromOne) {
  Graph g;
  int t = g.add(mk(OpKind::StepCount, {}, {}));
  int two = constant(g, {}, {2});
  int t2 = g.add(mk(OpKind::Mul, {t, two}, {}));
  g.add(mk(OpKind::Yield, {t, t2}, {}));
  RefExecutor ex(g, Precision::F32);
  EXPECT_EQ(ex.step({}).outputs, Vec({1, 2}));
  EXPECT_EQ(ex.step({}).outputs, Vec({2, 4}));
  EXPECT_EQ(ex.evaluate({}).outputs, Vec({3, 6}));
  EXPECT_EQ(ex.stepCount(), 2);
  ex.setStepCount(10);
  EXPECT_EQ(ex.evaluate({}).outputs[0], 11);
  ex.initialize(0);
  EXPECT_EQ(ex.stepCount(), 0);
}

TEST(Inputs, MissingAndWrongShape) {
  Graph g;
  int x = input(g, "tokens", {2, 3});
  Node r = mk(OpKind::ReduceSum, {x}, {});
  r.ints = {0, 1};
  g.add(mk(OpKind::Yield, {g.add(r)}, {}));
  RefExecutor ex(g, Precision::F64);
  EXPECT_EQ(ex.step({{"tokens", {{2, 3}, {1, 2, 3, 4, 5, 6}}}}).outputs[0], 21);
  try {
    ex.step({});
    FAIL() << "expected a throw";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("tokens"), std::string::npos);
  }
  try {
    ex.step({{"tokens", {{3, 2}, {1, 2, 3, 4, 5, 6}}}});
    FAIL() << "expected a throw";
  } catch (const std::runtime_error &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3, 2]"), std::string::npos) << msg;
  }
  // Failed steps do not count.
  EXPECT_EQ(ex.stepCount(), 1);
}

TEST(Executor, ValuesSurviveUntilLastUse) {
  // a is read by the first and the last node; intermediates in between
  // are freed as they die, which must not disturb a.
  Graph g;
  int a = constant(g, {3}, {1, 2, 3});
  int b = g.add(mk(OpKind::Neg, {a}, {3}));
  int c = g.add(mk(OpKind::Exp, {b}, {3}));
  int d = g.add(mk(OpKind::Reshape, {c}, {3}));
  int e = g.add(mk(OpKind::Add, {d, a}, {3}));
  Node red = mk(OpKind::ReduceSum, {e}, {});
  red.ints = {0};
  g.add(mk(OpKind::Yield, {g.add(red)}, {}));
  RefExecutor ex(g, Precision::F64);
  double want = 6 + std::exp(-1.0) + std::exp(-2.0) + std::exp(-3.0);
  EXPECT_NEAR(ex.step({}).outputs[0], want, 1e-12);
  EXPECT_NEAR(ex.step({}).outputs[0], want, 1e-12);
}

// A small pre-norm transformer-ish step: f32 and f64 agree to ~1e-5.
TEST(Executor, F32MatchesF64OnModel) {
  const int B = 2, T = 4, D = 8, V = 5;
  Graph g;
  g.states.push_back({"wte", {V, D}, DType::F32, InitKind::Normal, 0.5, true});
  g.states.push_back({"w1", {D, 3 * D}, DType::F32, InitKind::Normal, 0.3, true});
  g.states.push_back({"head", {D, V}, DType::F32, InitKind::Normal, 0.3, true});
  auto read = [&](const std::string &n, Shape s) {
    Node r = mk(OpKind::Read, {}, s);
    r.name = n;
    return g.add(r);
  };
  int ids = input(g, "ids", {B, T}, DType::I32);
  int tgt = input(g, "tgt", {B, T}, DType::I32);
  int x = g.add(mk(OpKind::Embedding, {read("wte", {V, D}), ids}, {B, T, D}));
  int one = constant(g, {D}, {1}), zero = constant(g, {D}, {0});
  Node ln = mk(OpKind::LayerNorm, {x, one, zero}, {B, T, D});
  ln.floats = {1e-5};
  int h = g.add(ln);
  int qkv = g.add(mk(OpKind::Matmul, {h, read("w1", {D, 3 * D})}, {B, T, 3 * D}));
  auto part = [&](int off) {
    Node s = mk(OpKind::Slice, {qkv}, {B, T, D});
    s.ints = {2, off};
    return g.add(mk(OpKind::Reshape, {g.add(s)}, {B, 1, T, D}));
  };
  Node att = mk(OpKind::Attention, {part(0), part(D), part(2 * D)}, {B, 1, T, D});
  att.floats = {1 / std::sqrt(double(D))};
  att.flag = true;
  int a = g.add(mk(OpKind::Reshape, {g.add(att)}, {B, T, D}));
  int y = g.add(mk(OpKind::Gelu, {g.add(mk(OpKind::Add, {a, x}, {B, T, D}))}, {B, T, D}));
  int logits = g.add(mk(OpKind::Matmul, {y, read("head", {D, V})}, {B, T, V}));
  int loss = g.add(mk(OpKind::CrossEntropy, {logits, tgt}, {}));
  grad(g, "logits", logits);
  g.add(mk(OpKind::Yield, {loss}, {}));

  std::map<std::string, HostTensor> in = {
      {"ids", {{B, T}, {0, 1, 2, 3, 4, 3, 2, 1}}},
      {"tgt", {{B, T}, {1, 2, 3, 4, 3, 2, 1, 0}}}};
  RefExecutor e32(g, Precision::F32), e64(g, Precision::F64);
  e32.initialize(5);
  e64.initialize(5);
  // Same starting point: copy the f32-rounded parameters into the f64 run.
  for (const StateDecl &s : g.states)
    e64.setState(s.name, e32.getState(s.name));
  StepResult r32 = e32.step(in), r64 = e64.step(in);
  ASSERT_EQ(r32.outputs.size(), 1u);
  EXPECT_GT(r64.outputs[0], 0.5);
  EXPECT_NEAR(r32.outputs[0], r64.outputs[0], 1e-5);
  expectVec(r32.grads.at("logits").data, r64.grads.at("logits").data, 1e-5);
}
