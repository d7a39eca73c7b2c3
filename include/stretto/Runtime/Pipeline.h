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
  /// Ctrl-C: polled by every stage at the end of each step. The stages agree
  /// one step later (a flag message to every other stage, received at the
  /// end of the next step), so all stop after the same step.
  std::function<bool()> stopRequested;
  /// Checkpoints every `checkpointInterval` steps (0: never), when the run
  /// stops early and at its last step. Each stage calls onCheckpoint with its
  /// own states (on its thread or in its process); the stages then meet at a
  /// barrier and each calls onCheckpointKept (every stage has written `step`:
  /// its older files can go). At the periodic ones the last stage also gets
  /// every stage's parameters in onModel (the end's are
  /// PipelineResult::states).
  int64_t checkpointInterval = 0;
  std::function<void(int64_t step, int stage, const std::map<std::string, HostTensor> &)>
      onCheckpoint;
  std::function<void(int64_t step, int stage)> onCheckpointKept;
  std::function<void(int64_t step, const std::map<std::string, HostTensor> &params)> onModel;
  /// Validation every `evalInterval` steps and at the last step (0: never):
  /// `evalBatches` validation batches flow forward through every stage with
  /// the weights of that step; the last stage calls onEval with their mean.
  int64_t evalInterval = 0, evalBatches = 0;
  std::function<void(int64_t step, double valLoss)> onEval;
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
  bool stopped = false;       // stopRequested ended it
  std::vector<StageReport> stages;
  std::map<std::string, HostTensor> states; // every stage's final state
  double seconds = 0;
};

/// Trains `graph` for options.steps steps of options.microBatches
/// micro-batches (batch index of micro-batch j of the run is j). Throws
/// std::runtime_error if a stage fails; no thread is left blocked.
PipelineResult runPipeline(const Graph &graph, DataSource &data, const PipelineOptions &options);

/// One stage of the pipeline on this rank of `comm` (rank s runs stage s;
/// comm.size() must equal the stage count): the multi-process form of
/// runPipeline. Losses, `stages` and the final `states` (every stage's,
/// gathered) are filled on the last stage, which holds the loss; the other
/// ranks return their own stage report only.
PipelineResult runPipelineRank(const Graph &graph, DataSource &data,
                               const PipelineOptions &options, Communicator &comm);

/// A table of the per-stage allocation report, for people.
std::string formatStageReport(const std::vector<StageReport> &stages);

/// The pipeline trainer behind stretto-train and stretto-run: one worker
/// per stage, 1F1B (flush or PipeDream-2BW). Progress lines, the per-stage
/// allocation and idle report, periodic validation, metrics.jsonl,
/// checkpoints every checkpoint_interval steps, at the end and on Ctrl-C
/// (resumable). Returns 0, or 1 after printing the error.
/// With `comm`, this process runs stage comm->rank() of a multi-process
/// run; the last stage prints and writes the output folder.
int runPipelineTraining(const Graph &graph, DataSource &data, const TrainerOptions &options,
                        bool twoBW, Communicator *comm = nullptr);

} // namespace stretto

#endif
