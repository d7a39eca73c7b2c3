//===- GemmLibraries.cpp - the step's GEMMs on every GEMM library at hand -===//
//
// `stretto-bench-train CONFIG --gemm-libraries` times every GEMM of one
// training step (shapes, transposes and batching taken from the lowered
// graph, run the way the compiled runtime runs them: runtime/exec/PlanExecutor.cpp
// batchedGemm) on each GEMM library this host has:
//   - OpenBLAS, oneDNN (Debian libdnnl2) and Intel MKL (libmkl_rt on
//     LD_LIBRARY_PATH), as the runtime loads them (runtime/exec/Gemm.cpp:
//     loadGemmLibrary);
//   - BLIS (Debian libblis4, loaded here with dlopen, its CBLAS layer, with
//     RTLD_DEEPBIND so that its own BLAS symbols do not resolve to the
//     OpenBLAS already in the process).
// A library that is not installed is reported as such. Each is also timed
// on a 1024^3 product (its peak on this host and thread count).
//
// libxsmm (Debian libxsmm-dev) ships only static libraries and so cannot be
// chosen at run time; its JIT is for small matrices (M, N, K up to 64 by
// default), and beyond that it calls a BLAS.
//
//===----------------------------------------------------------------------===//

#include "GemmLibraries.h"

#include "exec/OpSemantics.h"
#include "stretto/Runtime/Gemm.h"

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <tuple>
#include <map>
#include <string>
#include <vector>

using namespace stretto;
using stretto::ops::AttentionDims;
using stretto::ops::GemmDims;
using stretto::ops::attentionDims;
using stretto::ops::gemmDims;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A library to time: OpenBLAS and oneDNN as the runtime loads them
// (stretto::loadGemmLibrary), BLIS here only.
struct Library {
  std::string name, version, missing; // missing: why it cannot run here
  GemmFunction gemm;
};

using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float *, int,
                            const float *, int, float, float *, int);

Library fromRuntime(const char *name, const char *key) {
  Library l{name, "", "", nullptr};
  GemmLibrary lib;
  if (loadGemmLibrary(key, lib, l.missing)) {
    l.version = lib.name;
    l.gemm = lib.gemm;
  }
  return l;
}

std::vector<Library> libraries() {
  std::vector<Library> libs;
  libs.push_back(fromRuntime("OpenBLAS", "openblas"));
  Library blis{"BLIS", "", "", nullptr};
  if (void *h = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)) {
    auto f = reinterpret_cast<CblasSgemm>(dlsym(h, "cblas_sgemm"));
    auto info = reinterpret_cast<const char *(*)()>(dlsym(h, "bli_info_get_version_str"));
    blis.version = info ? info() : "?";
    // BLIS reads BLIS_NUM_THREADS (or OMP_NUM_THREADS) only; with neither
    // set it runs one thread. Give it the thread count the others use.
    if (auto threads = reinterpret_cast<void (*)(int64_t)>(
            dlsym(h, "bli_thread_set_num_threads"))) // dim_t: 64-bit on x86-64
      threads(omp_get_max_threads());
    if (!f)
      blis.missing = "libblis.so.4 has no cblas_sgemm";
    else
      blis.gemm = [f](bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc) {
        f(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
          alpha, a, lda, b, ldb, beta, c, ldc);
      };
  } else {
    blis.missing = "not installed (apt-get install libblis4)";
  }
  libs.push_back(blis);
  libs.push_back(fromRuntime("oneDNN", "onednn"));
  libs.push_back(fromRuntime("MKL", "mkl"));
  return libs;
}

// One GEMM of the step, as the runtime's batchedGemm runs it.
struct Shape4 {
  int64_t batch, m, n, k;
  bool ta, tb, rhsBatched;
  bool operator<(const Shape4 &o) const {
    return std::tie(batch, m, n, k, ta, tb, rhsBatched) <
           std::tie(o.batch, o.m, o.n, o.k, o.ta, o.tb, o.rhsBatched);
  }
  double flops() const { return 2.0 * batch * m * n * k; }
};

std::map<Shape4, int> stepGemms(const Graph &g) {
  std::map<Shape4, int> shapes;
  for (Phase ph : {Phase::Step, Phase::Update}) {
    const std::vector<Node> &nodes = g.phase(ph);
    for (const Node &n : nodes) {
      if (n.kind == OpKind::Gemm) {
        GemmDims d = gemmDims(n, nodes[n.operands[0]].shape, nodes[n.operands[1]].shape);
        ++shapes[{d.batch, d.m, d.n, d.k, d.ta, d.tb, d.rhsBatched}];
      } else if (n.kind == OpKind::Matmul) {
        const Shape &as = nodes[n.operands[0]].shape, &bs = nodes[n.operands[1]].shape;
        int64_t batch = numElements(Shape(as.begin(), as.end() - 2));
        ++shapes[{batch, as[as.size() - 2], bs.back(), as.back(), false, false, bs.size() > 2}];
      } else if (n.kind == OpKind::Attention) {
        // Its two products per (batch, head) block: Q K^T and P V.
        ops::AttentionDims a = ops::attentionDimsOf(n, nodes); // (q, k, v, or a packed qkv)
        ++shapes[{a.batch, a.tq, a.tk, a.d, false, true, true}];
        ++shapes[{a.batch, a.tq, a.dv, a.tk, false, false, true}];
      } else if (n.kind == OpKind::AttentionGrad) {
        // Its five per block (PlanExecutor.cpp): Q K^T and G V^T, then
        // P^T G, dS K and dS^T Q.
        const ops::AttentionDims a = ops::attentionDimsOf(n, nodes);
        const int64_t t = a.tq, d = a.d, batch = a.batch;
        shapes[{batch, t, t, d, false, true, true}] += 2;
        shapes[{batch, t, d, t, true, false, true}] += 2;
        ++shapes[{batch, t, d, t, false, false, true}];
      }
    }
  }
  return shapes;
}

// Seconds for one run of `s` on `lib`, following batchedGemm: a shared rhs
// with an untransposed lhs is one tall GEMM; many small products run one
// per thread (the library single-threaded inside the parallel region);
// otherwise one library call per block.
double timeShape(const Library &lib, const Shape4 &s, std::vector<float> &A,
                 std::vector<float> &B, std::vector<float> &C, double window = 0.05) {
  int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
  int lda = s.ta ? m : k, ldb = s.tb ? k : n;
  auto run = [&] {
    if (!s.rhsBatched && !s.ta) {
      lib.gemm(false, s.tb, static_cast<int>(s.batch * s.m), n, k, 1.0f, A.data(), k, B.data(),
               ldb, 0.0f, C.data(), n);
      return;
    }
    if (s.batch >= 2 * omp_get_max_threads() && s.m * s.n * s.k <= (int64_t(1) << 22)) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < s.batch; ++i)
        lib.gemm(s.ta, s.tb, m, n, k, 1.0f, A.data() + i * s.m * s.k,
                 lda, B.data() + (s.rhsBatched ? i * s.k * s.n : 0), ldb, 0.0f,
                 C.data() + i * s.m * s.n, n);
      return;
    }
    for (int64_t i = 0; i < s.batch; ++i)
      lib.gemm(s.ta, s.tb, m, n, k, 1.0f, A.data() + i * s.m * s.k, lda,
               B.data() + (s.rhsBatched ? i * s.k * s.n : 0), ldb, 0.0f, C.data() + i * s.m * s.n,
               n);
  };
  run(); // warm: packing buffers, JIT, thread pools
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    int iters = 0;
    auto t0 = Clock::now();
    do {
      run();
      ++iters;
    } while (since(t0) < window);
    best = std::min(best, since(t0) / iters);
  }
  return best;
}

} // namespace

void stretto::bench::compareGemmLibraries(const Graph &g, std::FILE *out) {
  std::map<Shape4, int> shapes = stepGemms(g);
  size_t aMax = 0, bMax = 0, cMax = 1024 * 1024;
  for (auto &[s, c] : shapes) {
    aMax = std::max<size_t>(aMax, s.batch * s.m * s.k);
    bMax = std::max<size_t>(bMax, (s.rhsBatched ? s.batch : 1) * s.k * s.n);
    cMax = std::max<size_t>(cMax, s.batch * s.m * s.n);
  }
  aMax = std::max<size_t>(aMax, 1024 * 1024);
  bMax = std::max<size_t>(bMax, 1024 * 1024);
  std::vector<float> A(aMax), B(bMax), C(cMax);
  for (size_t i = 0; i < A.size(); ++i)
    A[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (size_t i = 0; i < B.size(); ++i)
    B[i] = static_cast<float>((i * 104729) % 1000) / 1000.0f - 0.5f;

  std::vector<Library> libs = libraries();
  std::fprintf(out, "GEMM libraries, %d threads (the step's %zu distinct GEMM shapes):\n",
               omp_get_max_threads(), shapes.size());
  for (const Library &l : libs)
    std::fprintf(out, "  %-9s %s\n", l.name.c_str(),
                 l.missing.empty() ? l.version.c_str() : l.missing.c_str());

  // Peak: a 1024^3 product.
  Shape4 big{1, 1024, 1024, 1024, false, false, false};
  std::vector<double> peak(libs.size(), 0), total(libs.size(), 0);
  for (size_t l = 0; l < libs.size(); ++l)
    if (libs[l].missing.empty())
      peak[l] = big.flops() / timeShape(libs[l], big, A, B, C, 0.3) / 1e9;

  std::fprintf(out, "\n%-34s %5s", "shape (batch x m x n x k, op)", "/step");
  for (const Library &l : libs)
    std::fprintf(out, " %12s", (l.name + " ms").c_str());
  std::fprintf(out, "  best\n");
  double stepFlops = 0;
  for (auto &[s, count] : shapes) {
    char label[96];
    std::snprintf(label, sizeof label, "%lldx%lldx%lldx%lld %s%s%s", (long long)s.batch,
                  (long long)s.m, (long long)s.n, (long long)s.k, s.ta ? "T" : "N",
                  s.tb ? "T" : "N", s.rhsBatched ? " batched" : "");
    std::fprintf(out, "%-34s %5d", label, count);
    stepFlops += s.flops() * count;
    double bestT = 1e30;
    size_t best = 0;
    for (size_t l = 0; l < libs.size(); ++l) {
      if (!libs[l].missing.empty()) {
        std::fprintf(out, " %12s", "-");
        continue;
      }
      double t = timeShape(libs[l], s, A, B, C) * count;
      total[l] += t;
      std::fprintf(out, " %12.3f", t * 1e3);
      if (t < bestT)
        bestT = t, best = l;
    }
    std::fprintf(out, "  %s\n", libs[best].name.c_str());
  }
  std::fprintf(out, "%-40s", "GEMM time per step (ms)");
  for (size_t l = 0; l < libs.size(); ++l)
    libs[l].missing.empty() ? (void)std::fprintf(out, " %12.2f", total[l] * 1e3)
                            : (void)std::fprintf(out, " %12s", "-");
  std::fprintf(out, "\n%-40s", "GFLOP/s on the step's shapes");
  for (size_t l = 0; l < libs.size(); ++l)
    libs[l].missing.empty() ? (void)std::fprintf(out, " %12.1f", stepFlops / total[l] / 1e9)
                            : (void)std::fprintf(out, " %12s", "-");
  std::fprintf(out, "\n%-40s", "GFLOP/s on 1024^3 (peak)");
  for (size_t l = 0; l < libs.size(); ++l)
    libs[l].missing.empty() ? (void)std::fprintf(out, " %12.1f", peak[l])
                            : (void)std::fprintf(out, " %12s", "-");
  size_t win = 0;
  for (size_t l = 1; l < libs.size(); ++l)
    if (libs[l].missing.empty() && total[l] < total[win])
      win = l;
  std::fprintf(out, "\nfastest on this step: %s (%.2f ms; OpenBLAS %.2f ms, %.2fx)\n",
               libs[win].name.c_str(), total[win] * 1e3, total[0] * 1e3, total[0] / total[win]);
}
