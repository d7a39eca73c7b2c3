//===- BuildTrainer.h - a model description into a runnable trainer -*- C++ -*-===//
//
// stretto-train's compile half: the training pass pipeline (and the gossip
// pass), the kernel passes and the host compiler, the lowering to a Graph,
// the fallbacks to the reference executor, --dump, and the run settings of
// the model's trainer keys. What it returns runs with runPlan or is written
// as a plan file for stretto-run.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_COMPILER_BUILDTRAINER_H
#define STRETTO_COMPILER_BUILDTRAINER_H

#include "stretto/Frontend/Load.h"
#include "stretto/Runtime/Graph.h"
#include "stretto/Runtime/RunSettings.h"

#include "mlir/IR/MLIRContext.h"

#include <optional>
#include <string>

namespace stretto {

struct TrainerBuild {
  Graph graph;
  PlanKernels kernels; // empty functions: the reference executor runs the graph
  std::string executor; // what runs it after the fallbacks: compiled | reference
  std::string kernelsPath; // the compiled kernels' cache entry (compiled path)
  train::ModelOp model; // the model the graph was lowered from
  mlir::OwningOpRef<mlir::ModuleOp> kernelModule; // owns `model` on the compiled path
};

struct TrainerBuildOptions {
  std::string executor = "compiled";
  bool executorGiven = false; // an explicit --executor: no silent fallback
  std::string precision = "f32";
  std::string dumpDir;        // --dump: the IR after every pass, graph, kernels
  std::string cudaArch = "sm_90";
  bool quiet = false;
  std::string tool = "stretto-train"; // what errors are prefixed with
};

/// Compiles `loaded` into a trainer. Where the compiled runtime does not
/// apply, the default falls back to the reference executor with a note and
/// an explicit --executor=compiled is an error. Errors are printed
/// ("<tool>: ..."); the result is then empty.
std::optional<TrainerBuild> buildTrainer(mlir::MLIRContext &ctx, LoadedModel &loaded,
                                         const TrainerBuildOptions &options);

/// The run settings of the model's trainer keys (a model as loaded from
/// `modelPath`: its data file is relative to it).
RunSettings runSettingsOf(train::ModelOp model, const std::string &modelPath,
                          const std::string &fingerprint);

} // namespace stretto

#endif // STRETTO_COMPILER_BUILDTRAINER_H
