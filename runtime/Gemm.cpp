//===- Gemm.cpp - the GEMM library under the compiled runtime -------------===//

#include "stretto/Runtime/Gemm.h"

#include <cblas.h>
#include <dlfcn.h>

#include <cstdlib>
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

// "auto": oneDNN when it loads, else OpenBLAS.
bool choose(const std::string &name, GemmLibrary &lib, std::string &error) {
  if (name == "auto" || name.empty()) {
    std::string ignored;
    return loadGemmLibrary("onednn", lib, ignored) || loadGemmLibrary("openblas", lib, error);
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
  error = "unknown GEMM library '" + name + "' (expected openblas, onednn or auto)";
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
