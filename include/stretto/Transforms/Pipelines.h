//===- Pipelines.h - the training pass pipeline -----------------*- C++ -*-===//
#ifndef STRETTO_TRANSFORMS_PIPELINES_H
#define STRETTO_TRANSFORMS_PIPELINES_H

#include "stretto/Dialect/Train/TrainOps.h"

#include "mlir/Pass/PassManager.h"

namespace stretto {

/// What a trainer description asks of the pipeline passes.
struct TrainingPipelineOptions {
  int64_t stages = 1;     // > 1: train-partition
  bool twoBW = false;     // train-2bw (PipeDream-2BW, one-step delay)
  double efLambda = 0.0;  // > 0 (with 2BW): train-delay-ef
  bool bf16 = false;      // precision = "bf16": train-mixed-precision
  /// From the model's trainer dictionary: stages, sync = "2bw", ef_lambda,
  /// precision.
  static TrainingPipelineOptions fromTrainer(train::ModelOp model);
};

/// The passes that make a model-level description a complete training step:
/// [train-partition], train-autodiff, train-optimizer, [train-2bw,
/// train-delay-ef], then canonicalize and CSE, [train-mixed-precision] last
/// (it sees the whole step, its rounding points are not folded away).
void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const TrainingPipelineOptions &options = {});

} // namespace stretto

#endif
