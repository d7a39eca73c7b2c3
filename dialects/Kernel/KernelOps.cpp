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

void ElementwiseOp::build(OpBuilder &b, OperationState &st, TypeRange resultTypes,
                          ValueRange inputs) {
  st.addOperands(inputs);
  st.addTypes(resultTypes);
  Region *body = st.addRegion();
  Block *block = new Block();
  body->push_back(block);
  for (Value v : inputs)
    block->addArgument(cast<ShapedType>(v.getType()).getElementType(), st.location);
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
  for (auto [i, v] : llvm::enumerate(getInputs())) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getElementType() != elem)
      return emitOpError() << "operand #" << i << " of type " << t
                           << " has element type " << t.getElementType()
                           << ", the result's is " << elem;
    if (!broadcastsTo(t.getShape(), out.getShape()))
      return emitOpError() << "operand #" << i << " of type " << t
                           << " does not broadcast to the result type " << out;
  }
  return success();
}

LogicalResult ElementwiseOp::verifyRegions() {
  Block &block = getBodyBlock();
  if (block.getNumArguments() != getInputs().size())
    return emitOpError() << "body has " << block.getNumArguments()
                         << " arguments for " << getInputs().size() << " operands";
  for (auto [i, arg] : llvm::enumerate(block.getArguments())) {
    Type want = cast<ShapedType>(getInputs()[i].getType()).getElementType();
    if (arg.getType() != want)
      return emitOpError() << "body argument #" << i << " has type " << arg.getType()
                           << ", expected " << want << " (element of operand #" << i
                           << " of type " << getInputs()[i].getType() << ")";
  }
  for (Operation &op : block.without_terminator())
    if (!isa<KernelDialect>(op.getDialect()) || isa<ElementwiseOp>(op))
      return op.emitOpError() << "is not a `kernel` scalar op; a kernel.elementwise "
                                 "body holds only kernel scalar ops";
  auto yield = cast<YieldOp>(block.getTerminator());
  if (yield.getValues().size() != getResults().size())
    return emitOpError() << "body yields " << yield.getValues().size()
                         << " values for " << getResults().size() << " results";
  // Yielded types match the results: scalar ops keep their operands' type
  // and body arguments have the operands' element type (checked above).
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
  SmallVector<int64_t> want(batchA.begin(), batchA.end());
  want.push_back(m);
  want.push_back(n);
  if (r.getShape() != ArrayRef<int64_t>(want))
    return emitOpError() << "result type " << r << " does not match op(a) x op(b) = "
                         << RankedTensorType::get(want, r.getElementType());
  return success();
}
