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

const char *kCppPrelude = "#include <math.h>\n#define ST_FN static inline\n";
const char *kCudaPrelude = "#define ST_FN static __device__ __forceinline__\n";

// Math helpers for float and double with the reference executor's formulas.
const char *kSharedPrelude = R"(#ifndef STRETTO_KERNEL_PRELUDE
#define STRETTO_KERNEL_PRELUDE
ST_FN float st_max(float a, float b) { return a < b ? b : a; }
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
ST_FN float st_tanh(float x) { return tanhf(x); }
ST_FN double st_tanh(double x) { return tanh(x); }
ST_FN float st_cos(float x) { return cosf(x); }
ST_FN double st_cos(double x) { return cos(x); }
ST_FN float st_gelu(float x) {
  const float c = 0.79788456080286535587989211986876f; /* sqrt(2/pi) */
  return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}
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
std::string offsetExpr(ArrayRef<int64_t> in, ArrayRef<int64_t> out) {
  if (in == out)
    return "i";
  size_t lead = out.size() - in.size();
  std::string expr;
  int64_t inStride = 1, outStride = 1;
  for (size_t k = out.size(); k-- > 0;) {
    int64_t dim = out[k];
    bool broadcast = k < lead || in[k - lead] == 1;
    if (!broadcast && dim != 1) {
      std::string coord = outStride == 1 ? "i" : "(i / " + std::to_string(outStride) + "LL)";
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

  std::string body;
  llvm::raw_string_ostream os(body);
  os << "// " << name << ": (";
  for (size_t k = 0; k < nIn; ++k)
    os << (k ? ", " : "") << typeText(op.getInputs()[k].getType());
  os << ") -> " << typeText(outType) << (nOut > 1 ? " x" + std::to_string(nOut) : "")
     << "\n";
  os << "ST_FN void " << name << "_element(" << params << ", long long i) {\n";
  llvm::DenseMap<Value, std::string> names;
  Block &block = op.getBodyBlock();
  for (auto [k, arg] : llvm::enumerate(block.getArguments())) {
    std::string a = "a" + std::to_string(k);
    os << "  const " << T << " " << a << " = in" << k << "["
       << offsetExpr(ks.inputShapes[k], ks.resultShape) << "];\n";
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

  std::string n = std::to_string(ks.numElements) + "LL";
  std::string cpp = std::string(kCppPrelude) + kSharedPrelude + body;
  cpp += "extern \"C\" void " + name.str() +
         "(const void *const *inputs, void *const *outputs) {\n";
  for (size_t k = 0; k < nIn; ++k)
    cpp += "  const " + T + " *in" + std::to_string(k) + " = (const " + T + " *)inputs[" +
           std::to_string(k) + "];\n";
  for (size_t k = 0; k < nOut; ++k)
    cpp += "  " + T + " *out" + std::to_string(k) + " = (" + T + " *)outputs[" +
           std::to_string(k) + "];\n";
  cpp += "#pragma omp parallel for if (" + n + " >= 65536LL)\n";
  cpp += "  for (long long i = 0; i < " + n + "; ++i)\n";
  cpp += "    " + name.str() + "_element(" + args + ", i);\n}\n";
  ks.cpp = cpp;

  std::string cuda = std::string(kCudaPrelude) + kSharedPrelude + body;
  cuda += "extern \"C\" __global__ void " + name.str() + "(" + params + ") {\n";
  cuda += "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < " + n +
          "; i += (long long)gridDim.x * blockDim.x)\n";
  cuda += "    " + name.str() + "_element(" + args + ", i);\n}\n";
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
