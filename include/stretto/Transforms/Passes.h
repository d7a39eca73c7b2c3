//===- Passes.h - Stretto's passes ------------------------------*- C++ -*-===//
#ifndef STRETTO_TRANSFORMS_PASSES_H
#define STRETTO_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"
#include "stretto/Dialect/Train/TrainOps.h"

#include <string>
#include <vector>

namespace stretto::train {

#define GEN_PASS_DECL
#include "Train/TrainPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "Train/TrainPasses.h.inc"

/// The pipeline stage an op or variable belongs to (`stage` attribute, set by
/// train-partition and inherited by the ops later passes derive from it), or
/// -1 when it has none (constants and scalars every stage computes).
int64_t getStage(mlir::Operation *op);
void setStage(mlir::Operation *op, int64_t stage);
/// Tags every op in (after, before) that has no stage yet with `stage`;
/// `after` null means from the block start.
void tagStages(mlir::Operation *after, mlir::Operation *before, int64_t stage);

/// The partition units of a model-level description, in order: "embed"
/// (when it has unlayered embedding parameters), "block<l>" for every layer,
/// "head" (when it has other unlayered parameters: final norm, head). Empty
/// when no parameter has a layer. `stage_units` and train-partition's
/// `units` option name these.
std::vector<std::string> partitionUnits(ModelOp model);

} // namespace stretto::train

#endif
