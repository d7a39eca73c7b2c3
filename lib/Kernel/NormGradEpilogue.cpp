//===- NormGradEpilogue.cpp - kernel-norm-grad-epilogue -------------------===//
//
// Folds the one fused kernel that reads a train.norm_grad's dx rows into
// the norm_grad: the residual stream's gradient added (dx + r), the
// rounding to bf16 of a bf16 plan (bf16(r + bf16(dx)), or bf16(dx)), so
// that the rows are written once, in the form their readers read, by the
// pass over the rows that makes them (see KernelPasses.td).
//
//===----------------------------------------------------------------------===//
#include "stretto/Kernel/Emitter.h"
#include "stretto/Kernel/Passes.h"

namespace stretto::kernel {
#define GEN_PASS_DEF_KERNELNORMGRADEPILOGUE
#include "Kernel/KernelPasses.h.inc"
} // namespace stretto::kernel

using namespace mlir;
using namespace stretto;
using kernel::sameStage;

namespace {

/// What a kernel's body does with its argument `rows` (the dx rows) and,
/// where it has two inputs, `other` (the addend): the forms folded.
enum class Body { None, Add, Round, RoundAdd };

/// The body's form: yield(a_rows + a_other) (f32), yield(bf16(a_rows)), or
/// yield(bf16(a_other + bf16(a_rows))) (either order of the add's operands:
/// IEEE addition is commutative, bit for bit).
Body bodyForm(kernel::ElementwiseOp op, unsigned rows) {
  Block &body = op.getBodyBlock();
  auto yield = cast<kernel::YieldOp>(body.getTerminator());
  if (yield.getValues().size() != 1)
    return Body::None;
  Value out = yield.getValues()[0];
  Value a = body.getArgument(rows);
  const size_t ops = body.getOperations().size(); // (the yield included)
  auto roundOf = [](Value v) -> Value {
    auto r = v.getDefiningOp<kernel::RoundBf16Op>();
    return r ? r->getOperand(0) : Value();
  };
  // dx + r, or r + bf16(dx): the add of the rows' value `dx` and the other
  // argument.
  auto addOf = [&](Value v, Value dx) {
    auto add = v.getDefiningOp<kernel::AddOp>();
    if (!add || body.getNumArguments() != 2)
      return false;
    Value other = body.getArgument(1 - rows);
    return (add.getLhs() == dx && add.getRhs() == other) ||
           (add.getLhs() == other && add.getRhs() == dx);
  };
  if (body.getNumArguments() == 1)
    return ops == 2 && roundOf(out) == a ? Body::Round : Body::None;
  if (ops == 2 && addOf(out, a))
    return Body::Add;
  if (ops == 4 && roundOf(out)) {
    auto add = roundOf(out).getDefiningOp<kernel::AddOp>();
    if (!add)
      return Body::None;
    for (Value dx : {add.getLhs(), add.getRhs()})
      if (roundOf(dx) == a && addOf(add, dx))
        return Body::RoundAdd;
  }
  return Body::None;
}

struct NormGradEpiloguePass
    : stretto::kernel::impl::KernelNormGradEpilogueBase<NormGradEpiloguePass> {
  void runOnOperation() override {
    SmallVector<train::NormGradOp> grads;
    getOperation().walk([&](train::NormGradOp op) { grads.push_back(op); });
    for (train::NormGradOp op : grads)
      fold(op);
  }

  /// The view of `op`'s dx rows (a slice of its leading rows, maybe
  /// reshaped), where that view has one reader, and the reader.
  static std::pair<Value, kernel::ElementwiseOp> rowsReader(train::NormGradOp op) {
    const int64_t rows =
        cast<RankedTensorType>(op.getType()).getDimSize(0) - (op.getCentered() ? 2 : 1);
    for (Operation *user : op->getUsers()) {
      auto slice = dyn_cast<train::SliceOp>(user);
      if (!slice || slice.getAxis() != 0 || slice.getOffset() != 0 ||
          cast<RankedTensorType>(slice.getType()).getDimSize(0) != rows)
        continue;
      Value view = slice.getResult();
      if (!view.hasOneUse() || !sameStage(slice, op))
        return {};
      if (auto reshape = dyn_cast<train::ReshapeOp>(*view.getUsers().begin())) {
        if (!sameStage(reshape, op) || !reshape.getResult().hasOneUse())
          return {};
        view = reshape.getResult();
      }
      auto reader = dyn_cast<kernel::ElementwiseOp>(*view.getUsers().begin());
      return {view, reader};
    }
    return {};
  }

  void fold(train::NormGradOp op) {
    if (op.getAddend() || op->hasAttr(kernel::kStoreBf16Attr))
      return; // (folded already)
    auto [view, reader] = rowsReader(op);
    if (!reader || reader.getNumResults() != 1 || !sameStage(reader, op) ||
        reader.getResult(0).getType() != view.getType())
      return;
    unsigned at = 0;
    while (at < reader.getInputs().size() && reader.getInputs()[at] != view)
      ++at;
    if (reader.getInputs().size() > 2 || llvm::count(reader.getInputs(), view) != 1)
      return;
    const Body form = bodyForm(reader, at);
    // bf16 forms only where the kernel stores its result in two bytes
    // (kernel-bf16-storage said every reader takes it so): the rows do
    // then; an f32 add only where the result is four bytes.
    const bool stored16 = reader.getStoreBf16();
    if (form == Body::None || ((form == Body::Add) == stored16))
      return;
    Value addend;
    if (form != Body::Round) {
      addend = reader.getInputs()[1 - at];
      // The addend must be there before the norm_grad, of x's type.
      Operation *def = addend.getDefiningOp();
      if (addend.getType() != op.getInput().getType() ||
          (def && (def->getBlock() != op->getBlock() || !def->isBeforeInBlock(op))))
        return;
    }
    if (addend)
      op.getAddendMutable().assign(addend);
    if (stored16)
      op->setAttr(kernel::kStoreBf16Attr, UnitAttr::get(op.getContext()));
    reader.getResult(0).replaceAllUsesWith(view);
    reader.erase();
  }
};

} // namespace
