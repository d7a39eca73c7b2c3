//===- Limits.h - size limits of models and runs ----------------*- C++ -*-===//
//
// What a config, an .mlir model or a plan may ask for. An absurd size is an
// error naming the key or op, not hours of IR building, int64 overflow in
// shapes, tensors no machine this targets can hold, or more threads than a
// process can start. Shared by the frontend, the dialect's verifier and the
// runtime's run checks (no MLIR here).
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_SUPPORT_LIMITS_H
#define STRETTO_SUPPORT_LIMITS_H

#include <cstdint>

namespace stretto {

/// Blocks of a GPT and hidden layers of an MLP (each expands into ops).
constexpr int64_t kMaxLayers = 1024;
/// Elements of any one parameter or activation tensor (2^31: int32-indexable).
constexpr int64_t kMaxTensorElements = int64_t(1) << 31;
/// Parameters of the whole model (2^36, about 69 G).
constexpr int64_t kMaxParameters = int64_t(1) << 36;
/// Pipeline stages and gossip replicas: each runs on a thread of its own.
constexpr int64_t kMaxStages = 1024;
constexpr int64_t kMaxReplicas = 1024;

} // namespace stretto

#endif
