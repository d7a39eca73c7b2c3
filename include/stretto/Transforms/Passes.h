//===- Passes.h - Stretto's passes ------------------------------*- C++ -*-===//
#ifndef STRETTO_TRANSFORMS_PASSES_H
#define STRETTO_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"
#include "stretto/Dialect/Train/TrainOps.h"

namespace stretto::train {

#define GEN_PASS_DECL
#include "Train/TrainPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "Train/TrainPasses.h.inc"

} // namespace stretto::train

#endif
