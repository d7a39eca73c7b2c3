//===- Partition.h - stage partitions: cost model, DP search, simulator -*- C++ -*-===//
//
// The search behind `train-partition` and `stretto-tune`, without MLIR.
//
// A model is a sequence of partition units (the embedding, each block, the
// final norm + head + loss); a partition into S stages is S contiguous unit
// ranges. Each unit has a profile: forward and backward seconds per
// micro-batch, update seconds per step, the bytes it owns (weights,
// optimizer state), the activations it stashes per micro-batch in flight,
// and the bytes crossing the cut before it.
//
// One dynamic program (`searchPartition`) minimises the predicted step time
// of a schedule over contiguous ranges, subject to a memory limit per stage:
//  - 2BW steady state: max over stages of (m·c_s + u_s), a min-max DP
//    (PipeDream's planner, Narayanan et al., SOSP 2019 / ICML 2021). It is
//    the steady state when m >= S; with fewer micro-batches the 2BW version
//    rule (a forward of step k+1 waits for update k−1) caps the micro-batches
//    in flight, and only the simulator sees the round trip that adds;
//  - 1F1B with flush: Σ c_s + (m−1)·max c_s + u_0, minimised by fixing the
//    largest stage cost t and minimising the sum under c_s <= t for every
//    candidate t (Alpa's inter-operator DP, Zheng et al., OSDI 2022), with
//    Piper-style per-stage memory constraints (Tarnawski et al., NeurIPS 2021).
// c_s is the stage's forward + backward time per micro-batch plus the time
// its sends take over the link model (the sender is busy while it sends);
// u_s its update. `train-partition`'s balanced split is the same DP on
// static per-layer costs (m = 1, no updates, no limits: min-max of sums).
//
// `simulate` is the event-driven model of the pipeline runtime's schedules
// (runtime/run/Pipeline.cpp's order of forwards, backwards and updates on each
// stage, one processor per stage): step time, per-stage idle share, per
// stage peak memory, and the events for a timeline.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_TUNE_PARTITION_H
#define STRETTO_TUNE_PARTITION_H

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace stretto::tune {

struct UnitProfile {
  std::string name;
  double forward = 0, backward = 0; // seconds per micro-batch
  double update = 0;                // seconds per step
  double paramBytes = 0, optimizerBytes = 0;
  double stashBytes = 0; // activations kept from forward to backward, per micro-batch
  double cutBytes = 0;   // bytes crossing the cut before this unit (forward; the
                         // cotangents going back have the same size)
};

struct Link {
  double latency = 0;                                         // seconds per message
  double bandwidth = std::numeric_limits<double>::infinity(); // bytes per second
  double time(double bytes) const { return bytes > 0 ? latency + bytes / bandwidth : 0; }
};

enum class Sched { Flush, TwoBW };

struct CostModel {
  std::vector<UnitProfile> units;
  int64_t microBatches = 1;
  Sched schedule = Sched::Flush;
  Link link;
  bool efMemory = false; // 2BW with delay error feedback: one more weight-sized memory
  /// Bytes a stage may hold: empty for no limit, one value for every stage,
  /// or one per stage.
  std::vector<double> memoryLimit;
  double limitOf(int stage) const;
};

struct StageEstimate {
  int first = 0, end = 0;            // units [first, end)
  double forward = 0, backward = 0;  // per micro-batch
  double sendForward = 0, sendBackward = 0; // per micro-batch, on this stage
  double update = 0;
  double state = 0, stash = 0; // bytes held always; activation bytes per micro-batch in flight
  double memory = 0, limit = std::numeric_limits<double>::infinity();
  double perMicroBatch() const { return forward + backward + sendForward + sendBackward; }
  bool fits() const { return memory <= limit; }
};

struct Candidate {
  std::vector<int> bounds; // S + 1 unit indices: stage s is [bounds[s], bounds[s+1])
  std::vector<StageEstimate> stages;
  double objective = 0;   // the DP's predicted step time (seconds)
  bool feasible = true;
  std::string why;        // when not: which stage overflows and by how much
};

/// One stage's costs and memory as stage `s` of `S` (the in-flight count of
/// 1F1B, min(S − s, m), sets how many stashes it holds).
StageEstimate estimateStage(const CostModel &model, int first, int end, int s, int S);
/// The DP's objective and the feasibility of a given partition.
Candidate evaluate(const CostModel &model, const std::vector<int> &bounds);
/// The partition into S stages minimising the objective among those that
/// fit; `feasible` is false (and `why` says why) when none fits. Throws
/// std::invalid_argument when S is not in [1, units].
Candidate searchPartition(const CostModel &model, int S);
/// Every partition into S stages (brute force; for tests and candidate
/// tables). Throws std::length_error when there are more than `limit`.
std::vector<std::vector<int>> allPartitions(int units, int S, size_t limit = 1000000);
/// The hand split: the blocks as evenly as possible (earlier stages take
/// the extra block), the units before the first block on the first stage,
/// the units after the last on the last. `isBlock[u]` marks blocks.
std::vector<int> evenSplit(const std::vector<bool> &isBlock, int S);

/// A human-readable byte count ("1.50 MiB").
std::string formatBytes(double bytes);

// The simulator.

struct SimEvent {
  int stage;
  char kind; // 'F', 'B', 'U'
  int64_t index; // micro-batch (run-wide) or step for 'U'
  double start, end; // end includes the sends that follow the work
};

struct SimResult {
  double makespan = 0;
  double stepTime = 0; // flush: makespan / steps; 2BW: steady state (middle half)
  std::vector<double> idle;       // per stage, share of the makespan
  std::vector<double> peakMemory; // per stage: state + stashes in flight at most
  std::vector<SimEvent> events;
};

/// Runs `steps` steps of `microBatches` micro-batches through the stages in
/// the runtime's order (1F1B, a stage holds at most S − s forwards whose
/// backward has not run; flush: step k+1's forwards wait for update k;
/// 2BW: for update k−1).
SimResult simulate(const std::vector<StageEstimate> &stages, int64_t microBatches, int64_t steps,
                   Sched schedule);

/// The runtime's order of work on stage s (mirrors runtime/run/Pipeline.cpp).
struct Work {
  char kind;
  int64_t index;
};
std::vector<Work> stageOrder(int s, int S, int64_t microBatches, int64_t steps, Sched schedule);

/// An SVG timeline, one lane per stage, forwards/backwards/updates coloured.
std::string timelineSvg(const SimResult &sim, const std::vector<std::string> &laneNames,
                        const std::string &title);

/// A candidate partition as the tuner chooses among them.
struct Choice {
  int stages = 0;
  bool measured = false;
  double median = 0; // measured seconds per step (median over runs)
  double noise = 0;  // run-to-run noise, relative (half the range of the run medians)
  int even = -1;     // index of the even split with the same stage count; -1: none
  // Paired against the even split (runs interleaved round by round): the
  // median ratio even/this and its noise; 0: not paired, the medians and
  // the larger of the two noises are compared instead.
  double vsEven = 0, vsEvenNoise = 0;
};
struct Pick {
  size_t index = 0;
  // A candidate within the noise of the fastest and predicted better, that
  // lost because its own lead over the even split is within the noise; -1:
  // none.
  int passedOver = -1;
  bool tieToPrediction = false; // the pick is not the measured-fastest: a tie
};
/// The tuner's winner among `choices`, given in the order of their
/// prediction (best first): the measured-fastest; measured times within the
/// run-to-run noise of each other are a tie, which goes to the better
/// prediction -- but only to a candidate that itself beats its even split by
/// more than the noise (paired when vsEven is set), when the
/// measured-fastest does. Nothing measured:
/// the best prediction (index 0).
Pick pickWinner(const std::vector<Choice> &choices);

} // namespace stretto::tune

#endif
