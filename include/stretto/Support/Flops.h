//===- Flops.h - the FLOPs of attention's products --------------*- C++ -*-===//
//
// One count of the multiply-adds in attention and its backward, used by the
// partition cost model (lib/Transforms/Partition.cpp), the compiled
// runtime's profile (PlanExecutor) and the benchmark's model FLOPs
// (bench/TrainBench.cpp). Every product is counted in full, as if no
// causal block were skipped: a model's FLOPs do not depend on how a
// runtime computes them. (No MLIR here.)
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_SUPPORT_FLOPS_H
#define STRETTO_SUPPORT_FLOPS_H

namespace stretto {

/// attention over `blocks` (batch x head) blocks of tq queries and tk keys,
/// d features in Q and K and dv in V: Q Kᵀ (2·tq·tk·d) and P V (2·tq·tk·dv).
inline double attentionFlops(double blocks, double tq, double tk, double d, double dv) {
  return 2.0 * blocks * tq * tk * (d + dv);
}

/// attention_grad over `blocks` blocks of t queries and keys and d
/// features: Q Kᵀ (P recomputed), G Vᵀ, Pᵀ G, dS K and dSᵀ Q, 2·t·t·d each.
inline double attentionGradFlops(double blocks, double t, double d) {
  return 10.0 * blocks * t * t * d;
}

} // namespace stretto

#endif
