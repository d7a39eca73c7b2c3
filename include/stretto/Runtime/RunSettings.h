//===- RunSettings.h - a run, as one value ---------------------*- C++ -*-===//
//
// Everything that describes a training run besides its graph and kernels:
// the settings a plan fixes (from the model's trainer keys, written to and
// read from plan files by toMeta/fromMeta) and the flags of the command line
// (takeRunFlags, the one parser of stretto-train's and stretto-run's run
// flags). Every default is written here once. runPlan runs a run of any
// mode -- one process or several, single, pipelined, gossip/DiLoCo -- from
// it.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_RUNSETTINGS_H
#define STRETTO_RUNTIME_RUNSETTINGS_H

#include "stretto/Runtime/Gossip.h"
#include "stretto/Runtime/Trainer.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace stretto {

struct PlanFile;

/// The command line's run flags. Negative numbers and empty strings: not
/// given (the plan's setting stands).
struct RunFlags {
  int64_t steps = -1, seed = -1, logInterval = -1;
  std::string dataPath; // stretto-run --data: another data file than the plan's
  std::string outDir;
  bool resume = false, forceResume = false;
  std::string initFrom;
  bool quiet = false, profile = false;
  std::string deviceModel; // --device-model NAME: predict the step there, then exit
  std::string device = "cpu";      // cpu | cuda | auto
  std::string precision = "f32";   // f32 | bf16 | f64 (f64: the reference executor)
  std::string executor = "compiled"; // compiled | reference
  bool executorGiven = false;      // --executor was on the command line
  int64_t check = 0;               // stretto-run --check N
  int64_t timeoutSeconds = 300;    // rendezvous and every wait of a multi-process run
  std::string iface, rendezvous;
  // --on-peer-failure stop|continue; "": the mode's default
  // (peerFailureDefault).
  std::string onPeerFailure;
  std::vector<std::pair<int, int64_t>> kills; // --kill-replica R@K: (R, K-1)
};

struct RunSettings {
  // The model, as the plan records it.
  std::string modelName, fingerprint, optimizer = "adamw";
  int64_t vocab = 256;
  DataConfig data;
  // The training loop.
  int64_t steps = 100, microBatches = 1;
  // The step's storage: "bf16" when train-mixed-precision rounded it (the
  // run's GEMMs then take bf16 operands), else "f32".
  std::string precision = "f32";
  uint64_t seed = 1337;
  int64_t logInterval = 10, evalInterval = 100, evalBatches = 8;
  int64_t checkpointInterval = 0; // 0: at the end (and on a stop) only
  // Pipelines: stages and schedule (1F1B with flush, or PipeDream-2BW).
  int64_t stages = 1;
  bool twoBW = false;
  // Gossip/DiLoCo: the simulated network (a graph with an outer phase).
  GossipSettings gossip;
  // train.replicas and train.sync as configured (checked by
  // validateRunSettings); a plan does not record them (-1, "").
  int64_t replicas = -1;
  std::string sync;
  RunFlags flags;
  // For messages: the program ("stretto-run") and where the settings came
  // from (a plan's path), which prefixes a refused setting.
  std::string tool, origin;

  /// As plan-file meta entries ("train.steps", "data.path", "gossip.*", ...).
  std::map<std::string, std::string> toMeta() const;
  /// From a plan's meta entries; a missing key keeps its default, a setting
  /// that is not a number throws std::runtime_error naming the key.
  static RunSettings fromMeta(const std::map<std::string, std::string> &meta);
  /// The flags over the settings: --steps, --seed, --log-interval and --data
  /// replace the plan's values; the rest is kept in `flags`.
  void apply(const RunFlags &f);
  /// The trainer's options (executors are chosen by runPlan).
  TrainerOptions trainerOptions() const;
};

/// Takes the run flags out of `args` into `flags` (both --key value and
/// --key=value) and returns the other arguments in order. Checks each
/// value (numbers, device, precision, executor, R@K); throws
/// std::runtime_error naming the flag. The flags are rows of the flag table
/// (stretto/Runtime/Flags.h), which also writes their help (runFlagsHelp).
std::vector<std::string> takeRunFlags(const std::vector<std::string> &args, RunFlags &flags);

/// What a rank does when a peer dies, unless --on-peer-failure says:
/// gossip and DiLoCo replicas (a graph with an outer phase) "continue"
/// without it (surviving a dead peer is the point of decentralized
/// training); pipeline stages and synchronous data-parallel ranks "stop".
const char *peerFailureDefault(const Graph &graph);

/// stretto-run --nccl-check: a one-rank NCCL self-check on GPU 0; the exit
/// status (0 when it passed, 77 when there is no GPU or NCCL to check).
int ncclSelfCheck();

/// Where compiled kernels are cached: $STRETTO_CACHE_DIR, else
/// ~/.cache/stretto/kernels.
std::string kernelCacheDirectory();

/// The fused kernels a run needs, and the cache that owns them.
struct PlanKernels {
  std::map<std::string, RefExecutor::KernelFn> functions; // their host build
  size_t count = 0; // kernels the run uses (functions may be left unbuilt)
  std::string cppSource, cudaSource;
  std::shared_ptr<void> owner; // keeps the loaded shared object alive
};

/// Loads a plan's kernels through the host compiler's cache (compiled on a
/// miss); a rank of a multi-process pipeline loads only its stage's. A run
/// on the GPU alone (--device=cuda, the compiled executor, no --check) does
/// not build them: nothing on the host would call them.
/// Throws std::runtime_error.
PlanKernels loadPlanKernels(const PlanFile &plan, const RunSettings &settings);

/// The run's data source (DataConfig over the graph's inputs).
std::unique_ptr<DataSource> dataSourceFor(const Graph &graph, const RunSettings &settings);

/// Runs a run of any mode: in one process, or as one rank of several when
/// the environment names a world (the launcher, torchrun-style variables,
/// mpirun, srun: connected over Gloo, NCCL for GPU gradients); a single,
/// pipelined (stages > 1) or gossip/DiLoCo (an outer phase) plan; or
/// flags.check steps beside the reference executor. The same trainer
/// behaviour in every mode: progress, metrics, periodic validation and
/// checkpoints, resume, Ctrl-C writing a final checkpoint, a stop at a
/// non-finite loss or state. Returns the exit status (0, 1 after printing
/// an error, 130 after an interrupt).
int runPlan(const Graph &graph, DataSource &data, const RunSettings &settings,
            const PlanKernels &kernels);

} // namespace stretto

#endif // STRETTO_RUNTIME_RUNSETTINGS_H
