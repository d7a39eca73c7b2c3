//===- Load.cpp - load a model from a config or an .mlir file ------------===//
#include "stretto/Frontend/Load.h"
#include "stretto/Frontend/Import.h"
#include "stretto/Runtime/Graph.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
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

/// `data.KEY=VALUE` on an .mlir model: the corpus (path, format,
/// val_fraction), which an exported model may not name. Returns false
/// after printing the error.
static bool applyDataOverride(train::ModelOp model, const std::string &o, StringRef key,
                              StringRef value) {
  OpBuilder b(model.getContext());
  NamedAttrList data(model->getAttrOfType<DictionaryAttr>("data"));
  auto fail = [&](const std::string &why) {
    llvm::errs() << o << ": error: " << why << "\n";
    return false;
  };
  value = value.trim('"');
  if (key == "path") {
    if (value.empty())
      return fail("'data.path' must not be empty");
    // Relative to where the command runs (a path in the IR is relative to
    // the model file).
    llvm::SmallString<256> path(value);
    llvm::sys::fs::make_absolute(path);
    data.set("path", b.getStringAttr(path));
    if (!data.get("format"))
      data.set("format", b.getStringAttr("text"));
  } else if (key == "format") {
    if (value != "text" && value != "bin" && value != "synthetic")
      return fail("'data.format' is \"" + value.str() + "\"; expected one of text, bin, synthetic");
    data.set("format", b.getStringAttr(value));
  } else if (key == "val_fraction") {
    double f;
    if (value.getAsDouble(f) || !(f > 0 && f < 1))
      return fail("'data.val_fraction' must be a number in (0, 1)");
    data.set("val_fraction", b.getF64FloatAttr(f));
  } else {
    return fail("unknown key 'data." + key.str() + "'; an .mlir model takes data.path, "
                "data.format and data.val_fraction");
  }
  model->setAttr("data", data.getDictionary(model.getContext()));
  return true;
}

/// `train.KEY=VALUE` on an .mlir model: VALUE as integer, number or string.
/// An override the model's verifier refuses is named in the error.
/// `data.KEY=VALUE` sets the corpus (applyDataOverride).
static LogicalResult applyTrainerOverrides(train::ModelOp model,
                                           const std::vector<std::string> &overrides) {
  OpBuilder b(model.getContext());
  NamedAttrList attrs(model.getTrainerAttr() ? model.getTrainerAttr() : DictionaryAttr());
  for (const std::string &typed : overrides) {
    // An override a flag stands for is named by its flag.
    auto [kv, flag] = splitOverride(typed);
    const std::string o = flag.empty() ? "override '" + kv + "'" : flag;
    StringRef s(kv);
    if (s.consume_front("data.") && s.contains('=')) {
      auto [key, value] = s.split('=');
      if (!applyDataOverride(model, o, key, value))
        return failure();
      continue;
    }
    s = kv;
    if (!s.consume_front("train.") || !s.contains('=')) {
      llvm::errs() << o
                   << ": error: on an .mlir model an override must be train.KEY=VALUE or "
                      "data.KEY=VALUE (the model's keys are fixed in the IR)\n";
      return failure();
    }
    auto [key, value] = s.split('=');
    if (key == "steps")
      key = "total_steps";
    int64_t i;
    double f;
    Attribute attr;
    if (value.starts_with("[")) {
      // A list (stage_units, stage_ranges, local_steps): MLIR syntax, which
      // the TOML spelling of these lists also is.
      std::string why;
      {
        ScopedDiagnosticHandler capture(model.getContext(), [&](Diagnostic &d) {
          why = d.str();
          return success();
        });
        attr = parseAttribute(value, model.getContext());
      }
      if (!attr) {
        llvm::errs() << o << ": error: cannot parse the list '" << value
                     << "': " << why << "\n";
        return failure();
      }
    } else if (!value.getAsInteger(10, i))
      attr = b.getI64IntegerAttr(i);
    else if (!value.getAsDouble(f))
      attr = b.getF64FloatAttr(f);
    else
      attr = b.getStringAttr(value.trim('"'));
    attrs.set(key, attr);
    // Verified one override at a time, so that the error names it.
    model.setTrainerAttr(attrs.getDictionary(model.getContext()));
    std::string message;
    {
      ScopedDiagnosticHandler capture(model.getContext(), [&](Diagnostic &d) {
        if (d.getSeverity() == DiagnosticSeverity::Error && message.empty())
          message = d.str();
        return success();
      });
      if (succeeded(verify(model, /*verifyRecursively=*/false)))
        continue;
    }
    llvm::errs() << o << ": error: " << message << "\n";
    return failure();
  }
  return verify(model);
}

std::string stretto::modelFingerprint(train::ModelOp model) {
  // A copy without the settings: printed generically, without locations.
  Operation *copy = model->clone();
  copy->removeAttr("trainer");
  copy->removeAttr("data");
  std::string text;
  llvm::raw_string_ostream os(text);
  copy->print(os, OpPrintingFlags().printGenericOpForm());
  copy->destroy();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64(os.str()));
  return hex;
}

LogicalResult stretto::checkModelSizes(train::ModelOp model) {
  // Saturating products: a shape may claim more than int64 holds.
  auto elements = [](ShapedType t) -> int64_t {
    int64_t n = 1;
    for (int64_t d : t.getShape()) {
      if (d < 0)
        return -1; // dynamic: the verifier refuses it
      if (d != 0 && n > kMaxTensorElements / d)
        return kMaxTensorElements + 1;
      n *= d;
    }
    return n;
  };
  auto tooLarge = [&](Operation *op, Type type) -> bool {
    auto t = dyn_cast<ShapedType>(type);
    if (!t || !t.hasRank() || elements(t) <= kMaxTensorElements)
      return false;
    op->emitError() << "the tensor " << type << " holds more than 2^31 elements, the limit per "
                    << "tensor (as for TOML configs)";
    return true;
  };
  int64_t parameters = 0;
  WalkResult walk = model->walk([&](Operation *op) {
    for (Type t : op->getResultTypes())
      if (tooLarge(op, t))
        return WalkResult::interrupt();
    for (NamedAttribute a : op->getAttrs())
      if (auto ta = dyn_cast<TypeAttr>(a.getValue()); ta && tooLarge(op, ta.getValue()))
        return WalkResult::interrupt();
    if (auto p = dyn_cast<train::ParamOp>(op)) {
      parameters += elements(cast<ShapedType>(p.getTensorType()));
      if (parameters > kMaxParameters) {
        op->emitError() << "the model has more than 2^36 parameters (" << kMaxParameters
                        << ") by this one, the limit (as for TOML configs)";
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
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
  if (StringRef(path).ends_with(".mlir") && failed(checkModelSizes(loaded.model)))
    return std::nullopt;
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
