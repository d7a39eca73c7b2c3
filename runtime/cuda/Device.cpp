//===- Device.cpp - CUDA driver probe -------------------------------------===//
#include "stretto/Runtime/Device.h"

#include <dlfcn.h>

#include <string>

using namespace stretto;

CudaProbe stretto::probeCuda() {
  CudaProbe p;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    p.reason = "no CUDA driver (libcuda.so.1 not found)";
    return p;
  }
  // The driver API's C signatures (CUresult is an int enum, CUdevice an int).
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int *);
  using GetFn = int (*)(int *, int);
  using NameFn = int (*)(char *, int, int);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
  auto get = reinterpret_cast<GetFn>(dlsym(lib, "cuDeviceGet"));
  auto name = reinterpret_cast<NameFn>(dlsym(lib, "cuDeviceGetName"));
  if (!init || !count || !get || !name) {
    p.reason = "libcuda.so.1 lacks the driver API";
  } else if (int rc = init(0); rc != 0) {
    p.reason = "cuInit failed with CUDA error " + std::to_string(rc) + " (no usable GPU)";
  } else if (count(&p.devices) != 0 || p.devices == 0) {
    p.reason = "the CUDA driver reports no device";
  } else {
    int dev = 0;
    char buf[256] = {0};
    if (get(&dev, 0) == 0 && name(buf, sizeof buf - 1, dev) == 0)
      p.name = buf;
    p.available = true;
  }
  // The driver stays loaded: unloading it after cuInit is not supported.
  if (!p.available)
    dlclose(lib);
  return p;
}
