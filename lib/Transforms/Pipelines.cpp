//===- Pipelines.cpp - the training pass pipeline -------------------------===//
//
// Which passes a trainer description needs, in order. The kernel-level
// pipeline (fusion, lowering to kernels) is buildKernelPipeline in
// lib/Kernel/Compile.cpp.
//
//===----------------------------------------------------------------------===//

#include "stretto/Transforms/Pipelines.h"
#include "stretto/Transforms/Passes.h"

#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace stretto;
using namespace stretto::train;

TrainingPipelineOptions TrainingPipelineOptions::fromTrainer(ModelOp model) {
  TrainingPipelineOptions o;
  o.stages = model.getTrainerInt("stages", 1);
  o.twoBW = model.getTrainerString("sync", "sync") == "2bw";
  o.efLambda = model.getTrainerFloat("ef_lambda", 0.0);
  o.bf16 = model.getTrainerString("precision", "f32") == "bf16";
  return o;
}

void stretto::buildTrainingPipeline(OpPassManager &pm, const TrainingPipelineOptions &o) {
  OpPassManager &model = pm.nest<ModelOp>();
  if (o.stages > 1)
    model.addPass(train::createTrainPartition());
  model.addPass(train::createTrainAutodiff());
  model.addPass(train::createTrainOptimizer());
  if (o.twoBW)
    model.addPass(train::createTrainTwoBufferWeights());
  if (o.twoBW && o.efLambda > 0)
    model.addPass(train::createTrainDelayErrorFeedback());
  model.addPass(createCanonicalizerPass());
  model.addPass(createCSEPass());
  if (o.bf16)
    model.addPass(train::createTrainMixedPrecision());
  model.addPass(train::createTrainBatchNewtonSchulz());
}
