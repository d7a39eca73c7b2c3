//===- MLIRFuzzer.cpp - libFuzzer harness: parse + verify `train` IR -----===//
//
// Feeds arbitrary text to mlir::parseSourceString<ModuleOp> with the `train`
// and `kernel` dialects loaded, then runs mlir::verify. Neither may crash,
// hang or trip ASan on any input. A module that verifies is also printed
// (custom printers must not crash on verified IR) and parsed back: the
// printed form of a verified module must parse and verify again, or we abort
// (a round-trip bug of a custom parser/printer). Then the kernel passes run
// on it and every kernel is emitted as C++ and CUDA C: they may reject IR
// with a diagnostic, never crash.
//
// Build: test/fuzz/build.sh BUILD_DIR OUT_DIR; seeds in test/fuzz/corpus/mlir.
//
//===----------------------------------------------------------------------===//
#include "stretto/Dialect/Train/TrainDialect.h"
#include "stretto/Dialect/Train/TrainOps.h"
#include "stretto/Kernel/Emitter.h"
#include "stretto/Kernel/Passes.h"

#include "mlir/Pass/PassManager.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

// Inputs above this size are skipped: they add nothing a smaller input
// cannot reach and keep memory per run bounded.
constexpr size_t kMaxInput = 64 * 1024;

mlir::MLIRContext &context() {
  // One context per process: creating one per input would dominate the run
  // time. Single-threaded, so verification stays on this thread and the
  // fuzzer uses one core.
  static mlir::MLIRContext *ctx = [] {
    auto *c = new mlir::MLIRContext(mlir::MLIRContext::Threading::DISABLED);
    c->getOrLoadDialect<stretto::train::TrainDialect>();
    c->getOrLoadDialect<stretto::kernel::KernelDialect>();
    // Diagnostics are expected on bad input; printing them would only slow
    // the fuzzer down.
    c->getDiagEngine().registerHandler([](mlir::Diagnostic &) { return mlir::success(); });
    return c;
  }();
  return *ctx;
}

std::string print(mlir::ModuleOp module, bool generic) {
  std::string out;
  llvm::raw_string_ostream os(out);
  mlir::OpPrintingFlags flags;
  if (generic)
    flags.printGenericOpForm();
  module->print(os, flags);
  return out;
}

[[noreturn]] void roundTripFailure(const char *what, const std::string &printed) {
  std::fprintf(stderr, "mlir-fuzzer: %s; printed form:\n%s\n", what, printed.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > kMaxInput)
    return 0;
  // The MLIR lexer reads up to a terminating NUL: give it a std::string, not
  // a raw (data, size) StringRef into the fuzzer's buffer.
  std::string text(reinterpret_cast<const char *>(data), size);

  mlir::MLIRContext &ctx = context();
  mlir::ParserConfig config(&ctx, /*verifyAfterParse=*/false);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, config, "fuzz.mlir");
  if (!module)
    return 0;
  if (mlir::failed(mlir::verify(*module)))
    return 0;

  // Verified IR: both printed forms must parse back and verify.
  for (bool generic : {false, true}) {
    std::string printed = print(*module, generic);
    mlir::ParserConfig again(&ctx, /*verifyAfterParse=*/true);
    mlir::OwningOpRef<mlir::ModuleOp> reparsed =
        mlir::parseSourceString<mlir::ModuleOp>(printed, again, "printed.mlir");
    if (!reparsed)
      roundTripFailure(generic ? "the generic form of a verified module does not parse or verify"
                               : "the custom form of a verified module does not parse or verify",
                       printed);
  }

  // The kernel passes and the emitter on verified IR.
  mlir::PassManager pm(&ctx);
  mlir::OpPassManager &model = pm.nest<stretto::train::ModelOp>();
  model.addPass(stretto::kernel::createKernelLowerMatmul());
  model.addPass(stretto::kernel::createKernelLowerRows());
  model.addPass(stretto::kernel::createKernelFuseElementwise());
  model.addPass(stretto::kernel::createKernelFuseReductions());
  if (mlir::failed(pm.run(*module)))
    return 0;
  std::vector<stretto::KernelSource> sources;
  (void)stretto::kernel::emitAllKernels(*module, sources);
  return 0;
}
