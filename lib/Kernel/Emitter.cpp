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
#include "stretto/Dialect/Train/TrainOps.h"
#include "stretto/Runtime/Graph.h"
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
    "ST_FN int st_bits_of(float f) { int b; __builtin_memcpy(&b, &f, 4); return b; }\n"
    "#endif\n"
    "#define ST_BF16_SLOT float\n#define ST_STORE_BF16(v) st_round_bf16(v)\n"
    "#define ST_LOAD_BF16(x) st_widen(x)\n";
const char *kCudaPrelude =
    "#define ST_FN static __device__ __forceinline__\n"
    "#ifndef ST_HAVE_WARPS\n#define ST_HAVE_WARPS 1\n#endif\n"
    "#ifndef STRETTO_FLOAT_BITS\n#define STRETTO_FLOAT_BITS\n"
    "ST_FN float st_float_bits(int b) { return __int_as_float(b); }\n"
    "ST_FN int st_bits_of(float f) { return __float_as_int(f); }\n"
    "#endif\n"
    // store_bf16 results: two bytes (the bf16's bits), or four with
    // ST_BF16_AS_F32 (the runtime's STRETTO_BF16_STORAGE=0).
    // (ST_LOAD_BF16: KernelMath.inc's st_widen, for either slot.)
    "#ifdef ST_BF16_AS_F32\n#define ST_BF16_SLOT float\n#define ST_STORE_BF16(v) st_round_bf16(v)\n"
    "#else\n#define ST_BF16_SLOT unsigned short\n"
    "#define ST_STORE_BF16(v) ((unsigned short)((unsigned)st_bits_of(st_round_bf16(v)) >> 16))\n"
    "#endif\n#define ST_LOAD_BF16(x) st_widen(x)\n"
    // Eight elements as 16-byte words (an element-wise kernel's vector
    // step: one 16-byte load a word instead of one load an element):
    // st_load8 reads through the read-only path (a kernel's __restrict__
    // inputs, which no thread writes), st_copy8 with plain loads (stores,
    // and what the same kernel may have written: MultiTensor.h's chains).
    // The emulated GPU defines ST_WORD16 and the three words' accesses.
    "#ifndef ST_VEC8\n#define ST_VEC8\n#ifndef ST_WORD16\n#define ST_WORD16 uint4\n"
    "ST_FN uint4 st_ld16(const void *p) { return __ldg((const uint4 *)p); }\n"
    "ST_FN uint4 st_word16(const void *p) { return *(const uint4 *)p; }\n"
    "ST_FN void st_st16(void *p, uint4 w) { *(uint4 *)p = w; }\n#endif\n"
    "template <typename X> ST_FN void st_load8(X *d, const X *p) {\n"
    "  for (int q = 0; q < (int)sizeof(X) / 2; ++q)\n"
    "    st_st16((char *)d + 16 * q, st_ld16((const char *)p + 16 * q));\n}\n"
    "template <typename X> ST_FN void st_copy8(X *p, const X *s) {\n"
    "  for (int q = 0; q < (int)sizeof(X) / 2; ++q)\n"
    "    st_st16((char *)p + 16 * q, st_word16((const char *)s + 16 * q));\n}\n#endif\n";

// The scalar functions (st_<fn> of every element-wise op, f32 and f64) come
// from KernelMath.inc (kKernelMathText), which the reference executor and
// the CUDA runtime use too.
const char *kSharedPreludeHead = R"(#ifndef STRETTO_KERNEL_PRELUDE
#define STRETTO_KERNEL_PRELUDE
)";
const char *kSharedPrelude = R"(#endif
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
      .Case([&](GtOp) { return "(" + a[0] + " > " + a[1] + " ? " + one + " : " + zero + ")"; })
      .Case([&](NegOp) { return "-" + a[0]; })
      .Default([&](Operation *o) -> FailureOr<std::string> {
        // Every other element-wise op of the op table is a call of the
        // prelude's st_<name> (stretto/Ops.def; KernelMath.inc).
        OpKind k;
        std::string name = o->getName().stripDialect().str();
        if (opKindFromName(name, k) && isElementwise(k))
          return call(("st_" + name).c_str());
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

namespace {

// What both kernel kinds share: element type, operand access, parameter
// lists and the body's statements (loads, then one line per scalar op).
struct Prepared {
  std::string T;
  std::vector<Access> access;
  std::string inParams, inArgs; // "const T *__restrict__ in0, ...", "in0, ..."
  std::string offsetParams;     // ", long long o1, ..." for strided inputs
  std::string statements;
  std::vector<std::string> yielded;
  std::vector<bool> half; // operand stored in bf16 (loaded through ST_LOAD_BF16)
};

// A kernel's symbol and C element type (f32 and f64 only).
LogicalResult nameAndType(Operation *op, Type elem, StringRef name, KernelSource &ks) {
  ks.name = name.str();
  if (elem.isF32())
    ks.dtype = "float";
  else if (elem.isF64())
    ks.dtype = "double";
  else
    return op->emitOpError() << "codegen supports f32 and f64 kernels, not " << elem
                             << " (kernel " << name << ")";
  return success();
}

// Also fills the kernel's result shape and element count from `outType`.
FailureOr<Prepared> prepare(Operation *op, Block &block, ValueRange inputs,
                            RankedTensorType outType, StringRef name, KernelSource &ks) {
  Prepared p;
  ks.resultShape.assign(outType.getShape().begin(), outType.getShape().end());
  ks.numElements = outType.getNumElements();
  if (failed(nameAndType(op, outType.getElementType(), name, ks)))
    return failure();
  p.T = ks.dtype;
  for (Value v : inputs) {
    auto sh = cast<RankedTensorType>(v.getType()).getShape();
    ks.inputShapes.emplace_back(sh.begin(), sh.end());
  }
  std::vector<bool> &half = p.half;
  for (size_t k = 0; k < inputs.size(); ++k) {
    p.access.push_back(accessOf(ks.inputShapes[k], ks.iterationShape));
    half.push_back(storedInBf16(inputs[k]));
    p.inParams += (half[k] ? std::string("const ST_BF16_SLOT") : "const " + p.T) +
                  " *__restrict__ in" + std::to_string(k) + ", ";
    p.inArgs += "in" + std::to_string(k) + ", ";
    if (p.access[k] == Access::Strided)
      p.offsetParams += ", long long o" + std::to_string(k);
  }
  llvm::raw_string_ostream os(p.statements);
  llvm::DenseMap<Value, std::string> names;
  for (auto [k, arg] : llvm::enumerate(block.getArguments())) {
    std::string a = "a" + std::to_string(k);
    std::string index = p.access[k] == Access::Same     ? "i"
                        : p.access[k] == Access::Scalar ? "0"
                                                        : "o" + std::to_string(k);
    std::string load = "in" + std::to_string(k) + "[" + index + "]";
    os << "  const " << p.T << " " << a << " = "
       << (half[k] ? "ST_LOAD_BF16(" + load + ")" : load) << ";\n";
    names[arg] = a;
  }
  int counter = 0;
  for (Operation &inner : block.without_terminator()) {
    SmallVector<std::string> in;
    for (Value v : inner.getOperands())
      in.push_back(names.lookup(v));
    FailureOr<std::string> e = scalarExpr(&inner, in, p.T);
    if (failed(e))
      return failure();
    std::string v = "v" + std::to_string(counter++);
    os << "  const " << p.T << " " << v << " = " << *e << ";\n";
    names[inner.getResult(0)] = v;
  }
  for (Value v : block.getTerminator()->getOperands())
    p.yielded.push_back(names.lookup(v));
  os.flush();
  return p;
}

std::string header(StringRef name, ValueRange inputs, Type result, size_t nOut) {
  std::string s = "// " + name.str() + ": (";
  for (size_t k = 0; k < inputs.size(); ++k)
    s += (k ? ", " : "") + typeText(inputs[k].getType());
  return s + ") -> " + typeText(result) + (nOut > 1 ? " x" + std::to_string(nOut) : "") + "\n";
}

// The C++ entry point's first lines: typed input and output pointers.
std::string cppEntry(StringRef name, const std::string &T, size_t nIn, size_t nOut) {
  std::string cpp = "extern \"C\" void " + name.str() +
                    "(const void *const *inputs, void *const *outputs) {\n";
  for (size_t k = 0; k < nIn; ++k)
    cpp += "  const " + T + " *in" + std::to_string(k) + " = (const " + T + " *)inputs[" +
           std::to_string(k) + "];\n";
  for (size_t k = 0; k < nOut; ++k)
    cpp += "  " + T + " *out" + std::to_string(k) + " = (" + T + " *)outputs[" +
           std::to_string(k) + "];\n";
  return cpp;
}

// Per-row base offsets of the strided inputs at element `i0` (C++ loops),
// and the offset arguments for element `i0 + j`.
std::string rowBases(const KernelSource &ks, const Prepared &p, const std::vector<bool> &unit,
                     const std::string &j, const std::string &indent, std::string &offsetArgs) {
  std::string text;
  for (size_t k = 0; k < p.access.size(); ++k) {
    if (p.access[k] != Access::Strided)
      continue;
    std::string b = "b" + std::to_string(k);
    text += indent + "const long long " + b + " = " +
            offsetExpr(ks.inputShapes[k], ks.iterationShape, "i0") + ";\n";
    offsetArgs += ", " + b + (unit[k] ? " + " + j : "");
  }
  return text;
}

// CUDA: the offset arguments of element `i`, from i.
std::string cudaOffsets(const KernelSource &ks, const Prepared &p, const char *index = "i") {
  std::string s;
  for (size_t k = 0; k < p.access.size(); ++k)
    if (p.access[k] == Access::Strided)
      s += ", " + offsetExpr(ks.inputShapes[k], ks.iterationShape, index);
  return s;
}

// CUDA: an element-wise kernel's vector step (before its element loops,
// which then start at element n8): where every operand read or written at
// the element's own index is 16-byte aligned, a thread takes eight
// consecutive elements a step, grid-stride, loading each such operand's
// eight with 16-byte words into registers, running the element function on
// them there (index 0..7; broadcast operands read where they lie, at the
// offsets of the element's own index) and storing the results as 16-byte
// words. Each element's value is what the element loop computes. Kernels
// of fewer than kVectorStepElements elements have none: their time is
// their launch's, and a vector step is eight more copies of the element
// function for NVRTC to compile (gpt-small: 222 of its 548 element-wise
// kernels are that small).
constexpr int64_t kVectorStepElements = 4096;
std::string cudaVectorStep(const KernelSource &ks, const Prepared &p, StringRef name, size_t nOut,
                           const std::string &outT) {
  const int64_t n8 = ks.numElements / 8 * 8;
  if (ks.numElements < kVectorStepElements)
    return "";
  std::string aligned, loads, args, stores;
  for (size_t k = 0; k < p.access.size(); ++k) {
    const std::string in = "in" + std::to_string(k), l = "l" + std::to_string(k);
    if (p.access[k] != Access::Same) {
      args += in + ", ";
      continue;
    }
    aligned += "(unsigned long long)" + in + " | ";
    loads += "      alignas(16) " + (p.half[k] ? std::string("ST_BF16_SLOT") : p.T) + " " + l +
             "[8];\n      st_load8(" + l + ", " + in + " + v);\n";
    args += l + ", ";
  }
  for (size_t k = 0; k < nOut; ++k) {
    const std::string out = "out" + std::to_string(k), r = "r" + std::to_string(k);
    aligned += "(unsigned long long)" + out + (k + 1 < nOut ? " | " : "");
    loads += "      alignas(16) " + outT + " " + r + "[8];\n";
    args += r + ", ";
    stores += "      st_copy8(" + out + " + v, " + r + ");\n";
  }
  const std::string n8Text = std::to_string(n8) + "LL";
  std::string text = "  if (((" + aligned + ") & 15) == 0) {\n";
  text += "    for (long long v = 8 * i; v < " + n8Text + "; v += 8 * s) {\n" + loads;
  for (int j = 0; j < 8; ++j)
    text += "      " + name.str() + "_element(" + args + std::to_string(j) +
            cudaOffsets(ks, p, ("(v + " + std::to_string(j) + ")").c_str()) + ");\n";
  text += stores + "    }\n    i += " + n8Text + ";\n  }\n";
  return text;
}

std::string preludes(const char *target) {
  return std::string(target) + kSharedPreludeHead + kKernelMathText + kSharedPrelude;
}

} // namespace

bool stretto::kernel::storedInBf16(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    // norm_grad's rows rounded (kernel-norm-grad-epilogue) are in two
    // bytes, its gain and bias rows after them in four.
    if (auto slice = dyn_cast<train::SliceOp>(def))
      if (auto grad = slice.getInput().getDefiningOp<train::NormGradOp>())
        return grad->hasAttr(kStoreBf16Attr) && slice.getAxis() == 0 &&
               slice.getOffset() < cast<RankedTensorType>(grad.getType()).getDimSize(0) -
                                       (grad.getCentered() ? 2 : 1);
    // (a slice of a bf16 value is a leading-row view: kernel-bf16-storage)
    if (isa<train::ReshapeOp, train::TransposeOp, train::SliceOp>(def)) {
      v = def->getOperand(0);
      continue;
    }
    if (isa<train::AttentionOp, train::AttentionGradOp>(def))
      return def->hasAttr(kStoreBf16Attr);
    if (isa<AttentionOp, AttentionGradOp>(def)) // (kernel-attention-layout's)
      return def->hasAttr("store_bf16");
    if (auto r = dyn_cast<RowsOp>(def))
      return r.getStoreBf16();
    if (auto g = dyn_cast<GemmOp>(def))
      return g.getStoreBf16();
    auto e = dyn_cast<ElementwiseOp>(def);
    return e && e.getStoreBf16();
  }
  return false;
}

bool stretto::kernel::uniformInnerRun(ArrayRef<std::vector<int64_t>> inputShapes,
                                      ArrayRef<int64_t> space, size_t firstDim) {
  for (const std::vector<int64_t> &in : inputShapes) {
    if (accessOf(in, space) != Access::Strided)
      continue;
    size_t lead = space.size() - in.size();
    int state = 0; // 1 contiguous, 2 broadcast
    for (size_t d = firstDim; d < space.size(); ++d) {
      if (space[d] == 1)
        continue;
      int64_t dim = d < lead ? 1 : in[d - lead];
      int s = dim == space[d] ? 1 : 2;
      if (state && state != s)
        return false;
      state = s;
    }
  }
  return true;
}

FailureOr<KernelSource> stretto::kernel::emitElementwise(ElementwiseOp op, StringRef name) {
  RankedTensorType outType = op.getResultType();
  KernelSource ks;
  ks.kind = "elementwise";
  ks.iterationShape.assign(outType.getShape().begin(), outType.getShape().end());
  ks.numResults = op.getNumResults();
  FailureOr<Prepared> pr = prepare(op, op.getBodyBlock(), op.getInputs(), outType, name, ks);
  if (failed(pr))
    return failure();
  const Prepared &p = *pr;
  const std::string &T = p.T;
  size_t nIn = op.getInputs().size(), nOut = ks.numResults;
  // store_bf16: the result slot is the target's bf16 storage (KernelOps.td).
  const bool bf16Out = op.getStoreBf16();
  const std::string outT = bf16Out ? std::string("ST_BF16_SLOT") : T;
  std::string outParams, outArgs;
  for (size_t k = 0; k < nOut; ++k) {
    outParams += outT + " *__restrict__ out" + std::to_string(k) + (k + 1 < nOut ? ", " : "");
    outArgs += "out" + std::to_string(k) + (k + 1 < nOut ? ", " : "");
  }
  std::string params = p.inParams + outParams, args = p.inArgs + outArgs;

  // The element function: result element i; a broadcast input k that is not
  // a scalar is read at offset o<k>, which each target's loop computes.
  std::string body = header(name, op.getInputs(), outType, nOut);
  body += "ST_FN void " + name.str() + "_element(" + params + ", long long i" + p.offsetParams +
          ") {\n" + p.statements;
  for (size_t k = 0; k < nOut; ++k)
    body += "  out" + std::to_string(k) + "[i] = " +
            (bf16Out ? "ST_STORE_BF16(" + p.yielded[k] + ")" : p.yielded[k]) + ";\n";
  body += "}\n";
  ks.body = body;

  // C++: rows x inner loop nest (see innerExtent), OpenMP over rows (or over
  // the inner loop when there are few rows), `omp simd` inner loop.
  std::vector<bool> unit;
  int64_t inner = innerExtent(ks.inputShapes, ks.resultShape, unit);
  int64_t rows = inner ? ks.numElements / inner : 0;
  std::string n = std::to_string(ks.numElements) + "LL";
  std::string cpp = preludes(kCppPrelude) + body + cppEntry(name, T, nIn, nOut);
  bool parallelRows = rows >= 16;
  if (parallelRows)
    cpp += "#pragma omp parallel for if (" + n + " >= 65536LL)\n";
  cpp += "  for (long long r = 0; r < " + std::to_string(rows) + "LL; ++r) {\n";
  cpp += "    const long long i0 = r * " + std::to_string(inner) + "LL;\n";
  std::string offsetArgs;
  cpp += rowBases(ks, p, unit, "j", "    ", offsetArgs);
  if (parallelRows)
    cpp += "#pragma omp simd\n";
  else
    cpp += "#pragma omp parallel for simd if (" + n + " >= 65536LL)\n";
  cpp += "    for (long long j = 0; j < " + std::to_string(inner) + "LL; ++j)\n";
  cpp += "      " + name.str() + "_element(" + args + ", i0 + j" + offsetArgs + ");\n  }\n}\n";
  ks.cpp = cpp;

  // CUDA C: the vector step where its operands are aligned (eight
  // consecutive elements a thread a step, 16-byte loads and stores: more
  // bytes in flight a thread, which a grid of one wave, CudaPlan.cpp's
  // opKernel, needs to reach the memory's bandwidth; cudaVectorStep), then
  // a grid-stride loop over the rest (all of them where an operand is not
  // aligned, a view's rare case: one element a step, which keeps NVRTC's
  // work to nine copies of the element function), broadcast offsets from
  // the element's index.
  std::string cuda = preludes(kCudaPrelude) + body;
  cuda += "extern \"C\" __global__ void " + name.str() + "(" + params + ") {\n";
  cuda += "  const long long s = (long long)gridDim.x * blockDim.x;\n";
  cuda += "  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n";
  cuda += cudaVectorStep(ks, p, name, nOut, outT);
  cuda += "  for (; i < " + n + "; i += s)\n";
  cuda += "    " + name.str() + "_element(" + args + ", i" + cudaOffsets(ks, p) + ");\n}\n";
  ks.cuda = cuda;
  return ks;
}

FailureOr<KernelSource> stretto::kernel::emitReduce(ReduceOp op, StringRef name) {
  RankedTensorType outType = op.getResultType();
  KernelSource ks;
  bool rowsKind = op.reducesTrailing();
  ks.kind = rowsKind ? "row-sum" : "column-sum";
  ks.iterationShape.assign(op.getSpace().begin(), op.getSpace().end());
  ks.numResults = 1;
  FailureOr<Prepared> pr = prepare(op, op.getBodyBlock(), op.getInputs(), outType, name, ks);
  if (failed(pr))
    return failure();
  const Prepared &p = *pr;
  const std::string &T = p.T;
  size_t nIn = op.getInputs().size();
  // The iteration space as [outer kept] x [reduced] x [inner kept], one of
  // the kept parts being empty (a leading or trailing run).
  int64_t total = 1, reduced = 1;
  for (int64_t d : op.getSpace())
    total *= d;
  for (int64_t d : op.getDims())
    reduced *= op.getSpace()[d];
  int64_t kept = reduced ? total / reduced : 0;
  size_t innerFrom = rowsKind ? op.getDims().front() : op.getDims().back() + 1;
  if (!uniformInnerRun(ks.inputShapes, ks.iterationShape, innerFrom))
    return op.emitOpError() << "an operand is neither contiguous nor constant along the "
                               "kernel's inner loop (kernel "
                            << name << ")";
  std::vector<bool> unit;
  innerExtent(ks.inputShapes, ks.iterationShape, unit);

  // The value function: the body at element i of the iteration space.
  std::string body = header(name, op.getInputs(), outType, 1);
  body += "ST_FN " + T + " " + name.str() + "_value(" + p.inParams + "long long i" +
          p.offsetParams + ") {\n" + p.statements + "  return " + p.yielded[0] + ";\n}\n";
  ks.body = body;
  std::string R = std::to_string(reduced) + "LL", K = std::to_string(kept) + "LL";
  std::string N = std::to_string(total) + "LL";
  std::string value = name.str() + "_value(" + p.inArgs;

  std::string cpp = preludes(kCppPrelude) + body + cppEntry(name, T, nIn, 1);
  std::string offsetArgs;
  if (rowsKind) {
    // Rows of R reduced elements, in blocks of 16384; each block with 16
    // partial sums (vectorised), blocks added in order per row.
    cpp += "  const long long nb = (" + R + " + 16383LL) / 16384LL;\n";
    cpp += "  " + T + " *part = (" + T + " *)malloc(sizeof(" + T + ") * " + K + " * nb);\n";
    cpp += "#pragma omp parallel for if (" + N + " >= 65536LL)\n";
    cpp += "  for (long long t = 0; t < " + K + " * nb; ++t) {\n";
    cpp += "    const long long r = t / nb, j0 = (t % nb) * 16384LL;\n";
    cpp += "    const long long j1 = j0 + 16384LL < " + R + " ? j0 + 16384LL : " + R + ";\n";
    cpp += "    const long long i0 = r * " + R + ";\n";
    cpp += rowBases(ks, p, unit, "(j + l)", "    ", offsetArgs);
    std::string tailArgs;
    for (size_t k = 0; k < p.access.size(); ++k)
      if (p.access[k] == Access::Strided)
        tailArgs += ", b" + std::to_string(k) + (unit[k] ? " + j" : "");
    cpp += "    " + T + " acc[16] = {0};\n    long long j = j0;\n";
    cpp += "    for (; j + 16 <= j1; j += 16)\n#pragma omp simd\n";
    cpp += "      for (int l = 0; l < 16; ++l)\n";
    cpp += "        acc[l] += " + value + "i0 + j + l" + offsetArgs + ");\n";
    cpp += "    " + T + " s = 0;\n    for (int l = 0; l < 16; ++l)\n      s += acc[l];\n";
    cpp += "    for (; j < j1; ++j)\n      s += " + value + "i0 + j" + tailArgs + ");\n";
    cpp += "    part[t] = s;\n  }\n";
    cpp += "  for (long long r = 0; r < " + K + "; ++r) {\n    " + T + " s = 0;\n";
    cpp += "    for (long long b = 0; b < nb; ++b)\n      s += part[r * nb + b];\n";
    cpp += "    out0[r] = s;\n  }\n  free(part);\n}\n";
  } else {
    // Column sums: columns in blocks of 64 over threads; each block adds
    // the R rows in order (vectorised across its columns).
    cpp += "#pragma omp parallel for if (" + N + " >= 65536LL)\n";
    cpp += "  for (long long cb = 0; cb < (" + K + " + 63LL) / 64LL; ++cb) {\n";
    cpp += "    const long long c0 = cb * 64LL, c1 = c0 + 64LL < " + K + " ? c0 + 64LL : " + K +
           ";\n";
    cpp += "    for (long long c = c0; c < c1; ++c)\n      out0[c] = 0;\n";
    cpp += "    for (long long r = 0; r < " + R + "; ++r) {\n";
    cpp += "      const long long i0 = r * " + K + ";\n";
    cpp += rowBases(ks, p, unit, "c", "      ", offsetArgs);
    cpp += "#pragma omp simd\n      for (long long c = c0; c < c1; ++c)\n";
    cpp += "        out0[c] += " + value + "i0 + c" + offsetArgs + ");\n    }\n  }\n}\n";
  }
  ks.cpp = "#include <stdlib.h>\n" + cpp;

  // CUDA C. Row sums: a block per row (grid-stride over rows), threads
  // stride the row, then a warp-shuffle and shared-memory tree; the launch
  // needs blockDim.x a multiple of 32. Column sums: a thread per column,
  // adding the rows in order.
  std::string cuda = preludes(kCudaPrelude) + body;
  cuda += "extern \"C\" __global__ void " + name.str() + "(" + p.inParams + T +
          " *__restrict__ out0) {\n";
  std::string at = value + "i" + cudaOffsets(ks, p) + ")";
  if (rowsKind) {
    cuda += "  __shared__ " + T + " warpSums[32];\n";
    cuda += "  for (long long r = blockIdx.x; r < " + K + "; r += gridDim.x) {\n";
    cuda += "    " + T + " s = 0;\n";
    cuda += "    for (long long j = threadIdx.x; j < " + R + "; j += blockDim.x) {\n";
    cuda += "      const long long i = r * " + R + " + j;\n      s += " + at + ";\n    }\n";
    cuda += "    for (int o = 16; o > 0; o >>= 1)\n";
    cuda += "      s += __shfl_down_sync(0xffffffffu, s, o);\n";
    cuda += "    if ((threadIdx.x & 31) == 0)\n      warpSums[threadIdx.x >> 5] = s;\n";
    cuda += "    __syncthreads();\n    if (threadIdx.x < 32) {\n";
    cuda += "      s = threadIdx.x < (blockDim.x + 31) / 32 ? warpSums[threadIdx.x] : (" + T +
            ")0;\n";
    cuda += "      for (int o = 16; o > 0; o >>= 1)\n";
    cuda += "        s += __shfl_down_sync(0xffffffffu, s, o);\n";
    cuda += "      if (threadIdx.x == 0)\n        out0[r] = s;\n    }\n";
    cuda += "    __syncthreads();\n  }\n}\n";
    // NAME_parts: for a few long rows (a whole-tensor sum of squares for
    // gradient clipping was one block reading 9 MB), each row split over
    // gridDim.x / rows blocks (launched with exactly rows x parts blocks);
    // block b writes row b / parts's part b % parts to partials[b], which
    // the runtime adds in order (st_row_sums). Pointer arguments only, as
    // every generated kernel.
    cuda += "extern \"C\" __global__ void " + name.str() + "_parts(" +
            p.inParams + T + " *__restrict__ partials) {\n";
    cuda += "  __shared__ " + T + " warpSums[32];\n";
    cuda +=
        "  const long long parts = gridDim.x / " + K + ", b = blockIdx.x;\n";
    cuda += "  if (parts == 0 || b >= parts * " + K + ")\n    return;\n";
    cuda += "  const long long r = b / parts, q = b % parts;\n";
    cuda += "  const long long chunk = (" + R + " + parts - 1) / parts;\n";
    cuda += "  const long long j1 = (q + 1) * chunk < " + R +
            " ? (q + 1) * chunk : " + R + ";\n";
    cuda += "  " + T + " s = 0;\n";
    cuda += "  for (long long j = q * chunk + threadIdx.x; j < j1; j += "
            "blockDim.x) {\n";
    cuda += "    const long long i = r * " + R + " + j;\n    s += " + at +
            ";\n  }\n";
    cuda += "  for (int o = 16; o > 0; o >>= 1)\n";
    cuda += "    s += __shfl_down_sync(0xffffffffu, s, o);\n";
    cuda +=
        "  if ((threadIdx.x & 31) == 0)\n    warpSums[threadIdx.x >> 5] = s;\n";
    cuda += "  __syncthreads();\n  if (threadIdx.x < 32) {\n";
    cuda += "    s = threadIdx.x < (blockDim.x + 31) / 32 ? "
            "warpSums[threadIdx.x] : (" +
            T + ")0;\n";
    cuda += "    for (int o = 16; o > 0; o >>= 1)\n";
    cuda += "      s += __shfl_down_sync(0xffffffffu, s, o);\n";
    cuda += "    if (threadIdx.x == 0)\n      partials[b] = s;\n  }\n}\n";
  } else {
    cuda += "  for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < " + K +
            "; c += (long long)gridDim.x * blockDim.x) {\n";
    cuda += "    " + T + " s = 0;\n";
    cuda += "    for (long long r = 0; r < " + R + "; ++r) {\n";
    cuda += "      const long long i = r * " + K + " + c;\n      s += " + at + ";\n    }\n";
    cuda += "    out0[c] = s;\n  }\n}\n";
  }
  ks.cuda = cuda;
  return ks;
}

FailureOr<KernelSource> stretto::kernel::emitRows(RowsOp op, StringRef name) {
  auto type = cast<RankedTensorType>(op.getInput().getType());
  KernelSource ks;
  ks.kind = "rows";
  if (failed(nameAndType(op, type.getElementType(), name, ks)))
    return failure();
  const std::string &T = ks.dtype;
  ks.resultShape.assign(type.getShape().begin(), type.getShape().end());
  ks.iterationShape = ks.resultShape;
  ks.numElements = type.getNumElements();
  ks.numResults = 1;
  ks.inputShapes.push_back(ks.resultShape);
  for (Value v : op.getParams()) {
    auto sh = cast<RankedTensorType>(v.getType()).getShape();
    ks.inputShapes.emplace_back(sh.begin(), sh.end());
  }
  int64_t len = type.getShape().back();
  int64_t rows = len ? ks.numElements / len : 0;
  StringRef fn = op.getFn();
  std::string L = std::to_string(len) + "LL";
  char eps[64];
  std::snprintf(eps, sizeof eps, "(%s)%.17g", T.c_str(), op.getEps().convertToDouble());

  // The row function: a call of KernelMath.inc's row function. A norm's
  // input stored in bf16 (kernel-bf16-storage) comes in the target's bf16
  // slot; the row function widens it.
  const bool halfX = fn != "softmax" && storedInBf16(op.getInput());
  const std::string X = halfX ? std::string("ST_BF16_SLOT") : T;
  std::string params = "const " + X + " *__restrict__ xr, ";
  std::string args = "in0 + r * " + L + ", ";
  for (size_t k = 0; k < op.getParams().size(); ++k) {
    params += "const " + T + " *__restrict__ p" + std::to_string(k) + ", ";
    args += "in" + std::to_string(k + 1) + ", ";
  }
  // A norm's result stored in bf16 (store_bf16): rounded into the slot.
  const bool halfY = op.getStoreBf16();
  const std::string Y = halfY ? std::string("ST_BF16_SLOT") : T;
  params += Y + " *__restrict__ yr, long long pos";
  args += "out0 + r * " + L + ", r % " + L;
  const std::string put = halfY ? ", [&](long long j, " + T + " v) { yr[j] = ST_STORE_BF16(v); }"
                                : std::string();
  std::string body = header(name, op->getOperands(), type, 1);
  body += "ST_FN void " + name.str() + "_row(" + params + ") {\n";
  // KernelMath.inc's row functions: the reference executor's own
  // definition (runtime/exec/OpSemantics.h calls the same), so the values match
  // it bit for bit.
  if (fn == "softmax") {
    body += "  st_softmax_row(xr, yr, " + L + ", " + (op.getCausal() ? "pos + 1" : L) + ");\n";
  } else {
    bool ln = fn == "layer_norm";
    const std::string beta = ln ? "p1" : "(const " + T + " *)0";
    body += halfY ? "  st_norm_row_put(xr, p0, " + beta + ", " + L + ", " + eps + put + ");\n"
                  : "  st_norm_row(xr, p0, " + beta + ", yr, " + L + ", " + eps + ");\n";
  }
  body += "}\n";
  ks.body = body;

  size_t nIn = 1 + op.getParams().size();
  std::string N = std::to_string(ks.numElements) + "LL";
  std::string cpp = preludes(kCppPrelude) + body + cppEntry(name, T, nIn, 1);
  cpp += "#pragma omp parallel for if (" + N + " >= 32768LL)\n";
  cpp += "  for (long long r = 0; r < " + std::to_string(rows) + "LL; ++r)\n";
  cpp += "    " + name.str() + "_row(" + args + ");\n}\n";
  ks.cpp = cpp;

  // CUDA C: a half-warp (16 threads) per row, KernelMath.inc's st_*_row16
  // (the thread-per-row values bit for bit, with coalesced loads). The loop
  // variable is the warp's first row, so both half-warps of a warp run the
  // same iterations and their shuffles meet; a half-warp past the last row
  // works on an empty row. blockDim.x: a multiple of 32.
  std::string cudaParams;
  for (size_t k = 0; k < nIn; ++k)
    cudaParams += "const " + (k == 0 ? X : T) + " *__restrict__ in" + std::to_string(k) + ", ";
  std::string R = std::to_string(rows) + "LL";
  std::string cuda = preludes(kCudaPrelude) + body;
  cuda +=
      "ST_FN void " + name.str() + "_row16(" + params + ", long long n) {\n";
  if (fn == "softmax")
    cuda += "  st_softmax_row16(xr, yr, n, n ? " +
            std::string(op.getCausal() ? "pos + 1" : "n") + " : 0);\n";
  else if (halfY)
    cuda += "  st_norm_row16_put(xr, p0, " +
            std::string(fn == "layer_norm" ? "p1" : "(const " + T + " *)0") + ", n, " + eps +
            put + ");\n";
  else
    cuda += "  st_norm_row16(xr, p0, " +
            std::string(fn == "layer_norm" ? "p1" : "(const " + T + " *)0") +
            ", yr, n, " + eps + ");\n";
  cuda += "}\n";
  cuda += "extern \"C\" __global__ void " + name.str() + "(" + cudaParams + Y +
          " *__restrict__ out0) {\n";
  cuda += "  for (long long w = (blockIdx.x * (long long)blockDim.x + "
          "threadIdx.x) / 32 * 2; w < " +
          R + "; w += (long long)gridDim.x * blockDim.x / 16) {\n";
  cuda += "    const long long r0 = w + ((threadIdx.x >> 4) & 1);\n";
  cuda += "    const long long r = r0 < " + R + " ? r0 : 0;\n";
  cuda += "    " + name.str() + "_row16(" + args + ", r0 < " + R + " ? " + L +
          " : 0);\n";
  cuda += "  }\n}\n";
  ks.cuda = cuda;
  return ks;
}

namespace {
// `text` without its copy of `prelude` (where it has one).
std::string withoutPrelude(const std::string &text,
                           const std::string &prelude) {
  size_t at = text.find(prelude);
  return at == std::string::npos
             ? text
             : text.substr(0, at) + text.substr(at + prelude.size());
}
} // namespace

std::string
stretto::kernel::joinCppSources(const std::vector<KernelSource> &kernels) {
  const std::string prelude = preludes(kCppPrelude);
  std::string unit = prelude;
  for (const KernelSource &k : kernels)
    unit += "#include <math.h>\n" + withoutPrelude(k.cpp, prelude) + "\n";
  return unit;
}

std::string
stretto::kernel::joinCudaSources(const std::vector<KernelSource> &kernels) {
  const std::string prelude = preludes(kCudaPrelude);
  std::string unit = prelude;
  for (const KernelSource &k : kernels)
    unit += withoutPrelude(k.cuda, prelude) + "\n";
  return unit;
}

FailureOr<KernelSource> stretto::kernel::emitKernel(Operation *op, StringRef name) {
  if (auto e = dyn_cast<ElementwiseOp>(op))
    return emitElementwise(e, name);
  if (auto r = dyn_cast<ReduceOp>(op))
    return emitReduce(r, name);
  if (auto r = dyn_cast<RowsOp>(op))
    return emitRows(r, name);
  return op->emitOpError() << "is not a kernel the emitter knows";
}

LogicalResult stretto::kernel::emitAllKernels(Operation *root, std::vector<KernelSource> &out) {
  llvm::StringMap<int> counters;
  bool ok = true;
  root->walk([&](Operation *op) {
    if (!isa<ElementwiseOp, ReduceOp, RowsOp>(op))
      return;
    std::string prefix = "kernel";
    Operation *phase = op->getParentOp();
    if (phase && phase->getDialect() && phase->getDialect()->getNamespace() == "train") {
      prefix = phase->getName().stripDialect().str();
      if (Operation *model = phase->getParentOp())
        if (auto sym = model->getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName()))
          prefix = sanitize(sym.getValue()) + "_" + prefix;
    }
    std::string name = prefix + "_k" + std::to_string(counters[prefix]++);
    FailureOr<KernelSource> ks = emitKernel(op, name);
    if (failed(ks))
      ok = false;
    else
      out.push_back(std::move(*ks));
  });
  return success(ok);
}
