//===- GpuEmulator.h - the CUDA plan device on an emulated GPU --*- C++ -*-===//
//
// A GpuBackend (runtime/GpuBackend.h) that runs on the host, so the CUDA
// plan device's code (CudaPlan.cpp: buffers, argument marshalling, launch
// choices, scratch, the cuBLASLt problem mapping) is tested where no GPU
// is. Runtime ops are runtime/cuda/RuntimeOps.cu compiled as C++, launched
// block by block and thread by thread (their grid-stride loops then do all
// the work); the two that reduce across a block with warp shuffles
// (st_row_sums, st_norm_plus_eps) are replaced by host loops. Generated
// kernels run as their C++ twins (the same bodies). GEMMs are computed from
// columnMajorProblem() exactly as cuBLASLt is asked (column-major, the
// operands swapped), with bf16 operands widened from their bits. Not
// covered here: the driver, NVRTC's build of the ops, cuBLASLt itself and
// the GPU launch geometry (CompiledPathTest on a GPU covers those).
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_TEST_GPUEMULATOR_H
#define STRETTO_TEST_GPUEMULATOR_H

#include "stretto/PlanExecutor.h"

#include <map>
#include <memory>
#include <string>

namespace stretto {

std::unique_ptr<PlanExecutor>
emulatedGpuExecutor(const Graph &graph, std::map<std::string, PlanExecutor::KernelFn> kernels,
                    GemmPrecision gemm = GemmPrecision::F32);

/// Device allocations of every emulated GPU not yet freed.
long long emulatedGpuLiveAllocations();

} // namespace stretto

#endif
