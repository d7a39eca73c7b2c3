//===- GemmLibraries.h - the step's GEMMs on every GEMM library at hand ---===//
#ifndef STRETTO_BENCH_GEMMLIBRARIES_H
#define STRETTO_BENCH_GEMMLIBRARIES_H

#include "stretto/Runtime/Graph.h"

#include <cstdio>

namespace stretto::bench {
/// Times one training step's GEMMs (shapes from `g`) on OpenBLAS, BLIS and
/// oneDNN where installed, and each library's 1024^3 peak; prints a table.
void compareGemmLibraries(const Graph &g, std::FILE *out);
} // namespace stretto::bench

#endif
