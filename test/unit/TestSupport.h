//===- TestSupport.h - MLIR text to a lowered Graph, for unit tests -*- C++ -*-===//
//
// Parses `train` IR (or takes an imported module), optionally runs passes on
// every train.model, and lowers the (single) model to the MLIR-free Graph the
// reference executor runs. Diagnostics are captured so a failing test shows
// what MLIR said.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_TEST_UNIT_TESTSUPPORT_H
#define STRETTO_TEST_UNIT_TESTSUPPORT_H

#include "stretto/Runtime/Graph.h"
#include "stretto/Runtime/Trainer.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace stretto::test {

/// Adds passes to a module-level pass manager.
using PipelineFn = std::function<void(mlir::PassManager &)>;

/// No passes: lower the model as written.
PipelineFn noPasses();
/// Only `train-autodiff` (nested on train.model).
PipelineFn autodiffOnly();
/// `train-autodiff`, then canonicalize and cse (the folders must keep the
/// gradients exact).
PipelineFn autodiffCanonicalized();
/// buildTrainingPipeline: autodiff, optimizer, canonicalize, cse.
PipelineFn trainingPipeline();
/// A textual pipeline nested on train.model, e.g.
/// "train-partition,train-autodiff,train-optimizer,train-2bw".
PipelineFn modelPasses(const std::string &passes);

struct Compiled {
  bool ok = false;
  Graph graph;
  std::string diagnostics; // everything MLIR reported, one per line
  std::string ir;          // the module after the passes (for messages)
};

/// A context with the train dialect loaded.
void prepareContext(mlir::MLIRContext &ctx);

/// Parses `source`, runs `pipeline`, lowers the first train.model.
Compiled compile(const std::string &source, const PipelineFn &pipeline = noPasses());

/// Same from a module built elsewhere (e.g. by the TOML importer) in `ctx`.
Compiled compileModule(mlir::ModuleOp module, const PipelineFn &pipeline);

/// Imports a TOML config (with `section.key=value` overrides), runs
/// `pipeline` and lowers the model; the graph, or a failed test naming why.
Graph compileConfig(const std::string &toml, const PipelineFn &pipeline,
                    const std::vector<std::string> &overrides = {});

/// A small MLP on synthetic data (AdamW, 40 steps, evaluation every 20): the
/// trainer tests' model.
extern const char *const kSmallMlp;

/// A fresh folder under the system's temporary directory, removed with
/// everything in it when the object goes.
struct TempDir {
  std::filesystem::path path;
  TempDir();
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  std::string operator/(const std::string &file) const { return (path / file).string(); }
};

/// Trainer options for tests: `steps` steps, quiet, an evaluation every 20
/// steps on 2 batches, output to `out` (none when empty).
TrainerOptions quietTrainerOptions(int64_t steps, const std::string &out = "");

} // namespace stretto::test

#endif
