//===- stretto-tune.cpp - autotune a pipeline's stage partition ----------===//
//
//   stretto-tune examples/gpt-wide-head.toml --stages 2
//   stretto-tune CONFIG --stages auto --top 3 --memory-limit 2GiB --out tune/
//   stretto-tune CONFIG --stages 2 --profile recorded.profile --no-measure
//
// 1. Profile: the model compiled with every partition unit (embed, each
//    block, head) as its own stage, run on the pipeline runtime with one
//    micro-batch per step, so one stage works at a time: each stage's mean
//    forward, backward and update time is its unit's, with the compiled
//    kernels and the threads per stage of the measured runs. Bytes come
//    from the lowered graph: weights, optimizer state, the activations a
//    unit stashes between forward and backward, and what crosses each cut.
//    Profiles are cached (stretto/Tune/Profile.h).
// 2. Search: the DP of stretto/Tune/Partition.h for the config's schedule
//    (1F1B flush, or 2BW with sync = "2bw") and micro-batches, under a
//    memory limit per stage, with sends over a link model; every partition
//    is also evaluated (when there are few) for the candidate table, and the
//    simulator predicts each one's step time.
// 3. Measure: the best k candidates and the even split run a few steps on
//    the pipeline runtime (one thread per stage, `--threads` kernel threads
//    each), repeated in interleaved rounds (one run of every candidate per
//    round, after one warm-up run each); the table gives predicted and
//    measured step time, the error and the speedup over the even split (the
//    median of the rounds' ratios).
// 4. Write: the winner as a config override line and in the trainer's TOML
//    form, a JSON and a CSV report, and an SVG timeline of its schedule.
//
//===----------------------------------------------------------------------===//
#include "stretto/Compiler/Lowering.h"
#include "stretto/Transforms/Pipelines.h"
#include "stretto/Frontend/Load.h"
#include "stretto/Kernel/Compile.h"
#include "stretto/Runtime/Pipeline.h"
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Transforms/Passes.h"
#include "stretto/Runtime/RunSettings.h"
#include "stretto/Tune/Partition.h"
#include "stretto/Tune/Profile.h"
#include "stretto/Support/Text.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <omp.h>
#include <set>
#include <sstream>
#include <thread>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace cl = llvm::cl;
using namespace mlir;
using namespace stretto;
using namespace stretto::tune;

static cl::OptionCategory cat("stretto-tune options");
static cl::opt<std::string> configPath(cl::Positional, cl::desc("<model.toml | model.mlir>"),
                                       cl::Required, cl::cat(cat));
static cl::list<std::string> overrides(cl::Positional, cl::desc("[section.key=value ...]"),
                                       cl::cat(cat));
static cl::opt<std::string> stagesOpt(
    "stages", cl::desc("Stage count to tune for, or 'auto' (every count this machine can run "
                       "with one core per stage is measured; larger ones are predicted)"),
    cl::init("2"), cl::cat(cat));
static cl::opt<int> topK("top", cl::desc("Measure this many best predicted candidates, besides "
                                         "the even split"),
                         cl::init(2), cl::cat(cat));
static cl::opt<int> measureSteps("measure-steps", cl::desc("Steps per measured run (the first is a "
                                                   "warm-up and not timed)"),
                                 cl::init(8), cl::cat(cat));
static cl::opt<int> repeats("repeats", cl::desc("Measured runs per candidate (for the noise)"),
                            cl::init(3), cl::cat(cat));
static cl::opt<int> profileSteps("profile-steps", cl::desc("Steps of each profiling run"),
                                 cl::init(6), cl::cat(cat));
static cl::opt<int> profileRuns("profile-runs",
                                cl::desc("Profiling runs; each unit's times are the median of "
                                         "the runs' means (robust to other load)"),
                                cl::init(3), cl::cat(cat));
static cl::opt<int> threadsPerStage("threads-per-stage", cl::desc("Kernel threads per stage"),
                                    cl::init(1), cl::cat(cat));
static cl::opt<std::string> memoryLimitOpt(
    "memory-limit",
    cl::desc("Bytes a stage may hold (e.g. 512MiB, 2GiB, 1e9); default: the machine's RAM "
             "divided by the stages (ranks) on it"),
    cl::init(""), cl::cat(cat));
static cl::opt<double> linkLatency("link-latency",
                                   cl::desc("Seconds per transfer (default: an in-process "
                                            "hand-off between stage threads)"),
                                   cl::init(2e-5), cl::cat(cat));
static cl::opt<double> linkBandwidth("link-bandwidth",
                                     cl::desc("Bytes per second of a transfer (default: an "
                                              "in-process copy)"),
                                     cl::init(4e9), cl::cat(cat));
static cl::opt<std::string> outDir("out", cl::desc("Where the reports and the timeline go"),
                                   cl::init("tune"), cl::cat(cat));
static cl::opt<std::string> profilePath(
    "profile", cl::desc("Use this recorded profile instead of measuring (its model must match)"),
    cl::init(""), cl::cat(cat));
static cl::opt<std::string> saveProfilePath("save-profile",
                                            cl::desc("Also write the profile used to this file"),
                                            cl::init(""), cl::cat(cat));
static cl::opt<bool> noMeasure("no-measure",
                               cl::desc("Predict only: no measured runs of candidates"),
                               cl::cat(cat));
static cl::list<int64_t> microBatchesOpt(
    "micro-batches", cl::CommaSeparated,
    cl::desc("Also search these micro-batch counts (e.g. 2,4,8; each has its own profile, as "
             "the micro-batch shape changes); default: the config's"),
    cl::cat(cat));
static cl::opt<std::string> runtimeOpt(
    "runtime",
    cl::desc("Where measured candidates run: 'threads' (one process, a thread per stage) or "
             "'processes' (stretto-train --nproc S: a process per stage over Gloo)"),
    cl::init("threads"), cl::cat(cat));
static cl::opt<bool> noCache("no-cache", cl::desc("Measure the profile even if it is cached"),
                             cl::cat(cat));

namespace {

int fail(const std::string &msg) {
  std::fflush(stdout); // the table and notes first, then the error
  llvm::errs() << "stretto-tune: error: " << msg << "\n";
  return 1;
}

std::string tuneCacheDirectory() {
  const char *env = std::getenv("STRETTO_CACHE_DIR");
  const char *home = std::getenv("HOME");
  return env ? std::string(env) + "/tune" : std::string(home ? home : "/tmp") + "/.cache/stretto/tune";
}


/// "cpu: <model name> (<isa>)" from /proc/cpuinfo.
std::string hostDevice() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model = "unknown CPU", flags;
  while (std::getline(f, line)) {
    auto value = [&] { return line.substr(line.find(':') + 2); };
    if (line.rfind("model name", 0) == 0 && model == "unknown CPU")
      model = value();
    else if (line.rfind("flags", 0) == 0 && flags.empty())
      flags = " " + value() + " ";
  }
  std::string isa;
  for (const char *f : {"avx512f", "avx2", "fma", "avx", "sse4_2"})
    if (flags.find(std::string(" ") + f + " ") != std::string::npos)
      isa += (isa.empty() ? "" : ",") + std::string(f);
#if defined(__aarch64__)
  isa = "aarch64";
#endif
  return "cpu: " + model + " (" + (isa.empty() ? "x86-64" : isa) + ")";
}

/// Bytes with an optional binary suffix: 512MiB, 2GiB, 1.5e9.
bool parseBytes(const std::string &s, double &out) {
  char *end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end ? std::string(end) : "";
  double mult = unit.empty() || unit == "B" ? 1
                : unit == "KiB"             ? 1024.0
                : unit == "MiB"             ? 1024.0 * 1024
                : unit == "GiB"             ? 1024.0 * 1024 * 1024
                : unit == "TiB"             ? 1024.0 * 1024 * 1024 * 1024
                                            : -1;
  if (end == s.c_str() || mult < 0 || !(v > 0) || std::isinf(v))
    return false;
  out = v * mult;
  return true;
}

double dtypeBytes(DType t) {
  switch (t) {
  case DType::F64:
    return 8;
  case DType::BF16:
    return 2;
  default:
    return 4;
  }
}

double valueBytes(const Node &n) { return double(numElements(n.shape)) * dtypeBytes(n.dtype); }

std::string unitsOverride(const std::vector<std::string> &stageUnits) {
  std::string s = "train.stage_units=[";
  for (size_t i = 0; i < stageUnits.size(); ++i)
    s += (i ? ",\"" : "\"") + stageUnits[i] + "\"";
  return s + "]";
}

/// "first..last" (or "unit") for each stage of `bounds`.
std::vector<std::string> stageUnitsOf(const std::vector<std::string> &units,
                                      const std::vector<int> &bounds) {
  std::vector<std::string> out;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const std::string &a = units[bounds[s]], &b = units[bounds[s + 1] - 1];
    out.push_back(a == b ? a : a + ".." + b);
  }
  return out;
}

std::string joinUnits(const std::vector<std::string> &v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? " | " : "") + v[i];
  return s;
}

/// A compiled training step of the config, ready for the pipeline runtime.
struct Built {
  OwningOpRef<ModuleOp> module;
  Graph graph;
  std::map<std::string, RefExecutor::KernelFn> kernels;
  std::string kernelsKey;
  std::unique_ptr<DataSource> data;
  int64_t microBatches = 1;
  bool twoBW = false;
  std::string fingerprint;
  std::vector<std::string> units;
};

std::optional<Built> build(MLIRContext &ctx, HostKernelCache &cache,
                           const std::vector<std::string> &extra) {
  std::vector<std::string> sets(overrides.begin(), overrides.end());
  sets.insert(sets.end(), extra.begin(), extra.end());
  std::optional<LoadedModel> loaded = loadModel(ctx, configPath, sets);
  if (!loaded)
    return std::nullopt;
  Built b;
  train::ModelOp model = loaded->model;
  b.fingerprint = modelFingerprint(model);
  b.units = train::partitionUnits(model);
  b.microBatches = model.getTrainerInt("micro_batches", 1);
  TrainingPipelineOptions po = TrainingPipelineOptions::fromTrainer(model);
  b.twoBW = po.twoBW;
  if (model.getTrainerString("sync", "sync") == "gossip" ||
      model.getTrainerString("sync", "sync") == "diloco") {
    llvm::errs() << "stretto-tune: error: " << configPath
                 << ": sync = gossip/diloco has no pipeline stages to tune\n";
    return std::nullopt;
  }
  {
    PassManager pm(&ctx);
    buildTrainingPipeline(pm, po);
    buildKernelPipeline(pm);
    if (failed(pm.run(*loaded->module)))
      return std::nullopt;
  }
  std::string error;
  FailureOr<CompiledKernels> ck = compileKernels(model, cache, error);
  if (failed(ck)) {
    llvm::errs() << "stretto-tune: error: cannot build the kernels: " << error << "\n";
    return std::nullopt;
  }
  b.kernels = ck->functions;
  b.kernelsKey = llvm::sys::path::stem(ck->sourcePath).str();
  FailureOr<Graph> g = lowerToGraph(model);
  if (failed(g))
    return std::nullopt;
  std::string why;
  if (!PlanExecutor::supports(*g, why)) {
    llvm::errs() << "stretto-tune: error: the compiled runtime cannot run this model: " << why
                 << "\n";
    return std::nullopt;
  }
  b.graph = std::move(*g);
  int64_t vocab = 256;
  DataConfig dc = dataConfigOf(model, configPath, vocab);
  try {
    b.data = makeDataSource(b.graph, dc, vocab);
  } catch (const std::exception &e) {
    llvm::errs() << "stretto-tune: error: " << e.what() << "\n";
    return std::nullopt;
  }
  b.module = std::move(loaded->module);
  return b;
}

PipelineOptions runOptions(const Built &b, int64_t steps, int64_t microBatches) {
  PipelineOptions o;
  o.steps = steps;
  o.microBatches = microBatches;
  o.schedule = b.twoBW ? Schedule::TwoBW : Schedule::Flush;
  o.compiled = true;
  o.kernels = b.kernels;
  int threads = threadsPerStage;
  auto kernels = b.kernels;
  // Called on each stage's thread: its kernels and GEMMs use `threads`.
  o.executorFactory = [threads, kernels](const Graph &g) -> std::unique_ptr<Executor> {
    omp_set_num_threads(threads);
    return std::make_unique<PlanExecutor>(g, kernels, GemmPrecision::F32);
  };
  return o;
}

/// The profiling build: every unit its own stage.
std::optional<Built> buildProfiling(MLIRContext &ctx, HostKernelCache &cache,
                                    const std::vector<std::string> &units,
                                    std::vector<std::string> extra) {
  int U = int(units.size());
  extra.push_back("train.grad_clip=0");
  if (U > 1) {
    extra.push_back("train.stages=" + std::to_string(U));
    extra.push_back(unitsOverride(units));
  }
  return build(ctx, cache, extra);
}

/// Per-unit costs from the profiling build, one micro-batch per step (one
/// stage works at a time; the updates of neighbouring stages may overlap).
std::optional<Profile> measureProfile(Built *b, const std::vector<std::string> &units,
                                      const std::map<std::string, std::string> &key) {
  int U = int(units.size());
  int runs = std::max(1, int(profileRuns));
  std::vector<std::vector<double>> f(U), bw(U), up(U);
  for (int run = 0; run < runs; ++run) {
    PipelineResult r = runPipeline(b->graph, *b->data, runOptions(*b, profileSteps, 1));
    if (int(r.stages.size()) != U)
      return fail("the profiling run has " + std::to_string(r.stages.size()) + " stages for " +
                  std::to_string(U) + " units"),
             std::nullopt;
    for (int u = 0; u < U; ++u) {
      const StageReport &st = r.stages[u];
      f[u].push_back(st.forwardSeconds / double(std::max<int64_t>(1, st.forwards)));
      bw[u].push_back(st.backwardSeconds / double(std::max<int64_t>(1, st.backwards)));
      up[u].push_back(st.updateSeconds / double(std::max<int64_t>(1, st.updates)));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  Profile p;
  p.key = key;
  p.steps = int64_t(profileSteps) * runs;
  p.units.resize(U);
  for (int u = 0; u < U; ++u) {
    p.units[u].name = units[u];
    p.units[u].forward = median(f[u]);
    p.units[u].backward = median(bw[u]);
    p.units[u].update = median(up[u]);
  }
  for (const StateDecl &d : b->graph.states) {
    if (d.stage < 0 || d.stage >= U)
      continue;
    double bytes = double(numElements(d.shape)) * dtypeBytes(d.dtype);
    (d.isParam ? p.units[d.stage].paramBytes : p.units[d.stage].optimizerBytes) += bytes;
  }
  // Forward transfers: what crosses each cut between their stages.
  for (const Node &n : b->graph.nodes)
    if (n.kind == OpKind::Transfer && n.ints.size() == 2 && n.ints[0] < n.ints[1])
      for (int64_t c = n.ints[0] + 1; c <= n.ints[1] && c < U; ++c)
        p.units[c].cutBytes += valueBytes(n);
  // Stashes: forward values (not parameter reads) that backward nodes use.
  std::vector<StagePlan> plans = planStages(b->graph);
  for (const StagePlan &plan : plans) {
    if (plan.stage < 0 || plan.stage >= U)
      continue;
    std::set<int> fwd(plan.forward.begin(), plan.forward.end()), counted;
    const std::vector<Node> &nodes = plan.graph.nodes;
    for (int i : plan.backward)
      for (int o : nodes[i].operands)
        if (fwd.count(o) && !counted.count(o) && nodes[o].kind != OpKind::Read &&
            nodes[o].kind != OpKind::Constant && !nodes[o].shape.empty()) {
          counted.insert(o);
          p.units[plan.stage].stashBytes += valueBytes(nodes[o]);
        }
  }
  return p;
}

struct Measured {
  double median = 0; // median over runs of each run's median step time
  double noise = 0;  // half the range of the run medians, relative
  std::vector<double> runs;
  // Threads only: each stage's compute per step (forward + backward +
  // update, the runtime's own report), median over the runs: with the
  // prediction's per-stage compute it separates cost-model error from
  // schedule and machine effects.
  std::vector<double> stageCompute;
};

/// The end times of steps 1..N of a `stretto-train --nproc S` run, from its
/// progress lines ("step k/N | loss L | T tok/s", T cumulative since the
/// start): k·tokens/T.
std::optional<std::vector<double>> runProcesses(const std::string &argv0, int S,
                                                const std::vector<std::string> &extra,
                                                double tokensPerStep) {
  std::string train = llvm::sys::path::parent_path(argv0).str();
  train = (train.empty() ? std::string(".") : train) + "/stretto-train";
  std::string out = outDir + "/run-" + std::to_string(::getpid());
  std::vector<std::string> args = {train, configPath};
  args.insert(args.end(), overrides.begin(), overrides.end());
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--steps", std::to_string(std::max(3, int(measureSteps))),
                           "--log-interval", "1", "--nproc", std::to_string(S), "--out", out,
                           "train.eval_interval=1000000", "train.warmup_steps=0"});
  std::vector<char *> cargv;
  for (std::string &a : args)
    cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int pipefd[2];
  if (::pipe(pipefd) != 0)
    return std::nullopt;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_addclose(&fa, pipefd[0]);
  // The launcher keeps a given OMP_NUM_THREADS: the kernel threads per stage.
  ::setenv("OMP_NUM_THREADS", std::to_string(int(threadsPerStage)).c_str(), 1);
  pid_t pid;
  int rc = posix_spawn(&pid, train.c_str(), &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    llvm::errs() << "stretto-tune: error: cannot start " << train << "\n";
    return std::nullopt;
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;)
    text.append(buf, size_t(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  llvm::sys::fs::remove_directories(out);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    llvm::errs() << "stretto-tune: error: the measured run `stretto-train ... --nproc " << S
                 << "` failed:\n"
                 << text << "\n";
    return std::nullopt;
  }
  std::vector<double> ends;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    long long k = 0, n = 0;
    double loss = 0, tps = 0;
    size_t at = line.find("step "); // after the launcher's "[rank r] "
    if (at != std::string::npos &&
        std::sscanf(line.c_str() + at, "step %lld/%lld | loss %lf | %lf tok/s", &k, &n, &loss,
                    &tps) == 4 &&
        tps > 0)
      ends.push_back(double(k) * tokensPerStep / tps);
  }
  if (ends.size() < 3) {
    llvm::errs() << "stretto-tune: error: no per-step progress lines in the output of "
                    "`stretto-train ... --nproc "
                 << S << "`:\n"
                 << text << "\n";
    return std::nullopt;
  }
  return ends;
}

/// A candidate being measured: built once, then run once per round, the
/// candidates' runs interleaved (round 1 of every candidate, then round 2,
/// ...), so that a machine that slows down for a while slows every
/// candidate's run of that round alike and the per-round ratios against the
/// even split (pairedSpeedup) stay steady.
struct Measurement {
  Built built;
  std::vector<std::string> extra;
  int S = 0;
  Measured m;
  std::vector<std::vector<double>> computeRuns;
};

std::optional<Measurement> prepareMeasurement(MLIRContext &ctx, HostKernelCache &cache, int S,
                                              int64_t mb,
                                              const std::vector<std::string> &stageUnits) {
  Measurement r;
  r.S = S;
  // grad_clip = 0, as in the profile: the schedule model has no term for
  // clipping's all-reduce across stages, so the runs it is compared with
  // leave it out too (README, "Tuning a partition").
  r.extra = {"train.stages=" + std::to_string(S), "train.grad_clip=0",
             "train.micro_batches=" + std::to_string(mb)};
  if (S > 1)
    r.extra.push_back(unitsOverride(stageUnits));
  std::optional<Built> b = build(ctx, cache, r.extra);
  if (!b)
    return std::nullopt;
  r.built = std::move(*b);
  return r;
}

/// One measured run: its median step time (from the end of step 1: step 1
/// warms up) is appended to m.runs unless `warmUp`. False on a failed run.
bool measureOnce(Measurement &x, const std::string &argv0, bool warmUp) {
  Built &b = x.built;
  std::vector<double> at;
  if (runtimeOpt == "processes" && x.S > 1) {
    auto ends = runProcesses(argv0, x.S, x.extra,
                             double(b.microBatches) * double(b.data->tokensPerBatch()));
    if (!ends)
      return false;
    at = *ends;
  } else {
    PipelineOptions o = runOptions(b, std::max(3, int(measureSteps)), b.microBatches);
    o.onStep = [&](int64_t, double) {
      at.push_back(std::chrono::duration<double>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count());
    };
    PipelineResult res = runPipeline(b.graph, *b.data, o);
    for (size_t s = 0; s < res.stages.size() && !warmUp; ++s) {
      const StageReport &st = res.stages[s];
      double perStep = (st.forwardSeconds + st.backwardSeconds + st.updateSeconds) /
                       double(std::max<int64_t>(1, st.updates));
      if (x.computeRuns.size() <= s)
        x.computeRuns.resize(s + 1);
      x.computeRuns[s].push_back(perStep);
    }
  }
  std::vector<double> d;
  for (size_t i = 2; i < at.size(); ++i)
    d.push_back(at[i] - at[i - 1]);
  std::sort(d.begin(), d.end());
  if (!warmUp)
    x.m.runs.push_back(d.empty() ? 0 : d[d.size() / 2]);
  return true;
}

/// The median over the runs, the noise (half their range, relative) and
/// each stage's median compute.
Measured finishMeasurement(Measurement &x) {
  Measured m = x.m;
  std::vector<double> r = m.runs;
  std::sort(r.begin(), r.end());
  m.median = r[r.size() / 2];
  m.noise = m.median > 0 ? (r.back() - r.front()) / 2 / m.median : 0;
  for (std::vector<double> &c : x.computeRuns) {
    std::sort(c.begin(), c.end());
    m.stageCompute.push_back(c[c.size() / 2]);
  }
  return m;
}

/// The speedup of `x` over `even` round by round (their runs were
/// interleaved): the median of the per-round ratios, and their noise (half
/// the range of the ratios, relative to the median).
std::pair<double, double> pairedSpeedup(const Measured &x, const Measured &even) {
  std::vector<double> q;
  for (size_t k = 0; k < x.runs.size() && k < even.runs.size(); ++k)
    if (x.runs[k] > 0)
      q.push_back(even.runs[k] / x.runs[k]);
  if (q.empty())
    return {0, 0};
  std::sort(q.begin(), q.end());
  double med = q[q.size() / 2];
  return {med, (q.back() - q.front()) / 2 / med};
}

struct Row {
  int S = 0;
  int64_t m = 1; // micro-batches
  Candidate cand;
  SimResult sim;
  std::vector<std::string> stageUnits;
  bool dpPick = false, even = false;
  std::optional<Measured> measured;
};

/// CPU seconds every process has run (user, nice, system, irq, softirq).
double machineBusySeconds() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  long long v[7] = {0, 0, 0, 0, 0, 0, 0};
  f >> cpu >> v[0] >> v[1] >> v[2] >> v[3] >> v[4] >> v[5] >> v[6];
  return double(v[0] + v[1] + v[2] + v[5] + v[6]) / double(sysconf(_SC_CLK_TCK));
}

/// CPU seconds this process (all its threads) and its waited-for children used.
double ownCpuSeconds() {
  struct rusage self, kids;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  auto sec = [](const timeval &t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  return sec(self.ru_utime) + sec(self.ru_stime) + sec(kids.ru_utime) + sec(kids.ru_stime);
}

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", s * 1e3);
  return b;
}

} // namespace

static const char *const kOverview =
    "stretto-tune: profile a model's partition units, search stage partitions (DP under "
    "memory limits), simulate and measure the best, write the winner\n\n"
    "  stretto-tune examples/gpt-wide-head.toml --stages 2\n\n"
    "How it works and how to read its report: docs/guide/tuning.md\n";

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(argc, argv, kOverview);
  MLIRContext ctx;
  auto diagnostics = printDiagnostics(ctx);

  // Flags, checked before anything runs.
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int maxMeasured = std::max(1, int(cores) / std::max(1, int(threadsPerStage)));
  bool autoStages = stagesOpt == "auto";
  int fixedS = 0;
  if (!autoStages) {
    char *end = nullptr;
    long v = std::strtol(stagesOpt.c_str(), &end, 10);
    if (stagesOpt.empty() || *end || v < 1 || v > 64)
      return fail("--stages must be a stage count from 1 to 64 or 'auto', got '" + stagesOpt + "'");
    fixedS = int(v);
  }
  if (topK < 1 || measureSteps < 3 || repeats < 1 || profileSteps < 1 || profileRuns < 1 ||
      threadsPerStage < 1)
    return fail("--top, --repeats, --profile-steps, --profile-runs and --threads-per-stage must "
                "be >= 1 and --measure-steps >= 3");
  if (!(linkLatency >= 0) || !(linkBandwidth > 0))
    return fail("--link-latency must be >= 0 and --link-bandwidth > 0");
  if (runtimeOpt != "threads" && runtimeOpt != "processes")
    return fail("--runtime must be 'threads' or 'processes', got '" + runtimeOpt + "'");
  double memLimit = 0;
  if (!memoryLimitOpt.empty() && !parseBytes(memoryLimitOpt, memLimit))
    return fail("--memory-limit must be a byte count such as 512MiB, 2GiB or 1e9, got '" +
                memoryLimitOpt + "'");

  HostKernelCache cache(kernelCacheDirectory());

  // The model as configured: its units, schedule and micro-batches.
  std::optional<LoadedModel> loaded =
      loadModel(ctx, configPath, std::vector<std::string>(overrides.begin(), overrides.end()));
  if (!loaded)
    return 1;
  std::vector<std::string> units = train::partitionUnits(loaded->model);
  if (units.empty())
    return fail(configPath + ": no parameter has a layer, so there are no partition units");
  const std::string fingerprint = modelFingerprint(loaded->model);
  const int64_t m = loaded->model.getTrainerInt("micro_batches", 1);
  const bool twoBW = TrainingPipelineOptions::fromTrainer(loaded->model).twoBW;
  const int U = int(units.size());
  if (!autoStages && fixedS > U)
    return fail("--stages " + std::to_string(fixedS) + ": the model has only " +
                std::to_string(U) + " partition units (" + joinUnits(units) + ")");

  // 1. Profile (one per micro-batch count: the micro-batch shape changes).
  std::vector<int64_t> mbs(microBatchesOpt.begin(), microBatchesOpt.end());
  if (mbs.empty())
    mbs.push_back(m);
  for (int64_t mb : mbs)
    if (mb < 1)
      return fail("--micro-batches must list counts >= 1, got " + std::to_string(mb));
  if (!profilePath.empty() && (mbs.size() > 1 || mbs[0] != m))
    return fail("--profile holds one micro-batch count (the config's); it does not combine "
                "with --micro-batches");
  auto getProfile = [&](int64_t mb) -> std::optional<Profile> {
  std::map<std::string, std::string> key = {
      {"model", fingerprint},
      {"micro_batch", std::to_string(mb)},
      {"device", hostDevice()},
      {"threads", std::to_string(int(threadsPerStage))},
      {"precision", "f32"}};
  Profile profile;
  if (!profilePath.empty()) {
    try {
      profile = loadProfile(profilePath);
    } catch (const std::exception &e) {
      return fail(e.what()), std::nullopt;
    }
    if (profile.key["model"] != fingerprint)
      return fail(profilePath + ": recorded for another model (fingerprint " +
                  profile.key["model"] + ", this config's is " + fingerprint + ")"),
             std::nullopt;
    std::vector<std::string> names;
    for (const UnitProfile &u : profile.units)
      names.push_back(u.name);
    if (names != units)
      return fail(profilePath + ": its units (" + joinUnits(names) + ") are not the model's (" +
                  joinUnits(units) + ")"),
             std::nullopt;
    std::printf("profile: %s (recorded on %s, %s thread(s)/stage)\n", profilePath.c_str(),
                profile.key["device"].c_str(), profile.key["threads"].c_str());
  } else {
    std::string dir = tuneCacheDirectory();
    llvm::sys::fs::create_directories(dir);
    // The profiling build's kernels are part of the key (a kernel-cache hit
    // after the first run): another kernel build makes a cached entry stale.
    std::optional<Built> pb =
        buildProfiling(ctx, cache, units, {"train.micro_batches=" + std::to_string(mb)});
    if (!pb)
      return std::nullopt;
    key["kernels"] = pb->kernelsKey;
    CacheLookup hit;
    if (!noCache)
      hit = lookupProfile(dir, key);
    if (hit.status == CacheLookup::Stale)
      std::printf("profile cache: stale entry (%s); measuring again\n", hit.why.c_str());
    else if (hit.status == CacheLookup::Corrupt)
      std::printf("profile cache: corrupt entry (%s); measuring again\n", hit.why.c_str());
    if (hit.status == CacheLookup::Hit) {
      profile = hit.profile;
      std::printf("profile: cached (%s)\n", profileCachePath(dir, key).c_str());
    } else {
      std::printf("profiling %d partition units (%s): %d runs x %d steps, 1 micro-batch each, "
                  "%d thread(s) per stage...\n",
                  U, joinUnits(units).c_str(), int(profileRuns), int(profileSteps),
                  int(threadsPerStage));
      std::fflush(stdout);
      std::optional<Profile> p;
      try {
        p = measureProfile(&*pb, units, key);
      } catch (const std::exception &e) {
        return fail(std::string("the profiling run failed: ") + e.what()), std::nullopt;
      }
      if (!p)
        return std::nullopt;
      profile = *p;
      try {
        saveProfile(profileCachePath(dir, profile.key), profile);
      } catch (const std::exception &e) {
        std::printf("note: %s (the profile is not cached)\n", e.what());
      }
    }
  }
  if (!saveProfilePath.empty()) {
    try {
      saveProfile(saveProfilePath, profile);
    } catch (const std::exception &e) {
      return fail(e.what()), std::nullopt;
    }
  }
  std::printf("\nunit costs per micro-batch (%lld micro-batches per step):\n", (long long)mb);
  std::printf("%-8s %9s %9s %9s %11s %11s %11s %11s\n", "unit", "fwd ms", "bwd ms", "upd ms",
              "weights", "optimizer", "stash/mb", "cut before");
  for (const UnitProfile &u : profile.units)
    std::printf("%-8s %9s %9s %9s %11s %11s %11s %11s\n", u.name.c_str(), ms(u.forward).c_str(),
                ms(u.backward).c_str(), ms(u.update).c_str(), formatBytes(u.paramBytes).c_str(),
                formatBytes(u.optimizerBytes).c_str(), formatBytes(u.stashBytes).c_str(),
                formatBytes(u.cutBytes).c_str());
  return profile;
  };

  // 2. Search.
  std::vector<int> counts;
  if (autoStages) {
    for (int S = 1; S <= std::min(U, 8); ++S)
      counts.push_back(S);
  } else {
    counts.push_back(fixedS);
  }
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  double ram = pages > 0 && pageSize > 0 ? double(pages) * double(pageSize) : 0;
  std::vector<bool> isBlock;
  for (const std::string &u : units)
    isBlock.push_back(u.rfind("block", 0) == 0);
  std::vector<Row> rows;
  std::vector<std::string> infeasible;
  std::string deviceName;
  for (int64_t mb : mbs) {
  std::optional<Profile> got = getProfile(mb);
  if (!got)
    return 1;
  const Profile &profile = *got;
  deviceName = profile.key.count("device") ? profile.key.at("device") : "";
  for (int S : counts) {
    CostModel cm;
    cm.units = profile.units;
    cm.microBatches = mb;
    cm.schedule = twoBW ? Sched::TwoBW : Sched::Flush;
    cm.link = Link{linkLatency, linkBandwidth};
    cm.efMemory = loaded->model.getTrainerOption("ef_lambda") != nullptr;
    double limit = memLimit > 0 ? memLimit : ram / S;
    if (limit > 0)
      cm.memoryLimit = {limit};
    Candidate best = searchPartition(cm, S);
    if (!best.feasible) {
      infeasible.push_back("S=" + std::to_string(S) + " m=" + std::to_string(mb) + ": " + best.why);
      continue;
    }
    std::vector<int> evenBounds;
    bool haveEven = true;
    try {
      evenBounds = evenSplit(isBlock, S);
    } catch (const std::exception &) {
      haveEven = false; // more stages than blocks
    }
    std::vector<std::vector<int>> all;
    try {
      all = allPartitions(U, S, 20000);
    } catch (const std::length_error &) {
      all = {best.bounds};
      if (haveEven)
        all.push_back(evenBounds);
    }
    for (const std::vector<int> &bounds : all) {
      Row r;
      r.S = S;
      r.cand = evaluate(cm, bounds);
      if (!r.cand.feasible) {
        infeasible.push_back("S=" + std::to_string(S) + " m=" + std::to_string(mb) + " " +
                             joinUnits(stageUnitsOf(units, bounds)) +
                             (haveEven && bounds == evenBounds ? " (the even split)" : "") + ": " +
                             r.cand.why);
        continue;
      }
      r.m = mb;
      r.sim = simulate(r.cand.stages, mb, twoBW ? 8 : 4, cm.schedule);
      r.stageUnits = stageUnitsOf(units, bounds);
      r.dpPick = bounds == best.bounds;
      r.even = haveEven && bounds == evenBounds;
      rows.push_back(std::move(r));
    }
  }
  }
  if (rows.empty()) {
    for (const std::string &why : infeasible)
      std::printf("infeasible: %s\n", why.c_str());
  }
  if (rows.empty())
    return fail("no partition fits the memory limit" +
                (memoryLimitOpt.empty() ? std::string(" (the machine's RAM per stage)")
                                        : " of " + memoryLimitOpt));
  // By predicted (simulated) step time.
  std::stable_sort(rows.begin(), rows.end(), [](const Row &a, const Row &b) {
    return a.sim.stepTime < b.sim.stepTime;
  });
  // Measure: per stage count this machine can run, the top k and the even split.
  std::vector<size_t> toMeasure;
  if (!noMeasure) {
    std::map<int, int> taken;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].S > maxMeasured)
        continue;
      if (taken[rows[i].S] < topK || rows[i].even) {
        if (!rows[i].even)
          ++taken[rows[i].S];
        toMeasure.push_back(i);
      }
    }
  }
  if (autoStages)
    std::printf("\n--stages auto: this machine has %u core(s) and runs %d thread(s) per stage, "
                "so it can measure only up to %d stage(s) at a time; larger stage counts are "
                "predicted only%s\n",
                cores, int(threadsPerStage), maxMeasured,
                noMeasure ? " (--no-measure: nothing is measured)" : "");
  if (!toMeasure.empty()) {
    std::printf("\nmeasuring %zu candidate(s): %d runs x %d steps each on the pipeline runtime "
                "(%s, %d kernel thread(s) per stage)...\n",
                toMeasure.size(), int(repeats), int(measureSteps),
                runtimeOpt == "processes" ? "stretto-train --nproc S, a process per stage"
                                          : "a thread per stage",
                int(threadsPerStage));
    std::fflush(stdout);
  }
  // Other processes' share of the CPU during the measurements: the
  // simulator assumes a core per stage, which a busy machine does not give.
  double busy0 = machineBusySeconds(), own0 = ownCpuSeconds();
  auto wall0 = std::chrono::steady_clock::now();
  {
    std::vector<Measurement> ms;
    try {
      for (size_t i : toMeasure) {
        std::optional<Measurement> x =
            prepareMeasurement(ctx, cache, rows[i].S, rows[i].m, rows[i].stageUnits);
        if (!x)
          return 1;
        ms.push_back(std::move(*x));
      }
      // A warm-up run of each (not counted), then the rounds, interleaved.
      for (int rep = -1; rep < std::max(1, int(repeats)); ++rep)
        for (Measurement &x : ms)
          if (!measureOnce(x, argv[0], rep < 0))
            return 1;
    } catch (const std::exception &e) {
      return fail(std::string("a measured run failed: ") + e.what());
    }
    for (size_t k = 0; k < toMeasure.size(); ++k)
      rows[toMeasure[k]].measured = finishMeasurement(ms[k]);
  }

  double otherShare = 0;
  if (!toMeasure.empty()) {
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    double other = std::max(0.0, machineBusySeconds() - busy0 - (ownCpuSeconds() - own0));
    otherShare = wall > 0 ? other / (wall * double(cores)) : 0;
  }
  // 3. The table. The even split at the config's micro-batch count is the
  // baseline (at the first one searched when that is not among them).
  const int64_t mBase = std::count(mbs.begin(), mbs.end(), m) ? m : mbs.front();
  const bool manyM = mbs.size() > 1;
  auto sLabel = [&](const Row &r) {
    return manyM ? std::to_string(r.S) + ",m=" + std::to_string(r.m) : std::to_string(r.S);
  };
  auto evenOf = [&](int S) -> const Row * {
    for (const Row &e : rows)
      if (e.even && e.S == S && e.m == mBase)
        return &e;
    return nullptr;
  };
  std::printf("\n%-3s %-2s %-34s %-22s %-11s %-19s %9s %9s %7s %8s\n", "#", "S", "stage units",
              "pred compute ms/stage", "xfer ms", "memory/stage", "pred ms", "meas ms", "err",
              "vs even");
  size_t shown = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row &r = rows[i];
    if (!r.measured && !r.even && !r.dpPick && (autoStages || shown >= 12))
      continue; // --stages auto: per stage count, its DP pick, even split and measured ones
    ++shown;
    std::string compute, xfer, mem;
    for (const StageEstimate &e : r.cand.stages) {
      compute +=
          (compute.empty() ? "" : "/") + ms(double(r.m) * (e.forward + e.backward) + e.update);
      xfer += (xfer.empty() ? "" : "/") + ms(double(r.m) * (e.sendForward + e.sendBackward));
      std::string b = formatBytes(e.memory);
      mem += (mem.empty() ? "" : "/") + b.substr(0, b.find(' ') + 2);
    }
    std::string label = std::string(r.dpPick ? "*" : "") + (r.even ? "=" : "");
    std::string meas = r.measured ? ms(r.measured->median) : "-";
    std::string err = "-", vs = "-";
    if (r.measured) {
      char b[32];
      std::snprintf(b, sizeof b, "%+.1f%%",
                    100 * (r.sim.stepTime - r.measured->median) / r.measured->median);
      err = b;
      const Row *ev = evenOf(r.S);
      if (ev && ev->measured) {
        std::snprintf(b, sizeof b, "%.2fx", pairedSpeedup(*r.measured, *ev->measured).first);
        vs = b;
      }
    }
    std::printf("%-3s %-2s %-34s %-22s %-11s %-19s %9s %9s %7s %8s\n",
                (std::to_string(i + 1) + label).c_str(), sLabel(r).c_str(),
                joinUnits(r.stageUnits).c_str(),
                compute.c_str(), xfer.c_str(), mem.c_str(), ms(r.sim.stepTime).c_str(),
                meas.c_str(), err.c_str(), vs.c_str());
  }
  if (manyM)
    std::printf("(* the DP's pick, = the even split; pred: simulated step time of the %s "
                "schedule with the row's m micro-batches; vs even: against the even split with "
                "%lld, the median of the interleaved rounds' ratios)\n",
                twoBW ? "2BW (steady state)" : "1F1B flush", (long long)mBase);
  else
    std::printf("(* the DP's pick, = the even split; pred: simulated step time of the %s "
                "schedule with %lld micro-batches; vs even: the median of the interleaved "
                "rounds' ratios)\n",
                twoBW ? "2BW (steady state)" : "1F1B flush", (long long)m);
  size_t listed = 0;
  for (const std::string &why : infeasible)
    if (listed++ < 12)
      std::printf("infeasible: %s\n", why.c_str());
  if (infeasible.size() > 12)
    std::printf("infeasible: ... and %zu more\n", infeasible.size() - 12);
  if (otherShare > 0.1)
    std::printf("note: other processes used %.0f%% of this machine's CPU time during the "
                "measured runs; measured times then include waiting for a core, which the "
                "prediction (a core per stage) does not model\n",
                100 * otherShare);
  bool anyCompute = false;
  for (const Row &r : rows)
    anyCompute |= r.measured && !r.measured->stageCompute.empty();
  if (anyCompute) {
    std::printf("\ncompute ms/stage per step, predicted -> measured by the runtime (busy time, "
                "not waiting):\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row &r = rows[i];
      if (!r.measured || r.measured->stageCompute.empty())
        continue;
      std::string line;
      for (size_t s = 0; s < r.cand.stages.size(); ++s) {
        const StageEstimate &e = r.cand.stages[s];
        double pred = double(r.m) * (e.forward + e.backward) + e.update;
        double meas = s < r.measured->stageCompute.size() ? r.measured->stageCompute[s] : 0;
        char b[64];
        std::snprintf(b, sizeof b, "%s%s -> %s", line.empty() ? "" : "   ", ms(pred).c_str(),
                      ms(meas).c_str());
        line += b;
      }
      std::printf("%-4zu %-34s %s\n", i + 1, joinUnits(r.stageUnits).c_str(), line.c_str());
    }
  }

  // The winner: the fastest measured candidate, else the fastest predicted
  // (the simulator sees every stage's update; the DP's flush objective only
  // the first stage's, so the two can differ by an update).
  // Measured times within the run-to-run noise of each other are a tie,
  // which goes to the better prediction -- but only among candidates that
  // themselves beat the even split by more than the noise: a prediction
  // never outvotes a measured speedup that the noise cannot explain.
  std::vector<tune::Choice> choices;
  for (const Row &r : rows) {
    tune::Choice c;
    c.stages = r.S;
    if (r.measured) {
      c.measured = true;
      c.median = r.measured->median;
      c.noise = r.measured->noise;
    }
    if (const Row *ev = evenOf(r.S)) {
      c.even = int(ev - rows.data());
      if (r.measured && ev->measured)
        std::tie(c.vsEven, c.vsEvenNoise) = pairedSpeedup(*r.measured, *ev->measured);
    }
    choices.push_back(c);
  }
  const tune::Pick pick = tune::pickWinner(choices);
  const Row *winner = &rows[pick.index];
  if (pick.passedOver >= 0) {
    const Row &r = rows[size_t(pick.passedOver)];
    std::printf("\n%s is within the noise of the fastest (%s ms vs %s ms) and predicted "
                "faster, but its lead over the even split is within the noise: the "
                "measured-fastest wins\n",
                joinUnits(r.stageUnits).c_str(), ms(r.measured->median).c_str(),
                ms(winner->measured->median).c_str());
  }
  if (pick.tieToPrediction) {
    double fastest = winner->measured->median;
    for (const Row &r : rows)
      if (r.measured)
        fastest = std::min(fastest, r.measured->median);
    std::printf("\nmeasured within the noise of the fastest (%s ms vs %s ms): the tie "
                "goes to the better prediction\n",
                ms(winner->measured->median).c_str(), ms(fastest).c_str());
  }
  const Row *dp = nullptr;
  for (const Row &r : rows)
    if (r.dpPick && r.S == winner->S && r.m == winner->m)
      dp = &r;
  std::printf("\nDP pick (S=%s): %s, predicted %s ms/step\n", sLabel(*dp).c_str(),
              joinUnits(dp->stageUnits).c_str(), ms(dp->sim.stepTime).c_str());
  std::printf("winner: %s (S=%s)\n", joinUnits(winner->stageUnits).c_str(),
              sLabel(*winner).c_str());
  const Row *even = evenOf(winner->S);
  if (winner->measured && even && even->measured) {
    auto [speedup, noise] = pairedSpeedup(*winner->measured, *even->measured);
    std::printf("%.2fx over even (measured %s vs %s ms/step; the median of %zu interleaved "
                "rounds' ratios, run-to-run noise +-%.1f%%)\n",
                speedup, ms(winner->measured->median).c_str(), ms(even->measured->median).c_str(),
                winner->measured->runs.size(), 100 * noise);
  } else if (even) {
    std::printf("%.2fx over even (predicted: %s vs %s ms/step; not measured)\n",
                even->sim.stepTime / winner->sim.stepTime, ms(winner->sim.stepTime).c_str(),
                ms(even->sim.stepTime).c_str());
  }

  // 4. Write.
  std::string line = "train.stages=" + std::to_string(winner->S);
  if (winner->S > 1)
    line += " '" + unitsOverride(winner->stageUnits) + "'";
  if (winner->m != m)
    line += " train.micro_batches=" + std::to_string(winner->m);
  std::string toml = "stages = " + std::to_string(winner->S);
  if (winner->m != m)
    toml += "\nmicro_batches = " + std::to_string(winner->m);
  if (winner->S > 1) {
    toml += "\nstage_units = [";
    for (size_t i = 0; i < winner->stageUnits.size(); ++i)
      toml += (i ? ", \"" : "\"") + winner->stageUnits[i] + "\"";
    toml += "]";
  }
  std::printf("override: %s\n[train] lines:\n%s\n", line.c_str(), toml.c_str());
  llvm::sys::fs::create_directories(outDir.getValue());
  std::string dir = outDir;
  {
    std::ofstream(dir + "/override.txt") << line << "\n";
    std::ofstream csv(dir + "/tune.csv");
    csv << "rank,stages,stage_units,dp_pick,even,predicted_ms,measured_ms,noise_pct,error_pct,"
           "feasible,memory_bytes,micro_batches\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row &r = rows[i];
      std::string mem;
      for (const StageEstimate &e : r.cand.stages)
        mem += (mem.empty() ? "" : ";") + std::to_string((long long)e.memory);
      csv << i + 1 << "," << r.S << ",\"" << joinUnits(r.stageUnits) << "\"," << r.dpPick << ","
          << r.even << "," << r.sim.stepTime * 1e3 << ","
          << (r.measured ? std::to_string(r.measured->median * 1e3) : "") << ","
          << (r.measured ? std::to_string(100 * r.measured->noise) : "") << ","
          << (r.measured ? std::to_string(100 * (r.sim.stepTime - r.measured->median) /
                                          r.measured->median)
                         : "")
          << ",1," << mem << "," << r.m << "\n";
    }
    std::ofstream json(dir + "/tune.json");
    json << "{\n  \"config\": " << jsonString(configPath) << ",\n  \"schedule\": \""
         << (twoBW ? "2bw" : "flush") << "\",\n  \"micro_batches\": " << m
         << ",\n  \"device\": " << jsonString(deviceName) << ",\n  \"threads_per_stage\": "
         << int(threadsPerStage) << ",\n  \"winner\": {\"stages\": " << winner->S
         << ", \"stage_units\": [";
    for (size_t i = 0; i < winner->stageUnits.size(); ++i)
      json << (i ? ", " : "") << jsonString(winner->stageUnits[i]);
    json << "], \"override\": " << jsonString(unitsOverride(winner->stageUnits)) << "},\n"
         << "  \"candidates\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row &r = rows[i];
      json << "    {\"stages\": " << r.S << ", \"micro_batches\": " << r.m
           << ", \"stage_units\": " << jsonString(joinUnits(r.stageUnits))
           << ", \"dp_pick\": " << (r.dpPick ? "true" : "false")
           << ", \"even\": " << (r.even ? "true" : "false")
           << ", \"predicted_s\": " << r.sim.stepTime << ", \"objective_s\": " << r.cand.objective;
      if (r.measured) {
        json << ", \"measured_s\": " << r.measured->median << ", \"noise\": " << r.measured->noise
             << ", \"runs_s\": [";
        for (size_t k = 0; k < r.measured->runs.size(); ++k)
          json << (k ? ", " : "") << r.measured->runs[k];
        json << "]";
      }
      json << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
    }
    json << "  ]\n}\n";
    // The winner's schedule: two steps, one lane per stage.
    SimResult sim =
        simulate(winner->cand.stages, winner->m, 2, twoBW ? Sched::TwoBW : Sched::Flush);
    std::vector<std::string> lanes;
    for (int s = 0; s < winner->S; ++s)
      lanes.push_back("stage " + std::to_string(s) + ": " + winner->stageUnits[s]);
    std::string title = "stretto-tune " + llvm::sys::path::filename(configPath).str() + ": " +
                        joinUnits(winner->stageUnits) + ", " + (twoBW ? "2BW" : "1F1B flush") +
                        ", m=" + std::to_string(winner->m) + ", 2 steps (predicted)";
    std::ofstream(dir + "/timeline.svg") << timelineSvg(sim, lanes, title);
  }
  std::printf("wrote %s/{override.txt,tune.json,tune.csv,timeline.svg}\n", dir.c_str());
  return 0;
}
