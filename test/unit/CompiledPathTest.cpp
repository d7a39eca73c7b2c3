//===- CompiledPathTest.cpp - whole training steps, compiled vs reference -===//
//
// The compiled path (train passes, then kernel-lower-matmul and
// kernel-fuse-elementwise; fused C++ kernels from the host compiler, GEMMs
// through OpenBLAS) must train like the reference executor: same losses,
// evaluation losses and parameters over several steps, within f32 rounding
// (tolerances below), both when the reference executor calls the kernels
// and on the compiled runtime (PlanExecutor: planned buffers, its own row
// ops), with one and with two micro-batches per step.
//
//===----------------------------------------------------------------------===//
#include "stretto/Compiler/Lowering.h"
#include "stretto/Frontend/Import.h"
#include "stretto/Kernel/Compile.h"
#include "stretto/PlanExecutor.h"
#include "stretto/Trainer.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

using namespace stretto;

namespace {

struct Compiled {
  Graph graph;
  std::map<std::string, RefExecutor::KernelFn> kernels;
};

Compiled compile(const std::string &toml, bool kernels, HostKernelCache &cache) {
  mlir::MLIRContext ctx;
  std::string error;
  auto module = importConfigString(ctx, toml, "test.toml", {}, error);
  EXPECT_TRUE(module) << error;
  mlir::PassManager pm(&ctx);
  buildTrainingPipeline(pm);
  if (kernels)
    buildKernelPipeline(pm);
  EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
  auto model = *module->getOps<train::ModelOp>().begin();
  Compiled c;
  if (kernels) {
    auto k = compileKernels(model, cache, error);
    EXPECT_TRUE(mlir::succeeded(k)) << error;
    c.kernels = k->functions;
  }
  auto g = lowerToGraph(model);
  EXPECT_TRUE(mlir::succeeded(g));
  c.graph = *g;
  return c;
}

class CompiledPath : public testing::TestWithParam<const char *> {};

TEST_P(CompiledPath, TrainsLikeTheReference) {
  std::string cacheDir = (std::filesystem::temp_directory_path() /
                          ("stretto-kcache-" + std::to_string(::getpid())))
                             .string();
  HostKernelCache cache(cacheDir);
  std::string toml = GetParam();
  Compiled ref = compile(toml, false, cache), fast = compile(toml, true, cache);
  int kernels = 0, gemms = 0;
  for (const std::vector<Node> *ph : {&fast.graph.nodes, &fast.graph.update})
    for (const Node &n : *ph) {
      kernels += n.kind == OpKind::Kernel;
      gemms += n.kind == OpKind::Gemm;
      EXPECT_NE(n.kind, OpKind::Matmul) << "every matmul should be a GEMM";
    }
  EXPECT_GT(kernels, 0);
  EXPECT_GT(gemms, 0);
  EXPECT_EQ(fast.kernels.size(), static_cast<size_t>(kernels));

  DataConfig dc;
  dc.format = toml.find("kjv") != std::string::npos ? "text" : "synthetic";
  dc.path = STRETTO_SOURCE_DIR "/data/kjv.txt";
  auto data = makeDataSource(ref.graph, dc, toml.find("kjv") != std::string::npos ? 128 : 4);
  int64_t micro = toml.find("micro_batches = 2") != std::string::npos ? 2 : 1;
  RefExecutor a(ref.graph, Precision::F32), b(fast.graph, Precision::F32);
  b.setKernels(fast.kernels);
  PlanExecutor c(fast.graph, fast.kernels);
  std::vector<Executor *> all = {&a, &b, &c};
  const char *names[] = {"reference", "reference + kernels", "compiled runtime"};
  for (Executor *e : all)
    e->initialize(7);
  for (int step = 0; step < 5; ++step) {
    double loss[3] = {0, 0, 0};
    for (int64_t k = 0; k < micro; ++k) {
      auto batch = data->batch(Split::Train, uint64_t(step * micro + k));
      for (int e = 0; e < 3; ++e)
        loss[e] += all[e]->microStep(batch).outputs.at(0);
    }
    for (int e = 0; e < 3; ++e)
      all[e]->update();
    for (int e = 1; e < 3; ++e)
      EXPECT_NEAR(loss[0], loss[e], 1e-4 * (1 + std::fabs(loss[0])))
          << names[e] << ", step " << step;
  }
  // Evaluation (the compiled runtime runs only the forward nodes).
  auto val = data->batch(Split::Val, 0);
  double va = a.evaluate(val).outputs.at(0);
  for (int e = 1; e < 3; ++e)
    EXPECT_NEAR(va, all[e]->evaluate(val).outputs.at(0), 1e-4 * (1 + std::fabs(va))) << names[e];
  for (int e = 1; e < 3; ++e) {
    double worst = 0;
    for (const StateDecl &s : ref.graph.states) {
      HostTensor x = a.getState(s.name), y = all[e]->getState(s.name);
      for (size_t i = 0; i < x.data.size(); ++i)
        worst = std::max(worst, std::fabs(x.data[i] - y.data[i]) / (1e-3 + std::fabs(x.data[i])));
    }
    EXPECT_LT(worst, 1e-2) << names[e] << ": largest relative parameter/state difference after 5 steps";
  }
  EXPECT_LT(c.stats().stepArenaBytes, c.stats().unplannedBytes) << "the plan reuses no buffer";
  std::filesystem::remove_all(cacheDir);
}

const char *const kCaseNames[] = {"MlpSgd", "GptAdamW", "GptMuon", "GptTwoMicroBatches"};

INSTANTIATE_TEST_SUITE_P(
    Models, CompiledPath,
    testing::Values(
        // An MLP with SGD momentum on synthetic data.
        "[model]\nkind = \"mlp\"\ninputs = 8\nhidden = [16, 16]\nclasses = 4\nbatch = 8\n"
        "[train]\noptimizer = \"sgd\"\nlr = 0.05\n[data]\nformat = \"synthetic\"\n",
        // A small GPT with AdamW, clipping and a cosine schedule on the corpus.
        "[model]\nkind = \"gpt\"\nlayers = 2\nheads = 2\nd_model = 16\nseq_len = 8\n"
        "batch = 4\nvocab = 128\n[train]\noptimizer = \"adamw\"\nlr = 3e-3\n"
        "weight_decay = 0.1\ngrad_clip = 1.0\nschedule = \"cosine\"\nwarmup_steps = 2\n"
        "steps = 10\n[data]\npath = \"kjv\"\n",
        // Muon (Newton-Schulz stays a reference op; its GEMMs are the update's).
        "[model]\nkind = \"gpt\"\nlayers = 1\nheads = 2\nd_model = 16\nseq_len = 8\n"
        "batch = 4\nvocab = 128\n[train]\noptimizer = \"muon\"\nlr = 3e-3\n"
        "[data]\npath = \"kjv\"\n",
        // Two micro-batches per step: gradients summed, then their mean.
        "[model]\nkind = \"gpt\"\nlayers = 1\nheads = 2\nd_model = 16\nseq_len = 8\n"
        "batch = 4\nvocab = 128\n[train]\noptimizer = \"adamw\"\nlr = 3e-3\n"
        "micro_batches = 2\n[data]\npath = \"kjv\"\n"),
    [](const testing::TestParamInfo<const char *> &i) {
      return std::string(kCaseNames[i.index]);
    });

} // namespace
