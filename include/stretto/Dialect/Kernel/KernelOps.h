//===- KernelOps.h - the `kernel` dialect and its ops -----------*- C++ -*-===//
#ifndef STRETTO_DIALECT_KERNEL_KERNELOPS_H
#define STRETTO_DIALECT_KERNEL_KERNELOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "Kernel/KernelDialect.h.inc"

#define GET_OP_CLASSES
#include "Kernel/KernelOps.h.inc"

namespace stretto::kernel {
/// Whether sorted `dims` are a leading or a trailing run of the non-unit
/// dims of `space` (the two loop nests kernel.reduce has); `trailing` says
/// which (trailing when both, e.g. every dim reduced).
bool isReducedRun(llvm::ArrayRef<int64_t> space, llvm::ArrayRef<int64_t> dims, bool &trailing);
} // namespace stretto::kernel

#endif
