//===- stretto-tune.cpp - autotune a pipeline's stage partition ----------===//
//
//   stretto-tune examples/gpt-wide-head.toml --stages 2
//   stretto-tune CONFIG --stages auto --top 3 --memory-limit 2GiB --out tune/
//   stretto-tune CONFIG --stages 2 --profile recorded.profile --no-measure
//
// The flags into TuneOptions, then stretto/Tune/Tuner.h: tune, report, write.
//===----------------------------------------------------------------------===//
#include "stretto/Frontend/Load.h"
#include "stretto/Tune/Tuner.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"

#include <cstdio>

namespace cl = llvm::cl;
using namespace stretto;

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
                                         "the even split"), cl::init(2), cl::cat(cat));
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

static const char *const kOverview =
    "stretto-tune: profile a model's partition units, search stage partitions (DP under "
    "memory limits), simulate and measure the best, write the winner\n\n"
    "  stretto-tune examples/gpt-wide-head.toml --stages 2\n\n"
    "How it works and how to read its report: docs/guide/tuning.md\n";

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(argc, argv, kOverview);
  mlir::MLIRContext ctx;
  auto diagnostics = printDiagnostics(ctx);
  tune::TuneOptions o;
  o.configPath = configPath;
  o.overrides.assign(overrides.begin(), overrides.end());
  o.stages = stagesOpt;
  o.top = topK;
  o.measureSteps = measureSteps;
  o.repeats = repeats;
  o.profileSteps = profileSteps;
  o.profileRuns = profileRuns;
  o.threadsPerStage = threadsPerStage;
  o.memoryLimit = memoryLimitOpt;
  o.linkLatency = linkLatency;
  o.linkBandwidth = linkBandwidth;
  o.profilePath = profilePath;
  o.saveProfilePath = saveProfilePath;
  o.noMeasure = noMeasure;
  o.noCache = noCache;
  o.microBatches.assign(microBatchesOpt.begin(), microBatchesOpt.end());
  o.runtime = runtimeOpt;
  o.outDir = outDir;
  std::optional<tune::TuneResult> result = tune::tunePartition(ctx, o);
  if (!result) // the error is printed
    return 1;
  tune::printTuneReport(*result);
  tune::writeTuneReports(*result, o.outDir);
  std::printf("wrote %s/{override.txt,tune.json,tune.csv,timeline.svg}\n", o.outDir.c_str());
  return 0;
}
