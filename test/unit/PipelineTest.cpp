//===- PipelineTest.cpp - 2BW, flush and delay-EF against references -----===//
//
// The pipelined runtime (threads per stage, 1F1B, transfers) must produce the
// parameters of the update of record, computed here with the plain reference
// executor on an unpartitioned graph:
//   2BW:   x(t+1) = x(t) − γ·Opt(g(x(t−1)))
//   flush: x(t+1) = x(t) − γ·Opt(g(x(t)))          (= unpipelined training)
//   EF:    x(t+1) = x(t) − γ(t)·[u(t) + λ·(u(t) − u(t−1))], u(−1) = u(0),
//          γ(t) the scheduled learning rate of the parameter's group
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"
#include "GpuEmulator.h"
#include "stretto/Runtime/Pipeline.h"
#include "stretto/Runtime/PlanExecutor.h"


#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

using namespace stretto;

namespace {

std::string config(int stages, int micro, const std::string &optimizer = "adamw",
                   const std::string &extra = "") {
  return "[model]\nkind = \"gpt\"\nlayers = 4\nheads = 2\nd_model = 8\nseq_len = 4\n"
         "batch = 8\nvocab = 128\n[train]\noptimizer = \"" +
         optimizer + "\"\nlr = 1e-2\nweight_decay = 0.1\nstages = " + std::to_string(stages) +
         "\nmicro_batches = " + std::to_string(micro) + "\n" + extra +
         "[data]\npath = \"" STRETTO_SOURCE_DIR "/data/kjv.txt\"\n";
}

/// Imports a config and runs `passes` (a train.model pipeline) on it.
Graph compile(const std::string &toml, const std::string &passes) {
  return test::compileConfig(toml, test::modelPasses(passes));
}

const char *kTrainPasses = "train-autodiff,train-optimizer,canonicalize,cse";

std::unique_ptr<DataSource> data(const Graph &g) {
  DataConfig dc;
  dc.path = STRETTO_SOURCE_DIR "/data/kjv.txt";
  return makeDataSource(g, dc, 128);
}

std::vector<std::string> paramNames(const Graph &g) {
  std::vector<std::string> names;
  for (const StateDecl &s : g.states)
    if (s.isParam)
      names.push_back(s.name);
  return names;
}

/// Parameters start at N(0, 0.02) (biases at 0); kEps = 1e-4 is 1/200 of
/// that scale, so only elements that happen to sit near zero fall back to an
/// absolute comparison in maxRelDiff.
constexpr double kEps = 1e-4;

/// Largest |a−b| / max(|b|, eps) over every element of every parameter (a
/// NaN counts as infinite): relative, except that elements smaller than eps
/// are held to eps·tolerance in absolute terms.
double maxRelDiff(const std::map<std::string, HostTensor> &a,
                  const std::map<std::string, HostTensor> &b, const std::vector<std::string> &names,
                  double eps) {
  double worst = 0;
  std::string where = "-";
  for (const std::string &n : names) {
    const auto &x = a.at(n).data, &y = b.at(n).data;
    EXPECT_EQ(x.size(), y.size()) << n;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      double d = std::fabs(x[i] - y[i]) / std::max(std::fabs(y[i]), eps);
      if (!(d <= worst)) {
        worst = std::isnan(d) ? HUGE_VAL : d;
        where = n + "[" + std::to_string(i) + "] = " + std::to_string(y[i]);
      }
    }
  }
  return worst;
}

/// The learning rate γ(t) of parameter `name` at update t (1-based).
using LrAt = std::function<double(const std::string &name, int t)>;

/// The delayed update of record on an unpartitioned graph: gradients of step
/// u at x(u−2) (the previous parameters), applied to x(u−1). With `lambda`,
/// the delay-EF formula x(t+1) = x(t) − γ(t)·[u(t) + λ·(u(t) − u(t−1))],
/// u(−1) = u(0), on the update direction u(t) = (x(t) − x_plain(t+1)) / γ(t)
/// of the plain update x_plain(t+1) = x(t) − γ(t)·u(t), with γ(t) from
/// `lrAt` (the schedule and each parameter's group). Returns the final
/// parameters and the losses.
std::pair<std::map<std::string, HostTensor>, std::vector<double>>
delayedReference(const Graph &g, DataSource &d, int steps, int micro, Precision p,
                 double lambda = -1, const LrAt &lrAt = nullptr) {
  RefExecutor ex(g, p);
  ex.initialize(1337);
  std::vector<std::string> names = paramNames(g);
  std::map<std::string, HostTensor> prev, cur, uPrev;
  for (const auto &n : names)
    prev[n] = cur[n] = ex.getState(n);
  std::vector<double> losses;
  for (int u = 0; u < steps; ++u) {
    for (const auto &n : names)
      ex.setState(n, prev[n]);
    double loss = 0;
    for (int k = 0; k < micro; ++k)
      loss += ex.microStep(d.batch(Split::Train, u, k)).outputs.at(0);
    losses.push_back(loss / micro);
    for (const auto &n : names)
      ex.setState(n, cur[n]);
    ex.update();
    std::map<std::string, HostTensor> next;
    for (const auto &n : names) {
      next[n] = ex.getState(n);
      if (lambda >= 0) {
        const double lr = lrAt(n, u + 1);
        HostTensor dir = cur[n];
        for (size_t i = 0; i < dir.data.size(); ++i)
          dir.data[i] = (cur[n].data[i] - next[n].data[i]) / lr;
        HostTensor up = u == 0 ? dir : uPrev[n];
        for (size_t i = 0; i < dir.data.size(); ++i)
          next[n].data[i] = cur[n].data[i] - lr * (dir.data[i] + lambda * (dir.data[i] - up.data[i]));
        uPrev[n] = dir;
        ex.setState(n, next[n]);
      }
    }
    prev = cur;
    cur = next;
  }
  return {cur, losses};
}

struct Shape2 {
  int stages, micro;
};

class TwoBW : public testing::TestWithParam<Shape2> {};

// 2BW over S stages and m micro-batches gives the parameters of the delayed
// update of record after 20 steps, to 2e-6 relative (measured: bit for bit),
// and each step's loss is the loss at x(t−1).
TEST_P(TwoBW, MatchesDelayedReference) {
  auto [S, m] = GetParam();
  Graph piped = compile(config(S, m), std::string("train-partition,") + kTrainPasses +
                                          ",train-2bw,canonicalize,cse");
  Graph plain = compile(config(1, m), kTrainPasses);
  auto src = data(plain);
  PipelineOptions o;
  o.steps = 20;
  o.microBatches = m;
  o.schedule = Schedule::TwoBW;
  PipelineResult r = runPipeline(piped, *src, o);
  auto [ref, losses] = delayedReference(plain, *src, 20, m, Precision::F32);
  EXPECT_LT(maxRelDiff(r.states, ref, paramNames(plain), kEps), 2e-6);
  ASSERT_EQ(r.losses.size(), losses.size());
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_NEAR(r.losses[i], losses[i], 1e-5 * (1 + std::fabs(losses[i]))) << "step " << i;
  // Two weight versions per parameter on every stage, no EF memory.
  for (const StageReport &st : r.stages) {
    EXPECT_EQ(st.weightVersions, 2 * st.parameters) << "stage " << st.stage;
    EXPECT_EQ(st.efStates, 0);
  }
  EXPECT_EQ(static_cast<int>(r.stages.size()), S);
}

INSTANTIATE_TEST_SUITE_P(Pipeline, TwoBW,
                         testing::Values(Shape2{1, 1}, Shape2{1, 4}, Shape2{1, 8}, Shape2{2, 1},
                                         Shape2{2, 4}, Shape2{2, 8}, Shape2{4, 1}, Shape2{4, 4},
                                         Shape2{4, 8}),
                         [](const testing::TestParamInfo<Shape2> &i) {
                           return "S" + std::to_string(i.param.stages) + "_m" +
                                  std::to_string(i.param.micro);
                         });

class Flush : public testing::TestWithParam<Shape2> {};

// The synchronous pipeline (flush) trains exactly like the unpipelined model.
TEST_P(Flush, EqualsUnpipelinedTraining) {
  auto [S, m] = GetParam();
  Graph piped = compile(config(S, m), std::string("train-partition,") + kTrainPasses);
  Graph plain = compile(config(1, m), kTrainPasses);
  auto src = data(plain);
  PipelineOptions o;
  o.steps = 20;
  o.microBatches = m;
  o.schedule = Schedule::Flush;
  PipelineResult r = runPipeline(piped, *src, o);
  RefExecutor ex(plain, Precision::F32);
  ex.initialize(1337);
  std::vector<double> losses;
  for (int u = 0; u < 20; ++u) {
    double loss = 0;
    for (int k = 0; k < m; ++k)
      loss += ex.microStep(src->batch(Split::Train, u, k)).outputs.at(0);
    ex.update();
    losses.push_back(loss / m);
  }
  std::map<std::string, HostTensor> ref;
  for (const auto &n : paramNames(plain))
    ref[n] = ex.getState(n);
  EXPECT_LT(maxRelDiff(r.states, ref, paramNames(plain), kEps), 2e-6);
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_NEAR(r.losses[i], losses[i], 1e-5 * (1 + std::fabs(losses[i])));
  for (const StageReport &st : r.stages)
    EXPECT_EQ(st.weightVersions, st.parameters); // one version without 2BW
}

INSTANTIATE_TEST_SUITE_P(Pipeline, Flush,
                         testing::Values(Shape2{2, 1}, Shape2{2, 4}, Shape2{4, 4}, Shape2{4, 8}),
                         [](const testing::TestParamInfo<Shape2> &i) {
                           return "S" + std::to_string(i.param.stages) + "_m" +
                                  std::to_string(i.param.micro);
                         });

// Global-norm clipping of a partitioned model: each stage sums its own
// parameters' squared gradients and train.stage_sum adds the stages' sums
// (an all-reduce of the stages), so the pipeline clips exactly as the
// unpipelined model does -- by the norm over every parameter. SGD: the
// stages sum the squares in another order, and AdamW would turn that
// rounding difference into O(lr) steps of the key bias (whose gradient is
// rounding noise: see CompiledStagesMatchReferenceStages).
TEST(Pipeline, ClipsByTheGlobalNormAcrossStages) {
  const std::string clip = "grad_clip = 0.05\n"; // well below the gradients' norm
  for (auto [S, m] : {Shape2{2, 2}, Shape2{4, 2}}) {
    for (Schedule sched : {Schedule::Flush, Schedule::TwoBW}) {
      const bool twoBW = sched == Schedule::TwoBW;
      Graph piped = compile(config(S, m, "sgd", clip + (twoBW ? "sync = \"2bw\"\n" : "")),
                            std::string("train-partition,") + kTrainPasses +
                                (twoBW ? ",train-2bw" : ""));
      Graph plain = compile(config(1, m, "sgd", clip), kTrainPasses);
      Graph unclipped = compile(config(1, m, "sgd"), kTrainPasses);
      auto src = data(plain);
      PipelineOptions o;
      o.steps = 10;
      o.microBatches = m;
      o.schedule = sched;
      PipelineResult r = runPipeline(piped, *src, o);
      // The unpipelined model, synchronous (flush) or with the delay (2BW).
      auto reference = [&](const Graph &g) {
        if (twoBW)
          return delayedReference(g, *src, 10, m, Precision::F32).first;
        RefExecutor ex(g, Precision::F32);
        ex.initialize(1337);
        for (int u = 0; u < 10; ++u) {
          for (int k = 0; k < m; ++k)
            ex.microStep(src->batch(Split::Train, u, k));
          ex.update();
        }
        std::map<std::string, HostTensor> states;
        for (const auto &n : paramNames(g))
          states[n] = ex.getState(n);
        return states;
      };
      EXPECT_LT(maxRelDiff(r.states, reference(plain), paramNames(plain), kEps), 2e-6)
          << "S=" << S << (twoBW ? " 2BW" : " flush");
      // Clipping is active: without it the parameters end elsewhere.
      std::map<std::string, HostTensor> free = reference(unclipped);
      EXPECT_GT(maxRelDiff(r.states, free, paramNames(plain), kEps), 1e-3);
    }
  }
}

// Stages on the compiled runtime (PlanExecutor: one plan over a stage's
// forward and backward parts, an arena per micro-batch in flight, reads
// snapshotted, 2BW reads redirected) train like stages on the reference
// executor: flush and 2BW with delay-EF, over several stages and
// micro-batches. SGD: AdamW/Muon would turn the rounding noise of the key
// bias's gradient (zero in exact arithmetic) into O(1) steps.
TEST(Pipeline, CompiledStagesMatchReferenceStages) {
  struct Case {
    int stages, micro;
    Schedule schedule;
    const char *extra, *passes;
  };
  std::string twoBW = std::string("train-partition,") + kTrainPasses +
                      ",train-2bw,train-delay-ef{lambda=0.5},canonicalize,cse";
  std::string flush = std::string("train-partition,") + kTrainPasses;
  for (const Case &c : {Case{2, 4, Schedule::TwoBW, "sync = \"2bw\"\n", twoBW.c_str()},
                        Case{4, 2, Schedule::TwoBW, "sync = \"2bw\"\n", twoBW.c_str()},
                        Case{3, 4, Schedule::Flush, "", flush.c_str()}}) {
    SCOPED_TRACE("S=" + std::to_string(c.stages) + " m=" + std::to_string(c.micro));
    Graph piped = compile(config(c.stages, c.micro, "sgd", c.extra), c.passes);
    std::string why;
    ASSERT_TRUE(PlanExecutor::supports(piped, why)) << why;
    // 0: reference, 1: compiled on the host, 2: the CUDA device's code on
    // an emulated GPU (one per stage, each built on its stage's thread).
    PipelineResult r[3];
    for (int mode = 0; mode < 3; ++mode) {
      auto src = data(piped);
      PipelineOptions o;
      o.steps = 8;
      o.microBatches = c.micro;
      o.schedule = c.schedule;
      o.compiled = mode == 1;
      if (mode == 2)
        o.executorFactory = [](const Graph &g) -> std::unique_ptr<Executor> {
          return emulatedGpuExecutor(g, {});
        };
      r[mode] = runPipeline(piped, *src, o);
    }
    std::vector<std::string> names;
    for (auto &[name, t] : r[0].states)
      names.push_back(name); // every state: parameters, versions, EF memories
    for (int mode = 1; mode < 3; ++mode) {
      SCOPED_TRACE(mode == 1 ? "compiled" : "emulated GPU");
      ASSERT_EQ(r[0].losses.size(), 8u);
      ASSERT_EQ(r[mode].losses.size(), 8u);
      for (size_t i = 0; i < 8; ++i)
        EXPECT_NEAR(r[0].losses[i], r[mode].losses[i], 1e-5 * (1 + std::fabs(r[0].losses[i])))
            << "step " << i;
      // f32 on both sides, different summation orders: 8.7e-5 at worst.
      EXPECT_LT(maxRelDiff(r[mode].states, r[0].states, names, kEps), 5e-4);
    }
  }
}

// 2BW differs from synchronous training: the delay is real. Step 2 of 2BW
// still evaluates x(0); the synchronous step 2 evaluates x(1).
TEST(Pipeline, TwoBWIsDelayed) {
  Graph piped = compile(config(2, 2), std::string("train-partition,") + kTrainPasses +
                                          ",train-2bw,canonicalize,cse");
  Graph flush = compile(config(2, 2), std::string("train-partition,") + kTrainPasses);
  Graph plain = compile(config(1, 2), kTrainPasses);
  auto src = data(flush);
  PipelineOptions o;
  o.steps = 5;
  o.microBatches = 2;
  o.schedule = Schedule::TwoBW;
  PipelineResult a = runPipeline(piped, *src, o);
  o.schedule = Schedule::Flush;
  PipelineResult b = runPipeline(flush, *src, o);
  RefExecutor x0(plain, Precision::F32);
  x0.initialize(1337);
  double step2AtX0 = (x0.evaluate(src->batch(Split::Train, 1, 0)).outputs[0] +
                      x0.evaluate(src->batch(Split::Train, 1, 1)).outputs[0]) / 2;
  EXPECT_EQ(a.losses[0], b.losses[0]); // both at x(0)
  EXPECT_NEAR(a.losses[1], step2AtX0, 1e-6);
  EXPECT_GT(std::fabs(b.losses[1] - step2AtX0), 1e-4);
  EXPECT_GT(maxRelDiff(a.states, b.states, paramNames(flush), kEps), 1e-6);
}

// Resuming a 2BW pipeline from the states after step 4 gives, bit for bit,
// the states and losses of an uninterrupted 10-step run (both weight
// versions and the optimizer state travel in the resume state).
TEST(Pipeline, ResumeIsBitIdentical) {
  Graph piped = compile(config(2, 2), std::string("train-partition,") + kTrainPasses +
                                          ",train-2bw,canonicalize,cse");
  auto src = data(piped);
  PipelineOptions o;
  o.steps = 10;
  o.microBatches = 2;
  o.schedule = Schedule::TwoBW;
  PipelineResult whole = runPipeline(piped, *src, o);
  o.steps = 4;
  PipelineResult first = runPipeline(piped, *src, o);
  o.steps = 10;
  o.startStep = 4;
  o.resumeStates = first.states;
  PipelineResult rest = runPipeline(piped, *src, o);
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), rest.losses.begin(), rest.losses.end());
  EXPECT_EQ(joined, whole.losses);
  ASSERT_EQ(rest.states.size(), whole.states.size());
  for (auto &[name, t] : whole.states)
    EXPECT_EQ(t.data, rest.states.at(name).data) << name;
}

class DelayEF : public testing::TestWithParam<const char *> {};

// Delay-EF on top of 2BW follows its formula for every base optimizer (f64),
// under a warm-up + cosine schedule and, for Muon, a matrix learning rate of
// its own: γ(t) changes every step and between groups, so an EF memory that
// held the applied step γ·u instead of the direction u, or a correction
// scaled by another group's learning rate, is off the formula (under one
// constant learning rate both are indistinguishable from the formula).
TEST_P(DelayEF, MatchesFormulaUnderTheSchedule) {
  std::string opt = GetParam();
  const double lr = 1e-2, muonLr = 3e-2, minRatio = 0.1;
  const int warmup = 3, total = 12;
  std::string recipe = "muon_lr = 3e-2\nschedule = \"cosine\"\nwarmup_steps = 3\nsteps = 12\n";
  // An f64 model: its learning-rate constants and schedule are f64 too, so
  // γ(t) below is the graph's to f64 rounding.
  auto f64 = [](std::string toml) { return toml.replace(0, 8, "[model]\ndtype = \"f64\"\n"); };
  Graph piped = compile(f64(config(2, 2, opt, recipe + "ef_lambda = 0.5\n")),
                        std::string("train-partition,") + kTrainPasses +
                            ",train-2bw,train-delay-ef,canonicalize,cse");
  Graph plain = compile(f64(config(1, 2, opt, recipe)), kTrainPasses);
  // γ(t) = base·min(1, t/warmup)·(r + (1−r)·(1 + cos(π·p))/2), p = (t −
  // warmup)/(total − warmup) clamped to [0, 1]; base is muon_lr for Muon's
  // matrices (the parameters with a muon_m state), lr for the rest.
  std::set<std::string> muonParams;
  for (const StateDecl &s : plain.states)
    if (s.name.size() > 7 && s.name.compare(s.name.size() - 7, 7, ".muon_m") == 0)
      muonParams.insert(s.of);
  EXPECT_EQ(muonParams.empty(), opt != "muon");
  std::vector<double> multipliers;
  LrAt lrAt = [&](const std::string &name, int t) {
    double mult = std::min(1.0, t / static_cast<double>(warmup));
    double p = std::clamp((t - warmup) / static_cast<double>(total - warmup), 0.0, 1.0);
    mult *= minRatio + (1 - minRatio) * (0.5 * (1 + std::cos(M_PI * p)));
    if (multipliers.size() < static_cast<size_t>(t))
      multipliers.push_back(mult);
    return (muonParams.count(name) ? muonLr : lr) * mult;
  };
  auto src = data(plain);
  PipelineOptions o;
  o.steps = total;
  o.microBatches = 2;
  o.schedule = Schedule::TwoBW;
  o.precision = Precision::F64;
  PipelineResult r = runPipeline(piped, *src, o);
  auto [ref, losses] = delayedReference(plain, *src, total, 2, Precision::F64, 0.5, lrAt);
  // The schedule is not constant: warm-up, then cosine decay to 0.1.
  ASSERT_EQ(multipliers.size(), static_cast<size_t>(total));
  EXPECT_NEAR(multipliers[0], 1.0 / 3, 1e-7);
  EXPECT_NEAR(multipliers[warmup - 1], 1.0, 1e-7);
  EXPECT_NEAR(multipliers[total - 1], minRatio, 1e-7);
  // Measured: 3.4e-11 at worst over the three optimizers (an element of
  // the attention's key bias, whose exact gradient is zero).
  EXPECT_LT(maxRelDiff(r.states, ref, paramNames(plain), kEps), 1e-9);
  for (const StageReport &st : r.stages) {
    EXPECT_EQ(st.weightVersions, 2 * st.parameters);
    EXPECT_EQ(st.efStates, st.parameters); // one EF memory per parameter
  }
}

INSTANTIATE_TEST_SUITE_P(Pipeline, DelayEF, testing::Values("sgd", "adamw", "muon"));

// A failing stage stops the run with its error; no thread stays blocked.
TEST(Pipeline, StageErrorPropagates) {
  Graph piped = compile(config(2, 2), std::string("train-partition,") + kTrainPasses);
  // Data with ids outside a 4-entry vocabulary fails in stage 0's embedding.
  struct BadData : DataSource {
    std::map<std::string, HostTensor> batch(Split, uint64_t, int64_t) override {
      return {{"tokens", HostTensor{{4, 4}, std::vector<double>(16, 1000.0)}},
              {"targets", HostTensor{{4, 4}, std::vector<double>(16, 0.0)}}};
    }
    std::string describe() const override { return "bad"; }
    int64_t tokensPerBatch() const override { return 16; }
  } bad;
  PipelineOptions o;
  o.steps = 3;
  o.microBatches = 2;
  try {
    runPipeline(piped, bad, o);
    FAIL() << "no error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("stage 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

} // namespace
