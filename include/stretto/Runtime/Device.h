//===- Device.h - which accelerator this process could use -----*- C++ -*-===//
//
// Finds a CUDA driver and device at run time (dlopen of libcuda.so.1, so no
// build or link dependency on CUDA): training falls back to the CPU with a
// one-line message when there is none. No MLIR here.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_DEVICE_H
#define STRETTO_DEVICE_H

#include <string>

namespace stretto {

struct CudaProbe {
  bool available = false; // a driver that initialised and at least one device
  int devices = 0;
  std::string name;   // device 0's name when available
  std::string reason; // why not, in a few words, when not available
};

/// Looks for the CUDA driver and its devices; never throws.
CudaProbe probeCuda();

} // namespace stretto

#endif
