//===- CudaDriver.cpp - driver API through dlopen -------------------------===//
#include "stretto/CudaDriver.h"

#include <dlfcn.h>

#include <stdexcept>

using namespace stretto;

// Driver API entry points by their ABI names (the _v2 names the headers'
// macros select); CUresult is an int enum, handles are opaque pointers.
struct CudaDevice::Api {
  void *lib = nullptr;
  int (*init)(unsigned) = nullptr;
  int (*deviceGet)(int *, int) = nullptr;
  int (*deviceCount)(int *) = nullptr;
  int (*deviceName)(char *, int, int) = nullptr;
  int (*deviceAttribute)(int *, int, int) = nullptr;
  int (*primaryRetain)(void **, int) = nullptr;
  int (*primaryRelease)(int) = nullptr;
  int (*setCurrent)(void *) = nullptr;
  int (*synchronize)() = nullptr;
  int (*memAlloc)(Ptr *, size_t) = nullptr;
  int (*memFree)(Ptr) = nullptr;
  int (*htod)(Ptr, const void *, size_t) = nullptr;
  int (*dtoh)(void *, Ptr, size_t) = nullptr;
  int (*moduleLoadData)(void **, const void *) = nullptr;
  int (*moduleUnload)(void *) = nullptr;
  int (*moduleGetFunction)(void **, void *, const char *) = nullptr;
  int (*launchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                      unsigned, void *, void **, void **) = nullptr;
  std::string missing;

  bool load() {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      return false;
    auto sym = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && missing.empty())
        missing = name;
    };
    sym(init, "cuInit");
    sym(deviceGet, "cuDeviceGet");
    sym(deviceCount, "cuDeviceGetCount");
    sym(deviceName, "cuDeviceGetName");
    sym(deviceAttribute, "cuDeviceGetAttribute");
    sym(primaryRetain, "cuDevicePrimaryCtxRetain");
    sym(primaryRelease, "cuDevicePrimaryCtxRelease_v2");
    sym(setCurrent, "cuCtxSetCurrent");
    sym(synchronize, "cuCtxSynchronize");
    sym(memAlloc, "cuMemAlloc_v2");
    sym(memFree, "cuMemFree_v2");
    sym(htod, "cuMemcpyHtoD_v2");
    sym(dtoh, "cuMemcpyDtoH_v2");
    sym(moduleLoadData, "cuModuleLoadData");
    sym(moduleUnload, "cuModuleUnload");
    sym(moduleGetFunction, "cuModuleGetFunction");
    sym(launchKernel, "cuLaunchKernel");
    return missing.empty();
  }
};

std::unique_ptr<CudaDevice> CudaDevice::open(std::string &why) {
  std::unique_ptr<CudaDevice> d(new CudaDevice);
  d->api_ = std::make_unique<Api>();
  Api &a = *d->api_;
  if (!a.load()) {
    why = a.lib ? "libcuda.so.1 lacks " + a.missing : "no CUDA driver (libcuda.so.1 not found)";
    return nullptr;
  }
  int count = 0;
  if (int rc = a.init(0); rc != 0) {
    why = "cuInit failed with CUDA error " + std::to_string(rc) + " (no usable GPU)";
    return nullptr;
  }
  if (a.deviceCount(&count) != 0 || count == 0) {
    why = "the CUDA driver reports no device";
    return nullptr;
  }
  char name[256] = {0};
  if (a.deviceGet(&d->device_, 0) != 0 || a.deviceName(name, sizeof name - 1, d->device_) != 0 ||
      a.deviceAttribute(&d->major_, 75, d->device_) != 0 || // COMPUTE_CAPABILITY_MAJOR
      a.deviceAttribute(&d->minor_, 76, d->device_) != 0 || // COMPUTE_CAPABILITY_MINOR
      a.primaryRetain(&d->context_, d->device_) != 0 || a.setCurrent(d->context_) != 0) {
    why = "cannot open CUDA device 0";
    return nullptr;
  }
  d->name_ = name;
  return d;
}

CudaDevice::~CudaDevice() {
  if (api_ && context_)
    api_->primaryRelease(device_);
  // libcuda stays loaded: unloading the driver after cuInit is not supported.
}

std::string CudaDevice::arch() const {
  return "sm_" + std::to_string(major_) + std::to_string(minor_);
}

void CudaDevice::check(int rc, const char *what) const {
  if (rc != 0)
    throw std::runtime_error(std::string(what) + " failed with CUDA error " + std::to_string(rc));
}

CudaDevice::Ptr CudaDevice::alloc(size_t bytes) {
  Ptr p = 0;
  check(api_->memAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
  return p;
}

void CudaDevice::free(Ptr p) { check(api_->memFree(p), "cuMemFree"); }

void CudaDevice::upload(Ptr dst, const void *src, size_t bytes) {
  check(api_->htod(dst, src, bytes), "cuMemcpyHtoD");
}

void CudaDevice::download(void *dst, Ptr src, size_t bytes) {
  check(api_->dtoh(dst, src, bytes), "cuMemcpyDtoH");
}

void CudaDevice::launch(const std::string &cubin, const std::string &kernel,
                        const std::vector<Ptr> &args, unsigned grid, unsigned block) {
  void *module = nullptr, *fn = nullptr;
  check(api_->moduleLoadData(&module, cubin.data()), "cuModuleLoadData");
  int rc = api_->moduleGetFunction(&fn, module, kernel.c_str());
  if (rc != 0) {
    api_->moduleUnload(module);
    check(rc, ("cuModuleGetFunction(" + kernel + ")").c_str());
  }
  std::vector<Ptr> values = args;
  std::vector<void *> params;
  for (Ptr &v : values)
    params.push_back(&v);
  rc = api_->launchKernel(fn, grid, 1, 1, block, 1, 1, 0, nullptr, params.data(), nullptr);
  if (rc == 0)
    rc = api_->synchronize();
  api_->moduleUnload(module);
  check(rc, ("launch of " + kernel).c_str());
}
