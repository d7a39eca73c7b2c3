//===- KernelOps.cpp - the `kernel` dialect: ops and verifiers ------------===//
//
// Verifier messages name the operand or body argument and the types that
// disagree, as in the `train` dialect.
//
//===----------------------------------------------------------------------===//
#include "stretto/Dialect/Kernel/KernelOps.h"
#include "stretto/Support/Broadcast.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"

using namespace mlir;
using namespace stretto::kernel;

#include "Kernel/KernelDialect.cpp.inc"

void KernelDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "Kernel/KernelOps.cpp.inc"
      >();
}

#define GET_OP_CLASSES
#include "Kernel/KernelOps.cpp.inc"

using stretto::broadcastsTo;

// A fused kernel's operands and its body block: one scalar argument per
// operand, of the operand's element type.
static void addOperandsAndBody(OperationState &st, ValueRange inputs) {
  st.addOperands(inputs);
  Region *body = st.addRegion();
  Block *block = new Block();
  body->push_back(block);
  for (Value v : inputs)
    block->addArgument(cast<ShapedType>(v.getType()).getElementType(), st.location);
}

void ElementwiseOp::build(OpBuilder &b, OperationState &st, TypeRange resultTypes,
                          ValueRange inputs) {
  st.addTypes(resultTypes);
  addOperandsAndBody(st, inputs);
}

// Every operand has the element type `elem` and broadcasts to `shape`: the
// result type `result` (elementwise) or, when null, an iteration shape.
static LogicalResult verifyOperands(Operation *op, ValueRange inputs, Type elem,
                                    ArrayRef<int64_t> shape, Type result) {
  for (auto [i, v] : llvm::enumerate(inputs)) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getElementType() != elem)
      return op->emitOpError() << "operand #" << i << " of type " << t
                               << " has element type " << t.getElementType()
                               << ", the result's is " << elem;
    if (broadcastsTo(t.getShape(), shape))
      continue;
    InFlightDiagnostic d = op->emitOpError() << "operand #" << i << " of type " << t
                                             << " does not broadcast to ";
    if (result)
      d << "the result type " << result;
    else
      d << "the iteration shape [" << shape << "]";
    return d;
  }
  return success();
}

LogicalResult ElementwiseOp::verify() {
  if (getResults().empty())
    return emitOpError("needs at least one result");
  RankedTensorType out = getResultType();
  Type elem = out.getElementType();
  for (auto [i, r] : llvm::enumerate(getResults())) {
    if (r.getType() != out)
      return emitOpError() << "results must share one type, got " << out
                           << " (result #0) and " << r.getType() << " (result #" << i << ")";
  }
  if (failed(verifyOperands(*this, getInputs(), elem, out.getShape(), out)))
    return failure();
  if (getStoreBf16() && !elem.isF32())
    return emitOpError() << "stores bf16 only from f32 results, not " << elem;
  if (getStoreBf16() && getNumResults() != 1)
    return emitOpError() << "stores bf16 only with one result, not " << getNumResults();
  return success();
}

// A fused body: one block argument per operand, of its element type; only
// `kernel` scalar ops; a yield of `results` values.
static LogicalResult verifyScalarBody(Operation *op, Block &block, ValueRange inputs,
                                      size_t results) {
  if (block.getNumArguments() != inputs.size())
    return op->emitOpError() << "body has " << block.getNumArguments() << " arguments for "
                             << inputs.size() << " operands";
  for (auto [i, arg] : llvm::enumerate(block.getArguments())) {
    Type want = cast<ShapedType>(inputs[i].getType()).getElementType();
    if (arg.getType() != want)
      return op->emitOpError() << "body argument #" << i << " has type " << arg.getType()
                               << ", expected " << want << " (element of operand #" << i
                               << " of type " << inputs[i].getType() << ")";
  }
  for (Operation &inner : block.without_terminator())
    if (!isa<KernelDialect>(inner.getDialect()) || isa<ElementwiseOp, ReduceOp>(inner))
      return inner.emitOpError() << "is not a `kernel` scalar op; a fused kernel body "
                                    "holds only kernel scalar ops";
  auto yield = cast<YieldOp>(block.getTerminator());
  if (yield.getValues().size() != results)
    return op->emitOpError() << "body yields " << yield.getValues().size() << " values for "
                             << results << " results";
  // Yielded types match the results: scalar ops keep their operands' type
  // and body arguments have the operands' element type (checked above).
  return success();
}

LogicalResult ElementwiseOp::verifyRegions() {
  return verifyScalarBody(*this, getBodyBlock(), getInputs(), getResults().size());
}

void ReduceOp::build(OpBuilder &b, OperationState &st, Type resultType, ValueRange inputs,
                     ArrayRef<int64_t> dims, ArrayRef<int64_t> space) {
  st.addTypes(resultType);
  st.addAttribute("dims", b.getDenseI64ArrayAttr(dims));
  st.addAttribute("space", b.getDenseI64ArrayAttr(space));
  addOperandsAndBody(st, inputs);
}

bool stretto::kernel::isReducedRun(ArrayRef<int64_t> space, ArrayRef<int64_t> dims,
                                   bool &trailing) {
  trailing = false;
  if (dims.empty())
    return false;
  auto kept = [&](int64_t d) { return space[d] != 1 && !llvm::is_contained(dims, d); };
  bool leading = true;
  trailing = true;
  for (int64_t d = 0; d <= dims.back(); ++d)
    leading = leading && !kept(d);
  for (int64_t d = dims.front(); d < (int64_t)space.size(); ++d)
    trailing = trailing && !kept(d);
  return leading || trailing;
}

bool ReduceOp::reducesTrailing() {
  bool trailing = false;
  isReducedRun(getSpace(), getDims(), trailing);
  return trailing;
}

LogicalResult ReduceOp::verify() {
  ArrayRef<int64_t> dims = getDims(), space = getSpace();
  RankedTensorType out = getResultType();
  for (int64_t d : space)
    if (d < 1)
      return emitOpError() << "iteration shape [" << space << "] has a dim < 1";
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] < 0 || dims[k] >= (int64_t)space.size())
      return emitOpError() << "reduced dim " << dims[k] << " is out of range for the "
                           << space.size() << "-d iteration shape [" << space << "]";
    if (k && dims[k] <= dims[k - 1])
      return emitOpError() << "reduced dims [" << dims << "] must be sorted and unique";
  }
  if (dims.empty())
    return emitOpError() << "needs at least one reduced dim (use kernel.elementwise)";
  bool trailing = false;
  if (!isReducedRun(space, dims, trailing))
    return emitOpError() << "reduced dims [" << dims << "] are neither a leading nor a "
                            "trailing run of the iteration shape ["
                         << space << "]";
  SmallVector<int64_t> kept;
  for (int64_t d = 0; d < (int64_t)space.size(); ++d)
    if (!llvm::is_contained(dims, d))
      kept.push_back(space[d]);
  if (out.getShape() != ArrayRef<int64_t>(kept))
    return emitOpError() << "result type " << out << " is not the iteration shape ["
                         << space << "] without dims [" << dims << "]";
  return verifyOperands(*this, getInputs(), out.getElementType(), space, Type());
}

LogicalResult ReduceOp::verifyRegions() {
  return verifyScalarBody(*this, getBodyBlock(), getInputs(), 1);
}

LogicalResult RowsOp::verify() {
  auto x = cast<RankedTensorType>(getInput().getType());
  StringRef fn = getFn();
  size_t want = fn == "softmax" ? 0 : fn == "layer_norm" ? 2 : fn == "rms_norm" ? 1 : 99;
  if (want == 99)
    return emitOpError() << "unknown row function \"" << fn
                         << "\"; expected softmax, layer_norm or rms_norm";
  if (x.getRank() < 1)
    return emitOpError() << "needs a ranked input with a last dim, got " << x;
  if (getParams().size() != want)
    return emitOpError() << "\"" << fn << "\" takes " << want << " params, got "
                         << getParams().size();
  int64_t len = x.getShape().back();
  for (auto [i, v] : llvm::enumerate(getParams())) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getShape() != ArrayRef<int64_t>{len} || t.getElementType() != x.getElementType())
      return emitOpError() << "param #" << i << " of type " << t << " must be "
                           << RankedTensorType::get({len}, x.getElementType())
                           << " (one value per element of a row)";
  }
  if (getCausal()) {
    if (fn != "softmax")
      return emitOpError() << "only softmax is causal";
    if (x.getRank() < 2 || x.getShape()[x.getRank() - 2] != len)
      return emitOpError() << "a causal softmax needs square trailing [T, T] blocks, got " << x;
  }
  return success();
}

LogicalResult GemmOp::verify() {
  auto a = cast<RankedTensorType>(getA().getType());
  auto b = cast<RankedTensorType>(getB().getType());
  auto r = cast<RankedTensorType>(getResult().getType());
  if (a.getElementType() != b.getElementType() || a.getElementType() != r.getElementType())
    return emitOpError() << "operands and result must share one element type, got "
                         << a << ", " << b << " -> " << r;
  if (a.getRank() < 2 || b.getRank() < 2)
    return emitOpError() << "operands need rank >= 2, got " << a << " and " << b;
  if (getStoreBf16() && !r.getElementType().isF32())
    return emitOpError() << "stores bf16 only from an f32 result, not " << r.getElementType();
  // op(x): the [rows, cols] of x after its optional transpose.
  auto rowsCols = [](RankedTensorType t, bool transposed) {
    int64_t n = t.getRank();
    int64_t rows = t.getDimSize(n - 2), cols = t.getDimSize(n - 1);
    return transposed ? std::make_pair(cols, rows) : std::make_pair(rows, cols);
  };
  auto [m, ka] = rowsCols(a, getTransposeA());
  auto [kb, n] = rowsCols(b, getTransposeB());
  if (ka != kb)
    return emitOpError() << "contraction dims differ: op(a) has K = " << ka
                         << ", op(b) has K = " << kb << " (a " << a << ", b " << b << ")";
  ArrayRef<int64_t> batchA = a.getShape().drop_back(2), batchB = b.getShape().drop_back(2);
  if (!batchB.empty() && batchA != batchB)
    return emitOpError() << "batch dims of a " << a << " and b " << b
                         << " differ; b must be 2-D or have a's batch dims";
  if (getBiasGrad()) {
    if (a.getRank() != 2 || b.getRank() != 2 || getTransposeB() || getBias() || getDgelu() ||
        getAlpha().convertToDouble() != 1.0 || getStoreBf16())
      return emitOpError() << "bias_grad needs 2-D operands, b not transposed, alpha 1, no "
                              "bias or dgelu and an f32 result";
  }
  if (getGeluAux() && (getDgelu() || getBiasGrad()))
    return emitOpError() << "gelu_aux takes no dgelu or bias_grad besides (one epilogue)";
  SmallVector<int64_t> want;
  if (getGeluAux()) // gelu(sum), then the sum
    want.push_back(2);
  want.append(batchA.begin(), batchA.end());
  want.push_back(getBiasGrad() ? m + 1 : m);
  want.push_back(n);
  if (r.getShape() != ArrayRef<int64_t>(want))
    return emitOpError() << "result type " << r << " does not match op(a) x op(b)"
                         << (getBiasGrad()  ? " with its row of column sums"
                             : getGeluAux() ? " twice (gelu_aux)"
                                            : "")
                         << " = " << RankedTensorType::get(want, r.getElementType());
  if (Value bias = getBias()) {
    auto bt = cast<RankedTensorType>(bias.getType());
    if (bt.getRank() != 1 || bt.getDimSize(0) != n || bt.getElementType() != r.getElementType())
      return emitOpError() << "bias must be a vector of the result's " << n << " columns in "
                           << r.getElementType() << ", got " << bt;
  }
  if (Value x = getDgelu()) {
    if (getBias())
      return emitOpError() << "has a bias and a dgelu; cuBLASLt's epilogues take one of them";
    if (x.getType() != r)
      return emitOpError() << "dgelu (the GELU's input) must have the result's type " << r
                           << ", got " << x.getType();
  }
  return success();
}

// kernel.attention's and kernel.attention_grad's packed qkv [B, T, 3, H, D].
static LogicalResult verifyPackedQkv(Operation *op, Value qkv, bool storeBf16) {
  auto t = cast<RankedTensorType>(qkv.getType());
  if (t.getRank() != 5 || t.getDimSize(2) != 3)
    return op->emitOpError() << "qkv must be [B, T, 3, H, D], got " << t;
  if (storeBf16 && !t.getElementType().isF32())
    return op->emitOpError() << "stores bf16 only from an f32 result, not " << t.getElementType();
  return success();
}

// [B, T, H, D] of a packed qkv [B, T, 3, H, D] in its element type.
static RankedTensorType rowsOfHeads(Value qkv) {
  auto t = cast<RankedTensorType>(qkv.getType());
  return RankedTensorType::get({t.getDimSize(0), t.getDimSize(1), t.getDimSize(3), t.getDimSize(4)},
                               t.getElementType());
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyPackedQkv(*this, getQkv(), getStoreBf16())))
    return failure();
  if (getType() != rowsOfHeads(getQkv()))
    return emitOpError() << "result " << getType() << " should be " << rowsOfHeads(getQkv())
                         << " ([B, T, H, D] of qkv " << getQkv().getType() << ")";
  return success();
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyPackedQkv(*this, getQkv(), getStoreBf16())))
    return failure();
  if (getGrad().getType() != rowsOfHeads(getQkv()))
    return emitOpError() << "grad " << getGrad().getType() << " should be " << rowsOfHeads(getQkv())
                         << " ([B, T, H, D] of qkv " << getQkv().getType() << ")";
  if (getType() != getQkv().getType())
    return emitOpError() << "result " << getType() << " should stack dq, dk and dv as qkv "
                         << getQkv().getType();
  return success();
}
