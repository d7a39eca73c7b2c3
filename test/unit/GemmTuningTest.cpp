//===- GemmTuningTest.cpp - cuBLASLt algorithm choices --------------------===//
//
// The GPU-free half of choosing a GEMM's cuBLASLt algorithm by timing
// (runtime/cuda/GemmTuning.h): which candidate wins, and the file that
// keeps each shape's choice so later runs compute the same bits. The
// timing itself runs on a GPU only (CublasLt.cpp).
//
//===----------------------------------------------------------------------===//
#include "cuda/GemmTuning.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace stretto;

namespace {

std::string tempPath(const std::string &tag) {
  return (std::filesystem::temp_directory_path() /
          ("stretto-gemm-" + tag + "-" + std::to_string(::getpid()) + ".txt"))
      .string();
}

TEST(GemmTuning, TheFastestCandidateWinsAndFailuresNever) {
  EXPECT_EQ(fastestCandidate({3e-5, 2e-5, 4e-5}), 1);
  EXPECT_EQ(fastestCandidate({2e-5, 2e-5, 1e-4}), 0) << "a tie keeps the heuristic's order";
  EXPECT_EQ(fastestCandidate({HUGE_VAL, NAN, 5e-5}), 2) << "refused candidates never win";
  EXPECT_EQ(fastestCandidate({HUGE_VAL, NAN}), -1);
  EXPECT_EQ(fastestCandidate({}), -1);
}

TEST(GemmTuning, ChoicesOutliveTheProcessAndTheFirstLineOfAKeyWins) {
  const std::string path = tempPath("choices");
  std::filesystem::remove(path);
  const std::string key = "1x[8192x768]x[768x2304] bf16 strides 0/0/0 align 64 a1.000000";
  {
    GemmChoiceFile f(path);
    EXPECT_FALSE(f.find(key));
    f.record(key, 3);
    f.record(key, 5); // (a second choice for a key is not written)
    f.record("other shape", 0);
    EXPECT_EQ(f.find(key), 3);
  }
  { // another process, and one that appended the same key too
    std::ofstream(path, std::ios::app) << "6\t" << key << "\n"
                                       << "garbage line\n\t7\nx1\tbad index\n";
    GemmChoiceFile f(path);
    EXPECT_EQ(f.find(key), 3);
    EXPECT_EQ(f.find("other shape"), 0);
    EXPECT_FALSE(f.find("bad index")) << "a line without an index is ignored";
  }
  std::filesystem::remove(path);
}

TEST(GemmTuning, AnUnwritableCacheOnlyForgets) {
  GemmChoiceFile f("/nonexistent-dir/stretto/gemm-algos.txt");
  f.record("k", 2); // no throw
  EXPECT_EQ(f.find("k"), 2) << "kept for this run";
  GemmChoiceFile none("");
  none.record("k", 1);
  EXPECT_EQ(none.find("k"), 1);
}

TEST(GemmTuning, OneFilePerGpuAndLibraryVersion) {
  const std::string a = gemmChoicePath("/c", "NVIDIA H200 sm_90", 130100),
                    b = gemmChoicePath("/c", "NVIDIA H100 80GB HBM3 sm_90", 130100),
                    c = gemmChoicePath("/c", "NVIDIA H200 sm_90", 130200);
  EXPECT_EQ(a.rfind("/c/gemm-algos-", 0), 0u) << a;
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a, gemmChoicePath("/c", "NVIDIA H200 sm_90", 130100));
  EXPECT_EQ(gemmChoicePath("", "x", 1), "");
}

TEST(GemmTuning, TheSwitchIsZeroOrOne) {
  ::setenv("STRETTO_GEMM_TUNING", "0", 1);
  EXPECT_FALSE(wantedGemmTuning());
  ::setenv("STRETTO_GEMM_TUNING", "1", 1);
  EXPECT_TRUE(wantedGemmTuning());
  ::setenv("STRETTO_GEMM_TUNING", "yes", 1);
  EXPECT_THROW(wantedGemmTuning(), std::runtime_error);
  ::unsetenv("STRETTO_GEMM_TUNING");
  EXPECT_TRUE(wantedGemmTuning());
}

} // namespace
