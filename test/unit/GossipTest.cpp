//===- GossipTest.cpp - train-gossip and its runtime ----------------------===//
//
// The invariants of the gossip outer optimizer (docs/design.md §4.6): the
// complete graph with exact averaging is DiLoCo (checked against a direct
// implementation of Nesterov outer SGD written here, on the reference
// executor), symmetric mixing preserves the mean, with H = 0 and γ = 0 the
// consensus distance decays; plus the runtime's promises: per-replica local
// steps, peer draws, the simulated clock and byte counts, and a killed
// replica that hangs nobody.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "GpuEmulator.h"
#include "stretto/Compiler/Lowering.h"
#include "stretto/Runtime/Communicator.h"
#include "stretto/Runtime/Gossip.h"
#include "stretto/Transforms/Passes.h"
#include "stretto/Transforms/Pipelines.h"

#include "mlir/Transforms/Passes.h"

#include "stretto/Runtime/PlanExecutor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <tuple>
#include <set>

using namespace stretto;

namespace {

// A two-layer classifier on 4 inputs, 3 classes; `T` is f32 or f64.
std::string mlp(const std::string &T, const std::string &trainer) {
  std::string s = R"(
train.model @mlp attributes {trainer = {TRAINER}} {
  train.param @w1 : tensor<4x6xT> = normal(0.5)
  train.param @b1 : tensor<6xT> = zeros
  train.param @w2 : tensor<6x3xT> = normal(0.5)
  train.step {
    %x = train.input "x" : tensor<5x4xT>
    %y = train.input "y" : tensor<5xi32>
    %w1 = train.read @w1 : tensor<4x6xT>
    %b1 = train.read @b1 : tensor<6xT>
    %w2 = train.read @w2 : tensor<6x3xT>
    %h = train.matmul %x, %w1 : tensor<5x4xT>, tensor<4x6xT> -> tensor<5x6xT>
    %hb = train.add %h, %b1 : tensor<5x6xT>, tensor<6xT> -> tensor<5x6xT>
    %a = train.tanh %hb : tensor<5x6xT>
    %o = train.matmul %a, %w2 : tensor<5x6xT>, tensor<6x3xT> -> tensor<5x3xT>
    %l = train.cross_entropy %o, %y : tensor<5x3xT>, tensor<5xi32> -> tensor<T>
    train.yield %l : tensor<T>
  }
}
)";
  for (size_t p; (p = s.find("TRAINER")) != std::string::npos;)
    s.replace(p, 7, trainer);
  for (size_t p; (p = s.find("xT>")) != std::string::npos;)
    s.replace(p, 3, "x" + T + ">");
  for (size_t p; (p = s.find("<T>")) != std::string::npos;)
    s.replace(p, 3, "<" + T + ">");
  return s;
}

test::PipelineFn withGossip() {
  return [](mlir::PassManager &pm) {
    buildTrainingPipeline(pm);
    pm.nest<train::ModelOp>().addPass(train::createTrainGossip());
  };
}

Graph compileOrDie(const std::string &src, const test::PipelineFn &fn) {
  test::Compiled c = test::compile(src, fn);
  EXPECT_TRUE(c.ok) << c.diagnostics;
  return c.graph;
}

std::unique_ptr<DataSource> data(const Graph &g) {
  DataConfig dc;
  dc.format = "synthetic";
  dc.seed = 7;
  return makeDataSource(g, dc, 3);
}

const char *kParams[] = {"w1", "b1", "w2"};

/// Runs `fn` on another thread and fails (exiting: a stuck thread cannot be
/// cancelled) when it takes longer than `seconds` — the no-hang guarantee.
template <typename F> auto withDeadline(double seconds, F fn) {
  auto fut = std::async(std::launch::async, fn);
  if (fut.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << "the gossip run hung";
    std::fprintf(stderr, "the gossip run hung; exiting\n");
    std::_Exit(1);
  }
  return fut.get();
}

/// DiLoCo written directly (Douillard et al., 2023; docs/design.md §4.5): R
/// replicas of the inner graph start each round from θ, take H inner steps on
/// their shards (replica r's k-th batch is index k·R + r, as in runGossip) and
/// keep their inner optimizer state; Δ = mean_r(θ − θ_r); m ← μm + Δ;
/// θ ← θ − η(Δ + μm). Returns θ after each round.
std::vector<std::map<std::string, std::vector<double>>>
directDiLoCo(const Graph &inner, DataSource &src, int R, int64_t H, int64_t rounds, double eta,
             double mu, Precision precision) {
  std::vector<std::unique_ptr<RefExecutor>> ex;
  for (int r = 0; r < R; ++r) {
    ex.push_back(std::make_unique<RefExecutor>(inner, precision));
    ex.back()->initialize(1337);
  }
  std::map<std::string, std::vector<double>> theta, m;
  for (const char *p : kParams) {
    theta[p] = ex[0]->getState(p).data;
    m[p].assign(theta[p].size(), 0.0);
  }
  std::vector<std::map<std::string, std::vector<double>>> out;
  std::vector<int64_t> k(R, 0);
  for (int64_t t = 0; t < rounds; ++t) {
    std::map<std::string, std::vector<double>> delta;
    for (const char *p : kParams)
      delta[p].assign(theta[p].size(), 0.0);
    for (int r = 0; r < R; ++r) {
      for (const char *p : kParams)
        ex[r]->setState(p, HostTensor{ex[r]->getState(p).shape, theta[p]});
      for (int64_t s = 0; s < H; ++s)
        ex[r]->step(src.batch(Split::Train, static_cast<uint64_t>(k[r]++ * R + r), 0));
      for (const char *p : kParams) {
        std::vector<double> local = ex[r]->getState(p).data;
        for (size_t e = 0; e < local.size(); ++e)
          delta[p][e] += (theta[p][e] - local[e]) / R;
      }
    }
    for (const char *p : kParams)
      for (size_t e = 0; e < theta[p].size(); ++e) {
        m[p][e] = mu * m[p][e] + delta[p][e];
        theta[p][e] -= eta * (delta[p][e] + mu * m[p][e]);
      }
    out.push_back(theta);
  }
  return out;
}

void checkDiLoCo(const std::string &T, Precision precision, double tol) {
  const int R = 3;
  const int64_t H = 4, rounds = 3;
  std::string trainer = "optimizer = \"adamw\", lr = 0.05, replicas = 3, sync = \"diloco\", "
                        "local_steps = 4, outer_lr = 0.7, outer_momentum = 0.9";
  Graph g = compileOrDie(mlp(T, trainer), withGossip());
  Graph inner = compileOrDie(mlp(T, trainer), test::trainingPipeline());
  ASSERT_FALSE(g.outer.empty());
  ASSERT_EQ(g.outerLoop.topology, "complete");
  auto src = data(g);

  GossipOptions opt;
  opt.rounds = rounds;
  opt.precision = precision;
  std::mutex mu;
  std::map<std::pair<int, int64_t>, std::map<std::string, HostTensor>> seen;
  opt.onRoundEnd = [&](int r, int64_t t, const std::map<std::string, HostTensor> &p) {
    std::lock_guard<std::mutex> lock(mu);
    seen[{r, t}] = p;
  };
  GossipResult res = withDeadline(60, [&] { return runGossip(g, *src, opt); });
  auto expected = directDiLoCo(inner, *src, R, H, rounds, 0.7, 0.9, precision);

  double worst = 0, scale = 0;
  for (int64_t t = 0; t < rounds; ++t)
    for (int r = 0; r < R; ++r)
      for (const char *p : kParams) {
        const std::vector<double> &got = seen.at({r, t}).at(p).data;
        const std::vector<double> &want = expected[t].at(p);
        ASSERT_EQ(got.size(), want.size());
        for (size_t e = 0; e < got.size(); ++e) {
          worst = std::max(worst, std::fabs(got[e] - want[e]));
          scale = std::max(scale, std::fabs(want[e]));
        }
      }
  EXPECT_LE(worst, tol * std::max(1.0, scale)) << "gossip on the complete graph vs DiLoCo";
  // The outer step moved the parameters: the comparison is not vacuous.
  double moved = 0;
  for (const char *p : kParams)
    for (size_t e = 0; e < expected[0].at(p).size(); ++e)
      moved = std::max(moved, std::fabs(expected[rounds - 1].at(p)[e] - expected[0].at(p)[e]));
  EXPECT_GT(moved, 1e-3);
}

} // namespace

// The complete graph with exact averaging is DiLoCo with Nesterov outer SGD
// (μ = γ), exactly: to rounding in f64 over 3 rounds, every replica.
TEST(Gossip, CompleteGraphIsDiLoCoF64) { checkDiLoCo("f64", Precision::F64, 1e-12); }

// The same in f32, to f32 rounding over 3 rounds.
TEST(Gossip, CompleteGraphIsDiLoCoF32) { checkDiLoCo("f32", Precision::F32, 2e-5); }

// Placing γ after the mixing (the published transcription) is a different
// method: on the complete graph it no longer matches DiLoCo, which shows the
// equivalence test above can fail.
TEST(Gossip, AfterMixingPlacementDiffersFromDiLoCo) {
  std::string trainer = "optimizer = \"adamw\", lr = 0.05, replicas = 3, sync = \"diloco\", "
                        "local_steps = 4, outer_lr = 0.7, outer_momentum = 0.9, "
                        "gamma_placement = \"after-mixing\"";
  Graph g = compileOrDie(mlp("f64", trainer), withGossip());
  Graph inner = compileOrDie(mlp("f64", trainer), test::trainingPipeline());
  auto src = data(g);
  GossipOptions opt;
  opt.rounds = 3;
  opt.precision = Precision::F64;
  GossipResult res = withDeadline(60, [&] { return runGossip(g, *src, opt); });
  auto expected = directDiLoCo(inner, *src, 3, 4, 3, 0.7, 0.9, Precision::F64);
  double worst = 0;
  for (const char *p : kParams)
    for (size_t e = 0; e < expected[2].at(p).size(); ++e)
      worst = std::max(worst, std::fabs(res.meanParams.at(p).data[e] - expected[2].at(p)[e]));
  EXPECT_GT(worst, 1e-6);
}

// The compiled runtime (PlanExecutor) runs the replicas, their gossip
// exchanges and the outer optimizer like the reference executor: same round
// losses and mean parameters, to f32 rounding, on a sparse topology with
// per-replica local steps.
TEST(Gossip, CompiledRuntimeMatchesTheReference) {
  std::string trainer = "optimizer = \"adamw\", lr = 0.05, replicas = 4, sync = \"gossip\", "
                        "topology = \"ring\", local_steps = array<i64: 3, 2, 3, 1>, "
                        "outer_lr = 0.7, outer_momentum = 0.9, gossip_alpha = 0.5";
  Graph g = compileOrDie(mlp("f32", trainer), withGossip());
  std::string why;
  ASSERT_TRUE(PlanExecutor::supports(g, why)) << why;
  // 0: reference, 1: compiled on the host, 2: the CUDA device's code on an
  // emulated GPU (the exchanges go through the host).
  GossipResult res[3];
  for (int mode = 0; mode < 3; ++mode) {
    auto src = data(g);
    GossipOptions opt;
    opt.rounds = 4;
    opt.evalInterval = 2;
    opt.compiled = mode == 1;
    if (mode == 2)
      opt.executorFactory = [](const Graph &gr) -> std::unique_ptr<Executor> {
        return emulatedGpuExecutor(gr, {});
      };
    res[mode] = withDeadline(60, [&] { return runGossip(g, *src, opt); });
  }
  for (int mode = 1; mode < 3; ++mode) {
    SCOPED_TRACE(mode == 1 ? "compiled" : "emulated GPU");
    ASSERT_EQ(res[0].rounds.size(), 4u);
    ASSERT_EQ(res[mode].rounds.size(), 4u);
    EXPECT_GE(res[mode].rounds[1].valLoss, 0.0);
    for (size_t t = 0; t < res[0].rounds.size(); ++t) {
      EXPECT_NEAR(res[0].rounds[t].loss, res[mode].rounds[t].loss, 1e-5) << "round " << t;
      EXPECT_NEAR(res[0].rounds[t].valLoss, res[mode].rounds[t].valLoss, 1e-5) << "round " << t;
    }
    for (const char *p : kParams)
      for (size_t e = 0; e < res[0].meanParams.at(p).data.size(); ++e)
        ASSERT_NEAR(res[0].meanParams.at(p).data[e], res[mode].meanParams.at(p).data[e], 1e-5)
            << p << "[" << e << "]";
  }
}

// Symmetric mixing preserves the mean of the z_i: for every exchange of
// every round, Σ_i mixed_i = Σ_i z_i, on every sparse topology, with
// different local steps per replica. And it mixes: in every exchange the
// spread Σ_i ||z_i − z̄||² shrinks (mixing toward the neighbours with
// α = 0.8 is a contraction off the mean), so the identity, which preserves
// the mean too, fails.
TEST(Gossip, MixingPreservesTheMean) {
  for (const char *topo : {"ring", "exponential", "one-peer", "two-peer"}) {
    SCOPED_TRACE(topo);
    std::string trainer = std::string("optimizer = \"sgd\", lr = 0.1, replicas = 6, sync = ") +
                          "\"gossip\", topology = \"" + topo +
                          "\", local_steps = array<i64: 2, 1, 3, 2, 1, 2>, outer_momentum = 0.5, "
                          "gossip_alpha = 0.8";
    Graph g = compileOrDie(mlp("f64", trainer), withGossip());
    auto src = data(g);
    GossipOptions opt;
    opt.rounds = 4;
    opt.precision = Precision::F64;
    opt.distinctInit = true;
    std::mutex mu;
    // (round, exchange) -> each replica's (z, mixed)
    std::map<std::pair<int64_t, int>, std::vector<std::pair<HostTensor, HostTensor>>> seen;
    opt.onMix = [&](int, int64_t t, int tag, const HostTensor &z, const HostTensor &mixed) {
      std::lock_guard<std::mutex> lock(mu);
      seen[{t, tag}].emplace_back(z, mixed);
    };
    withDeadline(60, [&] { return runGossip(g, *src, opt); });
    ASSERT_EQ(seen.size(), 4u * 3u); // rounds × parameters
    double worst = 0, worstRatio = 0;
    for (auto &[key, values] : seen) {
      ASSERT_EQ(values.size(), 6u); // every replica
      size_t n = values.front().first.data.size();
      std::vector<double> zs(n, 0.0), ms(n, 0.0);
      for (auto &[z, m] : values)
        for (size_t e = 0; e < n; ++e)
          zs[e] += z.data[e], ms[e] += m.data[e];
      for (size_t e = 0; e < n; ++e)
        worst = std::max(worst, std::fabs(zs[e] - ms[e]) / std::max(std::fabs(zs[e]), 1.0));
      double zSpread = 0, mSpread = 0;
      for (auto &[z, m] : values)
        for (size_t e = 0; e < n; ++e) {
          double mean = zs[e] / 6;
          zSpread += (z.data[e] - mean) * (z.data[e] - mean);
          mSpread += (m.data[e] - mean) * (m.data[e] - mean);
        }
      ASSERT_GT(zSpread, 0.0) << "the replicas agree before mixing: nothing to check";
      worstRatio = std::max(worstRatio, mSpread / zSpread);
    }
    EXPECT_LT(worst, 1e-12) << "the sum over replicas changed";
    EXPECT_LT(worstRatio, 0.99) << "an exchange did not bring the replicas closer";
  }
}

// With H = 0 and γ = 0 the outer round is pure gossip averaging: the
// consensus distance of replicas that start apart decays on the ring and the
// exponential graph (faster on the latter, whose spectral gap is larger).
TEST(Gossip, ConsensusDecaysWithoutLocalSteps) {
  std::map<std::string, double> ratio;
  for (const char *topo : {"ring", "exponential"}) {
    SCOPED_TRACE(topo);
    std::string trainer = std::string("optimizer = \"sgd\", lr = 0.1, replicas = 8, sync = ") +
                          "\"gossip\", topology = \"" + topo +
                          "\", local_steps = 0, outer_momentum = 0.0";
    Graph g = compileOrDie(mlp("f64", trainer), withGossip());
    auto src = data(g);
    GossipOptions opt;
    opt.rounds = 6;
    opt.precision = Precision::F64;
    opt.distinctInit = true;
    GossipResult res = withDeadline(60, [&] { return runGossip(g, *src, opt); });
    ASSERT_EQ(res.rounds.size(), 6u);
    for (size_t t = 1; t < res.rounds.size(); ++t)
      EXPECT_LT(res.rounds[t].consensus, res.rounds[t - 1].consensus) << "round " << t;
    EXPECT_GT(res.rounds.front().consensus, 0.0);
    ratio[topo] = res.rounds.back().consensus / res.rounds.front().consensus;
    EXPECT_EQ(res.rounds.back().localSteps, 0);
  }
  EXPECT_LT(ratio["ring"], 0.5);
  EXPECT_LT(ratio["exponential"], ratio["ring"]);
}

// Replica r takes its own H_r local steps per round: counted by the executor
// reports and by the batches each replica drew from the data source.
TEST(Gossip, PerReplicaLocalStepsAreHonoured) {
  class Counting : public DataSource {
  public:
    Counting(DataSource &inner, int R) : inner(inner), R(R), counts(R, 0) {}
    std::map<std::string, HostTensor> batch(Split s, uint64_t i, int64_t part) override {
      if (s == Split::Train)
        ++counts[i % R];
      return inner.batch(s, i, part);
    }
    std::string describe() const override { return inner.describe(); }
    int64_t tokensPerBatch() const override { return inner.tokensPerBatch(); }
    DataSource &inner;
    int R;
    std::vector<int64_t> counts;
  };
  std::string trainer = "optimizer = \"sgd\", lr = 0.1, replicas = 3, sync = \"gossip\", "
                        "topology = \"one-peer\", local_steps = array<i64: 3, 1, 2>";
  Graph g = compileOrDie(mlp("f32", trainer), withGossip());
  ASSERT_EQ(g.outerLoop.localSteps, (std::vector<int64_t>{3, 1, 2}));
  auto src = data(g);
  Counting counting(*src, 3);
  GossipOptions opt;
  opt.rounds = 5;
  GossipResult res = withDeadline(60, [&] { return runGossip(g, counting, opt); });
  EXPECT_EQ(res.replicas[0].localSteps, 15);
  EXPECT_EQ(res.replicas[1].localSteps, 5);
  EXPECT_EQ(res.replicas[2].localSteps, 10);
  EXPECT_EQ(counting.counts, (std::vector<int64_t>{15, 5, 10}));
  EXPECT_EQ(res.rounds.back().localSteps, 30);
}

// Peer draws: symmetric, the degrees each topology promises, matchings that
// change from round to round, dead replicas nobody's peer.
TEST(Gossip, PeerDraws) {
  std::vector<bool> all(8, true);
  auto symmetric = [](const std::vector<std::vector<int>> &p) {
    for (size_t i = 0; i < p.size(); ++i)
      for (int j : p[i]) {
        if (j == static_cast<int>(i))
          return false;
        if (std::find(p[j].begin(), p[j].end(), static_cast<int>(i)) == p[j].end())
          return false;
      }
    return true;
  };
  for (int64_t t = 0; t < 5; ++t) {
    auto complete = drawPeers(Topology::Complete, all, 1, t);
    auto ring = drawPeers(Topology::Ring, all, 1, t);
    auto expo = drawPeers(Topology::Exponential, all, 1, t);
    auto one = drawPeers(Topology::OnePeer, all, 1, t);
    auto two = drawPeers(Topology::TwoPeer, all, 1, t);
    for (auto *p : {&complete, &ring, &expo, &one, &two})
      EXPECT_TRUE(symmetric(*p));
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(complete[i].size(), 7u);
      EXPECT_EQ(ring[i], (std::vector<int>{std::min((i + 7) % 8, (i + 1) % 8),
                                           std::max((i + 7) % 8, (i + 1) % 8)}));
      EXPECT_EQ(expo[i].size(), 5u); // i±1, i±2, i+4
      EXPECT_EQ(one[i].size(), 1u);  // a perfect matching
      EXPECT_GE(two[i].size(), 1u);
      EXPECT_LE(two[i].size(), 2u);
    }
  }
  std::set<std::vector<std::vector<int>>> matchings;
  for (int64_t t = 0; t < 10; ++t)
    matchings.insert(drawPeers(Topology::OnePeer, all, 1, t));
  EXPECT_GT(matchings.size(), 5u) << "one-peer matchings must be drawn anew each round";
  EXPECT_EQ(drawPeers(Topology::OnePeer, all, 1, 3), drawPeers(Topology::OnePeer, all, 1, 3));
  std::vector<bool> some = all;
  some[2] = some[5] = false;
  for (Topology t : {Topology::Complete, Topology::Ring, Topology::Exponential, Topology::OnePeer,
                     Topology::TwoPeer}) {
    auto p = drawPeers(t, some, 9, 4);
    EXPECT_TRUE(p[2].empty() && p[5].empty()) << topologyName(t);
    for (const auto &row : p)
      for (int j : row)
        EXPECT_TRUE(j != 2 && j != 5) << topologyName(t);
  }
  EXPECT_THROW(parseTopology("star"), std::invalid_argument);
  EXPECT_DOUBLE_EQ(mixingWeight(7, 7), 1.0 / 8.0);
}

// The simulated clock and byte counts of a pairwise exchange: two replicas,
// one 2× slower, over one link: each round ends at
// max(ready) + latency + bytes / bandwidth, and each replica sends its
// parameters once per round.
TEST(Gossip, SimulatedClockAndBytes) {
  std::string trainer = "optimizer = \"sgd\", lr = 0.1, replicas = 2, sync = \"gossip\", "
                        "topology = \"one-peer\", local_steps = 3, outer_momentum = 0.0";
  Graph g = compileOrDie(mlp("f32", trainer), withGossip());
  auto src = data(g);
  GossipOptions opt;
  opt.rounds = 2;
  NetworkModel net;
  net.stepTime = 0.5;
  net.bandwidth = 1000.0; // bytes/s
  net.latency = 0.25;
  net.replicaFactor = {1.0, 2.0};
  NetworkModel fast = net;
  fast.name = "fast";
  fast.replicaFactor.clear();
  opt.networks = {net, fast};
  GossipResult res = withDeadline(60, [&] { return runGossip(g, *src, opt); });
  double bytes = (4 * 6 + 6 + 6 * 3) * 4.0; // f32 parameters
  double round = 3 * 0.5 * 2.0 + 0.25 + bytes / 1000.0; // the slow replica paces the pair
  for (const ReplicaReport &r : res.replicas) {
    EXPECT_DOUBLE_EQ(r.bytesSent, 2 * bytes);
    EXPECT_NEAR(r.simTime[0], 2 * round, 1e-12);
    EXPECT_NEAR(r.simTime[1], 2 * (3 * 0.5 + 0.25 + bytes / 1000.0), 1e-12);
  }
  EXPECT_DOUBLE_EQ(res.rounds.back().bytes, 4 * bytes);

  NetworkModel h = NetworkModel::heterogeneous(8, 0.25, 2.0, 0.25, 10.0, 3);
  int slowReplicas = 0, slowLinks = 0;
  for (int i = 0; i < 8; ++i) {
    slowReplicas += h.stepCost(i) == 2.0;
    for (int j = i + 1; j < 8; ++j)
      slowLinks += h.linkBandwidth(i, j) == h.bandwidth / 10.0;
  }
  EXPECT_EQ(slowReplicas, 2);
  EXPECT_EQ(slowLinks, 7); // ceil(28 / 4)
}

// A replica killed mid-run is dropped, the others keep training to the end,
// nothing hangs and the run reports it: on the complete graph (where
// everyone waits for everyone, and the all-reduce falls back to pairwise
// exchanges) and on a ring. Draws are made over every replica, as between
// processes (nobody can tell everyone of a death at once), so later draws
// still name the dead replica: its peers mix with the others only. On the
// ring, replica 1's neighbours are 0 and 2, so from round 2 on its mixed
// value must move towards replica 0's alone: mixed1 − z1 = c·(z0 − z1).
TEST(Gossip, KilledReplicaIsDroppedWithoutHang) {
  for (const char *topo : {"complete", "ring"}) {
    SCOPED_TRACE(topo);
    std::string trainer = std::string("optimizer = \"sgd\", lr = 0.1, replicas = 4, sync = ") +
                          "\"gossip\", topology = \"" + topo + "\", local_steps = 2";
    Graph g = compileOrDie(mlp("f32", trainer), withGossip());
    auto src = data(g);
    GossipOptions opt;
    opt.rounds = 4;
    opt.kills = {{2, 1}};
    std::mutex mu;
    std::map<std::tuple<int, int64_t, int>, std::pair<HostTensor, HostTensor>> mixes;
    opt.onMix = [&](int r, int64_t t, int node, const HostTensor &z, const HostTensor &m) {
      std::lock_guard<std::mutex> lock(mu);
      mixes[{r, t, node}] = {z, m};
    };
    GossipResult res = withDeadline(60, [&] { return runGossip(g, *src, opt); });
    ASSERT_EQ(res.replicas.size(), 4u);
    EXPECT_TRUE(res.replicas[2].dead);
    EXPECT_EQ(res.replicas[2].diedAtRound, 1);
    EXPECT_EQ(res.replicas[2].rounds, 1);
    for (int r : {0, 1, 3}) {
      EXPECT_FALSE(res.replicas[r].dead);
      EXPECT_EQ(res.replicas[r].rounds, 4);
      EXPECT_EQ(res.replicas[r].localSteps, 8);
    }
    ASSERT_EQ(res.rounds.size(), 4u);
    EXPECT_EQ(res.rounds[0].live, 4);
    for (int t = 1; t < 4; ++t)
      EXPECT_EQ(res.rounds[t].live, 3);
    EXPECT_TRUE(std::isfinite(res.rounds.back().loss));
    if (std::string(topo) != "ring")
      continue;
    ASSERT_EQ(res.peers.size(), 4u);
    ASSERT_EQ(res.peers[3][1], (std::vector<int>{0, 2}));
    int checked = 0;
    for (int64_t t = 2; t < 4; ++t)
      for (int node = 0; mixes.count({1, t, node}); ++node) {
        const auto &[z1, m1] = mixes.at({1, t, node});
        const HostTensor &z0 = mixes.at({0, t, node}).first;
        double c = 0;
        for (size_t e = 0; e < z1.data.size(); ++e)
          if (std::fabs(z0.data[e] - z1.data[e]) > 1e-6) {
            c = (m1.data[e] - z1.data[e]) / (z0.data[e] - z1.data[e]);
            break;
          }
        ASSERT_GT(c, 0.0) << "replica 1 did not move towards replica 0";
        for (size_t e = 0; e < z1.data.size(); ++e)
          EXPECT_NEAR(m1.data[e] - z1.data[e], c * (z0.data[e] - z1.data[e]), 1e-9)
              << "round " << t << " node " << node << " element " << e;
        ++checked;
      }
    EXPECT_GT(checked, 0);
  }
}

// A collective that completes on some ranks and fails on others, as a ring
// all-reduce does between processes when a rank dies with its last chunks on
// the wire. The ranks it failed on fall back to pairwise exchanges at once;
// those it completed on only at their next all-reduce, and meanwhile they
// may wait for the others elsewhere: rank 0 for the round's reports, the
// others (after the last round, which has no next all-reduce) for rank 0's
// acknowledgement. Nobody may wait out the timeout and drop a live replica.
// SplitAllReduce fails the all-reduce call `at` (0-based, counted on each
// rank: every rank makes the same calls) on the ranks in `failOn` after its
// data moved; from then on every collective fails, as Gloo's closed mesh.
// A rank in `dieOn` instead dies right after call `at` completed on it (its
// next operation throws, and the replica leaves the group as a killed
// process does): its peers' all-reduce completed too, and only rank 0
// learns of the death before the next all-reduce (from the missing report).
struct SplitAllReduce {
  std::set<int> failOn, dieOn;
  int64_t at = -1;
  std::atomic<bool> broken{false}, died{false};
  std::atomic<int64_t> rank0Calls{0};
  struct Comm final : Communicator {
    Comm(Communicator &in, SplitAllReduce &f) : in(in), f(f) {
      in.setTimeout(std::chrono::seconds(5)); // a wait out of the timeout drops a replica
      setTimeout(in.timeout());
    }
    int rank() const override { return in.rank(); }
    int size() const override { return in.size(); }
    std::string transport() const override { return in.transport(); }
    std::unique_ptr<Request> isend(int p, uint64_t t, WireType w, const void *d,
                                   size_t n) override {
      alive();
      return in.isend(p, t, w, d, n);
    }
    void recv(int p, uint64_t t, WireType w, void *d, size_t n) override {
      alive();
      in.recv(p, t, w, d, n);
    }
    std::unique_ptr<Request> irecv(int p, uint64_t t, WireType w, void *d, size_t n) override {
      alive();
      return in.irecv(p, t, w, d, n);
    }
    void alive() {
      if (gone)
        throw std::runtime_error("rank " + std::to_string(rank()) + " was killed");
    }
    void allReduceSum(double *d, size_t n) override {
      before();
      in.allReduceSum(d, n);
      after();
    }
    void allReduceSum(float *d, size_t n) override {
      before();
      in.allReduceSum(d, n);
      after();
    }
    void broadcast(void *d, size_t n, int root) override {
      before();
      in.broadcast(d, n, root);
    }
    void barrier() override {
      before();
      in.barrier();
    }
    void abort(const std::string &why) override { in.abort(why); }
    void before() {
      alive();
      if (f.broken)
        throw CommError(-1, "rank " + std::to_string(rank()) + ": the mesh was closed");
    }
    void after() {
      if (rank() == 0)
        ++f.rank0Calls;
      if (calls++ != f.at)
        return;
      if (f.dieOn.count(rank())) {
        gone = true;
        f.died = true;
        return;
      }
      f.broken = true;
      if (f.failOn.count(rank()))
        throw CommError(-1, "rank " + std::to_string(rank()) +
                                ": all-reduce failed: a connection was closed");
    }
    Communicator &in;
    SplitAllReduce &f;
    int64_t calls = 0;
    bool gone = false;
  };
  std::vector<std::unique_ptr<Comm>> comms;
  std::mutex mu;
  void install(GossipOptions &opt) {
    opt.communicatorFor = [this](int, Communicator &own) -> Communicator & {
      std::lock_guard<std::mutex> lock(mu);
      comms.push_back(std::make_unique<Comm>(own, *this));
      return *comms.back();
    };
  }
};

// Rank 0's all-reduce calls by the end of each round's exchange in a run of
// `opt` without a fault (there are others before the first round).
std::vector<int64_t> allReduceCallsByRoundEnd(const Graph &g, DataSource &src, GossipOptions opt) {
  SplitAllReduce counting;
  counting.install(opt);
  std::vector<int64_t> ends;
  opt.onRoundEnd = [&](int r, int64_t, const std::map<std::string, HostTensor> &) {
    if (r == 0)
      ends.push_back(counting.rank0Calls);
  };
  withDeadline(60, [&] { return runGossip(g, src, opt); });
  return ends;
}

// Four DiLoCo replicas of an MLP for 4 rounds, and allReduceCallsByRoundEnd.
struct FourDiLoCoReplicas {
  Graph g = compileOrDie(mlp("f32", "optimizer = \"sgd\", lr = 0.1, replicas = 4, "
                                    "sync = \"diloco\", local_steps = 2"),
                         withGossip());
  std::unique_ptr<DataSource> src = data(g);
  GossipOptions opt = [] {
    GossipOptions o;
    o.rounds = 4;
    return o;
  }();
  std::vector<int64_t> ends = allReduceCallsByRoundEnd(g, *src, opt);
};

TEST(Gossip, AnAllReduceFailedOnSomeRanksDropsNoLiveReplica) {
  FourDiLoCoReplicas d;
  const Graph &g = d.g;
  DataSource *src = d.src.get();
  const GossipOptions &opt = d.opt;
  const std::vector<int64_t> &ends = d.ends;
  ASSERT_EQ(ends.size(), 4u);
  ASSERT_GE(ends[1] - ends[0], 2);
  struct Case {
    const char *what;
    std::set<int> failOn;
    int64_t at;
    int64_t round; // the failure's
  };
  for (const Case &c : {Case{"rank 0 completes round 2; 1 and 3 fail", {1, 3}, ends[1] - 1, 1},
                        Case{"only rank 0 completes round 3", {1, 2, 3}, ends[2] - 1, 2},
                        Case{"rank 0 fails the last round alone", {0}, ends[3] - 1, 3},
                        Case{"rank 2 fails the last round alone", {2}, ends[3] - 1, 3},
                        Case{"1 fails early in round 2", {1}, ends[0] + 1, 1}}) {
    SCOPED_TRACE(c.what);
    SplitAllReduce fault;
    fault.failOn = c.failOn;
    fault.at = c.at;
    GossipOptions o = opt;
    fault.install(o);
    std::mutex mu;
    std::map<std::pair<int, int64_t>, int> moved; // (replica, round): nodes that mixed
    o.onMix = [&](int r, int64_t t, int, const HostTensor &z, const HostTensor &m) {
      std::lock_guard<std::mutex> lock(mu);
      moved[{r, t}] += z.data != m.data;
    };
    GossipResult res = withDeadline(60, [&] { return runGossip(g, *src, o); });
    EXPECT_TRUE(fault.broken);
    ASSERT_EQ(res.replicas.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_FALSE(res.replicas[r].dead) << "replica " << r << ": " << res.replicas[r].error;
      EXPECT_EQ(res.replicas[r].rounds, 4) << "replica " << r;
    }
    ASSERT_EQ(res.rounds.size(), 4u);
    for (const RoundReport &rr : res.rounds)
      EXPECT_EQ(rr.live, 4) << "round " << rr.round + 1;
    // Exchanges go on, pairwise, in the rounds after the failure.
    for (int64_t t = c.round + 1; t < 4; ++t)
      for (int r = 0; r < 4; ++r)
        EXPECT_GT((moved[{r, t}]), 0) << "replica " << r << " round " << t + 1;
    EXPECT_TRUE(std::isfinite(res.rounds.back().loss));
  }
}

// A replica that dies after its all-reduce of a round completed, before
// its report reached rank 0: rank 0 drops it there and mixes no more by
// all-reduce, while the others learn of the death only when their next
// all-reduce fails. Rank 0 exchanges its position with them all the same
// (GossipReplica::mixAllReduce), so the three survivors go on pairwise,
// together, to the end; before, they waited for each other and dropped
// one another (dist_test's killed DiLoCo replica, now and then).
TEST(Gossip, AReplicaDeadAfterItsAllReduceLeavesTheOthersTogether) {
  FourDiLoCoReplicas d;
  ASSERT_EQ(d.ends.size(), 4u);
  for (int dies : {2, 1}) {
    SCOPED_TRACE("replica " + std::to_string(dies) + " dies after round 2's all-reduce");
    SplitAllReduce fault;
    fault.dieOn = {dies};
    fault.at = d.ends[1] - 1; // the last all-reduce of round 2
    GossipOptions o = d.opt;
    fault.install(o);
    GossipResult res = withDeadline(60, [&] { return runGossip(d.g, *d.src, o); });
    EXPECT_TRUE(fault.died);
    ASSERT_EQ(res.replicas.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(res.replicas[r].dead, r == dies)
          << "replica " << r << ": " << res.replicas[r].error;
      if (r != dies)
        EXPECT_EQ(res.replicas[r].rounds, 4) << "replica " << r;
    }
    ASSERT_EQ(res.rounds.size(), 4u);
    EXPECT_EQ(res.rounds.back().live, 3);
    EXPECT_TRUE(std::isfinite(res.rounds.back().loss));
  }
}

// Checkpoints: a stop request (what Ctrl-C sets) stops every replica after
// the same round with a checkpoint, and --resume continues to the same
// parameters, bit for bit, as a run never stopped (AdamW moments, outer
// momentum, step counts and data positions all restored); resuming a
// finished run does nothing; another topology is refused naming both.
TEST(Gossip, StopCheckpointAndResumeAreExact) {
  std::string trainer = "optimizer = \"adamw\", lr = 0.05, replicas = 4, sync = \"gossip\", "
                        "topology = \"one-peer\", local_steps = array<i64: 2, 1, 3, 2>, "
                        "outer_momentum = 0.9";
  Graph g = compileOrDie(mlp("f32", trainer), withGossip());
  auto src = data(g);
  auto run = [&](GossipOptions o, std::map<int, std::map<std::string, HostTensor>> &last,
                 const std::function<void(int, int64_t)> &hook = nullptr) {
    std::mutex mu;
    const int64_t end = o.rounds - 1;
    o.onRoundEnd = [&](int r, int64_t t, const std::map<std::string, HostTensor> &p) {
      std::lock_guard<std::mutex> lock(mu);
      last[r] = p;
      (void)end;
      if (hook)
        hook(r, t);
    };
    return withDeadline(60, [&] { return runGossip(g, *src, o); });
  };
  GossipOptions base;
  base.rounds = 8;
  std::map<int, std::map<std::string, HostTensor>> straight, resumed, stoppedAt;
  GossipResult whole = run(base, straight);

  test::TempDir dir;
  std::atomic<bool> stop{false};
  GossipOptions first = base;
  first.outDir = dir.path.string();
  first.stopRequested = &stop;
  GossipResult a = run(first, stoppedAt, [&](int r, int64_t t) {
    if (r == 1 && t == 1)
      stop = true;
  });
  ASSERT_GE(a.stoppedAfter, 1);
  ASSERT_LT(a.stoppedAfter, 7) << "the stop came too late to test a resume";
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(a.replicas[r].rounds, a.stoppedAfter + 1) << "replica " << r;
  EXPECT_EQ(a.checkpointRound, a.stoppedAfter);
  // Every replica wrote its own file of the stop's round.
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(rankCheckpointSteps(dir.path.string(), r),
              std::vector<int64_t>{a.stoppedAfter + 1})
        << "replica " << r;

  GossipOptions second = base;
  second.outDir = dir.path.string();
  second.resume = true;
  GossipResult b = run(second, resumed);
  EXPECT_EQ(b.startRound, a.stoppedAfter + 1);
  ASSERT_EQ(resumed.size(), 4u);
  for (int r = 0; r < 4; ++r)
    for (const auto &[name, t] : straight.at(r))
      EXPECT_EQ(resumed.at(r).at(name).data, t.data) << "replica " << r << " " << name;
  EXPECT_EQ(b.rounds.back().localSteps, whole.rounds.back().localSteps);
  EXPECT_EQ(b.replicas[2].localSteps, whole.replicas[2].localSteps);
  EXPECT_DOUBLE_EQ(b.rounds.back().loss, whole.rounds.back().loss);

  std::map<int, std::map<std::string, HostTensor>> none;
  GossipResult c = run(second, none);
  EXPECT_TRUE(c.finished);
  EXPECT_TRUE(none.empty());

  GossipOptions ring = second;
  ring.topology = "ring";
  try {
    run(ring, none);
    ADD_FAILURE() << "a checkpoint of another topology was resumed";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("one-peer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ring"), std::string::npos) << e.what();
  }
}

// Invalid runtime options are errors, not hangs.
TEST(Gossip, RuntimeRejectsBadOptions) {
  std::string trainer = "optimizer = \"sgd\", lr = 0.1, replicas = 2, sync = \"gossip\"";
  Graph g = compileOrDie(mlp("f32", trainer), withGossip());
  Graph plain = compileOrDie(mlp("f32", trainer), test::trainingPipeline());
  auto src = data(g);
  GossipOptions opt;
  opt.rounds = 1;
  EXPECT_THROW(runGossip(plain, *src, opt), std::runtime_error);
  GossipOptions badSteps = opt;
  badSteps.localSteps = {1, 2, 3};
  EXPECT_THROW(runGossip(g, *src, badSteps), std::runtime_error);
  GossipOptions badTopo = opt;
  badTopo.topology = "torus";
  EXPECT_THROW(runGossip(g, *src, badTopo), std::invalid_argument);
  GossipOptions badKill = opt;
  badKill.kills = {{5, 0}};
  EXPECT_THROW(runGossip(g, *src, badKill), std::runtime_error);
}
