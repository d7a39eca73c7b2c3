//===- RunPlanTest.cpp - the same trainer behaviour in every run mode -----===//
//
// Every run mode goes through the path stretto-train takes (loadModel,
// buildTrainer, runSettingsOf, runPlan) and must show the same trainer
// behaviour: a checkpoint at the end, a resumed run bit-identical to an
// uninterrupted one, Ctrl-C (SIGINT) ending with a checkpoint and exit
// status 130 from which a resume again reaches the uninterrupted run's
// states, and a stop with an error (and no non-finite checkpoint) when the
// loss turns NaN.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"
#include "stretto/Compiler/BuildTrainer.h"
#include "stretto/Runtime/RunSettings.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>

using namespace stretto;

namespace {

struct Mode {
  const char *name;
  std::vector<std::string> overrides;
  // Training batches a stop may still read past the one that caused it:
  // the rest of its step (one batch); in a pipeline the next two steps too
  // (stages read each other's stop flags a step later and stop after the
  // step that follows: 1 + 2 x 2 micro-batches); the rest of the round in
  // gossip/DiLoCo (2 replicas x 2 local steps).
  uint64_t slack;
  // Parts of a step's batch the mode reads (its micro-batches): a read's
  // index, counted in micro-batches, is step × parts + part.
  uint64_t parts;
};

const Mode kModes[] = {
    {"Single", {}, 1, 1},
    {"PipelineFlush", {"train.stages=2", "train.micro_batches=2"}, 6, 2},
    {"Pipeline2BW", {"train.stages=2", "train.micro_batches=2", "train.sync=2bw"}, 6, 2},
    {"Gossip", {"train.sync=gossip", "train.replicas=2", "train.local_steps=2"}, 4, 1},
    {"DiLoCo", {"train.sync=diloco", "train.replicas=2", "train.local_steps=2"}, 4, 1},
};

const char *const kModel = R"(
[model]
kind = "mlp"
inputs = 8
hidden = [16, 16]
classes = 4
batch = 8
[train]
optimizer = "adamw"
lr = 1e-2
schedule = "constant"
steps = 12
eval_interval = 4
eval_batches = 2
checkpoint_interval = 2
[data]
format = "synthetic"
)";

/// A data source that passes another's batches through, and from training
/// micro-batch `at` on (step × parts + part) raises SIGINT once
/// (`interrupt`) or fills the inputs with NaN (`poison`).
class Faulty : public DataSource {
public:
  Faulty(DataSource &inner, uint64_t at, bool poison, uint64_t parts)
      : inner(inner), at(at), poison(poison), parts(parts) {}
  std::map<std::string, HostTensor> batch(Split split, uint64_t step, int64_t part) override {
    auto b = inner.batch(split, step, part);
    const uint64_t index = step * parts + static_cast<uint64_t>(part);
    if (split == Split::Train)
      for (uint64_t m = last.load(); index > m && !last.compare_exchange_weak(m, index);)
        ;
    if (split == Split::Train && index >= at) {
      if (poison)
        for (double &v : b.at("x").data)
          v = NAN;
      else if (!raised.exchange(true))
        std::raise(SIGINT);
    }
    return b;
  }
  std::string describe() const override { return inner.describe(); }
  int64_t tokensPerBatch() const override { return inner.tokensPerBatch(); }
  /// The largest training batch index read.
  uint64_t lastRead() const { return last.load(); }

private:
  DataSource &inner;
  uint64_t at;
  bool poison;
  uint64_t parts;
  std::atomic<bool> raised{false};
  std::atomic<uint64_t> last{0};
};

class RunPlanModes : public testing::TestWithParam<Mode> {
protected:
  void SetUp() override {
    test::prepareContext(ctx);
    std::ofstream(dir / "model.toml") << kModel;
    loaded = loadModel(ctx, dir / "model.toml", GetParam().overrides);
    ASSERT_TRUE(loaded);
    std::string fingerprint = modelFingerprint(loaded->model);
    TrainerBuildOptions o;
    o.executor = "reference";
    o.executorGiven = true;
    o.quiet = true;
    build = buildTrainer(ctx, *loaded, o);
    ASSERT_TRUE(build);
    settings = runSettingsOf(build->model, dir / "model.toml", fingerprint);
    data = dataSourceFor(build->graph, settings);
  }

  /// runPlan with these flags (quiet, the reference executor).
  int run(const std::string &out, int64_t steps, bool resume, DataSource *source = nullptr) {
    RunFlags f;
    f.executor = "reference";
    f.quiet = true;
    f.outDir = out;
    f.steps = steps;
    f.resume = resume;
    RunSettings s = settings;
    s.apply(f);
    return runPlan(build->graph, source ? *source : *data, s, build->kernels);
  }

  /// The run's ranks: one for a single run, else stages or replicas.
  static int ranksIn(const std::string &out) {
    int n = 0;
    while (!rankCheckpointSteps(out, n).empty())
      ++n;
    return n;
  }
  /// The run's checkpoint: checkpoint.bin, or every rank's file of the
  /// newest step they all hold, their states named "rank<r>/<state>".
  static Checkpoint checkpointIn(const std::string &out) {
    if (std::filesystem::exists(out + "/checkpoint.bin"))
      return loadCheckpoint(out + "/checkpoint.bin");
    const int ranks = ranksIn(out);
    EXPECT_GT(ranks, 1) << out;
    Checkpoint all;
    all.step = newestCommonCheckpointStep(out, ranks, nullptr);
    for (int r = 0; r < ranks; ++r)
      for (auto &[name, t] : loadCheckpoint(rankCheckpointPath(out, r, all.step)).states)
        all.states.emplace("rank" + std::to_string(r) + "/" + name, t);
    return all;
  }
  static void expectSameStates(const Checkpoint &x, const Checkpoint &y) {
    EXPECT_EQ(x.step, y.step);
    ASSERT_EQ(x.states.size(), y.states.size());
    for (auto &[name, t] : x.states)
      EXPECT_EQ(t.data, y.states.at(name).data) << name;
  }

  test::TempDir dir;
  mlir::MLIRContext ctx;
  std::optional<LoadedModel> loaded;
  std::optional<TrainerBuild> build;
  RunSettings settings;
  std::unique_ptr<DataSource> data;
};

TEST_P(RunPlanModes, ResumeIsBitIdentical) {
  ASSERT_EQ(run(dir / "whole", 12, false), 0);
  ASSERT_EQ(run(dir / "split", 4, false), 0);
  EXPECT_LT(checkpointIn(dir / "split").step, checkpointIn(dir / "whole").step);
  ASSERT_EQ(run(dir / "split", 12, true), 0);
  expectSameStates(checkpointIn(dir / "whole"), checkpointIn(dir / "split"));
}

TEST_P(RunPlanModes, EachRankKeepsOnlyItsOwnNewestFile) {
  ASSERT_EQ(run(dir / "whole", 12, false), 0);
  const int ranks = ranksIn(dir / "whole");
  if (std::filesystem::exists(dir / "whole/checkpoint.bin")) {
    EXPECT_EQ(ranks, 0); // a single run: one file
    return;
  }
  ASSERT_EQ(ranks, 2);
  std::set<std::string> names;
  size_t held = 0;
  for (int r = 0; r < ranks; ++r) {
    // The periodic checkpoints' older files are gone once all ranks wrote.
    std::vector<int64_t> steps = rankCheckpointSteps(dir / "whole", r);
    ASSERT_EQ(steps.size(), 1u) << "rank " << r;
    Checkpoint c = loadCheckpoint(rankCheckpointPath(dir / "whole", r, steps[0]));
    for (auto &[name, t] : c.states)
      names.insert(name);
    held += c.states.size();
  }
  // Stages hold disjoint parts of the model; replicas a whole copy each.
  if (GetParam().overrides[0] == "train.stages=2")
    EXPECT_EQ(names.size(), held);
  else
    EXPECT_EQ(names.size() * ranks, held);
  EXPECT_EQ(names.size(), build->graph.states.size());
}

TEST_P(RunPlanModes, ResumeTakesTheNewestStepEveryRankCompleted) {
  // A crash while the ranks were writing a checkpoint: the last rank's file
  // of a later step exists, the other ranks' do not (or, in gossip, rank 0
  // did not complete it). The resume takes the earlier, complete one.
  ASSERT_EQ(run(dir / "whole", 12, false), 0);
  ASSERT_EQ(run(dir / "split", 4, false), 0);
  const int ranks = ranksIn(dir / "split");
  if (ranks == 0)
    return; // a single run writes one file
  ASSERT_EQ(run(dir / "ahead", 8, false), 0);
  const int last = ranks - 1;
  const int64_t later = rankCheckpointSteps(dir / "ahead", last).front();
  const int64_t earlier = rankCheckpointSteps(dir / "split", last).front();
  ASSERT_GT(later, earlier);
  std::filesystem::copy_file(rankCheckpointPath(dir / "ahead", last, later),
                             rankCheckpointPath(dir / "split", last, later));
  ASSERT_EQ(run(dir / "split", 12, true), 0);
  expectSameStates(checkpointIn(dir / "whole"), checkpointIn(dir / "split"));
}

TEST_P(RunPlanModes, InterruptWritesACheckpointToResumeFrom) {
  ASSERT_EQ(run(dir / "whole", 12, false), 0);
  Faulty interrupting(*data, 2, /*poison=*/false, GetParam().parts);
  ASSERT_EQ(run(dir / "cut", 12, false, &interrupting), 130);
  Checkpoint cut = checkpointIn(dir / "cut");
  Checkpoint whole = checkpointIn(dir / "whole");
  EXPECT_LT(cut.step, whole.step);
  EXPECT_GT(cut.step, 0);
  ASSERT_EQ(run(dir / "cut", 12, true), 0);
  expectSameStates(whole, checkpointIn(dir / "cut"));
}

TEST_P(RunPlanModes, ANanLossStopsWithoutANonFiniteCheckpoint) {
  ASSERT_EQ(run(dir / "whole", 12, false), 0);
  const int64_t done = checkpointIn(dir / "whole").step;
  Faulty poisoned(*data, 8, /*poison=*/true, GetParam().parts);
  EXPECT_EQ(run(dir / "nan", 12, false, &poisoned), 1);
  // It stopped at the step (round) the NaN came in, though the MLP's loss
  // stays finite (relu(NaN) is 0): only its states show it.
  EXPECT_LT(poisoned.lastRead(), 8 + GetParam().slack);
  // The last good checkpoint, written before the NaN, is kept.
  Checkpoint c = checkpointIn(dir / "nan");
  EXPECT_GT(c.step, 0);
  EXPECT_LT(c.step, done);
  for (auto &[name, t] : c.states)
    for (double v : t.data)
      ASSERT_TRUE(std::isfinite(v)) << name;
}

INSTANTIATE_TEST_SUITE_P(Modes, RunPlanModes, testing::ValuesIn(kModes),
                         [](const testing::TestParamInfo<Mode> &i) {
                           return std::string(i.param.name);
                         });

} // namespace
