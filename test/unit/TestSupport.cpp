//===- TestSupport.cpp ----------------------------------------------------===//
#include "TestSupport.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include "stretto/Compiler/Lowering.h"
#include "stretto/Transforms/Pipelines.h"
#include "stretto/Frontend/Import.h"
#include "stretto/Dialect/Train/TrainOps.h"
#include "stretto/Transforms/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassRegistry.h"
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

PipelineFn modelPasses(const std::string &passes) {
  return [passes](PassManager &pm) {
    static bool registered = [] {
      train::registerTrainPasses();
      registerCanonicalizerPass();
      registerCSEPass();
      return true;
    }();
    (void)registered;
    std::string err;
    llvm::raw_string_ostream os(err);
    if (failed(parsePassPipeline("train.model(" + passes + ")", pm, os)))
      ADD_FAILURE() << "bad pass pipeline '" << passes << "': " << err;
  };
}

Graph compileConfig(const std::string &toml, const PipelineFn &pipeline,
                    const std::vector<std::string> &overrides) {
  MLIRContext ctx;
  prepareContext(ctx);
  std::string error;
  auto module = importConfigString(ctx, toml, "test.toml", overrides, error);
  if (!module) {
    ADD_FAILURE() << error;
    return {};
  }
  Compiled c = compileModule(*module, pipeline);
  EXPECT_TRUE(c.ok) << c.diagnostics;
  return c.graph;
}

const char *const kSmallMlp = R"(
[model]
kind = "mlp"
inputs = 8
hidden = [16]
classes = 4
batch = 16
[train]
optimizer = "adamw"
lr = 1e-2
steps = 40
eval_interval = 20
[data]
format = "synthetic"
)";

TempDir::TempDir() {
  static int counter = 0;
  path = std::filesystem::temp_directory_path() /
         ("stretto-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

TrainerOptions quietTrainerOptions(int64_t steps, const std::string &out) {
  TrainerOptions o;
  o.steps = steps;
  o.evalInterval = 20;
  o.evalBatches = 2;
  o.outDir = out;
  o.quiet = true;
  return o;
}

} // namespace stretto::test
