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
#include "stretto/Runtime/KernelSource.h"

namespace stretto::kernel {

/// Sources of one kernel under the C symbol `name`. Emits an error at the op
/// and fails on what codegen does not support yet (bf16).
mlir::FailureOr<KernelSource> emitElementwise(ElementwiseOp op, llvm::StringRef name);

/// Every kernel.elementwise under `root`, in order, named
/// `<model>_<phase>_k<i>` (i counts per phase) when inside a train phase,
/// `kernel_k<i>` otherwise.
mlir::FailureOr<KernelSource> emitReduce(ReduceOp op, llvm::StringRef name);

mlir::FailureOr<KernelSource> emitRows(RowsOp op, llvm::StringRef name);

/// emitElementwise, emitReduce or emitRows.
mlir::FailureOr<KernelSource> emitKernel(mlir::Operation *op, llvm::StringRef name);

/// Many kernels' sources as one translation unit with the shared prelude
/// (target macros, KernelMath.inc) once, not once per kernel (gpt-small:
/// 712 copies in each unit made 22 MB of a 30 MB plan file). The C++ unit
/// is the prelude, then each kernel after an "#include <math.h>" line,
/// where hostKernelSubset cuts it (keeping the prelude, which names no
/// kernel).
std::string joinCppSources(const std::vector<KernelSource> &kernels);
std::string joinCudaSources(const std::vector<KernelSource> &kernels);

/// Whether every broadcast (non-scalar, not same-shape) input is, along dims
/// [firstDim, rank) of `space` (unit dims aside), either contiguous or
/// constant: then a C++ loop over those dims has unit-stride or invariant
/// loads. kernel-fuse-reductions only forms reductions that pass this.
/// Whether `v` lives in bf16: a store_bf16 kernel's or GEMM's result, or a
/// reshape or transpose of one (kernel-bf16-storage), or the dx rows of a
/// train.norm_grad with kernel.store_bf16 (kernel-norm-grad-epilogue).
/// Kernels read such an operand through the prelude's ST_LOAD_BF16.
bool storedInBf16(mlir::Value v);
/// Every reader of `v` (through reshapes) is a fused kernel that rounds it
/// to bf16 before anything else: storing v rounded changes no value
/// (kernel-bf16-storage's rule for a GEMM's result).
bool roundedFirstByEveryReader(mlir::Value v);
/// The discardable unit attribute kernel-bf16-storage sets on a
/// train.attention or train.attention_grad whose rounding kernel it folded
/// in: the result is rounded to bf16 and stored as a store_bf16 value is.
inline constexpr const char *kStoreBf16Attr = "kernel.store_bf16";
/// Whether two ops are on one pipeline stage (the same "stage" attribute,
/// or none): the kernel passes fold ops of one stage only.
inline bool sameStage(mlir::Operation *a, mlir::Operation *b) {
  return a->getAttr("stage") == b->getAttr("stage");
}

bool uniformInnerRun(llvm::ArrayRef<std::vector<int64_t>> inputShapes,
                     llvm::ArrayRef<int64_t> space, size_t firstDim);

mlir::LogicalResult emitAllKernels(mlir::Operation *root, std::vector<KernelSource> &out);

} // namespace stretto::kernel

#endif
