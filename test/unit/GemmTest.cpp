//===- GemmTest.cpp - the compiled runtime's GEMM libraries ---------------===//
//
// stretto::sgemm against a double-precision triple loop, on every library
// this host has (OpenBLAS always; oneDNN when libdnnl.so.2 loads, else the
// test is reported skipped), over the transposes, leading dimensions and
// beta the runtime uses; and the library choice's errors.
//
//===----------------------------------------------------------------------===//

#include "stretto/Runtime/Gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace stretto;

namespace {

struct Case {
  bool ta, tb;
  int m, n, k, pad; // pad: extra columns in every leading dimension
  float alpha, beta;
};

// Largest |C - C_exact| / (|alpha| sum_p |a||b| + |beta| |c0|) over C.
double worstError(const Case &t) {
  int lda = (t.ta ? t.m : t.k) + t.pad, ldb = (t.tb ? t.k : t.n) + t.pad, ldc = t.n + t.pad;
  int aRows = t.ta ? t.k : t.m, bRows = t.tb ? t.n : t.k;
  std::vector<float> a(static_cast<size_t>(aRows) * lda), b(static_cast<size_t>(bRows) * ldb),
      c(static_cast<size_t>(t.m) * ldc);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<float>(std::sin(0.37 * i + 0.1));
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<float>(std::cos(0.23 * i + 0.2));
  for (size_t i = 0; i < c.size(); ++i)
    c[i] = static_cast<float>(std::sin(0.11 * i));
  std::vector<float> c0 = c;
  sgemm(t.ta, t.tb, t.m, t.n, t.k, t.alpha, a.data(), lda, b.data(), ldb, t.beta, c.data(), ldc);
  double worst = 0;
  for (int i = 0; i < t.m; ++i)
    for (int j = 0; j < t.n; ++j) {
      double sum = 0, mag = 0;
      for (int p = 0; p < t.k; ++p) {
        double x = t.ta ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p];
        double y = t.tb ? b[static_cast<size_t>(j) * ldb + p] : b[static_cast<size_t>(p) * ldb + j];
        sum += x * y;
        mag += std::fabs(x * y);
      }
      double c0ij = c0[static_cast<size_t>(i) * ldc + j];
      double exact = t.alpha * sum + t.beta * c0ij;
      double scale = std::fabs(t.alpha) * mag + std::fabs(t.beta * c0ij) + 1e-30;
      worst = std::max(worst, std::fabs(c[static_cast<size_t>(i) * ldc + j] - exact) / scale);
    }
  // Padding columns of C are never written.
  for (int i = 0; i < t.m; ++i)
    for (int j = t.n; j < ldc; ++j)
      if (c[static_cast<size_t>(i) * ldc + j] != c0[static_cast<size_t>(i) * ldc + j])
        return 1.0;
  return worst;
}

void checkLibrary(const std::string &name) {
  std::string error;
  if (!selectGemmLibrary(name, error)) {
    if (name == "onednn" || name == "mkl")
      GTEST_SKIP() << error;
    FAIL() << error;
  }
  SCOPED_TRACE(gemmLibrary());
  const Case cases[] = {
      {false, false, 37, 29, 41, 0, 1.0f, 0.0f}, {false, true, 37, 29, 41, 3, 0.5f, 0.0f},
      {true, false, 33, 17, 64, 2, 1.0f, 0.0f},  {true, true, 8, 40, 13, 1, 2.0f, 0.0f},
      {false, false, 64, 64, 64, 0, 1.0f, 1.0f}, {false, true, 128, 64, 32, 5, 0.125f, 0.0f},
      {false, false, 300, 257, 129, 7, -1.5f, 0.25f}, {true, false, 1, 1, 1, 0, 1.0f, 0.0f},
  };
  for (const Case &t : cases) {
    SCOPED_TRACE(std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k) +
                 (t.ta ? " T" : " N") + (t.tb ? "T" : "N") + " pad " + std::to_string(t.pad) +
                 " beta " + std::to_string(t.beta));
    // f32 accumulation over k terms: a few ulps per term at most.
    EXPECT_LT(worstError(t), 1e-5);
  }
}

} // namespace

TEST(Gemm, OpenBlasMatchesTheExactProduct) { checkLibrary("openblas"); }
TEST(Gemm, OneDnnMatchesTheExactProduct) { checkLibrary("onednn"); }
TEST(Gemm, MklMatchesTheExactProduct) { checkLibrary("mkl"); }

TEST(Gemm, AutoNamesTheLibraryItChose) {
  std::string error;
  ASSERT_TRUE(selectGemmLibrary("auto", error)) << error;
  const std::string &name = gemmLibrary();
  EXPECT_TRUE(name.rfind("oneDNN ", 0) == 0 || name.rfind("OpenBLAS ", 0) == 0 ||
              name.rfind("MKL", 0) == 0)
      << name;
}

TEST(Gemm, AnUnknownLibraryIsRefusedNamingTheChoices) {
  std::string error;
  EXPECT_FALSE(selectGemmLibrary("essl", error));
  EXPECT_NE(error.find("unknown GEMM library 'essl'"), std::string::npos) << error;
  EXPECT_NE(error.find("openblas, onednn, mkl or auto"), std::string::npos) << error;
}
