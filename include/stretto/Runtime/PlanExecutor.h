//===- PlanExecutor.h - the compiled runtime -------------------*- C++ -*-===//
//
// Runs a Graph whose elementwise chains were fused into compiled kernels
// (Kernel nodes) and whose matmuls became GEMMs (Gemm nodes), in f32 over
// planned buffers, on the host or on a CUDA GPU:
//   * every intermediate lives in one arena per phase at an offset chosen by
//     liveness (a value's bytes are reused once its last reader ran); the
//     plan reports its peak;
//   * states, gradient sums and constants are persistent f32 buffers; Reads
//     alias the state, Reshape/Transfer alias their operand (no copies);
//   * host: GEMMs go to BLAS (OpenBLAS), row ops (softmax, norms, attention,
//     cross-entropy, embedding, layout ops) are the runtime's own OpenMP
//     loops, fused kernels are called through their C ABI;
//   * CUDA (onCuda): the same plan in device memory, the generated kernels'
//     CUDA C and the runtime's own ops compiled by NVRTC, GEMMs through
//     cuBLASLt, everything queued on one stream;
//   * GEMMs in f32, or in bf16 (operands rounded to bf16, products summed in
//     f32, results f32) while weights, optimizer states and every other op
//     stay f32 (f32 master weights);
//   * evaluation runs only the nodes its outputs need (no backward pass).
// The reference executor is its oracle (CompiledPathTest, PlanExecutorTest,
// CudaPlanTest on a GPU). No MLIR here.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_PLANEXECUTOR_H
#define STRETTO_PLANEXECUTOR_H

#include "stretto/Runtime/Executor.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace stretto {

/// Memory figures of a plan, in bytes.
struct PlanStats {
  int64_t stepArenaBytes = 0;   // peak of the Step phase's intermediates
  int64_t updateArenaBytes = 0; // peak of the Update phase's intermediates
  int64_t unplannedBytes = 0;   // the same intermediates without reuse (sum)
  int64_t persistentBytes = 0;  // states, gradient sums, constants
  int64_t graphsRecorded = 0;   // CUDA graphs captured (micro-steps, updates)
  int64_t graphLaunches = 0;    // runs replayed from them
  int64_t peakBytes() const {
    return persistentBytes + std::max(stepArenaBytes, updateArenaBytes);
  }
};

/// The element type GEMMs read their operands in (results are f32).
/// GEMM operands: f32; bf16 (rounded, f32 accumulation); or f32 on TF32
/// tensor cores (the CUDA runtime only: cuBLASLt's CUBLAS_COMPUTE_32F_FAST_TF32).
/// BF16Operands: a plan with bf16 storage (train-mixed-precision), whose
/// GEMM operands are bf16 values already: the graph's GEMMs run on bf16
/// tensor cores (converting loses nothing), while attention's inner
/// products (P, dS: f32 statistics of the op) are not rounded, as in the
/// reference executor. On the CPU it computes what F32 computes.
enum class GemmPrecision { F32, BF16, TF32, BF16Operands };

/// The generated kernels for a CUDA device: the CUDA C translation unit of
/// the model's fused kernels (CompiledKernels::cudaSource) and where NVRTC's
/// results are cached.
struct CudaKernelSet {
  std::string source;
  std::string cacheDir;
};

/// The CUDA runtime's own kernels (runtime/cuda/RuntimeOps.cu after the
/// shared math) in one unit: for --dump and the NVRTC tests.
std::string cudaRuntimeSource();
/// The same kernels as the units the runtime compiles at start-up, in
/// parallel: cudaRuntimeSource() keeping one part of them each
/// (RuntimeOps.cu's ST_OPS_PART), every kernel in exactly one.
std::vector<std::string> cudaRuntimeUnits();
/// The CUDA runtime's st_unary(op, x) and st_binary(op, a, b): each
/// element-wise op's code (opCode) dispatched to its scalar function,
/// generated from the op table (stretto/Ops.def).
std::string runtimeOpDispatch();

class PlanExecutor final : public Executor {
public:
  using KernelFn = void (*)(const void *const *inputs, void *const *outputs);

  /// The host device. Throws std::runtime_error (naming the node) for what
  /// this runtime does not run: f64/bf16 values, a Kernel node without a
  /// function in `kernels`.
  PlanExecutor(const Graph &graph, std::map<std::string, KernelFn> kernels,
               GemmPrecision gemm = GemmPrecision::F32);
  /// CUDA device 0: null with `why` set when there is no usable driver,
  /// device, NVRTC or cuBLASLt; throws like the host constructor, and when
  /// a kernel does not compile.
  static std::unique_ptr<PlanExecutor> onCuda(const Graph &graph, const CudaKernelSet &kernels,
                                              GemmPrecision gemm, std::string &why);
  ~PlanExecutor() override;

  /// "cpu" or the GPU's name.
  std::string deviceName() const;

  /// The ISA the host runtime's own row loops (softmax, norms, attention's
  /// rows, column sums) run: the best this CPU has, capped by
  /// STRETTO_RUNTIME_ISA=baseline|avx2|avx512; throws on another value.
  static const char *rowLoopIsaName();

  /// Whether this runtime runs `graph`; if not, `why` says what it lacks.
  static bool supports(const Graph &graph, std::string &why);

  void initialize(uint64_t seed) override;
  StepResult microStep(const TensorMap &inputs) override;
  void update() override;
  StepResult evaluate(const TensorMap &inputs, const std::vector<int> &probes = {}) override;
  HostTensor getState(const std::string &name) const override;
  std::string nonFiniteState() const override;
  // On a GPU that records graphs: queueStep replays the step's graphs and
  // returns without waiting (Executor::queueStep).
  bool queuesSteps() const override;
  void queueStep(const std::vector<TensorMap> &batches) override;
  StepOutcome finishStep() override;
  void setState(const std::string &name, const HostTensor &value) override;
  int64_t stepCount() const override;
  void setStepCount(int64_t t) override;
  void outerStep() override;
  void setCollective(Collective fn) override;

  // Pipeline stages. The parts (e.g. a stage's forward and backward node
  // lists) are planned as one sequence, so values the forward part makes
  // for the backward part keep their offsets; each micro-batch's ValueEnv
  // holds its own arena. Reads copy the state (an update may land between
  // the parts); `keep` lists nodes read after their part (sends).
  void preparePartialRuns(const std::vector<std::vector<int>> &parts,
                          const std::vector<int> &keep) override;
  StepResult runNodes(const std::vector<int> &nodes, ValueEnv &env, const TensorMap &inputs,
                      const std::map<std::string, std::string> &redirect = {}) override;
  HostTensor envValue(ValueEnv &env, int node) const override;
  void accumulateGrads(const StepResult &r) override;
  void reduceGradSums(const std::function<void(GradSums &)> &reduce, int64_t ranks,
                      bool onDevice = false) override;

  const PlanStats &stats() const;
  /// The plan, one line per node: what runs, its buffer (arena offset or
  /// alias) and when that buffer dies. For --dump.
  std::string describe() const;

  /// Per-op-kind wall time since the last reset (profiling on).
  void setProfiling(bool on);
  std::string profileReport() const;

  struct Impl; // runtime/exec/PlanImpl.h
  /// For the runtime's devices (PlanImpl.h builds an Impl).
  explicit PlanExecutor(std::unique_ptr<Impl> impl);

private:
  std::unique_ptr<Impl> impl;
};

} // namespace stretto

#endif
