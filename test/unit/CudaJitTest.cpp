//===- CudaJitTest.cpp - NVRTC cache: cubin + PTX, hits, rebuilds, errors -===//
//
// Compiles a model's generated CUDA C (one translation unit, as stretto-train
// --dump writes it) through CudaKernelCache. Needs NVRTC at run time, not a
// GPU; reported skipped when NVRTC cannot be loaded.
//
//===----------------------------------------------------------------------===//
#include "stretto/Compiler/Lowering.h"
#include "stretto/Transforms/Pipelines.h"
#include "stretto/Runtime/CudaJit.h"
#include "stretto/Frontend/Load.h"
#include "stretto/Kernel/Compile.h"
#include "stretto/Kernel/Emitter.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

using namespace stretto;

namespace {

std::string cacheDir() {
  return (std::filesystem::temp_directory_path() /
          ("stretto-cuda-cache-" + std::to_string(::getpid())))
      .string();
}

// The CUDA C translation unit of a config's kernels.
std::string cudaUnit(const std::string &config) {
  mlir::MLIRContext ctx;
  auto diag = printDiagnostics(ctx);
  std::optional<LoadedModel> loaded = loadModel(ctx, config, {});
  if (!loaded)
    return "";
  mlir::PassManager pm(&ctx);
  buildTrainingPipeline(pm);
  buildKernelPipeline(pm);
  if (mlir::failed(pm.run(*loaded->module)))
    return "";
  std::vector<KernelSource> kernels;
  if (mlir::failed(kernel::emitAllKernels(loaded->model, kernels)))
    return "";
  std::string unit;
  for (const KernelSource &k : kernels)
    unit += k.cuda + "\n";
  return unit;
}

// A model's unit split into parts for parallel NVRTC: each part has the
// prelude once and consecutive kernels; together they hold every kernel
// once, in order; the parts compile on 3 threads (cubins holding their
// kernels' entry points), then come from the cache.
TEST(CudaJit, SplitsAUnitAndCompilesThePartsInParallel) {
  std::string dir = cacheDir() + "-parts";
  CudaKernelCache probe(dir);
  std::string why;
  mlir::MLIRContext ctx;
  auto diag = printDiagnostics(ctx);
  std::optional<LoadedModel> loaded =
      loadModel(ctx, STRETTO_SOURCE_DIR "/examples/mlp.toml", {});
  ASSERT_TRUE(loaded);
  mlir::PassManager pm(&ctx);
  buildTrainingPipeline(pm);
  buildKernelPipeline(pm);
  ASSERT_TRUE(mlir::succeeded(pm.run(*loaded->module)));
  std::vector<KernelSource> kernels;
  ASSERT_TRUE(mlir::succeeded(kernel::emitAllKernels(loaded->model, kernels)));
  ASSERT_GE(kernels.size(), 4u);
  const std::string unit = kernel::joinCudaSources(kernels);
  std::vector<std::string> parts = splitCudaUnit(unit, 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(splitCudaUnit(unit, 1), std::vector<std::string>{unit});
  EXPECT_EQ(splitCudaUnit("no kernels here", 3).size(), 1u);
  size_t next = 0; // kernels in order across the parts
  for (const std::string &part : parts) {
    size_t preludes = 0;
    for (size_t at = 0; (at = part.find("#define STRETTO_KERNEL_PRELUDE",
                                        at)) != std::string::npos;
         ++at)
      ++preludes;
    EXPECT_EQ(preludes, 1u);
    size_t mine = 0;
    for (size_t k = 0; k < kernels.size(); ++k)
      if (part.find("__global__ void " + kernels[k].name + "(") !=
          std::string::npos) {
        EXPECT_EQ(k, next++)
            << kernels[k].name << " out of order or in two parts";
        ++mine;
      }
    EXPECT_GT(mine, 0u);
  }
  EXPECT_EQ(next, kernels.size());
  if (!probe.available(why))
    GTEST_SKIP() << "the split is checked; compiling needs NVRTC: " << why;
  std::vector<CudaBinary> bins;
  int hits = -1;
  std::string error;
  ASSERT_TRUE(compileCudaUnits(dir, parts, "sm_90", 3, bins, hits, error))
      << error;
  ASSERT_EQ(bins.size(), parts.size());
  EXPECT_EQ(hits, 0);
  for (size_t p = 0; p < parts.size(); ++p) {
    EXPECT_EQ(bins[p].cubin.substr(0, 4), "\x7f"
                                          "ELF");
    for (const KernelSource &k : kernels)
      EXPECT_EQ(bins[p].ptx.find(".entry " + k.name + "(") != std::string::npos,
                parts[p].find("__global__ void " + k.name + "(") !=
                    std::string::npos)
          << k.name << " in part " << p;
  }
  ASSERT_TRUE(compileCudaUnits(dir, parts, "sm_90", 2, bins, hits, error))
      << error;
  EXPECT_EQ(hits, 3);
  // A part that does not compile fails the whole, naming the error.
  std::vector<std::string> bad = parts;
  bad[1] += "\nextern \"C\" __global__ void broken(float *o) { o[0] = "
            "undeclared; }\n";
  EXPECT_FALSE(compileCudaUnits(dir, bad, "sm_90", 3, bins, hits, error));
  EXPECT_NE(error.find("undeclared"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

TEST(CudaJit, CompilesCachesAndRebuilds) {
  std::string dir = cacheDir();
  CudaKernelCache cache(dir);
  std::string why;
  if (!cache.available(why))
    GTEST_SKIP() << why;
  std::string unit = cudaUnit(STRETTO_SOURCE_DIR "/examples/mlp.toml");
  ASSERT_FALSE(unit.empty());
  CudaBinary bin;
  std::string error;
  ASSERT_TRUE(cache.compile(unit, "sm_90", bin, error)) << error;
  EXPECT_EQ(bin.cubin.substr(0, 4), "\x7f" "ELF");
  EXPECT_NE(bin.ptx.find(".target sm_90"), std::string::npos);
  EXPECT_NE(bin.log.find("registers"), std::string::npos) << bin.log;
  EXPECT_EQ(cache.stats().compiles, 1);

  // A second request is a hit with the same bytes.
  CudaBinary again;
  ASSERT_TRUE(cache.compile(unit, "sm_90", again, error)) << error;
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_EQ(again.cubin, bin.cubin);
  EXPECT_EQ(again.ptx, bin.ptx);

  // Another arch is another entry.
  EXPECT_NE(cache.entryPath(unit, "sm_80"), cache.entryPath(unit, "sm_90"));

  // A truncated cubin is detected and rebuilt.
  std::string cubinPath = cache.entryPath(unit, "sm_90") + ".cubin";
  std::filesystem::resize_file(cubinPath, bin.cubin.size() / 2);
  CudaBinary rebuilt;
  ASSERT_TRUE(cache.compile(unit, "sm_90", rebuilt, error)) << error;
  EXPECT_EQ(cache.stats().rebuilt, 1);
  EXPECT_EQ(cache.stats().compiles, 2);
  EXPECT_EQ(rebuilt.cubin, bin.cubin);

  EXPECT_FALSE(cache.compile(unit, "ampere", rebuilt, error));
  EXPECT_NE(error.find("CUDA arch must look like sm_90"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

TEST(CudaJit, CompileErrorNamesTheKernelAndLine) {
  std::string dir = cacheDir();
  CudaKernelCache cache(dir);
  std::string why;
  if (!cache.available(why))
    GTEST_SKIP() << why;
  std::string source = "// good_k0: (tensor<4xf32>) -> tensor<4xf32>\n"
                       "extern \"C\" __global__ void good_k0(float *o) { o[0] = 1.0f; }\n"
                       "// bad_k1: (tensor<4xf32>) -> tensor<4xf32>\n"
                       "extern \"C\" __global__ void bad_k1(float *o) {\n"
                       "  o[0] = undefined_name;\n"
                       "}\n";
  CudaBinary bin;
  std::string error;
  EXPECT_FALSE(cache.compile(source, "sm_90", bin, error));
  EXPECT_NE(error.find("kernel bad_k1: NVRTC failed for sm_90 at "), std::string::npos) << error;
  EXPECT_NE(error.find(".cu:5"), std::string::npos) << error;
  EXPECT_NE(error.find("undefined_name"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

} // namespace
