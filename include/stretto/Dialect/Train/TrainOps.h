//===- TrainOps.h - ops of the `train` dialect -------------------*- C++ -*-===//
#ifndef STRETTO_DIALECT_TRAIN_TRAINOPS_H
#define STRETTO_DIALECT_TRAIN_TRAINOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "stretto/Dialect/Train/TrainDialect.h"
#include "Train/TrainEnums.h.inc"
#include "Train/TrainInterfaces.h.inc"

namespace stretto::train {
class StepOp;

/// Result type of NumPy broadcasting of two ranked tensors (element type of
/// `lhs`). Assumes they are compatible; verifiers report when they are not.
mlir::Type broadcastResultType(mlir::Type lhs, mlir::Type rhs);
/// Whether `from` broadcasts to `to` under NumPy rules.
bool isBroadcastableTo(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to);

mlir::ParseResult parseBinaryOp(mlir::OpAsmParser &p, mlir::OperationState &st);
void printBinaryOp(mlir::OpAsmPrinter &p, mlir::Operation *op);
mlir::LogicalResult verifyBinaryOp(mlir::Operation *op);
} // namespace stretto::train

#define GET_OP_CLASSES
#include "Train/TrainOps.h.inc"

#endif
