//===- Compile.cpp - a model's fused kernels as one host shared object ----===//
//
// Every kernel's source carries the shared prelude behind an include guard;
// joinCppSources keeps one copy and concatenates the kernels into one
// translation unit: one compiler run per model (cached), not one per kernel.
//
//===----------------------------------------------------------------------===//
#include "stretto/Kernel/Compile.h"
#include "stretto/Kernel/Emitter.h"
#include "stretto/Kernel/Passes.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace stretto;

void stretto::buildKernelPipeline(OpPassManager &pm, const KernelPipelineOptions &options) {
  OpPassManager &model = pm.nest<train::ModelOp>();
  model.addPass(kernel::createKernelLowerMatmul());
  model.addPass(kernel::createKernelLowerRows());
  model.addPass(kernel::createKernelFuseElementwise());
  model.addPass(kernel::createKernelFuseReductions());
  model.addPass(kernel::createKernelBf16Storage());
  model.addPass(kernel::createKernelNormGradEpilogue());
  model.addPass(kernel::createKernelGemmEpilogue());
  if (options.attentionLayout)
    model.addPass(kernel::createKernelAttentionLayout());
}

FailureOr<CompiledKernels> stretto::compileKernels(train::ModelOp model, HostKernelCache &cache,
                                                   std::string &error) {
  std::vector<KernelSource> sources;
  std::vector<std::string> symbols;
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
    sources.push_back(std::move(*src));
    symbols.push_back(name);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted()) {
    error = "kernel codegen failed (see the diagnostic above)";
    return failure();
  }
  // One unit per target, the shared prelude once (Emitter.h).
  std::string unit = kernel::joinCppSources(sources),
              cuda = kernel::joinCudaSources(sources);
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
