//===- BuildTrainer.cpp - a model description into a runnable trainer -----===//
#include "stretto/Compiler/BuildTrainer.h"
#include "stretto/Runtime/Startup.h"

#include "stretto/Compiler/Lowering.h"
#include "stretto/Runtime/CudaJit.h"
#include "stretto/Runtime/HostJit.h"
#include "stretto/Kernel/Compile.h"
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Transforms/Passes.h"
#include "stretto/Transforms/Pipelines.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <fstream>

using namespace mlir;
using namespace stretto;

namespace {

bool fail(const TrainerBuildOptions &o, const std::string &msg) {
  llvm::errs() << o.tool << ": " << msg << "\n";
  return false;
}

// graph.txt: every phase's nodes, one per line.
void writeGraph(const Graph &graph, const std::string &path) {
  std::ofstream g(path);
  for (auto [phase, title] : {std::pair{Phase::Step, "step"}, {Phase::Update, "update"},
                              {Phase::Outer, "outer"}}) {
    const std::vector<Node> &nodes = graph.phase(phase);
    if (nodes.empty())
      continue;
    g << "// " << title << "\n";
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node &n = nodes[i];
      g << "%" << i << " = " << opKindName(n.kind);
      for (int o : n.operands)
        g << " %" << o;
      if (!n.name.empty())
        g << " \"" << n.name << "\"";
      bool sink = n.kind == OpKind::Write || n.kind == OpKind::Grad || n.kind == OpKind::Yield;
      if (!sink)
        g << " : " << shapeToString(n.shape) << " " << dtypeName(n.dtype);
      if (n.stage >= 0)
        g << " @stage " << n.stage;
      g << "\n";
    }
  }
}

// --dump's files beside the IR: the graph, every kernel's C++ and CUDA C
// source, the runtime's buffer plan, and the CUDA kernels as NVRTC
// compiles them (no GPU needed).
bool writeDump(const TrainerBuild &b, const std::optional<CompiledKernels> &ck,
               const TrainerBuildOptions &o) {
  const std::string &dir = o.dumpDir;
  writeGraph(b.graph, dir + "/graph.txt");
  std::string extra;
  if (ck) {
    std::ofstream(dir + "/kernels.cpp") << ck->cppSource;
    std::ofstream(dir + "/kernels.cu") << ck->cudaSource;
    std::ofstream(dir + "/runtime-ops.cu") << cudaRuntimeSource();
    try {
      PlanExecutor plan(b.graph, b.kernels.functions);
      std::ofstream(dir + "/plan.txt") << plan.describe();
      extra = ", kernel/ (kernel passes), kernels.cpp, kernels.cu, runtime-ops.cu, plan.txt";
    } catch (const std::exception &e) {
      return fail(o, e.what());
    }
    CudaKernelCache cuda(kernelCacheDirectory());
    std::string why, error;
    CudaBinary bin;
    if (!cuda.available(why)) {
      llvm::outs() << "note: no PTX/cubin in the dump: " << why << "\n";
    } else if (!cuda.compile(ck->cudaSource, o.cudaArch, bin, error)) {
      return fail(o, error);
    } else {
      std::ofstream(dir + "/kernels." + o.cudaArch + ".ptx") << bin.ptx;
      std::ofstream(dir + "/kernels." + o.cudaArch + ".cubin", std::ios::binary) << bin.cubin;
      std::ofstream(dir + "/kernels." + o.cudaArch + ".ptxas.txt") << bin.log;
      extra += ", kernels." + o.cudaArch + ".{ptx,cubin,ptxas.txt}";
    }
  }
  llvm::outs() << "wrote the IR after each pass, graph.txt" << extra << " to " << dir << "\n";
  return true;
}

} // namespace

std::optional<TrainerBuild> stretto::buildTrainer(MLIRContext &ctx, LoadedModel &loaded,
                                                  const TrainerBuildOptions &o) {
  TrainerBuild b;
  b.executor = o.executor;
  // The compiled runtime unless asked otherwise; where it does not apply
  // (yet), an explicit --executor=compiled is an error and the default
  // falls back to the reference executor with a note.
  auto useReference = [&](const std::string &why) -> bool {
    if (o.executorGiven)
      return false;
    if (!o.quiet)
      llvm::outs() << "note: using the reference executor: the compiled runtime " << why << "\n";
    b.executor = "reference";
    return true;
  };
  if (b.executor == "compiled" && o.precision == "f64" &&
      !useReference("computes in f32 (and bf16) only"))
    return fail(o, "--executor=compiled: the compiled runtime computes in f32 (and bf16 GEMMs) "
                "only; use --executor=reference"),
           std::nullopt;

  train::ModelOp model = loaded.model;
  // --dump: the IR after every pass, as a file tree under dumpDir.
  auto dumpPasses = [&](PassManager &pm, const std::string &dir) {
    if (o.dumpDir.empty())
      return;
    pm.getContext()->disableMultithreading();
    pm.enableIRPrintingToFileTree([](Pass *, Operation *) { return false; },
                                  [](Pass *, Operation *) { return true; },
                                  /*printModuleScope=*/true, /*onlyOnChange=*/false,
                                  /*onlyOnFailure=*/false, dir);
  };
  // Passes: the full pipeline on a model-level description; a step that was
  // already compiled (it writes state) is run as it is.
  bool compiled = !model.getStep() || !model.getStep().getBody().getOps<train::WriteOp>().empty();
  if (!compiled) {
    PassManager pm(&ctx);
    dumpPasses(pm, o.dumpDir);
    buildTrainingPipeline(pm, TrainingPipelineOptions::fromTrainer(model));
    // Decentralized data parallelism: local steps + gossip outer round.
    StringRef sync = model.getTrainerString("sync", "sync");
    if (sync == "gossip" || sync == "diloco")
      pm.nest<train::ModelOp>().addPass(train::createTrainGossip());
    if (failed(pm.run(*loaded.module)))
      return fail(o, "compilation failed"), std::nullopt;
  }
  // The compiled path: every fused kernel into one cached shared object.
  // Kernel-level passes run on a copy, so that a failure to build kernels
  // can still fall back to the reference executor on the training IR.
  std::optional<CompiledKernels> ck;
  if (b.executor == "compiled") {
    b.kernelModule = loaded.module->clone();
    train::ModelOp kmodel = *b.kernelModule->getOps<train::ModelOp>().begin();
    PassManager pm(&ctx);
    dumpPasses(pm, o.dumpDir + "/kernel"); // the kernel passes, on the trained model
    buildKernelPipeline(pm);
    std::string dir = kernelCacheDirectory(), error;
    auto t0 = std::chrono::steady_clock::now();
    FailureOr<CompiledKernels> built = failure();
    auto cache = std::make_shared<HostKernelCache>(dir);
    if (failed(pm.run(*b.kernelModule))) {
      error = "kernel passes failed";
    } else {
      if (!o.quiet)
        cache->setOnCompile([dir](size_t n) {
          llvm::outs() << "compiling " << n << " fused kernels with the host compiler (first run "
                       << "of this model; later runs take them from " << dir << ")...\n";
          llvm::outs().flush();
        });
      built = compileKernels(kmodel, *cache, error);
    }
    if (failed(built)) {
      if (!useReference("could not build this model's kernels:\n" + error))
        return fail(o, error), std::nullopt;
    } else {
      ck = *built;
      noteStartup(
          "host kernels",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count(),
          cache->stats().compiles ? "compiled" : "cache hit");
      b.kernelsPath = ck->sourcePath;
      b.kernels.functions = ck->functions;
      b.kernels.cppSource = ck->cppSource;
      b.kernels.cudaSource = ck->cudaSource;
      b.kernels.owner = cache;
      model = kmodel;
      if (!o.quiet)
        llvm::outs() << "compiled " << ck->functions.size() << " fused kernels in "
                     << llvm::format("%.1f", std::chrono::duration<double>(
                                                 std::chrono::steady_clock::now() - t0)
                                                 .count())
                     << " s (" << (cache->stats().compiles ? "compiled" : "cache hit") << ": "
                     << ck->sourcePath << ")\n";
    }
  }
  FailureOr<Graph> graph = lowerToGraph(model);
  if (failed(graph))
    return std::nullopt;
  if (b.executor == "compiled") {
    std::string why;
    if (!PlanExecutor::supports(*graph, why)) {
      if (!useReference("cannot run this model: " + why))
        return fail(o, "--executor=compiled: the compiled runtime cannot run this model: " + why +
                    "; use --executor=reference"),
               std::nullopt;
      b.kernels = PlanKernels();
      ck.reset();
      model = loaded.model;
      graph = lowerToGraph(model);
      if (failed(graph))
        return std::nullopt;
    }
  }
  if (b.executor == "reference" && o.precision == "bf16" &&
      model.getTrainerString("precision", "f32") != "bf16")
    return fail(o, "--precision=bf16 is a mode of the compiled runtime; the reference executor "
                "computes in f32 or f64"),
           std::nullopt;
  b.graph = std::move(*graph);
  b.model = model;
  if (!o.dumpDir.empty() && !writeDump(b, ck, o))
    return std::nullopt;
  return b;
}

RunSettings stretto::runSettingsOf(train::ModelOp model, const std::string &modelPath,
                                   const std::string &fingerprint) {
  RunSettings s;
  s.modelName = model.getSymName().str();
  s.fingerprint = fingerprint;
  s.optimizer = model.getTrainerString("optimizer", s.optimizer).str();
  s.data = dataConfigOf(model, modelPath, s.vocab);
  s.steps = model.getTrainerInt("total_steps", s.steps);
  s.microBatches = model.getTrainerInt("micro_batches", s.microBatches);
  s.precision = model.getTrainerString("precision", s.precision).str();
  s.seed = uint64_t(model.getTrainerInt("seed", int64_t(s.seed)));
  s.logInterval = model.getTrainerInt("log_interval", s.logInterval);
  s.evalInterval = model.getTrainerInt("eval_interval", s.evalInterval);
  s.evalBatches = model.getTrainerInt("eval_batches", s.evalBatches);
  s.checkpointInterval = model.getTrainerInt("checkpoint_interval", s.checkpointInterval);
  TrainingPipelineOptions pipe = TrainingPipelineOptions::fromTrainer(model);
  s.stages = pipe.stages;
  s.twoBW = pipe.twoBW;
  s.replicas = model.getTrainerInt("replicas", 1);
  s.sync = model.getTrainerString("sync", "sync").str();
  GossipSettings &g = s.gossip;
  g.rounds = model.getTrainerInt("outer_rounds", g.rounds);
  g.stepTime = model.getTrainerFloat("net_step_time", g.stepTime);
  g.bandwidth = model.getTrainerFloat("net_bandwidth", g.bandwidth);
  g.latency = model.getTrainerFloat("net_latency", g.latency);
  g.heterogeneous =
      model.getTrainerOption("net_slow_links") || model.getTrainerOption("net_slow_replicas");
  g.slowReplicas = model.getTrainerFloat("net_slow_replicas", g.slowReplicas);
  g.slowReplicaFactor = model.getTrainerFloat("net_slow_replica_factor", g.slowReplicaFactor);
  g.slowLinks = model.getTrainerFloat("net_slow_links", g.slowLinks);
  g.slowLinkFactor = model.getTrainerFloat("net_slow_link_factor", g.slowLinkFactor);
  return s;
}
