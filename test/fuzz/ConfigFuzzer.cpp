//===- ConfigFuzzer.cpp - libFuzzer harness: TOML config importer --------===//
//
// Input layout: the config text, optionally followed by NUL-separated
// `section.key=value` overrides ("<toml>\0model.layers=2\0train.lr=1").
// stretto::importConfigString must never crash, hang or trip ASan. Its
// contract is also checked:
//  - on failure it returns null and sets ONE line
//    "fuzz.toml:LINE:COL: error: MESSAGE";
//  - "internal error" (the importer built IR that does not verify) never
//    happens;
//  - on success the module verifies, and its printed form (what
//    `stretto-import | stretto-opt` reads) parses and verifies again.
// A broken contract aborts, so libFuzzer records the input.
//
// Build: test/fuzz/build.sh BUILD_DIR OUT_DIR; seeds in test/fuzz/corpus/config.
//
//===----------------------------------------------------------------------===//
#include "stretto/Dialect/Train/TrainDialect.h"
#include "stretto/Frontend/Import.h"

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
#include <vector>

namespace {

constexpr size_t kMaxInput = 64 * 1024;
const char *const kFile = "fuzz.toml";

mlir::MLIRContext &context() {
  static mlir::MLIRContext *ctx = [] {
    auto *c = new mlir::MLIRContext(mlir::MLIRContext::Threading::DISABLED);
    c->getOrLoadDialect<stretto::train::TrainDialect>();
    c->getDiagEngine().registerHandler([](mlir::Diagnostic &) { return mlir::success(); });
    return c;
  }();
  return *ctx;
}

[[noreturn]] void contractViolation(const char *what, const std::string &detail) {
  std::fprintf(stderr, "config-fuzzer: %s: [%s]\n", what, detail.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > kMaxInput)
    return 0;
  // Own copy of the bytes: toml++ and MLIR may read strings as NUL-terminated.
  std::string input(reinterpret_cast<const char *>(data), size);
  std::vector<std::string> overrides;
  size_t nul = input.find('\0');
  std::string toml = input.substr(0, nul);
  while (nul != std::string::npos) {
    size_t next = input.find('\0', nul + 1);
    overrides.push_back(input.substr(nul + 1, next == std::string::npos ? next : next - nul - 1));
    nul = next;
  }

  std::string error;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      stretto::importConfigString(context(), toml, kFile, overrides, error);
  if (!module) {
    if (error.empty())
      contractViolation("null module without an error message", error);
    if (error.find('\n') != std::string::npos || error.find('\r') != std::string::npos)
      contractViolation("error message is not one line", error);
    // A config error names its place; an override's error names the override.
    bool atFile = error.rfind(std::string(kFile) + ":", 0) == 0;
    bool atOverride = error.rfind("override '", 0) == 0;
    // An override made from a flag (overrideFromFlag) is named as the flag.
    bool atFlag = error.rfind("--", 0) == 0;
    if ((!atFile && !atOverride && !atFlag) || error.find(": error: ") == std::string::npos)
      contractViolation("error message is not 'FILE:LINE:COL: error: MESSAGE' or "
                        "\"override 'KEY=VALUE': error: MESSAGE\"",
                        error);
    if (error.rfind(std::string(kFile) + ":1:1: error: internal error", 0) == 0)
      contractViolation("the importer built IR that does not verify", error);
    return 0;
  }
  if (mlir::failed(mlir::verify(*module)))
    contractViolation("imported module does not verify", toml);
  std::string printed;
  llvm::raw_string_ostream os(printed);
  module->print(os);
  mlir::ParserConfig config(&context(), /*verifyAfterParse=*/true);
  if (!mlir::parseSourceString<mlir::ModuleOp>(printed, config, "printed.mlir"))
    contractViolation("the printed module does not parse back", printed);
  return 0;
}
