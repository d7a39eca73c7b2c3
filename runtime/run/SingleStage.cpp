//===- SingleStage.cpp - the one-stage run mode ---------------------------===//
//
// A run whose whole step lives on one executor: alone, or as one rank of
// synchronous data parallelism (TrainerOptions::dataParallel), where rank r
// trains parts r·m .. r·m + m − 1 of every step's batch and the ranks
// all-reduce their gradient sums before each update. driveSteps does the
// rest. Also the executor every mode builds (executorFactory).
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/Startup.h"
#include "stretto/Runtime/Trainer.h"

#include "stretto/Runtime/Communicator.h"
#include "stretto/Runtime/Gemm.h"
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Runtime/RunChecks.h"
#include "stretto/Runtime/StepDriver.h"

#include "exec/EnvSwitch.h"

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <stdexcept>

using namespace stretto;

namespace {

/// The sum of the losses of parts [firstPart, firstPart + parts) of each of
/// the first `batches` validation batches: a rank's share of an evaluation
/// of whole step-sized batches, so the validation loss does not depend on
/// the micro-batch or rank count either.
double evaluateLossSum(Executor &ex, DataSource &data, int64_t batches, int64_t firstPart,
                       int64_t parts) {
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i)
    for (int64_t p = firstPart; p < firstPart + parts; ++p)
      sum += ex.evaluate(data.batch(Split::Val, static_cast<uint64_t>(i), p)).outputs.at(0);
  return sum;
}

/// One rank's gradient sums, all-reduced over `dp` in one flat f32 buffer
/// (f64 sums one by one); on a GPU through `onDevice` (NCCL) instead.
void allReduceGradSums(Executor &ex, Communicator &dp, const TrainerOptions &opt) {
  ex.reduceGradSums(
      [&](Executor::GradSums &g) {
        if (!g.device.f32.empty())
          opt.deviceAllReduce(g);
        size_t n = 0;
        for (auto &[p, c] : g.f32)
          n += c;
        std::vector<float> flat;
        flat.reserve(n);
        for (auto &[p, c] : g.f32)
          flat.insert(flat.end(), p, p + c);
        if (!flat.empty()) // every rank takes the same path
          dp.allReduceSum(flat.data(), flat.size());
        size_t off = 0;
        for (auto &[p, c] : g.f32) {
          std::copy(flat.begin() + off, flat.begin() + off + c, p);
          off += c;
        }
        for (auto &[p, c] : g.f64)
          dp.allReduceSum(p, c);
      },
      dp.size(), static_cast<bool>(opt.deviceAllReduce));
}

class SingleStage final : public StepMode {
public:
  SingleStage(const Graph &graph, DataSource &data, const TrainerOptions &opt)
      : graph(graph), data(data), opt(opt), dp(opt.dataParallel),
        ranks(dp ? dp->size() : 1), me(dp ? dp->rank() : 0) {
    exPtr = opt.executorFactory ? opt.executorFactory(graph) : executorFactory(opt)(graph);
    plan = dynamic_cast<PlanExecutor *>(exPtr.get());
    if (plan)
      plan->setProfiling(opt.profile);
    if (plan && lead() && !opt.quiet)
      describeExecutor();
    exPtr->initialize(opt.seed);
  }

  int64_t totalSteps() const override { return opt.steps; }
  bool lead() const override { return me == 0; }
  std::string layout() const override { return "data-parallel ranks " + std::to_string(ranks); }
  int checkpointRank() const override { return -1; }
  bool agree(bool ok) override {
    if (!dp || ranks == 1)
      return ok;
    double bad = ok ? 0 : 1;
    dp->allReduceSum(&bad, 1);
    return bad == 0;
  }
  int64_t start(const std::map<std::string, HostTensor> *init) override {
    if (init)
      applyInitParameters(*exPtr, graph, *init);
    return 0;
  }
  ResumePoint resume() override;
  StepReport step(const StepPlan &plan) override;
  std::map<std::string, HostTensor> parameters() override {
    std::map<std::string, HostTensor> params;
    if (lead())
      for (const StateDecl &s : graph.states)
        if (s.isParam)
          params.emplace(s.name, exPtr->getState(s.name));
    return params;
  }
  std::string checkpointName(int64_t) const override { return opt.outDir + "/checkpoint.bin"; }
  std::string summaryDetail() const override {
    return ranks > 1 ? " (" + std::to_string(ranks) + " data-parallel ranks)" : "";
  }
  std::string report() const override {
    return plan && opt.profile
               ? "\n" + startupReport() +
                     "time by op kind (training steps and evaluations):\n" +
                     plan->profileReport()
               : "";
  }

private:
  void describeExecutor() const;
  void saveCheckpoint(int64_t step);
  void queueTrainStep(int64_t step);

  const Graph &graph;
  DataSource &data;
  const TrainerOptions &opt;
  Communicator *dp;
  const int64_t ranks, me;
  std::unique_ptr<Executor> exPtr;
  PlanExecutor *plan = nullptr;
  const bool queueAhead = envSwitchOn("STRETTO_QUEUE_AHEAD");
  bool queuedAhead = false; // the next step is queued already
};

void SingleStage::describeExecutor() const {
  if (plan->deviceName() != "cpu") {
    std::cout << "device: " << plan->deviceName() << " (CUDA, "
              << (opt.gemmPrecision == GemmPrecision::BF16Operands ? "bf16 storage, bf16"
                  : opt.gemmPrecision == GemmPrecision::BF16         ? "bf16"
                  : opt.gemmPrecision == GemmPrecision::TF32 ? "tf32"
                                                             : "f32")
              << " GEMMs through cuBLASLt)\n";
    const char *graphs = std::getenv("STRETTO_CUDA_GRAPHS");
    std::cout << "CUDA graphs: "
              << (graphs && std::string(graphs) == "0"
                      ? "off (STRETTO_CUDA_GRAPHS=0): every node launched from the host\n"
                  : opt.profile
                      ? "off while profiling (each node is timed on its own)\n"
                      : "each micro-step and update recorded once, then replayed "
                        "(STRETTO_CUDA_GRAPHS=0: off)\n");
  } else {
    // The library first: when STRETTO_GEMM names one that does not load,
    // its error must not follow a half-printed line.
    const std::string &library = gemmLibrary();
    std::cout << "GEMMs: " << library << ", " << omp_get_max_threads()
              << " threads (STRETTO_GEMM=openblas|onednn|mkl chooses)\n";
  }
  const PlanStats &ps = plan->stats();
  std::printf("buffer plan: %.1f MB peak (states, gradient sums and constants %.1f MB, "
              "largest arena %.1f MB; %.1f MB of intermediates without reuse)\n",
              ps.peakBytes() / 1e6, ps.persistentBytes / 1e6,
              std::max(ps.stepArenaBytes, ps.updateArenaBytes) / 1e6, ps.unplannedBytes / 1e6);
}

/// Rank 0 opens the output folder and reads the checkpoint, then sends the
/// others its step and states, so ranks on machines without a shared file
/// system need no copy of it.
ResumePoint SingleStage::resume() {
  const bool root = me == 0;
  std::optional<Checkpoint> c;
  double header[2] = {0, 0}; // 1 read, -1 rank 0 failed; the step
  std::string error;
  if (root) {
    try {
      c = openRun(graph, opt);
      header[0] = 1;
      header[1] = static_cast<double>(c->step);
    } catch (const std::exception &e) {
      error = e.what();
      header[0] = -1;
    }
  }
  if (dp && ranks > 1)
    dp->broadcast(header, sizeof header, 0);
  if (header[0] == -1)
    throw std::runtime_error(root ? error
                                  : "rank 0 could not open the run's checkpoint (its log says "
                                    "why)");
  if (!root) {
    c.emplace();
    c->step = static_cast<int64_t>(header[1]);
  }
  for (const StateDecl &s : graph.states) {
    std::vector<double> v = root ? c->states.at(s.name).data
                                 : std::vector<double>(static_cast<size_t>(numElements(s.shape)));
    if (dp && ranks > 1)
      dp->broadcast(v.data(), v.size() * sizeof(double), 0);
    exPtr->setState(s.name, HostTensor{s.shape, std::move(v)});
  }
  exPtr->setStepCount(c->step);
  return {c->step, opt.outDir + "/checkpoint.bin"};
}

// Step `step`'s micro-batches, queued on the executor.
void SingleStage::queueTrainStep(int64_t step) {
  std::vector<TensorMap> batches;
  for (int64_t k = 0; k < opt.microBatches; ++k)
    batches.push_back(
        data.batch(Split::Train, static_cast<uint64_t>(step - 1), me * opt.microBatches + k));
  exPtr->queueStep(batches);
}

StepReport SingleStage::step(const StepPlan &p) {
  Executor &ex = *exPtr;
  StepReport r;
  // One optimizer step: the micro-batches' gradients, then the update.
  double loss = 0;
  bool stop = p.stopWanted(), updated = false;
  std::string bad;
  if (!dp) {
    // This step (unless it was queued ahead), then, on a GPU, the next one
    // behind it: the device runs on while the host waits for this step's
    // loss and writes it out. Not where the host reads the states or
    // evaluates after this step (a checkpoint, an evaluation, the last
    // step, a stop), nor with STRETTO_QUEUE_AHEAD=0.
    if (!queuedAhead)
      queueTrainStep(p.step);
    queuedAhead =
        queueAhead && ex.queuesSteps() && !p.last && !p.evaluate && !p.checkpoint && !stop;
    if (queuedAhead)
      queueTrainStep(p.step + 1);
    Executor::StepOutcome o = ex.finishStep();
    loss = o.lossSum;
    updated = o.updated;
    bad = o.nonFinite;
  } else {
    for (int64_t k = 0; k < opt.microBatches; ++k)
      loss += ex.microStep(data.batch(Split::Train, static_cast<uint64_t>(p.step - 1),
                                      me * opt.microBatches + k))
                  .outputs.at(0);
    // One flat all-reduce of every gradient sum, then the losses and the
    // stop flag: every rank takes the same step and stops at the same one.
    allReduceGradSums(ex, *dp, opt);
    double shared[2] = {loss, stop ? 1.0 : 0.0};
    dp->allReduceSum(shared, 2);
    loss = shared[0];
    stop = shared[1] > 0;
    if (std::isfinite(loss)) {
      ex.update();
      updated = true;
    }
  }
  loss /= static_cast<double>(opt.microBatches * ranks);
  // A finite loss can still hide a non-finite state (relu(NaN) is 0).
  if (dp && updated)
    bad = ex.nonFiniteState();
  if (!std::isfinite(loss) || !bad.empty()) {
    r.end = StepEnd::Failed;
    r.failure = bad.empty() ? "the loss is " + std::to_string(loss)
                            : "after the update, state " + bad;
    return r;
  }
  r.knowsLoss = lead();
  r.loss = loss;
  r.tokens = static_cast<double>(data.tokensPerBatch() * opt.microBatches * ranks);
  // The host reads the states or evaluates only with no step queued after
  // this one (its work would come first on the device's stream).
  if (queuedAhead && (p.evaluate || p.checkpoint || stop))
    throw std::logic_error("step " + std::to_string(p.step) +
                           ": the next step is queued before this one's states are read");
  if (p.evaluate) { // every rank evaluates its own parts of the batches
    double val = evaluateLossSum(ex, data, opt.evalBatches, me * opt.microBatches,
                                 opt.microBatches);
    if (dp)
      dp->allReduceSum(&val, 1);
    r.valLoss = val / static_cast<double>(opt.evalBatches * opt.microBatches * ranks);
  }
  if (p.checkpoint || stop) {
    saveCheckpoint(p.step);
    r.checkpointed = !opt.outDir.empty();
  }
  r.end = stop ? StepEnd::Stopped : StepEnd::Continue;
  return r;
}

void SingleStage::saveCheckpoint(int64_t step) {
  if (opt.outDir.empty() || !lead())
    return;
  std::map<std::string, HostTensor> states;
  for (const StateDecl &s : graph.states)
    states.emplace(s.name, exPtr->getState(s.name));
  saveRun(opt.outDir, graph, step, opt.seed, states, opt.precision, checkpointMeta(graph, opt));
}

} // namespace

int stretto::runTraining(const Graph &graph, DataSource &data, const TrainerOptions &opt,
                         TrainSummary *summary) {
  try {
    SingleStage mode(graph, data, opt);
    return driveSteps(mode, graph, opt, summary);
  } catch (const std::exception &e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

namespace stretto {

std::function<std::unique_ptr<Executor>(const Graph &)> executorFactory(const TrainerOptions &opt) {
  auto warned = std::make_shared<std::once_flag>();
  return [opt, warned](const Graph &g) -> std::unique_ptr<Executor> {
    if (opt.kernelThreads > 0)
      omp_set_num_threads(opt.kernelThreads);
    if (opt.compiled && opt.cuda) {
      std::string why;
      if (std::unique_ptr<PlanExecutor> p =
              PlanExecutor::onCuda(g, opt.cudaKernels, opt.gemmPrecision, why))
        return p;
      if (opt.cudaRequired)
        throw std::runtime_error("--device=cuda: " + why +
                                 " (--device=auto falls back to the CPU)");
      std::call_once(*warned, [&] { std::cerr << "cuda: " << why << "; training on the CPU\n"; });
    }
    if (opt.compiled)
      return std::make_unique<PlanExecutor>(g, opt.kernels, opt.gemmPrecision);
    auto ref = std::make_unique<RefExecutor>(g, opt.precision);
    ref->setKernels(opt.kernels);
    return ref;
  };
}

} // namespace stretto
