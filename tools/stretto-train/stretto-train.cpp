//===- stretto-train.cpp - compile a model description and train it ------===//
//
//   stretto-train examples/gpt-tiny.toml
//   stretto-train examples/gpt-tiny.toml train.steps=50 --out runs/tiny
//   stretto-train model.mlir --dump dump/
//
// Parse, compile (stretto/Compiler/BuildTrainer.h), then runPlan
// (stretto/Runtime/RunSettings.h), or write the plan for stretto-run.
//
//===----------------------------------------------------------------------===//
#include "stretto/Compiler/BuildTrainer.h"
#include "stretto/Frontend/Import.h"
#include "stretto/Frontend/Load.h"
#include "stretto/Runtime/Flags.h"
#include "stretto/Runtime/Launcher.h"
#include "stretto/Runtime/PlanFile.h"
#include "stretto/Runtime/RunChecks.h"
#include "stretto/Runtime/RunSettings.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <map>
#include <memory>
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
// The compile-only flags (--dump, --save-plan, --cuda-arch) are rows of the
// flag table (stretto/Runtime/Flags.h); main makes their llvm::cl options.
static std::map<std::string, std::unique_ptr<cl::opt<std::string>>> compileOpts;
static std::string compileFlag(const char *name) { return *compileOpts.at(name); }
static void addCompileOptions() {
  for (const FlagSpec *f : compileFlags())
    compileOpts[f->name] = std::make_unique<cl::opt<std::string>>(
        llvm::StringRef(f->name + 2), cl::desc(f->help), cl::value_desc(f->value),
        cl::init(std::string(f->compileDefault)), cl::cat(cat));
}
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

The guide, docs/guide/README.md: configs and resume (training.md), pipelines
(pipelines.md), gossip and DiLoCo (gossip.md), --nproc (distributed.md),
--dump and --profile (inspecting.md).
)";

namespace {
int fail(const std::string &msg) {
  llvm::errs() << "stretto-train: " << msg << "\n";
  return 1;
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
/// program) on it, each with the run's flags. `rest`: the arguments but the
/// launcher's flags.
int launchTraining(LaunchOptions launch, const std::vector<std::string> &rest) {
  // Each flag goes where its row of the flag table says; the rest
  // (overrides) to the compile.
  std::vector<std::string> compile, run;
  for (size_t i = 0; i < rest.size(); ++i) {
    std::string a = rest[i], name = a.substr(0, a.find('='));
    bool inl = a.find('=') != std::string::npos && a.rfind("--", 0) == 0;
    if (name == "--save-plan")
      return fail("--save-plan compiles a plan for later; it does not combine with --nproc "
                  "(run the plan with `stretto-run PLAN --nproc N`: docs/guide/distributed.md)");
    const FlagSpec *spec = findFlag(name);
    std::vector<std::string> item = {a};
    if (!inl && spec && spec->takesValue() && i + 1 < rest.size())
      item.push_back(rest[++i]);
    bool toRun = spec && spec->goesTo != FlagSpec::Compile;
    bool toCompile = !spec || spec->goesTo != FlagSpec::Ranks;
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
      applyPeerFailureDefault(launch, plan);
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

namespace {

/// --save-plan: the trainer as a file for stretto-run (no MLIR there), after
/// the checks a run would make (but memory: the plan may run elsewhere).
int writePlan(const TrainerBuild &b, RunSettings s) {
  if (!s.flags.initFrom.empty())
    return fail("--init-from is a run setting, not part of a plan: pass it to stretto-run");
  if (b.executor != "compiled")
    return fail("--save-plan saves the compiled runtime's plan; it cannot be combined with "
                "the reference executor");
  TrainerOptions opt = s.trainerOptions();
  RunCheck check(b.graph, opt);
  check.stages = s.stages;
  check.replicas = s.replicas;
  check.sync = s.sync;
  if (!b.graph.outer.empty())
    check.gossip = &s.gossip;
  PlanFile pf;
  try {
    validateRunSettings(check);
    dataSourceFor(b.graph, s); // the data is there and fits the model
    llvm::SmallString<256> dataPath(s.data.path);
    if (!dataPath.empty())
      llvm::sys::fs::make_absolute(dataPath);
    s.data.path = std::string(dataPath);
    pf.graph = b.graph;
    pf.cppSource = b.kernels.cppSource;
    pf.cudaSource = b.kernels.cudaSource;
    pf.meta = s.toMeta();
    savePlanFile(compileFlag("--save-plan"), pf);
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  if (!s.flags.quiet)
    llvm::outs() << "wrote the trainer plan to " << compileFlag("--save-plan")
                 << " (run it with stretto-run " << compileFlag("--save-plan") << ")\n";
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // The launcher's flags, the run flags (shared with stretto-run), then the
  // compiler's.
  LaunchOptions launch;
  RunFlags flags;
  std::vector<std::string> args;
  try {
    args = takeLaunchFlags(std::vector<std::string>(argv + 1, argv + argc), launch);
    if (launch.nproc > 1 || launch.nnodes > 1)
      return launchTraining(launch, args);
    args = takeRunFlags(args, flags);
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  std::vector<char *> clArgv = {argv[0]};
  for (std::string &a : args)
    clArgv.push_back(a.data());
  addCompileOptions();
  std::string overview = std::string(kOverview) + "\n" + runFlagsHelp();
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(int(clArgv.size()), clArgv.data(), overview);

  MLIRContext ctx;
  auto diagnostics = printDiagnostics(ctx);
  std::vector<std::string> sets(overrides.begin(), overrides.end());
  if (flags.steps > 0) // before compiling: the learning-rate schedule depends on it
    sets.push_back(overrideFromFlag("train.steps=" + std::to_string(flags.steps),
                                    "--steps " + std::to_string(flags.steps)));
  // --precision bf16 compiles the step with bf16 storage (train-mixed-precision).
  if (flags.precision == "bf16")
    sets.push_back(overrideFromFlag("train.precision=bf16", "--precision bf16"));
  std::optional<LoadedModel> loaded = loadModel(ctx, modelPath, sets);
  if (!loaded)
    return 1;
  // The model as described (before any pass): what a checkpoint records.
  const std::string fingerprint = modelFingerprint(loaded->model);
  TrainerBuildOptions bo;
  bo.executor = flags.executor;
  bo.executorGiven = flags.executorGiven;
  bo.precision = flags.precision;
  bo.dumpDir = compileFlag("--dump");
  bo.cudaArch = compileFlag("--cuda-arch");
  bo.quiet = flags.quiet;
  std::optional<TrainerBuild> b = buildTrainer(ctx, *loaded, bo);
  if (!b)
    return 1;
  RunSettings s = runSettingsOf(b->model, modelPath, fingerprint);
  flags.executor = b->executor;
  s.apply(flags);
  s.tool = "stretto-train";
  if (!compileFlag("--save-plan").empty())
    return writePlan(*b, s);
  std::unique_ptr<DataSource> source;
  try {
    source = dataSourceFor(b->graph, s);
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  if (!flags.quiet) {
    int64_t params = 0;
    for (const StateDecl &d : b->graph.states)
      if (d.isParam)
        params += numElements(d.shape);
    llvm::outs() << "model @" << s.modelName << ": " << params << " parameters, "
                 << b->graph.nodes.size() << " ops per step; optimizer " << s.optimizer << "\n";
    llvm::outs().flush();
  }
  return runPlan(b->graph, *source, s, b->kernels);
}
