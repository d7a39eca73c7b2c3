//===- CudaDriver.cpp - driver API through dlopen -------------------------===//
#include "stretto/Runtime/CudaDriver.h"

#include "cuda/DynamicLibrary.h"

#include <cstdlib>
#include <stdexcept>

using namespace stretto;

// Driver API entry points by their ABI names (the _v2 names the headers'
// macros select); CUresult is an int enum, handles are opaque pointers.
struct CudaDevice::Api {
  DynamicLibrary lib;
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
  int (*streamCreate)(void **, unsigned) = nullptr;
  int (*streamDestroy)(void *) = nullptr;
  int (*streamSynchronize)(void *) = nullptr;
  int (*streamQuery)(void *) = nullptr;
  int (*htodAsync)(Ptr, const void *, size_t, void *) = nullptr;
  int (*dtodAsync)(Ptr, Ptr, size_t, void *) = nullptr;
  int (*memsetD32Async)(Ptr, unsigned, size_t, void *) = nullptr;
  int (*memGetInfo)(size_t *, size_t *) = nullptr;
  int (*errorName)(int, const char **) = nullptr;
  int (*errorString)(int, const char **) = nullptr;
  // Graphs and page-locked memory (bound apart: a driver without them still
  // runs everything else).
  int (*beginCapture)(void *, int) = nullptr;
  int (*endCapture)(void *, void **) = nullptr;
  int (*graphInstantiate)(void **, void *, unsigned long long) = nullptr;
  int (*graphLaunch)(void *, void *) = nullptr;
  int (*graphExecDestroy)(void *) = nullptr;
  int (*graphDestroy)(void *) = nullptr;
  int (*eventCreate)(void **, unsigned) = nullptr;
  int (*eventRecord)(void *, void *) = nullptr;
  int (*eventSynchronize)(void *) = nullptr;
  int (*eventDestroy)(void *) = nullptr;
  int (*memAllocHost)(void **, size_t) = nullptr;
  int (*memFreeHost)(void *) = nullptr;
  int (*dtohAsync)(void *, Ptr, size_t, void *) = nullptr;
  int (*eventQuery)(void *) = nullptr;
  // The copy stream's (bound apart too).
  int (*eventRecordWithFlags)(void *, void *, unsigned) = nullptr;
  int (*streamWaitEvent)(void *, void *, unsigned) = nullptr;

  bool load() {
    if (!lib.open({"libcuda.so.1"}))
      return false;
    auto sym = [&](auto &fn, const char *name) { lib.bind(fn, name); };
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
    sym(streamCreate, "cuStreamCreate");
    sym(streamDestroy, "cuStreamDestroy_v2");
    sym(streamSynchronize, "cuStreamSynchronize");
    sym(streamQuery, "cuStreamQuery");
    sym(htodAsync, "cuMemcpyHtoDAsync_v2");
    sym(dtodAsync, "cuMemcpyDtoDAsync_v2");
    sym(memsetD32Async, "cuMemsetD32Async");
    sym(memGetInfo, "cuMemGetInfo_v2");
    sym(errorName, "cuGetErrorName");
    sym(errorString, "cuGetErrorString");
    return lib.missing().empty();
  }
  // The ABI names behind cuda.h's macros (cuStreamBeginCapture ->
  // cuStreamBeginCapture_v2, cuEventDestroy -> _v2, cuMemAllocHost -> _v2).
  bool loadGraphs() {
    std::string before = lib.missing();
    auto sym = [&](auto &fn, const char *name) { lib.bind(fn, name); };
    sym(beginCapture, "cuStreamBeginCapture_v2");
    sym(endCapture, "cuStreamEndCapture");
    sym(graphInstantiate, "cuGraphInstantiateWithFlags");
    sym(graphLaunch, "cuGraphLaunch");
    sym(graphExecDestroy, "cuGraphExecDestroy");
    sym(graphDestroy, "cuGraphDestroy");
    sym(eventCreate, "cuEventCreate");
    sym(eventRecord, "cuEventRecord");
    sym(eventSynchronize, "cuEventSynchronize");
    sym(eventDestroy, "cuEventDestroy_v2");
    sym(memAllocHost, "cuMemAllocHost_v2");
    sym(memFreeHost, "cuMemFreeHost");
    sym(dtohAsync, "cuMemcpyDtoHAsync_v2");
    sym(eventQuery, "cuEventQuery");
    return lib.missing() == before;
  }
  bool loadCopyStream() {
    std::string before = lib.missing();
    auto sym = [&](auto &fn, const char *name) { lib.bind(fn, name); };
    sym(eventRecordWithFlags, "cuEventRecordWithFlags");
    sym(streamWaitEvent, "cuStreamWaitEvent");
    return lib.missing() == before;
  }
};

std::unique_ptr<CudaDevice> CudaDevice::open(std::string &why) {
  std::unique_ptr<CudaDevice> d(new CudaDevice);
  d->api_ = std::make_unique<Api>();
  Api &a = *d->api_;
  if (!a.load()) {
    why = a.lib.isOpen() ? "libcuda.so.1 lacks " + a.lib.missing() : "no CUDA driver (libcuda.so.1 not found)";
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
  // One device per local rank of a multi-process run (LOCAL_RANK, as
  // torchrun sets it; Open MPI's and Slurm's local ids too), else device 0.
  int ordinal = 0;
  for (const char *var : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
    if (const char *v = std::getenv(var)) {
      ordinal = std::atoi(v) % count;
      break;
    }
  char name[256] = {0};
  if (a.deviceGet(&d->device_, ordinal) != 0 ||
      a.deviceName(name, sizeof name - 1, d->device_) != 0 ||
      a.deviceAttribute(&d->major_, 75, d->device_) != 0 || // COMPUTE_CAPABILITY_MAJOR
      a.deviceAttribute(&d->minor_, 76, d->device_) != 0 || // COMPUTE_CAPABILITY_MINOR
      a.primaryRetain(&d->context_, d->device_) != 0 || a.setCurrent(d->context_) != 0) {
    why = "cannot open CUDA device " + std::to_string(ordinal);
    return nullptr;
  }
  if (a.streamCreate(&d->stream_, 1 /* CU_STREAM_NON_BLOCKING */) != 0) {
    why = "cannot create a CUDA stream on device " + std::to_string(ordinal);
    return nullptr;
  }
  if (a.deviceAttribute(&d->sms_, 16, d->device_) != 0) // MULTIPROCESSOR_COUNT
    d->sms_ = 0;
  d->name_ = name;
  d->graphApi_ = a.loadGraphs();
  // The copy stream relies on an event recorded under capture (an
  // external event record node) that a stream can wait for: a graph of one
  // such node is captured, launched and waited for once here; where any of
  // it fails, copies stay on the stream.
  auto externalEventsWork = [&a, stream = d->stream_] {
    void *e = nullptr, *graph = nullptr, *exec = nullptr;
    bool ok = a.eventCreate(&e, 2 /* CU_EVENT_DISABLE_TIMING */) == 0 &&
              a.beginCapture(stream, 1 /* THREAD_LOCAL */) == 0;
    if (ok) {
      const bool recorded = a.eventRecordWithFlags(e, stream, 1 /* EXTERNAL */) == 0;
      ok = a.endCapture(stream, &graph) == 0 && recorded && graph &&
           a.graphInstantiate(&exec, graph, 0) == 0 && a.graphLaunch(exec, stream) == 0 &&
           a.streamWaitEvent(stream, e, 0) == 0 && a.streamSynchronize(stream) == 0;
    }
    if (exec)
      a.graphExecDestroy(exec);
    if (graph)
      a.graphDestroy(graph);
    if (e)
      a.eventDestroy(e);
    return ok;
  };
  d->copyApi_ = d->graphApi_ && a.loadCopyStream() && externalEventsWork();
  return d;
}

CudaDevice::~CudaDevice() {
  if (api_ && stream_) {
    api_->streamSynchronize(stream_);
    for (Graph &g : graphs_) {
      api_->graphExecDestroy(g.exec);
    }
    for (void *e : fenceEvents_)
      if (e)
        api_->eventDestroy(e);
    if (copyStream_) {
      api_->streamSynchronize(copyStream_);
      api_->streamDestroy(copyStream_);
    }
    for (void *e : marks_)
      api_->eventDestroy(e);
    if (joinEvent_)
      api_->eventDestroy(joinEvent_);
    api_->streamDestroy(stream_);
  }
  if (api_)
    for (void *p : hostBlocks_)
      api_->memFreeHost(p);
  if (api_)
    for (void *m : modules_)
      api_->moduleUnload(m);
  if (api_ && context_)
    api_->primaryRelease(device_);
  // libcuda stays loaded: unloading the driver after cuInit is not supported.
}

std::string CudaDevice::arch() const {
  return "sm_" + std::to_string(major_) + std::to_string(minor_);
}

void CudaDevice::check(int rc, const char *what) const {
  if (rc == 0)
    return;
  const char *name = nullptr, *text = nullptr;
  std::string msg = std::string(what) + " failed with CUDA error " + std::to_string(rc);
  if (api_->errorName && api_->errorName(rc, &name) == 0 && name)
    msg += std::string(" (") + name;
  if (name && api_->errorString && api_->errorString(rc, &text) == 0 && text)
    msg += std::string(": ") + text;
  if (name)
    msg += ")";
  throw std::runtime_error(msg);
}

void *CudaDevice::loadModule(const std::string &cubin) {
  makeCurrent();
  void *module = nullptr;
  check(api_->moduleLoadData(&module, cubin.data()), "cuModuleLoadData");
  modules_.push_back(module);
  return module;
}

void *CudaDevice::function(void *module, const std::string &name) {
  void *fn = nullptr;
  return api_->moduleGetFunction(&fn, module, name.c_str()) == 0 ? fn : nullptr;
}

void CudaDevice::launchAsync(void *fn, unsigned grid, unsigned block, void **params,
                             unsigned shared, const char *what) {
  makeCurrent();
  int rc = api_->launchKernel(fn, grid, 1, 1, block, 1, 1, shared, stream_, params, nullptr);
  if (rc != 0)
    check(rc, (std::string("launch of ") + what).c_str());
}

void CudaDevice::uploadAsync(Ptr dst, const void *src, size_t bytes) {
  makeCurrent();
  if (bytes)
    check(api_->htodAsync(dst, src, bytes, stream_), "cuMemcpyHtoDAsync");
}

void CudaDevice::copyAsync(Ptr dst, Ptr src, size_t bytes) {
  makeCurrent();
  if (bytes && dst != src)
    check(api_->dtodAsync(dst, src, bytes, stream_), "cuMemcpyDtoDAsync");
}

void CudaDevice::memsetAsync(Ptr dst, unsigned value, size_t words) {
  makeCurrent();
  if (words)
    check(api_->memsetD32Async(dst, value, words, stream_), "cuMemsetD32Async");
}

void CudaDevice::downloadSync(void *dst, Ptr src, size_t bytes) {
  makeCurrent();
  synchronize();
  if (bytes)
    check(api_->dtoh(dst, src, bytes), "cuMemcpyDtoH");
}

void CudaDevice::synchronize() {
  makeCurrent();
  check(api_->streamSynchronize(stream_), "cuStreamSynchronize");
}

bool CudaDevice::streamIdle() {
  makeCurrent();
  constexpr int kNotReady = 600; // CUDA_ERROR_NOT_READY
  int rc = api_->streamQuery(stream_);
  if (rc == kNotReady)
    return false;
  check(rc, "cuStreamQuery");
  return true;
}

void CudaDevice::makeCurrent() {
  thread_local void *current = nullptr;
  if (current == context_)
    return;
  check(api_->setCurrent(context_), "cuCtxSetCurrent");
  current = context_;
}

void CudaDevice::memoryInfo(size_t &free, size_t &total) {
  makeCurrent();
  check(api_->memGetInfo(&free, &total), "cuMemGetInfo");
}

CudaDevice::Ptr CudaDevice::alloc(size_t bytes) {
  makeCurrent();
  Ptr p = 0;
  check(api_->memAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
  return p;
}

void CudaDevice::free(Ptr p) {
  makeCurrent(); check(api_->memFree(p), "cuMemFree"); }

void CudaDevice::upload(Ptr dst, const void *src, size_t bytes) {
  makeCurrent();
  check(api_->htod(dst, src, bytes), "cuMemcpyHtoD");
}

void CudaDevice::download(void *dst, Ptr src, size_t bytes) {
  makeCurrent();
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

void CudaDevice::beginCapture() {
  makeCurrent();
  if (!graphApi_)
    throw std::runtime_error("this CUDA driver has no graph API");
  constexpr int kThreadLocal = 1; // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
  check(api_->beginCapture(stream_, kThreadLocal), "cuStreamBeginCapture");
  capturing_ = true;
}

int CudaDevice::endCapture() {
  makeCurrent();
  void *graph = nullptr;
  capturing_ = false;
  check(api_->endCapture(stream_, &graph), "cuStreamEndCapture");
  Graph g;
  int rc = api_->graphInstantiate(&g.exec, graph, 0);
  api_->graphDestroy(graph); // the executable graph keeps what it needs
  check(rc, "cuGraphInstantiateWithFlags");
  graphs_.push_back(g);
  return static_cast<int>(graphs_.size()) - 1;
}

void CudaDevice::abandonCapture() {
  makeCurrent();
  void *graph = nullptr;
  capturing_ = false;
  if (api_->endCapture(stream_, &graph) == 0 && graph)
    api_->graphDestroy(graph);
}

int CudaDevice::newMark() {
  makeCurrent();
  void *e = nullptr;
  check(api_->eventCreate(&e, 2 /* CU_EVENT_DISABLE_TIMING */), "cuEventCreate");
  marks_.push_back(e);
  return static_cast<int>(marks_.size()) - 1;
}

void CudaDevice::recordMark(int mark) {
  makeCurrent();
  // Under capture an external event record node: each launch of the graph
  // records the event where the graph reaches it.
  check(api_->eventRecordWithFlags(marks_.at(static_cast<size_t>(mark)), stream_,
                                   capturing_ ? 1u /* CU_EVENT_RECORD_EXTERNAL */ : 0u),
        "cuEventRecordWithFlags");
}

void CudaDevice::uploadAfter(int mark, Ptr dst, const void *src, size_t bytes) {
  makeCurrent();
  if (!copyStream_)
    check(api_->streamCreate(&copyStream_, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");
  check(api_->streamWaitEvent(copyStream_, marks_.at(static_cast<size_t>(mark)), 0),
        "cuStreamWaitEvent");
  if (bytes)
    check(api_->htodAsync(dst, src, bytes, copyStream_), "cuMemcpyHtoDAsync");
}

void CudaDevice::joinCopies() {
  makeCurrent();
  if (!copyStream_)
    return;
  if (!joinEvent_)
    check(api_->eventCreate(&joinEvent_, 2 /* CU_EVENT_DISABLE_TIMING */), "cuEventCreate");
  check(api_->eventRecord(joinEvent_, copyStream_), "cuEventRecord");
  check(api_->streamWaitEvent(stream_, joinEvent_, 0), "cuStreamWaitEvent");
}

void CudaDevice::launchGraph(int id) {
  makeCurrent();
  Graph &g = graphs_.at(static_cast<size_t>(id));
  check(api_->graphLaunch(g.exec, stream_), "cuGraphLaunch");
}

void CudaDevice::dropGraphs() {
  synchronize();
  for (Graph &g : graphs_) {
    api_->graphExecDestroy(g.exec);
  }
  graphs_.clear();
}

void CudaDevice::downloadAsync(void *dst, Ptr src, size_t bytes) {
  makeCurrent();
  check(api_->dtohAsync(dst, src, bytes, stream_), "cuMemcpyDtoHAsync");
}

int64_t CudaDevice::fence() {
  makeCurrent();
  if (!graphApi_)
    throw std::runtime_error("this CUDA driver has no events");
  const int64_t ticket = ++fences_;
  const size_t slot = static_cast<size_t>(ticket % kFenceEvents);
  if (fenceEvents_.size() <= slot)
    fenceEvents_.resize(kFenceEvents, nullptr);
  if (!fenceEvents_[slot])
    check(api_->eventCreate(&fenceEvents_[slot], 2 /* CU_EVENT_DISABLE_TIMING */), "cuEventCreate");
  check(api_->eventRecord(fenceEvents_[slot], stream_), "cuEventRecord");
  return ticket;
}

bool CudaDevice::fenceDone(int64_t ticket) {
  makeCurrent();
  void *e = fenceEvents_.at(static_cast<size_t>(ticket % kFenceEvents));
  const int rc = api_->eventQuery(e);
  if (rc == 600) // CUDA_ERROR_NOT_READY
    return false;
  check(rc, "cuEventQuery");
  return true;
}

void CudaDevice::waitFence(int64_t ticket) {
  makeCurrent();
  check(api_->eventSynchronize(fenceEvents_.at(static_cast<size_t>(ticket % kFenceEvents))),
        "cuEventSynchronize");
}

void *CudaDevice::hostAlloc(size_t bytes) {
  makeCurrent();
  void *p = nullptr;
  check(api_->memAllocHost(&p, bytes ? bytes : 1), "cuMemAllocHost");
  hostBlocks_.push_back(p);
  return p;
}
