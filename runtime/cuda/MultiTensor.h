//===- MultiTensor.h - one launch for many same-body kernels (internal) ---===//
//
// The optimizer's update is the same element-wise kernel once per parameter
// (AdamW's moment updates, the parameter step): dozens of small launches
// that differ only in their pointers and element counts. multiTensorKernels
// finds, in the model's CUDA C (KernelSource.h's element-wise form: an
// `NAME_element` function and a grid-stride wrapper over a fixed count),
// the kernels whose element functions are the same text but for their
// name, and writes for each such group one kernel that runs all of them in
// one launch from a table in device memory:
//
//   table[0] = entries; then per entry, W = N + 4 words: N input pointers,
//   the output pointer, a flag pointer, the element count, the entry's
//   first block.
//
// Where an entry's flag pointer is not null (its output is a state's new
// value: the update's check of the states, folded in), a block that wrote
// an inf or a NaN sets *flag to 1.
//
// A block finds its entry by binary search over the first blocks and runs
// that entry's elements in a grid-stride loop over its own blocks: where
// the pointers it reads and writes at the element's index are 16-byte
// aligned, eight consecutive elements a thread a step, loaded and stored
// as 16-byte words (the element function on registers), then the rest one
// at a time. The element function is copied, so every element computes
// exactly what the single kernel computes.
//
// Whole-tensor sums (a gradient's sum of squares for clipping: a row-sum
// kernel over one row) with the same value function run likewise as two
// launches for the group, NAME then NAME_finish, from a table of W = N + 5
// words an entry: N input pointers, the output pointer, its parts, its
// threads, the element count, the entry's first block. An entry of one
// part is summed by the first `threads` threads of its block exactly as
// the kernel's own launch of that many threads sums it, and written; an
// entry of several by NAME_parts' chunks, one block each, whose partial
// sums NAME_finish adds in st_row_sums' order: what the runtime's split of
// that kernel (NAME_parts, then st_row_sums) computes, bit for bit. No MLIR
// here.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_MULTITENSOR_H
#define STRETTO_RUNTIME_MULTITENSOR_H

#include <map>
#include <set>
#include <string>
#include <vector>

namespace stretto {

struct MultiTensorKernels {
  std::map<std::string, std::string> groupOf; // model kernel -> its multi kernel
  std::map<std::string, int> inputs;          // multi kernel -> its inputs (N)
  std::string source; // the multi kernels' CUDA C, to follow the model's
  struct Element {
    std::string params, body; // the element function's
    int inputs = 0;
  };
  std::map<std::string, Element> elements; // multi kernel -> its element function
  /// Chain kernels (addChainKernels): the multi kernels of a chain's
  /// stages, '|'-separated -> the kernel that runs them as one.
  std::map<std::string, std::string> chains;
  /// Multi kernels of whole-tensor sums (row-sum kernels over one row with
  /// a NAME_parts twin and one value function): NAME and NAME_finish.
  std::set<std::string> sums;
};

/// The groups of two or more element-wise kernels of `cudaSource` with the
/// same element function, and their multi-tensor kernels.
MultiTensorKernels multiTensorKernels(const std::string &cudaSource);

/// A chain kernel for each list of multi kernels in `stages` (producers,
/// then the consumer: UpdateChains.h), appended to m.source and named in
/// m.chains. Its table, like a multi kernel's, holds per entry, for each
/// stage in order, that stage's inputs, its output and its flag pointer,
/// then the element count and the entry's first block; per element it
/// runs each stage's element function in order, so a stage reads what an
/// earlier one just wrote at that index (the copies have no __restrict__;
/// eight elements at a time, each stage's eight stored before the next
/// stage loads them, with plain loads, not the read-only path).
void addChainKernels(MultiTensorKernels &m, const std::vector<std::vector<std::string>> &stages);

} // namespace stretto

#endif
