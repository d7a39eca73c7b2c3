//===- CudaDriver.h - a thin CUDA driver-API device (dlopen) ----*- C++ -*-===//
//
// The slice of the driver API the CUDA runtime builds on: the primary
// context of device 0, a stream, modules loaded from cubins (from
// CudaKernelCache), device memory, copies and launches queued on the
// stream. libcuda.so.1 is loaded at run time, so nothing links CUDA; without
// a driver or device, open() returns null and says why. Every failing call
// throws std::runtime_error naming the call and the driver's error. No MLIR
// here.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_CUDADRIVER_H
#define STRETTO_CUDADRIVER_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace stretto {

class CudaDevice {
public:
  /// Device LOCAL_RANK (mod the device count; 0 outside a multi-process run)
  /// with its primary context current on this thread; null (and
  /// `why`) when there is no usable driver or device.
  static std::unique_ptr<CudaDevice> open(std::string &why);
  ~CudaDevice();
  CudaDevice(const CudaDevice &) = delete;
  CudaDevice &operator=(const CudaDevice &) = delete;

  const std::string &name() const { return name_; }
  /// "sm_90" for compute capability 9.0.
  std::string arch() const;
  /// Streaming multiprocessors (132 on an H100 SXM and an H200); 0 if the
  /// driver did not say.
  int multiprocessors() const { return sms_; }

  using Ptr = unsigned long long; // CUdeviceptr
  Ptr alloc(size_t bytes);
  void free(Ptr p);
  void upload(Ptr dst, const void *src, size_t bytes);
  void download(void *dst, Ptr src, size_t bytes);

  /// Loads `cubin` and launches `kernel` with the given pointer arguments
  /// (the generated kernels take only pointers) and waits for it. Throws
  /// std::runtime_error with the driver's error code on failure.
  void launch(const std::string &cubin, const std::string &kernel, const std::vector<Ptr> &args,
              unsigned grid, unsigned block);

  // --- the runtime's interface: everything below is queued on stream() ---
  /// The device's stream (a CUstream), for libraries such as cuBLASLt.
  void *stream() const { return stream_; }
  /// A module loaded from `cubin`, unloaded with the device.
  void *loadModule(const std::string &cubin);
  /// `name` in `module`, or null when it has no such function.
  void *function(void *module, const std::string &name);
  /// Queues fn<<<grid, block, shared>>>(params...) (params: pointers to each
  /// argument's value, as cuLaunchKernel takes them).
  void launchAsync(void *fn, unsigned grid, unsigned block, void **params, unsigned shared = 0,
                   const char *what = "kernel");
  /// Queued copies; uploadAsync's host buffer may be reused once it returns
  /// (pageable memory is staged by the driver).
  void uploadAsync(Ptr dst, const void *src, size_t bytes);
  void copyAsync(Ptr dst, Ptr src, size_t bytes);
  void memsetAsync(Ptr dst, unsigned value, size_t words); // 32-bit words
  /// Waits for the stream, then copies to the host.
  void downloadSync(void *dst, Ptr src, size_t bytes);
  /// Waits for everything queued on the stream.
  void synchronize();
  /// Whether everything queued on the stream has finished (cuStreamQuery;
  /// does not wait). Throws on an error the stream reports.
  bool streamIdle();
  /// Total and free device memory in bytes.
  void memoryInfo(size_t &free, size_t &total);
  /// Makes the device's context current on the calling thread (pipeline
  /// stages and replicas use one device from several threads). Every
  /// method above does so itself; libraries called on the device's stream
  /// (cuBLASLt) call it first.
  void makeCurrent();

  // --- CUDA graphs: the stream's work captured once, then relaunched ---
  /// Whether the driver has the graph entry points (cuStreamBeginCapture
  /// and friends; any CUDA 12 or 13 driver).
  bool canCapture() const { return graphApi_; }
  /// Starts capturing the stream (thread-local mode: a call on this thread
  /// that would break the capture fails instead of running).
  void beginCapture();
  /// Ends the capture and instantiates the graph; returns its id. Throws
  /// with the driver's error when the capture was invalidated.
  int endCapture();
  /// Ends a capture after an error, discarding what was captured.
  void abandonCapture();
  /// Whether the stream is being captured (between beginCapture and the
  /// end of it): nothing may wait for it then.
  bool capturing() const { return capturing_; }
  /// Queues graph `id` on the stream.
  void launchGraph(int id);
  /// Destroys every graph (after the queued work).
  void dropGraphs();
  /// Page-locked host memory (cuMemAllocHost), freed with the device.
  void *hostAlloc(size_t bytes);
  /// Queues a copy into page-locked `dst` (cuMemcpyDtoHAsync): the host
  /// reads it after a fence queued later has passed.
  void downloadAsync(void *dst, Ptr src, size_t bytes);
  /// An event recorded on the stream now; its ticket (1, 2, ...). A ring
  /// of kFenceEvents events: a ticket that old waits for a later point,
  /// never an earlier one.
  int64_t fence();
  bool fenceDone(int64_t ticket); // cuEventQuery: does not wait
  void waitFence(int64_t ticket); // cuEventSynchronize
  static constexpr int kFenceEvents = 64;

  // --- A copy stream: a step's inputs copied up while the step before runs ---
  /// Whether the driver has what the copy stream needs
  /// (cuEventRecordWithFlags, cuStreamWaitEvent).
  bool canCopyAhead() const { return copyApi_; }
  /// A mark (an event): recordMark queues it on the stream (under capture
  /// an external event record node: each launch of the graph records it
  /// where the graph reaches it); uploadAfter queues a copy from
  /// page-locked `src` on the copy stream, after the work before the
  /// mark's latest record; joinCopies makes the stream wait for every copy
  /// queued on the copy stream so far.
  int newMark();
  void recordMark(int mark);
  void uploadAfter(int mark, Ptr dst, const void *src, size_t bytes);
  void joinCopies();

private:
  CudaDevice() = default;
  struct Api;
  std::unique_ptr<Api> api_;
  std::string name_;
  int major_ = 0, minor_ = 0, device_ = 0, sms_ = 0;
  void *context_ = nullptr;
  void *stream_ = nullptr;
  std::vector<void *> modules_;
  bool graphApi_ = false;
  bool capturing_ = false;
  struct Graph {
    void *exec = nullptr;  // CUgraphExec
  };
  std::vector<Graph> graphs_;
  std::vector<void *> hostBlocks_;
  std::vector<void *> fenceEvents_; // CUevents, ticket t at t % kFenceEvents
  int64_t fences_ = 0;
  bool copyApi_ = false;
  void *copyStream_ = nullptr; // made at the first uploadAfter
  std::vector<void *> marks_;  // CUevents, by mark
  void *joinEvent_ = nullptr;  // the copy stream's, for joinCopies
  void check(int rc, const char *what) const;
};

} // namespace stretto

#endif
