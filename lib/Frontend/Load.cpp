//===- Load.cpp - load a model from a config or an .mlir file ------------===//
#include "stretto/Frontend/Load.h"
#include "stretto/Frontend/Import.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace stretto;

std::unique_ptr<ScopedDiagnosticHandler> stretto::printDiagnostics(MLIRContext &ctx) {
  return std::make_unique<ScopedDiagnosticHandler>(&ctx, [](Diagnostic &d) {
    std::string where;
    if (auto fl = dyn_cast<FileLineColLoc>(d.getLocation()))
      where = (fl.getFilename().getValue() + ":" + llvm::Twine(fl.getLine()) + ":" +
               llvm::Twine(fl.getColumn()) + ": ")
                  .str();
    const char *severity = d.getSeverity() == DiagnosticSeverity::Error     ? "error"
                           : d.getSeverity() == DiagnosticSeverity::Warning ? "warning"
                                                                            : "note";
    llvm::errs() << where << severity << ": " << d.str() << "\n";
    return success();
  });
}

/// `train.KEY=VALUE` on an .mlir model: VALUE as integer, number or string.
static LogicalResult applyTrainerOverrides(train::ModelOp model,
                                           const std::vector<std::string> &overrides) {
  OpBuilder b(model.getContext());
  NamedAttrList attrs(model.getTrainerAttr() ? model.getTrainerAttr() : DictionaryAttr());
  for (const std::string &o : overrides) {
    StringRef s(o);
    if (!s.consume_front("train.") || !s.contains('=')) {
      llvm::errs() << "error: override '" << o
                   << "' on an .mlir model must be train.KEY=VALUE (model and data keys are "
                      "fixed in the IR)\n";
      return failure();
    }
    auto [key, value] = s.split('=');
    if (key == "steps")
      key = "total_steps";
    int64_t i;
    double f;
    Attribute attr;
    if (!value.getAsInteger(10, i))
      attr = b.getI64IntegerAttr(i);
    else if (!value.getAsDouble(f))
      attr = b.getF64FloatAttr(f);
    else
      attr = b.getStringAttr(value.trim('"'));
    attrs.set(key, attr);
  }
  model.setTrainerAttr(attrs.getDictionary(model.getContext()));
  return verify(model);
}

std::optional<LoadedModel> stretto::loadModel(MLIRContext &ctx, const std::string &path,
                                              const std::vector<std::string> &overrides) {
  ctx.getOrLoadDialect<train::TrainDialect>();
  LoadedModel loaded;
  if (StringRef(path).ends_with(".mlir")) {
    std::string err;
    auto file = openInputFile(path, &err);
    if (!file) {
      llvm::errs() << path << ": error: " << err << "\n";
      return std::nullopt;
    }
    llvm::SourceMgr sm;
    sm.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
    SourceMgrDiagnosticHandler handler(sm, &ctx);
    loaded.module = parseSourceFile<ModuleOp>(sm, &ctx);
    if (!loaded.module)
      return std::nullopt; // the handler printed "file:line:col: error: ..."
  } else {
    std::string error;
    loaded.module = importConfigFile(ctx, path, overrides, error);
    if (!loaded.module) {
      llvm::errs() << error << "\n";
      return std::nullopt;
    }
  }
  auto models = llvm::to_vector(loaded.module->getOps<train::ModelOp>());
  if (models.size() != 1) {
    llvm::errs() << path << ": error: expected exactly one train.model, found " << models.size()
                 << "\n";
    return std::nullopt;
  }
  loaded.model = models.front();
  if (StringRef(path).ends_with(".mlir") && !overrides.empty() &&
      failed(applyTrainerOverrides(loaded.model, overrides)))
    return std::nullopt;
  return loaded;
}

DataConfig stretto::dataConfigOf(train::ModelOp model, const std::string &modelPath,
                                 int64_t &vocabOrClasses) {
  DataConfig data;
  if (auto v = model->getAttrOfType<IntegerAttr>("vocab"))
    vocabOrClasses = v.getInt();
  else if (auto c = model->getAttrOfType<IntegerAttr>("classes"))
    vocabOrClasses = c.getInt();
  if (auto d = model->getAttrOfType<DictionaryAttr>("data")) {
    if (auto f = d.getAs<StringAttr>("format"))
      data.format = f.getValue().str();
    if (auto p = d.getAs<StringAttr>("path")) {
      // Relative paths are relative to the model file.
      llvm::SmallString<256> path(p.getValue());
      if (llvm::sys::path::is_relative(path)) {
        llvm::SmallString<256> base(llvm::sys::path::parent_path(modelPath));
        llvm::sys::path::append(base, path);
        path = base;
      }
      data.path = std::string(path);
    }
    if (auto v = d.getAs<FloatAttr>("val_fraction"))
      data.valFraction = v.getValueAsDouble();
  }
  return data;
}
