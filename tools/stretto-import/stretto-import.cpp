//===- stretto-import.cpp - expand a model config into `train` IR ---------===//
#include "stretto/Frontend/Import.h"
#include "stretto/Dialect/Train/TrainDialect.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

int main(int argc, char **argv) {
  cl::opt<std::string> input(cl::Positional, cl::desc("<config.toml>"), cl::Required);
  // The same overrides as stretto-train: `section.key=value` after the
  // config (or with --set).
  cl::list<std::string> positional(cl::Positional, cl::desc("[section.key=value ...]"));
  cl::opt<std::string> output("o", cl::desc("Output file (default: stdout)"),
                              cl::value_desc("file"), cl::init("-"));
  cl::list<std::string> sets("set", cl::desc("Override a config key: --set section.key=value"),
                             cl::value_desc("key=value"));
  cl::ParseCommandLineOptions(argc, argv,
                              "stretto-import: expand a GPT/MLP config into the train dialect\n\n"
                              "  stretto-import examples/gpt-tiny.toml | stretto-opt\n"
                              "  stretto-import examples/gpt-tiny.toml train.stages=2 -o tiny.mlir\n");
  mlir::MLIRContext ctx;
  ctx.getOrLoadDialect<stretto::train::TrainDialect>();
  std::string error;
  std::vector<std::string> overrides(positional.begin(), positional.end());
  overrides.insert(overrides.end(), sets.begin(), sets.end());
  auto module = stretto::importConfigFile(ctx, input, overrides, error);
  if (!module) {
    llvm::errs() << error << "\n";
    return 1;
  }
  std::string err;
  auto out = mlir::openOutputFile(output, &err);
  if (!out) {
    llvm::errs() << output << ": error: " << err << "\n";
    return 1;
  }
  module->print(out->os());
  out->keep();
  return 0;
}
