//===- TrainerTest.cpp - the training loop, data, checkpoints -------------===//
#include "TestSupport.h"
#include "stretto/Runtime/Communicator.h"
#include "stretto/Runtime/Trainer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace stretto;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

const char *const kMlp = test::kSmallMlp;

Graph compile(const std::string &toml, const std::vector<std::string> &overrides = {}) {
  return test::compileConfig(toml, test::trainingPipeline(), overrides);
}

// A byte-level GPT small enough to train 30 steps in a test, on the shipped
// corpus: the trainer tests of execution choices.
const char *const kTinyGpt = R"(
[model]
kind = "gpt"
layers = 1
heads = 2
d_model = 16
seq_len = 8
batch = 8
vocab = 128
[train]
optimizer = "adamw"
lr = 3e-3
schedule = "constant"
eval_interval = 1000
[data]
path = ")" STRETTO_SOURCE_DIR R"(/data/kjv.txt"
)";

std::unique_ptr<DataSource> kjvFor(const Graph &g) {
  DataConfig dc;
  dc.path = STRETTO_SOURCE_DIR "/data/kjv.txt";
  return makeDataSource(g, dc, 128);
}

// A part of a step is a slice of that step's rows: micro-batch k of rank r
// reads the rows a run of one process and one micro-batch reads there. The
// old order (each micro-batch a step of its own, rows 0..B-1) fails this.
TEST(Data, APartIsASliceOfItsStepsBatch) {
  for (const char *toml : {kTinyGpt, kMlp}) {
    const bool lm = toml == kTinyGpt;
    Graph whole = compile(toml, {"model.batch=8"});
    DataConfig dc;
    dc.path = STRETTO_SOURCE_DIR "/data/kjv.txt";
    dc.format = lm ? "text" : "synthetic";
    auto all = makeDataSource(whole, dc, lm ? 128 : 4);
    for (int parts : {2, 4}) {
      Graph slice = compile(toml, {"model.batch=" + std::to_string(8 / parts)});
      auto part = makeDataSource(slice, dc, lm ? 128 : 4);
      for (Split split : {Split::Train, Split::Val})
        for (uint64_t step : {0u, 5u}) {
          auto full = all->batch(split, step, 0);
          for (int p = 0; p < parts; ++p) {
            auto got = part->batch(split, step, p);
            for (auto &[name, t] : got) {
              const HostTensor &f = full.at(name);
              const size_t n = t.data.size();
              std::vector<double> expect(f.data.begin() + p * n, f.data.begin() + (p + 1) * n);
              EXPECT_EQ(t.data, expect) << name << ", " << parts << " parts, part " << p
                                        << ", step " << step << (lm ? " (text)" : " (synthetic)");
            }
          }
        }
    }
  }
}

/// `ranks` data-parallel ranks on threads (rank r's losses in out[r]), each
/// with `micro` micro-batches of a graph compiled for that split.
std::vector<TrainSummary> trainSplit(int64_t batch, int ranks, int64_t micro, int64_t steps) {
  const int64_t rankBatch = batch / ranks;
  Graph g = compile(kTinyGpt, {"model.batch=" + std::to_string(rankBatch),
                               "train.micro_batches=" + std::to_string(micro)});
  std::vector<TrainSummary> out(static_cast<size_t>(ranks));
  std::vector<int> rc(static_cast<size_t>(ranks), -1);
  InProcessGroup group(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      auto data = kjvFor(g);
      TrainerOptions o = test::quietTrainerOptions(steps);
      o.compiled = true;
      o.microBatches = micro;
      o.evalInterval = 1000;
      if (ranks > 1)
        o.dataParallel = &group.rank(r);
      rc[static_cast<size_t>(r)] = runTraining(g, *data, o, &out[static_cast<size_t>(r)]);
    });
  for (std::thread &t : threads)
    t.join();
  for (int r = 0; r < ranks; ++r)
    EXPECT_EQ(rc[static_cast<size_t>(r)], 0) << "rank " << r;
  return out;
}

// Micro-batches and data-parallel ranks are execution choices: a step reads
// the same rows whatever they are, so the losses agree to summation order
// (step 1: the same weights, only the order of the sums differs).
TEST(Trainer, MicroBatchesAndRanksTrainOnTheSameData) {
  const int64_t steps = 30;
  std::vector<double> one = trainSplit(8, 1, 1, steps).at(0).losses;
  ASSERT_EQ(one.size(), size_t(steps));
  struct Split_ {
    int ranks;
    int64_t micro;
  };
  for (Split_ s : {Split_{1, 2}, Split_{1, 4}, Split_{2, 1}, Split_{2, 2}}) {
    std::vector<double> got = trainSplit(8, s.ranks, s.micro, steps).at(0).losses;
    ASSERT_EQ(got.size(), one.size());
    const std::string what =
        std::to_string(s.ranks) + " rank(s) x " + std::to_string(s.micro) + " micro-batches";
    EXPECT_NEAR(got[0], one[0], 1e-6 * one[0]) << what << ", step 1";
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_NEAR(got[i], one[i], 1e-5 * one[i]) << what << ", step " << i + 1;
  }
}

// A checkpoint from before step-sliced batches (no "data.order") resumes,
// and a run that splits its steps says that its data order changed.
TEST(Trainer, ResumingAnOlderCheckpointNamesTheDataOrderChange) {
  Graph g = compile(kTinyGpt, {"model.batch=4", "train.micro_batches=2"});
  auto data = kjvFor(g);
  TempDir out;
  TrainerOptions o = test::quietTrainerOptions(2, out.path);
  o.microBatches = 2;
  ASSERT_EQ(runTraining(g, *data, o), 0);
  const std::string path = out / "checkpoint.bin";
  Checkpoint c = loadCheckpoint(path);
  ASSERT_EQ(c.meta.at("data.order"), kDataOrder);
  auto resumeOutput = [&](int64_t steps) {
    o.steps = steps;
    o.resume = true;
    testing::internal::CaptureStderr();
    EXPECT_EQ(runTraining(g, *data, o), 0);
    return testing::internal::GetCapturedStderr();
  };
  EXPECT_EQ(resumeOutput(3).find("data order"), std::string::npos);
  c = loadCheckpoint(path);
  c.meta.erase("data.order");
  saveCheckpoint(path, c, Precision::F32);
  std::string said = resumeOutput(4);
  EXPECT_NE(said.find(path + " was written before each step's batch was sliced"),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("from step 4 on"), std::string::npos) << said;
}

TEST(Trainer, MlpLossFalls) {
  Graph g = compile(kMlp);
  DataConfig dc;
  dc.format = "synthetic";
  auto data = makeDataSource(g, dc, 4);
  TrainSummary s;
  ASSERT_EQ(runTraining(g, *data, test::quietTrainerOptions(40), &s), 0);
  ASSERT_EQ(s.losses.size(), 40u);
  // Four balanced classes start near log(4) = 1.386; a linear teacher is
  // learnable, so 40 AdamW steps must cut it substantially.
  EXPECT_NEAR(s.firstLoss, std::log(4.0), 0.3);
  EXPECT_LT(s.finalLoss, 0.75 * s.firstLoss);
  EXPECT_GT(s.finalValLoss, 0.0);
}

TEST(Trainer, SameSeedSameLossesDifferentSeedDifferent) {
  Graph g = compile(kMlp);
  DataConfig dc;
  dc.format = "synthetic";
  auto data = makeDataSource(g, dc, 4);
  TrainSummary a, b, c;
  auto o = test::quietTrainerOptions(10);
  ASSERT_EQ(runTraining(g, *data, o, &a), 0);
  ASSERT_EQ(runTraining(g, *data, o, &b), 0);
  o.seed = 7;
  ASSERT_EQ(runTraining(g, *data, o, &c), 0);
  EXPECT_EQ(a.losses, b.losses); // bit-identical
  EXPECT_NE(a.losses, c.losses);
}

// On both executors: a run stopped and resumed gives the losses and the
// final checkpoint of an uninterrupted run, bit for bit (the compiled
// runtime's sums run in a fixed order).
class ResumeOn : public testing::TestWithParam<bool> {};

TEST_P(ResumeOn, IsBitIdentical) {
  Graph g = compile(kMlp);
  DataConfig dc;
  dc.format = "synthetic";
  auto data = makeDataSource(g, dc, 4);
  TempDir full, split;
  TrainSummary whole, first, second;
  auto options = [&](int64_t steps, const std::string &out) {
    TrainerOptions o = test::quietTrainerOptions(steps, out);
    o.compiled = GetParam();
    return o;
  };
  ASSERT_EQ(runTraining(g, *data, options(30, full.path), &whole), 0);
  ASSERT_EQ(runTraining(g, *data, options(12, split.path), &first), 0);
  auto o = options(30, split.path);
  o.resume = true;
  ASSERT_EQ(runTraining(g, *data, o, &second), 0);
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), second.losses.begin(), second.losses.end());
  EXPECT_EQ(joined, whole.losses);
  // The final checkpoints agree bit for bit too.
  Checkpoint x = loadCheckpoint((full.path / "checkpoint.bin").string());
  Checkpoint y = loadCheckpoint((split.path / "checkpoint.bin").string());
  EXPECT_EQ(x.step, 30);
  EXPECT_EQ(y.step, 30);
  ASSERT_EQ(x.states.size(), y.states.size());
  for (auto &[name, t] : x.states)
    EXPECT_EQ(t.data, y.states.at(name).data) << name;
}

INSTANTIATE_TEST_SUITE_P(Trainer, ResumeOn, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool> &i) {
                           return std::string(i.param ? "CompiledRuntime" : "Reference");
                         });

TEST(Trainer, WritesMetricsAndPlot) {
  Graph g = compile(kMlp);
  DataConfig dc;
  dc.format = "synthetic";
  auto data = makeDataSource(g, dc, 4);
  TempDir out;
  ASSERT_EQ(runTraining(g, *data, test::quietTrainerOptions(20, out.path)), 0);
  std::ifstream jsonl(out.path / "metrics.jsonl");
  std::string line;
  int lines = 0, withVal = 0;
  while (std::getline(jsonl, line)) {
    ++lines;
    EXPECT_EQ(line.rfind("{\"step\": ", 0), 0u) << line;
    withVal += line.find("\"val_loss\"") != std::string::npos;
  }
  EXPECT_EQ(lines, 20);
  EXPECT_EQ(withVal, 1); // eval at step 20 only
  std::ifstream svg(out.path / "loss.svg");
  std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("<polyline"), std::string::npos);
}

TEST(Checkpoint, RoundTripAndCorruptionDetected) {
  TempDir dir;
  std::string path = (dir.path / "c.bin").string();
  Checkpoint c;
  c.step = 5;
  c.seed = 9;
  c.states["w"] = HostTensor{{2, 2}, {1.5, -2.25, 3.0, 0.125}};
  saveCheckpoint(path, c, Precision::F64);
  Checkpoint r = loadCheckpoint(path);
  EXPECT_EQ(r.step, 5);
  EXPECT_EQ(r.seed, 9u);
  EXPECT_EQ(r.states.at("w").data, c.states.at("w").data);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // Flip one byte in the payload: the checksum catches it.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  EXPECT_THROW(loadCheckpoint(path), std::runtime_error);
  // Truncation.
  saveCheckpoint(path, c, Precision::F32);
  fs::resize_file(path, fs::file_size(path) - 3);
  try {
    loadCheckpoint(path);
    FAIL() << "truncated checkpoint accepted";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  // Another format version: refused, saying so.
  saveCheckpoint(path, c, Precision::F32);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(11);
    f.put('9');
  }
  try {
    loadCheckpoint(path);
    FAIL() << "a checkpoint of format 9 was accepted";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("has format 9 but this build reads formats 1 and 2"),
              std::string::npos)
        << e.what();
  }
  // Not a checkpoint at all.
  std::ofstream(path) << "hello";
  EXPECT_THROW(loadCheckpoint(path), std::runtime_error);
}

TEST(Trainer, ResumeRejectsMismatchedCheckpoint) {
  Graph g = compile(kMlp);
  Graph other = compile(kMlp, {"model.hidden=[8]"});
  DataConfig dc;
  dc.format = "synthetic";
  auto data = makeDataSource(g, dc, 4);
  TempDir out;
  ASSERT_EQ(runTraining(other, *data, test::quietTrainerOptions(2, out.path)), 0);
  auto o = test::quietTrainerOptions(4, out.path);
  o.resume = true;
  testing::internal::CaptureStderr();
  EXPECT_EQ(runTraining(g, *data, o), 1);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("has shape"), std::string::npos) << err;
}

TEST(Trainer, NaNLossStopsWithoutOverwritingCheckpoint) {
  // A learning rate of 1e30 blows the MLP up within a few steps.
  Graph good = compile(kMlp);
  Graph bad = compile(kMlp, {"train.lr=1e30"});
  DataConfig dc;
  dc.format = "synthetic";
  auto data = makeDataSource(good, dc, 4);
  TempDir out;
  ASSERT_EQ(runTraining(good, *data, test::quietTrainerOptions(3, out.path)), 0);
  std::string ckpt = (out.path / "checkpoint.bin").string();
  Checkpoint before = loadCheckpoint(ckpt);
  testing::internal::CaptureStderr();
  auto resumed = test::quietTrainerOptions(50, out.path);
  resumed.resume = true; // the diverging recipe continues the good run
  EXPECT_EQ(runTraining(bad, *data, resumed), 1);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("the loss is"), std::string::npos) << err;
  Checkpoint after = loadCheckpoint(ckpt);
  EXPECT_EQ(after.step, before.step);
  for (auto &[name, t] : before.states)
    EXPECT_EQ(t.data, after.states.at(name).data) << name;
}

// An update that overflows the weights while the loss of that step was still
// finite must not reach the checkpoint: the run stops and the last good one
// stays as it was.
TEST(Trainer, NonFiniteStateIsNeverCheckpointed) {
  Graph good = compile(kMlp);
  // lr = 1e300 is inf in f32: the first update makes the weights inf/NaN
  // while that step's loss (computed before the update) is finite.
  Graph bad = compile(kMlp, {"train.lr=1e300"});
  DataConfig dc;
  dc.format = "synthetic";
  auto data = makeDataSource(good, dc, 4);
  TempDir out;
  ASSERT_EQ(runTraining(good, *data, test::quietTrainerOptions(2, out.path)), 0);
  std::string ckpt = (out.path / "checkpoint.bin").string();
  Checkpoint before = loadCheckpoint(ckpt);
  auto o = test::quietTrainerOptions(3, out.path); // step 3: finite loss, then inf weights
  o.resume = true;
  testing::internal::CaptureStderr();
  EXPECT_EQ(runTraining(bad, *data, o), 1);
  std::string err = testing::internal::GetCapturedStderr();
  // It stops at the step whose update made them so, before any checkpoint.
  EXPECT_NE(err.find("step 3: after the update, state 'fc0.w' holds"), std::string::npos) << err;
  EXPECT_NE(err.find("stopping without checkpointing this state"), std::string::npos) << err;
  Checkpoint after = loadCheckpoint(ckpt);
  EXPECT_EQ(after.step, before.step);
}

// A new run never overwrites an earlier run's checkpoint.
TEST(Trainer, NewRunRefusesExistingCheckpoint) {
  Graph g = compile(kMlp);
  DataConfig dc;
  dc.format = "synthetic";
  auto data = makeDataSource(g, dc, 4);
  TempDir out;
  ASSERT_EQ(runTraining(g, *data, test::quietTrainerOptions(2, out.path)), 0);
  testing::internal::CaptureStderr();
  EXPECT_EQ(runTraining(g, *data, test::quietTrainerOptions(4, out.path)), 1);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("already exists: pass --resume"), std::string::npos) << err;
  EXPECT_EQ(loadCheckpoint((out.path / "checkpoint.bin").string()).step, 2);
}

TEST(Data, TextWindowsAndVocabularyErrors) {
  Graph g = compile(R"(
[model]
kind = "gpt"
layers = 1
heads = 1
d_model = 4
seq_len = 4
batch = 2
vocab = 128
[data]
path = "x"
)");
  TempDir dir;
  std::string path = (dir.path / "t.txt").string();
  std::ofstream(path) << std::string(200, 'a') << "bcdefghij";
  DataConfig dc;
  dc.path = path;
  dc.format = "text";
  auto data = makeDataSource(g, dc, 128);
  auto b = data->batch(Split::Train, 0, 0);
  ASSERT_EQ(b.at("tokens").shape, (Shape{2, 4}));
  // Targets are the tokens shifted by one.
  auto &tok = b.at("tokens").data, &tgt = b.at("targets").data;
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t < 3; ++t)
      EXPECT_EQ(tgt[r * 4 + t], tok[r * 4 + t + 1]);
  // Deterministic by (split, index).
  EXPECT_EQ(data->batch(Split::Train, 3, 1).at("tokens").data,
            data->batch(Split::Train, 3, 1).at("tokens").data);

  // A byte outside a 64-entry vocabulary is reported with its offset.
  try {
    makeDataSource(g, dc, 64);
    FAIL();
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos);
  }
  // Empty and missing files name the file.
  std::string empty = (dir.path / "empty.txt").string();
  std::ofstream(empty).close();
  dc.path = empty;
  EXPECT_THROW(makeDataSource(g, dc, 128), std::runtime_error);
  dc.path = (dir.path / "missing.txt").string();
  EXPECT_THROW(makeDataSource(g, dc, 128), std::runtime_error);
  // uint16 token files: an id >= vocab is an error.
  std::string bin = (dir.path / "t.bin").string();
  {
    std::ofstream f(bin, std::ios::binary);
    for (int i = 0; i < 100; ++i) {
      uint16_t v = i == 50 ? 300 : 7;
      f.write(reinterpret_cast<const char *>(&v), 2);
    }
  }
  dc.path = bin;
  dc.format = "bin";
  try {
    makeDataSource(g, dc, 128);
    FAIL();
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("token 300 at index 50"), std::string::npos) << e.what();
  }
}

} // namespace
