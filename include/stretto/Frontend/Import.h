//===- Import.h - model configs (TOML) to `train` IR ------------*- C++ -*-===//
#ifndef STRETTO_FRONTEND_IMPORT_H
#define STRETTO_FRONTEND_IMPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "stretto/Support/Limits.h"

#include <string>
#include <vector>

namespace stretto {

// Size limits (kMaxLayers, kMaxTensorElements, kMaxParameters): Limits.h.

/// Expands a GPT or MLP config into a module holding one `train.model`.
/// `overrides` are `key=value` strings (dotted keys into tables, e.g.
/// `model.layers=4`, `train.lr=3e-4`) applied before validation. On error
/// returns null and sets `error` to one line "FILE:LINE:COL: error: MESSAGE"
/// (LINE:COL of the offending key when there is one), or "override
/// 'KEY=VALUE': error: MESSAGE" when an override is the cause.
mlir::OwningOpRef<mlir::ModuleOp>
importConfigString(mlir::MLIRContext &ctx, const std::string &toml,
                   const std::string &fileName,
                   const std::vector<std::string> &overrides, std::string &error);

/// An override that a command-line flag stands for (stretto-train's
/// `--steps 20` is train.steps=20): messages name the flag, not the override.
std::string overrideFromFlag(const std::string &keyValue, const std::string &flag);
/// An override's key=value text and the flag it came from ("" when typed).
std::pair<std::string, std::string> splitOverride(const std::string &override);

/// Same, reading the file (a missing or empty file is an error naming it).
mlir::OwningOpRef<mlir::ModuleOp>
importConfigFile(mlir::MLIRContext &ctx, const std::string &path,
                 const std::vector<std::string> &overrides, std::string &error);

} // namespace stretto

#endif
