//===- GradientCheckTest.cpp - train-autodiff against finite differences -===//
//
// For every differentiable `train` op: a tiny f64 model whose parameters feed
// the op, a loss sum(op(...) * C) with a fixed random C (so no symmetry can
// hide a transposed or mis-broadcast gradient), `train-autodiff` only, and
// every element of every `train.grad` compared with central differences of
// the loss computed by the reference executor in F64.
//
// Inputs are chosen away from kinks: positive for log/sqrt/rsqrt/pow bases,
// |x| >= 0.2 for relu and divisors, operands of max/min on disjoint grids.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "stretto/Frontend/Import.h"
#include "stretto/Runtime/RefExecutor.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <sstream>

using namespace stretto;
using stretto::test::Compiled;

namespace {

using Vec = std::vector<double>;
using Inputs = std::map<std::string, HostTensor>;

// IR text helpers

std::string ty(const Shape &s, const char *elem = "f64") {
  std::string r = "tensor<";
  for (int64_t d : s)
    r += std::to_string(d) + "x";
  return r + elem + ">";
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17e", v);
  return buf;
}

std::string denseLiteral(const Vec &v, const Shape &s) {
  // Nested brackets are not needed: MLIR accepts a flat list only for rank 1,
  // so build the nesting from the shape.
  if (s.empty())
    return "dense<" + num(v.at(0)) + ">";
  std::ostringstream os;
  std::function<void(size_t, size_t &)> rec = [&](size_t dim, size_t &pos) {
    os << "[";
    for (int64_t i = 0; i < s[dim]; ++i) {
      if (i)
        os << ", ";
      if (dim + 1 == s.size())
        os << num(v.at(pos++));
      else
        rec(dim + 1, pos);
    }
    os << "]";
  };
  size_t pos = 0;
  rec(0, pos);
  return "dense<" + os.str() + ">";
}

std::string joinDims(const std::vector<int64_t> &d) {
  std::string r = "[";
  for (size_t i = 0; i < d.size(); ++i)
    r += (i ? ", " : "") + std::to_string(d[i]);
  return r + "]";
}

// Case description

enum class Gen {
  Normal,       // N(0, 1)
  Positive,     // U(0.5, 2)
  AwayFromZero, // ±U(0.2, 1.5)
  OddTenths,    // 0.1 * odd integer in [-19, 19]: never within 0.1 of EvenTenths
  EvenTenths,   // 0.1 * even integer in [-20, 20]
};

struct ParamSpec {
  std::string name;
  Shape shape;
  Gen gen = Gen::Normal;
};

struct InputSpec {
  std::string name;
  Shape shape;
  Vec values; // i32 ids
};

struct GradCase {
  std::string name;
  std::vector<ParamSpec> params;
  std::vector<InputSpec> inputs;
  std::string body; // uses %<param> and %<input>; defines %out
  Shape out;
};

std::ostream &operator<<(std::ostream &os, const GradCase &c) { return os << c.name; }

uint64_t hashName(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (char ch : s)
    h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h;
}

Vec generate(Gen g, int64_t n, std::mt19937_64 &rng) {
  Vec v(n);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::uniform_int_distribution<int> tenths(-10, 9);
  for (double &x : v) {
    switch (g) {
    case Gen::Normal: x = normal(rng); break;
    case Gen::Positive: x = 0.5 + 1.5 * u01(rng); break;
    case Gen::AwayFromZero:
      x = (0.2 + 1.3 * u01(rng)) * (u01(rng) < 0.5 ? -1.0 : 1.0);
      break;
    // A scalar operand of max/min sits mid-range so both operands win somewhere.
    case Gen::OddTenths: x = n == 1 ? 0.1 : 0.1 * (2 * tenths(rng) + 1); break;
    case Gen::EvenTenths: x = n == 1 ? 0.0 : 0.1 * (2 * tenths(rng)); break;
    }
  }
  return v;
}

/// The model text for a case: params, reads, inputs, the body, then
/// loss = sum(out * C) with C fixed random of out's shape.
std::string modelText(const GradCase &c, const Vec &weights) {
  std::ostringstream os;
  os << "train.model @" << c.name << " {\n";
  for (const ParamSpec &p : c.params)
    os << "  train.param @" << p.name << " : " << ty(p.shape) << " = normal(1.0)\n";
  os << "  train.step {\n";
  for (const ParamSpec &p : c.params)
    os << "    %" << p.name << " = train.read @" << p.name << " : " << ty(p.shape) << "\n";
  for (const InputSpec &in : c.inputs)
    os << "    %" << in.name << " = train.input \"" << in.name << "\" : "
       << ty(in.shape, "i32") << "\n";
  os << c.body << "\n";
  std::string t = ty(c.out);
  os << "    %lossw = train.constant " << denseLiteral(weights, c.out) << " : " << t << "\n";
  os << "    %lossm = train.mul %out, %lossw : " << t << "\n";
  if (c.out.empty()) {
    os << "    train.yield %lossm : tensor<f64>\n";
  } else {
    std::vector<int64_t> all;
    for (size_t d = 0; d < c.out.size(); ++d)
      all.push_back(d);
    os << "    %loss = train.reduce_sum %lossm " << joinDims(all) << " : " << t
       << " -> tensor<f64>\n";
    os << "    train.yield %loss : tensor<f64>\n";
  }
  os << "  }\n}\n";
  return os.str();
}

// The finite-difference checker

struct GradReport {
  std::string param;
  int64_t checked = 0;
  double maxElemErr = 0;  // max over elements of |a-n| / max(1e-8, |a|+|n|), after the floor
  double normRatio = 0;   // ||a-n|| / (||a|| + ||n||)
  double analyticNorm = 0;
  std::string worst;      // description of the worst element
};

constexpr double kTol = 1e-6;
// Elements whose analytic and numeric gradients are both this small are
// compared absolutely: central differences of an O(1) loss carry ~1e-11 of
// rounding noise, which would make exact zeros (causal masks) look relative-wrong.
constexpr double kAbsFloor = 1e-9;

/// Checks `sample` (all if empty) elements of every parameter of `graph`
/// against central differences. Param values must already be set in `ex`.
std::vector<GradReport> checkGradients(RefExecutor &ex, const Graph &graph, const Inputs &inputs,
                                       std::string &error, int sample = 0, uint64_t seed = 1) {
  std::vector<GradReport> reports;
  StepResult base = ex.evaluate(inputs);
  std::mt19937_64 rng(seed);
  for (const StateDecl &s : graph.states) {
    if (!s.isParam)
      continue;
    GradReport rep;
    rep.param = s.name;
    auto it = base.grads.find(s.name);
    if (it == base.grads.end()) {
      error += "no train.grad for @" + s.name + "\n";
      continue;
    }
    const HostTensor &analytic = it->second;
    if (analytic.shape != s.shape) {
      error += "grad of @" + s.name + " has shape " + shapeToString(analytic.shape) +
               ", param has " + shapeToString(s.shape) + "\n";
      continue;
    }
    HostTensor value = ex.getState(s.name);
    int64_t n = numElements(s.shape);
    std::vector<int64_t> idx;
    if (sample <= 0 || sample >= n) {
      for (int64_t i = 0; i < n; ++i)
        idx.push_back(i);
    } else {
      std::uniform_int_distribution<int64_t> pick(0, n - 1);
      for (int k = 0; k < sample; ++k)
        idx.push_back(pick(rng));
    }
    double diff2 = 0, a2 = 0, n2 = 0;
    for (int64_t i : idx) {
      double x = value.data[i];
      double h = 1e-5 * std::max(1.0, std::fabs(x));
      HostTensor p = value;
      p.data[i] = x + h;
      ex.setState(s.name, p);
      double lp = ex.evaluate(inputs).outputs.at(0);
      p.data[i] = x - h;
      ex.setState(s.name, p);
      double lm = ex.evaluate(inputs).outputs.at(0);
      ex.setState(s.name, value);
      double numeric = (lp - lm) / (2 * h);
      double a = analytic.data[i];
      double d = std::fabs(a - numeric);
      diff2 += d * d;
      a2 += a * a;
      n2 += numeric * numeric;
      double err = d <= kAbsFloor ? 0.0 : d / std::max(1e-8, std::fabs(a) + std::fabs(numeric));
      if (err >= rep.maxElemErr) {
        rep.maxElemErr = err;
        std::ostringstream os;
        os << "element " << i << ": analytic " << num(a) << " numeric " << num(numeric);
        rep.worst = os.str();
      }
      ++rep.checked;
    }
    rep.analyticNorm = std::sqrt(a2);
    rep.normRatio = std::sqrt(diff2) / std::max(1e-300, std::sqrt(a2) + std::sqrt(n2));
    reports.push_back(rep);
  }
  return reports;
}

void expectGood(const std::vector<GradReport> &reports, size_t expectedParams) {
  EXPECT_EQ(reports.size(), expectedParams);
  for (const GradReport &r : reports) {
    SCOPED_TRACE("param @" + r.param + ", worst " + r.worst);
    EXPECT_GT(r.checked, 0);
    EXPECT_LT(r.maxElemErr, kTol);
    EXPECT_LT(r.normRatio, kTol);
    // A gradient that is identically zero would pass trivially.
    EXPECT_GT(r.analyticNorm, 1e-6);
  }
}

struct Prepared {
  Compiled compiled;
  std::unique_ptr<RefExecutor> ex;
  Inputs inputs;
};

/// Compiles a case (train-autodiff only by default) and sets its parameter values.
Prepared prepare(const GradCase &c, const test::PipelineFn &pipeline = test::autodiffOnly()) {
  Prepared p;
  std::mt19937_64 rng(hashName(c.name));
  Vec weights = generate(Gen::Normal, numElements(c.out), rng);
  std::string text = modelText(c, weights);
  p.compiled = test::compile(text, pipeline);
  if (!p.compiled.ok) {
    ADD_FAILURE() << "compile failed:\n" << p.compiled.diagnostics << "\n" << text;
    return p;
  }
  p.ex = std::make_unique<RefExecutor>(p.compiled.graph, Precision::F64);
  p.ex->initialize(7);
  for (const ParamSpec &ps : c.params) {
    std::mt19937_64 prng(hashName(c.name + "/" + ps.name));
    p.ex->setState(ps.name, HostTensor{ps.shape, generate(ps.gen, numElements(ps.shape), prng)});
  }
  for (const InputSpec &in : c.inputs)
    p.inputs[in.name] = HostTensor{in.shape, in.values};
  return p;
}

// The table

std::vector<GradCase> binaryCases() {
  std::vector<GradCase> cases;
  struct Op {
    const char *name;
    Gen lhs, rhs;
  };
  const Op ops[] = {
      {"add", Gen::Normal, Gen::Normal},         {"sub", Gen::Normal, Gen::Normal},
      {"mul", Gen::Normal, Gen::Normal},         {"div", Gen::Normal, Gen::AwayFromZero},
      {"max", Gen::OddTenths, Gen::EvenTenths},  {"min", Gen::OddTenths, Gen::EvenTenths},
      {"pow", Gen::Positive, Gen::Normal},
  };
  struct Bc {
    const char *name;
    Shape lhs, rhs, out;
  };
  const Bc bcs[] = {
      {"Same", {2, 3}, {2, 3}, {2, 3}},
      {"Row", {2, 3}, {3}, {2, 3}},
      {"Scalar", {2, 3}, {}, {2, 3}},
      {"LhsRow", {3}, {2, 3}, {2, 3}},
      {"ScalarLhs", {}, {2, 3}, {2, 3}},
      {"Outer", {2, 1}, {1, 3}, {2, 3}},
      {"Rank3", {2, 1, 3}, {4, 1}, {2, 4, 3}},
  };
  for (const Op &op : ops)
    for (const Bc &bc : bcs) {
      GradCase c;
      c.name = std::string(op.name) + "_" + bc.name;
      c.params = {{"a", bc.lhs, op.lhs}, {"b", bc.rhs, op.rhs}};
      std::string types = bc.lhs == bc.rhs
                              ? ty(bc.out)
                              : ty(bc.lhs) + ", " + ty(bc.rhs) + " -> " + ty(bc.out);
      c.body = std::string("    %out = train.") + op.name + " %a, %b : " + types;
      c.out = bc.out;
      cases.push_back(c);
    }
  return cases;
}

std::vector<GradCase> unaryCases() {
  std::vector<GradCase> cases;
  struct Op {
    const char *name;
    Gen gen;
  };
  const Op ops[] = {{"neg", Gen::Normal},         {"exp", Gen::Normal},
                    {"log", Gen::Positive},       {"sqrt", Gen::Positive},
                    {"rsqrt", Gen::Positive},     {"tanh", Gen::Normal},
                    {"cos", Gen::Normal},         {"gelu", Gen::Normal},
                    {"relu", Gen::AwayFromZero},  {"silu", Gen::Normal},
                    {"erf", Gen::Normal}};
  for (const Op &op : ops) {
    GradCase c;
    c.name = op.name;
    c.params = {{"a", {3, 4}, op.gen}};
    c.body = std::string("    %out = train.") + op.name + " %a : " + ty({3, 4});
    c.out = {3, 4};
    cases.push_back(c);
  }
  return cases;
}

GradCase make(std::string name, std::vector<ParamSpec> params, std::string body, Shape out,
              std::vector<InputSpec> inputs = {}) {
  GradCase c;
  c.name = std::move(name);
  c.params = std::move(params);
  c.body = std::move(body);
  c.out = std::move(out);
  c.inputs = std::move(inputs);
  return c;
}

std::vector<GradCase> layoutCases() {
  std::vector<GradCase> cs;
  auto mm = [](Shape a, Shape b, Shape o) {
    return "    %out = train.matmul %a, %b : " + ty(a) + ", " + ty(b) + " -> " + ty(o);
  };
  cs.push_back(make("matmul_Rank2", {{"a", {2, 3}}, {"b", {3, 4}}}, mm({2, 3}, {3, 4}, {2, 4}),
                    {2, 4}));
  cs.push_back(make("matmul_BatchedSharedRhs", {{"a", {2, 2, 3}}, {"b", {3, 4}}},
                    mm({2, 2, 3}, {3, 4}, {2, 2, 4}), {2, 2, 4}));
  cs.push_back(make("matmul_Rank4SharedRhs", {{"a", {2, 2, 2, 3}}, {"b", {3, 2}}},
                    mm({2, 2, 2, 3}, {3, 2}, {2, 2, 2, 2}), {2, 2, 2, 2}));
  cs.push_back(make("matmul_BatchedBoth", {{"a", {2, 2, 3}}, {"b", {2, 3, 4}}},
                    mm({2, 2, 3}, {2, 3, 4}, {2, 2, 4}), {2, 2, 4}));
  cs.push_back(make("matmul_Rank4Both", {{"a", {2, 2, 3, 2}}, {"b", {2, 2, 2, 3}}},
                    mm({2, 2, 3, 2}, {2, 2, 2, 3}, {2, 2, 3, 3}), {2, 2, 3, 3}));
  cs.push_back(make("matmul_SameOperand", {{"a", {3, 3}}},
                    "    %out = train.matmul %a, %a : " + ty({3, 3}) + ", " + ty({3, 3}) +
                        " -> " + ty({3, 3}),
                    {3, 3}));
  cs.push_back(make("transpose_2D", {{"a", {3, 4}}},
                    "    %out = train.transpose %a [1, 0] : " + ty({3, 4}) + " -> " + ty({4, 3}),
                    {4, 3}));
  cs.push_back(make("transpose_3D", {{"a", {2, 3, 4}}},
                    "    %out = train.transpose %a [2, 0, 1] : " + ty({2, 3, 4}) + " -> " +
                        ty({4, 2, 3}),
                    {4, 2, 3}));
  cs.push_back(make("transpose_4DHeads", {{"a", {2, 3, 2, 4}}},
                    "    %out = train.transpose %a [0, 2, 1, 3] : " + ty({2, 3, 2, 4}) + " -> " +
                        ty({2, 2, 3, 4}),
                    {2, 2, 3, 4}));
  cs.push_back(make("reshape", {{"a", {2, 6}}},
                    "    %out = train.reshape %a : " + ty({2, 6}) + " -> " + ty({3, 2, 2}),
                    {3, 2, 2}));
  cs.push_back(make("broadcast_Row", {{"a", {3}}},
                    "    %out = train.broadcast %a : " + ty({3}) + " -> " + ty({2, 3}), {2, 3}));
  cs.push_back(make("broadcast_Middle", {{"a", {2, 1, 3}}},
                    "    %out = train.broadcast %a : " + ty({2, 1, 3}) + " -> " + ty({2, 4, 3}),
                    {2, 4, 3}));
  cs.push_back(make("broadcast_Scalar", {{"a", {}}},
                    "    %out = train.broadcast %a : " + ty({}) + " -> " + ty({2, 2}), {2, 2}));
  cs.push_back(make("reduce_sum_Middle", {{"a", {2, 3, 4}}},
                    "    %out = train.reduce_sum %a [1] : " + ty({2, 3, 4}) + " -> " + ty({2, 4}),
                    {2, 4}));
  cs.push_back(make("reduce_sum_Outer", {{"a", {2, 3, 4}}},
                    "    %out = train.reduce_sum %a [0, 2] : " + ty({2, 3, 4}) + " -> " + ty({3}),
                    {3}));
  cs.push_back(make("reduce_sum_All", {{"a", {2, 3}}},
                    "    %s = train.reduce_sum %a [0, 1] : " + ty({2, 3}) + " -> " + ty({}) +
                        "\n    %out = train.mul %s, %s : " + ty({}),
                    {}));
  cs.push_back(make("slice_Last", {{"a", {2, 5}}},
                    "    %out = train.slice %a axis = 1 offset = 1 : " + ty({2, 5}) + " -> " +
                        ty({2, 3}),
                    {2, 3}));
  cs.push_back(make("slice_First", {{"a", {4, 3}}},
                    "    %out = train.slice %a axis = 0 offset = 2 : " + ty({4, 3}) + " -> " +
                        ty({2, 3}),
                    {2, 3}));
  cs.push_back(make("pad_Last", {{"a", {2, 3}}},
                    "    %out = train.pad %a axis = 1 offset = 1 : " + ty({2, 3}) + " -> " +
                        ty({2, 5}),
                    {2, 5}));
  cs.push_back(make("pad_Middle", {{"a", {2, 2, 3}}},
                    "    %out = train.pad %a axis = 1 offset = 2 : " + ty({2, 2, 3}) + " -> " +
                        ty({2, 5, 3}),
                    {2, 5, 3}));
  return cs;
}

std::vector<GradCase> modelCases() {
  std::vector<GradCase> cs;
  cs.push_back(make("softmax", {{"a", {3, 5}}},
                    "    %out = train.softmax %a : " + ty({3, 5}), {3, 5}));
  cs.push_back(make("softmax_Causal", {{"a", {2, 4, 4}}},
                    "    %out = train.softmax %a causal : " + ty({2, 4, 4}), {2, 4, 4}));
  cs.push_back(make("layer_norm", {{"x", {3, 5}}, {"g", {5}}, {"b", {5}}},
                    "    %out = train.layer_norm %x, %g, %b : " + ty({3, 5}) + ", " + ty({5}) +
                        ", " + ty({5}),
                    {3, 5}));
  cs.push_back(make("layer_norm_Rank3Eps", {{"x", {2, 3, 4}}, {"g", {4}}, {"b", {4}}},
                    "    %out = train.layer_norm %x, %g, %b {eps = 1.000000e-01 : f64} : " +
                        ty({2, 3, 4}) + ", " + ty({4}) + ", " + ty({4}),
                    {2, 3, 4}));
  cs.push_back(make("rms_norm", {{"x", {3, 5}}, {"g", {5}}},
                    "    %out = train.rms_norm %x, %g : " + ty({3, 5}) + ", " + ty({5}), {3, 5}));
  cs.push_back(make("rms_norm_Rank3Eps", {{"x", {2, 3, 4}}, {"g", {4}}},
                    "    %out = train.rms_norm %x, %g {eps = 1.000000e-01 : f64} : " +
                        ty({2, 3, 4}) + ", " + ty({4}),
                    {2, 3, 4}));
  Shape qkv = {2, 2, 3, 4};
  cs.push_back(make("attention", {{"q", qkv}, {"k", qkv}, {"v", qkv}},
                    "    %out = train.attention %q, %k, %v {scale = 5.000000e-01 : f64} : " +
                        ty(qkv),
                    qkv));
  cs.push_back(make("attention_Causal", {{"q", qkv}, {"k", qkv}, {"v", qkv}},
                    "    %out = train.attention %q, %k, %v causal {scale = 5.000000e-01 : f64} : " +
                        ty(qkv),
                    qkv));
  // Ids repeat (row 2 three times) and row 3 is never used.
  cs.push_back(make("embedding", {{"t", {5, 3}}},
                    "    %out = train.embedding %t[%ids] : " + ty({5, 3}) + ", " +
                        ty({2, 3}, "i32") + " -> " + ty({2, 3, 3}),
                    {2, 3, 3}, {{"ids", {2, 3}, {0, 2, 2, 4, 1, 2}}}));
  cs.push_back(make("cross_entropy", {{"a", {4, 5}}},
                    "    %out = train.cross_entropy %a, %y : " + ty({4, 5}) + ", " +
                        ty({4}, "i32") + " -> " + ty({}),
                    {}, {{"y", {4}, {0, 3, 3, 1}}}));
  cs.push_back(make("cross_entropy_Rank3", {{"a", {2, 3, 5}}},
                    "    %out = train.cross_entropy %a, %y : " + ty({2, 3, 5}) + ", " +
                        ty({2, 3}, "i32") + " -> " + ty({}),
                    {}, {{"y", {2, 3}, {4, 0, 2, 2, 1, 4}}}));
  // Operands that do not depend on a parameter get no gradient.
  cs.push_back(make("pow_ConstExponent", {{"a", {2, 3}, Gen::Positive}},
                    "    %e = train.constant dense<3.000000e+00> : " + ty({}) +
                        "\n    %out = train.pow %a, %e : " + ty({2, 3}) + ", " + ty({}) + " -> " +
                        ty({2, 3}),
                    {2, 3}));
  cs.push_back(make("div_ConstNumerator", {{"a", {2, 3}, Gen::AwayFromZero}},
                    "    %one = train.constant dense<[1.5, -2.0, 0.5]> : " + ty({3}) +
                        "\n    %out = train.div %one, %a : " + ty({3}) + ", " + ty({2, 3}) +
                        " -> " + ty({2, 3}),
                    {2, 3}));
  // Layout round trips that canonicalization may fold.
  cs.push_back(make("transpose_Twice", {{"a", {2, 3, 4}}},
                    "    %t = train.transpose %a [1, 2, 0] : " + ty({2, 3, 4}) + " -> " +
                        ty({3, 4, 2}) + "\n    %t2 = train.transpose %t [0, 2, 1] : " +
                        ty({3, 4, 2}) + " -> " + ty({3, 2, 4}) + "\n    %e = train.exp %t2 : " +
                        ty({3, 2, 4}) + "\n    %out = train.reshape %e : " + ty({3, 2, 4}) +
                        " -> " + ty({6, 4}),
                    {6, 4}));
  // Fan-out: %a feeds three ops; a second read of the same param.
  cs.push_back(make("fanout_Value", {{"a", {2, 3}}},
                    "    %sq = train.mul %a, %a : " + ty({2, 3}) +
                        "\n    %th = train.tanh %a : " + ty({2, 3}) +
                        "\n    %s = train.add %sq, %th : " + ty({2, 3}) +
                        "\n    %out = train.mul %s, %a : " + ty({2, 3}),
                    {2, 3}));
  cs.push_back(make("fanout_TwoReads", {{"a", {2, 3}}},
                    "    %a2 = train.read @a : " + ty({2, 3}) + "\n    %e = train.exp %a2 : " +
                        ty({2, 3}) + "\n    %out = train.mul %a, %e : " + ty({2, 3}),
                    {2, 3}));
  // A small MLP classifier: every kind of op at once, chained.
  cs.push_back(make(
      "chain_Mlp", {{"w1", {4, 6}}, {"b1", {6}}, {"g", {6}}, {"be", {6}}, {"w2", {6, 3}}},
      "    %x = train.constant " +
          denseLiteral({0.3, -1.2, 0.5, 0.9, -0.4, 1.1, 0.2, -0.7, 1.5, 0.1, -0.3, 0.8}, {3, 4}) +
          " : " + ty({3, 4}) + "\n    %h = train.matmul %x, %w1 : " + ty({3, 4}) + ", " +
          ty({4, 6}) + " -> " + ty({3, 6}) + "\n    %hb = train.add %h, %b1 : " + ty({3, 6}) +
          ", " + ty({6}) + " -> " + ty({3, 6}) + "\n    %n = train.layer_norm %hb, %g, %be : " +
          ty({3, 6}) + ", " + ty({6}) + ", " + ty({6}) + "\n    %a = train.gelu %n : " +
          ty({3, 6}) + "\n    %o = train.matmul %a, %w2 : " + ty({3, 6}) + ", " + ty({6, 3}) +
          " -> " + ty({3, 3}) + "\n    %out = train.cross_entropy %o, %y : " + ty({3, 3}) +
          ", " + ty({3}, "i32") + " -> " + ty({}),
      {}, {{"y", {3}, {2, 0, 1}}}));
  return cs;
}

std::vector<GradCase> allCases() {
  std::vector<GradCase> all;
  for (auto *f : {binaryCases, unaryCases, layoutCases, modelCases})
    for (GradCase &c : f())
      all.push_back(std::move(c));
  return all;
}

class GradientCheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradientCheck, MatchesCentralDifferences) {
  const GradCase &c = GetParam();
  Prepared p = prepare(c);
  ASSERT_TRUE(p.compiled.ok);
  std::string error;
  std::vector<GradReport> reports =
      checkGradients(*p.ex, p.compiled.graph, p.inputs, error);
  EXPECT_EQ(error, "") << p.compiled.ir;
  expectGood(reports, c.params.size());
}

// The same cases after canonicalize and cse, which fold the backward ops.
TEST_P(GradientCheck, MatchesCentralDifferencesAfterCanonicalize) {
  const GradCase &c = GetParam();
  Prepared p = prepare(c, test::autodiffCanonicalized());
  ASSERT_TRUE(p.compiled.ok);
  std::string error;
  std::vector<GradReport> reports =
      checkGradients(*p.ex, p.compiled.graph, p.inputs, error);
  EXPECT_EQ(error, "") << p.compiled.ir;
  expectGood(reports, c.params.size());
}

INSTANTIATE_TEST_SUITE_P(Ops, GradientCheck, ::testing::ValuesIn(allCases()),
                         [](const ::testing::TestParamInfo<GradCase> &info) {
                           return info.param.name;
                         });

// The list above must cover every differentiable op of the dialect.
TEST(GradientCheckCoverage, EveryDifferentiableOpHasACase) {
  const char *ops[] = {"add",     "sub",       "mul",        "div",      "max",
                       "min",     "pow",       "neg",        "exp",      "log",
                       "sqrt",    "rsqrt",     "tanh",       "cos",      "gelu",
                       "relu",    "silu",      "erf",        "matmul",    "transpose",  "reshape",  "broadcast",
                       "reduce_sum", "slice",  "pad",        "softmax",  "layer_norm",
                       "rms_norm", "attention", "embedding", "cross_entropy"};
  std::vector<GradCase> all = allCases();
  for (const char *op : ops) {
    std::string needle = std::string("train.") + op + " ";
    bool found = false;
    for (const GradCase &c : all)
      found |= c.body.find(needle) != std::string::npos;
    EXPECT_TRUE(found) << "no gradient check uses train." << op;
  }
}

// The checker itself must be able to fail.

TEST(GradientCheckHarness, DetectsAWrongGradient) {
  GradCase c = unaryCases()[1]; // exp
  ASSERT_EQ(c.name, "exp");
  Prepared p = prepare(c);
  ASSERT_TRUE(p.compiled.ok);
  // Rewire the Grad sink to a wrong value: d/da sum(exp(a) C) is exp(a) C;
  // feeding it exp(a) (the forward result) must be caught.
  Graph g = p.compiled.graph;
  int forward = -1, gradNode = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].kind == OpKind::Exp && forward < 0)
      forward = static_cast<int>(i);
    if (g.nodes[i].kind == OpKind::Grad)
      gradNode = static_cast<int>(i);
  }
  ASSERT_GE(forward, 0);
  ASSERT_GT(gradNode, forward);
  g.nodes[gradNode].operands = {forward};
  RefExecutor ex(g, Precision::F64);
  ex.initialize(7);
  ex.setState("a", p.ex->getState("a"));
  std::string error;
  auto reports = checkGradients(ex, g, p.inputs, error);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_GT(reports[0].maxElemErr, 1e-2);
  EXPECT_GT(reports[0].normRatio, 1e-2);
}

// Fan-out against a closed form: L = sum((a*a + tanh a) * a * C) has
// dL/da = (3a^2 + tanh a + a (1 - tanh^2 a)) * C.
TEST(GradientCheckFanOut, SumsEveryUseClosedForm) {
  GradCase c;
  for (const GradCase &k : modelCases())
    if (k.name == "fanout_Value")
      c = k;
  ASSERT_EQ(c.name, "fanout_Value");
  std::mt19937_64 rng(hashName(c.name));
  Vec C = generate(Gen::Normal, 6, rng);
  Prepared p = prepare(c);
  ASSERT_TRUE(p.compiled.ok);
  Vec a = p.ex->getState("a").data;
  StepResult r = p.ex->evaluate({});
  const Vec &g = r.grads.at("a").data;
  ASSERT_EQ(g.size(), 6u);
  double loss = 0;
  for (int i = 0; i < 6; ++i) {
    double t = std::tanh(a[i]);
    loss += (a[i] * a[i] + t) * a[i] * C[i];
    double want = (3 * a[i] * a[i] + t + a[i] * (1 - t * t)) * C[i];
    EXPECT_NEAR(g[i], want, 1e-12 * (1 + std::fabs(want))) << "element " << i;
  }
  EXPECT_NEAR(r.outputs.at(0), loss, 1e-12 * (1 + std::fabs(loss)));
}

// Two reads of one parameter: the gradients of both reads are summed.
TEST(GradientCheckFanOut, TwoReadsClosedForm) {
  GradCase c;
  for (const GradCase &k : modelCases())
    if (k.name == "fanout_TwoReads")
      c = k;
  ASSERT_EQ(c.name, "fanout_TwoReads");
  std::mt19937_64 rng(hashName(c.name));
  Vec C = generate(Gen::Normal, 6, rng);
  Prepared p = prepare(c);
  ASSERT_TRUE(p.compiled.ok);
  Vec a = p.ex->getState("a").data;
  StepResult r = p.ex->evaluate({});
  const Vec &g = r.grads.at("a").data;
  ASSERT_EQ(g.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    double want = (1 + a[i]) * std::exp(a[i]) * C[i];
    EXPECT_NEAR(g[i], want, 1e-12 * (1 + std::fabs(want))) << "element " << i;
  }
}

// End to end: a tiny f64 GPT from the TOML importer.

struct GptCase {
  const char *name;
  const char *extra; // more [model] keys
  size_t params;     // parameters the importer declares
};

std::ostream &operator<<(std::ostream &os, const GptCase &c) { return os << c.name; }

class GradientCheckGPT : public ::testing::TestWithParam<GptCase> {};

TEST_P(GradientCheckGPT, SampledElementsOfEveryParam) {
  const GptCase &gc = GetParam();
  const std::string toml = std::string("[model]\n"
                                       "kind = \"gpt\"\n"
                                       "heads = 2\n"
                                       "d_model = 8\n"
                                       "seq_len = 4\n"
                                       "batch = 2\n"
                                       "vocab = 11\n"
                                       "dtype = \"f64\"\n") +
                           gc.extra;
  mlir::MLIRContext ctx;
  test::prepareContext(ctx);
  std::string error;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      importConfigString(ctx, toml, "gpt.toml", {}, error);
  ASSERT_TRUE(module) << error;
  Compiled cm = test::compileModule(*module, test::autodiffOnly());
  ASSERT_TRUE(cm.ok) << cm.diagnostics;

  // Inputs: tokens and targets, ids in [0, vocab).
  Inputs inputs;
  std::mt19937_64 rng(42);
  for (const Node &n : cm.graph.nodes) {
    if (n.kind != OpKind::Input)
      continue;
    ASSERT_EQ(n.dtype, DType::I32) << "unexpected float input " << n.name;
    ASSERT_EQ(n.shape, (Shape{2, 4})) << n.name;
    std::uniform_int_distribution<int> id(0, 10);
    Vec v(numElements(n.shape));
    for (double &x : v)
      x = id(rng);
    inputs[n.name] = HostTensor{n.shape, v};
  }
  ASSERT_EQ(inputs.size(), 2u);
  ASSERT_TRUE(inputs.count("tokens") && inputs.count("targets"));

  RefExecutor ex(cm.graph, Precision::F64);
  ex.initialize(3);
  // Initial values are small (std 0.02) and norm gains exactly 1, biases 0;
  // perturb every param so each path (norm gains, attention scores, GELU) is
  // in its nonlinear range and no gradient is special.
  size_t params = 0;
  for (const StateDecl &s : cm.graph.states) {
    if (!s.isParam)
      continue;
    ++params;
    EXPECT_EQ(s.dtype, DType::F64) << s.name;
    std::mt19937_64 prng(hashName(s.name));
    HostTensor v = ex.getState(s.name);
    Vec noise = generate(Gen::Normal, numElements(s.shape), prng);
    for (size_t i = 0; i < v.data.size(); ++i)
      v.data[i] += 0.3 * noise[i];
    ex.setState(s.name, v);
  }
  EXPECT_EQ(params, gc.params);
  double loss = ex.evaluate(inputs).outputs.at(0);
  EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;

  std::string err;
  std::vector<GradReport> reports = checkGradients(ex, cm.graph, inputs, err, 5, 11);
  EXPECT_EQ(err, "");
  EXPECT_EQ(reports.size(), params);
  int nonzero = 0;
  for (const GradReport &r : reports) {
    SCOPED_TRACE("param @" + r.param + ", worst " + r.worst);
    EXPECT_EQ(r.checked, 5);
    EXPECT_LT(r.maxElemErr, kTol);
    EXPECT_LT(r.normRatio, kTol);
    nonzero += r.analyticNorm > 1e-6;
  }
  // Only rows of unused tokens may have sampled all-zero gradients.
  EXPECT_GE(nonzero, static_cast<int>(params) - 1);
}

// Per layer: ln1 (g, b), qkv (w, b), proj (w, b), ln2 (g, b), fc (w, b),
// mlp.proj (w, b) = 12 with LayerNorm, 10 with RMSNorm; plus wte, wpe, ln_f
// (2 or 1) and head.
INSTANTIATE_TEST_SUITE_P(
    Import, GradientCheckGPT,
    ::testing::Values(GptCase{"OneLayerLayerNorm", "layers = 1\n", 2 + 12 + 2 + 1},
                      GptCase{"TwoLayersRmsNorm", "layers = 2\nnorm = \"rmsnorm\"\n",
                              2 + 2 * 10 + 1 + 1}),
    [](const ::testing::TestParamInfo<GptCase> &info) { return std::string(info.param.name); });

} // namespace
