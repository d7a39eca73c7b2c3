//===- TestSupport.cpp ----------------------------------------------------===//
#include "TestSupport.h"

#include "stretto/Compiler/Lowering.h"
#include "stretto/Dialect/Train/TrainOps.h"
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace stretto::test {

PipelineFn noPasses() {
  return [](PassManager &) {};
}

PipelineFn autodiffOnly() {
  return [](PassManager &pm) { pm.nest<train::ModelOp>().addPass(train::createTrainAutodiff()); };
}

PipelineFn autodiffCanonicalized() {
  return [](PassManager &pm) {
    OpPassManager &model = pm.nest<train::ModelOp>();
    model.addPass(train::createTrainAutodiff());
    model.addPass(createCanonicalizerPass());
    model.addPass(createCSEPass());
  };
}

PipelineFn trainingPipeline() {
  return [](PassManager &pm) { buildTrainingPipeline(pm); };
}

void prepareContext(MLIRContext &ctx) { ctx.getOrLoadDialect<train::TrainDialect>(); }

static std::string diagToString(Diagnostic &d) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << d.getLocation() << ": " << d.str();
  for (Diagnostic &note : d.getNotes())
    os << "\n  note: " << note.getLocation() << ": " << note.str();
  return s;
}

Compiled compileModule(ModuleOp module, const PipelineFn &pipeline) {
  Compiled c;
  MLIRContext *ctx = module.getContext();
  ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &d) {
    c.diagnostics += diagToString(d) + "\n";
    return success();
  });
  PassManager pm(ctx, ModuleOp::getOperationName());
  pipeline(pm);
  if (failed(pm.run(module))) {
    c.diagnostics += "pass pipeline failed\n";
    return c;
  }
  {
    llvm::raw_string_ostream os(c.ir);
    module.print(os);
  }
  train::ModelOp model;
  module.walk([&](train::ModelOp m) {
    if (!model)
      model = m;
  });
  if (!model) {
    c.diagnostics += "no train.model in the module\n";
    return c;
  }
  FailureOr<Graph> g = lowerToGraph(model);
  if (failed(g)) {
    c.diagnostics += "lowerToGraph failed\n";
    return c;
  }
  c.graph = std::move(*g);
  c.ok = true;
  return c;
}

Compiled compile(const std::string &source, const PipelineFn &pipeline) {
  MLIRContext ctx;
  prepareContext(ctx);
  std::string parseDiags;
  OwningOpRef<ModuleOp> module;
  {
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      parseDiags += diagToString(d) + "\n";
      return success();
    });
    module = parseSourceString<ModuleOp>(source, &ctx, "test.mlir");
  }
  if (!module) {
    Compiled c;
    c.diagnostics = parseDiags + "parse failed\n";
    return c;
  }
  Compiled c = compileModule(*module, pipeline);
  c.diagnostics = parseDiags + c.diagnostics;
  return c;
}

} // namespace stretto::test
