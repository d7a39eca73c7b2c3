//===- stretto-opt.cpp - MlirOptMain with Stretto's dialects and passes ---===//
#include "stretto/Kernel/Passes.h"
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<stretto::train::TrainDialect>();
  registry.insert<stretto::kernel::KernelDialect>();
  stretto::train::registerTrainPasses();
  stretto::kernel::registerKernelPasses();
  // Upstream passes useful on `train` IR.
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Stretto optimizer driver\n", registry));
}
