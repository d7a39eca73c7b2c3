//===- JacobiEigen.h - eigenvalues for test assertions --------*- C++ -*-===//
//
// Independent of the code under test: singular values of Newton-Schulz
// outputs are checked through the eigenvalues of X Xᵀ.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_TEST_JACOBIEIGEN_H
#define STRETTO_TEST_JACOBIEIGEN_H

#include <cmath>
#include <vector>

namespace stretto::test {

// Eigenvalues of a symmetric n x n matrix by cyclic Jacobi rotations.
inline std::vector<double> jacobiEigenvalues(std::vector<double> a, int n) {
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q)
        off += a[p * n + q] * a[p * n + q];
    if (off < 1e-26)
      break;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        double apq = a[p * n + q];
        if (std::fabs(apq) < 1e-300)
          continue;
        double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
        double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        double cs = 1 / std::sqrt(t * t + 1), sn = t * cs;
        for (int k = 0; k < n; ++k) {
          double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = cs * akp - sn * akq;
          a[k * n + q] = sn * akp + cs * akq;
        }
        for (int k = 0; k < n; ++k) {
          double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = cs * apk - sn * aqk;
          a[q * n + k] = sn * apk + cs * aqk;
        }
      }
  }
  std::vector<double> ev(n);
  for (int i = 0; i < n; ++i)
    ev[i] = a[i * n + i];
  return ev;
}

} // namespace stretto::test

#endif
