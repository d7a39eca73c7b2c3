//===- InputValidationTest.cpp - bad input gets a clear error -------------===//
//
// Each bad input is refused with a message naming what is wrong (the key,
// override, file or setting) instead of a crash, a hang or a silent wrong
// result: run settings and plan-file settings (validateRunSettings), the
// memory estimate against what is available, the network model, resumes,
// checkpoints whose shapes lie under a valid checksum, trainer values out
// of range, and overrides. The command-line side is test/lit/Train/
// input-validation.test.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"
#include "stretto/Dialect/Train/TrainerOptions.h"
#include "stretto/Frontend/Import.h"
#include "stretto/Frontend/Load.h"
#include "stretto/Runtime/Gossip.h"
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Runtime/RunChecks.h"
#include "stretto/Runtime/Trainer.h"
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <unistd.h>

using namespace stretto;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

const char *const kMlp = test::kSmallMlp;

Graph compile(const std::string &toml, const std::vector<std::string> &overrides = {}) {
  return test::compileConfig(toml, test::trainingPipeline(), overrides);
}

/// The message validateRunSettings refuses `check` with ("" if it passes).
std::string refusal(const RunCheck &check) {
  try {
    validateRunSettings(check);
    return "";
  } catch (const std::runtime_error &e) {
    return e.what();
  }
}

#define EXPECT_HAS(text, part)                                                                   \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST(RunSettings, IntervalsAndCountsMustBePositive) {
  Graph g = compile(kMlp);
  // Every setting a plan file carries as text, at a value that used to
  // divide by zero (eval_interval, log_interval) or run backwards.
  struct Case {
    const char *key;
    void (*set)(TrainerOptions &);
    const char *message;
  } cases[] = {
      {"steps", [](TrainerOptions &o) { o.steps = 0; }, "'train.steps' must be >= 1, got 0"},
      {"eval", [](TrainerOptions &o) { o.evalInterval = 0; },
       "'train.eval_interval' must be >= 1, got 0"},
      {"log", [](TrainerOptions &o) { o.logInterval = -3; },
       "'train.log_interval' must be >= 1, got -3"},
      {"batches", [](TrainerOptions &o) { o.evalBatches = 0; },
       "'train.eval_batches' must be >= 1, got 0"},
      {"micro", [](TrainerOptions &o) { o.microBatches = 0; },
       "'train.micro_batches' must be >= 1, got 0"},
      {"ckpt", [](TrainerOptions &o) { o.checkpointInterval = -1; },
       "'train.checkpoint_interval' must be >= 0, got -1"},
  };
  for (const Case &c : cases) {
    TrainerOptions o = test::quietTrainerOptions(10);
    c.set(o);
    EXPECT_EQ(refusal(RunCheck(g, o)), c.message) << c.key;
  }
  EXPECT_EQ(refusal(RunCheck(g, test::quietTrainerOptions(10))), "");
}

TEST(RunSettings, StagesMustMatchThePartition) {
  Graph g = compile(kMlp);
  TrainerOptions o = test::quietTrainerOptions(10);
  RunCheck check(g, o);
  check.stages = 0;
  EXPECT_HAS(refusal(check), "'train.stages' must be in [1, 1024], got 0");
  // A plan that says 2 stages for an unpartitioned step.
  check.stages = 2;
  EXPECT_HAS(refusal(check), "'train.stages' is 2 but the step is partitioned into 1 stage(s)");
  // A node on a stage the plan does not have.
  Graph bad = g;
  bad.nodes.back().stage = 3;
  RunCheck c2(bad, o);
  c2.stages = 1;
  EXPECT_HAS(refusal(c2), "the step uses pipeline stage 3 but 'train.stages' is 1");
}

TEST(RunSettings, ReplicasNeedGossipAndABound) {
  Graph g = compile(kMlp);
  TrainerOptions o = test::quietTrainerOptions(10);
  RunCheck check(g, o);
  check.replicas = 4;
  check.sync = "sync";
  EXPECT_HAS(refusal(check), "'train.replicas' is 4 but 'train.sync' is \"sync\"");
  check.sync = "2bw";
  EXPECT_HAS(refusal(check), "synchronous data parallelism over replicas does not exist yet");
  check.sync = "gossip";
  check.replicas = 100000; // would start 100000 threads
  EXPECT_HAS(refusal(check), "'train.replicas' must be in [1, 1024], got 100000");
}

TEST(RunSettings, NetworkModelMustBePhysical) {
  Graph g = compile(kMlp);
  TrainerOptions o = test::quietTrainerOptions(10);
  struct Case {
    void (*set)(GossipSettings &);
    const char *message;
  } cases[] = {
      {[](GossipSettings &s) { s.bandwidth = 0; }, "'train.net_bandwidth' must be > 0"},
      {[](GossipSettings &s) { s.bandwidth = -5e9; }, "'train.net_bandwidth' must be > 0"},
      {[](GossipSettings &s) { s.stepTime = 0; }, "'train.net_step_time' must be a time > 0"},
      {[](GossipSettings &s) { s.latency = -1; }, "'train.net_latency' must be >= 0"},
      {[](GossipSettings &s) { s.slowLinks = 1.5; }, "'train.net_slow_links' must be a fraction"},
      {[](GossipSettings &s) { s.slowReplicaFactor = 0.5; },
       "'train.net_slow_replica_factor' must be >= 1"},
      {[](GossipSettings &s) { s.bandwidth = std::nan(""); }, "'train.net_bandwidth' must be > 0"},
  };
  for (const Case &c : cases) {
    GossipSettings s;
    c.set(s);
    RunCheck check(g, o);
    check.gossip = &s;
    EXPECT_HAS(refusal(check), c.message);
  }
  GossipSettings fine;
  RunCheck check(g, o);
  check.gossip = &fine;
  EXPECT_EQ(refusal(check), "");
  // A plan's network settings are text: garbage reads as 0, and is refused.
  GossipSettings fromPlan = GossipSettings::fromMeta({{"gossip.net_bandwidth", "fast"}});
  check.gossip = &fromPlan;
  EXPECT_HAS(refusal(check), "'train.net_bandwidth' must be > 0");
}

TEST(RunSettings, MemoryEstimateIsThePlannersAndIsCheckedAgainstWhatIsAvailable) {
  Graph g = compile(kMlp);
  // The estimate's planner is the runtime's: the same peak as a real plan.
  PlanStats real = PlanExecutor(g, {}).stats();
  PlanStats estimated = planStatsOf(g);
  EXPECT_EQ(estimated.peakBytes(), real.peakBytes());
  EXPECT_EQ(estimated.persistentBytes, real.persistentBytes);

  TrainerOptions o = test::quietTrainerOptions(10);
  o.compiled = true;
  MemoryEstimate one = estimateRunMemory(g, o, 1, 1);
  EXPECT_EQ(one.bytes, real.peakBytes());
  RunCheck check(g, o);
  check.checkMemory = true;
  check.availableBytes = one.bytes; // just enough
  EXPECT_EQ(refusal(check), "");
  check.availableBytes = one.bytes - 1;
  std::string m = refusal(check);
  EXPECT_HAS(m, "this run needs about");
  EXPECT_HAS(m, "buffer plan peak");
  EXPECT_HAS(m, "is available (given)");

  // A checkpoint's copies count when the run writes one.
  TrainerOptions withOut = o;
  withOut.outDir = "/nowhere";
  EXPECT_GT(estimateRunMemory(g, withOut, 1, 1).bytes, one.bytes);

  // The system's figure is there on Linux.
  AvailableMemory have = availableMemory();
  EXPECT_GT(have.bytes, 0);
  EXPECT_FALSE(have.source.empty());
}

TEST(RunSettings, GossipReplicasMultiplyTheEstimate) {
  Graph g = test::compileConfig(
      kMlp,
      [](mlir::PassManager &pm) {
        test::trainingPipeline()(pm);
        pm.nest<train::ModelOp>().addPass(train::createTrainGossip());
      },
      {"train.sync=gossip", "train.replicas=4", "train.local_steps=2"});
  ASSERT_FALSE(g.outer.empty());
  TrainerOptions o = test::quietTrainerOptions(10);
  o.compiled = true;
  MemoryEstimate four = estimateRunMemory(g, o, 1, 4);
  EXPECT_EQ(four.bytes, 4 * planStatsOf(g).peakBytes());
  EXPECT_HAS(four.breakdown, "x 4 replicas");
}

TEST(RunSettings, ResumeChecksSeedModelAndMicroBatches) {
  Graph g = compile(kMlp);
  TrainerOptions o = test::quietTrainerOptions(10);
  o.modelFingerprint = "aaaa";
  Checkpoint c;
  c.step = 5;
  c.seed = o.seed;
  c.meta = checkpointMeta(g, o);
  RunCheck check(g, o);
  check.resumeFrom = &c;
  check.checkpointPath = "run/checkpoint.bin";
  EXPECT_EQ(refusal(check), "");

  TrainerOptions seed = o;
  seed.seed = 7;
  RunCheck s(g, seed);
  s.resumeFrom = &c;
  s.checkpointPath = "run/checkpoint.bin";
  EXPECT_HAS(refusal(s), "run/checkpoint.bin was written by a run with seed 1337, this run's "
                         "seed is 7");
  EXPECT_HAS(refusal(s), "--force-resume");
  seed.forceResume = true;
  RunCheck forced(g, seed);
  forced.resumeFrom = &c;
  EXPECT_EQ(refusal(forced), "");

  TrainerOptions model = o;
  model.modelFingerprint = "bbbb";
  RunCheck m(g, model);
  m.resumeFrom = &c;
  EXPECT_HAS(refusal(m), "was written by another model: its forward computation differs (model "
                         "fingerprint aaaa in the checkpoint, bbbb now");

  TrainerOptions micro = o;
  micro.microBatches = 2;
  RunCheck mb(g, micro);
  mb.resumeFrom = &c;
  EXPECT_HAS(refusal(mb), "was written by a run with 1 micro-batches per step, this run has 2");

  Graph bigger = compile(kMlp, {"model.batch=32"});
  RunCheck in(bigger, o);
  in.resumeFrom = &c;
  EXPECT_HAS(refusal(in), "the step's inputs were x [16, 8] f32, y [16] i32, now they are "
                          "x [32, 8] f32, y [32] i32");

  // A first-format checkpoint records no model: only the seed is compared.
  Checkpoint old = c;
  old.meta.clear();
  RunCheck o1(g, model);
  o1.resumeFrom = &old;
  EXPECT_EQ(refusal(o1), "");
}

TEST(RunSettings, TheFingerprintIgnoresSettingsAndSeesTheModel) {
  auto fingerprint = [](const std::vector<std::string> &overrides) {
    mlir::MLIRContext ctx;
    std::string error;
    auto module = importConfigString(ctx, kMlp, "mlp.toml", overrides, error);
    EXPECT_TRUE(module) << error;
    return modelFingerprint(*module->getOps<train::ModelOp>().begin());
  };
  std::string base = fingerprint({});
  EXPECT_EQ(base, fingerprint({"train.lr=0.5", "train.steps=99", "data.val_fraction=0.2"}));
  EXPECT_NE(base, fingerprint({"model.activation=gelu"}));
  EXPECT_NE(base, fingerprint({"model.hidden=[32]"}));
}

TEST(Resume, AFinishedRunSaysSoAndExitsZero) {
  Graph g = compile(kMlp);
  DataConfig dc;
  dc.format = "synthetic";
  auto data = makeDataSource(g, dc, 4);
  TempDir out;
  ASSERT_EQ(runTraining(g, *data, test::quietTrainerOptions(3, out.path)), 0);
  TrainerOptions again = test::quietTrainerOptions(3, out.path);
  again.resume = true;
  testing::internal::CaptureStdout();
  TrainSummary sum;
  sum.steps = 99;
  EXPECT_EQ(runTraining(g, *data, again, &sum), 0);
  std::string said = testing::internal::GetCapturedStdout();
  EXPECT_HAS(said, "already finished: its checkpoint is at step 3 of 3");
  EXPECT_FALSE(std::regex_search(said, std::regex(" -[0-9]"))) << said; // no negative counts
  EXPECT_EQ(sum.steps, 0);
}

TEST(Resume, AnotherSeedIsRefusedThroughTheTrainer) {
  Graph g = compile(kMlp);
  DataConfig dc;
  dc.format = "synthetic";
  auto data = makeDataSource(g, dc, 4);
  TempDir out;
  ASSERT_EQ(runTraining(g, *data, test::quietTrainerOptions(2, out.path)), 0);
  TrainerOptions o = test::quietTrainerOptions(4, out.path);
  o.resume = true;
  o.seed = 99;
  testing::internal::CaptureStderr();
  EXPECT_EQ(runTraining(g, *data, o), 1);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_HAS(err, "was written by a run with seed 1337, this run's seed is 99");
}

TEST(Checkpoint, ShapesBeyondTheFileAreRefusedEvenWithAValidChecksum) {
  TempDir dir;
  std::string path = (dir.path / "c.bin").string();
  Checkpoint c;
  c.step = 1;
  c.states["w"] = HostTensor{{2, 2}, {1, 2, 3, 4}};
  c.meta["model.inputs"] = "x [2] f32";
  saveCheckpoint(path, c, Precision::F32);
  Checkpoint back = loadCheckpoint(path);
  EXPECT_EQ(back.meta, c.meta);
  EXPECT_EQ(back.states.at("w").data, c.states.at("w").data);

  // The same file claiming a [2^40, 2] state, re-signed: refused before
  // anything that size is allocated.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  bytes.resize(bytes.size() - 8);
  size_t at = bytes.find(std::string("w\x02\0\0\0", 5));
  ASSERT_NE(at, std::string::npos);
  int64_t huge = int64_t(1) << 40;
  std::memcpy(&bytes[at + 5], &huge, 8);
  uint64_t sum = fnv1a64(bytes);
  bytes.append(reinterpret_cast<const char *>(&sum), 8);
  std::ofstream(path, std::ios::binary) << bytes;
  try {
    loadCheckpoint(path);
    FAIL() << "a checkpoint claiming more values than it holds was accepted";
  } catch (const std::runtime_error &e) {
    EXPECT_HAS(e.what(), "state 'w' has a dimension of 1099511627776, more values than the "
                         "checkpoint holds");
  }
}

TEST(OutputDirectory, MissingParentsAreCreatedAndFailuresNamed) {
  TempDir dir;
  fs::path deep = dir.path / "runs" / "a" / "b";
  prepareOutputDirectory(deep.string());
  EXPECT_TRUE(fs::is_directory(deep));
  prepareOutputDirectory(deep.string()); // already there: fine
  std::ofstream(dir.path / "file") << "x";
  try {
    prepareOutputDirectory((dir.path / "file" / "sub").string());
    FAIL() << "a folder under a file was accepted";
  } catch (const std::runtime_error &e) {
    EXPECT_HAS(e.what(), "cannot create the output directory '");
    EXPECT_HAS(e.what(), "file/sub': Not a directory");
  }
}

TEST(TrainerValues, OutOfRangeNumbersAreRefused) {
  EXPECT_EQ(train::checkTrainerNumber("lr", -1), "must be > 0, got -1");
  EXPECT_EQ(train::checkTrainerNumber("lr", 0), "must be > 0, got 0");
  EXPECT_EQ(train::checkTrainerNumber("beta1", 1), "must be in [0, 1), got 1");
  EXPECT_EQ(train::checkTrainerNumber("eps", 0), "must be > 0, got 0");
  EXPECT_EQ(train::checkTrainerNumber("weight_decay", -0.1), "must be >= 0, got -0.1");
  EXPECT_EQ(train::checkTrainerNumber("min_lr_ratio", 1.5), "must be in [0, 1], got 1.5");
  EXPECT_EQ(train::checkTrainerNumber("net_bandwidth", 0), "must be > 0, got 0");
  EXPECT_EQ(train::checkTrainerNumber("lr", 3e-4), std::nullopt);
  EXPECT_EQ(train::checkTrainerNumber("beta2", 0), std::nullopt);
  EXPECT_EQ(train::maxTrainerInteger("replicas"), kMaxReplicas);
}

TEST(Overrides, AnErrorNamesTheOverrideNotFileLineOne) {
  mlir::MLIRContext ctx;
  auto error = [&](const std::vector<std::string> &overrides) {
    std::string e;
    auto module = importConfigString(ctx, kMlp, "mlp.toml", overrides, e);
    EXPECT_FALSE(module);
    return e;
  };
  EXPECT_EQ(error({"train.lr=-1"}), "override 'train.lr=-1': error: 'train.lr' must be > 0, got -1");
  EXPECT_EQ(error({"train.lr=fast"}), "override 'train.lr=fast': error: 'train.lr' must be a number");
  EXPECT_EQ(error({"train.lrr=1"}), "override 'train.lrr=1': error: unknown key 'train.lrr'");
  EXPECT_EQ(error({"model.hidden=[0]"}),
            "override 'model.hidden=[0]': error: 'model.hidden' must hold positive integers");
  EXPECT_EQ(error({"nodot=1"}),
            "override 'nodot=1': error: it must look like section.key=value (e.g. train.lr=3e-4)");
  // The same key in the file keeps its line and column.
  std::string inFile = std::string(kMlp) + "";
  inFile.replace(inFile.find("lr = 1e-2"), 9, "lr = -1e-2");
  std::string e;
  EXPECT_FALSE(importConfigString(ctx, inFile, "mlp.toml", {}, e));
  EXPECT_EQ(e, "mlp.toml:10:6: error: 'train.lr' must be > 0, got -0.01");
}

TEST(Overrides, MlirModelOverridesAreNamedToo) {
  TempDir dir;
  std::string path = (dir.path / "m.mlir").string();
  std::ofstream(path) << R"(train.model @m attributes {trainer = {lr = 0.1}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
)";
  mlir::MLIRContext ctx;
  auto diagnostics = printDiagnostics(ctx);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(loadModel(ctx, path, {"train.lr=-1"}));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_HAS(err, "override 'train.lr=-1': error: 'train.model' op trainer option 'lr' must be "
                  "> 0, got -1");
  mlir::MLIRContext ctx2;
  EXPECT_TRUE(loadModel(ctx2, path, {"train.lr=0.5"}));
}

TEST(MlirModels, TheSizeLimitsOfConfigsApply) {
  TempDir dir;
  auto load = [&](const std::string &text) {
    std::string path = (dir.path / "m.mlir").string();
    std::ofstream(path) << text;
    mlir::MLIRContext ctx;
    auto diagnostics = printDiagnostics(ctx);
    testing::internal::CaptureStderr();
    bool ok = loadModel(ctx, path, {}).has_value();
    std::string err = testing::internal::GetCapturedStderr();
    return std::make_pair(ok, err);
  };
  // One tensor of 10^10 elements (the TOML limit is 2^31).
  auto [ok1, err1] = load(R"(train.model @m {
  train.param @w : tensor<100000x100000xf32> = zeros
  train.step {
    %w = train.read @w : tensor<100000x100000xf32>
    %l = train.reduce_sum %w [0, 1] : tensor<100000x100000xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
)");
  EXPECT_FALSE(ok1);
  EXPECT_HAS(err1, "m.mlir:2:3: error: the tensor 'tensor<100000x100000xf32>' holds more than "
                   "2^31 elements");
  // 40 tensors of 2^31 elements each: 2^36 + parameters in all.
  std::string many = "train.model @m {\n";
  for (int i = 0; i < 40; ++i)
    many += "  train.param @w" + std::to_string(i) + " : tensor<65536x32768xf32> = zeros\n";
  many += R"(  train.step {
    %w = train.read @w0 : tensor<65536x32768xf32>
    %l = train.reduce_sum %w [0, 1] : tensor<65536x32768xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
)";
  auto [ok2, err2] = load(many);
  EXPECT_FALSE(ok2);
  EXPECT_HAS(err2, "error: the model has more than 2^36 parameters");
}

} // namespace
