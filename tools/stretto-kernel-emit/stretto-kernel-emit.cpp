//===- stretto-kernel-emit.cpp - print the sources of every kernel --------===//
//
// Reads `kernel` IR (e.g. the output of `stretto-opt --kernel-fuse-elementwise`)
// and prints, for every kernel.elementwise, its C++ and/or CUDA C source.
//
//===----------------------------------------------------------------------===//
#include "stretto/Dialect/Kernel/KernelOps.h"
#include "stretto/Dialect/Train/TrainOps.h"
#include "stretto/Kernel/Emitter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input .mlir>"), cl::init("-"));
static cl::opt<std::string> target("target", cl::desc("cpp | cuda | all (default)"),
                                   cl::init("all"));

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "Stretto kernel source emitter\n");
  if (target != "cpp" && target != "cuda" && target != "all") {
    errs() << "stretto-kernel-emit: --target must be cpp, cuda or all, got '" << target << "'\n";
    return 1;
  }
  mlir::MLIRContext ctx;
  ctx.loadDialect<stretto::train::TrainDialect, stretto::kernel::KernelDialect>();
  std::string error;
  auto file = mlir::openInputFile(inputFile, &error);
  if (!file) {
    errs() << "stretto-kernel-emit: " << error << "\n";
    return 1;
  }
  SourceMgr sm;
  sm.AddNewSourceBuffer(std::move(file), SMLoc());
  mlir::SourceMgrDiagnosticHandler handler(sm, &ctx);
  mlir::OwningOpRef<mlir::Operation *> module = mlir::parseSourceFile(sm, &ctx);
  if (!module)
    return 1;
  std::vector<stretto::KernelSource> kernels;
  if (mlir::failed(stretto::kernel::emitAllKernels(module.get(), kernels)))
    return 1;
  for (const stretto::KernelSource &k : kernels) {
    if (target != "cuda")
      outs() << "//=== " << k.name << " (C++) ===\n" << k.cpp;
    if (target != "cpp")
      outs() << "//=== " << k.name << " (CUDA) ===\n" << k.cuda;
  }
  return 0;
}
