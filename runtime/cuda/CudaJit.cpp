//===- CudaJit.cpp - NVRTC with a persistent cache ------------------------===//
#include "stretto/Runtime/CudaJit.h"
#include "stretto/Runtime/HostJit.h"
#include "exec/JitCache.h"

#include "cuda/DynamicLibrary.h"

#include <atomic>
#include <filesystem>
#include <mutex>
#include <regex>
#include <thread>

namespace fs = std::filesystem;
using namespace stretto;
using namespace stretto::jitcache;

// NVRTC's C API, loaded at run time (nvrtcResult is an int enum, a program
// an opaque pointer).
struct CudaKernelCache::Nvrtc {
  DynamicLibrary lib;
  using Prog = void *;
  int (*version)(int *, int *) = nullptr;
  int (*create)(Prog *, const char *, const char *, int, const char *const *,
                const char *const *) = nullptr;
  int (*compile)(Prog, int, const char *const *) = nullptr;
  int (*logSize)(Prog, size_t *) = nullptr;
  int (*log)(Prog, char *) = nullptr;
  int (*ptxSize)(Prog, size_t *) = nullptr;
  int (*ptx)(Prog, char *) = nullptr;
  int (*cubinSize)(Prog, size_t *) = nullptr;
  int (*cubin)(Prog, char *) = nullptr;
  int (*destroy)(Prog *) = nullptr;
  std::string why, versionText;

  Nvrtc() {
    if (!lib.open({"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                   "/usr/local/cuda/lib64/libnvrtc.so"})) {
      why = "NVRTC not found (libnvrtc.so; is the CUDA toolkit installed?)";
      return;
    }
    auto sym = [&](auto &fn, const char *name) { lib.bind(fn, name); };
    sym(version, "nvrtcVersion");
    sym(create, "nvrtcCreateProgram");
    sym(compile, "nvrtcCompileProgram");
    sym(logSize, "nvrtcGetProgramLogSize");
    sym(log, "nvrtcGetProgramLog");
    sym(ptxSize, "nvrtcGetPTXSize");
    sym(ptx, "nvrtcGetPTX");
    sym(cubinSize, "nvrtcGetCUBINSize");
    sym(cubin, "nvrtcGetCUBIN");
    sym(destroy, "nvrtcDestroyProgram");
    if (!lib.missing().empty())
      why = "libnvrtc lacks " + lib.missing();
    int major = 0, minor = 0;
    if (why.empty() && version(&major, &minor) == 0)
      versionText = std::to_string(major) + "." + std::to_string(minor);
  }
  bool ok() const { return lib.isOpen() && why.empty(); }

  // One compile of `source` for `target` ("sm_90" or "compute_90"); the
  // binary is the cubin for sm_, the PTX for compute_.
  bool run(const std::string &source, const std::string &target, std::string &binary,
           std::string &logText) {
    Prog prog = nullptr;
    if (create(&prog, source.c_str(), "kernels.cu", 0, nullptr, nullptr) != 0) {
      logText = "nvrtcCreateProgram failed";
      return false;
    }
    std::string archOpt = "--gpu-architecture=" + target;
    // 177: a prelude helper the translation unit does not use.
    const char *opts[] = {archOpt.c_str(), "--std=c++17", "--diag-suppress=177",
                          "--ptxas-options=-v"};
    bool isCubin = target.rfind("sm_", 0) == 0;
    int rc = compile(prog, isCubin ? 4 : 3, opts);
    size_t n = 0;
    logSize(prog, &n);
    logText.assign(n, '\0');
    if (n)
      log(prog, logText.data());
    while (!logText.empty() && logText.back() == '\0')
      logText.pop_back();
    bool good = rc == 0;
    if (good) {
      size_t size = 0;
      good = (isCubin ? cubinSize(prog, &size) : ptxSize(prog, &size)) == 0 && size > 0;
      binary.assign(size, '\0');
      if (good)
        good = (isCubin ? cubin(prog, binary.data()) : ptx(prog, binary.data())) == 0;
    }
    destroy(&prog);
    return good;
  }
};

CudaKernelCache::CudaKernelCache(std::string dir) : nvrtc_(new Nvrtc), dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
}

CudaKernelCache::~CudaKernelCache() { delete nvrtc_; }

bool CudaKernelCache::available(std::string &why) const {
  why = nvrtc_->why;
  return nvrtc_->ok();
}

std::string CudaKernelCache::nvrtcVersion() const { return nvrtc_->versionText; }

std::string CudaKernelCache::entryPath(const std::string &source, const std::string &arch) const {
  std::string keyText = "nvrtc " + nvrtc_->versionText + "\n--std=c++17 --diag-suppress=177\n" +
                        arch + "\n" + source;
  return (fs::path(dir_) / ("cu-" + hex(fnv1a64(keyText.data(), keyText.size())))).string();
}

bool CudaKernelCache::compile(const std::string &source, const std::string &arch,
                              CudaBinary &out, std::string &error) {
  if (!nvrtc_->ok()) {
    error = nvrtc_->why;
    return false;
  }
  if (arch.rfind("sm_", 0) != 0 || arch.size() < 5) {
    error = "CUDA arch must look like sm_90, got '" + arch + "'";
    return false;
  }
  out.arch = arch;
  std::string stem = entryPath(source, arch);
  std::string cubinPath = stem + ".cubin", ptxPath = stem + ".ptx", sumPath = stem + ".sum",
              logPath = stem + ".log";
  std::string sumText;
  if (readFile(cubinPath, out.cubin) && readFile(ptxPath, out.ptx) && readFile(sumPath, sumText)) {
    if (sumText == sumOf(out.cubin) + sumOf(out.ptx)) {
      readFile(logPath, out.log);
      ++stats_.hits;
      return true;
    }
    ++stats_.rebuilt; // truncated or overwritten
  }
  std::string log;
  if (!nvrtc_->run(source, arch, out.cubin, log)) {
    // NVRTC reports "kernels.cu(LINE): error: ..."; name the kernel there.
    std::smatch m;
    std::string where = "kernels.cu", culprit;
    if (std::regex_search(log, m, std::regex(R"(kernels\.cu\((\d+)\): error)"))) {
      int line = std::stoi(m[1]);
      culprit = kernelAtLine(source, line);
      where = stem + ".cu:" + std::to_string(line);
    }
    writeFileAtomically(stem + ".cu", source); // kept for the error's location
    error = (culprit.empty() ? std::string("CUDA kernels") : "kernel " + culprit) +
            ": NVRTC failed for " + arch + " at " + where + ":\n" + log;
    return false;
  }
  out.log = log;
  std::string ptxLog;
  if (!nvrtc_->run(source, "compute_" + arch.substr(3), out.ptx, ptxLog)) {
    error = "CUDA kernels: NVRTC compiled the cubin but not the PTX for " + arch + ":\n" + ptxLog;
    return false;
  }
  ++stats_.compiles;
  if (!writeFileAtomically(cubinPath, out.cubin) || !writeFileAtomically(ptxPath, out.ptx) ||
      !writeFileAtomically(logPath, out.log) ||
      !writeFileAtomically(sumPath, sumOf(out.cubin) + sumOf(out.ptx))) {
    error = "cannot store the CUDA cache entry " + stem;
    return false;
  }
  return true;
}

std::vector<std::string> stretto::splitCudaUnit(const std::string &unit,
                                                int parts) {
  // Kernel starts: "// NAME: (" header lines (kernelAtLine's convention).
  std::vector<size_t> starts;
  for (size_t at = 0; at < unit.size();) {
    size_t end = unit.find('\n', at);
    if (end == std::string::npos)
      end = unit.size();
    if (unit.compare(at, 3, "// ") == 0 &&
        unit.substr(at, end - at).find(": (") != std::string::npos)
      starts.push_back(at);
    at = end + 1;
  }
  if (starts.empty() || parts <= 1)
    return {unit};
  const std::string prelude = unit.substr(0, starts[0]);
  const size_t n = starts.size(),
               p = std::min<size_t>(static_cast<size_t>(parts), n);
  std::vector<std::string> out;
  for (size_t k = 0; k < p; ++k) {
    size_t from = starts[k * n / p],
           to = (k + 1) * n / p < n ? starts[(k + 1) * n / p] : unit.size();
    out.push_back(prelude + unit.substr(from, to - from));
  }
  return out;
}

bool stretto::compileCudaUnits(const std::string &dir,
                               const std::vector<std::string> &units,
                               const std::string &arch, int threads,
                               std::vector<CudaBinary> &out, int &hits,
                               std::string &error) {
  out.assign(units.size(), CudaBinary{});
  std::atomic<size_t> next{0};
  std::atomic<int> hitCount{0};
  std::mutex m;
  std::string firstError;
  auto work = [&] {
    CudaKernelCache cache(dir); // one NVRTC handle per thread
    for (size_t k; (k = next++) < units.size();) {
      std::string e;
      if (!cache.compile(units[k], arch, out[k], e)) {
        std::lock_guard<std::mutex> lock(m);
        if (firstError.empty())
          firstError = e;
      }
    }
    hitCount += cache.stats().hits;
  };
  std::vector<std::thread> pool;
  const int n =
      std::max(1, std::min<int>(threads, static_cast<int>(units.size())));
  for (int t = 1; t < n; ++t)
    pool.emplace_back(work);
  work();
  for (std::thread &t : pool)
    t.join();
  hits = hitCount;
  error = firstError;
  return firstError.empty();
}
