//===- Flags.h - every command-line flag of the tools, once ---*- C++ -*-===//
//
// One table holds each flag of stretto-train, stretto-run and the launcher:
// its spelling, its value, where `stretto-train --nproc` sends it (the
// compile, every rank, both, or the launcher itself), the plan setting it
// overrides, its help text, and how its value is read. From it come
//   - takeRunFlags and takeLaunchFlags (the parsers of run and launch flags),
//   - the --help text of the run and launch flags (runFlagsHelp),
//   - stretto-train's split of a --nproc command line between the compile
//     and the ranks (findFlag(...)->goesTo),
//   - stretto-train's llvm::cl options for the compile-only flags (--dump,
//     --save-plan, --cuda-arch: compileFlags()),
//   - which plan-file setting a flag overrides (FlagSpec::setting; a test
//     checks each names a key RunSettings::toMeta writes).
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_FLAGS_H
#define STRETTO_RUNTIME_FLAGS_H

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace stretto {

struct RunFlags;
struct LaunchOptions;

/// A flag as given: its name and value ("" for a switch).
struct FlagArg {
  std::string name, value;
  /// The value as an integer >= minimum; throws naming the flag.
  int64_t atLeast(int64_t minimum) const;
  /// The value as an integer in [lo, hi]; throws naming the flag.
  int64_t inRange(int64_t lo, int64_t hi) const;
  /// The value when it is one of `allowed`; throws naming the flag.
  std::string oneOf(std::initializer_list<const char *> allowed) const;
};

struct FlagSpec {
  /// Where stretto-train --nproc sends the flag: to the compile (it becomes
  /// a plan setting: --steps, --seed, --executor), to every rank (--out,
  /// --resume, --timeout), to both (--precision, --quiet), or nowhere (the
  /// launcher's own: --nproc, --master-addr).
  enum Destination { Compile, Ranks, Both, Launcher };
  const char *name;  // "--steps"
  const char *value; // its value in help ("N", "cpu|cuda|auto"); null: a switch
  Destination goesTo;
  const char *setting; // the plan setting it overrides ("train.steps"), or null
  const char *help;    // one paragraph; the help text wraps it
  /// Reads the flag into the run's flags; null when a rank does not read it.
  void (*toRun)(RunFlags &, const FlagArg &);
  /// Reads the flag into the launcher's options; null when the launcher
  /// does not read it (--timeout and --on-peer-failure: both read them).
  void (*toLaunch)(LaunchOptions &, const FlagArg &);
  /// stretto-train's compile-only flags (llvm::cl options): the default.
  const char *compileDefault = nullptr;

  bool takesValue() const { return value != nullptr; }
};

/// Every flag, in help order.
const std::vector<FlagSpec> &flagTable();
/// The flag called `name` ("--out", without "=value"); null when none is.
const FlagSpec *findFlag(const std::string &name);
/// stretto-train's compile-only flags (compileDefault set).
std::vector<const FlagSpec *> compileFlags();
/// The help text of the run and launch flags (stretto-train, stretto-run).
std::string runFlagsHelp();

} // namespace stretto

#endif // STRETTO_RUNTIME_FLAGS_H
