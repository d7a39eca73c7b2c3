//===- TuneTest.cpp - the partition DP and the schedule simulator -------===//
//
// The DP against brute force on random cost vectors with memory limits and
// link costs, for both schedules; the simulator against the closed forms
// (1F1B flush bubble (S−1)/(m+S−1), 2BW steady state = the largest stage).
//
//===----------------------------------------------------------------------===//
#include "stretto/Tune/Partition.h"
#include "stretto/Tune/Profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

using namespace stretto::tune;

namespace {

CostModel randomModel(std::mt19937_64 &rng, int U) {
  std::uniform_real_distribution<double> t(0.1, 5.0), bytes(1.0, 100.0);
  CostModel m;
  for (int u = 0; u < U; ++u) {
    UnitProfile p;
    p.name = "u" + std::to_string(u);
    p.forward = t(rng);
    p.backward = 2 * t(rng);
    p.update = t(rng) / 2;
    p.paramBytes = bytes(rng);
    p.optimizerBytes = 2 * p.paramBytes;
    p.stashBytes = bytes(rng);
    p.cutBytes = u ? bytes(rng) : 0;
    m.units.push_back(p);
  }
  return m;
}

} // namespace

TEST(TuneDP, MatchesBruteForceOnRandomCostsWithMemoryLimits) {
  std::mt19937_64 rng(20261203);
  int checked = 0, infeasible = 0, limited = 0;
  for (int trial = 0; trial < 600; ++trial) {
    int U = 1 + int(rng() % 9);
    int S = 1 + int(rng() % U);
    CostModel m = randomModel(rng, U);
    m.microBatches = 1 + int64_t(rng() % 6);
    m.schedule = trial % 2 ? Sched::TwoBW : Sched::Flush;
    m.efMemory = trial % 4 == 3;
    if (trial % 3 == 0) // a slow link: transfers matter
      m.link = Link{0.05, 20.0 + double(rng() % 200)};
    if (trial % 5 != 0) {
      // A limit somewhere between "nothing fits" and "everything fits".
      double all = 0;
      for (const UnitProfile &p : m.units)
        all += 3 * p.paramBytes + p.optimizerBytes + p.stashBytes * double(S);
      m.memoryLimit = {all / S * (0.5 + double(rng() % 100) / 100.0)};
    }
    double best = std::numeric_limits<double>::infinity();
    for (const std::vector<int> &b : allPartitions(U, S)) {
      Candidate c = evaluate(m, b);
      if (c.feasible)
        best = std::min(best, c.objective);
      else
        ++limited;
    }
    Candidate dp = searchPartition(m, S);
    if (std::isinf(best)) {
      EXPECT_FALSE(dp.feasible) << "trial " << trial;
      EXPECT_NE(dp.why.find("no partition into"), std::string::npos) << dp.why;
      ++infeasible;
      continue;
    }
    ASSERT_TRUE(dp.feasible) << "trial " << trial << ": " << dp.why;
    EXPECT_NEAR(dp.objective, best, 1e-9 * best) << "trial " << trial << " U=" << U << " S=" << S;
    // The returned bounds are a real partition with that objective.
    Candidate again = evaluate(m, dp.bounds);
    EXPECT_TRUE(again.feasible);
    EXPECT_DOUBLE_EQ(again.objective, dp.objective);
    ++checked;
  }
  // The random cases exercised every branch.
  EXPECT_GT(checked, 300);
  EXPECT_GT(infeasible, 10);
  EXPECT_GT(limited, 100);
}

TEST(TuneDP, InfeasibleStageNamesTheOverflow) {
  CostModel m;
  m.units.resize(3);
  for (UnitProfile &p : m.units)
    p.forward = 1, p.paramBytes = 1024;
  m.units[2].paramBytes = 4096; // a wide head
  m.memoryLimit = {3072};
  Candidate c = evaluate(m, {0, 2, 3});
  EXPECT_FALSE(c.feasible);
  EXPECT_EQ(c.why, "stage 1 needs 4.00 KiB, 1.00 KiB over its limit of 3.00 KiB");
  Candidate none = searchPartition(m, 2);
  EXPECT_FALSE(none.feasible);
  EXPECT_NE(none.why.find("stage 1 needs 4.00 KiB"), std::string::npos) << none.why;
}

TEST(TuneDP, StageCostsIncludeSendsAndStashes) {
  CostModel m;
  m.units.resize(4);
  for (int u = 0; u < 4; ++u) {
    m.units[u].forward = 1;
    m.units[u].backward = 2;
    m.units[u].update = 0.5;
    m.units[u].paramBytes = 100;
    m.units[u].optimizerBytes = 200;
    m.units[u].stashBytes = 10;
    m.units[u].cutBytes = u ? 1000.0 * u : 0;
  }
  m.link = Link{0.5, 1000.0};
  m.microBatches = 4;
  m.schedule = Sched::TwoBW;
  m.efMemory = true;
  // Stage 1 of 3 holding units [1, 3): it receives cut 1, sends cut 3.
  StageEstimate e = estimateStage(m, 1, 3, 1, 3);
  EXPECT_DOUBLE_EQ(e.forward, 2);
  EXPECT_DOUBLE_EQ(e.backward, 4);
  EXPECT_DOUBLE_EQ(e.sendForward, 0.5 + 3000.0 / 1000.0);
  EXPECT_DOUBLE_EQ(e.sendBackward, 0.5 + 1000.0 / 1000.0);
  EXPECT_DOUBLE_EQ(e.update, 1);
  // Three weight versions (two for 2BW, one EF memory), the optimizer
  // state, and min(S − s, m) = 2 stashes.
  EXPECT_DOUBLE_EQ(e.memory, 3 * 200 + 400 + 2 * 20);
  // The first and last stages send one way only.
  EXPECT_DOUBLE_EQ(estimateStage(m, 0, 1, 0, 3).sendBackward, 0);
  EXPECT_DOUBLE_EQ(estimateStage(m, 3, 4, 2, 3).sendForward, 0);
  // A boundary that is expensive to cross is avoided: equal units, but the
  // cut before unit 2 costs 100 s, so the two stages split 1 + 3.
  CostModel link = m;
  link.schedule = Sched::Flush;
  link.efMemory = false;
  link.units[1].cutBytes = link.units[3].cutBytes = 1;
  link.units[2].cutBytes = 1e5;
  link.link = Link{0, 1000.0};
  EXPECT_EQ(searchPartition(link, 2).bounds, (std::vector<int>{0, 1, 4}));
  link.link = Link{};
  EXPECT_EQ(searchPartition(link, 2).bounds, (std::vector<int>{0, 2, 4}));
}

TEST(TuneDP, PartitionCountsAndEvenSplit) {
  EXPECT_EQ(allPartitions(6, 1).size(), 1u);
  EXPECT_EQ(allPartitions(6, 2).size(), 5u);
  EXPECT_EQ(allPartitions(6, 3).size(), 10u); // C(5, 2)
  EXPECT_EQ(allPartitions(7, 7).size(), 1u);
  EXPECT_THROW(allPartitions(30, 10, 1000), std::length_error);
  // embed, block0..block3, head: two blocks each, embed first, head last.
  std::vector<bool> gpt = {false, true, true, true, true, false};
  EXPECT_EQ(evenSplit(gpt, 2), (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(evenSplit(gpt, 3), (std::vector<int>{0, 3, 4, 6})); // 2 + 1 + 1 blocks
  EXPECT_THROW(evenSplit(gpt, 5), std::invalid_argument);
}

TEST(TuneSim, FlushBubbleMatchesClosedForm) {
  for (int S : {1, 2, 3, 4, 6})
    for (int64_t m : {1, 2, 4, 8, 13})
      for (auto [f, b] : {std::pair{1.0, 2.0}, {0.5, 0.5}, {3.0, 1.0}}) {
        std::vector<StageEstimate> st(S);
        for (StageEstimate &e : st)
          e.forward = f, e.backward = b;
        SimResult r = simulate(st, m, 1, Sched::Flush);
        double bubble = double(S - 1) / double(m + S - 1);
        EXPECT_NEAR(r.makespan, double(m + S - 1) * (f + b), 1e-9) << "S=" << S << " m=" << m;
        for (int s = 0; s < S; ++s)
          EXPECT_NEAR(r.idle[s], bubble, 1e-9) << "S=" << S << " m=" << m << " stage " << s;
        // Peak stash count: min(S − s, m) micro-batches in flight.
        for (int s = 0; s < S; ++s)
          EXPECT_EQ(r.peakMemory[s], 0.0);
      }
}

TEST(TuneSim, TwoBWSteadyStateIsTheLargestStage) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> t(0.2, 4.0);
  for (int trial = 0; trial < 60; ++trial) {
    // PipeDream-2BW's condition m >= S: enough micro-batches in flight that
    // the largest stage is never starved.
    int S = 1 + int(rng() % 5);
    int64_t m = S + int64_t(rng() % 4);
    std::vector<StageEstimate> st(S);
    double worst = 0;
    for (StageEstimate &e : st) {
      e.forward = t(rng);
      e.backward = t(rng);
      worst = std::max(worst, e.forward + e.backward);
    }
    SimResult r = simulate(st, m, 40, Sched::TwoBW);
    EXPECT_NEAR(r.stepTime, double(m) * worst, 1e-9 * r.stepTime)
        << "trial " << trial << " S=" << S << " m=" << m;
  }
}

TEST(TuneSim, PeakMemoryCountsStashesInFlight) {
  std::vector<StageEstimate> st(3);
  for (StageEstimate &e : st)
    e.forward = 1, e.backward = 2, e.state = 100, e.stash = 10;
  SimResult r = simulate(st, 8, 2, Sched::Flush);
  EXPECT_DOUBLE_EQ(r.peakMemory[0], 130); // 3 in flight on the first stage
  EXPECT_DOUBLE_EQ(r.peakMemory[1], 120);
  EXPECT_DOUBLE_EQ(r.peakMemory[2], 110);
  // A flush run of several steps takes that many times one step.
  EXPECT_NEAR(r.stepTime, (8 + 3 - 1) * 3.0, 1e-9);
}

TEST(TuneSim, OrderMirrorsTheRuntime) {
  // Stage 0 of 2 with 3 micro-batches: two warm-up forwards, then 1F1B.
  std::vector<Work> w = stageOrder(0, 2, 3, 1, Sched::Flush);
  std::string k;
  for (const Work &x : w)
    k += x.kind;
  EXPECT_EQ(k, "FFBFBBU");
}

namespace {

Profile sampleProfile() {
  Profile p;
  p.key = {{"model", "abc123"}, {"micro_batch", "1"}, {"device", "cpu: Test CPU (avx2)"},
           {"threads", "1"}, {"precision", "f32"}, {"kernels", "k1"}};
  p.steps = 4;
  for (const char *n : {"embed", "block0", "head"}) {
    UnitProfile u;
    u.name = n;
    u.forward = 0.1 / 3;
    u.backward = 2e-3;
    u.update = 1e-4;
    u.paramBytes = 4096;
    u.optimizerBytes = 8192;
    u.stashBytes = 123;
    u.cutBytes = u.name == "embed" ? 0 : 512;
    p.units.push_back(u);
  }
  return p;
}

std::string scratchDir(const std::string &name) {
  std::string d = std::filesystem::temp_directory_path().string() + "/stretto-tune-test-" +
                  std::to_string(::getpid()) + "-" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

} // namespace

TEST(TuneProfile, RoundTripsExactly) {
  Profile p = sampleProfile();
  Profile q = parseProfile(profileText(p), "p");
  EXPECT_EQ(q.key, p.key);
  EXPECT_EQ(q.steps, 4);
  ASSERT_EQ(q.units.size(), 3u);
  EXPECT_EQ(q.units[0].forward, p.units[0].forward); // 17 digits: exact
  EXPECT_EQ(q.units[2].name, "head");
  EXPECT_EQ(q.units[2].cutBytes, 512);
}

TEST(TuneProfile, CorruptOrTruncatedTextIsRefusedWithItsLine) {
  std::string t = profileText(sampleProfile());
  std::string edited = t;
  edited[edited.find("unit block0") + 15] = '4'; // one digit of a time: still a number
  try {
    parseProfile(edited, "f");
    FAIL() << "an edited profile was accepted";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
  }
  std::string truncated = t.substr(0, t.find("checksum"));
  EXPECT_THROW(parseProfile(truncated, "f"), std::runtime_error);
  EXPECT_THROW(parseProfile("stretto-plan 1\n", "f"), std::runtime_error);
  EXPECT_THROW(parseProfile("", "f"), std::runtime_error);
}

TEST(TuneProfile, CacheHitsMissesStaleAndCorruptEntries) {
  std::string dir = scratchDir("cache");
  Profile p = sampleProfile();
  EXPECT_EQ(lookupProfile(dir, p.key).status, CacheLookup::Missing);
  saveProfile(profileCachePath(dir, p.key), p);
  CacheLookup hit = lookupProfile(dir, p.key);
  ASSERT_EQ(hit.status, CacheLookup::Hit) << hit.why;
  EXPECT_EQ(hit.profile.units.size(), 3u);
  // Another kernel build: same file, stale entry.
  auto rebuilt = p.key;
  rebuilt["kernels"] = "k2";
  EXPECT_EQ(profileCachePath(dir, rebuilt), profileCachePath(dir, p.key));
  CacheLookup stale = lookupProfile(dir, rebuilt);
  EXPECT_EQ(stale.status, CacheLookup::Stale);
  EXPECT_NE(stale.why.find("kernels 'k1', now 'k2'"), std::string::npos) << stale.why;
  // Other threads: another entry.
  auto more = p.key;
  more["threads"] = "2";
  EXPECT_EQ(lookupProfile(dir, more).status, CacheLookup::Missing);
  // A corrupted file on disk.
  {
    std::string path = profileCachePath(dir, p.key);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('#');
  }
  CacheLookup bad = lookupProfile(dir, p.key);
  EXPECT_EQ(bad.status, CacheLookup::Corrupt);
  EXPECT_FALSE(bad.why.empty());
  std::filesystem::remove_all(dir);
}

// The winner among measured candidates (given best-predicted first).
TEST(TunePick, MeasuredFastestWinsWhenThePredictedOnesLeadIsNoise) {
  // The idle-machine session of bench/results/tune: the DP's pick ran 1.05x
  // over even within +-9.3 % noise, the head-alone split 1.14x.
  std::vector<Choice> c(3);
  c[0] = {2, true, 0.1000 / 1.05, 0.093, 2}; // DP pick, best prediction
  c[1] = {2, true, 0.1000 / 1.14, 0.05, 2};  // head alone
  c[2] = {2, true, 0.1000, 0.04, 2};         // even
  Pick p = pickWinner(c);
  EXPECT_EQ(p.index, 1u);
  EXPECT_EQ(p.passedOver, 0);
  EXPECT_FALSE(p.tieToPrediction);
}

TEST(TunePick, ATieGoesToTheBetterPredictionWhenBothClearEven) {
  std::vector<Choice> c(3);
  c[0] = {2, true, 0.081, 0.03, 2}; // predicted best, measured 1% slower
  c[1] = {2, true, 0.080, 0.03, 2};
  c[2] = {2, true, 0.100, 0.03, 2};
  Pick p = pickWinner(c);
  EXPECT_EQ(p.index, 0u);
  EXPECT_TRUE(p.tieToPrediction);
  EXPECT_EQ(p.passedOver, -1);
}

TEST(TunePick, OutsideTheNoiseTheFasterWinsAndNothingMeasuredTakesThePrediction) {
  std::vector<Choice> c(3);
  c[0] = {2, true, 0.095, 0.02, 2};
  c[1] = {2, true, 0.080, 0.02, 2};
  c[2] = {2, true, 0.100, 0.02, 2};
  EXPECT_EQ(pickWinner(c).index, 1u);
  EXPECT_FALSE(pickWinner(c).tieToPrediction);
  // Another stage count's candidate does not tie with this one.
  c[0] = {3, true, 0.0805, 0.05, -1};
  EXPECT_EQ(pickWinner(c).index, 1u);
  std::vector<Choice> none(2);
  none[0].stages = none[1].stages = 2;
  EXPECT_EQ(pickWinner(none).index, 0u);
}

TEST(TunePick, PairedRatiosDecideWhenGiven) {
  // Unpaired, the medians' lead (5 %) is inside a 10 % noise; paired round by
  // round it is 5 % +- 1 %: the measured-fastest clears even, the better
  // predicted one (paired 1.01 +- 2 %) does not.
  std::vector<Choice> c(3);
  c[0] = {2, true, 0.0990, 0.10, 2, 1.01, 0.02};
  c[1] = {2, true, 0.0952, 0.10, 2, 1.05, 0.01};
  c[2] = {2, true, 0.1000, 0.10, 2};
  Pick p = pickWinner(c);
  EXPECT_EQ(p.index, 1u);
  EXPECT_EQ(p.passedOver, 0);
  // Without the pairing neither clears even: the tie goes to the prediction.
  c[0].vsEven = c[1].vsEven = 0;
  EXPECT_EQ(pickWinner(c).index, 0u);
}
