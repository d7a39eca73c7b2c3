//===- CudaJit.h - CUDA C kernels compiled by NVRTC, cached -----*- C++ -*-===//
//
// Compiles a translation unit of generated CUDA C kernels with NVRTC into a
// cubin for one GPU architecture (sm_XX) and PTX (compute_XX, kept for
// inspection and for drivers newer than the cubin's arch), through a
// persistent on-disk cache keyed by a hash of the source, NVRTC's version,
// the options and the arch. Each entry is `<key>.cubin`, `<key>.ptx` and
// `<key>.sum` (size and hash of both); an entry that does not match its
// .sum is rebuilt. NVRTC is found at run time (dlopen), so nothing links
// CUDA and no GPU is needed. No MLIR here.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_CUDAJIT_H
#define STRETTO_CUDAJIT_H

#include <string>
#include <vector>

namespace stretto {

struct CudaBinary {
  std::string arch;  // e.g. "sm_90"
  std::string cubin; // device code for `arch`
  std::string ptx;   // compute_XX PTX of the same source
  std::string log;   // NVRTC's log of the cubin compile (ptxas -v: registers, spills)
};

class CudaKernelCache {
public:
  /// `dir` is created if missing.
  explicit CudaKernelCache(std::string dir);
  ~CudaKernelCache();
  CudaKernelCache(const CudaKernelCache &) = delete;
  CudaKernelCache &operator=(const CudaKernelCache &) = delete;

  /// Whether NVRTC could be loaded; if not, `why` says so.
  bool available(std::string &why) const;
  /// NVRTC's version, "major.minor" ("" when unavailable).
  std::string nvrtcVersion() const;

  /// `source` for `arch` ("sm_90", "sm_80"), compiled or from the cache.
  /// On failure returns false and sets `error`: a compile error names the
  /// kernel at NVRTC's first error line and that line of the source.
  bool compile(const std::string &source, const std::string &arch, CudaBinary &out,
               std::string &error);

  /// The cache file stem (directory/key) of `source` for `arch`.
  std::string entryPath(const std::string &source, const std::string &arch) const;

  struct Stats {
    int hits = 0, compiles = 0, rebuilt = 0;
  };
  const Stats &stats() const { return stats_; }

private:
  struct Nvrtc;
  Nvrtc *nvrtc_;
  std::string dir_;
  Stats stats_;
};

/// A unit of generated kernels (their shared prelude, then each kernel
/// from its "// NAME: (" header line, as joinCudaSources writes it) as up
/// to `parts` units of consecutive kernels, each with the prelude: the same
/// kernels, compiled in parallel. One part when there is no header line.
std::vector<std::string> splitCudaUnit(const std::string &unit, int parts);

/// `units` compiled or taken from the cache in `dir`, up to `threads` at a
/// time (NVRTC is single-threaded per program); `hits` counts the cached
/// ones. False with `error` (the first failure) when one fails.
bool compileCudaUnits(const std::string &dir,
                      const std::vector<std::string> &units,
                      const std::string &arch, int threads,
                      std::vector<CudaBinary> &out, int &hits,
                      std::string &error);

} // namespace stretto

#endif
