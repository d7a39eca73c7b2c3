//===- Emitter.h - kernel dialect to C++ and CUDA C -------------*- C++ -*-===//
//
// One emitter for both targets: the element function of a kernel is printed
// once (`KernelSource::body`) and each target adds only its prelude macros
// and launch wrapper.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_KERNEL_EMITTER_H
#define STRETTO_KERNEL_EMITTER_H

#include "stretto/Dialect/Kernel/KernelOps.h"
#include "stretto/KernelSource.h"

namespace stretto::kernel {

/// Sources of one kernel under the C symbol `name`. Emits an error at the op
/// and fails on what codegen does not support yet (bf16).
mlir::FailureOr<KernelSource> emitElementwise(ElementwiseOp op, llvm::StringRef name);

/// Every kernel.elementwise under `root`, in order, named
/// `<model>_<phase>_k<i>` (i counts per phase) when inside a train phase,
/// `kernel_k<i>` otherwise.
mlir::LogicalResult emitAllKernels(mlir::Operation *root, std::vector<KernelSource> &out);

} // namespace stretto::kernel

#endif
