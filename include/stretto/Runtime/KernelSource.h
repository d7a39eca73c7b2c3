//===- KernelSource.h - generated kernel sources (no MLIR) ------*- C++ -*-===//
//
// What codegen hands to the runtime: one fused kernel as text for both
// targets. `body` is the element function both sources contain verbatim, so
// the body a CPU test runs is the body a GPU runs.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_KERNELSOURCE_H
#define STRETTO_KERNELSOURCE_H

#include <cstdint>
#include <string>
#include <vector>

namespace stretto {

struct KernelSource {
  std::string name;      // C symbol of both entry points
  std::string dtype;     // C type of every element: "float" or "double"
  std::string kind;      // "elementwise", "row-sum"/"column-sum" (kernel.reduce), "rows"
  int64_t numElements = 0;                  // of each result
  std::vector<std::vector<int64_t>> inputShapes;
  std::vector<int64_t> resultShape;
  std::vector<int64_t> iterationShape; // = resultShape, or a kernel.reduce's space
  int numResults = 0;
  std::string body;      // shared element function (target-neutral text)
  // C++: extern "C" void name(const void *const *inputs, void *const *outputs)
  std::string cpp;
  // CUDA C: extern "C" __global__ void name(const T *in0, ..., T *out0, ...):
  // elementwise, a grid-stride loop over numElements (any grid; eight
  // consecutive elements a thread a step in 16-byte words where the
  // operands at the element's index are 16-byte aligned; then the rest,
  // one a thread a step); row sums, a block per
  // row (blockDim.x a multiple of 32), and NAME_parts(in0, ..., T *partials)
  // splitting each row over gridDim.x / rows blocks (exactly rows x parts
  // blocks; one partial sum each, in row-major order); column sums, a thread
  // per column; rows (kernel.rows), a half-warp per row (blockDim.x a
  // multiple of 32).
  std::string cuda;
};

} // namespace stretto

#endif
