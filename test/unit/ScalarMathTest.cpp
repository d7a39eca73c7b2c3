//===- ScalarMathTest.cpp - f32 exp, tanh, GELU against libm in double ---===//
//
// The f32 transcendental functions of the elementwise ops, as every executor
// computes them, against an independent implementation: glibc's libm in
// double (exp, tanh; GELU's tanh form and its derivative written out in
// double), over a fixed
// sample of inputs (uniform over the range, log-uniform small magnitudes of
// both signs, and edge values). Two implementations are under test:
// - the reference executor's f32 path (runtime/exec/OpSemantics.h: exp, tanh
//   and GELU are Support/KernelMath.inc's st_exp_f, st_tanh_f, st_gelu_f);
// - the generated C++ kernels (kernel-fuse-elementwise, the emitter's
//   prelude, compiled by the host JIT with its real flags,
//   HostKernelCache::defaultFlags: -O3 -march=native -ffp-contract=off
//   -fno-math-errno -fno-trapping-math -mprefer-vector-width=512).
// Error is counted in ulps of the exact result rounded to f32 (the spacing
// of f32 values at |exact|; 2^-149 below the normal range). The bounds are
// the largest errors measured here, rounded up, and stated per function:
//   exp   on [-103, 88.7]: kExpUlps (measured 0.88; 0.94 over every f32
//         in [-110, 90] in a one-off exhaustive sweep), and 0, +inf or NaN
//         past its clamps;
//   tanh  on [-20, 20]:    kTanhUlps (measured 2.47);
//   GELU  on [0, 12]:      kGeluUlps (measured 1.70); on [-12, 12] the
//         error is at most kGeluXUlps · 2^-24 · |x| (measured 1.97): for
//         x < 0 the result is far smaller than x (1e-4·|x| at x = -4) and
//         its relative error grows with |u| (rounding in u = k(x+0.044715x^3)
//         becomes relative error of e^(-2u)), so an ulp of the result is the
//         wrong unit there; the tanh form also cancels there (1 + tanh(u)).
//   GELU' on [0, 12]:      kGeluGradUlps (measured 2.57); on [-12, 12] the
//         error is at most kGeluGradAbs · 2^-24 (measured 4.02): the
//         derivative crosses 0 near x = -0.75 and is O(1) everywhere.
// The CUDA kernels compile the same prelude text; NvrtcTest and
// CudaKernelTest cover them.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "stretto/Runtime/HostJit.h"
#include "stretto/Kernel/Emitter.h"
#include "stretto/Kernel/Passes.h"
#include "stretto/Runtime/RefExecutor.h"
#include "stretto/Support/KernelMath.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/APFloat.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cfloat>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <functional>
#include <random>

using namespace stretto;
namespace fs = std::filesystem;

namespace {

constexpr double kExpUlps = 1.0, kTanhUlps = 3.0, kGeluUlps = 2.5, kGeluXUlps = 2.5,
                 kGeluGradUlps = 3.0, kGeluGradAbs = 4.5;

// The independent implementations, in double.
double exactExp(double x) { return std::exp(x); }
double exactTanh(double x) { return std::tanh(x); }
double exactGelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double exactGeluGrad(double x) {
  const double k = std::sqrt(2.0 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

// |got - exact| in ulps of exact rounded to f32.
double ulpError(float got, double exact) {
  if (std::isnan(got) || std::isnan(exact))
    return std::isnan(got) == std::isnan(exact) ? 0 : HUGE_VAL;
  if (std::isinf(exact) || std::isinf(got)) // (exact past FLT_MAX rounds to inf in f32)
    return got == static_cast<float>(exact) ? 0 : HUGE_VAL;
  double a = std::fabs(exact);
  double ulp = a < FLT_MIN ? std::ldexp(1.0, -149) : std::ldexp(1.0, std::ilogb(a) - 23);
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

// The inputs: uniform over [lo, hi], log-uniform magnitudes in [1e-30, hi]
// with both signs (inside [lo, hi]), then `edges`; all f32.
std::vector<float> sample(double lo, double hi, std::vector<float> edges) {
  std::mt19937_64 rng(20240611);
  std::uniform_real_distribution<double> uni(lo, hi), logMag(std::log(1e-30), std::log(hi));
  std::vector<float> xs;
  for (int i = 0; i < (1 << 18); ++i)
    xs.push_back(static_cast<float>(uni(rng)));
  for (int i = 0; i < (1 << 16); ++i) {
    double m = std::exp(logMag(rng));
    float x = static_cast<float>(i % 2 ? -m : m);
    if (x >= lo && x <= hi)
      xs.push_back(x);
  }
  xs.insert(xs.end(), edges.begin(), edges.end());
  return xs;
}

struct Stats {
  double worstUlps = 0, worstXUlps = 0, worstAbs = 0;
  float atUlps = 0, atXUlps = 0, atAbs = 0;
};

// Errors of `got` over `xs`: in ulps of the result where x >= ulpFrom, and
// everywhere in units of 2^-24·|x| (at least 2^-149) and of 2^-24.
Stats measure(const std::vector<float> &xs, const std::vector<float> &got,
              const std::function<double(double)> &exact, double ulpFrom) {
  Stats s;
  for (size_t i = 0; i < xs.size(); ++i) {
    double want = exact(xs[i]);
    if (xs[i] >= ulpFrom) {
      double u = ulpError(got[i], want);
      if (!(u <= s.worstUlps))
        s.worstUlps = u, s.atUlps = xs[i];
    }
    double d = std::fabs(static_cast<double>(got[i]) - want);
    double unit = std::max(std::ldexp(1.0, -24) * std::fabs(xs[i]), std::ldexp(1.0, -149));
    double xu = d / unit;
    if (!(xu <= s.worstXUlps))
      s.worstXUlps = xu, s.atXUlps = xs[i];
    double au = d / std::ldexp(1.0, -24);
    if (!(au <= s.worstAbs))
      s.worstAbs = au, s.atAbs = xs[i];
  }
  return s;
}

std::string stepFor(const std::string &op, size_t n) {
  std::string t = "tensor<" + std::to_string(n) + "xf32>";
  return "train.model @m {\n  train.step {\n    %x = train.input \"x\" : " + t +
         "\n    %y = train." + op + " %x : " + t + "\n    %s = train.reduce_sum %y [0] : " + t +
         " -> tensor<f32>\n    train.yield %s : tensor<f32>\n  }\n}\n";
}

// The reference executor's f32 value of `op` at every x (a probe of the op).
std::vector<float> viaReferenceExecutor(const std::string &op, const std::vector<float> &xs) {
  test::Compiled c = test::compile(stepFor(op, xs.size()));
  EXPECT_TRUE(c.ok) << c.diagnostics;
  int node = -1;
  for (size_t i = 0; i < c.graph.nodes.size(); ++i)
    if (c.graph.nodes[i].kind == OpKind::ReduceSum)
      node = c.graph.nodes[i].operands[0];
  EXPECT_GE(node, 0);
  RefExecutor ex(c.graph, Precision::F32);
  ex.initialize(0);
  HostTensor in{{static_cast<int64_t>(xs.size())}, std::vector<double>(xs.begin(), xs.end())};
  StepResult r = ex.evaluate({{"x", in}}, {node});
  const std::vector<double> &v = r.probes.at(node).data;
  return std::vector<float>(v.begin(), v.end());
}

// The generated C++ kernel of `op` (fused, emitted with the prelude, built
// by the host JIT) at every x.
std::vector<float> viaGeneratedKernel(const std::string &op, const std::vector<float> &xs) {
  std::vector<float> out(xs.size(), NAN);
  mlir::MLIRContext ctx;
  test::prepareContext(ctx);
  ctx.loadDialect<kernel::KernelDialect>();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(stepFor(op, xs.size()), &ctx);
  EXPECT_TRUE(module);
  if (!module)
    return out;
  mlir::PassManager pm(&ctx);
  pm.nest<train::ModelOp>().addPass(kernel::createKernelFuseElementwise());
  EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
  std::string dir =
      (fs::temp_directory_path() / ("stretto-scalarmath-" + std::to_string(getpid()))).string();
  HostKernelCache cache(dir);
  int kernels = 0;
  module->walk([&](kernel::ElementwiseOp k) {
    ++kernels;
    mlir::FailureOr<KernelSource> src = kernel::emitElementwise(k, "scalar_math_" + op);
    ASSERT_TRUE(mlir::succeeded(src));
    std::string error;
    HostKernelFn fn = cache.load(src->cpp, "scalar_math_" + op, error);
    ASSERT_NE(fn, nullptr) << error;
    ASSERT_EQ(k.getInputs().size(), 1u);
    ASSERT_EQ(k.getResults().size(), 1u);
    const void *ins[1] = {xs.data()};
    void *outs[1] = {out.data()};
    fn(ins, outs);
  });
  EXPECT_EQ(kernels, 1) << "train." << op << " did not become one kernel";
  std::error_code ec;
  fs::remove_all(dir, ec);
  return out;
}

struct Case {
  std::string op;
  std::function<double(double)> exact;
  std::vector<float> xs;
  double ulps;
  double ulpFrom = -HUGE_VAL; // the ulp bound holds for x >= ulpFrom
  double xUlps = 0;           // > 0: |err| <= xUlps · 2^-24 · |x| for every x
  double absUlps = 0;         // > 0: |err| <= absUlps · 2^-24 for every x
};

std::vector<Case> cases() {
  const float tiny = FLT_TRUE_MIN, minNormal = FLT_MIN;
  return {
      {"exp", exactExp,
       sample(-103.0, 88.7,
              {0.0f, -0.0f, tiny, -tiny, minNormal, 1e-30f, -1e-30f, 1.0f, -1.0f, 88.0f,
               88.72f, -87.3f, -87.34f, -90.0f, -100.0f, -103.0f, -103.97f, -104.0f, 88.73f,
               88.8f, -1000.0f, 1000.0f, NAN}),
       kExpUlps},
      {"tanh", exactTanh,
       sample(-20.0, 20.0,
              {0.0f, -0.0f, tiny, -tiny, minNormal, -minNormal, 1e-30f, 9.99f, 10.0f, 10.01f,
               -9.99f, -10.0f, -10.01f, 20.0f, -20.0f, 0.5493f, -0.5493f}),
       kTanhUlps},
      {"gelu", exactGelu,
       sample(-12.0, 12.0,
              {0.0f, -0.0f, tiny, -tiny, minNormal, 1e-30f, -2.0f, -1.0f, 1.0f, 3.0f, 12.0f,
               -12.0f}),
       kGeluUlps, 0.0, kGeluXUlps},
      {"gelu_grad", exactGeluGrad,
       sample(-12.0, 12.0,
              {0.0f, -0.0f, tiny, -tiny, minNormal, 1e-30f, -0.75f, -2.0f, -1.0f, 1.0f, 3.0f,
               8.0f, -8.0f, 8.7f, -8.7f, 12.0f, -12.0f}),
       kGeluGradUlps, 0.0, 0.0, kGeluGradAbs},
  };
}

void check(const Case &c, const std::vector<float> &got, const char *who) {
  Stats s = measure(c.xs, got, c.exact, c.ulpFrom);
  EXPECT_LE(s.worstUlps, c.ulps) << who << " " << c.op << ": " << s.worstUlps << " ulp at x = "
                                 << std::hexfloat << s.atUlps << std::defaultfloat << " ("
                                 << s.atUlps << ")";
  if (c.xUlps > 0)
    EXPECT_LE(s.worstXUlps, c.xUlps) << who << " " << c.op << ": error " << s.worstXUlps
                                     << " x 2^-24|x| at x = " << s.atXUlps;
  if (c.absUlps > 0)
    EXPECT_LE(s.worstAbs, c.absUlps) << who << " " << c.op << ": error " << s.worstAbs
                                     << " x 2^-24 at x = " << s.atAbs;
  std::printf("%-26s %-5s max %.2f ulp (at %.9g)", who, c.op.c_str(), s.worstUlps,
              static_cast<double>(s.atUlps));
  if (c.xUlps > 0)
    std::printf(", max %.2f x 2^-24|x| (at %.9g)", s.worstXUlps, static_cast<double>(s.atXUlps));
  if (c.absUlps > 0)
    std::printf(", max %.2f x 2^-24 (at %.9g)", s.worstAbs, static_cast<double>(s.atAbs));
  std::printf("\n");
}

TEST(ScalarMath, KernelMathFunctionsAgainstLibmInDouble) {
  for (const Case &c : cases()) {
    std::vector<float> got;
    for (float x : c.xs)
      got.push_back(c.op == "exp"    ? kernelmath::st_exp_f(x)
                    : c.op == "tanh" ? kernelmath::st_tanh_f(x)
                    : c.op == "gelu" ? kernelmath::st_gelu_f(x)
                                     : kernelmath::st_gelu_grad_f(x));
    check(c, got, "KernelMath.inc");
  }
}

TEST(ScalarMath, ReferenceExecutorF32AgainstLibmInDouble) {
  for (const Case &c : cases())
    check(c, viaReferenceExecutor(c.op, c.xs), "reference executor (f32)");
}

TEST(ScalarMath, GeneratedKernelsAgainstLibmInDouble) {
  for (const Case &c : cases())
    check(c, viaGeneratedKernel(c.op, c.xs), "generated C++ kernel");
}

// exp, tanh, GELU and GELU' are the same bits in the reference executor (built
// for baseline x86-64: libm's fmaf) and in the generated kernels
// (-march=native: FMA instructions, vectorised): KernelMath.inc's
// polynomials use fmaf, which is exactly rounded everywhere, and no other
// step may contract.
TEST(ScalarMath, ReferenceAndGeneratedKernelsAgreeBitForBit) {
  for (const Case &c : cases()) {
    std::vector<float> ref = viaReferenceExecutor(c.op, c.xs),
                       gen = viaGeneratedKernel(c.op, c.xs);
    ASSERT_EQ(ref.size(), gen.size());
    size_t differ = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      differ += std::memcmp(&ref[i], &gen[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << c.op << ": " << differ << " of " << ref.size() << " differ";
  }
}

} // namespace

// st_round_bf16 (KernelMath.inc: what a bf16 store holds; the runtime's
// roundToBF16 and the CUDA runtime's st_to_bf16 call it) against LLVM's
// APFloat conversion to bfloat16, round to nearest even: every 997th f32 bit
// pattern (all exponents, both signs, NaNs, infinities, subnormals) plus
// the halfway cases of each exponent. f64: random doubles over the whole
// f32 range and the halfway cases (exact ties, and a hair either side,
// which a double rounding through f32 would get wrong).
TEST(ScalarMath, RoundBf16IsRoundToNearestEven) {
  using stretto::kernelmath::st_round_bf16;
  auto viaApFloat = [](double x) {
    llvm::APFloat f(x);
    bool lost = false;
    f.convert(llvm::APFloat::BFloat(), llvm::APFloat::rmNearestTiesToEven, &lost);
    f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven, &lost);
    return f.convertToDouble();
  };
  auto same = [](double a, double b) {
    return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
  };
  std::vector<uint32_t> patterns;
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 997)
    patterns.push_back(uint32_t(b));
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t sign : {0u, 0x80000000u})
      for (uint32_t low : {0x8000u, 0x18000u, 0x7FFFu, 0x8001u, 0xFFFFu})
        patterns.push_back(sign | (e << 23) | low);
  size_t bad = 0;
  for (uint32_t bits : patterns) {
    float x;
    std::memcpy(&x, &bits, 4);
    float got = st_round_bf16(x);
    if (!same(got, viaApFloat(x))) {
      if (bad++ < 5)
        ADD_FAILURE() << "f32 bits 0x" << std::hex << bits << ": " << got << ", APFloat "
                      << viaApFloat(x);
    }
    if (std::isnan(x)) {
      uint32_t out;
      std::memcpy(&out, &got, 4);
      EXPECT_TRUE((out & 0xFFFFu) == 0 && std::isnan(got)) << std::hex << bits;
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << patterns.size() << " f32 patterns";
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> exp(-140, 127);
  size_t badD = 0;
  for (int i = 0; i < 400000; ++i) {
    double x = std::ldexp(mant(rng), exp(rng)) * (i % 2 ? -1 : 1);
    if (i % 4 == 2) { // a bf16 halfway point, exactly or a hair off
      double tie = std::ldexp(std::floor(std::ldexp(std::fabs(x), 7 - std::ilogb(x))) + 0.5,
                              std::ilogb(x) - 7);
      x = std::copysign(tie * (1.0 + (i % 3 - 1) * 0x1p-40), x);
    }
    double got = st_round_bf16(x);
    if (!same(got, viaApFloat(x)) && badD++ < 5)
      ADD_FAILURE() << "f64 " << x << ": " << got << ", APFloat " << viaApFloat(x);
  }
  EXPECT_EQ(badD, 0u);
}
