//===- Compile.h - compile a model's fused kernels for the CPU ---*- C++ -*-===//
#ifndef STRETTO_KERNEL_COMPILE_H
#define STRETTO_KERNEL_COMPILE_H

#include "stretto/Dialect/Train/TrainOps.h"
#include "stretto/Runtime/HostJit.h"
#include "stretto/Runtime/RefExecutor.h"

#include "mlir/Pass/PassManager.h"

#include <map>
#include <string>

namespace stretto {

/// Which of the kernel pipeline's optional passes run.
struct KernelPipelineOptions {
  /// kernel-attention-layout: attention reads its heads in place (off: the
  /// head transposes stay, as tests compare).
  bool attentionLayout = true;
};

/// The kernel-level passes of the compiled path: GEMMs to kernel.gemm,
/// elementwise fusion, bf16 storage, GEMM epilogues, attention's layout.
/// Appended after buildTrainingPipeline's passes.
void buildKernelPipeline(mlir::OpPassManager &pm, const KernelPipelineOptions &options = {});

struct CompiledKernels {
  std::map<std::string, RefExecutor::KernelFn> functions;
  std::string sourcePath; // the cached translation unit, for errors
  std::string cppSource;  // that translation unit (--dump: kernels.cpp)
  std::string cudaSource; // the same kernels as CUDA C (--dump: kernels.cu)
};

/// Names every kernel.elementwise of `model` (attribute `symbol`), emits
/// their C++ sources as one translation unit and compiles it through
/// `cache` (or takes it from there). Errors go to the op / `error`.
mlir::FailureOr<CompiledKernels> compileKernels(train::ModelOp model, HostKernelCache &cache,
                                                std::string &error);

} // namespace stretto

#endif
