//===- Gemm.h - the GEMM library under the compiled runtime ---------------===//
//
// Every f32 GEMM of the compiled CPU runtime goes through `sgemm`, which
// calls the library chosen for the process:
//   - Intel MKL (libmkl_rt, loaded with dlopen) on Intel CPUs, when it
//     loads: on a Xeon with AVX-512 gpt-mini's GEMMs took 7 % less time
//     per step than on oneDNN 2.6 (107 against 115 ms), up to 25 % less on
//     the weight gradients' transposed products, while oneDNN was ahead on
//     a few shapes;
//   - oneDNN (Debian libdnnl2, loaded with dlopen at the first GEMM), when
//     it loads: on gpt-mini's step it ran the GEMMs 1.2x faster than
//     OpenBLAS on an AVX-512 host (bench/results/kernels/gemm-libraries-*.txt;
//     `stretto-bench-train CONFIG --gemm-libraries` compares them on any host);
//   - OpenBLAS (linked) otherwise.
// STRETTO_GEMM=openblas|onednn|mkl overrides the choice (onednn and mkl fail
// when their library does not load). The choice is a table, not a
// measurement, so that two runs (and every rank of one) make the same choice
// and a resumed run stays bit-identical. The reference executor keeps
// OpenBLAS: it is the oracle.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_GEMM_H
#define STRETTO_RUNTIME_GEMM_H

#include <functional>
#include <string>

namespace stretto {

/// Row-major C = alpha op(A) op(B) + beta C, CBLAS's argument conventions.
/// Throws std::runtime_error when the library reports an error.
void sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
           const float *b, int ldb, float beta, float *c, int ldc);

/// The library in use, with its version ("oneDNN 2.6.3", "OpenBLAS 0.3.21",
/// "MKL 2026.2.1").
/// Chooses it on the first call (STRETTO_GEMM, else the table above).
const std::string &gemmLibrary();

/// Chooses the library by name: "openblas", "onednn", "mkl" or "auto" (the
/// table).
/// False with `error` set when it is unknown or cannot be loaded. Meant for
/// tests and tools; runs use STRETTO_GEMM.
bool selectGemmLibrary(const std::string &name, std::string &error);

/// Row-major sgemm with sgemm's arguments, of one library.
using GemmFunction = std::function<void(bool ta, bool tb, int m, int n, int k, float alpha,
                                        const float *a, int lda, const float *b, int ldb,
                                        float beta, float *c, int ldc)>;
struct GemmLibrary {
  std::string name; // with its version: "oneDNN 2.6.3"
  GemmFunction gemm;
};

/// One library by name ("openblas", "onednn" or "mkl"), as sgemm calls it; false
/// with `error` set when it cannot be loaded. For benchmarks that compare
/// the libraries (bench/GemmLibraries.cpp).
bool loadGemmLibrary(const std::string &name, GemmLibrary &lib, std::string &error);

} // namespace stretto

#endif
