//===- RunPlan.cpp - run settings, run flags and runPlan ------------------===//
//
// One description of a run (RunSettings: the plan's settings and the
// command line's flags) and one function that runs it in every mode.
// stretto-train and stretto-run only parse, compile or load, and call
// runPlan.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/RunSettings.h"
#include "stretto/Runtime/CostModel.h"

#include "cuda/GpuBackend.h"
#include "cuda/Nccl.h"
#include "stretto/Runtime/Device.h"
#include "stretto/Runtime/HostJit.h"
#include "stretto/Runtime/Pipeline.h"
#include "stretto/Runtime/PlanFile.h"
#include "stretto/Runtime/RunChecks.h"
#include "stretto/Support/Text.h"
#include "stretto/Runtime/Communicator.h"
#include "stretto/Runtime/Distributed.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>
#include <stdexcept>

using namespace stretto;

namespace {

int64_t parseInt(const std::string &v, const std::string &what) {
  char *end = nullptr;
  errno = 0;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno == ERANGE)
    throw std::runtime_error(what + ", got '" + v + "'");
  return n;
}

} // namespace

std::string stretto::kernelCacheDirectory() {
  const char *env = std::getenv("STRETTO_CACHE_DIR");
  const char *home = std::getenv("HOME");
  return env ? env : std::string(home ? home : "/tmp") + "/.cache/stretto/kernels";
}

//===--- settings <-> plan files ----------------------------------------===//

std::map<std::string, std::string> RunSettings::toMeta() const {
  std::map<std::string, std::string> m = {
      {"model.name", modelName},
      {"model.fingerprint", fingerprint},
      {"model.vocab", std::to_string(vocab)},
      {"data.format", data.format},
      {"data.path", data.path},
      {"data.val_fraction", exactDecimal(data.valFraction)},
      {"train.optimizer", optimizer},
      {"train.steps", std::to_string(steps)},
      {"train.micro_batches", std::to_string(microBatches)},
      {"train.precision", precision},
      {"train.seed", std::to_string(seed)},
      {"train.log_interval", std::to_string(logInterval)},
      {"train.eval_interval", std::to_string(evalInterval)},
      {"train.eval_batches", std::to_string(evalBatches)},
      {"train.checkpoint_interval", std::to_string(checkpointInterval)},
      {"train.stages", std::to_string(stages)},
      {"train.schedule", twoBW ? "2bw" : "flush"}};
  for (auto &[k, v] : gossip.toMeta())
    m[k] = v;
  return m;
}

RunSettings RunSettings::fromMeta(const std::map<std::string, std::string> &meta) {
  RunSettings s;
  auto str = [&](const char *k, std::string &into) {
    if (auto it = meta.find(k); it != meta.end())
      into = it->second;
  };
  auto num = [&](const char *k, int64_t &into) {
    if (auto it = meta.find(k); it != meta.end())
      into = parseInt(it->second,
                      std::string("the plan's setting '") + k + "' must be an integer");
  };
  str("model.name", s.modelName);
  str("model.fingerprint", s.fingerprint);
  str("train.optimizer", s.optimizer);
  num("model.vocab", s.vocab);
  s.data.format = "synthetic";
  str("data.format", s.data.format);
  str("data.path", s.data.path);
  if (auto it = meta.find("data.val_fraction"); it != meta.end())
    s.data.valFraction = std::atof(it->second.c_str());
  int64_t seed = int64_t(s.seed);
  num("train.steps", s.steps);
  num("train.micro_batches", s.microBatches);
  str("train.precision", s.precision);
  if (s.precision != "f32" && s.precision != "bf16")
    throw std::runtime_error("the plan's setting 'train.precision' must be f32 or bf16, got '" +
                             s.precision + "'");
  num("train.seed", seed);
  s.seed = uint64_t(seed);
  num("train.log_interval", s.logInterval);
  num("train.eval_interval", s.evalInterval);
  num("train.eval_batches", s.evalBatches);
  num("train.checkpoint_interval", s.checkpointInterval);
  num("train.stages", s.stages);
  if (auto it = meta.find("train.schedule"); it != meta.end())
    s.twoBW = it->second == "2bw";
  s.gossip = GossipSettings::fromMeta(meta);
  return s;
}

void RunSettings::apply(const RunFlags &f) {
  flags = f;
  // A plan with bf16 storage runs its GEMMs on bf16 operands (they are
  // bf16 values already: GemmPrecision::BF16Operands); f64 (the reference
  // executor) keeps f64.
  if (precision == "bf16" && flags.precision == "f32")
    flags.precision = "bf16";
  if (f.steps > 0)
    steps = f.steps;
  if (f.seed >= 0)
    seed = uint64_t(f.seed);
  if (f.logInterval > 0)
    logInterval = f.logInterval;
  if (!f.dataPath.empty())
    data.path = f.dataPath;
  data.seed = seed;
}

TrainerOptions RunSettings::trainerOptions() const {
  TrainerOptions o;
  o.steps = steps;
  o.microBatches = microBatches;
  o.seed = seed;
  o.logInterval = logInterval;
  o.evalInterval = evalInterval;
  o.evalBatches = evalBatches;
  o.checkpointInterval = checkpointInterval;
  o.outDir = flags.outDir;
  o.resume = flags.resume || flags.forceResume;
  o.forceResume = flags.forceResume;
  o.initFrom = flags.initFrom;
  o.modelFingerprint = fingerprint;
  o.precision = flags.precision == "f64" ? Precision::F64 : Precision::F32;
  o.quiet = flags.quiet;
  o.profile = flags.profile;
  o.compiled = flags.executor == "compiled";
  o.gemmPrecision = precision == "bf16"         ? GemmPrecision::BF16Operands
                    : flags.precision == "bf16" ? GemmPrecision::BF16
                    : flags.precision == "tf32" ? GemmPrecision::TF32
                                                : GemmPrecision::F32;
  return o;
}

//===--- the command line's run flags -----------------------------------===//

//===--- a plan's kernels and data --------------------------------------===//

PlanKernels stretto::loadPlanKernels(const PlanFile &plan, const RunSettings &s) {
  const Graph &graph = plan.graph;
  PlanKernels k;
  k.cppSource = plan.cppSource;
  k.cudaSource = plan.cudaSource;
  std::set<std::string> names;
  for (Phase ph : {Phase::Step, Phase::Update, Phase::Outer})
    for (const Node &n : graph.phase(ph))
      if (n.kind == OpKind::Kernel)
        names.insert(n.name);
  // A rank of a multi-process pipeline compiles only its stage's kernels.
  std::string source = plan.cppSource;
  try {
    std::optional<WorldInfo> w = worldFromEnvironment();
    if (w && w->size > 1 && s.stages > 1 && w->size == s.stages && graph.outer.empty()) {
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
      source = hostKernelSubset(plan.cppSource, names);
    }
  } catch (const std::exception &) {
    // A malformed environment is reported when runPlan joins the world.
  }
  k.count = names.size();
  if (names.empty())
    return k;
  // Fast start on a GPU: --device=cuda never falls back to the CPU, and
  // only --check's oracle runs the host build beside the GPU.
  const RunFlags &f = s.flags;
  if (f.device == "cuda" && f.executor == "compiled" && f.check == 0 &&
      !plan.cudaSource.empty())
    return k;
  if (plan.cppSource.empty())
    throw std::runtime_error("the plan has kernel nodes but no kernel source");
  auto cache = std::make_shared<HostKernelCache>(kernelCacheDirectory());
  if (!s.flags.quiet)
    cache->setOnCompile([](size_t n) {
      std::cout << "compiling " << n << " fused kernels with the host compiler...\n" << std::flush;
    });
  std::vector<std::string> symbols(names.begin(), names.end());
  std::string error;
  std::vector<HostKernelFn> fns = cache->loadAll(source, symbols, error);
  if (fns.size() != symbols.size())
    throw std::runtime_error(error);
  for (size_t i = 0; i < symbols.size(); ++i)
    k.functions[symbols[i]] = fns[i];
  k.owner = cache;
  return k;
}

int stretto::ncclSelfCheck() { return nccl::selfCheck(); }

const char *stretto::peerFailureDefault(const Graph &graph) {
  return graph.outer.empty() ? "stop" : "continue";
}

std::unique_ptr<DataSource> stretto::dataSourceFor(const Graph &graph, const RunSettings &s) {
  DataConfig data = s.data;
  data.seed = s.seed;
  return makeDataSource(graph, data, s.vocab);
}

//===--- --check: the chosen runtime beside the reference executor --------===//

namespace {

int checkAgainstReference(const Graph &graph, DataSource &source, const TrainerOptions &opt,
                          const RunSettings &s) {
  const int64_t steps = s.flags.check;
  std::unique_ptr<Executor> ex = executorFactory(opt)(graph);
  // bf16 storage (a plan compiled by train-mixed-precision): the reference
  // executor rounds at the plan's points too, so it is the oracle of losses
  // and states; bf16 GEMMs on an f32 plan round only inside the runtime.
  const bool storage = s.precision == "bf16";
  const bool bf16 = s.flags.precision == "bf16" && !storage;
  auto *compiled = dynamic_cast<PlanExecutor *>(ex.get());
  const bool onGpu = compiled && compiled->deviceName() != "cpu";
  std::string on = "reference executor";
  if (compiled)
    on = "compiled runtime on " + compiled->deviceName() +
         (storage                       ? " (bf16 storage)"
         : bf16                        ? " (bf16 GEMMs)"
          : s.flags.precision == "tf32" ? " (tf32 GEMMs)"
                                        : "");
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
  // TF32 GEMMs (10-bit mantissas, f32 accumulation) have no CPU twin: the
  // losses within bf16's 2e-2 of the f32 reference, the states within 1e-1
  // (on the emulated GPU they moved up to 3e-2 in 8 steps, in optimizer
  // moments of small norm; CompiledPathTest).
  // bf16 storage: the runtimes agree but for bf16 roundings that an f32
  // summation order tips (2^-8 relative, an element now and then), which
  // training carries on: losses within 1e-4, states within 2e-2 (measured in
  // CompiledPathTest's Bf16Storage cases over 8 steps: 1.8e-5 and 7.1e-3,
  // the latter in a tensor whose AdamW steps normalise a tipped gradient).
  const bool tf32 = s.flags.precision == "tf32";
  const double lossTol = bf16 || tf32 ? 2e-2 : 1e-4,
               stateTol = tf32 ? 1e-1 : storage ? 2e-2 : bf16 ? 1e-2 : 1e-3;
  auto isKeyBias = [](const StateDecl &d, size_t i, size_t n) {
    const std::string &p = d.of.empty() ? d.name : d.of, tail = "attn.qkv.b";
    return p.size() >= tail.size() && p.compare(p.size() - tail.size(), tail.size(), tail) == 0 &&
           n % 3 == 0 && i >= n / 3 && i < 2 * n / 3;
  };
  std::unique_ptr<Executor> bf16Oracle;
  if (bf16 && onGpu) {
    TrainerOptions cpu = opt;
    cpu.cuda = false;
    bf16Oracle = executorFactory(cpu)(graph);
    bf16Oracle->initialize(opt.seed);
  }
  Executor *stateOracle = !bf16 ? static_cast<Executor *>(&ref) : bf16Oracle.get();
  std::printf("check: %s against the reference executor, %lld steps\n", on.c_str(),
              (long long)steps);
  // A NaN compares false with everything: count it as an infinite difference.
  auto worse = [](double d, double worst) { return !(d <= worst); };
  double worstLoss = 0;
  for (int64_t step = 0; step < steps; ++step) {
    double la = 0, lb = 0;
    for (int64_t k = 0; k < opt.microBatches; ++k) {
      auto batch = source.batch(Split::Train, uint64_t(step), k);
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
  double worstState = 0;
  std::string where = "-";
  std::vector<std::string> drifted;
  if (stateOracle)
    for (const StateDecl &d : graph.states) {
      HostTensor x = stateOracle->getState(d.name), y = ex->getState(d.name);
      double dd = 0, xx = 0, yy = 0;
      for (size_t i = 0; i < x.data.size() && i < y.data.size(); ++i) {
        if (isKeyBias(d, i, x.data.size()))
          continue;
        double diff = x.data[i] - y.data[i];
        dd += diff * diff, xx += x.data[i] * x.data[i], yy += y.data[i] * y.data[i];
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
                      d.name.c_str(), rel, std::sqrt(xx), std::sqrt(yy));
        drifted.push_back(line);
      }
      if (rel > worstState)
        worstState = rel, where = d.name;
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

} // namespace

//===--- --device-model: the cost model's prediction ---------------------===//

namespace {
int predictOnDevice(const Graph &graph, const RunSettings &s, const std::string &cudaSource) {
  const DeviceModel *device = findDeviceModel(s.flags.deviceModel);
  // Tokens (rows) a step: the first input's elements, each micro-batch.
  int64_t tokens = 0;
  for (const Node &n : graph.nodes)
    if (n.kind == OpKind::Input) {
      tokens = (n.shape.empty() ? 1 : numElements(n.shape)) * std::max<int64_t>(1, s.microBatches);
      break;
    }
  std::printf("model @%s: the whole step on one device%s\n", s.modelName.c_str(),
              s.stages > 1 ? " (all pipeline stages)" : "");
  CostPrecision asked = s.flags.precision == "bf16"   ? CostPrecision::BF16
                        : s.flags.precision == "tf32" ? CostPrecision::TF32
                                                      : CostPrecision::F32;
  // bf16 values in two bytes unless STRETTO_BF16_STORAGE=0 (the CUDA
  // runtime's switch; wantedBf16Storage in GpuBackend.h).
  const char *storage = std::getenv("STRETTO_BF16_STORAGE");
  const bool twoBytes = !(storage && std::string(storage) == "0");
  if (asked == CostPrecision::BF16 && !twoBytes)
    std::printf("  (STRETTO_BF16_STORAGE=0: bf16 values in four bytes)\n");
  // The update's same-body kernels run as multi-tensor launches on a GPU.
  const MultiTensorKernels multi = wantedMultiTensorKernels(cudaSource, graph);
  StepCost cost = predictStep(graph, *device, asked, s.microBatches, tokens, twoBytes,
                              &multi.groupOf, &multi.chains);
  std::fputs(formatStepCost(cost, *device, asked, s.flags.profile ? 20 : 0).c_str(), stdout);
  for (CostPrecision p : {CostPrecision::F32, CostPrecision::TF32, CostPrecision::BF16}) {
    if (p == asked)
      continue;
    StepCost other = predictStep(graph, *device, p, s.microBatches, tokens, twoBytes,
                                 &multi.groupOf, &multi.chains);
    std::printf("  with %s: %.3f ms a step eager, %.3f ms as a graph (%.0f tok/s)\n",
                costPrecisionName(p), other.eagerSeconds * 1e3, other.graphSeconds * 1e3,
                other.graphSeconds > 0 ? tokens / other.graphSeconds : 0.0);
  }
  return 0;
}
} // namespace

//===--- runPlan --------------------------------------------------------===//

namespace {
/// The run flags that do not fit this plan, as the error to print; "" when
/// they all do.
std::string flagsAgainstPlan(const Graph &graph, const RunSettings &s) {
  const RunFlags &f = s.flags;
  const bool gossip = !graph.outer.empty();
  if (f.check > 0) {
    if (gossip)
      return "--check compares single-replica plans; this one is a gossip/DiLoCo run of " +
             std::to_string(graph.outerLoop.replicas) + " replicas";
    if (!f.initFrom.empty())
      return "--check starts both runtimes from the plan's seed; it does not combine with "
             "--init-from";
    if (s.stages > 1)
      return "--check compares single-stage plans; this one has " + std::to_string(s.stages) +
             " pipeline stages";
  }
  for (auto &[replica, round] : f.kills)
    if (!gossip || replica >= graph.outerLoop.replicas)
      return "--kill-replica " + std::to_string(replica) + "@" + std::to_string(round + 1) +
             ": " +
             (gossip ? "expected R@K with 0 <= R < " + std::to_string(graph.outerLoop.replicas) +
                           " and K >= 1"
                     : std::string("only gossip/DiLoCo runs have replicas to kill"));
  if (f.executor == "compiled" && f.precision == "f64")
    return "--executor=compiled: the compiled runtime computes in f32 (and bf16 GEMMs) only; use "
           "--executor=reference";
  if (f.executor == "reference" && f.precision == "bf16" && s.precision != "bf16")
    return "--precision=bf16 with the reference executor needs a plan compiled with bf16 storage "
           "(stretto-train --precision bf16, or train.precision = \"bf16\"); on this f32 plan "
           "bf16 is a mode of the compiled runtime (GEMM operands rounded per call)";
  return "";
}
} // namespace

int stretto::runPlan(const Graph &graph, DataSource &data, const RunSettings &s,
                     const PlanKernels &kernels) {
  const RunFlags &f = s.flags;
  const std::string tool = s.tool.empty() ? "stretto" : s.tool;
  auto fail = [&](const std::string &msg) {
    std::cerr << tool << ": " << msg << "\n";
    return 1;
  };
  const bool pipelined = s.stages > 1;
  const bool gossip = !graph.outer.empty();
  if (std::string why = flagsAgainstPlan(graph, s); !why.empty())
    return fail(why);
  if (!f.deviceModel.empty())
    return predictOnDevice(graph, s, kernels.cudaSource);

  TrainerOptions opt = s.trainerOptions();
  opt.kernels = kernels.functions;
  if (f.profile && !opt.compiled)
    std::cerr << tool << ": --profile reports on the compiled runtime only; this run uses the "
                 "reference executor\n";
  // The device: CUDA device 0 when asked for and found. --device=cuda
  // without one is an error naming what is missing; --device=auto trains on
  // the CPU and says why.
  std::string deviceNote;
  if (f.device != "cpu") {
    CudaProbe probe = probeCuda();
    deviceNote = probe.available ? "found " + probe.name : probe.reason;
    std::string why = !probe.available     ? probe.reason
                      : !opt.compiled      ? "the reference executor runs on the CPU"
                      : kernels.cudaSource.empty() && !kernels.functions.empty()
                          ? "the plan holds no CUDA kernels"
                          : "";
    if (why.empty()) {
      opt.cuda = true;
      opt.cudaRequired = f.device == "cuda";
      opt.cudaKernels = CudaKernelSet{kernels.cudaSource, kernelCacheDirectory()};
    } else if (f.device == "cuda") {
      return fail("--device=cuda: " + why + " (--device=auto falls back to the CPU)");
    } else if (f.precision == "tf32") {
      return fail("--device=auto: " + why + ", and --precision=tf32 needs the GPU's tensor cores");
    } else {
      std::cerr << tool << ": --device=auto: " << why << "; training on the CPU\n";
    }
  }
  if (f.precision == "tf32" && !opt.cuda)
    return fail("--precision=tf32 runs f32 GEMMs on a GPU's TF32 tensor cores; the CPU runtime "
                "computes in f32 (use --device=cuda, or --precision=f32)");
  // Every run setting, checked before anything is allocated.
  {
    RunCheck check(graph, opt);
    check.stages = s.stages;
    check.replicas = s.replicas;
    check.sync = s.sync;
    if (gossip)
      check.gossip = &s.gossip;
    check.checkMemory = !opt.cuda;
    try {
      validateRunSettings(check);
    } catch (const std::exception &e) {
      return fail((s.origin.empty() ? "" : s.origin + ": ") + e.what());
    }
  }
  if (!f.quiet) {
    std::cout << "data: " << data.describe() << "\n"
              << "device: " << (opt.cuda ? "cuda" : "cpu") << " (" << f.executor
              << " executor, " << f.precision << ")"
              << (deviceNote.empty() ? "" : "; " + deviceNote) << "\n"
              << std::flush;
  }

  // Several processes (the launcher, torchrun-style variables, mpirun, srun).
  std::unique_ptr<Communicator> world;
  try {
    std::optional<WorldInfo> w = worldFromEnvironment();
    if (w && w->size > 1) {
      if (f.check > 0)
        return fail("--check runs in one process");
      ConnectOptions co;
      co.timeout = std::chrono::seconds(f.timeoutSeconds);
      co.iface = f.iface;
      co.rendezvous = f.rendezvous;
      if (const char *id = std::getenv("STRETTO_RUN_ID"))
        co.runId = id;
      world = connectGloo(*w, co);
      if (!f.quiet && w->rank == 0)
        std::cout << "world: " << w->size << " processes (" << w->source << "), "
                  << world->transport() << ", timeout " << f.timeoutSeconds << " s\n";
    }
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  // Each rank's traffic, for people and bench/dist.
  auto withStats = [&](int rc) {
    if (world && !f.quiet)
      std::printf("comm: rank %d sent %.3f MB, received %.3f MB, %.3f s in communication\n",
                  world->rank(), world->bytesSent / 1e6, world->bytesReceived / 1e6,
                  world->commSeconds);
    std::fflush(stdout);
    return rc;
  };

  if (f.check > 0) {
    try {
      return checkAgainstReference(graph, data, opt, s);
    } catch (const std::exception &e) {
      return fail(e.what());
    }
  }
  if (gossip) {
    GossipOptions g = gossipOptionsFor(graph, opt, s.gossip);
    g.kills = f.kills;
    const std::string policy = f.onPeerFailure.empty() ? peerFailureDefault(graph) : f.onPeerFailure;
    g.stopOnPeerFailure = policy == "stop";
    return withStats(runGossipTraining(graph, data, g, opt, world.get()));
  }
  if (pipelined)
    return withStats(runPipelineTraining(graph, data, opt, s.twoBW, world.get()));
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
          if (world->rank() == 0 && !f.quiet)
            std::cout << "data parallelism: gradients all-reduced on the GPU by NCCL "
                      << ncclComm->version() << "\n";
        }
        ncclComm->groupStart();
        for (auto &[p, n] : g.device.f32)
          ncclComm->allReduceSum(p, p, n, nccl::kFloat32, g.device.stream);
        ncclComm->groupEnd();
        ncclComm->waitFor(g.device.idle, "gradient all-reduce");
      };
    } else if (world->rank() == 0 && !f.quiet) {
      std::cout << "data parallelism: NCCL unavailable (" << why
                << "); GPU gradients travel through host memory over Gloo\n";
    }
  }
  return withStats(runTraining(graph, data, opt));
}
