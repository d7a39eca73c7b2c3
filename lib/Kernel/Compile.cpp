//===- Compile.cpp - a model's fused kernels as one host shared object ----===//
//
// Every kernel's C++ source carries the shared prelude behind an include
// guard, so the sources concatenate into one translation unit: one compiler
// run per model (cached), not one per kernel.
//
//===----------------------------------------------------------------------===//
#include "stretto/Kernel/Compile.h"
#include "stretto/Kernel/Emitter.h"
#include "stretto/Kernel/Passes.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace stretto;

void stretto::buildKernelPipeline(OpPassManager &pm) {
  OpPassManager &model = pm.nest<train::ModelOp>();
  model.addPass(kernel::createKernelLowerMatmul());
  model.addPass(kernel::createKernelLowerRows());
  model.addPass(kernel::createKernelFuseElementwise());
  model.addPass(kernel::createKernelFuseReductions());
}

FailureOr<CompiledKernels> stretto::compileKernels(train::ModelOp model, HostKernelCache &cache,
                                                   std::string &error) {
  std::string unit, cuda;
  std::vector<std::string> symbols;
  // The CUDA unit carries the prelude once (gpt-small: 712 copies of it
  // made 11 MB of the plan file's 24 MB, all for NVRTC to skip); the C++
  // unit keeps one per kernel, where a pipeline rank cuts out its stage's
  // kernels (hostKernelSubset).
  const std::string cudaPrelude = kernel::cudaKernelPrelude();
  int index = 0;
  WalkResult walk = model.walk([&](Operation *op) {
    if (!isa<kernel::ElementwiseOp, kernel::ReduceOp, kernel::RowsOp>(op))
      return WalkResult::advance();
    std::string name = (model.getSymName() + "_k" + std::to_string(index++)).str();
    for (char &c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)))
        c = '_';
    FailureOr<KernelSource> src = kernel::emitKernel(op, name);
    if (failed(src))
      return WalkResult::interrupt();
    op->setAttr("symbol", StringAttr::get(op->getContext(), name));
    unit += src->cpp;
    unit += "\n";
    bool again = !cuda.empty() &&
                 src->cuda.compare(0, cudaPrelude.size(), cudaPrelude) == 0;
    cuda += again ? src->cuda.substr(cudaPrelude.size()) : src->cuda;
    cuda += "\n";
    symbols.push_back(name);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted()) {
    error = "kernel codegen failed (see the diagnostic above)";
    return failure();
  }
  CompiledKernels out;
  out.sourcePath = cache.entryPath(unit) + ".cpp";
  out.cppSource = unit;
  out.cudaSource = cuda;
  std::vector<HostKernelFn> fns = cache.loadAll(unit, symbols, error);
  if (fns.size() != symbols.size())
    return failure();
  for (size_t k = 0; k < symbols.size(); ++k)
    out.functions[symbols[k]] = fns[k];
  return out;
}
