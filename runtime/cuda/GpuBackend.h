//===- GpuBackend.h - what the CUDA plan device needs of a GPU (internal) -===//
//
// The CUDA plan device (CudaPlan.cpp) runs a plan through this interface:
// memory, stream-ordered copies and launches, the kernels' functions by
// name, and GEMMs. CudaBackend (CudaPlan.cpp) is the real one: the driver
// API, NVRTC-compiled modules and cuBLASLt. Tests plug in an emulated GPU
// (test/unit/GpuEmulator.h): the same device code runs on the host, with
// runtime/cuda/RuntimeOps.cu compiled as C++ and the fused kernels' C++
// twins, so the device's logic is checked where no GPU is. No MLIR here.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_GPUBACKEND_H
#define STRETTO_RUNTIME_GPUBACKEND_H

#include "cuda/CublasLt.h"
#include "cuda/MultiTensor.h"
#include "stretto/Runtime/PlanExecutor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace stretto {

class GpuBackend {
public:
  using Ptr = unsigned long long; // device address
  virtual ~GpuBackend() = default;
  virtual std::string name() const = 0;
  /// Streaming multiprocessors, for grid sizes; 0 when unknown.
  virtual int multiprocessors() const { return 0; }
  virtual Ptr alloc(size_t bytes) = 0;
  virtual void free(Ptr p) = 0; // after the queued work
  virtual void uploadAsync(Ptr dst, const void *src, size_t bytes) = 0;
  virtual void copyAsync(Ptr dst, Ptr src, size_t bytes) = 0;
  virtual void memsetAsync(Ptr dst, unsigned value, size_t words) = 0;
  virtual void downloadSync(void *dst, Ptr src, size_t bytes) = 0;
  virtual void synchronize() = 0;
  /// The stream work is queued on (a CUstream), for collective libraries
  /// (NCCL); null where there is none (an emulated GPU).
  virtual void *nativeStream() { return nullptr; }
  /// Whether the queued work has finished, without waiting (an emulated
  /// GPU waits and says yes).
  virtual bool streamIdle() {
    synchronize();
    return true;
  }
  /// A runtime op of RuntimeOps.cu / a generated kernel, by name; null when
  /// missing.
  virtual void *opsFunction(const std::string &name) = 0;
  virtual void *modelFunction(const std::string &name) = 0;
  /// Queues fn<<<grid, block>>> with `count` arguments (pointers to each
  /// argument's value, cuLaunchKernel's convention).
  virtual void launch(void *fn, unsigned grid, unsigned block, void **params, int count,
                      const char *what) = 0;
  /// Queues a GEMM (row-major, see GemmCall).
  virtual void gemm(const GemmCall &g, const void *a, const void *b, void *c) = 0;

  /// Whether the GPU has bf16 tensor cores for mma.sync (compute
  /// capability 8.0 or later): the fused attention runs on them.
  virtual bool bf16TensorCores() const { return false; }

  // --- CUDA graphs (stream capture) ---
  /// Whether this GPU can record queued work as a graph.
  virtual bool canRecord() const { return false; }
  /// From here to endRecording the queued work (uploads, copies, memsets,
  /// launches, GEMMs) is recorded, not run: kernel arguments are copied
  /// now, memory is read when the graph runs. Meanwhile nothing may wait
  /// for the stream (synchronize, downloadSync, streamIdle), allocate or
  /// free, and uploads read only hostAlloc'd memory; a backend throws on
  /// those (the capture is then lost).
  virtual void beginRecording() { throw std::runtime_error(name() + " records no graphs"); }
  /// The recorded work as a graph for launchGraph (its id); throws when the
  /// recording failed.
  virtual int endRecording() { throw std::runtime_error(name() + " records no graphs"); }
  /// Ends a recording after an error; nothing recorded runs.
  virtual void abandonRecording() {}
  /// Queues graph `id` (all its work, in the order it was recorded).
  virtual void launchGraph(int id) { (void)id; }
  /// Frees every graph.
  virtual void dropGraphs() {}
  /// Host memory recorded uploads may read (page-locked on a GPU), freed
  /// with the backend.
  virtual void *hostAlloc(size_t bytes) = 0;

  // --- A copy stream (a step's inputs copied up while the one before runs) ---
  /// A mark: recordMark queues it (recorded in a graph: each launch of the
  /// graph records it where the graph reaches it). uploadAfter queues a
  /// copy from hostAlloc'd `src` on a stream of its own, after the work
  /// before the mark's latest record; joinCopies makes the stream wait for
  /// every such copy so far. The defaults (no copy stream): no marks, the
  /// copy queued on the stream.
  virtual int newMark() { return -1; }
  virtual void recordMark(int mark) { (void)mark; }
  virtual void uploadAfter(int mark, Ptr dst, const void *src, size_t bytes) {
    (void)mark;
    uploadAsync(dst, src, bytes);
  }
  virtual void joinCopies() {}

  // --- Work the host does not wait for (queued steps) ---
  /// Queues a copy to `dst` (hostAlloc'd memory), which holds it once a
  /// fence queued after it has passed. The default waits now.
  virtual void downloadAsync(void *dst, Ptr src, size_t bytes) { downloadSync(dst, src, bytes); }
  /// A point in the stream after the work queued so far (a CUDA event):
  /// its ticket, increasing. fenceDone asks without waiting, waitFence
  /// waits for it. Not while recording.
  virtual int64_t fence() { return ++fences; }
  virtual bool fenceDone(int64_t ticket) {
    (void)ticket;
    synchronize();
    return true;
  }
  virtual void waitFence(int64_t ticket) {
    (void)ticket;
    synchronize();
  }

private:
  int64_t fences = 0;
};

/// The compiled runtime over `gpu` (CudaPlan.cpp). Throws like
/// PlanExecutor's constructor. `multi`: the model's same-body element-wise
/// kernels, run as multi-tensor launches (MultiTensor.h) where `gpu` has
/// the multi kernels (their source compiled after the model's).
/// `bf16Halves`: store_bf16 kernels write two bytes an element (their CUDA
/// C as generated); false where they write floats (their C++ twins, or CUDA
/// C compiled with kBf16AsF32Define).
std::unique_ptr<PlanExecutor> makeGpuPlanExecutor(const Graph &graph,
                                                  std::unique_ptr<GpuBackend> gpu,
                                                  GemmPrecision gemm,
                                                  MultiTensorKernels multi = {},
                                                  bool bf16Halves = false);
/// multiTensorKernels(cudaSource) with the chain kernels of `graph`'s
/// update (UpdateChains.h; none with STRETTO_UPDATE_CHAINS=0), or nothing
/// with STRETTO_MULTI_TENSOR=0 (then every kernel launches on its own).
MultiTensorKernels wantedMultiTensorKernels(const std::string &cudaSource, const Graph &graph);
/// Whether store_bf16 kernels keep two bytes an element: yes, unless
/// STRETTO_BF16_STORAGE=0 (then the model's CUDA C is compiled with
/// kBf16AsF32Define in front, and they store floats).
bool wantedBf16Storage();
inline constexpr const char *kBf16AsF32Define = "#define ST_BF16_AS_F32 1\n";

} // namespace stretto

#endif
