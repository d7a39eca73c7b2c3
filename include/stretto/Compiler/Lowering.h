//===- Lowering.h - from `train` IR to the MLIR-free Graph ------*- C++ -*-===//
#ifndef STRETTO_COMPILER_LOWERING_H
#define STRETTO_COMPILER_LOWERING_H

#include "stretto/Dialect/Train/TrainOps.h"
#include "stretto/Runtime/Graph.h"


namespace stretto {

/// Translates a verified `train.model` into a Graph, op by op (same names,
/// same semantics). Emits an error at the op and fails on anything else.
mlir::FailureOr<Graph> lowerToGraph(train::ModelOp model);

} // namespace stretto

#endif
