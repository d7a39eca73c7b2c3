//===- GpuEmulator.h - the CUDA plan device on an emulated GPU --*- C++ -*-===//
//
// A GpuBackend (runtime/cuda/GpuBackend.h) that runs on the host, so the CUDA
// plan device's code (CudaPlan.cpp: buffers, argument marshalling, launch
// choices, scratch, the cuBLASLt problem mapping) is tested where no GPU
// is. Runtime ops are runtime/cuda/RuntimeOps.cu compiled as C++; the
// generated kernels' CUDA C is compiled as C++ by the host compiler (or
// their C++ twins run). Launches run block by block: a kernel that
// synchronises its block (__syncthreads, warp shuffles: the row sums) runs
// each block on blockDim real threads with barriers, any other runs its
// threads one after another (grid-stride loops do all the work). The
// runtime's two block reductions are host loops unless asked for (slow on
// real threads; their own test runs them). GEMMs are computed from
// columnMajorProblem() exactly as cuBLASLt is asked (column-major, the
// operands swapped), with bf16 operands widened from their bits. CUDA
// graphs: between beginRecording and endRecording stream work is recorded
// (kernel arguments copied, memory read at launch) and launchGraph runs it;
// what a capture may not do (waits, downloads, allocations, frees, uploads
// from memory not from hostAlloc) throws. Not
// covered here: the driver, NVRTC's build of the ops, cuBLASLt itself and
// real GPU scheduling (CompiledPathTest on a GPU covers those).
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_TEST_GPUEMULATOR_H
#define STRETTO_TEST_GPUEMULATOR_H

#include "stretto/Runtime/PlanExecutor.h"
#include "cuda/GpuBackend.h"

#include <map>
#include <memory>
#include <string>

namespace stretto {

/// `cudaSource`: the generated kernels' CUDA C (CompiledKernels::cudaSource),
/// run as C++ with CUDA's built-ins emulated, with its multi-tensor kernels
/// (MultiTensor.h); empty: their C++ twins run. `cooperativeTwins`: the
/// kernels that synchronise their block (row sums: slow on emulated block
/// threads) run their C++ twins even so.
std::unique_ptr<PlanExecutor>
emulatedGpuExecutor(const Graph &graph, std::map<std::string, PlanExecutor::KernelFn> kernels,
                    GemmPrecision gemm = GemmPrecision::F32, const std::string &cudaSource = "",
                    bool cooperativeTwins = false);

/// The emulated GPU itself (kernel-level tests). `blockReductions`: the
/// runtime's block reductions (st_row_sums, st_sumsq_parts, st_mean, ...)
/// run as written (blocks on real threads); else as host loops in the
/// reference's order.
std::unique_ptr<GpuBackend> emulatedGpu(std::map<std::string, PlanExecutor::KernelFn> kernels,
                                        const std::string &cudaSource,
                                        bool blockReductions = false);

/// Device allocations of every emulated GPU not yet freed.
long long emulatedGpuLiveAllocations();
/// GEMMs the emulated cuBLASLt ran with TF32 inputs (GemmCall::tf32), so far.
long long emulatedGpuTf32Gemms();
/// Graphs launched (GpuBackend::launchGraph), so far.
long long emulatedGpuGraphLaunches();
/// Stream work (launches, GEMMs, copies, memsets, uploads) queued outside
/// graphs, so far: a step replayed from a graph adds none.
long long emulatedGpuDirectWork();
/// Bytes brought to the host (downloadSync) by every emulated GPU so far.
long long emulatedGpuDownloadedBytes();
/// Whether emulated GPUs made from now on have bf16 tensor cores
/// (GpuBackend::bf16TensorCores: the attention's st_flash_mma_* kernels,
/// their mma.sync emulated warp by warp on threads; slow). Default: no.
void emulateTensorCores(bool on);
/// Whether the emulated cuBLASLt refuses GEMMs with a BIAS or DGELU
/// epilogue (throws GemmRefused, as a cuBLASLt without an algorithm for it
/// would).
void refuseGemmEpilogues(bool on);
/// Whether emulated GPUs made from now on run their stream lazily: queued
/// work (launches, copies, graphs) runs only when the host waits for it
/// (a download, a synchronisation, a fence), in order, and page-locked
/// memory is read or written when its copy runs, as on a GPU whose stream
/// runs behind the host. Default: at once.
void emulateLazyStreams(bool on);
/// The copy stream (GpuBackend::uploadAfter) of emulated GPUs made from
/// now on: 0 none (inputs copied on the stream), 1 (the default) each copy
/// run as early as its mark allows, 2 as late as the stream's waits allow
/// (at joinCopies, else after everything). With a lazy stream, early runs
/// a copy right after the mark's latest record (a mark recorded before
/// the graph has read the stage lets the copy overwrite it first), late
/// at the join (a missing join lets the graph read the stage first).
void emulateCopyStream(int timing);
/// Host waits for an emulated GPU's stream so far, and those of them that
/// left nothing queued (the device would idle until the host queues more).
long long emulatedGpuHostWaits();
long long emulatedGpuIdleWaits();
/// Launches run so far of the kernels whose names start with `prefix`
/// (runtime ops and generated kernels: "st_flash_mma_", "st_gather_rows").
long long emulatedGpuLaunchesOf(const std::string &prefix);

} // namespace stretto

#endif
