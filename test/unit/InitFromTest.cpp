//===- InitFromTest.cpp - --init-from: safetensors in, checked, applied ---===//
//
// The reader's errors (each names the file and the first thing wrong), and
// that a run started from given parameters is the run those parameters
// define: single process, 2BW pipeline stages and gossip replicas.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "stretto/Compiler/Lowering.h"
#include "stretto/Transforms/Pipelines.h"
#include "stretto/Runtime/Gossip.h"
#include "stretto/Runtime/Pipeline.h"
#include "stretto/Runtime/Trainer.h"
#include "stretto/Transforms/Passes.h"

#include "mlir/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unistd.h>

using namespace stretto;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

const char *kMlp = R"(
[model]
kind = "mlp"
inputs = 8
hidden = [16]
classes = 4
batch = 16
[train]
optimizer = "adamw"
lr = 1e-2
weight_decay = 0.1
[data]
format = "synthetic"
)";

/// A safetensors file from a header and raw data, as given (for bad files).
void writeRaw(const std::string &path, const std::string &header, const std::string &data,
              int64_t claimedLength = -1) {
  uint64_t len = claimedLength >= 0 ? uint64_t(claimedLength) : header.size();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char *>(&len), 8);
  f << header << data;
}

std::string errorOf(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const std::exception &e) {
    return e.what();
  }
  return "(no error)";
}

std::map<std::string, HostTensor> paramsOf(Executor &ex, const Graph &g) {
  std::map<std::string, HostTensor> p;
  for (const StateDecl &s : g.states)
    if (s.isParam)
      p.emplace(s.name, ex.getState(s.name));
  return p;
}

/// The parameters `seed` initialises, rounded to f32 as a file holds them.
std::map<std::string, HostTensor> initialParams(const Graph &g, uint64_t seed) {
  RefExecutor ex(g, Precision::F32);
  ex.initialize(seed);
  auto p = paramsOf(ex, g);
  for (auto &[n, t] : p)
    for (double &v : t.data)
      v = static_cast<float>(v);
  return p;
}

TrainerOptions quiet(int64_t steps, uint64_t seed, const std::string &out = "") {
  TrainerOptions o;
  o.steps = steps;
  o.seed = seed;
  o.evalInterval = 1000;
  o.evalBatches = 1;
  o.outDir = out;
  o.quiet = true;
  return o;
}

} // namespace

TEST(InitFrom, RoundTripIsExact) {
  TempDir dir;
  std::map<std::string, HostTensor> t = {{"a", {{2, 3}, {1, -2, 3.5, 0.1f, 1e-30f, 7}}},
                                         {"b.c", {{4}, {0, 0, 0, 1}}}};
  saveSafetensors(dir / "x.safetensors", t);
  auto back = loadSafetensors(dir / "x.safetensors");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back.at("a").shape, (Shape{2, 3}));
  EXPECT_EQ(back.at("a").data, t.at("a").data);
  EXPECT_EQ(back.at("b.c").data, t.at("b.c").data);
}

TEST(InitFrom, ReaderErrorsNameTheFileAndTheProblem) {
  TempDir dir;
  const std::string p = dir / "bad.safetensors";
  EXPECT_NE(errorOf([&] { loadSafetensors(dir / "none.safetensors"); }).find("cannot read"),
            std::string::npos);
  std::ofstream(p) << "abc";
  EXPECT_EQ(errorOf([&] { loadSafetensors(p); }),
            p + ": truncated: 3 bytes (a safetensors file starts with an 8-byte header length)");
  writeRaw(p, "{}", "", 100);
  EXPECT_EQ(errorOf([&] { loadSafetensors(p); }),
            p + ": truncated: the header says 100 bytes, the file holds 2 after the length (or "
                "it is not a safetensors file)");
  std::string w = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  writeRaw(p, w, std::string(12, '\0')); // one float short
  EXPECT_EQ(errorOf([&] { loadSafetensors(p); }),
            p + ": truncated: tensor 'w' ends at data byte 16, the file holds 12");
  writeRaw(p, R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", std::string(4, '\0'));
  EXPECT_EQ(errorOf([&] { loadSafetensors(p); }),
            p + ": tensor 'w' has dtype F16; parameters are read as F32 or F64");
  writeRaw(p, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'));
  EXPECT_EQ(errorOf([&] { loadSafetensors(p); }),
            p + ": tensor 'w' holds 8 bytes; its shape [3] and dtype F32 need 12");
  writeRaw(p, R"({"w":{"dtype":"F32",)", "");
  EXPECT_NE(errorOf([&] { loadSafetensors(p); }).find(p + ": not a safetensors file: bad header"),
            std::string::npos);
}

TEST(InitFrom, MismatchesAgainstTheModelNameTheFirst) {
  TempDir dir;
  Graph g = test::compileConfig(kMlp, test::trainingPipeline());
  auto good = initialParams(g, 1);
  ASSERT_GE(good.size(), 2u);
  const std::string p = dir / "m.safetensors";
  saveSafetensors(p, good);
  EXPECT_EQ(loadInitParameters(p, g).size(), good.size());

  std::string first; // the model's first parameter
  for (const StateDecl &s : g.states)
    if (s.isParam) {
      first = s.name;
      break;
    }
  auto missing = good;
  missing.erase(first);
  saveSafetensors(p, missing);
  EXPECT_NE(errorOf([&] { loadInitParameters(p, g); }).find(p + ": no tensor '" + first + "'"),
            std::string::npos);

  auto reshaped = good;
  Shape was = reshaped.at(first).shape;
  reshaped.at(first).shape = {numElements(was)};
  saveSafetensors(p, reshaped);
  EXPECT_EQ(errorOf([&] { loadInitParameters(p, g); }),
            p + ": tensor '" + first + "' has shape " + shapeToString({numElements(was)}) +
                " in the file but " + shapeToString(was) + " in the model");

  auto extra = good;
  extra["zzz.extra"] = HostTensor{{1}, {0}};
  saveSafetensors(p, extra);
  EXPECT_NE(errorOf([&] { loadInitParameters(p, g); })
                .find(p + ": tensor 'zzz.extra' is not a parameter of the model"),
            std::string::npos);
}

// Train 3 steps and export; a run started from the export (with another
// seed) holds exactly the exported parameters, and its first loss is the
// loss of those weights, not of its seed's.
TEST(InitFrom, ContinuesFromExportedWeights) {
  TempDir dir;
  Graph g = test::compileConfig(kMlp, test::trainingPipeline());
  DataConfig dc;
  dc.format = "synthetic";
  auto data = makeDataSource(g, dc, 4);
  TrainSummary a;
  ASSERT_EQ(runTraining(g, *data, quiet(3, 1, dir / "a"), &a), 0);
  Checkpoint ck = loadCheckpoint(dir / "a/checkpoint.bin");

  // Exact parameters after init.
  auto loaded = loadInitParameters(dir / "a/model.safetensors", g);
  RefExecutor ex(g, Precision::F32);
  ex.initialize(99);
  EXPECT_EQ(applyInitParameters(ex, g, loaded), static_cast<int64_t>(loaded.size()));
  for (const StateDecl &s : g.states)
    if (s.isParam)
      EXPECT_EQ(ex.getState(s.name).data, ck.states.at(s.name).data) << s.name;
  double expectFirst = ex.evaluate(data->batch(Split::Train, 0, 0)).outputs.at(0);

  TrainerOptions o = quiet(3, 99, dir / "b");
  o.initFrom = dir / "a/model.safetensors";
  TrainSummary b, fresh;
  ASSERT_EQ(runTraining(g, *data, o, &b), 0);
  ASSERT_EQ(runTraining(g, *data, quiet(3, 99), &fresh), 0);
  EXPECT_NEAR(b.firstLoss, expectFirst, 1e-6 * std::fabs(expectFirst));
  EXPECT_GT(std::fabs(b.firstLoss - fresh.firstLoss), 1e-3) << "the seed's weights were used";
  EXPECT_LT(b.firstLoss, a.firstLoss) << "the run did not start from the trained weights";

  // --resume: the checkpoint wins over --init-from (b's own checkpoint).
  TrainerOptions r = quiet(5, 99, dir / "b");
  r.resume = true;
  r.initFrom = dir / "nonexistent.safetensors";
  TrainSummary rs;
  EXPECT_EQ(runTraining(g, *data, r, &rs), 0);

  // A bad file stops the run with an error, before any step.
  TrainerOptions bad = quiet(3, 99);
  bad.initFrom = dir / "nonexistent.safetensors";
  EXPECT_EQ(runTraining(g, *data, bad, nullptr), 1);
}

// A 2BW pipeline started with initParams from seed 7 is, bit for bit, the
// run seeded with 7 (every stage took its parameters and their previous
// versions).
TEST(InitFrom, PipelineStagesTakeTheirParameters) {
  std::string cfg = "[model]\nkind = \"gpt\"\nlayers = 2\nheads = 2\nd_model = 8\nseq_len = 4\n"
                    "batch = 4\nvocab = 128\n[train]\noptimizer = \"adamw\"\nlr = 1e-2\n"
                    "stages = 2\nmicro_batches = 2\n[data]\npath = \"" STRETTO_SOURCE_DIR
                    "/data/kjv.txt\"\n";
  Graph piped = test::compileConfig(
      cfg, test::modelPasses("train-partition,train-autodiff,train-optimizer,canonicalize,cse,"
                             "train-2bw,canonicalize,cse"));
  DataConfig dc;
  dc.path = STRETTO_SOURCE_DIR "/data/kjv.txt";
  auto src = makeDataSource(piped, dc, 128);
  PipelineOptions o;
  o.steps = 4;
  o.microBatches = 2;
  o.schedule = Schedule::TwoBW;
  o.seed = 7;
  PipelineResult want = runPipeline(piped, *src, o);
  o.seed = 1337;
  PipelineResult other = runPipeline(piped, *src, o);
  o.initParams = initialParams(piped, 7);
  PipelineResult got = runPipeline(piped, *src, o);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  EXPECT_NE(other.losses[0], want.losses[0]);
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-6 * std::fabs(want.losses[i])) << "step " << i;
  for (const auto &[name, t] : want.states) {
    const std::vector<double> &g = got.states.at(name).data;
    ASSERT_EQ(g.size(), t.data.size());
    for (size_t e = 0; e < g.size(); ++e)
      ASSERT_NEAR(g[e], t.data[e], 1e-6 * (1 + std::fabs(t.data[e]))) << name << "[" << e << "]";
  }
}

// Every gossip replica starts from the given parameters: the run equals the
// one seeded with the seed that made them.
TEST(InitFrom, GossipReplicasTakeTheParameters) {
  const char *model = R"(
train.model @mlp attributes {trainer = {optimizer = "adamw", lr = 0.05, replicas = 3, sync = "diloco", local_steps = 2, outer_lr = 0.7, outer_momentum = 0.9}} {
  train.param @w1 : tensor<4x6xf32> = normal(0.5)
  train.param @b1 : tensor<6xf32> = zeros
  train.param @w2 : tensor<6x3xf32> = normal(0.5)
  train.step {
    %x = train.input "x" : tensor<5x4xf32>
    %y = train.input "y" : tensor<5xi32>
    %w1 = train.read @w1 : tensor<4x6xf32>
    %b1 = train.read @b1 : tensor<6xf32>
    %w2 = train.read @w2 : tensor<6x3xf32>
    %h = train.matmul %x, %w1 : tensor<5x4xf32>, tensor<4x6xf32> -> tensor<5x6xf32>
    %hb = train.add %h, %b1 : tensor<5x6xf32>, tensor<6xf32> -> tensor<5x6xf32>
    %a = train.tanh %hb : tensor<5x6xf32>
    %o = train.matmul %a, %w2 : tensor<5x6xf32>, tensor<6x3xf32> -> tensor<5x3xf32>
    %l = train.cross_entropy %o, %y : tensor<5x3xf32>, tensor<5xi32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
)";
  test::Compiled c = test::compile(model, [](mlir::PassManager &pm) {
    buildTrainingPipeline(pm);
    pm.nest<train::ModelOp>().addPass(train::createTrainGossip());
  });
  ASSERT_TRUE(c.ok) << c.diagnostics;
  const Graph &g = c.graph;
  DataConfig dc;
  dc.format = "synthetic";
  dc.seed = 7;
  auto src = makeDataSource(g, dc, 3);
  auto run = [&](uint64_t seed, const std::map<std::string, HostTensor> &init) {
    GossipOptions o;
    o.rounds = 2;
    o.seed = seed;
    o.initParams = init;
    std::mutex mu;
    std::map<std::pair<int, int64_t>, std::map<std::string, HostTensor>> seen;
    o.onRoundEnd = [&](int r, int64_t t, const std::map<std::string, HostTensor> &p) {
      std::lock_guard<std::mutex> lock(mu);
      seen[{r, t}] = p;
    };
    runGossip(g, *src, o);
    return seen;
  };
  auto want = run(7, {});
  auto other = run(1337, {});
  auto got = run(1337, initialParams(g, 7));
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(want.size(), 6u);
  EXPECT_NE(other.at({0, 0}).at("w1").data, want.at({0, 0}).at("w1").data);
  for (const auto &[key, params] : want)
    for (const auto &[name, t] : params) {
      const std::vector<double> &v = got.at(key).at(name).data;
      for (size_t e = 0; e < v.size(); ++e)
        ASSERT_NEAR(v[e], t.data[e], 1e-6 * (1 + std::fabs(t.data[e])))
            << "replica " << key.first << " round " << key.second << " " << name;
    }
}
