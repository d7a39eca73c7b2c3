//===- NvrtcTest.cpp - every generated CUDA kernel compiles with NVRTC ----===//
//
// docs/design.md §6: the CUDA kernels emitted for the examples compile with
// NVRTC for sm_90 and sm_80; no GPU is needed. gpt-tiny goes through the
// training pipeline and kernel-fuse-elementwise; each kernel's CUDA source is
// compiled on its own (so a failure names the kernel), ptxas reports registers
// and spills, and a spill in an elementwise kernel fails the test.
//
//===----------------------------------------------------------------------===//
#include "stretto/Compiler/Lowering.h"
#include "stretto/Transforms/Pipelines.h"
#include "stretto/Frontend/Load.h"
#include "stretto/Kernel/Compile.h"
#include "stretto/Kernel/Emitter.h"
#include "stretto/Kernel/Passes.h"
#include "stretto/Runtime/PlanExecutor.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#ifdef STRETTO_HAVE_NVRTC
#include <nvrtc.h>
#endif

#include "cuda/GpuBackend.h"
#include "cuda/MultiTensor.h"
#include <map>
#include <regex>
#include <set>

#include <string>
#include <vector>

using namespace stretto;

namespace {

// The CUDA kernels of gpt-tiny's step and update phases (`bf16`: compiled
// with bf16 storage, train.precision = "bf16").
std::vector<KernelSource> gptTinyKernels(bool bf16 = false) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<train::TrainDialect, kernel::KernelDialect>();
  auto diag = printDiagnostics(ctx);
  std::optional<LoadedModel> loaded =
      loadModel(ctx, STRETTO_SOURCE_DIR "/examples/gpt-tiny.toml",
                bf16 ? std::vector<std::string>{"train.precision=bf16"}
                     : std::vector<std::string>{});
  if (!loaded)
    return {};
  mlir::PassManager pm(&ctx);
  buildTrainingPipeline(pm, TrainingPipelineOptions::fromTrainer(loaded->model));
  buildKernelPipeline(pm); // GEMMs, elementwise and reduction kernels
  if (mlir::failed(pm.run(*loaded->module)))
    return {};
  std::vector<KernelSource> kernels;
  if (mlir::failed(kernel::emitAllKernels(loaded->model, kernels)))
    return {};
  return kernels;
}

// The kernels of a small model with a row sum, a column sum and a full sum
// of element-wise producers (kernel-fuse-reductions' three kinds): gpt-tiny's
// backward has no row sum since norm_grad took the normalisations' sums.
std::vector<KernelSource> reductionKernels() {
  mlir::MLIRContext ctx;
  ctx.loadDialect<train::TrainDialect, kernel::KernelDialect>();
  auto diag = printDiagnostics(ctx);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(R"(
train.model @sums {
  train.step {
    %x = train.input "x" : tensor<64x96xf32>
    %row = train.input "row" : tensor<96xf32>
    %0 = train.mul %x, %row : tensor<64x96xf32>, tensor<96xf32> -> tensor<64x96xf32>
    %r = train.reduce_sum %0 [1] : tensor<64x96xf32> -> tensor<64xf32>
    %1 = train.mul %x, %x : tensor<64x96xf32>
    %c = train.reduce_sum %1 [0] : tensor<64x96xf32> -> tensor<96xf32>
    %2 = train.exp %x : tensor<64x96xf32>
    %a = train.reduce_sum %2 [0, 1] : tensor<64x96xf32> -> tensor<f32>
    %s = train.reduce_sum %r [0] : tensor<64xf32> -> tensor<f32>
    %t = train.reduce_sum %c [0] : tensor<96xf32> -> tensor<f32>
    %u = train.add %s, %t : tensor<f32>
    %v = train.add %u, %a : tensor<f32>
    train.yield %v : tensor<f32>
  }
})",
                                                        &ctx);
  if (!module)
    return {};
  mlir::PassManager pm(&ctx);
  buildKernelPipeline(pm);
  if (mlir::failed(pm.run(*module)))
    return {};
  std::vector<KernelSource> kernels;
  for (auto model : module->getOps<train::ModelOp>())
    if (mlir::failed(kernel::emitAllKernels(model, kernels)))
      return {};
  return kernels;
}

#ifdef STRETTO_HAVE_NVRTC
// The kernels' CUDA C as one unit (the prelude once, as the runtime
// compiles a model), or an empty unit when a kernel has no header.
KernelSource oneUnit(const std::vector<KernelSource> &kernels, const std::string &name) {
  KernelSource unit;
  unit.name = name;
  for (const KernelSource &k : kernels) {
    size_t at = k.cuda.find("// " + k.name + ": (");
    if (at == std::string::npos)
      return KernelSource{};
    if (unit.cuda.empty())
      unit.cuda = k.cuda.substr(0, at); // the prelude
    unit.cuda += k.cuda.substr(at);
  }
  return unit;
}

struct NvrtcResult {
  bool ok = false;
  std::string log;
  size_t cubinBytes = 0;
  std::string ptx;
};

NvrtcResult compile(const KernelSource &k, const std::string &arch) {
  NvrtcResult r;
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, k.cuda.c_str(), (k.name + ".cu").c_str(), 0, nullptr,
                         nullptr) != NVRTC_SUCCESS) {
    r.log = "nvrtcCreateProgram failed";
    return r;
  }
  std::string archOpt = "--gpu-architecture=" + arch; // sm_XX: cubin, not only PTX
  const char *opts[] = {archOpt.c_str(), "--std=c++17", "--ptxas-options=-v"};
  nvrtcResult rc = nvrtcCompileProgram(prog, 3, opts);
  size_t logSize = 0;
  nvrtcGetProgramLogSize(prog, &logSize);
  r.log.resize(logSize);
  if (logSize)
    nvrtcGetProgramLog(prog, r.log.data());
  if (rc == NVRTC_SUCCESS && nvrtcGetCUBINSize(prog, &r.cubinBytes) == NVRTC_SUCCESS &&
      r.cubinBytes > 0) {
    std::string cubin(r.cubinBytes, '\0');
    r.ok = nvrtcGetCUBIN(prog, cubin.data()) == NVRTC_SUCCESS;
    size_t ptxSize = 0;
    if (nvrtcGetPTXSize(prog, &ptxSize) == NVRTC_SUCCESS && ptxSize > 1) {
      r.ptx.resize(ptxSize);
      if (nvrtcGetPTX(prog, r.ptx.data()) != NVRTC_SUCCESS)
        r.ptx.clear();
    }
  }
  nvrtcDestroyProgram(&prog);
  return r;
}

// Each kernel's stack frame in a ptxas -v log, in bytes: values kept in
// local memory (an array indexed at run time, a variable whose address
// escapes), a load and a store through the cache where registers would do.
std::map<std::string, int> stackFrames(const std::string &log) {
  std::map<std::string, int> frames;
  std::regex frame(R"(Function properties for (\w+)\s*\nptxas\s+\.\s+(\d+) bytes stack frame)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), frame); it != std::sregex_iterator();
       ++it)
    frames[(*it)[1].str()] = std::stoi((*it)[2].str());
  return frames;
}
#endif

TEST(NvrtcTest, GptTinyKernelsCompileForSm90AndSm80) {
#ifndef STRETTO_HAVE_NVRTC
  GTEST_SKIP() << "CUDA toolkit not found at configure time (STRETTO_HAVE_CUDA=OFF)";
#else
  std::vector<KernelSource> kernels = gptTinyKernels();
  ASSERT_FALSE(kernels.empty()) << "gpt-tiny did not compile to kernels";
  int update = 0;
  for (const KernelSource &k : kernels)
    update += k.name.find("_update_") != std::string::npos;
  // AdamW and clipping of all 30 parameters: the update phase has kernels.
  EXPECT_GE(update, 30);
  // Fused reductions (row sums and column sums) compile too.
  std::vector<KernelSource> sums = reductionKernels();
  ASSERT_FALSE(sums.empty()) << "the reductions model did not compile to kernels";
  kernels.insert(kernels.end(), sums.begin(), sums.end());
  int rowSums = 0, columnSums = 0;
  for (const KernelSource &k : kernels) {
    rowSums += k.kind == "row-sum";
    columnSums += k.kind == "column-sum";
  }
  EXPECT_GT(rowSums, 0);
  EXPECT_GT(columnSums, 0);
  std::regex regs(R"(Used (\d+) registers)"), spill(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
  for (const char *arch : {"sm_90", "sm_80"}) {
    int maxRegs = 0, spills = 0;
    for (const KernelSource &k : kernels) {
      NvrtcResult r = compile(k, arch);
      ASSERT_TRUE(r.ok) << k.name << " failed for " << arch << ":\n" << r.log << "\nsource:\n" << k.cuda;
      std::smatch m;
      if (std::regex_search(r.log, m, regs))
        maxRegs = std::max(maxRegs, std::stoi(m[1]));
      else
        ADD_FAILURE() << k.name << ": no register report in the ptxas log:\n" << r.log;
      for (auto it = std::sregex_iterator(r.log.begin(), r.log.end(), spill);
           it != std::sregex_iterator(); ++it)
        if (std::stoi((*it)[1]) || std::stoi((*it)[2])) {
          ++spills;
          ADD_FAILURE() << k.name << " spills on " << arch << ":\n" << r.log;
        }
    }
    std::printf("[nvrtc] %s: %zu kernels (%d update, %d row sums, %d column sums), max %d "
                "registers, %d with spills\n",
                arch, kernels.size(), update, rowSums, columnSums, maxRegs, spills);
  }
#endif
}

// The CUDA runtime's own kernels (runtime/cuda/RuntimeOps.cu: layout ops,
// sums, rows, embedding, cross-entropy, Newton-Schulz steps, bf16 rounding)
// compile for both archs without spills.
TEST(NvrtcTest, RuntimeKernelsCompileForSm90AndSm80) {
#ifndef STRETTO_HAVE_NVRTC
  GTEST_SKIP() << "CUDA toolkit not found at configure time (STRETTO_HAVE_CUDA=OFF)";
#else
  // sm_90: the units the runtime compiles at start-up (cudaRuntimeUnits),
  // every kernel in exactly one of them; sm_80: all in one unit.
  const std::string all = cudaRuntimeSource();
  size_t declared = 0; // every extern "C" __global__ of RuntimeOps.cu (a macro's once)
  for (size_t at = all.find("__global__"); at != std::string::npos;
       at = all.find("__global__", at + 1))
    ++declared;
  std::regex fn(R"(Function properties for (\w+))"),
      spill(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
  std::vector<std::set<std::string>> kernels; // per arch
  for (const char *arch : {"sm_90", "sm_80"}) {
    const std::vector<std::string> units =
        std::string(arch) == "sm_90" ? cudaRuntimeUnits() : std::vector<std::string>{all};
    std::map<std::string, int> unitOf;
    for (size_t u = 0; u < units.size(); ++u) {
      KernelSource ops;
      ops.name = "runtime-ops-" + std::to_string(u);
      ops.cuda = units[u];
      NvrtcResult r = compile(ops, arch);
      ASSERT_TRUE(r.ok) << arch << ", unit " << u << ":\n" << r.log;
      for (auto it = std::sregex_iterator(r.log.begin(), r.log.end(), fn);
           it != std::sregex_iterator(); ++it) {
        auto [at, fresh] = unitOf.emplace((*it)[1].str(), static_cast<int>(u));
        EXPECT_TRUE(fresh) << (*it)[1] << " is in units " << at->second << " and " << u;
      }
      EXPECT_NE(r.log.find("Function properties for"), std::string::npos)
          << "unit " << u << " has no kernel";
      for (auto it = std::sregex_iterator(r.log.begin(), r.log.end(), spill);
           it != std::sregex_iterator(); ++it)
        EXPECT_TRUE(std::stoi((*it)[1]) == 0 && std::stoi((*it)[2]) == 0) << arch << ":\n" << r.log;
      // No kernel keeps values in local memory (a stack frame: an array
      // indexed at run time, a variable whose address escapes), but for
      // these, off the paths a plan on a GPU with tensor cores takes: the
      // thread-per-row softmax kernels' 16 lane sums (the GPU launches
      // the half-warp *_rows16 forms), the CUDA-core attention's 32 scores
      // of a chunk (head dim 8, or a GPU before sm_80) and an unfused
      // unary op's table. The tensor-core attention's accumulators and
      // norm_grad's parameter partials were there until their loops were
      // unrolled and their pointers made plain.
      const std::set<std::string> framed = {"st_softmax_rows",  "st_softmax_grad_rows",
                                            "st_flash_fwd_d16", "st_flash_fwd_d32",
                                            "st_flash_fwd_d64", "st_unary_op"};
      const std::map<std::string, int> frames = stackFrames(r.log);
      for (const auto &[name, bytes] : frames)
        if (!framed.count(name))
          EXPECT_EQ(bytes, 0) << arch << ": " << name << " has a stack frame";
      EXPECT_FALSE(frames.empty()) << "no stack frame report in the ptxas log of unit " << u;
      std::regex regs(R"(Function properties for (st_flash_mma_\w+)[\s\S]*?Used (\d+) registers)");
      for (auto it = std::sregex_iterator(r.log.begin(), r.log.end(), regs);
           it != std::sregex_iterator(); ++it)
        std::printf("[nvrtc] %s: %s: %s registers\n", arch, (*it)[1].str().c_str(),
                    (*it)[2].str().c_str());
    }
    EXPECT_GE(unitOf.size(), declared) << arch;
    for (const char *name : {"st_unary_op", "st_flash_fwd_d64", "st_flash_mma_bwd_kv_d16",
                             "st_flash_mma_fwd_d64", "st_mean", "st_to_bf16"})
      EXPECT_EQ(unitOf.count(name), 1u) << name << " for " << arch;
    std::printf("[nvrtc] %s: %zu runtime kernels in %zu unit(s)\n", arch, unitOf.size(),
                units.size());
    kernels.emplace_back();
    for (const auto &[name, unit] : unitOf)
      kernels.back().insert(name);
  }
  EXPECT_EQ(kernels[0], kernels[1]) << "the units do not hold every kernel of the one unit";
#endif
}

// The tensor-core attention (RuntimeOps.cu's st_flash_mma_*) is built on
// mma.sync where the arch has bf16 tensor cores: its PTX for compute_80
// and compute_90 holds the bf16 m16n8k16 instruction and the warp OR
// (redux.sync), so a wrong architecture guard (the __trap() path) fails
// here rather than on a GPU; for sm_75 the runtime's kernels still build
// (CudaPlan.cpp never launches these there).
TEST(NvrtcTest, TensorCoreAttentionUsesMmaSync) {
#ifndef STRETTO_HAVE_NVRTC
  GTEST_SKIP() << "CUDA toolkit not found at configure time (STRETTO_HAVE_CUDA=OFF)";
#else
  const std::string source = cudaRuntimeSource();
  for (const char *arch : {"compute_80", "compute_90", "compute_75"}) {
    nvrtcProgram prog;
    ASSERT_EQ(nvrtcCreateProgram(&prog, source.c_str(), "runtime-ops.cu", 0, nullptr, nullptr),
              NVRTC_SUCCESS);
    std::string archOpt = std::string("--gpu-architecture=") + arch;
    const char *opts[] = {archOpt.c_str(), "--std=c++17"};
    nvrtcResult rc = nvrtcCompileProgram(prog, 2, opts);
    size_t size = 0;
    std::string ptx;
    if (rc == NVRTC_SUCCESS && nvrtcGetPTXSize(prog, &size) == NVRTC_SUCCESS) {
      ptx.resize(size);
      nvrtcGetPTX(prog, ptx.data());
    }
    nvrtcDestroyProgram(&prog);
    ASSERT_EQ(rc, NVRTC_SUCCESS) << arch;
    auto count = [&](const std::string &what) {
      size_t n = 0;
      for (size_t at = ptx.find(what); at != std::string::npos; at = ptx.find(what, at + 1))
        ++n;
      return n;
    };
    const size_t mma = count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
    const size_t kernels = count(".entry st_flash_mma_");
    EXPECT_EQ(kernels, 9u) << arch << ": fwd, bwd_q and bwd_kv for D = 16, 32, 64";
    if (std::string(arch) == "compute_75") {
      EXPECT_EQ(mma, 0u) << "sm_75 has no bf16 mma.sync";
      continue;
    }
    // Each kernel's six split products in each of its product loops.
    EXPECT_GE(mma, 9u * 6u) << arch;
    EXPECT_GT(count("redux.sync"), 0u) << arch << ": __reduce_or_sync";
    std::printf("[nvrtc] %s: %zu bf16 mma.sync in the attention kernels\n", arch, mma);
  }
#endif
}

// The multi-tensor kernels (runtime/cuda/MultiTensor.h) of gpt-tiny's unit
// (the prelude once, then every kernel, as the runtime compiles it) compile
// after it, without spills: AdamW's moment and parameter updates are each
// one group, and so are gradient clipping's sums of squares.
TEST(NvrtcTest, MultiTensorKernelsCompileForSm90) {
#ifndef STRETTO_HAVE_NVRTC
  GTEST_SKIP() << "CUDA toolkit not found at configure time (STRETTO_HAVE_CUDA=OFF)";
#else
  std::vector<KernelSource> kernels = gptTinyKernels();
  ASSERT_FALSE(kernels.empty());
  KernelSource unit = oneUnit(kernels, "gpt-tiny-unit");
  ASSERT_FALSE(unit.cuda.empty()) << "a kernel has no header";
  MultiTensorKernels multi = multiTensorKernels(unit.cuda);
  EXPECT_GE(multi.inputs.size(), 3u) << "AdamW's m, v and parameter updates";
  EXPECT_GE(multi.groupOf.size(), 3 * 29u) << "each of gpt-tiny's 30 parameters";
  // Gradient clipping's sums of squares: one group (and its finish).
  ASSERT_EQ(multi.sums.size(), 1u) << "gpt-tiny's gradients' sums of squares";
  int summed = 0, split = 0;
  for (auto &[kernel, group] : multi.groupOf)
    summed += multi.sums.count(group) != 0;
  for (const KernelSource &k : kernels) // (every whole-tensor sum has a split twin)
    split += k.cuda.find("void " + k.name + "_parts(") != std::string::npos;
  EXPECT_EQ(summed, split) << "every whole-tensor sum";
  EXPECT_GE(summed, 29) << "each of gpt-tiny's 29 gradients";
  // Chain kernels (addChainKernels) of three and of two stages: they build
  // whatever stages they chain (which chains exist is the plan's business).
  std::vector<std::string> names;
  for (auto &[name, n] : multi.inputs)
    names.push_back(name);
  addChainKernels(multi, {{names[0], names[1], names[2]}, {names[1], names[2]}});
  ASSERT_EQ(multi.chains.size(), 2u);
  unit.cuda += multi.source;
  NvrtcResult r = compile(unit, "sm_90");
  ASSERT_TRUE(r.ok) << r.log;
  std::regex spill(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
  for (auto it = std::sregex_iterator(r.log.begin(), r.log.end(), spill);
       it != std::sregex_iterator(); ++it)
    EXPECT_TRUE(std::stoi((*it)[1]) == 0 && std::stoi((*it)[2]) == 0) << r.log;
  // ... and without stack frames (stackFrames): the multi-tensor kernels'
  // tables of tensors are read, not copied into arrays indexed at run time.
  int multiKernels = 0;
  for (const auto &[name, bytes] : stackFrames(r.log))
    if (name.rfind("st_multi", 0) == 0) {
      ++multiKernels;
      EXPECT_EQ(bytes, 0) << name << " has a stack frame";
    }
  EXPECT_GE(multiKernels, 3) << "no multi-tensor kernel in the ptxas log";
  for (auto &[name, n] : multi.inputs)
    EXPECT_NE(r.log.find("Function properties for " + name), std::string::npos) << name;
  for (const std::string &name : multi.sums)
    EXPECT_NE(r.log.find("Function properties for " + name + "_finish"), std::string::npos);
  for (auto &[signature, name] : multi.chains)
    EXPECT_NE(r.log.find("Function properties for " + name), std::string::npos) << signature;
  // The element loops' vector step (MultiTensor.cpp's elementLoops): 16-byte
  // loads (read-only in a group, plain in a chain, whose stages read what
  // earlier ones wrote) and stores, eight elements in registers (a chain
  // of AdamW's three stages included).
  auto entry = [&](const std::string &name) {
    size_t at = r.ptx.find(".entry " + name + "(");
    return at == std::string::npos ? std::string()
                                   : r.ptx.substr(at, r.ptx.find(".entry ", at + 1) - at);
  };
  std::vector<std::pair<std::string, bool>> words; // kernel, chain
  for (auto &[name, n] : multi.inputs)
    if (!multi.sums.count(name))
      words.push_back({name, false});
  for (auto &[signature, name] : multi.chains)
    words.push_back({name, true});
  for (auto &[name, chain] : words) {
    const std::string text = entry(name);
    ASSERT_FALSE(text.empty()) << name;
    // (a table's pointers are generic: plain loads and stores are ld.v4 and
    // st.v4, the read-only loads ld.global.nc.v4)
    EXPECT_TRUE(std::regex_search(
        text, std::regex(chain ? R"(\tld(\.global)?\.v4\.)" : R"(\tld\.global\.nc\.v4\.)")))
        << name << ":\n"
        << text;
    EXPECT_TRUE(std::regex_search(text, std::regex(R"(\tst(\.global)?\.v4\.)"))) << name << ":\n"
                                                                                 << text;
    EXPECT_EQ(text.find(".local"), std::string::npos) << name << ":\n" << text;
  }
  std::printf("[nvrtc] sm_90: %zu multi-tensor kernels for %zu of gpt-tiny's kernels\n",
              multi.inputs.size(), multi.groupOf.size());
#endif
}

// gpt-tiny with bf16 storage, as one unit: its store_bf16 kernels (two-byte
// slots, ST_STORE_BF16 and ST_LOAD_BF16) compile for sm_90 without spills,
// and so does the same unit with kBf16AsF32Define in front (the runtime's
// STRETTO_BF16_STORAGE=0: four-byte slots).
TEST(NvrtcTest, Bf16StorageKernelsCompileForSm90) {
#ifndef STRETTO_HAVE_NVRTC
  GTEST_SKIP() << "CUDA toolkit not found at configure time (STRETTO_HAVE_CUDA=OFF)";
#else
  std::vector<KernelSource> kernels = gptTinyKernels(/*bf16=*/true);
  ASSERT_FALSE(kernels.empty());
  KernelSource unit = oneUnit(kernels, "gpt-tiny-bf16-unit");
  ASSERT_FALSE(unit.cuda.empty()) << "a kernel has no header";
  int slots = 0;
  for (const KernelSource &k : kernels)
    slots += k.body.find("ST_BF16_SLOT") != std::string::npos;
  EXPECT_GT(slots, 10) << "few kernels read or write two-byte bf16";
  std::regex spill(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
  for (bool four : {false, true}) {
    KernelSource u = unit;
    if (four)
      u.cuda = kBf16AsF32Define + u.cuda;
    NvrtcResult r = compile(u, "sm_90");
    ASSERT_TRUE(r.ok) << (four ? "four-byte: " : "two-byte: ") << r.log;
    for (auto it = std::sregex_iterator(r.log.begin(), r.log.end(), spill);
         it != std::sregex_iterator(); ++it)
      EXPECT_TRUE(std::stoi((*it)[1]) == 0 && std::stoi((*it)[2]) == 0) << r.log;
  }
  std::printf("[nvrtc] sm_90: gpt-tiny bf16, %zu kernels, %d with two-byte slots\n",
              kernels.size(), slots);
#endif
}

// Element-wise kernels move the operands they read and write at the
// element's own index in 16-byte words (Emitter.cpp's vector step): each
// one's PTX loads them with ld.global.nc.v4 and stores with st.global.v4,
// and keeps its eight elements in registers (no local memory), with f32
// values and with two-byte bf16 slots.
TEST(NvrtcTest, ElementwiseKernelsMoveSixteenByteWords) {
#ifndef STRETTO_HAVE_NVRTC
  GTEST_SKIP() << "CUDA toolkit not found at configure time (STRETTO_HAVE_CUDA=OFF)";
#else
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 storage" : "f32");
    std::vector<KernelSource> kernels = gptTinyKernels(bf16);
    ASSERT_FALSE(kernels.empty());
    NvrtcResult r = compile(oneUnit(kernels, "gpt-tiny-unit"), "sm_90");
    ASSERT_TRUE(r.ok) << r.log;
    ASSERT_FALSE(r.ptx.empty());
    int checked = 0, half = 0;
    for (const KernelSource &k : kernels) {
      if (k.kind != "elementwise" || k.numElements < 4096) // (kVectorStepElements)
        continue;
      size_t at = r.ptx.find(".entry " + k.name + "(");
      ASSERT_NE(at, std::string::npos) << k.name;
      const std::string entry = r.ptx.substr(at, r.ptx.find(".entry ", at + 1) - at);
      EXPECT_NE(entry.find("ld.global.nc.v4."), std::string::npos) << k.name << ":\n" << entry;
      EXPECT_NE(entry.find("st.global.v4."), std::string::npos) << k.name << ":\n" << entry;
      EXPECT_EQ(entry.find(".local"), std::string::npos) << k.name << ":\n" << entry;
      ++checked;
      half += k.body.find("ST_BF16_SLOT") != std::string::npos;
    }
    EXPECT_GT(checked, 20);
    if (bf16)
      EXPECT_GT(half, 10);
    std::printf("[nvrtc] sm_90: gpt-tiny %s, %d element-wise kernels in 16-byte words (%d with "
                "two-byte slots)\n",
                bf16 ? "bf16" : "f32", checked, half);
  }
#endif
}

// NVRTC reports a broken kernel: the test above can fail.
TEST(NvrtcTest, ReportsACompileError) {
#ifndef STRETTO_HAVE_NVRTC
  GTEST_SKIP() << "CUDA toolkit not found at configure time (STRETTO_HAVE_CUDA=OFF)";
#else
  KernelSource bad;
  bad.name = "bad";
  bad.cuda = "extern \"C\" __global__ void bad(float *o) { o[0] = undeclared; }\n";
  NvrtcResult r = compile(bad, "sm_90");
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.log.find("undeclared"), std::string::npos) << r.log;
#endif
}

} // namespace
