//===- stretto-sample.cpp - generate text from a checkpoint ---------------===//
//
//   stretto-sample examples/gpt-tiny.toml --checkpoint runs/gpt-tiny/checkpoint.bin \
//       --prompt "And God said" --tokens 200
//
//===----------------------------------------------------------------------===//
#include "stretto/Compiler/Lowering.h"
#include "stretto/Frontend/Load.h"
#include "stretto/Runtime/Trainer.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;
using namespace stretto;

static cl::OptionCategory cat("stretto-sample options");
static cl::opt<std::string> modelPath(cl::Positional, cl::desc("<model.toml | model.mlir>"),
                                      cl::Required, cl::cat(cat));
static cl::opt<std::string> checkpoint("checkpoint", cl::desc("checkpoint.bin written by stretto-train"),
                                       cl::Required, cl::cat(cat));
static cl::opt<std::string> prompt("prompt", cl::desc("Text to continue"), cl::init(""), cl::cat(cat));
static cl::opt<int64_t> tokens("tokens", cl::desc("Bytes to generate"), cl::init(200), cl::cat(cat));
static cl::opt<double> temperature("temperature", cl::desc("Softmax temperature; 0 = greedy"),
                                   cl::init(0.8), cl::cat(cat));
static cl::opt<uint64_t> seed("seed", cl::desc("Sampling seed"), cl::init(1), cl::cat(cat));

static const char *const kOverview =
    "stretto-sample: continue a prompt with a trained byte-level GPT\n\n"
    "  stretto-sample examples/gpt-tiny.toml --checkpoint runs/gpt-tiny/checkpoint.bin "
    "--prompt \"And God said\"\n\n"
    "Training the model first: docs/guide/training.md\n";

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(argc, argv, kOverview);
  if (tokens < 0)
    return llvm::errs() << "stretto-sample: --tokens must be >= 0\n", 1;
  mlir::MLIRContext ctx;
  auto diagnostics = printDiagnostics(ctx);
  // The forward graph only: the model as described, no autodiff or optimizer.
  std::optional<LoadedModel> loaded = loadModel(ctx, modelPath, {});
  if (!loaded)
    return 1;
  mlir::FailureOr<Graph> graph = lowerToGraph(loaded->model);
  if (mlir::failed(graph))
    return 1;
  try {
    Checkpoint c = loadCheckpoint(checkpoint);
    std::string text = sampleText(*graph, c.states, prompt, tokens, temperature, seed);
    llvm::outs() << prompt << text << "\n";
  } catch (const std::exception &e) {
    llvm::errs() << "stretto-sample: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
