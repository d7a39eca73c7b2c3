//===- FuseReductions.cpp - kernel-fuse-reductions ------------------------===//
//
// A train.reduce_sum of a single-use kernel.elementwise becomes one
// kernel.reduce (see KernelPasses.td): the elementwise values are summed as
// they are computed instead of being stored and read back.
//
//===----------------------------------------------------------------------===//
#include "stretto/Kernel/Emitter.h"
#include "stretto/Kernel/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace stretto::kernel {
#define GEN_PASS_DEF_KERNELFUSEREDUCTIONS
#include "Kernel/KernelPasses.h.inc"
} // namespace stretto::kernel

using namespace mlir;
using namespace stretto;

namespace {

struct FuseReductionsPass
    : stretto::kernel::impl::KernelFuseReductionsBase<FuseReductionsPass> {
  void runOnOperation() override {
    SmallVector<train::ReduceSumOp> sums;
    getOperation().walk([&](train::ReduceSumOp op) { sums.push_back(op); });
    for (train::ReduceSumOp sum : sums)
      fuse(sum);
  }

  void fuse(train::ReduceSumOp sum) {
    auto producer = sum.getInput().getDefiningOp<kernel::ElementwiseOp>();
    if (!producer || producer->getNumResults() != 1 || !producer->hasOneUse() ||
        producer->getBlock() != sum->getBlock() ||
        producer->getAttr("stage") != sum->getAttr("stage"))
      return;
    ArrayRef<int64_t> space = producer.getResultType().getShape();
    ArrayRef<int64_t> dims = sum.getDims();
    bool trailing = false;
    if (!kernel::isReducedRun(space, dims, trailing))
      return;
    std::vector<std::vector<int64_t>> shapes;
    for (Value v : producer.getInputs()) {
      auto s = cast<RankedTensorType>(v.getType()).getShape();
      shapes.emplace_back(s.begin(), s.end());
    }
    size_t innerFrom = trailing ? dims.front() : dims.back() + 1;
    if (!kernel::uniformInnerRun(shapes, space, innerFrom))
      return;
    OpBuilder b(sum);
    auto reduce = b.create<kernel::ReduceOp>(sum.getLoc(), sum.getType(), producer.getInputs(),
                                             dims, space);
    if (Attribute stage = sum->getAttr("stage"))
      reduce->setAttr("stage", stage);
    // The body moves over unchanged: same arguments, same yield.
    Block &from = producer.getBodyBlock(), &to = reduce.getBodyBlock();
    IRMapping map;
    for (auto [a, c] : llvm::zip(from.getArguments(), to.getArguments()))
      map.map(a, c);
    OpBuilder inner = OpBuilder::atBlockEnd(&to);
    for (Operation &op : from)
      inner.clone(op, map);
    sum.getResult().replaceAllUsesWith(reduce.getResult());
    sum->erase();
    producer->erase();
  }
};

} // namespace
