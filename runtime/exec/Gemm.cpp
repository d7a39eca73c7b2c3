//===- Gemm.cpp - the GEMM library under the compiled runtime -------------===//

#include "stretto/Runtime/Gemm.h"

#include <cblas.h>
#include <dlfcn.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <stdexcept>

using namespace stretto;

namespace {

// oneDNN's dnnl_sgemm (dnnl.h, oneDNN 2.x and 3.x): row-major, dnnl_dim_t
// is int64_t, returns dnnl_status_t (0: success).
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t,
                          const float *, int64_t, float, float *, int64_t);
struct DnnlVersion {
  int major, minor, patch;
  const char *hash;
  unsigned cpuRuntime, gpuRuntime;
};

std::mutex gMutex;
GemmLibrary *gChoice = nullptr; // set under gMutex; read without it after

std::string openblasName() {
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." -> "OpenBLAS 0.3.21"
  std::string s = openblas_get_config();
  size_t sp = s.find(' ', s.find(' ') + 1);
  return sp == std::string::npos ? s : s.substr(0, sp);
}

void openblasGemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
              n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool loadDnnl(GemmLibrary &lib, std::string &error) {
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    error = std::string("cannot load libdnnl.so.2 (Debian: apt-get install libdnnl2): ") +
            (e ? e : "unknown error");
    return false;
  }
  auto f = reinterpret_cast<DnnlSgemm>(dlsym(h, "dnnl_sgemm"));
  if (!f) {
    error = "libdnnl.so.2 has no dnnl_sgemm";
    return false;
  }
  lib.name = "oneDNN";
  if (auto v = reinterpret_cast<const DnnlVersion *(*)()>(dlsym(h, "dnnl_version")))
    lib.name += " " + std::to_string(v()->major) + "." + std::to_string(v()->minor) + "." +
                std::to_string(v()->patch);
  lib.gemm = [f](bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
    if (int status = f(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
                       ldc))
      throw std::runtime_error("oneDNN sgemm failed (status " + std::to_string(status) +
                               ") on " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                               std::to_string(k));
  };
  return true;
}

// Intel MKL's runtime-dispatch library (libmkl_rt: Debian non-free's
// libmkl-rt, Intel's oneAPI packages, or PyPI's `mkl`), loaded with dlopen
// from the loader's search path (LD_LIBRARY_PATH). Its CBLAS sgemm has the
// OpenBLAS prototype. MKL threads through GNU OpenMP here, the runtime
// that the fused kernels and oneDNN use, so the process keeps one pool of
// OMP_NUM_THREADS threads (MKL's default, Intel OpenMP, would start a
// second one that spins against the first).
using CblasSgemmFn = void (*)(int, int, int, int, int, int, float, const float *, int,
                              const float *, int, float, float *, int);
constexpr int kMklThreadingGnu = 3;   // MKL_THREADING_GNU (mkl_service.h)
constexpr int kMklInterfaceLp64 = 0;  // MKL_INTERFACE_LP64: 32-bit integers

bool loadMkl(GemmLibrary &lib, std::string &error) {
  void *h = nullptr;
  std::string tried;
  for (const char *so : {"libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so"}) {
    if ((h = dlopen(so, RTLD_NOW | RTLD_LOCAL)))
      break;
    tried += std::string(tried.empty() ? "" : ", ") + so;
  }
  if (!h) {
    error = "cannot load Intel MKL (tried " + tried +
            "; install Debian non-free's libmkl-rt, Intel oneAPI MKL or PyPI's mkl, and put its "
            "lib folder on LD_LIBRARY_PATH)";
    return false;
  }
  // Both layers must be set before MKL's first call; they return the layer
  // in force (-1: refused).
  auto setThreading = reinterpret_cast<int (*)(int)>(dlsym(h, "MKL_Set_Threading_Layer"));
  auto setInterface = reinterpret_cast<int (*)(int)>(dlsym(h, "MKL_Set_Interface_Layer"));
  auto f = reinterpret_cast<CblasSgemmFn>(dlsym(h, "cblas_sgemm"));
  if (!f || !setThreading || !setInterface) {
    error = "libmkl_rt has no cblas_sgemm or MKL_Set_Threading_Layer";
    return false;
  }
  if (setInterface(kMklInterfaceLp64) != kMklInterfaceLp64 ||
      setThreading(kMklThreadingGnu) != kMklThreadingGnu) {
    error = "Intel MKL refused the LP64 interface with GNU OpenMP threading (is "
            "libmkl_gnu_thread installed beside libmkl_rt?)";
    return false;
  }
  lib.name = "MKL";
  if (auto version = reinterpret_cast<void (*)(char *, int)>(dlsym(h, "MKL_Get_Version_String"))) {
    // "Intel(R) oneAPI Math Kernel Library Version 2026.2.1-Product Build ..."
    char text[256] = {};
    version(text, sizeof text - 1);
    std::string v(text);
    size_t at = v.find("Version ");
    if (at != std::string::npos)
      lib.name += " " + v.substr(at + 8, v.find_first_of("- ", at + 8) - (at + 8));
  }
  lib.gemm = [f](bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
    f(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
      alpha, a, lda, b, ldb, beta, c, ldc);
  };
  return true;
}

bool intelCpu() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("vendor_id", 0) == 0)
      return line.find("GenuineIntel") != std::string::npos;
  return false;
}

// "auto": MKL on Intel CPUs where it loads, else oneDNN where it loads,
// else OpenBLAS. MKL is first only on Intel: on a Xeon with AVX-512 it ran
// gpt-mini's GEMMs in 7 % less time per step than oneDNN 2.6
// (bench/results/kernels/gemm-libraries-xeon-avx512.txt); it has not been
// measured on AMD CPUs here.
bool choose(const std::string &name, GemmLibrary &lib, std::string &error) {
  if (name == "auto" || name.empty()) {
    std::string ignored;
    return (intelCpu() && loadGemmLibrary("mkl", lib, ignored)) ||
           loadGemmLibrary("onednn", lib, ignored) || loadGemmLibrary("openblas", lib, error);
  }
  return loadGemmLibrary(name, lib, error);
}

const GemmLibrary &current() {
  if (GemmLibrary *c = __atomic_load_n(&gChoice, __ATOMIC_ACQUIRE))
    return *c;
  std::lock_guard<std::mutex> lock(gMutex);
  if (!gChoice) {
    auto *c = new GemmLibrary;
    const char *env = std::getenv("STRETTO_GEMM");
    std::string error;
    if (!choose(env ? env : "auto", *c, error))
      throw std::runtime_error("STRETTO_GEMM: " + error);
    __atomic_store_n(&gChoice, c, __ATOMIC_RELEASE);
  }
  return *gChoice;
}

} // namespace

bool stretto::loadGemmLibrary(const std::string &name, GemmLibrary &lib, std::string &error) {
  if (name == "openblas") {
    lib.name = openblasName();
    lib.gemm = openblasGemm;
    return true;
  }
  if (name == "onednn")
    return loadDnnl(lib, error);
  if (name == "mkl")
    return loadMkl(lib, error);
  error = "unknown GEMM library '" + name + "' (expected openblas, onednn, mkl or auto)";
  return false;
}

void stretto::sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                    const float *b, int ldb, float beta, float *c, int ldc) {
  current().gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const std::string &stretto::gemmLibrary() { return current().name; }

bool stretto::selectGemmLibrary(const std::string &name, std::string &error) {
  auto *c = new GemmLibrary;
  if (!choose(name, *c, error)) {
    delete c;
    return false;
  }
  std::lock_guard<std::mutex> lock(gMutex);
  // The previous choice stays allocated: another thread may still hold it.
  __atomic_store_n(&gChoice, c, __ATOMIC_RELEASE);
  return true;
}
