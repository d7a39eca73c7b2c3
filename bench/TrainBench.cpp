//===- TrainBench.cpp - compiled CPU path vs the reference executor -------===//
//
//   build/bin/stretto-bench-train CONFIG.toml [--steps N] [--ref-steps N]
//                                 [--json FILE] [--profile]
//
// In one process, on the config's model and data:
//  - the sgemm peak of this machine with the runtime's GEMM library
//    (stretto::sgemm: oneDNN or OpenBLAS, runtime/exec/Gemm.cpp; best of a few 1024^3 and
//    model-shaped GEMMs, same thread count);
//  - cold start (empty kernel cache: passes + host compile) and warm start
//    (cache hit: config to a ready executor), in seconds;
//  - train-step tokens/s of the compiled runtime and of the reference
//    executor, their ratio, the model FLOPs (GEMMs and attention counted from
//    the graph) per step, achieved GFLOP/s and the fraction of sgemm peak;
//  - that both executors give the same losses on the first steps;
//  - with --profile, the compiled runtime's time per op kind, and the
//    fused kernels' GB/s against a memory-bandwidth roof measured here;
//  - with --gemm-libraries, only the step's GEMMs, timed on every GEMM
//    library installed (bench/GemmLibraries.cpp), nothing else.
// Prints figures; asserts nothing about speed.
//
//===----------------------------------------------------------------------===//
#include "GemmLibraries.h"
#include "exec/OpSemantics.h"
#include "stretto/Compiler/Lowering.h"
#include "stretto/Frontend/Load.h"
#include "stretto/Kernel/Compile.h"
#include "stretto/Runtime/Gemm.h"
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Runtime/Trainer.h"
#include "stretto/Support/Flops.h"
#include "stretto/Transforms/Pipelines.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <omp.h>

#include <filesystem>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

using namespace stretto;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Best GFLOP/s of repeated C = A B for one shape.
double sgemmRate(int m, int n, int k) {
  std::vector<float> a(size_t(m) * k, 0.5f), b(size_t(k) * n, 0.25f), c(size_t(m) * n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    int iters = 0;
    do {
      sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
      ++iters;
    } while (since(t0) < 0.1);
    best = std::max(best, 2.0 * m * n * k * iters / since(t0) / 1e9);
  }
  return best;
}

// Memory bandwidth roof: the best of a few STREAM-style triads a = b + s c
// over arrays far larger than the caches, on every thread; bytes counted as
// STREAM does (two reads, one write per element).
double triadRate() {
  const int64_t n = int64_t(1) << 24; // 64 MB per array
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      a[i] = b[i] + 0.5f * c[i];
    best = std::max(best, 3.0 * 4 * n / since(t0) / 1e9);
  }
  volatile float sink = a[n / 2]; // a is read: the stores stay
  (void)sink;
  return best;
}

// Multiply-add FLOPs of one run of a phase's GEMMs, matmuls, attention and
// Newton-Schulz iterations.
double phaseFlops(const Graph &g, Phase ph) {
  const std::vector<Node> &nodes = g.phase(ph);
  double f = 0;
  for (const Node &n : nodes) {
    if (n.kind == OpKind::Gemm) { // (a bias gradient's row is not a product's)
      const ops::GemmDims d =
          ops::gemmDims(n, nodes[n.operands[0]].shape, nodes[n.operands[1]].shape);
      f += 2.0 * double(d.batch) * double(d.m) * double(d.n) * double(d.k);
    } else if (n.kind == OpKind::Matmul) {
      const Shape &as = nodes[n.operands[0]].shape;
      f += 2.0 * static_cast<double>(numElements(n.shape)) * static_cast<double>(as.back());
    } else if (n.kind == OpKind::Attention || n.kind == OpKind::AttentionGrad) {
      const ops::AttentionDims a = ops::attentionDimsOf(n, nodes); // (q, k, v, or packed)
      f += n.kind == OpKind::Attention
               ? attentionFlops(double(a.batch), double(a.tq), double(a.tk), double(a.d),
                                double(a.dv))
               : attentionGradFlops(double(a.batch), double(a.tq), double(a.d));
    } else if (n.kind == OpKind::NewtonSchulz) {
      double m = static_cast<double>(std::min(n.shape[0], n.shape[1]));
      double s = static_cast<double>(std::max(n.shape[0], n.shape[1]));
      f += static_cast<double>(n.ints[0]) * (2 * m * m * s + 2 * m * m * m + 2 * m * m * s);
    }
  }
  return f;
}

struct Built {
  std::unique_ptr<mlir::MLIRContext> ctx;
  std::optional<LoadedModel> loaded;
  Graph graph;
  std::unique_ptr<HostKernelCache> cache;
  std::map<std::string, RefExecutor::KernelFn> kernels;
};

// Config -> graph (compiled: with fused kernels from `cacheDir`).
std::unique_ptr<Built> build(const std::string &config, bool compiled, const std::string &cacheDir,
                             std::vector<std::pair<std::string, double>> *phases = nullptr) {
  auto b = std::make_unique<Built>();
  auto tp = Clock::now();
  auto mark = [&](const char *what) {
    if (phases)
      phases->push_back({what, since(tp)});
    tp = Clock::now();
  };
  b->ctx = std::make_unique<mlir::MLIRContext>();
  auto diag = printDiagnostics(*b->ctx);
  b->loaded = loadModel(*b->ctx, config, {});
  if (!b->loaded)
    return nullptr;
  mark("parse config");
  mlir::PassManager pm(b->ctx.get());
  buildTrainingPipeline(pm, TrainingPipelineOptions::fromTrainer(b->loaded->model));
  if (compiled)
    buildKernelPipeline(pm);
  if (mlir::failed(pm.run(*b->loaded->module)))
    return nullptr;
  mark("passes");
  if (compiled) {
    b->cache = std::make_unique<HostKernelCache>(cacheDir);
    std::string error;
    auto k = compileKernels(b->loaded->model, *b->cache, error);
    if (mlir::failed(k)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return nullptr;
    }
    b->kernels = k->functions;
    mark("kernels (emit, hash, load)");
  }
  auto g = lowerToGraph(b->loaded->model);
  if (mlir::failed(g))
    return nullptr;
  b->graph = std::move(*g);
  mark("lower to graph");
  return b;
}

struct RunFigures {
  double seconds = 0, tokensPerSecond = 0;
  std::vector<double> losses;
};

// `steps` optimizer steps after one warm-up step (not timed).
RunFigures timeSteps(Executor &ex, DataSource &data, int64_t steps, int64_t microBatches) {
  RunFigures r;
  ex.initialize(1337);
  auto one = [&](int64_t step) {
    double loss = 0;
    for (int64_t k = 0; k < microBatches; ++k)
      loss += ex.microStep(data.batch(Split::Train, uint64_t(step), k)).outputs.at(0);
    ex.update();
    r.losses.push_back(loss / double(microBatches));
  };
  one(0);
  auto t0 = Clock::now();
  for (int64_t s = 1; s <= steps; ++s)
    one(s);
  r.seconds = since(t0);
  r.tokensPerSecond = double(steps * microBatches * data.tokensPerBatch()) / r.seconds;
  return r;
}

} // namespace

int main(int argc, char **argv) {
  std::string config, jsonPath;
  int64_t steps = 10, refSteps = 2;
  bool profile = false, gemmLibraries = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc)
      steps = std::atoll(argv[++i]);
    else if (a == "--ref-steps" && i + 1 < argc)
      refSteps = std::atoll(argv[++i]);
    else if (a == "--json" && i + 1 < argc)
      jsonPath = argv[++i];
    else if (a == "--profile")
      profile = true;
    else if (a == "--gemm-libraries")
      gemmLibraries = true;
    else if (config.empty() && a[0] != '-')
      config = a;
    else {
      std::fprintf(stderr, "usage: %s CONFIG.toml [--steps N] [--ref-steps N] [--json FILE] [--profile] [--gemm-libraries]\n",
                   argv[0]);
      return 2;
    }
  }
  if (config.empty()) {
    std::fprintf(stderr, "usage: %s CONFIG.toml [--steps N] [--ref-steps N] [--json FILE] [--profile] [--gemm-libraries]\n",
                 argv[0]);
    return 2;
  }
  try {
    PlanExecutor::rowLoopIsaName(); // STRETTO_RUNTIME_ISA, if set, is one it knows
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 2;
  }
  int threads = omp_get_max_threads();
  if (gemmLibraries) {
    // The compiled runtime's graph: its GEMMs carry transposes as flags
    // (kernel pipeline), unlike the reference graph's matmuls.
    char tmpl[] = "/tmp/stretto-bench-cache-XXXXXX";
    std::string dir = ::mkdtemp(tmpl) ? tmpl : "/tmp/stretto-bench-cache";
    auto b = build(config, /*compiled=*/true, dir);
    if (!b)
      return 1;
    stretto::bench::compareGemmLibraries(b->graph, stdout);
    std::filesystem::remove_all(dir);
    return 0;
  }

  // Cold start: a fresh cache directory; warm start: the same one again.
  char tmpl[] = "/tmp/stretto-bench-cache-XXXXXX";
  std::string cacheDir = ::mkdtemp(tmpl) ? tmpl : "/tmp/stretto-bench-cache";
  auto t0 = Clock::now();
  std::unique_ptr<Built> cold = build(config, true, cacheDir);
  if (!cold)
    return 1;
  double coldSeconds = since(t0);
  t0 = Clock::now();
  std::vector<std::pair<std::string, double>> warmPhases;
  std::unique_ptr<Built> warm = build(config, true, cacheDir, &warmPhases);
  if (!warm)
    return 1;
  auto tPlan = Clock::now();
  auto compiledEx = std::make_unique<PlanExecutor>(warm->graph, warm->kernels);
  warmPhases.push_back({"plan + initial states", since(tPlan)});
  double warmSeconds = since(t0);
  if (warm->cache->stats().compiles != 0)
    std::fprintf(stderr, "warning: the warm start compiled kernels (cache miss)\n");

  std::unique_ptr<Built> ref = build(config, false, cacheDir);
  if (!ref)
    return 1;
  int64_t vocab = 256;
  DataConfig dc = dataConfigOf(warm->loaded->model, config, vocab);
  std::unique_ptr<DataSource> data = makeDataSource(warm->graph, dc, vocab);
  int64_t micro = warm->loaded->model.getTrainerInt("micro_batches", 1);

  // The sgemm peak, measured now (same threads, same machine state).
  double peak = 0;
  for (auto [m, n, k] : {std::tuple{1024, 1024, 1024}, {2048, 1024, 256}, {2048, 256, 1024}})
    peak = std::max(peak, sgemmRate(m, n, k));

  compiledEx->setProfiling(profile);
  RunFigures comp = timeSteps(*compiledEx, *data, steps, micro);
  RefExecutor refEx(ref->graph, Precision::F32);
  RunFigures refr = timeSteps(refEx, *data, refSteps, micro);

  double flops = phaseFlops(warm->graph, Phase::Step) * double(micro) +
                 phaseFlops(warm->graph, Phase::Update);
  double achieved = flops * double(steps) / comp.seconds / 1e9;
  double maxDiff = 0;
  for (size_t i = 0; i < std::min(comp.losses.size(), refr.losses.size()); ++i)
    maxDiff = std::max(maxDiff, std::fabs(comp.losses[i] - refr.losses[i]));
  const PlanStats &ps = compiledEx->stats();

  std::string name = warm->loaded->model.getSymName().str();
  std::printf("model %s: %lld tokens/step, %d threads, %zu fused kernels\n", name.c_str(),
              (long long)(data->tokensPerBatch() * micro), threads, warm->kernels.size());
  std::printf("  sgemm peak (%s, measured) %8.1f GFLOP/s\n", gemmLibrary().c_str(), peak);
  std::printf("  runtime row loops built for        %s\n", PlanExecutor::rowLoopIsaName());
  std::printf("  model FLOPs per step (graph)      %8.3f GFLOP\n", flops / 1e9);
  std::printf("  compiled   %9.0f tok/s  %6.1f GFLOP/s  %5.1f%% of sgemm peak  (%lld steps)\n",
              comp.tokensPerSecond, achieved, 100 * achieved / peak, (long long)steps);
  std::printf("  reference  %9.0f tok/s  (%lld steps)\n", refr.tokensPerSecond,
              (long long)refSteps);
  std::printf("  compiled / reference              %8.1fx\n",
              comp.tokensPerSecond / refr.tokensPerSecond);
  std::printf("  cold start (compile)              %8.2f s\n", coldSeconds);
  std::printf("  warm start (cache hit)            %8.2f s\n", warmSeconds);
  for (auto &[what, sec] : warmPhases)
    std::printf("    %-30s %8.3f s\n", what.c_str(), sec);
  std::printf("  buffer plan peak                  %8.1f MB (persistent %.1f MB, step arena %.1f MB; "
              "%.1f MB without reuse)\n",
              ps.peakBytes() / 1e6, ps.persistentBytes / 1e6, ps.stepArenaBytes / 1e6,
              ps.unplannedBytes / 1e6);
  std::printf("  max |loss diff| over %zu steps     %10.3g\n",
              std::min(comp.losses.size(), refr.losses.size()), maxDiff);
  double triad = profile ? triadRate() : 0;
  if (profile)
    std::printf("  memory bandwidth (triad, measured) %7.1f GB/s: the roof for the fused "
                "kernels' GB/s below\n\n%s",
                triad, compiledEx->profileReport().c_str());
  if (!jsonPath.empty()) {
    std::ofstream j(jsonPath);
    j << "{\"model\": \"" << name << "\", \"threads\": " << threads
      << ", \"tokens_per_step\": " << data->tokensPerBatch() * micro
      << ", \"kernels\": " << warm->kernels.size() << ", \"sgemm_peak_gflops\": " << peak << ", \"gemm_library\": \"" << gemmLibrary() << "\""
      << ", \"step_gflop\": " << flops / 1e9 << ", \"compiled_tok_s\": " << comp.tokensPerSecond
      << ", \"compiled_gflops\": " << achieved << ", \"reference_tok_s\": " << refr.tokensPerSecond
      << ", \"cold_start_s\": " << coldSeconds << ", \"warm_start_s\": " << warmSeconds
      << ", \"peak_bytes\": " << ps.peakBytes() << ", \"max_loss_diff\": " << maxDiff;
    if (profile)
      j << ", \"triad_gbs\": " << triad;
    j << "}\n";
  }
  std::string rm = "rm -rf '" + cacheDir + "'";
  if (std::system(rm.c_str()) != 0)
    std::fprintf(stderr, "warning: could not remove %s\n", cacheDir.c_str());
  return 0;
}
