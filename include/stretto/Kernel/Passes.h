//===- Passes.h - passes that produce `kernel` IR ---------------*- C++ -*-===//
#ifndef STRETTO_KERNEL_PASSES_H
#define STRETTO_KERNEL_PASSES_H

#include "mlir/Pass/Pass.h"
#include "stretto/Dialect/Kernel/KernelOps.h"
#include "stretto/Dialect/Train/TrainOps.h"

namespace stretto::kernel {

#define GEN_PASS_DECL
#include "Kernel/KernelPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "Kernel/KernelPasses.h.inc"

} // namespace stretto::kernel

#endif
