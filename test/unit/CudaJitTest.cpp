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
