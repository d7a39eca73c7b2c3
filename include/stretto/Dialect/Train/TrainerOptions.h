//===- TrainerOptions.h - ranges of the trainer dictionary ------*- C++ -*-===//
//
// The values a `train.model`'s trainer keys may take, shared by the
// dialect's verifier (an .mlir model) and the TOML importer (a config, with
// the key's line and column).
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_DIALECT_TRAIN_TRAINEROPTIONS_H
#define STRETTO_DIALECT_TRAIN_TRAINEROPTIONS_H

#include "stretto/Support/Limits.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace stretto::train {

/// Why the number `value` is out of range for the trainer key `key` (e.g.
/// "must be > 0, got -1"), or nothing when it is fine or `key` has no range.
std::optional<std::string> checkTrainerNumber(llvm::StringRef key, double value);

/// The largest value of an integer trainer key (stages, replicas), or
/// nothing when it has no upper bound.
std::optional<int64_t> maxTrainerInteger(llvm::StringRef key);

} // namespace stretto::train

#endif
