//===- RefExecutor.h - the numerical oracle --------------------*- C++ -*-===//
//
// Executes a Graph op by op with plain loops, in f32 or f64. Simple and
// obviously correct rather than fast: every compiled path is tested against
// it. No MLIR here.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_REFEXECUTOR_H
#define STRETTO_REFEXECUTOR_H

#include "stretto/Runtime/Executor.h"
#include "stretto/Runtime/Graph.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace stretto {

struct OpTableCoverage;

enum class Precision { F32, F64 };

class RefExecutor final : public Executor {
public:
  RefExecutor(const Graph &graph, Precision precision);
  ~RefExecutor();
  RefExecutor(const RefExecutor &) = delete;
  RefExecutor &operator=(const RefExecutor &) = delete;

  // (Re)initialise every state from its StateDecl and `seed`; step count := 0.
  void initialize(uint64_t seed) override;

  // One optimizer step on one batch: microStep(inputs), then update().
  // StepCount reads t + 1 during the step, and t counts steps from 0. Throws
  // std::runtime_error on a missing input, a wrong input shape, or an
  // out-of-range id (message names the node and its loc).
  StepResult step(const std::map<std::string, HostTensor> &inputs);

  // Runs the Step phase on one micro-batch and adds its gradients to the
  // step's sums (a throwing call changes nothing).
  StepResult microStep(const std::map<std::string, HostTensor> &inputs) override;
  // Runs the Update phase on the mean gradients of the micro-batches since
  // the last update, then clears them and counts the step.
  void update() override;
  void outerStep() override;

  // Pipeline stages: runs only `nodes` (indices into the Step phase, in
  // order) with values kept in `env`; only the Input nodes among them need
  // inputs. Reads of a state named in `redirect` read the mapped state (2BW:
  // a micro-batch that runs before its version rotated). Writes commit at
  // the end of the call; Grad values are returned, not accumulated.
  StepResult runNodes(const std::vector<int> &nodes, ValueEnv &env,
                      const std::map<std::string, HostTensor> &inputs,
                      const std::map<std::string, std::string> &redirect = {}) override;
  HostTensor envValue(ValueEnv &env, int node) const override;
  // Adds a micro-batch's gradients (from runNodes) to the step's sums.
  void accumulateGrads(const StepResult &r) override;
  void reduceGradSums(const std::function<void(GradSums &)> &reduce, int64_t ranks,
                      bool onDevice = false) override;
  // Any node list runs as it is: nothing to prepare.
  void preparePartialRuns(const std::vector<std::vector<int>> &,
                          const std::vector<int> &) override {}

  // Runs the graph without committing Writes or the step count (for
  // evaluation and finite differences): same results as step() would give.
  // The values of the nodes listed in `probes` are returned too (e.g. the
  // logits, for sampling).
  StepResult evaluate(const std::map<std::string, HostTensor> &inputs,
                      const std::vector<int> &probes = {}) override;

  HostTensor getState(const std::string &name) const override;
  std::string nonFiniteState() const override;
  void setState(const std::string &name, const HostTensor &value) override;
  int64_t stepCount() const override;
  void setStepCount(int64_t t) override;

  void setCollective(Collective fn) override;

  // Compiled kernels (Kernel nodes) by name: fn(inputs, outputs) over f32
  // (or f64) buffers. Only this executor's Precision's element type works.
  using KernelFn = void (*)(const void *const *inputs, void *const *outputs);
  void setKernels(std::map<std::string, KernelFn> kernels);

private:
  friend std::vector<OpTableCoverage> referenceOpTables(); // stretto/Runtime/OpTable.h
  struct Impl;
  Impl *impl;
};

} // namespace stretto

#endif // STRETTO_REFEXECUTOR_H
