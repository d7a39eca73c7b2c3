//===- Executor.h - what the trainer needs from an executor ----*- C++ -*-===//
//
// The training loop drives an executor through this interface: the reference
// executor (RefExecutor, the oracle) and the compiled plan executor
// (PlanExecutor, fused kernels + BLAS over planned buffers) both implement it.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_EXECUTOR_H
#define STRETTO_EXECUTOR_H

#include "stretto/Runtime/Graph.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace stretto {

// A host tensor. Values are kept in double for transport; executors compute
// in their own element type and round on the way in.
struct HostTensor {
  Shape shape;
  std::vector<double> data;
};

struct StepResult {
  std::vector<double> outputs;                  // Yield operands (scalars)
  std::map<std::string, HostTensor> grads;      // from Grad sinks
  std::map<int, HostTensor> probes;             // evaluate(..., probes)
};

using TensorMap = std::map<std::string, HostTensor>;

/// The values of one run of a phase, kept across partial runs (a pipeline
/// stage runs a micro-batch's forward nodes, then later its backward nodes).
class ValueEnv {
public:
  template <typename T> std::vector<std::vector<T>> &values();

  // The compiled runtime's: this micro-batch's arena (on the executor's
  // device; the env must not outlive the executor) and value pointers.
  std::shared_ptr<float> arena;
  int64_t arenaFloats = 0;
  std::vector<float *> pointers;

private:
  std::vector<std::vector<float>> f32;
  std::vector<std::vector<double>> f64;
};
template <> inline std::vector<std::vector<float>> &ValueEnv::values<float>() { return f32; }
template <> inline std::vector<std::vector<double>> &ValueEnv::values<double>() { return f64; }

class Executor {
public:
  virtual ~Executor() = default;
  // (Re)initialise every state from its StateDecl and `seed`; step count := 0.
  virtual void initialize(uint64_t seed) = 0;
  // Runs the Step phase on one micro-batch and adds its gradients to the
  // step's sums (a throwing call changes nothing).
  virtual StepResult microStep(const TensorMap &inputs) = 0;
  // Runs the Update phase on the mean gradients of the micro-batches since
  // the last update, then clears them and counts the step.
  virtual void update() = 0;
  // The step's results without committing anything; the values of the nodes
  // in `probes` are returned too.
  virtual StepResult evaluate(const TensorMap &inputs, const std::vector<int> &probes = {}) = 0;
  virtual HostTensor getState(const std::string &name) const = 0;
  virtual void setState(const std::string &name, const HostTensor &value) = 0;
  // The first state (in the graph's order) holding an inf or NaN, as
  // "'name' holds nan"; empty when every state is finite. The trainers ask
  // after every update, so that a run stops at the step where a state turns
  // non-finite (a finite loss can hide it: relu(NaN) is 0 here).
  virtual std::string nonFiniteState() const = 0;
  virtual int64_t stepCount() const = 0;
  virtual void setStepCount(int64_t t) = 0;

  // Whole optimizer steps whose results are read later: queueStep runs a
  // micro-step on each batch, then the update, and finishStep gives the
  // oldest queued step's outcome. An executor on a GPU (queuesSteps())
  // returns from queueStep without waiting for the device: the losses and
  // the states' check stay there until finishStep waits for them, so the
  // host can queue the next step while this one runs. Such an executor runs
  // the update even when the loss turns out non-finite (the trainer then
  // stops without checkpointing that state); the default here runs the
  // step at once and skips the update of a non-finite loss, as the trainer
  // did with microStep and update.
  struct StepOutcome {
    double lossSum = 0;    // the micro-batches' first outputs (losses), added in order
    std::string nonFinite; // nonFiniteState() after the update ("": all finite)
    bool updated = false;
  };
  virtual bool queuesSteps() const { return false; }
  virtual void queueStep(const std::vector<TensorMap> &batches) {
    StepOutcome o;
    for (const TensorMap &b : batches)
      o.lossSum += microStep(b).outputs.at(0);
    if (o.lossSum == o.lossSum && o.lossSum - o.lossSum == 0) { // finite
      update();
      o.updated = true;
      o.nonFinite = nonFiniteState();
    }
    done.push_back(std::move(o));
  }
  virtual StepOutcome finishStep() {
    if (done.empty())
      throw std::runtime_error("finishStep: no step is queued");
    StepOutcome o = std::move(done.front());
    done.erase(done.begin());
    return o;
  }
  // Runs the Outer phase (local-step methods) once.
  virtual void outerStep() = 0;
  // Collectives (gossip): a GossipMix node calls `fn(node, value)` and takes
  // its result; `node` carries the op's attributes (alpha). Without a hook
  // it is the identity: a single replica has no peers.
  using Collective = std::function<HostTensor(const Node &, const HostTensor &)>;
  virtual void setCollective(Collective fn) = 0;

  // Pipeline stages: runs only `nodes` (indices into the Step phase, in
  // order) with values kept in `env` across calls; only the Input nodes
  // among them need inputs. Reads of a state named in `redirect` read the
  // mapped state (2BW). Writes commit at the end of the call; Grad values
  // are returned, not accumulated. Executors that plan ahead are told every
  // node list first (and the nodes whose values are read after their call).
  virtual void preparePartialRuns(const std::vector<std::vector<int>> &parts,
                                  const std::vector<int> &keep) = 0;
  virtual StepResult runNodes(const std::vector<int> &nodes, ValueEnv &env,
                              const TensorMap &inputs,
                              const std::map<std::string, std::string> &redirect = {}) = 0;
  virtual HostTensor envValue(ValueEnv &env, int node) const = 0;
  // Adds a micro-batch's gradients (from runNodes) to the step's sums.
  virtual void accumulateGrads(const StepResult &r) = 0;

  // Data parallelism: hands every gradient sum of the step so far (in host
  // memory, in the executor's element type) to `reduce`, which may change
  // them in place (an all-reduce over ranks), and counts `ranks` times the
  // micro-batches, so update() takes the mean over every rank's.
  struct GradSums {
    std::vector<std::pair<float *, size_t>> f32;
    std::vector<std::pair<double *, size_t>> f64;
    /// With `onDevice` on an executor whose sums live on a GPU: the sums'
    /// device buffers (f32 elements at device addresses), the stream the
    /// executor queues its work on (a CUstream; null on an emulated GPU)
    /// and a poll that says that stream has drained; f32 and f64 are then
    /// empty, nothing is staged through the host, and `reduce` reduces the
    /// buffers in place (NCCL) before it returns.
    struct OnDevice {
      std::vector<std::pair<float *, size_t>> f32;
      void *stream = nullptr;
      std::function<bool()> idle;
    } device;
  };
  virtual void reduceGradSums(const std::function<void(GradSums &)> &reduce, int64_t ranks,
                              bool onDevice = false) = 0;

private:
  std::vector<StepOutcome> done; // queueStep's outcomes (the default)
};

} // namespace stretto

#endif
