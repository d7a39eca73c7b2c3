//===- TuneRuns.cpp - stretto-tune's builds, profile and measured runs ----===//
//
// Every build goes through buildTrainer, as stretto-train's; every run is
// the pipeline runtime's (runPipeline with pipelineOptionsFor's options, a
// thread per stage) or, with --runtime processes, `stretto-train --nproc S`,
// whose step times come back from the step driver's metrics.jsonl.
//
//===----------------------------------------------------------------------===//
#include "TunerInternals.h"

#include "stretto/Frontend/Load.h"
#include "stretto/Runtime/Launcher.h"
#include "stretto/Transforms/Passes.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

using mlir::MLIRContext;
using namespace stretto;
using namespace stretto::tune;
using namespace stretto::tune::internal;

namespace {

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

/// The options of a run of `b` on the pipeline runtime: the trainer's, as
/// runPlan would take them, with `steps` steps of `microBatches`.
PipelineOptions runOptions(const Built &b, const TuneOptions &o, int64_t steps,
                           int64_t microBatches) {
  RunSettings s = b.settings;
  s.steps = steps;
  s.microBatches = microBatches;
  TrainerOptions t = s.trainerOptions();
  t.kernels = b.trainer.kernels.functions;
  t.kernelThreads = o.threadsPerStage; // set on each stage's thread
  return pipelineOptionsFor(t, s.twoBW);
}

/// Weights, optimizer state, cut and stash bytes of each unit, from the
/// profiling build's graph.
void countBytes(const Graph &graph, Profile &p) {
  const int U = int(p.units.size());
  for (const StateDecl &d : graph.states) {
    if (d.stage < 0 || d.stage >= U)
      continue;
    double bytes = double(numElements(d.shape)) * dtypeBytes(d.dtype);
    (d.isParam ? p.units[d.stage].paramBytes : p.units[d.stage].optimizerBytes) += bytes;
  }
  // Forward transfers: what crosses each cut between their stages.
  for (const Node &n : graph.nodes)
    if (n.kind == OpKind::Transfer && n.ints.size() == 2 && n.ints[0] < n.ints[1])
      for (int64_t c = n.ints[0] + 1; c <= n.ints[1] && c < U; ++c)
        p.units[c].cutBytes += valueBytes(n);
  // Stashes: forward values (not parameter reads) that backward nodes use.
  for (const StagePlan &plan : planStages(graph)) {
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
}

/// Each step's end time (seconds since the run began) from a run's
/// metrics.jsonl, as the step driver writes it ("elapsed_s" per line).
std::vector<double> stepEndsOf(const std::string &metricsPath) {
  std::vector<double> ends;
  std::ifstream in(metricsPath);
  std::string line;
  const std::string key = "\"elapsed_s\": ";
  while (std::getline(in, line)) {
    size_t at = line.find(key);
    if (at != std::string::npos)
      ends.push_back(std::strtod(line.c_str() + at + key.size(), nullptr));
  }
  return ends;
}

/// Runs `args` with stdout captured; its exit status (-1: not started).
int runCaptured(std::vector<std::string> args, std::string &text) {
  std::vector<char *> cargv;
  for (std::string &a : args)
    cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int pipefd[2];
  if (::pipe(pipefd) != 0)
    return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_addclose(&fa, pipefd[0]);
  pid_t pid;
  int rc = posix_spawn(&pid, args[0].c_str(), &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    return -1;
  }
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;)
    text.append(buf, size_t(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// The end times of steps 1..N of a `stretto-train --nproc S` run, from the
/// metrics.jsonl its step driver writes into a scratch output folder.
std::optional<std::vector<double>> runProcesses(const TuneOptions &o, int S,
                                                const std::vector<std::string> &extra) {
  std::string out = o.outDir + "/run-" + std::to_string(::getpid());
  std::string train = o.trainPath;
  if (train.empty()) {
    std::string self = selfExecutable();
    train = self.substr(0, self.rfind('/') + 1) + "stretto-train";
  }
  std::vector<std::string> args = {train, o.configPath};
  args.insert(args.end(), o.overrides.begin(), o.overrides.end());
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--steps", std::to_string(std::max(3, o.measureSteps)),
                           "--log-interval", "1", "--nproc", std::to_string(S), "--out", out,
                           "train.eval_interval=1000000", "train.warmup_steps=0"});
  // The launcher keeps a given OMP_NUM_THREADS: the kernel threads per stage.
  ::setenv("OMP_NUM_THREADS", std::to_string(o.threadsPerStage).c_str(), 1);
  std::string text;
  int rc = runCaptured(args, text);
  std::vector<double> ends = stepEndsOf(out + "/metrics.jsonl");
  llvm::sys::fs::remove_directories(out);
  if (rc < 0) {
    llvm::errs() << "stretto-tune: error: cannot start " << train << "\n";
    return std::nullopt;
  }
  if (rc != 0) {
    llvm::errs() << "stretto-tune: error: the measured run `stretto-train ... --nproc " << S
                 << "` failed:\n"
                 << text << "\n";
    return std::nullopt;
  }
  if (ends.size() < 3) {
    llvm::errs() << "stretto-tune: error: no per-step times in the metrics.jsonl of "
                    "`stretto-train ... --nproc "
                 << S << "`:\n"
                 << text << "\n";
    return std::nullopt;
  }
  return ends;
}

/// A candidate being measured: built once, then run once per round.
struct Measurement {
  Built built;
  std::vector<std::string> extra;
  int S = 0;
  Measured m;
  std::vector<std::vector<double>> computeRuns;
};

std::optional<Measurement> prepareMeasurement(MLIRContext &ctx, const TuneOptions &o,
                                              const TuneRow &row) {
  Measurement r;
  r.S = row.S;
  // grad_clip = 0, as in the profile: the schedule model has no term for
  // clipping's all-reduce across stages, so the runs it is compared with
  // leave it out too (README, "Tuning a partition").
  r.extra = {"train.stages=" + std::to_string(row.S), "train.grad_clip=0",
             "train.micro_batches=" + std::to_string(row.m)};
  if (row.S > 1)
    r.extra.push_back(unitsOverride(row.stageUnits));
  std::optional<Built> b = buildCandidate(ctx, o, r.extra);
  if (!b)
    return std::nullopt;
  r.built = std::move(*b);
  return r;
}

/// One measured run: its median step time (from the end of step 1: step 1
/// warms up) is appended to m.runs unless `warmUp`. False on a failed run.
bool measureOnce(Measurement &x, const TuneOptions &o, bool warmUp) {
  Built &b = x.built;
  std::vector<double> at;
  if (o.runtime == "processes" && x.S > 1) {
    auto ends = runProcesses(o, x.S, x.extra);
    if (!ends)
      return false;
    at = *ends;
  } else {
    PipelineResult res = runPipeline(
        b.trainer.graph, *b.data,
        runOptions(b, o, std::max(3, o.measureSteps), b.settings.microBatches));
    at = res.stepEnds;
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

} // namespace

std::optional<Built> internal::buildCandidate(MLIRContext &ctx, const TuneOptions &o,
                                            const std::vector<std::string> &extra) {
  std::vector<std::string> sets = o.overrides;
  sets.insert(sets.end(), extra.begin(), extra.end());
  std::optional<LoadedModel> loaded = loadModel(ctx, o.configPath, sets);
  if (!loaded)
    return std::nullopt;
  llvm::StringRef sync = loaded->model.getTrainerString("sync", "sync");
  if (sync == "gossip" || sync == "diloco") {
    llvm::errs() << "stretto-tune: error: " << o.configPath
                 << ": sync = gossip/diloco has no pipeline stages to tune\n";
    return std::nullopt;
  }
  const std::string fingerprint = modelFingerprint(loaded->model);
  TrainerBuildOptions bo;
  bo.executorGiven = true; // the compiled runtime, or an error: no fallback
  bo.quiet = true;
  bo.tool = "stretto-tune: error";
  std::optional<TrainerBuild> tb = buildTrainer(ctx, *loaded, bo);
  if (!tb)
    return std::nullopt;
  Built b;
  b.settings = runSettingsOf(tb->model, o.configPath, fingerprint);
  b.trainer = std::move(*tb);
  b.kernelsKey = llvm::sys::path::stem(b.trainer.kernelsPath).str();
  // No validation and no files: a measured run times steps only.
  b.settings.evalInterval = 0;
  b.settings.evalBatches = 0;
  b.settings.flags.quiet = true;
  b.settings.tool = "stretto-tune";
  try {
    b.data = dataSourceFor(b.trainer.graph, b.settings);
  } catch (const std::exception &e) {
    llvm::errs() << "stretto-tune: error: " << e.what() << "\n";
    return std::nullopt;
  }
  return b;
}

std::optional<Built> internal::buildProfiling(MLIRContext &ctx, const TuneOptions &o,
                                            const std::vector<std::string> &units, int64_t mb) {
  std::vector<std::string> extra = {"train.micro_batches=" + std::to_string(mb),
                                    "train.grad_clip=0"};
  if (units.size() > 1) {
    extra.push_back("train.stages=" + std::to_string(units.size()));
    extra.push_back(unitsOverride(units));
  }
  return buildCandidate(ctx, o, extra);
}

std::optional<Profile> internal::measureProfile(Built &b, const TuneOptions &o,
                                              const std::vector<std::string> &units,
                                              const std::map<std::string, std::string> &key) {
  const int U = int(units.size());
  const int runs = std::max(1, o.profileRuns);
  std::vector<std::vector<double>> f(U), bw(U), up(U);
  for (int run = 0; run < runs; ++run) {
    PipelineResult r =
        runPipeline(b.trainer.graph, *b.data, runOptions(b, o, o.profileSteps, 1));
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
  p.steps = int64_t(o.profileSteps) * runs;
  p.units.resize(U);
  for (int u = 0; u < U; ++u) {
    p.units[u].name = units[u];
    p.units[u].forward = median(f[u]);
    p.units[u].backward = median(bw[u]);
    p.units[u].update = median(up[u]);
  }
  countBytes(b.trainer.graph, p);
  return p;
}

bool internal::measureRows(MLIRContext &ctx, const TuneOptions &o, std::vector<TuneRow> &rows,
                         const std::vector<size_t> &which) {
  // Built once, then run once per round, the candidates' runs interleaved
  // (round 1 of every candidate, then round 2, ...), so that a machine that
  // slows down for a while slows every candidate's run of that round alike
  // and the per-round ratios against the even split (pairedSpeedup) stay
  // steady.
  std::vector<Measurement> ms;
  try {
    for (size_t i : which) {
      std::optional<Measurement> x = prepareMeasurement(ctx, o, rows[i]);
      if (!x)
        return false;
      ms.push_back(std::move(*x));
    }
    // A warm-up run of each (not counted), then the rounds, interleaved.
    for (int rep = -1; rep < std::max(1, o.repeats); ++rep)
      for (Measurement &x : ms)
        if (!measureOnce(x, o, rep < 0))
          return false;
  } catch (const std::exception &e) {
    fail(std::string("a measured run failed: ") + e.what());
    return false;
  }
  for (size_t k = 0; k < which.size(); ++k)
    rows[which[k]].measured = finishMeasurement(ms[k]);
  return true;
}
