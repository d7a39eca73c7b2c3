//===- StepDriver.h - one training loop for every run mode -----*- C++ -*-===//
//
// Every run -- one stage (alone or as a rank of synchronous data
// parallelism), a pipeline stage, a gossip or DiLoCo replica; on threads or
// processes -- is driven step by step by driveSteps (a gossip round is a
// step). The driver owns what a trainer does around a step: --resume and
// --init-from, the evaluation and checkpoint cadence, progress lines,
// metrics.jsonl, metrics.csv and loss.svg, the model file at every
// checkpoint, Ctrl-C, the stop at a non-finite loss or state, timing and
// the summary. A StepMode supplies only what differs between the modes: how
// one step executes and synchronises over the ranks, which files each rank
// reads and writes, and what its summary adds.
//
// Every rank of a run drives its own mode; the lead rank (the one that
// knows the loss) prints and writes the run's files.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_STEPDRIVER_H
#define STRETTO_RUNTIME_STEPDRIVER_H

#include "stretto/Runtime/Trainer.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace stretto {

/// What the driver asks of one step.
struct StepPlan {
  int64_t step = 0;        // 1-based
  bool last = false;       // the run's last step
  bool evaluate = false;   // validation after it (every rank takes part)
  bool checkpoint = false; // a periodic or final checkpoint after it
  /// Whether this rank was asked to stop (Ctrl-C, SIGTERM): the mode asks
  /// where its agreement needs it, after the step's work.
  const std::atomic<bool> *stop = nullptr;
  bool stopWanted() const { return stop && stop->load(); }
};

/// How a step ended, the same on every rank: the mode agrees on it.
enum class StepEnd {
  Continue, // train on
  Stopped,  // a stop request ended the run here, after a checkpoint
  Failed,   // a non-finite loss or state: no checkpoint of this state
  Left,     // this rank leaves the run here (a planned failure, in tests)
};

/// What one step did, as far as this rank knows.
struct StepReport {
  StepEnd end = StepEnd::Continue;
  std::string failure;    // Failed: why
  bool knowsLoss = false; // this rank holds the step's loss (the lead)
  double loss = 0;
  double valLoss = -1;    // validated and known here
  bool checkpointed = false; // this step's checkpoint files are written
  double tokens = 0;      // tokens the step trained, over every rank
  /// Extra metrics.jsonl fields (name, JSON value) and progress text.
  std::vector<std::pair<std::string, std::string>> fields;
  std::string progress;
};

/// Where a resumed run continues.
struct ResumePoint {
  int64_t step = 0;  // steps done
  std::string from;  // the checkpoint, for messages
};

/// One rank of a run in some mode (see the file comment).
class StepMode {
public:
  virtual ~StepMode() = default;
  /// "step", or "round" (gossip): progress lines and the metrics' key.
  virtual const char *unit() const { return "step"; }
  virtual int64_t totalSteps() const = 0;
  /// This rank prints and writes the run's files.
  virtual bool lead() const = 0;
  /// The run's layout, kept in <out>/world.txt ("pipeline stages 2").
  virtual std::string layout() const = 0;
  /// Whose checkpoint files this rank owns: -1 for the single
  /// checkpoint.bin of a one-stage run (its lead writes it), else the rank
  /// of checkpoint-rank<r>-step<N>.bin.
  virtual int checkpointRank() const = 0;
  /// Whether `ok` holds on every rank (an all-reduce over the run's ranks;
  /// one rank: `ok`). Every rank calls it at the same points.
  virtual bool agree(bool ok) = 0;
  /// A new run: every state from the seed, the parameters from `init` when
  /// given (--init-from). Returns the steps already done (0; a library run
  /// handed states in memory may start later).
  virtual int64_t start(const std::map<std::string, HostTensor> *init) = 0;
  /// --resume: loads the newest checkpoint every rank completed (each rank
  /// its own files) and returns the steps it holds.
  virtual ResumePoint resume() = 0;
  /// Runs one step. At plan.checkpoint, and at a step it stops at, the mode
  /// writes its ranks' checkpoint files.
  virtual StepReport step(const StepPlan &plan) = 0;
  /// The model's parameters, on the lead rank (others: empty). Every rank
  /// calls it after the same steps (it may gather from the others).
  virtual std::map<std::string, HostTensor> parameters() = 0;
  /// The checkpoint files of the step, for messages ("DIR/checkpoint.bin").
  virtual std::string checkpointName(int64_t step) const = 0;
  /// Text the "done:" line ends with (" (2 stages, PipeDream-2BW)"), and
  /// lines printed before it (a stage table, dropped replicas).
  virtual std::string summaryDetail() const { return ""; }
  virtual std::string report() const { return ""; }
  /// This rank failed (an exception left step): unblock its peers.
  virtual void abort(const std::string &) {}
};

/// The trainer's settings the driver reads: steps, intervals, the output
/// folder, --resume, --init-from, quiet; `graph` holds every parameter
/// (--init-from is checked against it). `stop` is the stop request (null:
/// the driver takes SIGINT and SIGTERM itself). Returns 0, 1 after an error
/// (printed, and in summary->error), 130 after a stop with its checkpoint.
int driveSteps(StepMode &mode, const Graph &graph, const TrainerOptions &options,
               TrainSummary *summary = nullptr, const std::atomic<bool> *stop = nullptr);

/// The loss plot driveSteps writes: train (every step) and validation (each
/// evaluation) against the step, as an SVG a browser opens.
void writeLossPlot(const std::string &path, const char *unit,
                   const std::vector<std::pair<int64_t, double>> &train,
                   const std::vector<std::pair<int64_t, double>> &val);

} // namespace stretto

#endif // STRETTO_RUNTIME_STEPDRIVER_H
