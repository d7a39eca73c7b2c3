//===- UpdateChains.h - update kernels that can run as one (internal) ----===//
//
// The optimizer's update computes a parameter's new states with element-wise
// kernels that feed one another: AdamW's first-moment and second-moment
// kernels (each a state's new value) are read by the parameter's step
// kernel. Run one after the other, the step kernel reads back from memory
// what the moment kernels just wrote, and the gradient is read twice. A
// chain runs them element by element in one kernel instead (MultiTensor.h's
// chain kernels): each element's moments are computed, stored and used by
// the step at once.
//
// A chain is a consumer C (a multi-tensor element-wise kernel of the
// update) and its producers: the operands of C that are multi-tensor
// element-wise kernels of C's shape read only by C and by state writes.
// Producers run in node order, then C, each at an element's own index, so
// a chain computes what the kernels compute one by one. No MLIR here.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_UPDATECHAINS_H
#define STRETTO_RUNTIME_UPDATECHAINS_H

#include "stretto/Runtime/Graph.h"

#include <functional>
#include <string>
#include <vector>

namespace stretto::planning {

struct UpdateChain {
  std::vector<int> producers; // node indices, ascending
  int consumer = -1;
  /// The multi-tensor kernels of the producers then of the consumer,
  /// '|'-separated: chains with one signature run as one launch.
  std::string signature;
  std::vector<std::string> kernels; // those kernels, in that order
};

/// A chain's signature: its stages' multi kernels, '|'-separated.
std::string chainSignature(const std::vector<std::string> &kernels);

/// The chains of `update` (a graph's Update phase) where `keyOf(node)` is
/// the multi-tensor kernel an element-wise Kernel node runs in ("" for
/// none). A kernel is a producer of at most one chain and never also a
/// consumer.
std::vector<UpdateChain> findUpdateChains(const std::vector<Node> &update,
                                          const std::function<std::string(const Node &)> &keyOf);

} // namespace stretto::planning

#endif
