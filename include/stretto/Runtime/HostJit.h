//===- HostJit.h - C++ kernels compiled by the host compiler ----*- C++ -*-===//
//
// Compiles generated C++ kernel sources into shared objects and loads them,
// with a persistent on-disk cache keyed by a hash of the source, the
// compiler's version line and the flags. Each entry is `<key>.so` plus
// `<key>.sum` (size and FNV-1a hash of the .so); an entry whose .so does not
// match its .sum, or that fails to load, is rebuilt. Entries are written to
// temporary files and renamed, so a crashed compile leaves no half entry.
// No MLIR here: this is runtime code.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_HOSTJIT_H
#define STRETTO_HOSTJIT_H

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace stretto {

/// A compiled C++ kernel: outputs[k][i] for every element i.
using HostKernelFn = void (*)(const void *const *inputs, void *const *outputs);

/// Stable 64-bit FNV-1a hash (the cache key must not change between runs).
uint64_t fnv1a64(const void *data, size_t size, uint64_t seed = 0xcbf29ce484222325ULL);

class HostKernelCache {
public:
  /// `dir` is created if missing. `compiler` is run through the shell.
  explicit HostKernelCache(std::string dir, std::string compiler = "c++",
                           std::vector<std::string> flags = defaultFlags());
  ~HostKernelCache();
  HostKernelCache(const HostKernelCache &) = delete;
  HostKernelCache &operator=(const HostKernelCache &) = delete;

  static std::vector<std::string> defaultFlags();

  /// The kernel `symbol` of `source`, compiled or taken from the cache. On
  /// failure returns null and sets `error` (it names the kernel and holds
  /// the compiler's output, whose locations refer to the kept `<key>.cpp`).
  HostKernelFn load(const std::string &source, const std::string &symbol, std::string &error);
  /// All `symbols` of `source` with one cache lookup (one hash of the
  /// source, one checksum of the object): in order, or empty on failure. A
  /// compile error names the kernel at the compiler's first error line.
  std::vector<HostKernelFn> loadAll(const std::string &source,
                                    const std::vector<std::string> &symbols, std::string &error);

  /// The cache file stem (directory/key) that `source` maps to.
  std::string entryPath(const std::string &source) const;

  struct Stats {
    int hits = 0;     // valid entry found on disk
    int compiles = 0; // entries built (misses and rebuilds)
    int rebuilt = 0;  // of those, entries found corrupt or unloadable
  };
  const Stats &stats() const { return stats_; }

  /// Called just before the compiler runs (a cache miss), with the number
  /// of symbols asked for: a progress line for the user.
  void setOnCompile(std::function<void(size_t symbols)> fn) { onCompile_ = std::move(fn); }

private:
  std::function<void(size_t)> onCompile_;
  std::string dir_, compiler_, flagText_, compilerVersion_;
  std::string flagError_; // a flag the shell could misread: every load fails with it
  std::vector<void *> handles_;
  Stats stats_;
};

/// The part of a model's kernel unit (the concatenated C++ of its kernels,
/// each self-contained) that defines `names`: what one pipeline stage needs.
/// The unit itself when it cannot be split.
std::string hostKernelSubset(const std::string &unit, const std::set<std::string> &names);

} // namespace stretto

#endif
