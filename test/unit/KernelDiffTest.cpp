//===- KernelDiffTest.cpp - fused C++ kernels against the reference executor -===//
//
// Differential tests of kernel-fuse-elementwise + the emitter + the host JIT:
// each case is a `train.step` whose elementwise ops end in a reduce_sum. The
// reference executor runs the unfused ops and reports the value fed to the
// reduce_sum; the same module is fused, every kernel.elementwise is emitted as
// C++, compiled (through the on-disk cache) and run in program order on the
// same random inputs, and the value fed to the reduce_sum must match within
// a tolerance per dtype. Also: cache hits, corrupt entries, compile errors.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "stretto/Compiler/Lowering.h"
#include "stretto/Transforms/Pipelines.h"
#include "stretto/Frontend/Load.h"
#include "stretto/Runtime/HostJit.h"
#include "stretto/Kernel/Emitter.h"
#include "stretto/Kernel/Passes.h"
#include "stretto/Runtime/RefExecutor.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>

using namespace stretto;
namespace fs = std::filesystem;

namespace {

std::string cacheDir(const std::string &tag) {
  return (fs::temp_directory_path() /
          ("stretto-kernel-cache-" + tag + "-" + std::to_string(getpid())))
      .string();
}

struct Buffer {
  std::vector<float> f32;
  std::vector<double> f64;
  bool isF64 = false;
  void *data() { return isF64 ? (void *)f64.data() : (void *)f32.data(); }
  double at(size_t i) const { return isF64 ? f64[i] : f32[i]; }
};

// Runs `source` both ways and compares the reduced value elementwise.
void checkCase(const std::string &source, double lo, double hi, uint64_t seed) {
  // --- reference: unfused ops ------------------------------------------------
  test::Compiled ref = test::compile(source);
  ASSERT_TRUE(ref.ok) << ref.diagnostics;
  const std::vector<Node> &nodes = ref.graph.nodes;
  int root = -1;
  for (const Node &n : nodes)
    if (n.kind == OpKind::Yield)
      root = nodes[n.operands[0]].operands[0];
  ASSERT_GE(root, 0);
  bool f64 = nodes[root].dtype == DType::F64;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::map<std::string, HostTensor> inputs;
  for (const Node &n : nodes)
    if (n.kind == OpKind::Input) {
      HostTensor t{n.shape, {}};
      for (int64_t i = 0; i < numElements(n.shape); ++i)
        t.data.push_back(f64 ? dist(rng) : (double)(float)dist(rng));
      inputs[n.name] = t;
    }
  RefExecutor exec(ref.graph, f64 ? Precision::F64 : Precision::F32);
  exec.initialize(0);
  StepResult want = exec.evaluate(inputs, {root});
  const HostTensor &expected = want.probes.at(root);

  // --- fused: kernels compiled by the host compiler ----------------------------
  mlir::MLIRContext ctx;
  test::prepareContext(ctx);
  ctx.loadDialect<kernel::KernelDialect>();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(source, &ctx);
  ASSERT_TRUE(module);
  mlir::PassManager pm(&ctx);
  pm.nest<train::ModelOp>().addPass(kernel::createKernelFuseElementwise());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));

  HostKernelCache cache(cacheDir("diff"));
  llvm::DenseMap<mlir::Value, Buffer> values;
  mlir::Value rootValue;
  int count = 0;
  module->walk([&](mlir::Operation *op) {
    if (auto in = llvm::dyn_cast<train::InputOp>(op)) {
      Buffer b;
      b.isF64 = f64;
      for (double v : inputs.at(in.getName().str()).data)
        f64 ? b.f64.push_back(v) : b.f32.push_back((float)v);
      values[in.getResult()] = b;
    } else if (auto sum = llvm::dyn_cast<train::ReduceSumOp>(op)) {
      rootValue = sum.getInput();
    } else if (auto k = llvm::dyn_cast<kernel::ElementwiseOp>(op)) {
      std::string name = "diff_k" + std::to_string(count++);
      mlir::FailureOr<KernelSource> src = kernel::emitElementwise(k, name);
      ASSERT_TRUE(mlir::succeeded(src));
      std::string error;
      HostKernelFn fn = cache.load(src->cpp, name, error);
      ASSERT_NE(fn, nullptr) << error;
      std::vector<const void *> ins;
      for (mlir::Value v : k.getInputs()) {
        ASSERT_TRUE(values.count(v)) << "kernel operand not computed before " << name;
        ins.push_back(values[v].data());
      }
      std::vector<void *> outs;
      for (mlir::Value r : k.getResults()) {
        Buffer &b = values[r];
        b.isF64 = f64;
        f64 ? b.f64.resize(src->numElements) : b.f32.resize(src->numElements);
      }
      for (mlir::Value r : k.getResults())
        outs.push_back(values[r].data());
      fn(ins.data(), outs.data());
    }
  });
  ASSERT_GT(count, 0) << "no kernel was formed";
  ASSERT_TRUE(rootValue && values.count(rootValue)) << "reduced value not computed by a kernel";
  const Buffer &got = values[rootValue];
  double rel = f64 ? 1e-12 : 2e-6, abs = f64 ? 1e-14 : 1e-6;
  size_t bad = 0;
  for (size_t i = 0; i < expected.data.size(); ++i) {
    double e = expected.data[i], g = got.at(i);
    bool same = (std::isnan(e) && std::isnan(g)) || std::fabs(e - g) <= abs + rel * std::fabs(e);
    if (!same && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": kernel " << g << ", reference " << e;
  }
  EXPECT_EQ(bad, 0u) << "of " << expected.data.size() << " elements; fused IR kernels: " << count;
  std::error_code ec;
  fs::remove_all(cacheDir("diff"), ec);
}

const char *kHeader = "train.model @m {\n  train.step {\n";
const char *kFooter = "  }\n}\n";

std::string stepOf(const std::string &body) { return kHeader + body + kFooter; }

TEST(KernelDiffTest, EveryScalarOpWithBroadcasts) {
  // Positive inputs keep log/sqrt/pow finite; neg and sub give both signs to
  // max/min/gt/relu.
  checkCase(stepOf(R"(
    %x = train.input "x" : tensor<6x5xf32>
    %r = train.input "r" : tensor<5xf32>
    %c = train.input "c" : tensor<6x1xf32>
    %s = train.input "s" : tensor<f32>
    %0 = train.sub %x, %r : tensor<6x5xf32>, tensor<5xf32> -> tensor<6x5xf32>
    %1 = train.max %0, %c : tensor<6x5xf32>, tensor<6x1xf32> -> tensor<6x5xf32>
    %2 = train.min %1, %s : tensor<6x5xf32>, tensor<f32> -> tensor<6x5xf32>
    %3 = train.gt %2, %x : tensor<6x5xf32>
    %4 = train.relu %0 : tensor<6x5xf32>
    %5 = train.add %3, %4 : tensor<6x5xf32>
    %6 = train.mul %5, %c : tensor<6x5xf32>, tensor<6x1xf32> -> tensor<6x5xf32>
    %7 = train.pow %x, %r : tensor<6x5xf32>, tensor<5xf32> -> tensor<6x5xf32>
    %8 = train.log %7 : tensor<6x5xf32>
    %9 = train.sqrt %x : tensor<6x5xf32>
    %10 = train.rsqrt %9 : tensor<6x5xf32>
    %11 = train.div %8, %10 : tensor<6x5xf32>
    %12 = train.exp %11 : tensor<6x5xf32>
    %13 = train.tanh %12 : tensor<6x5xf32>
    %14 = train.cos %13 : tensor<6x5xf32>
    %15 = train.neg %14 : tensor<6x5xf32>
    %16 = train.gelu %15 : tensor<6x5xf32>
    %17 = train.add %16, %6 : tensor<6x5xf32>
    %18 = train.round_bf16 %17 : tensor<6x5xf32>
    %19 = train.mul %18, %x : tensor<6x5xf32>
    %l = train.reduce_sum %19 [0, 1] : tensor<6x5xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
)"), 0.25, 2.0, 1);
}

TEST(KernelDiffTest, F64Chain) {
  checkCase(stepOf(R"(
    %x = train.input "x" : tensor<3x4x5xf64>
    %b = train.input "b" : tensor<4x1xf64>
    %0 = train.mul %x, %b : tensor<3x4x5xf64>, tensor<4x1xf64> -> tensor<3x4x5xf64>
    %1 = train.gelu %0 : tensor<3x4x5xf64>
    %2 = train.div %1, %x : tensor<3x4x5xf64>
    %l = train.reduce_sum %2 [0, 1, 2] : tensor<3x4x5xf64> -> tensor<f64>
    train.yield %l : tensor<f64>
)"), -1.5, 1.5, 2);
}

// Values used twice become separate kernels whose results feed later ones.
TEST(KernelDiffTest, SharedIntermediatesAcrossKernels) {
  checkCase(stepOf(R"(
    %x = train.input "x" : tensor<4x8xf32>
    %b = train.input "b" : tensor<8xf32>
    %e = train.exp %x : tensor<4x8xf32>
    %row = train.tanh %b : tensor<8xf32>
    %a = train.add %e, %row : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %q = train.log %e : tensor<4x8xf32>
    %z = train.mul %a, %q : tensor<4x8xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
)"), -1.0, 1.0, 3);
}

// AdamW's update of one parameter (the math train-optimizer emits), with
// the hyper-parameters as scalar inputs and the descend as p - lr * dir.
TEST(KernelDiffTest, AdamWUpdate) {
  checkCase(stepOf(R"(
    %g0 = train.input "g" : tensor<16x12xf32>
    %p = train.input "p" : tensor<16x12xf32>
    %m = train.input "m" : tensor<16x12xf32>
    %v = train.input "v" : tensor<16x12xf32>
    %clip = train.input "clip" : tensor<f32>
    %b1 = train.input "b1" : tensor<f32>
    %b1c = train.input "b1c" : tensor<f32>
    %b2 = train.input "b2" : tensor<f32>
    %b2c = train.input "b2c" : tensor<f32>
    %bc1 = train.input "bc1" : tensor<f32>
    %bc2 = train.input "bc2" : tensor<f32>
    %eps = train.input "eps" : tensor<f32>
    %wd = train.input "wd" : tensor<f32>
    %lr = train.input "lr" : tensor<f32>
    %g = train.mul %g0, %clip : tensor<16x12xf32>, tensor<f32> -> tensor<16x12xf32>
    %1 = train.mul %g, %b1c : tensor<16x12xf32>, tensor<f32> -> tensor<16x12xf32>
    %2 = train.mul %m, %b1 : tensor<16x12xf32>, tensor<f32> -> tensor<16x12xf32>
    %m1 = train.add %2, %1 : tensor<16x12xf32>
    %3 = train.mul %g, %g : tensor<16x12xf32>
    %4 = train.mul %3, %b2c : tensor<16x12xf32>, tensor<f32> -> tensor<16x12xf32>
    %5 = train.mul %v, %b2 : tensor<16x12xf32>, tensor<f32> -> tensor<16x12xf32>
    %v1 = train.add %5, %4 : tensor<16x12xf32>
    %6 = train.div %v1, %bc2 : tensor<16x12xf32>, tensor<f32> -> tensor<16x12xf32>
    %7 = train.sqrt %6 : tensor<16x12xf32>
    %8 = train.add %7, %eps : tensor<16x12xf32>, tensor<f32> -> tensor<16x12xf32>
    %9 = train.div %m1, %bc1 : tensor<16x12xf32>, tensor<f32> -> tensor<16x12xf32>
    %10 = train.div %9, %8 : tensor<16x12xf32>
    %11 = train.mul %p, %wd : tensor<16x12xf32>, tensor<f32> -> tensor<16x12xf32>
    %12 = train.add %10, %11 : tensor<16x12xf32>
    %new = train.descend %p, %12, %lr : tensor<16x12xf32>, tensor<f32>
    %l = train.reduce_sum %new [0, 1] : tensor<16x12xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
)"), 0.05, 1.0, 4);
}


// --- every kernel of gpt-tiny --------------------------------------------------

std::string typeText(mlir::Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

// The kernel's body written back as `train` ops on whole tensors (the scalar
// ops are named after, and have the semantics of, the train ops of the same
// name, with NumPy broadcasting), as a train.step with one train.input per
// kernel operand; its yield is the (reduced) first result.
std::string bodyAsTrainStep(kernel::ElementwiseOp k) {
  std::string text = "train.model @k {\n  train.step {\n";
  llvm::DenseMap<mlir::Value, std::pair<std::string, llvm::SmallVector<int64_t>>> vals;
  mlir::Type elem = k.getResultType().getElementType();
  auto tensorText = [&](llvm::ArrayRef<int64_t> shape) {
    return typeText(mlir::RankedTensorType::get(shape, elem));
  };
  for (auto [i, v] : llvm::enumerate(k.getInputs())) {
    auto shape = llvm::cast<mlir::RankedTensorType>(v.getType()).getShape();
    std::string name = "%in" + std::to_string(i);
    text += "    " + name + " = train.input \"in" + std::to_string(i) + "\" : " +
            tensorText(shape) + "\n";
    vals[k.getBodyBlock().getArgument(i)] = {name, {shape.begin(), shape.end()}};
  }
  int counter = 0;
  for (mlir::Operation &op : k.getBodyBlock().without_terminator()) {
    std::string name = "%v" + std::to_string(counter++);
    std::string mnemonic = op.getName().stripDialect().str();
    llvm::SmallVector<int64_t> shape;
    if (op.getNumOperands() == 1) {
      shape = vals[op.getOperand(0)].second;
      text += "    " + name + " = train." + mnemonic + " " + vals[op.getOperand(0)].first +
              " : " + tensorText(shape) + "\n";
    } else {
      auto &[a, sa] = vals[op.getOperand(0)];
      auto &[b, sb] = vals[op.getOperand(1)];
      size_t rank = std::max(sa.size(), sb.size());
      shape.assign(rank, 1);
      for (size_t d = 0; d < rank; ++d) {
        int64_t da = d + sa.size() >= rank ? sa[d + sa.size() - rank] : 1;
        int64_t db = d + sb.size() >= rank ? sb[d + sb.size() - rank] : 1;
        shape[d] = std::max(da, db);
      }
      text += "    " + name + " = train." + mnemonic + " " + a + ", " + b + " : " +
              tensorText(sa) + ", " + tensorText(sb) + " -> " + tensorText(shape) + "\n";
    }
    vals[op.getResult(0)] = {name, shape};
  }
  auto &[root, shape] = vals[k.getBodyBlock().getTerminator()->getOperand(0)];
  std::string yielded = root;
  if (!shape.empty()) {
    std::string dims;
    for (size_t d = 0; d < shape.size(); ++d)
      dims += (d ? ", " : "") + std::to_string(d);
    text += "    %sum = train.reduce_sum " + root + " [" + dims + "] : " + tensorText(shape) +
            " -> " + tensorText({}) + "\n";
    yielded = "%sum";
  }
  text += "    train.yield " + yielded + " : " + tensorText({}) + "\n  }\n}\n";
  return text;
}

// Every kernel of gpt-tiny's step and update phases, compiled into one
// shared object, against its own ops run by the reference executor on random
// inputs: the emitter's broadcast indexing and scalar code on the real shapes.
// In f32, and with bf16 storage (the kernels round where the reference's
// round_bf16 ops do; the same scalar functions on both sides give the same
// f32 values, so the roundings agree).
class GptTinyKernels : public testing::TestWithParam<const char *> {};

TEST_P(GptTinyKernels, MatchTheirOpsOnTheReference) {
  mlir::MLIRContext ctx;
  test::prepareContext(ctx);
  ctx.loadDialect<kernel::KernelDialect>();
  auto diag = printDiagnostics(ctx);
  std::optional<LoadedModel> loaded = loadModel(
      ctx, STRETTO_SOURCE_DIR "/examples/gpt-tiny.toml",
      {std::string("train.precision=") + GetParam()});
  ASSERT_TRUE(loaded);
  mlir::PassManager pm(&ctx);
  buildTrainingPipeline(pm, TrainingPipelineOptions::fromTrainer(loaded->model));
  pm.nest<train::ModelOp>().addPass(kernel::createKernelFuseElementwise());
  ASSERT_TRUE(mlir::succeeded(pm.run(*loaded->module)));
  std::vector<kernel::ElementwiseOp> ops;
  loaded->model.walk([&](kernel::ElementwiseOp k) { ops.push_back(k); });
  std::vector<KernelSource> sources;
  ASSERT_TRUE(mlir::succeeded(kernel::emitAllKernels(loaded->model, sources)));
  ASSERT_EQ(ops.size(), sources.size());
  ASSERT_GT(ops.size(), 100u);

  // One translation unit: the shared prelude is guarded, ST_FN redefined
  // identically.
  std::string all;
  for (const KernelSource &k : sources)
    all += k.cpp;
  std::string dir = cacheDir("gpt");
  HostKernelCache cache(dir);
  std::string error;
  std::vector<HostKernelFn> fns;
  for (const KernelSource &k : sources) {
    fns.push_back(cache.load(all, k.name, error));
    ASSERT_NE(fns.back(), nullptr) << error;
  }
  EXPECT_EQ(cache.stats().compiles, 1);

  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> dist(0.1, 1.0);
  int checked = 0, rounding = 0;
  for (size_t n = 0; n < ops.size(); ++n) {
    const KernelSource &k = sources[n];
    ASSERT_EQ(k.dtype, "float") << k.name;
    std::string text = bodyAsTrainStep(ops[n]);
    test::Compiled ref = test::compile(text);
    ASSERT_TRUE(ref.ok) << k.name << ":\n" << text << ref.diagnostics;
    int yield = -1;
    for (size_t i = 0; i < ref.graph.nodes.size(); ++i)
      if (ref.graph.nodes[i].kind == OpKind::Yield)
        yield = i;
    int root = ref.graph.nodes[yield].operands[0];
    if (ref.graph.nodes[root].kind == OpKind::ReduceSum)
      root = ref.graph.nodes[root].operands[0];

    std::map<std::string, HostTensor> inputs;
    std::vector<std::vector<float>> inBufs;
    for (size_t i = 0; i < k.inputShapes.size(); ++i) {
      HostTensor t{k.inputShapes[i], {}};
      std::vector<float> buf;
      for (int64_t e = 0; e < numElements(t.shape); ++e) {
        buf.push_back((float)dist(rng));
        t.data.push_back(buf.back());
      }
      inputs["in" + std::to_string(i)] = t;
      inBufs.push_back(std::move(buf));
    }
    RefExecutor exec(ref.graph, Precision::F32);
    exec.initialize(0);
    const HostTensor expected = exec.evaluate(inputs, {root}).probes.at(root);

    std::vector<const void *> ins;
    for (auto &b : inBufs)
      ins.push_back(b.data());
    std::vector<float> out(k.numElements);
    void *outs[] = {out.data()};
    fns[n](ins.data(), outs);
    ASSERT_EQ(expected.data.size(), out.size()) << k.name;
    size_t bad = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      double e = expected.data[i], g = out[i];
      if (!((std::isnan(e) && std::isnan(g)) || std::fabs(e - g) <= 1e-6 + 2e-6 * std::fabs(e)))
        if (bad++ < 3)
          ADD_FAILURE() << k.name << " element " << i << ": kernel " << g << ", reference " << e
                        << "\n" << text;
    }
    EXPECT_EQ(bad, 0u) << k.name;
    ++checked;
    rounding += text.find("train.round_bf16") != std::string::npos;
  }
  std::printf("[kernel-diff] gpt-tiny, %s: %d kernels compared with the reference executor (%d "
              "of them round to bf16)\n",
              GetParam(), checked, rounding);
  if (std::string(GetParam()) == "bf16")
    EXPECT_GT(rounding, 10) << "the bf16 plan's kernels should round";
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Precisions, GptTinyKernels, testing::Values("f32", "bf16"));

const char *kSmallKernel = R"(extern "C" void k(const void *const *in, void *const *out) {
  ((float *)out[0])[0] = ((const float *)in[0])[0] * 2.0f;
}
)";

float runSmall(HostKernelFn fn) {
  float x = 1.5f, y = 0.0f;
  const void *ins[] = {&x};
  void *outs[] = {&y};
  fn(ins, outs);
  return y;
}

// A second cache on the same directory hits; a truncated .so, a same-size
// overwrite and a missing .sum are each detected and rebuilt.
TEST(HostKernelCacheTest, HitsAndRebuildsCorruptEntries) {
  std::string dir = cacheDir("cache");
  fs::remove_all(dir);
  std::string error;
  std::string so;
  {
    HostKernelCache cache(dir);
    HostKernelFn fn = cache.load(kSmallKernel, "k", error);
    ASSERT_NE(fn, nullptr) << error;
    EXPECT_EQ(runSmall(fn), 3.0f);
    EXPECT_EQ(cache.stats().compiles, 1);
    so = cache.entryPath(kSmallKernel) + ".so";
  }
  {
    HostKernelCache cache(dir);
    HostKernelFn fn = cache.load(kSmallKernel, "k", error);
    ASSERT_NE(fn, nullptr) << error;
    EXPECT_EQ(runSmall(fn), 3.0f);
    EXPECT_EQ(cache.stats().hits, 1);
    EXPECT_EQ(cache.stats().compiles, 0);
  }
  auto corruptions = std::vector<std::function<void()>>{
      [&] { fs::resize_file(so, fs::file_size(so) / 2); },
      [&] {
        std::fstream f(so, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(fs::file_size(so) / 2);
        f.write("garbage!", 8);
      },
      [&] { fs::remove(fs::path(so).replace_extension(".sum")); },
  };
  for (size_t i = 0; i < corruptions.size(); ++i) {
    corruptions[i]();
    HostKernelCache cache(dir);
    HostKernelFn fn = cache.load(kSmallKernel, "k", error);
    ASSERT_NE(fn, nullptr) << "corruption " << i << ": " << error;
    EXPECT_EQ(runSmall(fn), 3.0f) << "corruption " << i;
    EXPECT_EQ(cache.stats().rebuilt, 1) << "corruption " << i;
    EXPECT_EQ(cache.stats().compiles, 1) << "corruption " << i;
  }
  fs::remove_all(dir);
}

TEST(HostKernelCacheTest, KeyDependsOnSourceAndFlags) {
  std::string dir = cacheDir("key");
  HostKernelCache a(dir), b(dir, "c++", {"-O0", "-fPIC", "-shared"});
  EXPECT_NE(a.entryPath(kSmallKernel), b.entryPath(kSmallKernel));
  EXPECT_NE(a.entryPath(kSmallKernel), a.entryPath(std::string(kSmallKernel) + "\n"));
  EXPECT_EQ(a.entryPath(kSmallKernel), HostKernelCache(dir).entryPath(kSmallKernel));
  fs::remove_all(dir);
}

TEST(HostKernelCacheTest, CompileErrorNamesTheKernel) {
  std::string dir = cacheDir("error");
  HostKernelCache cache(dir);
  std::string error;
  EXPECT_EQ(cache.load("extern \"C\" void broken() { undeclared_name; }\n", "broken", error),
            nullptr);
  EXPECT_NE(error.find("kernel broken"), std::string::npos) << error;
  EXPECT_NE(error.find("undeclared_name"), std::string::npos) << error;
  fs::remove_all(dir);
}

// STRETTO_HOST_ARCH picks the -march value; one the shell could misread
// (the compiler runs through it) fails every load with a message, and
// nothing runs.
TEST(HostKernelCacheTest, HostArchChoosesTheTargetAndRejectsShellWords) {
  std::string dir = cacheDir("arch");
  ::setenv("STRETTO_HOST_ARCH", "x86-64-v3", 1);
  std::vector<std::string> v3 = HostKernelCache::defaultFlags();
  ::setenv("STRETTO_HOST_ARCH", "native; touch /tmp/stretto-pwned", 1);
  std::vector<std::string> bad = HostKernelCache::defaultFlags();
  ::unsetenv("STRETTO_HOST_ARCH");
  EXPECT_NE(std::find(v3.begin(), v3.end(), "-march=x86-64-v3"), v3.end());
  std::vector<std::string> native = HostKernelCache::defaultFlags();
  EXPECT_NE(std::find(native.begin(), native.end(), "-march=native"), native.end());
  EXPECT_NE(HostKernelCache(dir, "c++", v3).entryPath(kSmallKernel),
            HostKernelCache(dir).entryPath(kSmallKernel));

  fs::remove("/tmp/stretto-pwned");
  HostKernelCache cache(dir, "c++", bad);
  std::string error;
  EXPECT_EQ(cache.load(kSmallKernel, "k", error), nullptr);
  EXPECT_NE(error.find("STRETTO_HOST_ARCH"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists("/tmp/stretto-pwned"));
  fs::remove_all(dir);
}

} // namespace

TEST(HostKernelCacheTest, AStageCompilesOnlyItsKernels) {
  // A pipeline rank takes the self-contained sources of its own kernels out
  // of the model's unit (hostKernelSubset) and compiles just those.
  mlir::MLIRContext ctx;
  test::prepareContext(ctx);
  ctx.loadDialect<kernel::KernelDialect>();
  auto diag = printDiagnostics(ctx);
  std::optional<LoadedModel> loaded =
      loadModel(ctx, STRETTO_SOURCE_DIR "/examples/gpt-tiny.toml", {});
  ASSERT_TRUE(loaded);
  mlir::PassManager pm(&ctx);
  buildTrainingPipeline(pm);
  pm.nest<train::ModelOp>().addPass(kernel::createKernelFuseElementwise());
  ASSERT_TRUE(mlir::succeeded(pm.run(*loaded->module)));
  std::vector<KernelSource> sources;
  ASSERT_TRUE(mlir::succeeded(kernel::emitAllKernels(loaded->model, sources)));
  // The unit as compileKernels joins it: the prelude once, then the kernels.
  std::string all = kernel::joinCppSources(sources);
  std::set<std::string> some; // every third kernel, not the first
  for (size_t k = 1; k < sources.size(); k += 3)
    some.insert(sources[k].name);
  std::string part = hostKernelSubset(all, some);
  EXPECT_LT(part.size(), all.size() / 2);
  for (const KernelSource &k : sources) {
    bool in = part.find("extern \"C\" void " + k.name + "(") != std::string::npos;
    EXPECT_EQ(in, some.count(k.name) > 0) << k.name;
  }
  HostKernelCache cache(cacheDir("subset"));
  std::string error;
  std::vector<std::string> symbols(some.begin(), some.end());
  std::vector<HostKernelFn> fns = cache.loadAll(part, symbols, error);
  EXPECT_EQ(fns.size(), symbols.size()) << error;
  // A name the unit does not define: the whole unit, not a part missing it.
  EXPECT_EQ(hostKernelSubset(all, {"no_such_kernel"}), all);
}
