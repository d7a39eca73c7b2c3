//===- Emitter.cpp - kernel.elementwise to C++ and CUDA C -----------------===//
//
// Layout of a generated translation unit:
//   target prelude   (#include / ST_FN for C++; ST_FN for CUDA)
//   shared prelude   (st_* math helpers, identical for both targets)
//   body             (<name>_element: loads, scalar ops, stores; identical)
//   target wrapper   (a loop over elements; a grid-stride __global__ loop)
// Broadcast operands are indexed with constant strides (shapes are static).
//
//===----------------------------------------------------------------------===//
#include "stretto/Kernel/Emitter.h"
#include "stretto/Support/KernelMathText.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace stretto;
using namespace stretto::kernel;

namespace {

const char *kCppPrelude =
    "#include <math.h>\n#define ST_FN static inline\n"
    "#ifndef STRETTO_FLOAT_BITS\n#define STRETTO_FLOAT_BITS\n"
    "ST_FN float st_float_bits(int b) { float f; __builtin_memcpy(&f, &b, 4); return f; }\n"
    "#endif\n";
const char *kCudaPrelude =
    "#define ST_FN static __device__ __forceinline__\n"
    "#ifndef STRETTO_FLOAT_BITS\n#define STRETTO_FLOAT_BITS\n"
    "ST_FN float st_float_bits(int b) { return __int_as_float(b); }\n"
    "#endif\n";

// Math helpers for float and double with the reference executor's formulas;
// float tanh and GELU come from KernelMath.inc (kKernelMathText).
const char *kSharedPreludeHead = R"(#ifndef STRETTO_KERNEL_PRELUDE
#define STRETTO_KERNEL_PRELUDE
)";
const char *kSharedPrelude = R"(ST_FN float st_max(float a, float b) { return a < b ? b : a; }
ST_FN double st_max(double a, double b) { return a < b ? b : a; }
ST_FN float st_min(float a, float b) { return b < a ? b : a; }
ST_FN double st_min(double a, double b) { return b < a ? b : a; }
ST_FN float st_pow(float a, float b) { return powf(a, b); }
ST_FN double st_pow(double a, double b) { return pow(a, b); }
ST_FN float st_exp(float x) { return expf(x); }
ST_FN double st_exp(double x) { return exp(x); }
ST_FN float st_log(float x) { return logf(x); }
ST_FN double st_log(double x) { return log(x); }
ST_FN float st_sqrt(float x) { return sqrtf(x); }
ST_FN double st_sqrt(double x) { return sqrt(x); }
ST_FN float st_rsqrt(float x) { return 1.0f / sqrtf(x); }
ST_FN double st_rsqrt(double x) { return 1.0 / sqrt(x); }
ST_FN float st_tanh(float x) { return st_tanh_f(x); }
ST_FN double st_tanh(double x) { return tanh(x); }
ST_FN float st_cos(float x) { return cosf(x); }
ST_FN double st_cos(double x) { return cos(x); }
ST_FN float st_gelu(float x) { return st_gelu_f(x); }
ST_FN double st_gelu(double x) {
  const double c = 0.79788456080286535587989211986876;
  return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}
ST_FN float st_relu(float x) { return x > 0.0f ? x : 0.0f; }
ST_FN double st_relu(double x) { return x > 0.0 ? x : 0.0; }
#endif
)";

std::string typeText(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

// Offset into an operand of shape `in` of element `i` of the row-major
// result of shape `out` (NumPy broadcasting, dims aligned at the right).
std::string offsetExpr(ArrayRef<int64_t> in, ArrayRef<int64_t> out, const std::string &i = "i") {
  if (in == out)
    return i;
  size_t lead = out.size() - in.size();
  std::string expr;
  int64_t inStride = 1, outStride = 1;
  for (size_t k = out.size(); k-- > 0;) {
    int64_t dim = out[k];
    bool broadcast = k < lead || in[k - lead] == 1;
    if (!broadcast && dim != 1) {
      std::string coord = outStride == 1 ? i : "(" + i + " / " + std::to_string(outStride) + "LL)";
      if (k != 0) // the outermost coordinate needs no modulo
        coord = "(" + coord + " % " + std::to_string(dim) + "LL)";
      if (inStride != 1)
        coord += " * " + std::to_string(inStride) + "LL";
      expr = expr.empty() ? coord : coord + " + " + expr;
    }
    if (!(k < lead))
      inStride *= in[k - lead];
    outStride *= dim;
  }
  return expr.empty() ? "0" : expr;
}

// How an input is indexed from the result's element i.
enum class Access { Same, Scalar, Strided };

Access accessOf(ArrayRef<int64_t> in, ArrayRef<int64_t> out) {
  if (in == out)
    return Access::Same;
  for (int64_t d : in)
    if (d != 1)
      return Access::Strided;
  return Access::Scalar;
}

// The C++ loop nest: rows x inner, where over the innermost `inner`
// elements every strided input is either contiguous (stride 1) or constant
// (stride 0), so the inner loop has unit-stride or invariant loads and
// vectorises; per row, each strided input's base offset is computed once.
// Returns the inner extent; `unit[k]` says which strided inputs advance.
int64_t innerExtent(ArrayRef<std::vector<int64_t>> ins, ArrayRef<int64_t> out,
                    std::vector<bool> &unit) {
  size_t rank = out.size();
  std::vector<int> state(ins.size(), 0); // 0 unknown, 1 contiguous, 2 broadcast
  int64_t inner = 1;
  for (size_t d = rank; d-- > 0;) {
    if (out[d] == 1)
      continue;
    bool ok = true;
    std::vector<int> next = state;
    for (size_t k = 0; k < ins.size(); ++k) {
      if (accessOf(ins[k], out) != Access::Strided)
        continue;
      size_t lead = rank - ins[k].size();
      int64_t dim = d < lead ? 1 : ins[k][d - lead];
      int s = dim == out[d] ? 1 : 2;
      if (next[k] != 0 && next[k] != s)
        ok = false;
      next[k] = s;
    }
    if (!ok)
      break;
    state = next;
    inner *= out[d];
  }
  unit.assign(ins.size(), false);
  for (size_t k = 0; k < ins.size(); ++k)
    unit[k] = state[k] == 1;
  return inner;
}

FailureOr<std::string> scalarExpr(Operation *op, ArrayRef<std::string> a, StringRef ctype) {
  auto call = [&](const char *fn) {
    std::string s = std::string(fn) + "(" + a[0];
    for (size_t k = 1; k < a.size(); ++k)
      s += ", " + a[k];
    return s + ")";
  };
  std::string one = ctype == "float" ? "1.0f" : "1.0";
  std::string zero = ctype == "float" ? "0.0f" : "0.0";
  return llvm::TypeSwitch<Operation *, FailureOr<std::string>>(op)
      .Case([&](AddOp) { return a[0] + " + " + a[1]; })
      .Case([&](SubOp) { return a[0] + " - " + a[1]; })
      .Case([&](MulOp) { return a[0] + " * " + a[1]; })
      .Case([&](DivOp) { return a[0] + " / " + a[1]; })
      .Case([&](MaxOp) { return call("st_max"); })
      .Case([&](MinOp) { return call("st_min"); })
      .Case([&](PowOp) { return call("st_pow"); })
      .Case([&](GtOp) { return "(" + a[0] + " > " + a[1] + " ? " + one + " : " + zero + ")"; })
      .Case([&](NegOp) { return "-" + a[0]; })
      .Case([&](ExpOp) { return call("st_exp"); })
      .Case([&](LogOp) { return call("st_log"); })
      .Case([&](SqrtOp) { return call("st_sqrt"); })
      .Case([&](RsqrtOp) { return call("st_rsqrt"); })
      .Case([&](TanhOp) { return call("st_tanh"); })
      .Case([&](CosOp) { return call("st_cos"); })
      .Case([&](GeluOp) { return call("st_gelu"); })
      .Case([&](ReluOp) { return call("st_relu"); })
      .Default([&](Operation *o) -> FailureOr<std::string> {
        o->emitOpError("has no C/CUDA form in the kernel emitter");
        return failure();
      });
}

std::string sanitize(StringRef s) {
  std::string r;
  for (char c : s)
    r += llvm::isAlnum(c) ? c : '_';
  return r;
}

} // namespace

FailureOr<KernelSource> stretto::kernel::emitElementwise(ElementwiseOp op, StringRef name) {
  RankedTensorType outType = op.getResultType();
  Type elem = outType.getElementType();
  KernelSource ks;
  ks.name = name.str();
  if (elem.isF32())
    ks.dtype = "float";
  else if (elem.isF64())
    ks.dtype = "double";
  else
    return op.emitOpError() << "codegen supports f32 and f64 kernels, not " << elem
                            << " (kernel " << name << ")";
  const std::string &T = ks.dtype;
  ks.resultShape.assign(outType.getShape().begin(), outType.getShape().end());
  ks.numElements = outType.getNumElements();
  ks.numResults = op.getNumResults();
  for (Value v : op.getInputs()) {
    auto s = cast<RankedTensorType>(v.getType()).getShape();
    ks.inputShapes.emplace_back(s.begin(), s.end());
  }
  size_t nIn = op.getInputs().size(), nOut = ks.numResults;

  std::vector<Access> access;
  for (size_t k = 0; k < nIn; ++k)
    access.push_back(accessOf(ks.inputShapes[k], ks.resultShape));

  // Parameter list shared by the element function and the CUDA entry point.
  std::string params;
  for (size_t k = 0; k < nIn; ++k)
    params += "const " + T + " *__restrict__ in" + std::to_string(k) + ", ";
  for (size_t k = 0; k < nOut; ++k)
    params += T + " *__restrict__ out" + std::to_string(k) + (k + 1 < nOut ? ", " : "");
  std::string args;
  for (size_t k = 0; k < nIn; ++k)
    args += "in" + std::to_string(k) + ", ";
  for (size_t k = 0; k < nOut; ++k)
    args += "out" + std::to_string(k) + (k + 1 < nOut ? ", " : "");

  // The element function: result element i; a broadcast input k that is not
  // a scalar is read at offset o<k>, which each target's loop computes.
  std::string body;
  llvm::raw_string_ostream os(body);
  os << "// " << name << ": (";
  for (size_t k = 0; k < nIn; ++k)
    os << (k ? ", " : "") << typeText(op.getInputs()[k].getType());
  os << ") -> " << typeText(outType) << (nOut > 1 ? " x" + std::to_string(nOut) : "")
     << "\n";
  os << "ST_FN void " << name << "_element(" << params << ", long long i";
  for (size_t k = 0; k < nIn; ++k)
    if (access[k] == Access::Strided)
      os << ", long long o" << k;
  os << ") {\n";
  llvm::DenseMap<Value, std::string> names;
  Block &block = op.getBodyBlock();
  for (auto [k, arg] : llvm::enumerate(block.getArguments())) {
    std::string a = "a" + std::to_string(k);
    std::string index = access[k] == Access::Same     ? "i"
                        : access[k] == Access::Scalar ? "0"
                                                      : "o" + std::to_string(k);
    os << "  const " << T << " " << a << " = in" << k << "[" << index << "];\n";
    names[arg] = a;
  }
  int counter = 0;
  for (Operation &inner : block.without_terminator()) {
    SmallVector<std::string> in;
    for (Value v : inner.getOperands())
      in.push_back(names.lookup(v));
    FailureOr<std::string> e = scalarExpr(&inner, in, T);
    if (failed(e))
      return failure();
    std::string v = "v" + std::to_string(counter++);
    os << "  const " << T << " " << v << " = " << *e << ";\n";
    names[inner.getResult(0)] = v;
  }
  for (auto [k, v] : llvm::enumerate(block.getTerminator()->getOperands()))
    os << "  out" << k << "[i] = " << names.lookup(v) << ";\n";
  os << "}\n";
  os.flush();
  ks.body = body;

  // C++: rows x inner loop nest (see innerExtent), OpenMP over rows (or over
  // the inner loop when there are few rows), `omp simd` inner loop.
  std::vector<bool> unit;
  int64_t inner = innerExtent(ks.inputShapes, ks.resultShape, unit);
  int64_t rows = inner ? ks.numElements / inner : 0;
  std::string n = std::to_string(ks.numElements) + "LL";
  std::string cpp = std::string(kCppPrelude) + kSharedPreludeHead + kKernelMathText +
                    kSharedPrelude + body;
  cpp += "extern \"C\" void " + name.str() +
         "(const void *const *inputs, void *const *outputs) {\n";
  for (size_t k = 0; k < nIn; ++k)
    cpp += "  const " + T + " *in" + std::to_string(k) + " = (const " + T + " *)inputs[" +
           std::to_string(k) + "];\n";
  for (size_t k = 0; k < nOut; ++k)
    cpp += "  " + T + " *out" + std::to_string(k) + " = (" + T + " *)outputs[" +
           std::to_string(k) + "];\n";
  bool parallelRows = rows >= 16;
  if (parallelRows)
    cpp += "#pragma omp parallel for if (" + n + " >= 65536LL)\n";
  cpp += "  for (long long r = 0; r < " + std::to_string(rows) + "LL; ++r) {\n";
  cpp += "    const long long i0 = r * " + std::to_string(inner) + "LL;\n";
  std::string elemArgs = args + ", i0 + j";
  for (size_t k = 0; k < nIn; ++k) {
    if (access[k] != Access::Strided)
      continue;
    std::string b = "b" + std::to_string(k);
    cpp += "    const long long " + b + " = " +
           offsetExpr(ks.inputShapes[k], ks.resultShape, "i0") + ";\n";
    elemArgs += ", " + b + (unit[k] ? " + j" : "");
  }
  if (parallelRows)
    cpp += "#pragma omp simd\n";
  else
    cpp += "#pragma omp parallel for simd if (" + n + " >= 65536LL)\n";
  cpp += "    for (long long j = 0; j < " + std::to_string(inner) + "LL; ++j)\n";
  cpp += "      " + name.str() + "_element(" + elemArgs + ");\n  }\n}\n";
  ks.cpp = cpp;

  // CUDA C: a grid-stride loop; broadcast offsets from i.
  std::string cudaArgs = args + ", i";
  for (size_t k = 0; k < nIn; ++k)
    if (access[k] == Access::Strided)
      cudaArgs += ", " + offsetExpr(ks.inputShapes[k], ks.resultShape, "i");
  std::string cuda = std::string(kCudaPrelude) + kSharedPreludeHead + kKernelMathText +
                     kSharedPrelude + body;
  cuda += "extern \"C\" __global__ void " + name.str() + "(" + params + ") {\n";
  cuda += "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < " + n +
          "; i += (long long)gridDim.x * blockDim.x)\n";
  cuda += "    " + name.str() + "_element(" + cudaArgs + ");\n}\n";
  ks.cuda = cuda;
  return ks;
}

LogicalResult stretto::kernel::emitAllKernels(Operation *root, std::vector<KernelSource> &out) {
  llvm::StringMap<int> counters;
  bool ok = true;
  root->walk([&](ElementwiseOp op) {
    std::string prefix = "kernel";
    Operation *phase = op->getParentOp();
    if (phase && phase->getDialect() && phase->getDialect()->getNamespace() == "train") {
      prefix = phase->getName().stripDialect().str();
      if (Operation *model = phase->getParentOp())
        if (auto sym = model->getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName()))
          prefix = sanitize(sym.getValue()) + "_" + prefix;
    }
    std::string name = prefix + "_k" + std::to_string(counters[prefix]++);
    FailureOr<KernelSource> ks = emitElementwise(op, name);
    if (failed(ks))
      ok = false;
    else
      out.push_back(std::move(*ks));
  });
  return success(ok);
}
