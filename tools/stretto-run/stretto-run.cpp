//===- stretto-run.cpp - train from a saved plan, with no MLIR ------------===//
//
//   stretto-run PLAN [--steps N] [--seed S] [--out DIR] [--resume] [--data FILE]
//               [--device cpu|cuda|auto] [--precision f32|bf16]
//               [--executor compiled|reference] [--check N] [--profile]
//               [--log-interval N] [--quiet] [--force-resume]
//
// PLAN is what `stretto-train MODEL --save-plan PLAN` wrote: the lowered
// training step, the fused kernels' sources and the run's settings. This
// tool links the runtime only (no MLIR, no LLVM): the kernels come from the
// host compiler or NVRTC through their caches, and training runs on the
// compiled runtime (CPU, or CUDA device 0) or the reference executor.
// --check N trains N steps on the chosen runtime beside the reference
// executor on the same batches and reports how far the losses and the
// states (parameters and optimizer states) drift. Exit status 1 when a
// loss drifts past f32 rounding (1e-4 relative; 2% with bf16 GEMMs) or a
// state tensor past 1e-3 (relative L2; with bf16 GEMMs on a GPU, 1e-2
// against the same bf16 GEMMs on the CPU): a self-test of a device against
// the oracle.
//
//===----------------------------------------------------------------------===//
#include "stretto/Device.h"
#include "stretto/Gossip.h"
#include "stretto/HostJit.h"
#include "stretto/Pipeline.h"
#include "stretto/PlanExecutor.h"
#include "stretto/PlanFile.h"
#include "stretto/RunChecks.h"
#include "stretto/Trainer.h"
#include "stretto/Runtime/Distributed.h"
#include "stretto/Runtime/Launcher.h"
#include "../../runtime/Nccl.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>
#include <string>

using namespace stretto;

namespace {

const char *kUsage =
    "usage: stretto-run PLAN [--steps N] [--seed S] [--out DIR] [--resume] [--data FILE]\n"
    "                   [--device cpu|cuda|auto] [--precision f32|bf16]\n"
    "                   [--executor compiled|reference] [--check N] [--profile]\n"
    "                   [--log-interval N] [--quiet] [--force-resume] [--init-from FILE]\n"
    "                   [--nproc N] [--nnodes N --node-rank K --master-addr A --master-port P]\n"
    "                   [--timeout S] [--iface NAME] [--log-dir DIR] [--rendezvous file:DIR]\n"
    "                   [--on-peer-failure stop|continue]\n"
    "       stretto-run --nccl-check   (one-rank NCCL self-check on GPU 0)\n"
    "Trains from a plan written by `stretto-train MODEL --save-plan PLAN` (no MLIR here).\n"
    "--nproc N starts N ranks here (one per pipeline stage; a one-stage plan runs\n"
    "synchronous data parallelism); under torchrun-style variables, mpirun or srun\n"
    "each process is one rank. --timeout bounds rendezvous and every wait (300 s).\n"
    "--steps defaults to the plan's; the learning-rate schedule was fixed when the plan\n"
    "was compiled (recompile with train.steps=N to change it).\n"
    "--init-from FILE starts from the parameters in a safetensors file (a run's\n"
    "model.safetensors); with --resume the checkpoint wins.\n";

int fail(const std::string &msg) {
  std::cerr << "stretto-run: " << msg << "\n";
  return 1;
}

std::string cacheDirectory() {
  const char *env = std::getenv("STRETTO_CACHE_DIR");
  const char *home = std::getenv("HOME");
  return env ? env : std::string(home ? home : "/tmp") + "/.cache/stretto/kernels";
}

// A plan's integer setting; a plan whose setting is not an integer is
// refused (its checksum only says the file is as written).
int64_t metaInt(const PlanFile &p, const std::string &key, int64_t fallback) {
  auto it = p.meta.find(key);
  if (it == p.meta.end())
    return fallback;
  const std::string &v = it->second;
  char *end = nullptr;
  errno = 0;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno == ERANGE) {
    std::cerr << "stretto-run: the plan's setting '" << key << "' must be an integer, got '" << v
              << "'\n";
    std::exit(1);
  }
  return n;
}

} // namespace

int main(int argc, char **argv) {
  // --nproc N / --nnodes: this process only launches the ranks.
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--nccl-check")
    return nccl::selfCheck();
  LaunchOptions launch;
  try {
    args = takeLaunchFlags(args, launch);
    if (launch.nproc > 1 || launch.nnodes > 1) {
      launch.command = {selfExecutable()};
      launch.command.insert(launch.command.end(), args.begin(), args.end());
      return launchRanks(launch);
    }
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  std::vector<char *> rankArgv = {argv[0]};
  for (std::string &a : args)
    rankArgv.push_back(a.data());
  argc = static_cast<int>(rankArgv.size());
  argv = rankArgv.data();
  std::string iface, rendezvous;
  bool continueOnPeerFailure = false;
  int64_t timeoutSeconds = 300;
  std::string planPath, outDir, dataPath, device = "cpu", precision = "f32", executor = "compiled";
  int64_t steps = -1, seed = -1, check = 0, logInterval = -1;
  bool resume = false, profile = false, quiet = false;
  bool forceResume = false; // resume even from another seed's or model's checkpoint
  std::string initFrom;     // --init-from: starting parameters (safetensors)
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    // --key=value is --key value.
    std::string inlineValue;
    bool hasInline = false;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      inlineValue = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
      hasInline = true;
    }
    auto value = [&]() -> std::string {
      if (hasInline)
        return inlineValue;
      if (i + 1 >= argc) {
        std::cerr << "stretto-run: " << a << " needs a value\n" << kUsage;
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&]() -> int64_t {
      std::string v = value();
      char *end = nullptr;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end) {
        std::cerr << "stretto-run: " << a << " expects an integer, got '" << v << "'\n";
        std::exit(2);
      }
      return n;
    };
    if (a == "--steps")
      steps = number();
    else if (a == "--seed")
      seed = number();
    else if (a == "--out")
      outDir = value();
    else if (a == "--data")
      dataPath = value();
    else if (a == "--force-resume")
      resume = forceResume = true;
    else if (a == "--resume")
      resume = true;
    else if (a == "--init-from")
      initFrom = value();
    else if (a == "--device")
      device = value();
    else if (a == "--precision")
      precision = value();
    else if (a == "--executor")
      executor = value();
    else if (a == "--check")
      check = number();
    else if (a == "--profile")
      profile = true;
    else if (a == "--log-interval")
      logInterval = number();
    else if (a == "--quiet")
      quiet = true;
    else if (a == "--timeout")
      timeoutSeconds = number();
    else if (a == "--iface")
      iface = value();
    else if (a == "--rendezvous")
      rendezvous = value();
    else if (a == "--on-peer-failure") {
      std::string v = value();
      if (v != "stop" && v != "continue")
        return fail("--on-peer-failure must be stop or continue, got '" + v + "'");
      continueOnPeerFailure = v == "continue";
    }
    else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (planPath.empty() && !a.empty() && a[0] != '-')
      planPath = a;
    else {
      std::cerr << "stretto-run: unknown argument '" << a << "'\n" << kUsage;
      return 2;
    }
  }
  if (planPath.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  if (device != "cpu" && device != "cuda" && device != "auto")
    return fail("--device must be cpu, cuda or auto, got '" + device + "'");
  if (precision != "f32" && precision != "bf16")
    return fail("--precision must be f32 or bf16, got '" + precision + "'");
  if (executor != "compiled" && executor != "reference")
    return fail("--executor must be compiled or reference, got '" + executor + "'");
  if (executor == "reference" && precision == "bf16")
    return fail("--precision=bf16 is a mode of the compiled runtime");

  PlanFile plan;
  try {
    plan = loadPlanFile(planPath);
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  const Graph &graph = plan.graph;
  if (!graph.outer.empty() && check > 0)
    return fail("--check compares single-replica plans; this one is a gossip/DiLoCo run of " +
                std::to_string(graph.outerLoop.replicas) + " replicas");
  const bool pipelined = metaInt(plan, "train.stages", 1) > 1;
  if (!initFrom.empty() && check > 0)
    return fail("--check starts both runtimes from the plan's seed; it does not combine with "
                "--init-from");
  if (pipelined && check > 0)
    return fail("--check compares single-stage plans; this one has " +
                std::to_string(metaInt(plan, "train.stages", 1)) + " pipeline stages");

  TrainerOptions opt;
  opt.steps = steps > 0 ? steps : metaInt(plan, "train.steps", 100);
  opt.microBatches = metaInt(plan, "train.micro_batches", 1);
  opt.seed = seed >= 0 ? uint64_t(seed) : uint64_t(metaInt(plan, "train.seed", 1337));
  opt.logInterval = logInterval > 0 ? logInterval : metaInt(plan, "train.log_interval", 10);
  opt.evalInterval = metaInt(plan, "train.eval_interval", 100);
  opt.evalBatches = metaInt(plan, "train.eval_batches", 8);
  opt.checkpointInterval = metaInt(plan, "train.checkpoint_interval", 0);
  opt.outDir = outDir;
  opt.resume = resume;
  opt.initFrom = initFrom;
  opt.quiet = quiet;
  opt.profile = profile;
  opt.compiled = executor == "compiled";
  opt.gemmPrecision = precision == "bf16" ? GemmPrecision::BF16 : GemmPrecision::F32;
  opt.forceResume = forceResume;
  if (auto it = plan.meta.find("model.fingerprint"); it != plan.meta.end())
    opt.modelFingerprint = it->second;
  // The plan's settings, checked before anything runs (a plan file is
  // input like any other: eval_interval = 0 would divide by zero).
  GossipSettings gossipSettings = GossipSettings::fromMeta(plan.meta);
  {
    RunCheck check(graph, opt);
    check.stages = metaInt(plan, "train.stages", 1);
    if (!graph.outer.empty())
      check.gossip = &gossipSettings;
    check.checkMemory = device == "cpu" || !opt.compiled;
    try {
      validateRunSettings(check);
    } catch (const std::exception &e) {
      return fail(planPath + ": " + e.what());
    }
  }

  // The fused kernels: from the host compiler's cache (compiled on a miss).
  std::set<std::string> names;
  for (Phase ph : {Phase::Step, Phase::Update, Phase::Outer})
    for (const Node &n : graph.phase(ph))
      if (n.kind == OpKind::Kernel)
        names.insert(n.name);
  // A rank of a multi-process pipeline compiles only its stage's kernels.
  std::string kernelSource = plan.cppSource;
  try {
    std::optional<WorldInfo> w = worldFromEnvironment();
    const int64_t stages = metaInt(plan, "train.stages", 1);
    if (w && w->size > 1 && stages > 1 && w->size == stages && graph.outer.empty()) {
      std::set<std::string> mine;
      // The stages must outlive `stage` (a reference into a temporary
      // vector here read freed memory: garbage kernel names on some plans).
      const auto stagePlans = planStages(graph);
      const Graph &stage = stagePlans.at(static_cast<size_t>(w->rank)).graph;
      for (Phase ph : {Phase::Step, Phase::Update})
        for (const Node &n : stage.phase(ph))
          if (n.kind == OpKind::Kernel)
            mine.insert(n.name);
      names = mine;
      kernelSource = hostKernelSubset(plan.cppSource, names);
    }
  } catch (const std::exception &) {
    // A malformed environment is reported when the world is joined below.
  }
  std::unique_ptr<HostKernelCache> cache;
  if (!names.empty()) {
    if (plan.cppSource.empty())
      return fail(planPath + ": the plan has kernel nodes but no kernel source");
    cache = std::make_unique<HostKernelCache>(cacheDirectory());
    if (!quiet)
      cache->setOnCompile([&](size_t n) {
        std::cout << "compiling " << n << " fused kernels with the host compiler...\n" << std::flush;
      });
    std::vector<std::string> symbols(names.begin(), names.end());
    std::string error;
    std::vector<HostKernelFn> fns = cache->loadAll(kernelSource, symbols, error);
    if (fns.size() != symbols.size())
      return fail(error);
    for (size_t k = 0; k < symbols.size(); ++k)
      opt.kernels[symbols[k]] = fns[k];
  }
  // The device.
  if (opt.compiled && device != "cpu") {
    CudaProbe probe = probeCuda();
    if (probe.available) {
      opt.cuda = true;
      opt.cudaKernels = CudaKernelSet{plan.cudaSource, cacheDirectory()};
    } else if (device == "cuda") {
      std::cerr << "stretto-run: --device=cuda: " << probe.reason << "; training on the CPU\n";
    }
  }

  DataConfig data;
  auto meta = [&](const char *k, const std::string &fallback) {
    auto it = plan.meta.find(k);
    return it == plan.meta.end() ? fallback : it->second;
  };
  data.format = meta("data.format", "synthetic");
  data.path = dataPath.empty() ? meta("data.path", "") : dataPath;
  data.valFraction = std::atof(meta("data.val_fraction", "0.1").c_str());
  data.seed = opt.seed;
  std::unique_ptr<DataSource> source;
  try {
    source = makeDataSource(graph, data, metaInt(plan, "model.vocab", 256));
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  if (!quiet)
    std::cout << "plan " << planPath << ": model @" << meta("model.name", "?") << ", "
              << graph.nodes.size() << " ops per step, " << names.size() << " fused kernels\n"
              << "data: " << source->describe() << "\n";

  // Several processes (the launcher, torchrun-style variables, mpirun, srun).
  std::unique_ptr<Communicator> world;
  try {
    std::optional<WorldInfo> w = worldFromEnvironment();
    if (w && w->size > 1) {
      if (timeoutSeconds < 1)
        return fail("--timeout must be at least 1 second");
      ConnectOptions co;
      co.timeout = std::chrono::seconds(timeoutSeconds);
      co.iface = iface;
      co.rendezvous = rendezvous;
      if (const char *id = std::getenv("STRETTO_RUN_ID"))
        co.runId = id;
      world = connectGloo(*w, co);
      if (!quiet && w->rank == 0)
        std::cout << "world: " << w->size << " processes (" << w->source << "), "
                  << world->transport() << ", timeout " << timeoutSeconds << " s\n";
    }
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  if (world && check > 0)
    return fail("--check runs in one process");
  // Each rank's traffic, for people and bench/dist.
  auto withStats = [&](int rc) {
    if (world && !quiet)
      std::printf("comm: rank %d sent %.3f MB, received %.3f MB, %.3f s in communication\n",
                  world->rank(), world->bytesSent / 1e6, world->bytesReceived / 1e6,
                  world->commSeconds);
    std::fflush(stdout);
    return rc;
  };

  if (!graph.outer.empty()) {
    GossipOptions g = gossipOptionsFor(graph, opt, GossipSettings::fromMeta(plan.meta));
    g.stopOnPeerFailure = !continueOnPeerFailure;
    return withStats(runGossipTraining(graph, *source, g, quiet, world.get()));
  }
  if (pipelined)
    return withStats(runPipelineTraining(graph, *source, opt,
                                         meta("train.schedule", "flush") == "2bw", world.get()));
  opt.dataParallel = world.get();
  // On GPUs the gradients are all-reduced where they are, by NCCL (created
  // at the first step, when the device's context is current), unless
  // STRETTO_NCCL=0 or the library is missing: then through host memory.
  std::unique_ptr<nccl::Communicator> ncclComm;
  const char *ncclEnv = std::getenv("STRETTO_NCCL");
  if (world && opt.cuda && !(ncclEnv && std::string(ncclEnv) == "0")) {
    std::string why;
    if (nccl::Api::load(why)) {
      opt.deviceAllReduce = [&](Executor::GradSums &g) {
        if (!ncclComm) {
          ncclComm = std::make_unique<nccl::Communicator>(*world, world->timeout());
          if (world->rank() == 0 && !quiet)
            std::cout << "data parallelism: gradients all-reduced on the GPU by NCCL "
                      << ncclComm->version() << "\n";
        }
        ncclComm->groupStart();
        for (auto &[p, n] : g.device.f32)
          ncclComm->allReduceSum(p, p, n, nccl::kFloat32, g.device.stream);
        ncclComm->groupEnd();
        ncclComm->waitFor(g.device.idle, "gradient all-reduce");
      };
    } else if (world->rank() == 0 && !quiet) {
      std::cout << "data parallelism: NCCL unavailable (" << why
                << "); GPU gradients travel through host memory over Gloo\n";
    }
  }
  if (check <= 0) {
    TrainSummary summary;
    return withStats(runTraining(graph, *source, opt, &summary));
  }

  // --check N: the chosen runtime beside the reference executor.
  std::unique_ptr<Executor> ex;
  try {
    ex = executorFactory(opt)(graph);
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  const bool bf16 = precision == "bf16";
  auto *compiled = dynamic_cast<PlanExecutor *>(ex.get());
  const bool onGpu = compiled && compiled->deviceName() != "cpu";
  std::string on = "reference executor";
  if (compiled)
    on = "compiled runtime on " + compiled->deviceName() + (bf16 ? " (bf16 GEMMs)" : "");
  // The oracle runs the plan's fused kernels through their C++ build (the
  // plan holds no unfused form of them).
  RefExecutor ref(graph, Precision::F32);
  ref.setKernels(opt.kernels);
  ref.initialize(opt.seed);
  ex->initialize(opt.seed);
  // Tolerances. Losses: relative to the reference's f32 loss, 1e-4 (f32
  // rounding) or 2e-2 with bf16 GEMMs. States (parameters and optimizer
  // states): each tensor's relative L2 distance ||x - y|| / max(||x||, ||y||)
  // must stay within 1e-3 in f32 (measured on the shipped examples, CPU, 20
  // steps: 1e-5 at worst). bf16 GEMMs move states by up to a few percent
  // from f32, so there the states are compared with the same bf16 GEMMs
  // computed on the CPU, within 1e-2 (f32 rounding differences tip some
  // bf16 roundings; 3e-3 on the emulated GPU in CompiledPathTest); on the
  // CPU that is the runtime being checked, and its states are not compared.
  // The key third of an attention's qkv bias is left out: its gradient is
  // zero in exact arithmetic (softmax ignores a shift shared by a row's
  // scores), so AdamW and Muon step it along rounding noise that no two
  // runtimes share (f32: 5e-4 of the whole bias after 20 steps; bf16: tens
  // of percent).
  const double lossTol = bf16 ? 2e-2 : 1e-4, stateTol = bf16 ? 1e-2 : 1e-3;
  auto isKeyBias = [](const StateDecl &s, size_t i, size_t n) {
    const std::string &p = s.of.empty() ? s.name : s.of, tail = "attn.qkv.b";
    return p.size() >= tail.size() && p.compare(p.size() - tail.size(), tail.size(), tail) == 0 &&
           n % 3 == 0 && i >= n / 3 && i < 2 * n / 3;
  };
  std::unique_ptr<Executor> bf16Oracle;
  if (bf16 && onGpu) {
    TrainerOptions cpu = opt;
    cpu.cuda = false;
    try {
      bf16Oracle = executorFactory(cpu)(graph);
    } catch (const std::exception &e) {
      return fail(e.what());
    }
    bf16Oracle->initialize(opt.seed);
  }
  Executor *stateOracle = !bf16 ? static_cast<Executor *>(&ref) : bf16Oracle.get();
  std::printf("check: %s against the reference executor, %lld steps\n", on.c_str(),
              (long long)check);
  // A NaN compares false with everything: count it as an infinite difference.
  auto worse = [](double d, double worst) { return !(d <= worst); };
  double worstLoss = 0;
  try {
    for (int64_t step = 0; step < check; ++step) {
      double la = 0, lb = 0;
      for (int64_t k = 0; k < opt.microBatches; ++k) {
        auto batch = source->batch(Split::Train, uint64_t(step * opt.microBatches + k));
        la += ref.microStep(batch).outputs.at(0);
        lb += ex->microStep(batch).outputs.at(0);
        if (bf16Oracle)
          bf16Oracle->microStep(batch);
      }
      ref.update();
      ex->update();
      if (bf16Oracle)
        bf16Oracle->update();
      double rel = std::fabs(la - lb) / (1 + std::fabs(la));
      if (worse(rel, worstLoss))
        worstLoss = std::isnan(rel) ? HUGE_VAL : rel;
      std::printf("  step %3lld  loss %.7f  vs %.7f  (relative %.2e)\n", (long long)step + 1,
                  la / double(opt.microBatches), lb / double(opt.microBatches), rel);
    }
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  double worstState = 0;
  std::string where = "-";
  std::vector<std::string> drifted;
  if (stateOracle)
    for (const StateDecl &s : graph.states) {
      HostTensor x = stateOracle->getState(s.name), y = ex->getState(s.name);
      double dd = 0, xx = 0, yy = 0;
      for (size_t i = 0; i < x.data.size() && i < y.data.size(); ++i) {
        if (isKeyBias(s, i, x.data.size()))
          continue;
        double d = x.data[i] - y.data[i];
        dd += d * d, xx += x.data[i] * x.data[i], yy += y.data[i] * y.data[i];
      }
      double scale = std::sqrt(std::max(xx, yy));
      double rel = x.data.size() != y.data.size() ? HUGE_VAL
                   : dd == 0                      ? 0
                                                  : std::sqrt(dd) / scale;
      if (std::isnan(rel))
        rel = HUGE_VAL;
      if (rel > stateTol) {
        char line[160];
        std::snprintf(line, sizeof line, "  state %s drifted by %.2e (norm %.3e vs %.3e)",
                      s.name.c_str(), rel, std::sqrt(xx), std::sqrt(yy));
        drifted.push_back(line);
      }
      if (rel > worstState)
        worstState = rel, where = s.name;
    }
  for (const std::string &line : drifted)
    std::printf("%s\n", line.c_str());
  bool lossOk = worstLoss <= lossTol, statesOk = drifted.empty();
  std::printf("check: largest loss difference %.2e (tolerance %.0e, relative), ", worstLoss,
              lossTol);
  if (stateOracle)
    std::printf("largest state difference %.2e at %s (tolerance %.0e, relative L2 per "
                "tensor, key bias excluded%s): %s\n",
                worstState, where.c_str(), stateTol,
                bf16 ? ", against the same bf16 GEMMs on the CPU" : "",
                lossOk && statesOk ? "ok"
                : !lossOk          ? "MISMATCH (loss)"
                : "MISMATCH (states)");
  else
    std::printf("states not compared (bf16 GEMMs on the CPU have no second implementation "
                "here): %s\n",
                lossOk ? "ok" : "MISMATCH (loss)");
  return lossOk && statesOk ? 0 : 1;
}
