//===- CudaKernelTest.cpp - generated CUDA kernels on a GPU vs their C++ --===//
//
// Every kind of generated kernel (elementwise with broadcasts, row sums,
// column sums, row normalisations incl. a causal softmax) is compiled twice
// from one body: C++ through HostKernelCache and CUDA C through NVRTC
// (CudaKernelCache), run on the same random inputs on the CPU and on GPU 0
// (CudaDevice: driver API), and the results compared (1e-5 relative: the
// GPU's expf and the row sums' order differ). Without NVRTC it is skipped;
// without a GPU it builds both forms of every kernel and is skipped before
// the launches. The same comparison runs on the emulated GPU everywhere.
//
//===----------------------------------------------------------------------===//
#include "stretto/Compiler/Lowering.h"
#include "stretto/Runtime/CudaDriver.h"
#include "stretto/Runtime/CudaJit.h"
#include "stretto/Frontend/Load.h"
#include "stretto/Runtime/HostJit.h"
#include "stretto/Kernel/Compile.h"
#include "stretto/Kernel/Emitter.h"
#include "GpuEmulator.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <set>

using namespace stretto;

namespace {

const char *kModel = R"(
train.model @g {
  train.step {
    %x = train.input "x" : tensor<64x96xf32>
    %row = train.input "row" : tensor<96xf32>
    %col = train.input "col" : tensor<64x1xf32>
    %s = train.input "s" : tensor<f32>
    %a = train.input "a" : tensor<2x32x32xf32>
    %0 = train.mul %x, %row : tensor<64x96xf32>, tensor<96xf32> -> tensor<64x96xf32>
    %1 = train.sub %0, %s : tensor<64x96xf32>, tensor<f32> -> tensor<64x96xf32>
    %2 = train.tanh %1 : tensor<64x96xf32>
    %3 = train.add %2, %col : tensor<64x96xf32>, tensor<64x1xf32> -> tensor<64x96xf32>
    %rs0 = train.mul %3, %row : tensor<64x96xf32>, tensor<96xf32> -> tensor<64x96xf32>
    %rs = train.reduce_sum %rs0 [1] : tensor<64x96xf32> -> tensor<64xf32>
    %cs0 = train.exp %2 : tensor<64x96xf32>
    %cs = train.reduce_sum %cs0 [0] : tensor<64x96xf32> -> tensor<96xf32>
    %ln = train.layer_norm %3, %row, %row : tensor<64x96xf32>, tensor<96xf32>, tensor<96xf32>
    %sm = train.softmax %a causal : tensor<2x32x32xf32>
    %l0 = train.reduce_sum %rs [0] : tensor<64xf32> -> tensor<f32>
    %l1 = train.reduce_sum %cs [0] : tensor<96xf32> -> tensor<f32>
    %l2 = train.reduce_sum %ln [0, 1] : tensor<64x96xf32> -> tensor<f32>
    %l3 = train.reduce_sum %sm [0, 1, 2] : tensor<2x32x32xf32> -> tensor<f32>
    %l = train.add %l0, %l1 : tensor<f32>
    %m = train.add %l2, %l3 : tensor<f32>
    %o = train.input "o" : tensor<67x73xf32>
    %orow = train.input "orow" : tensor<73xf32>
    %o1 = train.mul %o, %orow : tensor<67x73xf32>, tensor<73xf32> -> tensor<67x73xf32>
    %o2 = train.tanh %o1 : tensor<67x73xf32>
    %o3 = train.reduce_sum %o2 [1] : tensor<67x73xf32> -> tensor<67xf32>
    %o4 = train.reduce_sum %o2 [0] : tensor<67x73xf32> -> tensor<73xf32>
    %l4 = train.reduce_sum %o3 [0] : tensor<67xf32> -> tensor<f32>
    %l5 = train.reduce_sum %o4 [0] : tensor<73xf32> -> tensor<f32>
    %n0 = train.add %l, %m : tensor<f32>
    %n1 = train.add %l4, %l5 : tensor<f32>
    %n = train.add %n0, %n1 : tensor<f32>
    train.yield %n : tensor<f32>
  }
}
)";

// Every kernel of kModel: the sources of both targets and the C++ twins.
struct Built {
  std::vector<KernelSource> kernels;
  std::string cudaUnit;
  std::vector<HostKernelFn> twins;
  std::unique_ptr<HostKernelCache> host;
};

void build(const std::string &dir, Built &b) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<train::TrainDialect, kernel::KernelDialect>();
  auto diag = printDiagnostics(ctx);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(kModel, &ctx);
  ASSERT_TRUE(module);
  mlir::PassManager pm(&ctx);
  buildKernelPipeline(pm);
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  ASSERT_TRUE(mlir::succeeded(kernel::emitAllKernels(*module, b.kernels)));
  std::set<std::string> kinds;
  std::string cppUnit;
  std::vector<std::string> symbols;
  for (const KernelSource &k : b.kernels) {
    kinds.insert(k.kind);
    cppUnit += k.cpp + "\n";
    b.cudaUnit += k.cuda + "\n";
    symbols.push_back(k.name);
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"elementwise", "row-sum", "column-sum", "rows"}));
  // (an element-wise kernel whose count is not a multiple of its vector
  // step's eight elements: Emitter.cpp)
  EXPECT_TRUE(std::any_of(b.kernels.begin(), b.kernels.end(), [](const KernelSource &k) {
    return k.kind == "elementwise" && k.numElements % 8 != 0;
  }));
  b.host = std::make_unique<HostKernelCache>(dir);
  std::string error;
  b.twins = b.host->loadAll(cppUnit, symbols, error);
  ASSERT_EQ(b.twins.size(), symbols.size()) << error;
}

// A device to launch on: memory, and a launch of kernel `name` with
// pointer arguments and KernelSource's geometry.
struct Launcher {
  std::function<uint64_t(size_t)> alloc;
  std::function<void(uint64_t, const void *, size_t)> upload;
  std::function<void(void *, uint64_t, size_t)> download;
  std::function<void(uint64_t)> free;
  std::function<void(const std::string &, std::vector<uint64_t> &, unsigned, unsigned)> launch;
};

// Runs every kernel on random inputs on `dev` and on the CPU (its C++ twin)
// and compares (1e-5 relative: the GPU's expf and the row sums' order
// differ; `exactRows`: the half-warp row kernels bit for bit, where expf is
// the host's). Rows kernels also run on a single block (its grid-stride
// loop), row sums also as NAME_parts over 3 and 7 parts a row, added in
// order.
void compareWithTwins(const Built &b, Launcher &dev, bool exactRows) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t k = 0; k < b.kernels.size(); ++k) {
    const KernelSource &ks = b.kernels[k];
    SCOPED_TRACE(ks.name + " (" + ks.kind + ")");
    std::vector<std::vector<float>> ins;
    std::vector<uint64_t> args;
    for (const auto &shape : ks.inputShapes) {
      int64_t n = 1;
      for (int64_t d : shape)
        n *= d;
      ins.emplace_back(n);
      for (float &v : ins.back())
        v = u(rng);
      args.push_back(dev.alloc(n * sizeof(float)));
      dev.upload(args.back(), ins.back().data(), n * sizeof(float));
    }
    std::vector<float> want(ks.numElements), got(ks.numElements);
    std::vector<const void *> inPtrs;
    for (auto &v : ins)
      inPtrs.push_back(v.data());
    void *outs[1] = {want.data()};
    b.twins[k](inPtrs.data(), outs);
    uint64_t out = dev.alloc(ks.numElements * sizeof(float));
    args.push_back(out);
    // Launch shapes of KernelSource's contract.
    int64_t rowLen = ks.iterationShape.empty() ? 1 : ks.iterationShape.back();
    unsigned grid = 0, block = 128;
    const int64_t rows = ks.numElements / std::max<int64_t>(rowLen, 1);
    if (ks.kind == "row-sum")
      grid = static_cast<unsigned>(std::min<int64_t>(ks.numElements, 65535));
    else if (ks.kind == "rows") // a half-warp per row
      block = 256,
      grid = static_cast<unsigned>((16 * rows + block - 1) / block);
    else
      grid = static_cast<unsigned>((ks.numElements + block - 1) / block);
    uint64_t readAt = out; // where check() reads the result
    auto check = [&](const char *how) {
      dev.download(got.data(), readAt, got.size() * sizeof(float));
      for (size_t e = 0; e < want.size(); ++e) {
        if (exactRows && ks.kind == "rows")
          ASSERT_EQ(got[e], want[e]) << how << ", element " << e;
        ASSERT_NEAR(got[e], want[e], 1e-5 * (1 + std::fabs(want[e])))
            << how << ", element " << e;
      }
    };
    dev.launch(ks.name, args, std::max(grid, 1u), block);
    check("launched as KernelSource says");
    if (ks.kind == "rows" && grid > 1) {
      std::vector<float> zeros(got.size(), 0.0f);
      dev.upload(out, zeros.data(), zeros.size() * sizeof(float));
      dev.launch(ks.name, args, 1, 64);
      check("on one block of 64 threads");
    }
    // Element-wise kernels on a grid of one wave (CudaPlan.cpp's opKernel)
    // take eight elements a step (aligned operands; kernels of 4,096
    // elements or more), then the rest one at a time: on one block of 32
    // threads (67 x 73 elements: not a multiple of eight) both loops run.
    if (ks.kind == "elementwise") {
      std::vector<float> zeros(got.size(), 0.0f);
      dev.upload(out, zeros.data(), zeros.size() * sizeof(float));
      dev.launch(ks.name, args, 1, 32);
      check("on one block of 32 threads");
    }
    // Element-wise kernels take eight elements a thread a step, in 16-byte
    // words, where the operands read and written at the element's own index
    // are 16-byte aligned (Emitter.cpp's vector step; the launches above):
    // with every operand one element off that alignment, the element loops
    // run alone, one element a thread a step on one block of 32 threads
    // (the emulated GPU traps on a misaligned 16-byte word).
    if (ks.kind == "elementwise") {
      std::vector<uint64_t> shifted;
      for (size_t i = 0; i < ins.size(); ++i) {
        uint64_t p = dev.alloc((ins[i].size() + 1) * sizeof(float));
        dev.upload(p + sizeof(float), ins[i].data(), ins[i].size() * sizeof(float));
        shifted.push_back(p);
      }
      uint64_t shiftedOut = dev.alloc((ks.numElements + 1) * sizeof(float));
      shifted.push_back(shiftedOut);
      std::vector<uint64_t> shiftedArgs;
      for (uint64_t p : shifted)
        shiftedArgs.push_back(p + sizeof(float));
      readAt = shiftedOut + sizeof(float);
      dev.launch(ks.name, shiftedArgs, 1, 32);
      check("on operands one element off 16-byte alignment");
      readAt = out;
      for (uint64_t p : shifted)
        dev.free(p);
    }
    for (int64_t parts : {3, 7}) { // 7 does not divide the rows' lengths here
      if (ks.kind != "row-sum")
        break;
      const int64_t outRows = std::max<int64_t>(ks.numElements, 1);
      uint64_t partials = dev.alloc(outRows * parts * sizeof(float));
      std::vector<uint64_t> partArgs(args.begin(), args.end() - 1);
      partArgs.push_back(partials);
      dev.launch(ks.name + "_parts", partArgs,
                 static_cast<unsigned>(outRows * parts), 64);
      std::vector<float> p(outRows * parts);
      dev.download(p.data(), partials, p.size() * sizeof(float));
      for (int64_t r = 0; r < outRows; ++r) {
        float sum = 0.0f;
        for (int64_t q = 0; q < parts; ++q)
          sum += p[r * parts + q];
        ASSERT_NEAR(sum, want[r], 1e-5 * (1 + std::fabs(want[r])))
            << "_parts over " << parts << ", row " << r;
      }
      dev.free(partials);
    }
    for (uint64_t p : args)
      dev.free(p);
  }
}

std::string tempDir(const char *what) {
  return (std::filesystem::temp_directory_path() /
          (std::string(what) + std::to_string(::getpid())))
      .string();
}

TEST(CudaKernels, GeneratedKernelsMatchTheirCppTwinsOnTheGpu) {
  std::string why, gpuWhy;
  std::unique_ptr<CudaDevice> gpu = CudaDevice::open(gpuWhy);
  std::string dir = tempDir("stretto-cuda-kernels-");
  CudaKernelCache nvrtc(dir);
  if (!nvrtc.available(why))
    GTEST_SKIP() << why;
  Built b;
  build(dir, b);
  if (HasFatalFailure())
    return;
  // Everything but the launches runs without a GPU (sm_90 then).
  CudaBinary bin;
  std::string error;
  ASSERT_TRUE(nvrtc.compile(b.cudaUnit, gpu ? gpu->arch() : "sm_90", bin, error)) << error;
  if (!gpu)
    GTEST_SKIP() << "no GPU to launch on (" << gpuWhy
                 << "); the C++ and NVRTC builds of every kernel kind succeeded";
  Launcher dev;
  dev.alloc = [&](size_t n) { return gpu->alloc(n); };
  dev.upload = [&](uint64_t d, const void *s, size_t n) { gpu->upload(d, s, n); };
  dev.download = [&](void *d, uint64_t s, size_t n) { gpu->download(d, s, n); };
  dev.free = [&](uint64_t p) { gpu->free(p); };
  dev.launch = [&](const std::string &name, std::vector<uint64_t> &args, unsigned grid,
                   unsigned block) {
    std::vector<CudaDevice::Ptr> ptrs(args.begin(), args.end());
    gpu->launch(bin.cubin, name, ptrs, grid, block);
  };
  compareWithTwins(b, dev, /*exactRows=*/false);
  std::filesystem::remove_all(dir);
}

// The same kernels' CUDA C on the emulated GPU (GpuEmulator.h): built as
// C++, the row sums' blocks on real threads with barriers and emulated warp
// shuffles; runs everywhere.
TEST(CudaKernels, GeneratedKernelsMatchTheirCppTwinsOnTheEmulatedGpu) {
  std::string dir = tempDir("stretto-emulated-kernels-");
  Built b;
  build(dir, b);
  if (HasFatalFailure())
    return;
  std::map<std::string, HostKernelFn> twins;
  for (size_t k = 0; k < b.kernels.size(); ++k)
    twins[b.kernels[k].name] = b.twins[k];
  std::unique_ptr<GpuBackend> gpu = emulatedGpu(twins, b.cudaUnit);
  Launcher dev;
  dev.alloc = [&](size_t n) { return gpu->alloc(n); };
  dev.upload = [&](uint64_t d, const void *s, size_t n) { gpu->uploadAsync(d, s, n); };
  dev.download = [&](void *d, uint64_t s, size_t n) { gpu->downloadSync(d, s, n); };
  dev.free = [&](uint64_t p) { gpu->free(p); };
  dev.launch = [&](const std::string &name, std::vector<uint64_t> &args, unsigned grid,
                   unsigned block) {
    std::vector<void *> params;
    for (uint64_t &a : args)
      params.push_back(&a);
    void *fn = gpu->modelFunction(name);
    ASSERT_NE(fn, nullptr) << name;
    gpu->launch(fn, grid, block, params.data(), static_cast<int>(params.size()), name.c_str());
  };
  compareWithTwins(b, dev, /*exactRows=*/true);
  std::filesystem::remove_all(dir);
}

} // namespace
