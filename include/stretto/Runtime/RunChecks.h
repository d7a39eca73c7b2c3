//===- RunChecks.h - a run's settings, checked before it starts -*- C++ -*-===//
//
// One function checks everything a run is about to do, whoever assembled
// its settings (stretto-train from a config, stretto-run from a plan file,
// the trainers when they resume): intervals and counts, the pipeline and
// replica layout, the simulated network, the memory the run needs against
// what the machine has, and a resume against the checkpoint it continues.
// Every refusal is a std::runtime_error whose message names the setting.
// No MLIR here.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNCHECKS_H
#define STRETTO_RUNCHECKS_H

#include "stretto/Runtime/Graph.h"
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Support/Limits.h"
#include "stretto/Runtime/Trainer.h"

#include <cstdint>
#include <map>
#include <string>

namespace stretto {

struct GossipSettings;

/// What validateRunSettings looks at. Fields left at their defaults (-1,
/// "", null) are not known to the caller and not checked.
struct RunCheck {
  RunCheck(const Graph &graph, const TrainerOptions &options) : graph(graph), options(options) {}
  const Graph &graph;
  const TrainerOptions &options;
  /// Pipeline stages the step was partitioned into (train.stages).
  int64_t stages = -1;
  /// train.replicas and train.sync as configured.
  int64_t replicas = -1;
  std::string sync;
  /// A gossip/DiLoCo run's network model.
  const GossipSettings *gossip = nullptr;
  /// Compare the memory estimate with what the machine has (not when only
  /// a plan is written for another machine).
  bool checkMemory = false;
  /// Bytes available; negative: read them from the system (availableMemory).
  int64_t availableBytes = -1;
  /// The checkpoint a --resume continues, and its path (for messages).
  const Checkpoint *resumeFrom = nullptr;
  std::string checkpointPath;
};

/// Throws std::runtime_error naming the first setting that is out of range,
/// inconsistent, asks for more memory than the machine has, or (with
/// resumeFrom) a resume of another model, seed or micro-batch count unless
/// options.forceResume.
void validateRunSettings(const RunCheck &run);

/// Memory a run needs on the host, from the buffer planner (the compiled
/// runtime) or the values the reference executor keeps: per stage and
/// micro-batch in flight, per replica, plus the copies a checkpoint makes.
struct MemoryEstimate {
  int64_t bytes = 0;
  std::string breakdown; // e.g. "buffer plan peak 30.1 MB x 4 replicas"
};
MemoryEstimate estimateRunMemory(const Graph &graph, const TrainerOptions &options,
                                 int64_t stages, int64_t replicas);

/// The compiled runtime's buffer plan for `graph`, computed without
/// allocating it (throws like PlanExecutor for a graph it cannot run).
PlanStats planStatsOf(const Graph &graph);

/// Memory this process can still use: MemAvailable from /proc/meminfo, or
/// less when a cgroup limit says so; `source` says where the figure is from.
struct AvailableMemory {
  int64_t bytes = -1; // -1: unknown
  std::string source;
};
AvailableMemory availableMemory();

/// "1.50 GB", "320.0 MB": for messages.
std::string formatBytes(double bytes);

/// The step's inputs, e.g. "targets [16, 64] i32, tokens [16, 64] i32":
/// the same for every executor of one model (a checkpoint records it).
std::string inputSignature(const Graph &graph);

/// What a checkpoint records of the run that writes it (Checkpoint::meta):
/// the model's fingerprint, the step's inputs, the micro-batch count, the
/// data order (kDataOrder).
std::map<std::string, std::string> checkpointMeta(const Graph &graph,
                                                  const TrainerOptions &options);

/// The line a resume prints when `c` (at `path`) was written by a runtime
/// whose micro-batches and ranks drew their own windows (no "data.order")
/// and this run splits each step's batch into `parts` > 1: from the resumed
/// step on, it reads other rows than the run that wrote the checkpoint
/// would have. Empty when nothing changed.
std::string dataOrderNote(const Checkpoint &c, const std::string &path, int64_t parts);

} // namespace stretto

#endif
