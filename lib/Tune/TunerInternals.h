//===- TunerInternals.h - shared by Tuner.cpp, TuneRuns.cpp, TuneReport.cpp ===//
#ifndef STRETTO_LIB_TUNE_TUNERINTERNALS_H
#define STRETTO_LIB_TUNE_TUNERINTERNALS_H

#include "stretto/Compiler/BuildTrainer.h"
#include "stretto/Runtime/Pipeline.h"
#include "stretto/Runtime/RunSettings.h"
#include "stretto/Tune/Profile.h"
#include "stretto/Tune/Tuner.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace stretto::tune::internal {

/// Prints "stretto-tune: error: <msg>" (after flushing stdout) and returns 1.
int fail(const std::string &msg);

/// Milliseconds with two decimals.
std::string ms(double seconds);
std::string joinUnits(const std::vector<std::string> &v);
/// "train.stage_units=[\"a..b\",\"c\"]".
std::string unitsOverride(const std::vector<std::string> &stageUnits);
/// "first..last" (or "unit") for each stage of `bounds`.
std::vector<std::string> stageUnitsOf(const std::vector<std::string> &units,
                                      const std::vector<int> &bounds);

/// A training step of the config compiled as stretto-train compiles it
/// (buildTrainer), its run settings and data, ready for the runtime.
struct Built {
  TrainerBuild trainer;
  RunSettings settings;
  std::unique_ptr<DataSource> data;
  std::string kernelsKey; // the compiled kernels' cache entry
};

/// The config with the tool's overrides and `extra`, compiled. Errors are
/// printed; the result is then empty.
std::optional<Built> buildCandidate(mlir::MLIRContext &ctx, const TuneOptions &o,
                                    const std::vector<std::string> &extra);

/// The profiling build: every unit its own stage, micro-batch shape of `mb`.
std::optional<Built> buildProfiling(mlir::MLIRContext &ctx, const TuneOptions &o,
                                    const std::vector<std::string> &units, int64_t mb);

/// Per-unit costs from the profiling build, one micro-batch per step (one
/// stage works at a time; the updates of neighbouring stages may overlap).
std::optional<Profile> measureProfile(Built &b, const TuneOptions &o,
                                      const std::vector<std::string> &units,
                                      const std::map<std::string, std::string> &key);

/// Builds each row of `which` and runs them in interleaved rounds (a
/// warm-up run each first); their Measured into rows. False after an error.
bool measureRows(mlir::MLIRContext &ctx, const TuneOptions &o, std::vector<TuneRow> &rows,
                 const std::vector<size_t> &which);

} // namespace stretto::tune::internal

#endif // STRETTO_LIB_TUNE_TUNERINTERNALS_H
