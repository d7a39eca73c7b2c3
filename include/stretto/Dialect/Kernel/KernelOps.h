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

#endif
