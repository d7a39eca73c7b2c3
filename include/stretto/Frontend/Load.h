//===- Load.h - load a model from a config or an .mlir file -----*- C++ -*-===//
#ifndef STRETTO_FRONTEND_LOAD_H
#define STRETTO_FRONTEND_LOAD_H

#include "stretto/Dialect/Train/TrainOps.h"
#include "stretto/Runtime/Trainer.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OwningOpRef.h"

#include <memory>
#include <string>
#include <vector>

namespace stretto {

/// Prints diagnostics as "FILE:LINE:COL: error: MESSAGE" while alive.
std::unique_ptr<mlir::ScopedDiagnosticHandler> printDiagnostics(mlir::MLIRContext &ctx);

struct LoadedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  train::ModelOp model;
};

/// Loads `path`: a TOML config (expanded by the importer, `overrides` applied)
/// or an `.mlir` file holding one `train.model` (`train.KEY=VALUE` overrides
/// set trainer keys; `train.steps` sets total_steps; the size limits of
/// configs apply). On failure the error has been printed (naming the
/// override when one caused it) and the result is empty.
std::optional<LoadedModel> loadModel(mlir::MLIRContext &ctx, const std::string &path,
                                     const std::vector<std::string> &overrides);

/// A fingerprint of the model as described: its parameters and step, not
/// its trainer or data settings (which a resumed run may change) nor
/// source locations. Checkpoints record it (TrainerOptions::modelFingerprint).
std::string modelFingerprint(train::ModelOp model);

/// Checks an .mlir model against the size limits TOML configs have
/// (Limits.h): elements per tensor, parameters in all. Errors are emitted
/// at the op that is too large.
mlir::LogicalResult checkModelSizes(train::ModelOp model);

/// The data section of a loaded model (format, path relative to the model
/// file, validation fraction); `vocabOrClasses` gets the model's id range.
DataConfig dataConfigOf(train::ModelOp model, const std::string &modelPath,
                        int64_t &vocabOrClasses);

} // namespace stretto

#endif
