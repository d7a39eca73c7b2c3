//===- GemmTuning.h - cuBLASLt algorithms chosen by timing ------*- C++ -*-===//
//
// cuBLASLt's heuristic ranks the algorithms it has for a GEMM shape; its
// first is not always the fastest on the GPU at hand. CublasLt.cpp times
// the heuristic's top candidates once per shape on the real operands and
// keeps the fastest; the choice is written to a file in the kernel cache
// (one per GPU and cuBLASLt version), so later runs, a resumed run
// included, take the same algorithm without timing and compute the same
// bits. This file holds the parts that need no GPU: the choice from the
// timings and the file of choices.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_CUDA_GEMMTUNING_H
#define STRETTO_RUNTIME_CUDA_GEMMTUNING_H

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace stretto {

/// The index of the fastest candidate (least seconds; the earlier of equal
/// ones, so the heuristic's order breaks ties); a candidate that failed
/// (infinite or NaN seconds) never wins; -1 when every one failed.
int fastestCandidate(const std::vector<double> &seconds);

/// The choices made so far, one line each in `path`: the candidate's index
/// in the heuristic's list, a tab, then the shape's key. Lines that do not
/// parse are ignored; the first line of a key wins (processes that time the
/// same shape at once append the same key twice). Writes append a line and
/// never fail the run (a read-only cache only loses the memory of it).
class GemmChoiceFile {
public:
  explicit GemmChoiceFile(std::string path);
  std::optional<int> find(const std::string &key) const;
  void record(const std::string &key, int index);
  const std::string &path() const { return path_; }

private:
  std::string path_;
  mutable std::mutex mutex_;
  std::map<std::string, int> choices_;
};

/// The file of choices for one GPU and cuBLASLt version under `cacheDir`:
/// cacheDir/gemm-algos-<hash of the two>.txt.
std::string gemmChoicePath(const std::string &cacheDir, const std::string &gpu,
                           size_t cublasLtVersion);

/// Whether GEMM algorithms are chosen by timing: yes, unless
/// STRETTO_GEMM_TUNING=0 (then the heuristic's first, as before).
bool wantedGemmTuning();

} // namespace stretto

#endif
