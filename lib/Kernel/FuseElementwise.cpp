//===- FuseElementwise.cpp - kernel-fuse-elementwise ----------------------===//
//
// Groups trees of `train` elementwise ops into `kernel.elementwise` ops. See
// KernelPasses.td for the rules; the short version: a root absorbs producers
// of its own type, stage and with no use outside the kernel, and recomputes
// a one-instruction producer of one full-size operand (a bias add) in every
// kernel that reads it.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/Graph.h"
#include "stretto/Kernel/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

namespace stretto::kernel {
#define GEN_PASS_DEF_KERNELFUSEELEMENTWISE
#include "Kernel/KernelPasses.h.inc"
} // namespace stretto::kernel

using namespace mlir;
using namespace stretto;

namespace {

// The train ops that are element-wise in the op table (stretto/Ops.def);
// each has a scalar twin of the same name in the kernel dialect.
bool isElementwiseTrainOp(Operation *op) {
  OpKind k;
  return op->getDialect() && op->getDialect()->getNamespace() == "train" &&
         opKindFromName(op->getName().stripDialect().str(), k) && isElementwise(k);
}

bool isFusible(Operation *op) { return isElementwiseTrainOp(op) || isa<train::DescendOp>(op); }

// The scalar form of one fusible op on already-mapped scalar operands.
Value emitScalar(OpBuilder &b, Operation *op, ArrayRef<Value> in) {
  Location loc = op->getLoc();
  if (isElementwiseTrainOp(op)) {
    OperationState st(loc, "kernel." + op->getName().stripDialect().str());
    st.addOperands(in);
    st.addTypes(in[0].getType());
    return b.create(st)->getResult(0);
  }
  return llvm::TypeSwitch<Operation *, Value>(op)
      .Case([&](train::DescendOp) -> Value {
        // p - lr * dir, in the reference executor's order of operations.
        Value step = b.create<kernel::MulOp>(loc, in[2], in[1]);
        return b.create<kernel::SubOp>(loc, in[0], step);
      })
      .Default([](Operation *) -> Value { return nullptr; });
}

struct FuseElementwisePass
    : stretto::kernel::impl::KernelFuseElementwiseBase<FuseElementwisePass> {
  using KernelFuseElementwiseBase::KernelFuseElementwiseBase;

  void runOnOperation() override {
    train::ModelOp model = getOperation();
    if (maxOps < 0) {
      model.emitError() << "kernel-fuse-elementwise: max-ops must be >= 0 (0: unbounded), got "
                        << static_cast<int64_t>(maxOps);
      return signalPassFailure();
    }
    for (Operation *phase : {model.getStep().getOperation(),
                             model.getUpdate().getOperation(),
                             model.getOuter().getOperation()})
      if (phase)
        fuseBlock(phase->getRegion(0).front());
  }

  // Whether `op` may be in the kernel of `root`: fusible, of its block,
  // result type and pipeline stage.
  static bool sameKernel(Operation *op, Operation *root) {
    return isFusible(op) && op->getBlock() == root->getBlock() &&
           op->getResult(0).getType() == root->getResult(0).getType() &&
           op->getAttr("stage") == root->getAttr("stage");
  }

  // Whether `producer` may join the kernel whose members are `group`.
  bool absorbable(Operation *producer, Operation *root,
                  const llvm::SmallPtrSetImpl<Operation *> &group,
                  const llvm::SmallPtrSetImpl<Operation *> &copies) {
    if (!producer || group.contains(producer) || !sameKernel(producer, root))
      return false;
    // A rounding of a value that others read unrounded (a linear layer's
    // sum, whose GELU reads it in f32) is stored: the reader reads the
    // two-byte copy, not the f32 value kept alive for it.
    if (isa<train::RoundBf16Op>(producer) && !producer->getOperand(0).hasOneUse())
      return false;
    // (A copy's original stays, and keeps reading its operands.)
    return llvm::all_of(producer->getUsers(),
                        [&](Operation *u) { return group.contains(u) && !copies.contains(u); });
  }

  // Whether `producer`, used elsewhere too, may be recomputed in the kernel
  // of `root` instead of materialised: one instruction (add, sub, mul, max,
  // min, neg, relu) whose operands are at most one of the result's type and
  // smaller, broadcast ones (a bias row, a scalar), so the kernel reads that
  // operand where it would read the result: no more bytes, one pass less.
  // Every user must be an element-wise op of the same type, block and stage,
  // so that each one's kernel recomputes it and the original dies.
  bool duplicable(Operation *producer, Operation *root) {
    if (!producer || !isElementwiseTrainOp(producer) || producer->hasOneUse())
      return false;
    OpKind k;
    opKindFromName(producer->getName().stripDialect().str(), k);
    if (k != OpKind::Add && k != OpKind::Sub && k != OpKind::Mul && k != OpKind::Max &&
        k != OpKind::Min && k != OpKind::Neg && k != OpKind::Relu)
      return false;
    if (!sameKernel(producer, root))
      return false;
    int full = 0;
    for (Value v : producer->getOperands())
      full += v.getType() == root->getResult(0).getType();
    return full <= 1 && llvm::all_of(producer->getUsers(),
                                     [&](Operation *u) { return sameKernel(u, root); });
  }

  // A reshape of an element-wise op's result that is its only use, where
  // every operand has the result's type, is moved above the op: the op
  // then works on reshaped (viewed) operands and makes the reshape's type
  // itself, so it can join a kernel of that type (a rounding of norm_grad's
  // [rows, d] gradient before its [b, t, d] residual add). The same values:
  // an element-wise op does not care how its elements are laid out in rows.
  static void hoistReshapes(Block &block) {
    SmallVector<train::ReshapeOp> reshapes;
    for (Operation &op : block)
      if (auto r = dyn_cast<train::ReshapeOp>(&op))
        reshapes.push_back(r);
    for (train::ReshapeOp r : reshapes) {
      Operation *p = r.getInput().getDefiningOp();
      if (!p || !isElementwiseTrainOp(p) || !p->hasOneUse() || p->getBlock() != &block ||
          p->getAttr("stage") != r->getAttr("stage") ||
          !llvm::all_of(p->getOperands(),
                        [&](Value v) { return v.getType() == p->getResult(0).getType(); }) ||
          !llvm::all_of(r->getUsers(), [](Operation *u) { return isFusible(u); }))
        continue;
      OpBuilder b(p);
      IRMapping map;
      for (Value v : p->getOperands()) {
        auto view = b.create<train::ReshapeOp>(r.getLoc(), r.getType(), v);
        view->setAttrs(r->getAttrs());
        map.map(v, view.getResult());
      }
      Operation *moved = b.clone(*p, map);
      moved->getResult(0).setType(r.getType());
      r.getResult().replaceAllUsesWith(moved->getResult(0));
      r->erase();
      p->erase();
    }
  }

  void fuseBlock(Block &block) {
    hoistReshapes(block);
    // Roots are visited last to first, so a root's producers are still
    // plain train ops when it gathers them.
    SmallVector<Operation *> ops;
    for (Operation &op : block)
      if (isFusible(&op))
        ops.push_back(&op);
    llvm::SmallPtrSet<Operation *, 32> absorbed, copied;
    for (Operation *root : llvm::reverse(ops)) {
      if (absorbed.contains(root))
        continue;
      if (copied.contains(root) && root->use_empty()) {
        root->erase(); // recomputed in every kernel that read it
        continue;
      }
      llvm::SmallPtrSet<Operation *, 16> group, copies;
      group.insert(root);
      SmallVector<Operation *> worklist{root};
      while (!worklist.empty()) {
        Operation *member = worklist.pop_back_val();
        for (Value operand : member->getOperands()) {
          Operation *producer = operand.getDefiningOp();
          if (maxOps > 0 && (int64_t)group.size() >= maxOps)
            break;
          if (absorbable(producer, root, group, copies)) {
            group.insert(producer);
            worklist.push_back(producer);
          } else if (!group.contains(producer) && duplicable(producer, root)) {
            // Its operands stay kernel inputs: the original still reads them.
            group.insert(producer);
            copies.insert(producer);
          }
        }
      }
      for (Operation *m : group)
        (copies.contains(m) ? copied : absorbed).insert(m);
      buildKernel(root, group, copies);
    }
  }

  // `copies`: members that stay in the block for their other users.
  void buildKernel(Operation *root, const llvm::SmallPtrSetImpl<Operation *> &group,
                   const llvm::SmallPtrSetImpl<Operation *> &copies) {
    // Members in block order: operands of each precede it.
    SmallVector<Operation *> members(group.begin(), group.end());
    llvm::sort(members, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    llvm::SetVector<Value> inputs;
    for (Operation *m : members)
      for (Value v : m->getOperands())
        if (!group.contains(v.getDefiningOp()))
          inputs.insert(v);

    OpBuilder b(root);
    auto kernelOp = b.create<kernel::ElementwiseOp>(root->getLoc(),
                                                    root->getResultTypes(),
                                                    inputs.getArrayRef());
    if (Attribute stage = root->getAttr("stage"))
      kernelOp->setAttr("stage", stage);
    Block &body = kernelOp.getBodyBlock();
    IRMapping map;
    for (auto [v, arg] : llvm::zip(inputs, body.getArguments()))
      map.map(v, arg);
    OpBuilder inner = OpBuilder::atBlockEnd(&body);
    for (Operation *m : members) {
      SmallVector<Value> in;
      for (Value v : m->getOperands())
        in.push_back(map.lookup(v));
      map.map(m->getResult(0), emitScalar(inner, m, in));
    }
    inner.create<kernel::YieldOp>(root->getLoc(), map.lookup(root->getResult(0)));
    root->getResult(0).replaceAllUsesWith(kernelOp.getResult(0));
    for (Operation *m : llvm::reverse(members))
      if (!copies.contains(m))
        m->erase();
  }
};

} // namespace
