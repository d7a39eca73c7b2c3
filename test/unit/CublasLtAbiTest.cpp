//===- CublasLtAbiTest.cpp - our cuBLASLt declarations match the headers --===//
//
// runtime/cuda/CublasLt.cpp loads libcublasLt with dlopen and declares the enum
// values and structs it uses itself (no CUDA headers in the build); here
// they are compared with the toolkit's <cublasLt.h>. Built only where the
// toolkit is installed.
//
//===----------------------------------------------------------------------===//
#include "cuda/CublasLt.h"

#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cstddef>

using namespace stretto::cublaslt;

TEST(CublasLtAbi, EnumValuesMatchTheHeaders) {
  EXPECT_EQ(kComputeF32, static_cast<int>(CUBLAS_COMPUTE_32F));
  EXPECT_EQ(kComputeF32FastTF32, static_cast<int>(CUBLAS_COMPUTE_32F_FAST_TF32));
  EXPECT_EQ(kR32F, static_cast<int>(CUDA_R_32F));
  EXPECT_EQ(kR16BF, static_cast<int>(CUDA_R_16BF));
  EXPECT_EQ(kOpN, static_cast<int>(CUBLAS_OP_N));
  EXPECT_EQ(kOpT, static_cast<int>(CUBLAS_OP_T));
  EXPECT_EQ(kDescTransA, static_cast<int>(CUBLASLT_MATMUL_DESC_TRANSA));
  EXPECT_EQ(kDescTransB, static_cast<int>(CUBLASLT_MATMUL_DESC_TRANSB));
  EXPECT_EQ(kDescEpilogue, static_cast<int>(CUBLASLT_MATMUL_DESC_EPILOGUE));
  EXPECT_EQ(kDescBiasPointer, static_cast<int>(CUBLASLT_MATMUL_DESC_BIAS_POINTER));
  EXPECT_EQ(kDescBiasDataType, static_cast<int>(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE));
  EXPECT_EQ(kEpilogueBias, static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS));
  EXPECT_EQ(kLayoutBatchCount, static_cast<int>(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT));
  EXPECT_EQ(kLayoutBatchStride, static_cast<int>(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET));
  EXPECT_EQ(kPrefMaxWorkspace, static_cast<int>(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES));
  EXPECT_EQ(kPrefMinAlignA, static_cast<int>(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES));
  EXPECT_EQ(kPrefMinAlignA + 1, static_cast<int>(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES));
  EXPECT_EQ(kPrefMinAlignA + 2, static_cast<int>(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES));
  EXPECT_EQ(kPrefMinAlignA + 3, static_cast<int>(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES));
}

TEST(CublasLtAbi, HeuristicResultLayoutMatchesTheHeaders) {
  EXPECT_EQ(sizeof(Algo), sizeof(cublasLtMatmulAlgo_t));
  EXPECT_EQ(sizeof(HeuristicResult), sizeof(cublasLtMatmulHeuristicResult_t));
  EXPECT_EQ(offsetof(HeuristicResult, workspaceSize),
            offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
  EXPECT_EQ(offsetof(HeuristicResult, state), offsetof(cublasLtMatmulHeuristicResult_t, state));
  EXPECT_EQ(offsetof(HeuristicResult, wavesCount),
            offsetof(cublasLtMatmulHeuristicResult_t, wavesCount));
}

// The compute type of a GEMM: f32, or f32 with TF32 inputs for an f32 GEMM
// under --precision=tf32 (bf16 operands keep plain f32 accumulation).
TEST(CublasLt, ComputeTypeFollowsThePrecision) {
  stretto::GemmCall g;
  EXPECT_EQ(stretto::computeTypeOf(g), static_cast<int>(CUBLAS_COMPUTE_32F));
  g.tf32 = true;
  EXPECT_EQ(stretto::computeTypeOf(g), static_cast<int>(CUBLAS_COMPUTE_32F_FAST_TF32));
  g.bf16 = true;
  EXPECT_EQ(stretto::computeTypeOf(g), static_cast<int>(CUBLAS_COMPUTE_32F));
}
