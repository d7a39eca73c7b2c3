//===- Pipeline.h - pipeline-parallel training runtime ---------*- C++ -*-===//
//
// Runs a partitioned training step (train-partition, optionally train-2bw
// and train-delay-ef) with one rank per stage (runPipelineRank),
// micro-batches streamed in 1F1B order and activations/cotangents moving
// through a Communicator: threads of one process over an InProcessGroup
// (runPipeline), or processes over Gloo. No MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_PIPELINE_H
#define STRETTO_PIPELINE_H

#include "stretto/Runtime/Graph.h"
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Runtime/RefExecutor.h"
#include "stretto/Runtime/Trainer.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace stretto {

class Communicator;

/// One stage's share of a partitioned Graph: its own Graph (its nodes, its
/// states), which step nodes are forward and backward, and what it sends.
struct StagePlan {
  int stage = 0;
  Graph graph;
  std::vector<int> forward, backward; // step-phase node indices, in order
  struct Send {
    int node;        // this stage's node whose value is sent
    int channel;     // the transfer's index in the full step graph
    int to;          // receiving stage
    bool backward;   // sent after the backward part
  };
  std::vector<Send> sends;
  // Input nodes named "xfer.<channel>" receive transfers.
};

/// Splits a Graph by the `stage` of its nodes and states. A graph with no
/// stages gives one plan holding everything. Throws on an inconsistent
/// partition (a node using another stage's value without a transfer).
std::vector<StagePlan> planStages(const Graph &graph);

enum class Schedule {
  Flush, // synchronous: a step's micro-batches drain before its update
  TwoBW, // PipeDream-2BW: 1F1B across step boundaries, no flush
};

struct PipelineOptions {
  int64_t steps = 10;
  int64_t microBatches = 1;
  Schedule schedule = Schedule::Flush;
  Precision precision = Precision::F32;
  /// Stages run on the compiled runtime (PlanExecutor, f32) with these
  /// fused kernels instead of the reference executor.
  bool compiled = false;
  std::map<std::string, RefExecutor::KernelFn> kernels;
  GemmPrecision gemmPrecision = GemmPrecision::F32; // compiled runtime's GEMMs
  /// When set, builds each stage's executor (e.g. the compiled runtime on
  /// a GPU); called from the thread that will use it. Else `compiled`,
  /// `kernels` and `precision` decide.
  std::function<std::unique_ptr<Executor>(const Graph &)> executorFactory;
  uint64_t seed = 1337;
  /// Called by the last stage when a step's loss is known (progress lines).
  std::function<void(int64_t step, double loss)> onStep;
  /// Resume: the steps already done and the state they left, by name (a
  /// stage's own or every stage's, e.g. from checkpoints). Steps run from
  /// startStep + 1 to steps.
  int64_t startStep = 0;
  std::map<std::string, HostTensor> resumeStates;
  /// --init-from (when not resuming): each stage sets the parameters it
  /// owns, and their copies, from these (applyInitParameters).
  std::map<std::string, HostTensor> initParams;
  /// Validation every `evalInterval` steps and at the last step (0: never):
  /// `evalBatches` validation batches flow forward through every stage with
  /// the weights of that step (runPipelineTraining takes the trainer's).
  int64_t evalInterval = 0, evalBatches = 0;
};

struct StageReport {
  int stage = 0;
  int64_t parameters = 0;     // parameter tensors owned
  int64_t weightVersions = 0; // buffers holding a version of some parameter
  int64_t efStates = 0;       // delay-EF memories (@p.ef_u)
  int64_t optimizerStates = 0;
  int64_t bytes = 0;          // all state of the stage
  double busySeconds = 0, wallSeconds = 0;
  // Compute time by kind of work, for schedule models (bench/, stretto-tune);
  // backward includes summing the micro-batch's gradients into the step's.
  double forwardSeconds = 0, backwardSeconds = 0, updateSeconds = 0;
  int64_t forwards = 0, backwards = 0, updates = 0;
  double idleFraction() const { return wallSeconds > 0 ? 1.0 - busySeconds / wallSeconds : 0; }
};

struct PipelineResult {
  std::vector<double> losses; // mean loss of each step run (startStep + 1 ...)
  int64_t lastStep = 0;       // the step the run ended at (early on a stop)
  bool stopped = false;       // a stop request ended it
  std::vector<StageReport> stages;
  std::map<std::string, HostTensor> states; // every stage's final state
  double seconds = 0;
  // The end time of each step run, in seconds since the last stage's step
  // driver began (TrainSummary::stepEnds).
  std::vector<double> stepEnds;
};

/// Trains `graph` for options.steps steps of options.microBatches
/// micro-batches, one thread per stage, each stage driven by driveSteps
/// (part k of step u's batch is micro-batch k of step u). Throws
/// std::runtime_error naming the stage that failed; no thread is left
/// blocked.
PipelineResult runPipeline(const Graph &graph, DataSource &data, const PipelineOptions &options);

/// The pipeline options a trainer's options ask for: their steps,
/// micro-batches, seed and evaluation, the schedule, and the executor
/// factory of `opt` (executorFactory). runPipelineTraining runs with them;
/// a library caller (stretto-tune) passes them to runPipeline.
PipelineOptions pipelineOptionsFor(const TrainerOptions &opt, bool twoBW);

/// A table of the per-stage allocation report, for people.
std::string formatStageReport(const std::vector<StageReport> &stages);

/// The pipeline trainer behind stretto-train and stretto-run: a stage per
/// thread, or with `comm` this process as stage comm->rank() of a
/// multi-process run; 1F1B (flush or PipeDream-2BW), each stage driven by
/// driveSteps (the last stage prints and writes the run's files), the
/// per-stage allocation and idle report at the end. Returns 0, 1 after
/// printing the error, 130 after a stop.
int runPipelineTraining(const Graph &graph, DataSource &data, const TrainerOptions &options,
                        bool twoBW, Communicator *comm = nullptr);

} // namespace stretto

#endif
