//===- CublasLt.h - cuBLASLt GEMMs through dlopen (internal) ----*- C++ -*-===//
//
// Row-major, strided-batched GEMMs C[b] = alpha op(A[b]) op(B[b]) on a
// CUDA stream, in f32 (CUBLAS_COMPUTE_32F: no TF32) or with bf16 operands
// (CUDA_R_16BF A and B, f32 accumulation, f32 C). libcublasLt.so is loaded
// at run time like the driver; the few enum values and signatures used are
// declared in CublasLt.cpp and checked against <cublasLt.h> by
// CublasLtAbiTest wherever the toolkit's headers are installed. No MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_CUBLASLT_H
#define STRETTO_RUNTIME_CUBLASLT_H

#include <cstdint>
#include "cuda/GemmTuning.h"

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>

namespace stretto {

class CudaDevice;

namespace cublaslt {
// Values from cublasLt.h / cublas_api.h / library_types.h (CUDA 12 and 13);
// CublasLtAbiTest compares them with the headers.
constexpr int kComputeF32 = 68;        // CUBLAS_COMPUTE_32F
constexpr int kComputeF32FastTF32 = 77; // CUBLAS_COMPUTE_32F_FAST_TF32
constexpr int kR32F = 0;               // CUDA_R_32F
constexpr int kR16BF = 14;             // CUDA_R_16BF
constexpr int kOpN = 0, kOpT = 1;      // CUBLAS_OP_N, CUBLAS_OP_T
constexpr int kDescTransA = 3;         // CUBLASLT_MATMUL_DESC_TRANSA
constexpr int kDescTransB = 4;         // CUBLASLT_MATMUL_DESC_TRANSB
constexpr int kLayoutBatchCount = 5;   // CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT
constexpr int kLayoutBatchStride = 6;  // CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET
constexpr int kDescEpilogue = 7;       // CUBLASLT_MATMUL_DESC_EPILOGUE
constexpr int kDescBiasPointer = 8;    // CUBLASLT_MATMUL_DESC_BIAS_POINTER
constexpr int kDescBiasDataType = 26;  // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE
constexpr int kDescAuxPointer = 11;    // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER
constexpr int kDescAuxLd = 12;         // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD (int64)
constexpr int kDescAuxBatchStride = 13; // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE (int64)
constexpr int kDescAuxDataType = 22;    // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE (int32)
constexpr uint32_t kEpilogueBias = 4;  // CUBLASLT_EPILOGUE_BIAS
constexpr uint32_t kEpilogueDGelu = 192;  // CUBLASLT_EPILOGUE_DGELU (64 | 128)
constexpr uint32_t kEpilogueBGradA = 256; // CUBLASLT_EPILOGUE_BGRADA
constexpr uint32_t kEpilogueGeluAux = 160;     // CUBLASLT_EPILOGUE_GELU_AUX (32 | 128)
constexpr uint32_t kEpilogueGeluAuxBias = 164; // CUBLASLT_EPILOGUE_GELU_AUX_BIAS (160 | 4)
constexpr int kPrefMaxWorkspace = 1;   // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
constexpr int kPrefMinAlignA = 5;      // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES (B, C, D: +1..3)
struct Algo {
  uint64_t data[8];
};
struct HeuristicResult { // cublasLtMatmulHeuristicResult_t
  Algo algo;
  size_t workspaceSize;
  int state;
  float wavesCount;
  int reserved[4];
};
} // namespace cublaslt

struct GemmCall {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  int64_t strideA = 0, strideB = 0, strideC = 0; // elements between batch items (0: shared)
  bool bf16 = false; // A and B hold bf16 (uint16) values
  bool bf16Out = false; // C is written in bf16 (rounded to nearest even), not f32
  bool tf32 = false; // f32 A and B multiplied on TF32 tensor cores
  float alpha = 1.0f;
  uint32_t align = 64; // bytes every base pointer is aligned to (the arena's 64)
  // n f32 values added to every row of the product before it is rounded or
  // stored (cuBLASLt's BIAS epilogue); null: none.
  const float *bias = nullptr;
  // GELU's input x, in C's type and layout: each value of the product is
  // multiplied by gelu'(x) before it is rounded or stored (cuBLASLt's DGELU
  // epilogue, x its auxiliary input); null: none. Not with a bias.
  const void *aux = nullptr;
  // The column sums of B over the contraction (row-major B [k, n], not
  // transposed: cuBLASLt's A, whose BGRADA epilogue sums it) written here,
  // n f32 values (C's type; C f32); null: none. Not with another epilogue.
  float *biasGrad = nullptr;
  // GELU with its auxiliary output: the product (plus the bias, if any)
  // written here in C's type and layout, and gelu of it to C (cuBLASLt's
  // GELU_AUX or GELU_AUX_BIAS epilogue); null: none. Not with aux or
  // biasGrad.
  void *geluAux = nullptr;
};

/// cuBLASLt offers no algorithm for a GEMM with an epilogue (thrown before
/// anything is queued): the caller can run it without one.
struct GemmRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// cuBLASLt's column-major form of a row-major GemmCall: row-major
// C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so cuBLASLt's
// first operand is our B and its second our A. Each matrix is described as
// stored (before its op): rows x cols with leading dimension ld, `stride`
// elements between batch items.
struct LtMatrix {
  int64_t rows = 0, cols = 0, ld = 0, stride = 0;
  // The alignment (bytes) every batch item's pointer has, given base
  // pointers aligned to `base`.
  uint32_t alignment(int64_t batch, int elementBytes, uint32_t base) const;
};
struct LtProblem {
  int opA = 0, opB = 0; // cublaslt::kOpN / kOpT, of cuBLASLt's A (our B) and B (our A)
  LtMatrix a, b, c;     // cuBLASLt's A (our B), B (our A), C = D
  int64_t batch = 1;
};
LtProblem columnMajorProblem(const GemmCall &g);
/// The cuBLASLt compute type of `g`: f32 accumulation, with TF32 inputs
/// when g.tf32 (f32 operands only; bf16 operands are exact in it anyway).
int computeTypeOf(const GemmCall &g);

class CublasLt {
public:
  /// Null (and `why`) without libcublasLt or when it cannot start.
  static std::unique_ptr<CublasLt> open(CudaDevice &device, std::string &why);
  ~CublasLt();
  /// Queues the GEMM on the device's stream. Throws std::runtime_error
  /// naming the shape when cuBLASLt has no algorithm or fails. The first
  /// GEMM of a shape chooses its algorithm (see tuneWith).
  void gemm(const GemmCall &g, const void *a, const void *b, void *c);
  /// From now on a new shape's algorithm is the one `choices` names for it
  /// or, where it names none and the stream is not being captured, the
  /// fastest of the heuristic's first kCandidates on the GEMM's own
  /// operands (GemmTuning.h), then recorded there. Without it (the CUDA
  /// runtime leaves it out with STRETTO_GEMM_TUNING=0), the heuristic's
  /// first.
  void tuneWith(std::unique_ptr<GemmChoiceFile> choices) { choices_ = std::move(choices); }
  static constexpr int kCandidates = 8;
  /// The cuBLASLt version (cublasLtGetVersion), for the choices' file name.
  size_t version() const;

  struct Api;
  struct Plan;

private:
  CublasLt() = default;
  CudaDevice *device_ = nullptr;
  std::unique_ptr<Api> api_;
  void *handle_ = nullptr;
  unsigned long long workspace_ = 0;
  size_t workspaceBytes_ = 0;
  std::map<std::string, std::unique_ptr<Plan>> plans_; // by shape
  std::unique_ptr<GemmChoiceFile> choices_;
  Plan &planFor(const GemmCall &g, const void *a, const void *b, void *c);
  /// Seconds per call of algorithm `algo` on these operands (infinite if
  /// cuBLASLt refuses it), from a few calls after one to warm up.
  double timeAlgorithm(Plan &p, const cublaslt::Algo &algo, const GemmCall &g, const void *a,
                       const void *b, void *c);
};

} // namespace stretto

#endif
