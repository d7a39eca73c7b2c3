//===- stretto-train.cpp - compile a model description and train it ------===//
//
//   stretto-train examples/gpt-tiny.toml
//   stretto-train examples/gpt-tiny.toml train.steps=50 --out runs/tiny
//   stretto-train model.mlir --dump dump/
//
//===----------------------------------------------------------------------===//
#include "stretto/Compiler/Lowering.h"
#include "stretto/Transforms/Pipelines.h"
#include "stretto/CudaJit.h"
#include "stretto/Device.h"
#include "stretto/Frontend/Load.h"
#include "stretto/Kernel/Compile.h"
#include "stretto/Gossip.h"
#include "stretto/Transforms/Passes.h"
#include "stretto/Pipeline.h"
#include "stretto/PlanExecutor.h"
#include "stretto/PlanFile.h"
#include "stretto/RunChecks.h"
#include "stretto/Trainer.h"
#include "stretto/Runtime/Launcher.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace cl = llvm::cl;
using namespace mlir;
using namespace stretto;

static cl::OptionCategory cat("stretto-train options");
static cl::opt<std::string> modelPath(cl::Positional, cl::desc("<model.toml | model.mlir>"),
                                      cl::Required, cl::cat(cat));
static cl::list<std::string> overrides(cl::Positional, cl::desc("[section.key=value ...]"),
                                       cl::cat(cat));
static cl::opt<int64_t> steps("steps", cl::desc("Training steps (overrides train.steps)"),
                              cl::init(-1), cl::cat(cat));
static cl::opt<int64_t> seed("seed", cl::desc("Seed for initialisation and data order"),
                             cl::init(-1), cl::cat(cat));
static cl::opt<int64_t> logInterval("log-interval", cl::desc("Steps between progress lines"),
                                    cl::init(-1), cl::cat(cat));
static cl::opt<std::string> outDir("out", cl::desc("Output directory for metrics, plot, checkpoint"),
                                   cl::init(""), cl::cat(cat));
static cl::opt<std::string> dumpDir("dump", cl::desc("Write the IR after every pass, the lowered graph, "
                                                     "the kernel sources, PTX/cubin and the buffer "
                                                     "plan here"),
                                    cl::init(""), cl::cat(cat));
static cl::opt<std::string> savePlan(
    "save-plan", cl::desc("Compile, write the trainer plan (lowered step, kernel sources, "
                          "settings) to this file for stretto-run, and stop"),
    cl::init(""), cl::cat(cat));
static cl::opt<bool> resume("resume", cl::desc("Continue from <out>/checkpoint.bin"), cl::cat(cat));
static cl::opt<std::string> initFrom(
    "init-from",
    cl::desc("Start from the parameters in this safetensors file (e.g. a run's "
             "model.safetensors): names and shapes must match the model's; with --resume "
             "the checkpoint wins"),
    cl::init(""), cl::cat(cat));
static cl::opt<bool> forceResume(
    "force-resume",
    cl::desc("--resume even when the checkpoint was written with another seed, model or "
             "micro-batch count"),
    cl::cat(cat));
static cl::opt<std::string> device("device",
                                   cl::desc("cpu (default) | cuda | auto (CUDA device 0 when a "
                                            "GPU, its driver, NVRTC and cuBLASLt are found, "
                                            "else the CPU; cuda says why when it falls back). "
                                            "CUDA is opt-in until it has run on a GPU"),
                                   cl::init("cpu"),
                                   cl::cat(cat));
static cl::opt<std::string> precision("precision",
                                      cl::desc("f32 | bf16 (compiled runtime: GEMM operands in "
                                               "bf16, f32 master weights and everything else) "
                                               "| f64 (reference executor)"),
                                      cl::init("f32"), cl::cat(cat));
static cl::list<std::string> killReplica(
    "kill-replica", cl::desc("Gossip/DiLoCo fault injection: replica R dies at the start of "
                             "round K (1-based), as R@K; repeatable"),
    cl::value_desc("R@K"), cl::cat(cat));
static cl::opt<bool> quiet("quiet", cl::desc("Only print errors and the final summary"), cl::cat(cat));
static cl::opt<std::string> cudaArch("cuda-arch",
                                     cl::desc("GPU architecture of the CUDA kernels --dump "
                                              "compiles with NVRTC (PTX, cubin, ptxas report)"),
                                     cl::init("sm_90"), cl::cat(cat));
static cl::opt<bool> profile("profile",
                             cl::desc("Print where the compiled runtime spent its time (per op "
                                      "kind, slowest kernels and GEMM shapes) at the end"),
                             cl::cat(cat));
static cl::opt<std::string> executor(
    "executor",
    cl::desc("compiled (default: fused C++ kernels + OpenBLAS GEMMs over a planned arena; "
             "f32 runs, f64 ones use the reference) | reference (plain loops, the oracle)"),
    cl::init("compiled"), cl::cat(cat));

static cl::opt<int> nprocDoc("nproc", cl::desc("Start N local processes: one per pipeline stage, or "
                                                "synchronous data parallelism for a one-stage "
                                                "config (with --nnodes, --node-rank, "
                                                "--master-addr, --master-port, --log-dir, "
                                                "--timeout S, --iface NAME; see README)"),
                            cl::init(1), cl::cat(cat));
static const char *kOverview = R"(stretto-train: compile a model description into a trainer and run it

Examples:
  stretto-train examples/gpt-tiny.toml                  train the default example
  stretto-train examples/gpt-tiny.toml train.steps=50   override any config key
  stretto-train examples/gpt-tiny.toml --out runs/tiny  metrics, loss.svg, checkpoint
  stretto-train examples/gpt-tiny.toml --out runs/tiny --resume
  stretto-train examples/mlp.toml train.optimizer=muon --dump dump/
  stretto-train examples/gpt-mini.toml train.stages=2 train.micro_batches=4 \
      train.sync=2bw train.ef_lambda=0.5 train.grad_clip=0   PipeDream-2BW + delay-EF
  stretto-train examples/gpt-tiny.toml train.sync=gossip train.replicas=4 \
      train.local_steps=10 train.topology=one-peer               gossip outer optimizer
  stretto-sample examples/gpt-tiny.toml --checkpoint runs/tiny/checkpoint.bin
)";

namespace {
int fail(const std::string &msg) {
  llvm::errs() << "stretto-train: " << msg << "\n";
  return 1;
}

// Where compiled kernels are cached: $STRETTO_CACHE_DIR, else
// ~/.cache/stretto/kernels.
std::string cacheDirectory() {
  const char *env = std::getenv("STRETTO_CACHE_DIR");
  const char *home = std::getenv("HOME");
  return env ? env : std::string(home ? home : "/tmp") + "/.cache/stretto/kernels";
}

// A gossip run's settings from the model's trainer keys.
GossipSettings gossipSettings(train::ModelOp model) {
  GossipSettings s;
  s.rounds = model.getTrainerInt("outer_rounds", 0);
  s.stepTime = model.getTrainerFloat("net_step_time", 1.0);
  s.bandwidth = model.getTrainerFloat("net_bandwidth", 1e9);
  s.latency = model.getTrainerFloat("net_latency", 0.0);
  s.heterogeneous =
      model.getTrainerOption("net_slow_links") || model.getTrainerOption("net_slow_replicas");
  s.slowReplicas = model.getTrainerFloat("net_slow_replicas", 0.0);
  s.slowReplicaFactor = model.getTrainerFloat("net_slow_replica_factor", 2.0);
  s.slowLinks = model.getTrainerFloat("net_slow_links", 0.0);
  s.slowLinkFactor = model.getTrainerFloat("net_slow_link_factor", 10.0);
  return s;
}

} // namespace

namespace {

/// Runs argv to completion; its exit status (128+signal when killed).
int runAndWait(const std::vector<std::string> &args) {
  std::vector<char *> av;
  for (const std::string &a : args)
    av.push_back(const_cast<char *>(a.c_str()));
  av.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, av[0], nullptr, nullptr, av.data(), environ) != 0)
    return 127;
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/// stretto-train MODEL --nproc N: compiles the trainer once into a plan in a
/// temporary folder, then starts N ranks of stretto-run (beside this
/// program) on it, each with the run's flags. -1: not a launch.
int launchTraining(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  LaunchOptions launch;
  std::vector<std::string> rest;
  try {
    rest = takeLaunchFlags(args, launch);
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  if (launch.nproc <= 1 && launch.nnodes <= 1)
    return -1;
  // Flags of the run (every rank), flags of both, and the compile's.
  static const std::set<std::string> runValued = {"--out",   "--device",     "--timeout",
                                                  "--iface", "--rendezvous", "--on-peer-failure",
                                                  "--init-from"};
  static const std::set<std::string> runSwitch = {"--resume", "--profile", "--force-resume"};
  static const std::set<std::string> bothValued = {"--precision"};
  static const std::set<std::string> bothSwitch = {"--quiet"};
  std::vector<std::string> compile, run;
  for (size_t i = 0; i < rest.size(); ++i) {
    std::string a = rest[i], name = a.substr(0, a.find('='));
    bool inl = a.find('=') != std::string::npos && a.rfind("--", 0) == 0;
    if (name == "--save-plan")
      return fail("--save-plan compiles a plan for later; it does not combine with --nproc");
    std::vector<std::string> item = {a};
    if (!inl && (runValued.count(name) || bothValued.count(name)) && i + 1 < rest.size())
      item.push_back(rest[++i]);
    bool toRun = runValued.count(name) || runSwitch.count(name) || bothValued.count(name) ||
                 bothSwitch.count(name);
    bool toCompile = !(runValued.count(name) || runSwitch.count(name));
    if (toRun)
      run.insert(run.end(), item.begin(), item.end());
    if (toCompile)
      compile.insert(compile.end(), item.begin(), item.end());
  }
  std::string self = selfExecutable();
  std::string runner = self.substr(0, self.rfind('/') + 1) + "stretto-run";
  if (::access(runner.c_str(), X_OK) != 0)
    return fail("--nproc runs the ranks with " + runner + ", which is not there");
  char tmpl[] = "/tmp/stretto-job-XXXXXX";
  if (!::mkdtemp(tmpl))
    return fail(std::string("cannot make a temporary folder for the plan: ") + strerror(errno));
  std::string dir = tmpl, plan = dir + "/trainer.plan";
  std::vector<std::string> compileCmd = {self};
  compileCmd.insert(compileCmd.end(), compile.begin(), compile.end());
  compileCmd.push_back("--save-plan=" + plan);
  compileCmd.push_back("--quiet");
  int rc = runAndWait(compileCmd);
  if (rc == 0) {
    launch.command = {runner, plan};
    launch.command.insert(launch.command.end(), run.begin(), run.end());
    try {
      rc = launchRanks(launch);
    } catch (const std::exception &e) {
      rc = fail(e.what());
    }
  }
  ::unlink(plan.c_str());
  ::rmdir(dir.c_str());
  return rc;
}

} // namespace

int main(int argc, char **argv) {
  if (int rc = launchTraining(argc, argv); rc >= 0)
    return rc;
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(argc, argv, kOverview);

  if (device != "cpu" && device != "auto" && device != "cuda")
    return fail("--device must be cpu, cuda or auto, got '" + device + "'");
  // The compiled runtime runs on CUDA device 0 when one is found (auto,
  // cuda); without one, training runs on the CPU and --device=cuda says why
  // in one line.
  std::string deviceNote;
  bool useCuda = false;
  if (device != "cpu") {
    CudaProbe cuda = probeCuda();
    useCuda = cuda.available;
    deviceNote = cuda.available ? "found " + cuda.name : cuda.reason;
    if (device == "cuda" && !cuda.available)
      llvm::errs() << "stretto-train: --device=cuda: " << deviceNote << "; training on the CPU\n";
  }
  auto cpuOnly = [&](const std::string &why) {
    if (useCuda && device == "cuda")
      llvm::errs() << "stretto-train: --device=cuda: " << why << "; training on the CPU\n";
    useCuda = false;
  };
  if (precision != "f32" && precision != "f64" && precision != "bf16")
    return fail("--precision must be f32, bf16 or f64, got '" + precision + "'");

  if (executor != "compiled" && executor != "reference")
    return fail("--executor must be reference or compiled, got '" + executor + "'");
  // The compiled runtime unless asked otherwise; where it does not apply
  // (yet), an explicit --executor=compiled is an error and the default
  // falls back to the reference executor with a note.
  bool explicitExecutor = executor.getNumOccurrences() > 0;
  std::string exec = executor;
  auto useReference = [&](const std::string &why) -> bool {
    if (explicitExecutor)
      return false;
    if (!quiet)
      llvm::outs() << "note: using the reference executor: the compiled runtime " << why << "\n";
    exec = "reference";
    return true;
  };

  MLIRContext ctx;
  auto diagnostics = printDiagnostics(ctx);
  std::vector<std::string> sets(overrides.begin(), overrides.end());
  if (steps > 0)
    sets.push_back("train.steps=" + std::to_string(steps));
  std::optional<LoadedModel> loaded = loadModel(ctx, modelPath, sets);
  if (!loaded)
    return 1;
  train::ModelOp model = loaded->model;
  OwningOpRef<ModuleOp> &module = loaded->module;
  // The model as described (before any pass): what a checkpoint records.
  const std::string fingerprint = modelFingerprint(model);
  if (exec == "compiled" && precision == "f64" && !useReference("computes in f32 (and bf16) only"))
    return fail("--executor=compiled: the compiled runtime computes in f32 (and bf16 GEMMs) "
                "only; use --executor=reference");
  if (exec == "reference" && precision == "bf16")
    return fail("--precision=bf16 is a mode of the compiled runtime; the reference executor "
                "computes in f32 or f64");

  // Passes: the full pipeline on a model-level description; a step that was
  // already compiled (it writes state) is run as it is.
  bool compiled = !model.getStep() || !model.getStep().getBody().getOps<train::WriteOp>().empty();
  // Kernel-level passes run on a copy, so that a failure to build kernels
  // can still fall back to the reference executor on the training IR.
  OwningOpRef<ModuleOp> kernelModule;
  // --dump: the IR after every pass, as a file tree under dumpDir.
  auto dumpPasses = [&](PassManager &pm, const std::string &dir) {
    if (dumpDir.empty())
      return;
    pm.getContext()->disableMultithreading();
    pm.enableIRPrintingToFileTree([](Pass *, Operation *) { return false; },
                                  [](Pass *, Operation *) { return true; },
                                  /*printModuleScope=*/true, /*onlyOnChange=*/false,
                                  /*onlyOnFailure=*/false, dir);
  };
  {
    PassManager pm(&ctx);
    dumpPasses(pm, dumpDir);
    if (!compiled) {
      buildTrainingPipeline(pm, TrainingPipelineOptions::fromTrainer(model));
      // Decentralized data parallelism: local steps + gossip outer round.
      StringRef sync = model.getTrainerString("sync", "sync");
      if (sync == "gossip" || sync == "diloco")
        pm.nest<train::ModelOp>().addPass(train::createTrainGossip());
      if (failed(pm.run(*module)))
        return fail("compilation failed");
    }
  }
  // The compiled path: every fused kernel into one cached shared object.
  std::map<std::string, RefExecutor::KernelFn> kernels;
  std::unique_ptr<HostKernelCache> cache; // owns the loaded kernels: lives to the end
  std::optional<CompiledKernels> compiledKernels;
  if (exec == "compiled") {
    kernelModule = module->clone();
    train::ModelOp kmodel = *kernelModule->getOps<train::ModelOp>().begin();
    PassManager pm(&ctx);
    dumpPasses(pm, dumpDir + "/kernel"); // the kernel passes, on the trained model
    buildKernelPipeline(pm);
    std::string dir = cacheDirectory();
    std::string error;
    auto t0 = std::chrono::steady_clock::now();
    FailureOr<CompiledKernels> ck = failure();
    if (failed(pm.run(*kernelModule))) {
      error = "kernel passes failed";
    } else {
      cache = std::make_unique<HostKernelCache>(dir);
      if (!quiet)
        cache->setOnCompile([&](size_t n) {
          llvm::outs() << "compiling " << n << " fused kernels with the host compiler (first run "
                       << "of this model; later runs take them from " << dir << ")...\n";
          llvm::outs().flush();
        });
      ck = compileKernels(kmodel, *cache, error);
    }
    if (failed(ck)) {
      if (!useReference("could not build this model's kernels:\n" + error))
        return fail(error);
    } else {
      compiledKernels = *ck;
      kernels = ck->functions;
      model = kmodel;
      if (!quiet)
        llvm::outs() << "compiled " << kernels.size() << " fused kernels in "
                     << llvm::format("%.1f", std::chrono::duration<double>(
                                                 std::chrono::steady_clock::now() - t0)
                                                 .count())
                     << " s (" << (cache->stats().compiles ? "compiled" : "cache hit") << ": "
                     << ck->sourcePath << ")\n";
    }
  }
  FailureOr<Graph> graph = lowerToGraph(model);
  if (failed(graph))
    return 1;
  if (exec == "compiled") {
    std::string why;
    if (!PlanExecutor::supports(*graph, why)) {
      if (!useReference("cannot run this model: " + why))
        return fail("--executor=compiled: the compiled runtime cannot run this model: " + why +
                    "; use --executor=reference");
      kernels.clear();
      compiledKernels.reset();
      model = loaded->model;
      graph = lowerToGraph(model);
      if (failed(graph))
        return 1;
    }
  }
  if (!dumpDir.empty()) {
    std::ofstream g(dumpDir + "/graph.txt");
    for (auto [phase, title] : {std::pair{Phase::Step, "step"}, {Phase::Update, "update"},
                                {Phase::Outer, "outer"}}) {
      const std::vector<Node> &nodes = graph->phase(phase);
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
    std::string extra;
    if (compiledKernels) {
      // Every kernel's C++ and CUDA C source, and the runtime's buffer plan.
      std::ofstream(dumpDir + "/kernels.cpp") << compiledKernels->cppSource;
      std::ofstream(dumpDir + "/kernels.cu") << compiledKernels->cudaSource;
      std::ofstream(dumpDir + "/runtime-ops.cu") << cudaRuntimeSource();
      try {
        PlanExecutor plan(*graph, kernels);
        std::ofstream(dumpDir + "/plan.txt") << plan.describe();
        extra = ", kernel/ (kernel passes), kernels.cpp, kernels.cu, runtime-ops.cu, plan.txt";
      } catch (const std::exception &e) {
        return fail(e.what());
      }
      // The CUDA kernels as NVRTC compiles them (no GPU needed): PTX kept
      // for inspection, the cubin, and ptxas's register/spill report.
      CudaKernelCache cuda(cacheDirectory());
      std::string why, error;
      CudaBinary bin;
      if (!cuda.available(why)) {
        llvm::outs() << "note: no PTX/cubin in the dump: " << why << "\n";
      } else if (!cuda.compile(compiledKernels->cudaSource, cudaArch, bin, error)) {
        return fail(error);
      } else {
        std::ofstream(dumpDir + "/kernels." + cudaArch + ".ptx") << bin.ptx;
        std::ofstream(dumpDir + "/kernels." + cudaArch + ".cubin", std::ios::binary) << bin.cubin;
        std::ofstream(dumpDir + "/kernels." + cudaArch + ".ptxas.txt") << bin.log;
        extra += ", kernels." + cudaArch + ".{ptx,cubin,ptxas.txt}";
      }
    }
    llvm::outs() << "wrote the IR after each pass, graph.txt" << extra << " to " << dumpDir
                 << "\n";
  }

  // Run settings: config values, then command-line options.
  TrainerOptions opt;
  opt.steps = model.getTrainerInt("total_steps", 100);
  opt.microBatches = model.getTrainerInt("micro_batches", 1);
  opt.seed = seed >= 0 ? uint64_t(seed) : uint64_t(model.getTrainerInt("seed", 1337));
  opt.logInterval = logInterval > 0 ? int64_t(logInterval) : model.getTrainerInt("log_interval", 10);
  opt.evalInterval = model.getTrainerInt("eval_interval", 100);
  opt.evalBatches = model.getTrainerInt("eval_batches", 8);
  opt.checkpointInterval = model.getTrainerInt("checkpoint_interval", 0);
  opt.outDir = outDir;
  opt.resume = resume || forceResume;
  opt.forceResume = forceResume;
  opt.initFrom = initFrom;
  opt.modelFingerprint = fingerprint;
  opt.precision = precision == "f64" ? Precision::F64 : Precision::F32;
  opt.quiet = quiet;
  opt.profile = profile;
  if (profile && exec != "compiled")
    llvm::errs() << "stretto-train: --profile reports on the compiled runtime only; this run "
                    "uses the reference executor\n";
  opt.kernels = kernels;
  opt.compiled = exec == "compiled";
  opt.gemmPrecision = precision == "bf16" ? GemmPrecision::BF16 : GemmPrecision::F32;
  if (!opt.compiled)
    cpuOnly("the reference executor runs on the CPU");
  if (useCuda && compiledKernels) {
    opt.cuda = true;
    opt.cudaKernels = CudaKernelSet{compiledKernels->cudaSource, cacheDirectory()};
  }

  // Every run setting, checked before anything is allocated: intervals,
  // stages, replicas, the network model, and memory (not for a plan that
  // may run on another machine).
  GossipSettings gossip = gossipSettings(model);
  {
    RunCheck check(*graph, opt);
    check.stages = TrainingPipelineOptions::fromTrainer(model).stages;
    check.replicas = model.getTrainerInt("replicas", 1);
    check.sync = model.getTrainerString("sync", "sync").str();
    if (!graph->outer.empty())
      check.gossip = &gossip;
    check.checkMemory = savePlan.empty();
    try {
      validateRunSettings(check);
    } catch (const std::exception &e) {
      return fail(e.what());
    }
  }

  int64_t vocab = 256;
  DataConfig data = dataConfigOf(model, modelPath, vocab);
  data.seed = opt.seed;
  std::unique_ptr<DataSource> source;
  try {
    source = makeDataSource(*graph, data, vocab);
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  // --save-plan: the trainer as a file for stretto-run (no MLIR there).
  if (!savePlan.empty()) {
    if (!initFrom.empty())
      return fail("--init-from is a run setting, not part of a plan: pass it to stretto-run");
    if (exec != "compiled")
      return fail("--save-plan saves the compiled runtime's plan; it cannot be combined with "
                  "the reference executor");
    PlanFile pf;
    pf.graph = *graph;
    pf.cppSource = compiledKernels->cppSource;
    pf.cudaSource = compiledKernels->cudaSource;
    llvm::SmallString<256> dataPath(data.path);
    if (!dataPath.empty())
      llvm::sys::fs::make_absolute(dataPath);
    pf.meta = {{"model.name", model.getSymName().str()},
               {"model.fingerprint", fingerprint},
               {"model.vocab", std::to_string(vocab)},
               {"data.format", data.format},
               {"data.path", std::string(dataPath)},
               {"data.val_fraction", llvm::formatv("{0}", data.valFraction).str()},
               {"train.optimizer", model.getTrainerString("optimizer", "adamw").str()},
               {"train.steps", std::to_string(opt.steps)},
               {"train.micro_batches", std::to_string(opt.microBatches)},
               {"train.seed", std::to_string(opt.seed)},
               {"train.log_interval", std::to_string(opt.logInterval)},
               {"train.eval_interval", std::to_string(opt.evalInterval)},
               {"train.eval_batches", std::to_string(opt.evalBatches)},
               {"train.checkpoint_interval", std::to_string(opt.checkpointInterval)},
               {"train.stages", std::to_string(TrainingPipelineOptions::fromTrainer(model).stages)},
               {"train.schedule", TrainingPipelineOptions::fromTrainer(model).twoBW ? "2bw" : "flush"}};
    if (!graph->outer.empty())
      for (auto &[k, v] : gossip.toMeta())
        pf.meta[k] = v;
    try {
      savePlanFile(savePlan, pf);
    } catch (const std::exception &e) {
      return fail(e.what());
    }
    if (!quiet)
      llvm::outs() << "wrote the trainer plan to " << savePlan << " (run it with stretto-run "
                   << savePlan << ")\n";
    return 0;
  }
  if (!quiet) {
    int64_t params = 0;
    for (const StateDecl &s : graph->states)
      if (s.isParam)
        params += numElements(s.shape);
    llvm::outs() << "model @" << model.getSymName() << ": " << params << " parameters, "
                 << graph->nodes.size() << " ops per step; optimizer "
                 << model.getTrainerString("optimizer", "adamw") << "\n"
                 << "data: " << source->describe() << "\n"
                 << "device: " << (opt.cuda ? "cuda" : "cpu") << " (" << exec << " executor, "
                 << precision << ")" << (deviceNote.empty() ? "" : "; " + deviceNote) << "\n";
    llvm::outs().flush();
  }
  // Decentralized data parallelism.
  // A graph with an outer phase (sync = "gossip" | "diloco") runs as R
  // replicas with a simulated network; see include/stretto/Gossip.h.
  if (!graph->outer.empty()) {
    GossipOptions g = gossipOptionsFor(*graph, opt, gossip);
    for (const std::string &k : killReplica) {
      int replica = -1;
      long long round = 0;
      char tail;
      if (std::sscanf(k.c_str(), "%d@%lld%c", &replica, &round, &tail) != 2 || replica < 0 ||
          replica >= graph->outerLoop.replicas || round < 1)
        return fail("--kill-replica " + k + ": expected R@K with 0 <= R < " +
                    std::to_string(graph->outerLoop.replicas) + " and K >= 1");
      g.kills.emplace_back(replica, round - 1);
    }
    return runGossipTraining(*graph, *source, g, quiet);
  }
  // --- end decentralized data parallelism -------------------------------------
  // Pipelines run on the pipeline runtime. One stage with 2BW runs the same
  // update sequentially (the delay is in the IR), with the full trainer.
  TrainingPipelineOptions pipe = TrainingPipelineOptions::fromTrainer(model);
  if (pipe.stages > 1)
    return runPipelineTraining(*graph, *source, opt, pipe.twoBW);
  return runTraining(*graph, *source, opt);
}
