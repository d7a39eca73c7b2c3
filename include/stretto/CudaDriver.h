//===- CudaDriver.h - a thin CUDA driver-API device (dlopen) ----*- C++ -*-===//
//
// The smallest slice of the driver API the CUDA runtime will build on: the
// primary context of device 0, loading cubins (from CudaKernelCache),
// device memory, copies, launches and synchronisation. libcuda.so.1 is
// loaded at run time, so nothing links CUDA; without a driver or device,
// open() returns null and says why. No MLIR here.
//
// Not yet the CUDA runtime of issue 4 (no plan executor on the device, no
// streams, no cuBLASLt): CudaKernelTest uses it to run generated kernels on
// a GPU against their C++ twins, and reports itself skipped without one.
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
  /// Device 0 with its primary context current on this thread; null (and
  /// `why`) when there is no usable driver or device.
  static std::unique_ptr<CudaDevice> open(std::string &why);
  ~CudaDevice();
  CudaDevice(const CudaDevice &) = delete;
  CudaDevice &operator=(const CudaDevice &) = delete;

  const std::string &name() const { return name_; }
  /// "sm_90" for compute capability 9.0.
  std::string arch() const;

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

private:
  CudaDevice() = default;
  struct Api;
  std::unique_ptr<Api> api_;
  std::string name_;
  int major_ = 0, minor_ = 0, device_ = 0;
  void *context_ = nullptr;
  void check(int rc, const char *what) const;
};

} // namespace stretto

#endif
