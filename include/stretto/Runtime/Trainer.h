//===- Trainer.h - the training loop (no MLIR) -----------------*- C++ -*-===//
//
// Runs a lowered training step over a data source: progress lines, periodic
// evaluation, metrics files, atomic checkpoints, resume, Ctrl-C. It takes a
// Graph, not IR, so it is part of the runtime.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_TRAINER_H
#define STRETTO_TRAINER_H

#include "stretto/Runtime/Graph.h"
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Runtime/RefExecutor.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace stretto {

class Communicator;

enum class Split { Train, Val };

/// Batches by (split, step, part): stateless, so a resumed run sees exactly
/// the batches an uninterrupted one would. A step's batch is a fixed set of
/// rows (windows); `part` p is its rows p·B .. p·B + B − 1, B being the
/// graph's batch size. Splitting a step into m micro-batches over R
/// data-parallel ranks gives micro-batch k of rank r part r·m + k, so every
/// execution choice reads the same rows (kDataOrder). Part 0 of step i is
/// what a run of one process with one micro-batch reads at step i + 1.
class DataSource {
public:
  virtual ~DataSource() = default;
  virtual std::map<std::string, HostTensor> batch(Split split, uint64_t step,
                                                  int64_t part) = 0;
  virtual std::string describe() const = 0;
  /// Tokens (or examples) per batch, for throughput figures.
  virtual int64_t tokensPerBatch() const = 0;
};

/// The data order of this runtime, recorded in checkpoints
/// ("data.order"): steps sliced into parts as DataSource describes. A
/// checkpoint without it comes from a runtime in which every micro-batch
/// (and data-parallel rank) drew windows of its own (dataOrderNote).
inline constexpr const char *kDataOrder = "step-slices";

struct DataConfig {
  std::string format = "text"; // text | bin | synthetic
  std::string path;
  double valFraction = 0.1;
  uint64_t seed = 1337;
};

/// Builds the data source the graph's inputs ask for: "tokens"/"targets"
/// [B, T] (language model, `vocab` ids) or "x" [B, N] / "y" [B] (classifier
/// with `classes`). Throws std::runtime_error naming the file on bad data.
std::unique_ptr<DataSource> makeDataSource(const Graph &graph, const DataConfig &config,
                                           int64_t vocabOrClasses);

struct TrainerOptions {
  int64_t steps = 100;
  int64_t microBatches = 1; // per optimizer step; the graph is micro-batch sized
  uint64_t seed = 1337;
  int64_t logInterval = 10;
  int64_t evalInterval = 100;
  int64_t evalBatches = 8;
  int64_t checkpointInterval = 0; // 0: only at the end
  std::string outDir;             // metrics, checkpoints, plot; empty: none
  bool resume = false;
  // Resume even when the checkpoint was written with another seed, model
  // or micro-batch count (validateRunSettings refuses that otherwise).
  bool forceResume = false;
  // --init-from: start from the parameters in this safetensors file
  // (loadInitParameters) instead of the seed's initialisation; a resumed
  // run takes its checkpoint's instead (initFromIgnoredLine).
  std::string initFrom;
  // Identifies the model (its forward step and parameters, not the
  // optimizer's settings) across executors and plan files; checkpoints
  // record it and a resume compares it. Empty: unknown, not compared.
  std::string modelFingerprint;
  Precision precision = Precision::F32;
  bool quiet = false;
  // No summary either (the stage report and "done:"): a library run
  // (runPipeline) whose caller reads the result instead.
  bool silent = false;
  // Errors are the caller's to print (a run on threads prints one for all).
  bool errorsToCaller = false;
  // Called with a step's exception before the mode aborts (and so before the
  // peers it leaves can fail in turn): a run on threads reports the rank
  // that saw why, not one that only heard of it.
  std::function<void(const std::string &)> onError;
  // The compiled runtime (PlanExecutor) instead of the reference executor.
  bool compiled = false;
  // Compiled runtime: print the time per op kind and the slowest kernels at
  // the end of training.
  bool profile = false;
  // Compiled fused kernels for Kernel nodes (empty: the graph has none).
  std::map<std::string, RefExecutor::KernelFn> kernels;
  // Compiled runtime: GEMM operands in f32 or bf16 (f32 master weights).
  GemmPrecision gemmPrecision = GemmPrecision::F32;
  // OpenMP threads of each executor's kernels and GEMMs, set on the thread
  // that builds it (a pipeline stage's, a replica's); 0: OpenMP's default.
  int kernelThreads = 0;
  // Compiled runtime on CUDA device 0 when `cuda` is set and a device, its
  // driver, NVRTC and cuBLASLt are there: the same kernels as CUDA C, and
  // NVRTC's cache folder. When one is missing, executorFactory throws
  // naming it if `cudaRequired` (--device=cuda), else one line says why and
  // the CPU trains (--device=auto).
  bool cuda = false;
  bool cudaRequired = false;
  CudaKernelSet cudaKernels;
  // Synchronous data parallelism: this process is one rank of `dataParallel`
  // (not owned). Rank r trains micro-batches r·m .. r·m+m−1 of every step of
  // a run with size()·m micro-batches; gradients and losses are all-reduced
  // before the update, so the losses are those of one process with
  // size()·m micro-batches (to the all-reduce's summation order). Rank 0
  // evaluates, prints and writes the output folder.
  Communicator *dataParallel = nullptr;
  // When set and the executor's gradient sums live on a GPU: reduces them
  // there, in place (GradSums::device: NCCL's all-reduce over the same
  // ranks), instead of staging them through the host for `dataParallel`;
  // the losses and the stop flag still travel over `dataParallel`.
  std::function<void(Executor::GradSums &)> deviceAllReduce;
  // The executor of a one-stage run, when set (a library's own, or an
  // emulated GPU in tests), instead of the one the fields above choose.
  std::function<std::unique_ptr<Executor>(const Graph &)> executorFactory;
};

struct TrainSummary {
  int64_t steps = 0;
  double firstLoss = 0, finalLoss = 0, finalValLoss = -1;
  double seconds = 0, tokensPerSecond = 0;
  bool interrupted = false;
  std::vector<double> losses; // every step's training loss
  // Seconds since the run began at the end of each step the lead knows the
  // loss of (the step driver's clock): callers that time steps (stretto-tune)
  // read them here instead of progress lines.
  std::vector<double> stepEnds;
  std::string error;          // why the run failed (exit status 1)
};

/// The executor `options` ask for, for each pipeline stage or gossip replica
/// (built on the thread that uses it): the compiled runtime on CUDA device 0
/// (an executor and a stream each; one that cannot start there runs on the
/// CPU, said once on stderr), on the CPU, or the reference executor.
std::function<std::unique_ptr<Executor>(const Graph &)>
executorFactory(const TrainerOptions &options);

/// The executor a mode's options (PipelineOptions, GossipOptions) ask for:
/// their own factory when set, else executorFactory's choice from their
/// compiled, kernels, gemmPrecision and precision.
template <class ModeOptions>
std::unique_ptr<Executor> executorFor(const Graph &g, const ModeOptions &opt) {
  if (opt.executorFactory)
    return opt.executorFactory(g);
  TrainerOptions choice;
  choice.compiled = opt.compiled;
  choice.kernels = opt.kernels;
  choice.gemmPrecision = opt.gemmPrecision;
  choice.precision = opt.precision;
  return executorFactory(choice)(g);
}

/// Trains; returns 0 on success, 130 when interrupted (after a final
/// checkpoint), 1 on an error (message already printed to stderr).
int runTraining(const Graph &graph, DataSource &data, const TrainerOptions &options,
                TrainSummary *summary = nullptr);

//===--- checkpoints ------------------------------------------------------===//

struct Checkpoint {
  int64_t step = 0;
  uint64_t seed = 0;
  std::map<std::string, HostTensor> states;
  // What the run that wrote it was (checkpointMeta in RunChecks.h):
  // "model.fingerprint", "model.inputs", "train.micro_batches". Empty in a
  // checkpoint of the first format.
  std::map<std::string, std::string> meta;
};

/// Writes `bytes` to `path` through a temporary file in the same folder,
/// fsync and rename, so `path` holds either the old or the new content.
void writeFileAtomically(const std::string &path, const std::string &bytes);

/// Writes atomically (writeFileAtomically).
/// Values are stored as f32 (exact for an F32 run) or f64, with a checksum.
void saveCheckpoint(const std::string &path, const Checkpoint &ckpt, Precision precision);
/// Throws std::runtime_error naming the file when it is missing, truncated,
/// corrupt (checksum) or not a Stretto checkpoint.
Checkpoint loadCheckpoint(const std::string &path);

//===--- runs in an output folder ---------------------------------------===//

/// A run's layout ("data-parallel ranks 2", "pipeline stages 4") is kept in
/// <outDir>/world.txt: resuming refuses another layout, naming both.
/// `write` (one rank of a run): record this run's.
void checkWorld(const std::string &outDir, bool resume, const std::string &layout, bool write);
/// Creates `dir` and any missing parent folders, and checks that it is a
/// writable folder; throws std::runtime_error naming it and the reason.
void prepareOutputDirectory(const std::string &dir);

/// Checks an output folder before a run: a new run refuses a folder holding
/// a checkpoint (no run overwrites another's); with `resume`, loads
/// <outDir>/checkpoint.bin and checks its states against the graph's (names,
/// shapes, count). Throws std::runtime_error naming the file.
std::optional<Checkpoint> openRun(const std::string &outDir, bool resume, const Graph &graph);
/// The same for a run with `options`; a resume is also checked by
/// validateRunSettings (seed, model, micro-batches: RunChecks.h). A
/// checkpoint at or past options.steps means the run already finished.
std::optional<Checkpoint> openRun(const Graph &graph, const TrainerOptions &options);
/// Writes <outDir>/checkpoint.bin (all states, and `meta`: see
/// Checkpoint::meta) atomically; refuses a state holding inf or NaN. (The
/// step driver writes model.safetensors beside it.)
void saveRun(const std::string &outDir, const Graph &graph, int64_t step, uint64_t seed,
             const std::map<std::string, HostTensor> &states, Precision precision,
             const std::map<std::string, std::string> &meta = {});


//===--- checkpoints of runs of several ranks ------------------------------===//
//
// A run of several ranks (pipeline stages, gossip/DiLoCo replicas) keeps one
// file per rank and checkpoint step, <outDir>/checkpoint-rank<r>-step<N>.bin
// (saveCheckpoint's format, holding that rank's states), so that no rank
// reads or writes another's folder: ranks on machines without a shared file
// system resume from their own disks, and a one-process run's files serve a
// multi-process run as they are. A rank removes its older files only once
// every rank has written step N (pipelines: a barrier; gossip: rank 0's
// acknowledgement), so the newest step that every rank holds is complete.
// A run of one rank keeps <outDir>/checkpoint.bin.

std::string rankCheckpointPath(const std::string &outDir, int rank, int64_t step);
/// The steps of `rank`'s files in outDir, newest first (none: empty).
std::vector<int64_t> rankCheckpointSteps(const std::string &outDir, int rank);
/// Removes `rank`'s files of steps before `step`.
void removeRankCheckpointsBefore(const std::string &outDir, int rank, int64_t step);
/// The checkpoint files in outDir (checkpoint.bin, every rank's), sorted.
std::vector<std::string> checkpointFilesIn(const std::string &outDir);
/// Throws when outDir holds a checkpoint (checkpoint.bin, or a file of
/// `rank`; -1: of any rank): a new run never overwrites one.
void refuseExistingCheckpoint(const std::string &outDir, int rank = -1);
/// The newest step for which each of `ranks` ranks has a file. With `comm`
/// (one rank of several processes) each rank reads its own folder and the
/// ranks agree through an all-reduce; without, outDir holds every rank's
/// files. Throws naming the ranks that have none.
int64_t newestCommonCheckpointStep(const std::string &outDir, int ranks, Communicator *comm);

/// Writes `rank`'s file for `step` holding `states` (that rank's), with
/// `meta`, atomically; refuses a state holding inf or NaN, as saveRun does.
void saveRankCheckpoint(const std::string &outDir, int rank, int64_t step, uint64_t seed,
                        const std::map<std::string, HostTensor> &states, Precision precision,
                        const std::map<std::string, std::string> &meta);
/// Loads `rank`'s file for `step` and checks its states against `expected`
/// (names, shapes, count), as openRun does; throws naming the file.
Checkpoint loadRankCheckpoint(const std::string &outDir, int rank, int64_t step,
                              const std::vector<StateDecl> &expected);

//===--- export and sampling ----------------------------------------------===//

/// Writes tensors as safetensors (https://github.com/huggingface/safetensors
/// format: u64 header length, JSON header, raw little-endian data), F32,
/// names as given, atomically.
void saveSafetensors(const std::string &path, const std::map<std::string, HostTensor> &tensors);
/// model.safetensors: the parameters, each tied one also under its aliases
/// (StateDecl::aliases), so that PyTorch's load_state_dict finds every name.
void saveModelSafetensors(const std::string &path, const Graph &graph,
                          const std::map<std::string, HostTensor> &params);
/// Reads a safetensors file (F32 or F64 tensors) by name. Throws
/// std::runtime_error naming the file and what is wrong: unreadable,
/// truncated (header or a tensor's data past the end), a header that is not
/// JSON, another dtype, data that does not match its shape.
std::map<std::string, HostTensor> loadSafetensors(const std::string &path);

//===--- --init-from ------------------------------------------------------===//

/// The parameters in `path` (loadSafetensors), checked against the graph's:
/// the first mismatch in the model's order (a missing name, a wrong shape),
/// then a tensor the model has no parameter for, throws naming the file and
/// the tensor. A tied parameter's aliases may be in the file too (as
/// model.safetensors writes them) if they hold the same values. Returns
/// exactly the graph's parameters.
std::map<std::string, HostTensor> loadInitParameters(const std::string &path,
                                                     const Graph &graph);
/// Sets the parameters of `graph` (a whole model, a pipeline stage or a
/// replica) that `params` holds, and the states that start as their copies
/// (StateDecl::copyOf: 2BW's previous version, an outer anchor). Other
/// states (optimizer moments, EF memories) keep their initial values.
/// Returns the number of parameters set.
int64_t applyInitParameters(Executor &ex, const Graph &graph,
                            const std::map<std::string, HostTensor> &params);
/// The one line a run with --init-from and --resume prints.
std::string initFromIgnoredLine(const std::string &initFrom, const std::string &checkpoint);

/// Continues `prompt` by `count` bytes with a forward graph whose
/// cross-entropy logits are [B, T, V] over byte ids: feeds the last T bytes
/// in row 0, samples position n-1 with `temperature` (0: greedy).
std::string sampleText(const Graph &forward, const std::map<std::string, HostTensor> &params,
                       const std::string &prompt, int64_t count, double temperature,
                       uint64_t seed);

} // namespace stretto

#endif
