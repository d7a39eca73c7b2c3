//===- Tuner.h - stretto-tune's search as a library -------------*- C++ -*-===//
//
// The autotuner of a pipeline's stage partition, behind tools/stretto-tune:
//
// 1. Profile: the model compiled (buildTrainer, as stretto-train compiles
//    it) with every partition unit (embed, each block, head) as its own
//    stage, run on the pipeline runtime with one micro-batch per step, so
//    one stage works at a time: each stage's mean forward, backward and
//    update time (the runtime's StageReport) is its unit's. Bytes come from
//    the lowered graph: weights, optimizer state, the activations a unit
//    stashes between forward and backward, and what crosses each cut.
//    Profiles are cached (stretto/Tune/Profile.h).
// 2. Search: the DP of stretto/Tune/Partition.h for the config's schedule
//    (1F1B flush, or 2BW with sync = "2bw") and micro-batches, under a
//    memory limit per stage, with sends over a link model; every partition
//    is also evaluated (when there are few) for the candidate table, and
//    the simulator predicts each one's step time.
// 3. Measure: the best k candidates and the even split run a few steps,
//    compiled by buildTrainer, on the pipeline runtime in this process (a
//    thread per stage, options from pipelineOptionsFor) or as `stretto-train
//    --nproc S`; step times are the step driver's (PipelineResult::stepEnds,
//    or the run's metrics.jsonl), in interleaved rounds (one run of every
//    candidate per round, after one warm-up run each).
// 4. The winner (pickWinner), printed as a table and written as a config
//    override, tune.json, tune.csv and an SVG timeline of its schedule.
//
// tunePartition() prints its progress (the profile, what it measures) on stdout and
// its errors on stderr ("stretto-tune: error: ...").
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_TUNE_TUNER_H
#define STRETTO_TUNE_TUNER_H

#include "stretto/Tune/Partition.h"

#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stretto::tune {

/// stretto-tune's flags (defaults as documented in docs/guide/tuning.md).
struct TuneOptions {
  std::string configPath;
  std::vector<std::string> overrides; // section.key=value
  std::string stages = "2";           // a stage count, or "auto"
  int top = 2, measureSteps = 8, repeats = 3, profileSteps = 6, profileRuns = 3;
  int threadsPerStage = 1;
  std::string memoryLimit; // bytes with a suffix; "": the RAM divided by the stages
  double linkLatency = 2e-5, linkBandwidth = 4e9;
  std::string profilePath, saveProfilePath; // a recorded profile to use / to write
  bool noMeasure = false, noCache = false;
  std::vector<int64_t> microBatches; // also search these; empty: the config's
  std::string runtime = "threads";   // threads | processes
  std::string outDir = "tune";       // the reports; --runtime processes runs under it
  std::string trainPath; // stretto-train, for --runtime processes; "": beside this program
  std::string cacheDir;              // profiles; "": tuneCacheDirectory()
};

/// $STRETTO_CACHE_DIR/tune, else ~/.cache/stretto/tune.
std::string tuneCacheDirectory();

/// A candidate's measured runs.
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

/// One candidate partition of the table.
struct TuneRow {
  int S = 0;
  int64_t m = 1; // micro-batches
  Candidate cand;
  SimResult sim;
  std::vector<std::string> stageUnits;
  bool dpPick = false, even = false;
  std::optional<Measured> measured;
};

struct TuneResult {
  std::string configPath, device;
  bool twoBW = false, autoStages = false, manyM = false;
  int64_t microBatches = 1; // the config's
  int64_t baseM = 1;        // the even split's that speedups compare with
  int threadsPerStage = 1;
  std::vector<TuneRow> rows; // by predicted step time
  std::vector<std::string> infeasible;
  double otherShare = 0; // other processes' share of the CPU while measuring
  Pick pick;             // rows[pick.index] wins
  const TuneRow &winner() const { return rows[pick.index]; }
};

/// Profiles (or reads the profile), searches, measures and picks the
/// winner. Errors are printed; the result is then empty.
std::optional<TuneResult> tunePartition(mlir::MLIRContext &ctx, const TuneOptions &options);

/// The table, its notes, the DP pick, the winner and the override lines.
void printTuneReport(const TuneResult &result);
/// The winner as override.txt, and tune.json, tune.csv, timeline.svg in `dir`.
void writeTuneReports(const TuneResult &result, const std::string &dir);
/// The winner as command-line overrides ("train.stages=2 'train.stage_units=[...]'").
std::string overrideLine(const TuneResult &result);

/// The speedup of `x` over `even` round by round (their runs were
/// interleaved): the median of the per-round ratios, and their noise (half
/// the range of the ratios, relative to the median).
std::pair<double, double> pairedSpeedup(const Measured &x, const Measured &even);

} // namespace stretto::tune

#endif // STRETTO_TUNE_TUNER_H
