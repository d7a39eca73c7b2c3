//===- TunerTest.cpp - stretto-tune's tuner as a library, end to end -----===//
//
// tunePartition() on a two-layer GPT at a tiny size, in this process: it compiles
// through buildTrainer, profiles every unit on the pipeline runtime,
// searches, measures the candidates with the step driver's step times and
// picks a winner, whose reports writeTuneReports writes. A second tuning
// takes the cached profile and predicts the same table.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "stretto/Tune/Tuner.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

using namespace stretto;
using namespace stretto::tune;
using test::TempDir;

namespace {

TuneOptions tinyGpt(const TempDir &dir) {
  TuneOptions o;
  o.configPath = STRETTO_SOURCE_DIR "/examples/gpt-tiny.toml";
  o.overrides = {"model.name=smoke", "model.layers=2", "model.heads=2",  "model.d_model=16",
                 "model.seq_len=8", "model.batch=4",  "model.vocab=256", "train.micro_batches=2"};
  o.stages = "2";
  o.top = 1;
  o.measureSteps = 4;
  o.repeats = 2;
  o.profileSteps = 2;
  o.profileRuns = 1;
  o.cacheDir = dir / "cache";
  o.outDir = dir / "out";
  return o;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace

TEST(Tuner, TunesATinyGptInProcessAndReturnsWhatTheToolWrites) {
  TempDir dir;
  mlir::MLIRContext ctx;
  TuneOptions o = tinyGpt(dir);
  std::optional<TuneResult> r = tunePartition(ctx, o);
  ASSERT_TRUE(r);
  // embed | block0 | block1 | head into two stages: three partitions.
  ASSERT_EQ(r->rows.size(), 3u);
  EXPECT_EQ(r->microBatches, 2);
  int dpPicks = 0, measured = 0;
  for (const TuneRow &row : r->rows) {
    EXPECT_EQ(row.S, 2);
    dpPicks += row.dpPick;
    if (!row.measured)
      continue;
    ++measured;
    // The step driver's step times, one median per round, and the
    // runtime's compute of each stage.
    ASSERT_EQ(row.measured->runs.size(), 2u);
    for (double t : row.measured->runs)
      EXPECT_GT(t, 0);
    EXPECT_GT(row.measured->median, 0);
    ASSERT_EQ(row.measured->stageCompute.size(), 2u);
    for (double c : row.measured->stageCompute)
      EXPECT_GT(c, 0);
  }
  EXPECT_EQ(dpPicks, 1);
  EXPECT_GE(measured, 2); // the best predicted and the even split
  const TuneRow &w = r->winner();
  EXPECT_TRUE(w.measured);
  EXPECT_EQ(overrideLine(*r).rfind("train.stages=2 'train.stage_units=[\"embed", 0), 0u);

  writeTuneReports(*r, o.outDir);
  EXPECT_EQ(readFile(o.outDir + "/override.txt"), overrideLine(*r) + "\n");
  std::string csv = readFile(o.outDir + "/tune.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4); // header + 3 rows
  EXPECT_NE(readFile(o.outDir + "/tune.json").find("\"winner\": {\"stages\": 2"),
            std::string::npos);
  EXPECT_NE(readFile(o.outDir + "/timeline.svg").find("<svg"), std::string::npos);

  // Again, predicting only: the profile comes from the cache, so the
  // predictions are the same.
  o.noMeasure = true;
  std::optional<TuneResult> again = tunePartition(ctx, o);
  ASSERT_TRUE(again);
  ASSERT_EQ(again->rows.size(), r->rows.size());
  for (size_t i = 0; i < r->rows.size(); ++i) {
    EXPECT_EQ(again->rows[i].stageUnits, r->rows[i].stageUnits);
    EXPECT_DOUBLE_EQ(again->rows[i].sim.stepTime, r->rows[i].sim.stepTime);
    EXPECT_FALSE(again->rows[i].measured);
  }
}

TEST(Tuner, BadFlagsAreRefusedBeforeAnythingRuns) {
  TempDir dir;
  mlir::MLIRContext ctx;
  TuneOptions o = tinyGpt(dir);
  o.stages = "0";
  EXPECT_FALSE(tunePartition(ctx, o));
  o = tinyGpt(dir);
  o.runtime = "cluster";
  EXPECT_FALSE(tunePartition(ctx, o));
  o = tinyGpt(dir);
  o.stages = "5"; // 4 units
  EXPECT_FALSE(tunePartition(ctx, o));
}
