//===- PlanFile.h - a compiled training step as a file (no MLIR) -*- C++ -*-===//
//
// What the compiler hands to the runtime, saved: the lowered step (Graph:
// states, the step, update and outer phases), the fused kernels' C++ and
// CUDA C sources, and the run's settings (data, trainer options) as text
// key/values. `stretto-train --save-plan F` writes one; `stretto-run F`
// trains from it with no MLIR in the process (the runtime compiles or
// fetches the kernels from its caches).
//
// Format (text, version 1): a header line "stretto-plan 1", then one line
// per meta entry, state, outer loop and node, strings length-prefixed
// (`5:hello`), floats with 17 significant digits (exact), the two sources
// as length-prefixed raw blocks, and last "checksum <fnv1a64 of every
// preceding byte>". A truncated or edited file is refused with its line.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_PLANFILE_H
#define STRETTO_PLANFILE_H

#include "stretto/Runtime/Graph.h"

#include <map>
#include <string>

namespace stretto {

struct PlanFile {
  Graph graph;
  std::string cppSource;  // the fused kernels for the host compiler ("" if none)
  std::string cudaSource; // the same kernels as CUDA C
  std::map<std::string, std::string> meta; // e.g. "data.format", "train.steps"
};

/// Writes atomically (temporary file + rename).
void savePlanFile(const std::string &path, const PlanFile &plan);
/// Throws std::runtime_error "path:line: what" when the file is missing,
/// truncated, corrupt or not a plan; the graph is validated.
PlanFile loadPlanFile(const std::string &path);

/// The file's text, and its parser (`name` is used in messages). With
/// `checkChecksum` false the checksum line is required but not compared
/// (the plan fuzzer reaches the parser that way).
std::string planFileText(const PlanFile &plan);
PlanFile parsePlanFile(const std::string &text, const std::string &name,
                       bool checkChecksum = true);

} // namespace stretto

#endif
