//===- OptimizerTest.cpp - train-optimizer against a re-implementation ---===//
//
// The full training pipeline (autodiff, optimizer, canonicalize, cse) runs a
// small f64 model for a few steps in the reference executor; after every step
// its parameters (and optimizer state) must equal an independent
// re-implementation of docs/design.md §4 written here with plain loops over
// std::vector<double>. Gradients for the re-implementation come from a
// separate autodiff-only graph evaluated at the re-implementation's own
// parameters (so the two trajectories are computed independently), or from
// models whose gradient is known in closed form.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "stretto/Runtime/RefExecutor.h"

#include "JacobiEigen.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <sstream>

using namespace stretto;
using stretto::test::Compiled;

namespace {

using Vec = std::vector<double>;
using Inputs = std::map<std::string, HostTensor>;

// Plain-loop linear algebra

// [m, k] x [k, n]
Vec matmul(const Vec &a, const Vec &b, int m, int k, int n) {
  Vec c(static_cast<size_t>(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p)
        s += a[i * k + p] * b[p * n + j];
      c[i * n + j] = s;
    }
  return c;
}

Vec transpose(const Vec &a, int m, int n) {
  Vec t(a.size());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      t[j * m + i] = a[i * n + j];
  return t;
}

// Muon's orthogonalisation as docs/design.md §4.4 states it.
Vec newtonSchulz5(const Vec &g, int rows, int cols) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  double norm = 0;
  for (double v : g)
    norm += v * v;
  norm = std::sqrt(norm) + 1e-7;
  Vec x(g.size());
  for (size_t i = 0; i < g.size(); ++i)
    x[i] = g[i] / norm;
  bool tall = rows > cols;
  int m = rows, n = cols;
  if (tall) {
    x = transpose(x, rows, cols);
    std::swap(m, n);
  }
  for (int s = 0; s < 5; ++s) {
    Vec A = matmul(x, transpose(x, m, n), m, n, m); // [m, m]
    Vec AA = matmul(A, A, m, m, m);
    Vec B(A.size());
    for (size_t i = 0; i < A.size(); ++i)
      B[i] = b * A[i] + c * AA[i];
    Vec BX = matmul(B, x, m, m, n);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = a * x[i] + BX[i];
  }
  if (tall)
    x = transpose(x, m, n);
  return x;
}

using stretto::test::jacobiEigenvalues; // JacobiEigen.h

// Singular values of an m x n matrix (the min(m, n) nonzero ones).
Vec singularValues(const Vec &x, int m, int n) {
  Vec gram = m <= n ? matmul(x, transpose(x, m, n), m, n, m)  // X Xᵀ
                    : matmul(transpose(x, m, n), x, n, m, n); // Xᵀ X
  Vec ev = jacobiEigenvalues(gram, std::min(m, n));
  for (double &e : ev)
    e = std::sqrt(std::max(0.0, e));
  std::sort(ev.begin(), ev.end());
  return ev;
}

// The reference optimizer

struct Recipe {
  std::string method = "adamw";
  double lr = 1e-3, muonLr = 0.02, weightDecay = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double momentum = 0.9, muonMomentum = 0.95, gradClip = 0, minLrRatio = 0.1;
  int warmup = 0, total = 1;
  std::string schedule = "constant";
  bool muonRms = false;
};

// The learning-rate multiplier at step t (1-based): linear warm-up to 1 over
// `warmup` steps, then decay from 1 to min_lr_ratio over (warmup, total].
double lrMultiplier(const Recipe &r, int t) {
  if (r.warmup > 0 && t < r.warmup)
    return static_cast<double>(t) / r.warmup;
  if (r.schedule == "constant")
    return 1.0;
  double p = static_cast<double>(t - r.warmup) / (r.total - r.warmup);
  p = std::clamp(p, 0.0, 1.0);
  double shape = r.schedule == "cosine" ? 0.5 * (1 + std::cos(M_PI * p)) : 1 - p;
  return r.minLrRatio + (1 - r.minLrRatio) * shape;
}

struct ParamInfo {
  std::string name;
  Shape shape;
  std::string role; // "" = none
};

bool routedToMuon(const Recipe &r, const ParamInfo &p) {
  return r.method == "muon" && p.shape.size() == 2 && (p.role.empty() || p.role == "matrix");
}

struct RefOptimizer {
  Recipe r;
  std::vector<ParamInfo> params;
  std::map<std::string, Vec> value;
  std::map<std::string, Vec> state; // "<param>.<slot>"
  int t = 0;
  double lastClipScale = 1;

  void step(const std::map<std::string, HostTensor> &grads) {
    ++t;
    double mult = lrMultiplier(r, t);
    double clip = 1.0;
    if (r.gradClip > 0) {
      double sq = 0;
      for (const ParamInfo &p : params)
        for (double g : grads.at(p.name).data)
          sq += g * g;
      clip = std::min(1.0, r.gradClip / (std::sqrt(sq) + 1e-6));
    }
    lastClipScale = clip;
    for (const ParamInfo &p : params) {
      Vec g = grads.at(p.name).data;
      for (double &x : g)
        x *= clip;
      Vec &w = value.at(p.name);
      size_t n = w.size();
      Vec dir(n);
      double lr;
      if (routedToMuon(r, p)) {
        Vec &m = slot(p.name + ".muon_m", n);
        double b = r.muonMomentum;
        Vec u(n);
        for (size_t i = 0; i < n; ++i) {
          m[i] = b * m[i] + (1 - b) * g[i];
          u[i] = (1 - b) * g[i] + b * m[i];
        }
        int rows = static_cast<int>(p.shape[0]), cols = static_cast<int>(p.shape[1]);
        Vec o = newtonSchulz5(u, rows, cols);
        double scale = r.muonRms ? 0.2 * std::sqrt(std::max(rows, cols))
                                 : std::sqrt(std::max(1.0, double(cols) / rows)); // [in, out]
        for (size_t i = 0; i < n; ++i)
          dir[i] = scale * o[i];
        lr = r.muonLr * mult;
      } else if (r.method == "sgd") {
        Vec &buf = slot(p.name + ".momentum", n);
        for (size_t i = 0; i < n; ++i) {
          buf[i] = r.momentum * buf[i] + g[i];
          dir[i] = buf[i];
        }
        lr = r.lr * mult;
      } else {
        Vec &m = slot(p.name + ".adam_m", n);
        Vec &v = slot(p.name + ".adam_v", n);
        double bc1 = 1 - std::pow(r.beta1, t), bc2 = 1 - std::pow(r.beta2, t);
        for (size_t i = 0; i < n; ++i) {
          m[i] = r.beta1 * m[i] + (1 - r.beta1) * g[i];
          v[i] = r.beta2 * v[i] + (1 - r.beta2) * g[i] * g[i];
          dir[i] = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + r.eps);
        }
        lr = r.lr * mult;
      }
      bool decay = p.shape.size() >= 2 && r.weightDecay > 0;
      for (size_t i = 0; i < n; ++i)
        w[i] -= lr * (dir[i] + (decay ? r.weightDecay * w[i] : 0.0));
    }
  }

  Vec &slot(const std::string &name, size_t n) {
    auto it = state.find(name);
    if (it == state.end())
      it = state.emplace(name, Vec(n, 0.0)).first;
    return it->second;
  }
};

// The model

// Embedding, a wide matrix, bias, norm gain, a tall matrix without a role
// (Muon by default) and the head: every routing case of the optimizer.
const std::vector<ParamInfo> kParams = {
    {"emb", {5, 4}, "embedding"}, {"w1", {4, 6}, "matrix"}, {"b1", {6}, "bias"},
    {"g", {6}, "norm"},           {"wd", {6, 4}, ""},       {"head", {4, 3}, "head"},
};

std::string mlpText(const std::string &trainer) {
  return R"(train.model @opt attributes {trainer = {)" + trainer + R"(}} {
  train.param @emb : tensor<5x4xf64> = normal(1.0) {role = "embedding"}
  train.param @w1 : tensor<4x6xf64> = normal(0.5) {role = "matrix"}
  train.param @b1 : tensor<6xf64> = normal(0.3) {role = "bias"}
  train.param @g : tensor<6xf64> = uniform(1.5) {role = "norm"}
  train.param @wd : tensor<6x4xf64> = normal(0.5)
  train.param @head : tensor<4x3xf64> = normal(0.5) {role = "head"}
  train.step {
    %ids = train.input "ids" : tensor<3xi32>
    %y = train.input "y" : tensor<3xi32>
    %emb = train.read @emb : tensor<5x4xf64>
    %w1 = train.read @w1 : tensor<4x6xf64>
    %b1 = train.read @b1 : tensor<6xf64>
    %g = train.read @g : tensor<6xf64>
    %wd = train.read @wd : tensor<6x4xf64>
    %head = train.read @head : tensor<4x3xf64>
    %x = train.embedding %emb[%ids] : tensor<5x4xf64>, tensor<3xi32> -> tensor<3x4xf64>
    %h0 = train.matmul %x, %w1 : tensor<3x4xf64>, tensor<4x6xf64> -> tensor<3x6xf64>
    %h1 = train.add %h0, %b1 : tensor<3x6xf64>, tensor<6xf64> -> tensor<3x6xf64>
    %h2 = train.tanh %h1 : tensor<3x6xf64>
    %h3 = train.mul %h2, %g : tensor<3x6xf64>, tensor<6xf64> -> tensor<3x6xf64>
    %z0 = train.matmul %h3, %wd : tensor<3x6xf64>, tensor<6x4xf64> -> tensor<3x4xf64>
    %z = train.tanh %z0 : tensor<3x4xf64>
    %o = train.matmul %z, %head : tensor<3x4xf64>, tensor<4x3xf64> -> tensor<3x3xf64>
    %l = train.cross_entropy %o, %y : tensor<3x3xf64>, tensor<3xi32> -> tensor<f64>
    train.yield %l : tensor<f64>
  }
}
)";
}

Inputs mlpInputs() {
  return {{"ids", HostTensor{{3}, {4, 1, 4}}}, {"y", HostTensor{{3}, {2, 0, 1}}}};
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17e", v);
  return buf;
}

// The trainer dictionary of a Recipe, every key spelled out.
std::string trainerDict(const Recipe &r) {
  std::ostringstream os;
  os << "optimizer = \"" << r.method << "\", lr = " << num(r.lr) << ", muon_lr = " << num(r.muonLr)
     << ", weight_decay = " << num(r.weightDecay) << ", beta1 = " << num(r.beta1)
     << ", beta2 = " << num(r.beta2) << ", eps = " << num(r.eps)
     << ", momentum = " << num(r.momentum) << ", muon_momentum = " << num(r.muonMomentum)
     << ", muon_scale = \"" << (r.muonRms ? "rms" : "shape") << "\""
     << ", grad_clip = " << num(r.gradClip) << ", schedule = \"" << r.schedule << "\""
     << ", warmup_steps = " << r.warmup << ", total_steps = " << r.total
     << ", min_lr_ratio = " << num(r.minLrRatio);
  return os.str();
}

void expectClose(const Vec &got, const Vec &want, const std::string &what, double tol = 1e-10) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " element " << i;
}

struct Trajectory {
  std::vector<double> clipScales;
  std::vector<double> maxUpdate; // largest |Δp| per step, to show updates are not trivial
};

// Runs `steps` steps of the full pipeline and of the reference, comparing
// parameters and optimizer state after each.
Trajectory runAgainstReference(const Recipe &recipe, int steps = 3) {
  Trajectory tr;
  std::string text = mlpText(trainerDict(recipe));
  Compiled full = test::compile(text, test::trainingPipeline());
  Compiled ad = test::compile(text, test::autodiffOnly());
  if (!full.ok || !ad.ok) {
    ADD_FAILURE() << full.diagnostics << ad.diagnostics;
    return tr;
  }
  RefExecutor exFull(full.graph, Precision::F64), exAd(ad.graph, Precision::F64);
  exFull.initialize(5);
  exAd.initialize(5);
  Inputs in = mlpInputs();

  RefOptimizer ref;
  ref.r = recipe;
  ref.params = kParams;
  for (const ParamInfo &p : kParams)
    ref.value[p.name] = exFull.getState(p.name).data;

  for (int t = 1; t <= steps; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    for (const ParamInfo &p : kParams)
      exAd.setState(p.name, HostTensor{p.shape, ref.value[p.name]});
    StepResult g = exAd.evaluate(in);
    std::map<std::string, Vec> before = ref.value;
    ref.step(g.grads);
    tr.clipScales.push_back(ref.lastClipScale);
    double maxUpd = 0;
    for (auto &[name, v] : ref.value)
      for (size_t i = 0; i < v.size(); ++i)
        maxUpd = std::max(maxUpd, std::fabs(v[i] - before[name][i]));
    tr.maxUpdate.push_back(maxUpd);

    StepResult s = exFull.step(in);
    EXPECT_EQ(exFull.stepCount(), t);
    // The loss is computed before the update, at the same parameters.
    EXPECT_NEAR(s.outputs.at(0), g.outputs.at(0), 1e-12);
    for (const ParamInfo &p : kParams)
      expectClose(exFull.getState(p.name).data, ref.value[p.name], "param @" + p.name);
    for (auto &[name, v] : ref.state) {
      if (!full.graph.findState(name)) {
        ADD_FAILURE() << "the pipeline declares no state @" << name;
        continue;
      }
      expectClose(exFull.getState(name).data, v, "state @" + name);
    }
  }
  // The pipeline must not keep optimizer state the reference does not.
  for (const StateDecl &s : full.graph.states)
    if (!s.isParam)
      EXPECT_TRUE(ref.state.count(s.name)) << "unexpected state @" << s.name;
  return tr;
}

// Whole-model updates

TEST(Optimizer, SgdMomentumWithWeightDecay) {
  Recipe r;
  r.method = "sgd";
  r.lr = 0.1;
  r.momentum = 0.8;
  r.weightDecay = 0.05;
  Trajectory t = runAgainstReference(r);
  ASSERT_EQ(t.maxUpdate.size(), 3u);
  EXPECT_GT(t.maxUpdate[2], 1e-3);
}

TEST(Optimizer, AdamWBiasCorrectionDecoupledDecay) {
  Recipe r;
  r.method = "adamw";
  r.lr = 0.02;
  r.beta1 = 0.8;
  r.beta2 = 0.9;
  r.eps = 1e-3; // large enough that a misplaced eps shows
  r.weightDecay = 0.3;
  Trajectory t = runAgainstReference(r);
  ASSERT_EQ(t.maxUpdate.size(), 3u);
  EXPECT_GT(t.maxUpdate[0], 1e-3);
}

TEST(Optimizer, AdamWWarmupCosineAndClipping) {
  Recipe r;
  r.method = "adamw";
  r.lr = 0.05;
  r.weightDecay = 0.1;
  r.gradClip = 0.3;
  r.schedule = "cosine";
  r.warmup = 2;
  r.total = 5;
  r.minLrRatio = 0.2;
  Trajectory t = runAgainstReference(r, 4);
  ASSERT_EQ(t.clipScales.size(), 4u);
  // The clip is active, or this would not test it.
  for (double c : t.clipScales)
    EXPECT_LT(c, 0.9);
}

TEST(Optimizer, SgdClippingLinearSchedule) {
  Recipe r;
  r.method = "sgd";
  r.lr = 0.2;
  r.momentum = 0.5;
  r.gradClip = 0.25;
  r.schedule = "linear";
  r.warmup = 1;
  r.total = 4;
  Trajectory t = runAgainstReference(r, 4);
  ASSERT_EQ(t.clipScales.size(), 4u);
  EXPECT_LT(t.clipScales[0], 0.9);
}

TEST(Optimizer, MuonShapeScale) {
  Recipe r;
  r.method = "muon";
  r.lr = 0.01;
  r.muonLr = 0.05;
  r.muonMomentum = 0.9;
  r.beta1 = 0.85;
  r.weightDecay = 0.1;
  Trajectory t = runAgainstReference(r);
  ASSERT_EQ(t.maxUpdate.size(), 3u);
  EXPECT_GT(t.maxUpdate[0], 1e-2);
}

TEST(Optimizer, MuonDefaultMomentumAndRmsScale) {
  Recipe r;
  r.method = "muon";
  r.lr = 0.01;
  r.muonLr = 0.03;
  r.muonMomentum = 0.95;
  r.muonRms = true;
  r.weightDecay = 0.01;
  r.gradClip = 1.0;
  runAgainstReference(r);
}

TEST(Optimizer, MuonWithWarmupCosine) {
  Recipe r;
  r.method = "muon";
  r.lr = 0.01;
  r.muonLr = 0.04;
  r.schedule = "cosine";
  r.warmup = 1;
  r.total = 3;
  r.minLrRatio = 0.0;
  runAgainstReference(r, 3);
}

// Muon only for 2-D matrix params (role "matrix" or none); embedding, head
// and 1-D params keep AdamW moments.
TEST(Optimizer, MuonRouting) {
  Recipe r;
  r.method = "muon";
  Compiled c = test::compile(mlpText(trainerDict(r)), test::trainingPipeline());
  ASSERT_TRUE(c.ok) << c.diagnostics;
  auto has = [&](const std::string &n) { return c.graph.findState(n) != nullptr; };
  for (const char *m : {"w1", "wd"}) {
    EXPECT_TRUE(has(std::string(m) + ".muon_m")) << m;
    EXPECT_FALSE(has(std::string(m) + ".adam_m")) << m;
    EXPECT_FALSE(has(std::string(m) + ".adam_v")) << m;
  }
  for (const char *a : {"emb", "b1", "g", "head"}) {
    EXPECT_FALSE(has(std::string(a) + ".muon_m")) << a;
    EXPECT_TRUE(has(std::string(a) + ".adam_m")) << a;
    EXPECT_TRUE(has(std::string(a) + ".adam_v")) << a;
  }
  size_t states = 0;
  for (const StateDecl &s : c.graph.states)
    states += !s.isParam;
  EXPECT_EQ(states, 2u + 4 * 2);
  // One Newton-Schulz per Muon matrix.
  int ns = 0;
  for (const Node &n : c.graph.update) // the optimizer runs in the update phase
    ns += n.kind == OpKind::NewtonSchulz;
  EXPECT_EQ(ns, 2);
}

// Closed-form gradients: loss = sum(W * C) + sum(b * c), so g = (C, c)

const Vec kC = {0.5, -1.0, 2.0, 0.25, -0.75, 1.5}; // [2, 3]
const Vec kc = {1.0, -2.0, 0.5};                   // [3]

std::string linearText(const std::string &trainer) {
  return R"(train.model @lin attributes {trainer = {)" + trainer + R"(}} {
  train.param @w : tensor<2x3xf64> = normal(1.0)
  train.param @b : tensor<3xf64> = normal(1.0) {role = "bias"}
  train.step {
    %w = train.read @w : tensor<2x3xf64>
    %b = train.read @b : tensor<3xf64>
    %C = train.constant dense<[[5.0e-01, -1.0e+00, 2.0e+00], [2.5e-01, -7.5e-01, 1.5e+00]]> : tensor<2x3xf64>
    %c = train.constant dense<[1.0e+00, -2.0e+00, 5.0e-01]> : tensor<3xf64>
    %wc = train.mul %w, %C : tensor<2x3xf64>
    %bc = train.mul %b, %c : tensor<3xf64>
    %sw = train.reduce_sum %wc [0, 1] : tensor<2x3xf64> -> tensor<f64>
    %sb = train.reduce_sum %bc [0] : tensor<3xf64> -> tensor<f64>
    %l = train.add %sw, %sb : tensor<f64>
    train.yield %l : tensor<f64>
  }
}
)";
}

// With SGD, momentum 0 and no decay, Δw = -lr(t)·C: the schedule is observed
// directly, at many steps, against the closed form.
void checkSchedule(const Recipe &r, int steps, const std::vector<double> &spotValues = {}) {
  Compiled c = test::compile(linearText(trainerDict(r)), test::trainingPipeline());
  ASSERT_TRUE(c.ok) << c.diagnostics;
  RefExecutor ex(c.graph, Precision::F64);
  ex.initialize(1);
  for (int t = 1; t <= steps; ++t) {
    Vec w0 = ex.getState("w").data, b0 = ex.getState("b").data;
    ex.step({});
    Vec w1 = ex.getState("w").data, b1 = ex.getState("b").data;
    double want = r.lr * lrMultiplier(r, t);
    for (int i = 0; i < 6; ++i)
      EXPECT_NEAR((w0[i] - w1[i]) / kC[i], want, 1e-12) << "step " << t << " w[" << i << "]";
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR((b0[i] - b1[i]) / kc[i], want, 1e-12) << "step " << t << " b[" << i << "]";
    if (t <= static_cast<int>(spotValues.size()))
      EXPECT_NEAR((w0[0] - w1[0]) / kC[0], spotValues[t - 1], 1e-12) << "step " << t;
  }
}

TEST(Schedule, WarmupThenCosine) {
  Recipe r;
  r.method = "sgd";
  r.momentum = 0.0;
  r.lr = 0.1;
  r.schedule = "cosine";
  r.warmup = 4;
  r.total = 10;
  r.minLrRatio = 0.1;
  // Hand values: t/4 for t < 4; then 0.01 + 0.09·(1 + cos(π (t-4)/6))/2.
  std::vector<double> spot = {0.025, 0.05, 0.075, 0.1,
                              0.01 + 0.045 * (1 + std::cos(M_PI / 6)),
                              0.01 + 0.045 * (1 + std::cos(M_PI / 3)),
                              0.055, 0.01 + 0.045 * (1 + std::cos(2 * M_PI / 3)),
                              0.01 + 0.045 * (1 + std::cos(5 * M_PI / 6)), 0.01, 0.01, 0.01};
  checkSchedule(r, 12, spot);
}

TEST(Schedule, WarmupThenLinear) {
  Recipe r;
  r.method = "sgd";
  r.momentum = 0.0;
  r.lr = 0.2;
  r.schedule = "linear";
  r.warmup = 2;
  r.total = 6;
  r.minLrRatio = 0.25;
  // 0.1, 0.2, then 0.2·(0.25 + 0.75·(1 - (t-2)/4)): 0.1625, 0.125, 0.0875, 0.05, 0.05
  checkSchedule(r, 8, {0.1, 0.2, 0.1625, 0.125, 0.0875, 0.05, 0.05, 0.05});
}

TEST(Schedule, ConstantWithWarmup) {
  Recipe r;
  r.method = "sgd";
  r.momentum = 0.0;
  r.lr = 0.3;
  r.warmup = 3;
  r.total = 100;
  checkSchedule(r, 5, {0.1, 0.2, 0.3, 0.3, 0.3});
}

TEST(Schedule, ConstantNoWarmup) {
  Recipe r;
  r.method = "sgd";
  r.momentum = 0.0;
  r.lr = 0.07;
  checkSchedule(r, 3, {0.07, 0.07, 0.07});
}

// Global-norm clipping with a known gradient: ‖g‖ = sqrt(‖C‖² + ‖c‖²).
TEST(Clipping, GlobalNormClosedForm) {
  double norm2 = 0;
  for (double v : kC)
    norm2 += v * v;
  for (double v : kc)
    norm2 += v * v;
  double norm = std::sqrt(norm2); // = sqrt(8.125 + 5.25)
  ASSERT_NEAR(norm, std::sqrt(13.375), 1e-15);
  for (double clip : {0.5, 2.0, 100.0}) {
    SCOPED_TRACE("clip " + std::to_string(clip));
    Recipe r;
    r.method = "sgd";
    r.momentum = 0.0;
    r.lr = 0.1;
    r.gradClip = clip;
    Compiled c = test::compile(linearText(trainerDict(r)), test::trainingPipeline());
    ASSERT_TRUE(c.ok) << c.diagnostics;
    RefExecutor ex(c.graph, Precision::F64);
    ex.initialize(1);
    Vec w0 = ex.getState("w").data, b0 = ex.getState("b").data;
    ex.step({});
    Vec w1 = ex.getState("w").data, b1 = ex.getState("b").data;
    double scale = std::min(1.0, clip / (norm + 1e-6));
    for (int i = 0; i < 6; ++i)
      EXPECT_NEAR(w0[i] - w1[i], 0.1 * scale * kC[i], 1e-13);
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(b0[i] - b1[i], 0.1 * scale * kc[i], 1e-13);
    // The clipped update has global norm lr·clip when clipping is active.
    double upd = 0;
    for (int i = 0; i < 6; ++i)
      upd += (w0[i] - w1[i]) * (w0[i] - w1[i]);
    for (int i = 0; i < 3; ++i)
      upd += (b0[i] - b1[i]) * (b0[i] - b1[i]);
    EXPECT_NEAR(std::sqrt(upd), 0.1 * std::min(clip, norm), 1e-6);
  }
}

// AdamW with a constant gradient: m̂ = g and v̂ = g² exactly after bias
// correction, so every step moves each weight by lr·(g/(|g|+eps) + wd·w).
TEST(Clipping, AdamConstantGradientClosedForm) {
  Recipe r;
  r.method = "adamw";
  r.lr = 0.01;
  r.beta1 = 0.7;
  r.beta2 = 0.8;
  r.eps = 0.1;
  r.weightDecay = 0.5;
  Compiled c = test::compile(linearText(trainerDict(r)), test::trainingPipeline());
  ASSERT_TRUE(c.ok) << c.diagnostics;
  RefExecutor ex(c.graph, Precision::F64);
  ex.initialize(1);
  for (int t = 1; t <= 3; ++t) {
    Vec w0 = ex.getState("w").data, b0 = ex.getState("b").data;
    ex.step({});
    Vec w1 = ex.getState("w").data, b1 = ex.getState("b").data;
    for (int i = 0; i < 6; ++i) {
      double want = 0.01 * (kC[i] / (std::fabs(kC[i]) + 0.1) + 0.5 * w0[i]);
      EXPECT_NEAR(w0[i] - w1[i], want, 1e-13) << "step " << t << " w[" << i << "]";
    }
    for (int i = 0; i < 3; ++i) { // 1-D: no weight decay
      double want = 0.01 * kc[i] / (std::fabs(kc[i]) + 0.1);
      EXPECT_NEAR(b0[i] - b1[i], want, 1e-13) << "step " << t << " b[" << i << "]";
    }
  }
}

// Newton-Schulz

struct NsShape {
  int rows, cols;
};

class NewtonSchulz : public ::testing::TestWithParam<NsShape> {};

TEST_P(NewtonSchulz, MatchesLoopsAndSingularValuesInBand) {
  int m = GetParam().rows, n = GetParam().cols;
  std::string t = "tensor<" + std::to_string(m) + "x" + std::to_string(n) + "xf64>";
  // The op's output is exposed through a train.grad sink.
  std::string text = "train.model @ns {\n  train.param @x : " + t + " = normal(1.0)\n" +
                     "  train.step {\n    %x = train.read @x : " + t +
                     "\n    %o = train.newton_schulz %x : " + t +
                     "\n    train.grad %o for @x : " + t +
                     "\n    %s = train.reduce_sum %x [0, 1] : " + t +
                     " -> tensor<f64>\n    train.yield %s : tensor<f64>\n  }\n}\n";
  Compiled c = test::compile(text);
  ASSERT_TRUE(c.ok) << c.diagnostics;
  RefExecutor ex(c.graph, Precision::F64);
  ex.initialize(0);
  std::mt19937_64 rng(1000 * m + n);
  std::normal_distribution<double> normal(0.0, 3.0);
  // Gaussian, with the rows (wide) or columns (tall) scaled geometrically
  // from 1 down to 1/10 so the spectrum is spread.
  int k = std::min(m, n);
  Vec x(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      int along = m <= n ? i : j;
      x[i * n + j] = normal(rng) * std::pow(10.0, -double(along) / (k - 1));
    }
  ex.setState("x", HostTensor{{m, n}, x});
  Vec o = ex.evaluate({}).grads.at("x").data;
  expectClose(o, newtonSchulz5(x, m, n), "newton_schulz", 1e-12);

  Vec sx = singularValues(x, m, n);
  Vec so = singularValues(o, m, n);
  ASSERT_EQ(so.size(), static_cast<size_t>(std::min(m, n)));
  // The input spreads its spectrum widely; the output is squeezed into the
  // quintic's band around 1.
  EXPECT_GT(sx.back() / sx.front(), 5.0);
  // After 5 steps the quintic maps every normalised singular value in
  // [0.002, 1] into [0.6818, 1.2024] (iterate the scalar polynomial to see).
  double frob = 0;
  for (double v : x)
    frob += v * v;
  frob = std::sqrt(frob);
  EXPECT_GT(sx.front() / frob, 0.002) << "input outside the band's precondition";
  for (double s : so) {
    EXPECT_GT(s, 0.68);
    EXPECT_LT(s, 1.21);
  }
  // Same singular vectors as the input: Xᵀ O is symmetric positive
  // semi-definite (O = U f(Σ) Vᵀ with f > 0  ⇒  Xᵀ O = V Σ f(Σ) Vᵀ).
  Vec xto = matmul(transpose(x, m, n), o, n, m, n); // [n, n]
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < i; ++j)
      EXPECT_NEAR(xto[i * n + j], xto[j * n + i], 1e-9 * (1 + std::fabs(xto[i * n + j])));
  for (double e : jacobiEigenvalues(xto, n))
    EXPECT_GT(e, -1e-9);
}

INSTANTIATE_TEST_SUITE_P(Shapes, NewtonSchulz,
                         ::testing::Values(NsShape{8, 16}, NsShape{16, 8}, NsShape{32, 32}),
                         [](const ::testing::TestParamInfo<NsShape> &info) {
                           return std::to_string(info.param.rows) + "x" +
                                  std::to_string(info.param.cols);
                         });

// Determinism

std::vector<double> losses(const Compiled &c, uint64_t seed, Precision p, int steps) {
  RefExecutor ex(c.graph, p);
  ex.initialize(seed);
  std::vector<double> out;
  for (int t = 0; t < steps; ++t)
    out.push_back(ex.step(mlpInputs()).outputs.at(0));
  return out;
}

TEST(Determinism, SameSeedBitIdenticalDifferentSeedDiffers) {
  Recipe r;
  r.method = "muon";
  r.lr = 0.01;
  r.gradClip = 1.0;
  std::string text = mlpText(trainerDict(r));
  // Two independent compilations of the same text.
  Compiled a = test::compile(text, test::trainingPipeline());
  Compiled b = test::compile(text, test::trainingPipeline());
  ASSERT_TRUE(a.ok && b.ok) << a.diagnostics << b.diagnostics;
  for (Precision p : {Precision::F64, Precision::F32}) {
    std::vector<double> l1 = losses(a, 123, p, 5), l2 = losses(b, 123, p, 5);
    std::vector<double> l3 = losses(a, 124, p, 5);
    ASSERT_EQ(l1.size(), 5u);
    for (int t = 0; t < 5; ++t) {
      EXPECT_TRUE(std::isfinite(l1[t]));
      EXPECT_EQ(std::memcmp(&l1[t], &l2[t], sizeof(double)), 0)
          << "step " << t << ": " << num(l1[t]) << " vs " << num(l2[t]);
      EXPECT_NE(l1[t], l3[t]) << "step " << t;
    }
    // Training makes progress on this fixed batch.
    EXPECT_LT(l1[4], l1[0]);
  }
}

} // namespace
