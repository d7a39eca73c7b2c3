//===- CostModel.h - a plan's step time predicted on a named GPU -*- C++ -*-===//
//
// A roofline over the compiled plan (Kernel and Gemm nodes and the ops the
// runtime runs itself): each node costs max(FLOPs / (peak x e_c),
// bytes / (bandwidth x e_m)), plus a launch gap, and a step is the sum over
// its micro-batches' Step phase and one Update phase. Eager launches cost
// the host a few microseconds each, so an eagerly launched step takes at
// least launches x that; a step captured as one CUDA graph pays a short
// device gap per kernel instead. It needs no GPU: `stretto-run PLAN
// --device-model h200` prints it, and says which part of the step (GEMMs,
// fused kernels, attention, launches) bounds the time, before anything is
// measured. The device figures and efficiencies are stated with their
// sources in kDeviceModels (CostModel.cpp); they are estimates.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_COSTMODEL_H
#define STRETTO_RUNTIME_COSTMODEL_H

#include "stretto/Runtime/Graph.h"

#include <map>
#include <string>
#include <vector>

namespace stretto {

/// A GPU's peaks and the fractions of them that good kernels reach.
struct DeviceModel {
  std::string name;        // "h200"
  std::string description; // "NVIDIA H200 SXM"
  double bf16Flops = 0;    // dense tensor-core FLOP/s
  double tf32Flops = 0;
  double f32Flops = 0;     // CUDA cores, no tensor cores
  double bandwidth = 0;    // HBM bytes/s
  double gemmEfficiency = 0.7;   // e_c of large library GEMMs
  double memoryEfficiency = 0.85; // e_m of wide streaming kernels
  double attentionEfficiency = 0.35; // e_c of the fused attention on CUDA cores (f32 peak)
  double mmaAttentionEfficiency = 0.25; // e_c of the fused attention's mma.sync (bf16 peak)
  double eagerLaunchSeconds = 5e-6;  // host time per eager kernel launch
  double graphGapSeconds = 0.2e-6;   // device gap between kernels of a replayed graph
  double kernelFloorSeconds = 2e-6;  // a launch's least device time (a small kernel's)
};

/// The named model ("h200"), or null; `known` lists the names.
const DeviceModel *findDeviceModel(const std::string &name, std::string *known = nullptr);

/// Storage and GEMM precision of the prediction: f32 (CUDA cores), tf32
/// (f32 storage, tensor-core GEMMs) or bf16 (as the CUDA runtime runs a
/// plan in bf16: GEMMs on bf16 operands with f32 results, two-byte values
/// where the plan stores them so (store_bf16 kernels, and reshapes and
/// transposes of them), four bytes elsewhere, and a rounding launch before
/// each GEMM operand stored in four bytes).
enum class CostPrecision { F32, TF32, BF16 };
bool costPrecisionFromName(const std::string &name, CostPrecision &p);
const char *costPrecisionName(CostPrecision p);

/// One node's predicted cost.
struct NodeCost {
  std::string category; // "gemm", "fused kernel", "attention", "reduction", ...
  std::string what;     // the kernel's name or the op and its shape
  double flops = 0, bytes = 0, seconds = 0;
  int64_t launches = 0;
  int64_t times = 1; // per step (micro-batches)
};

struct StepCost {
  std::vector<NodeCost> nodes;
  double deviceSeconds = 0;  // the kernels themselves, back to back
  int64_t launches = 0;      // per step
  double flops = 0, bytes = 0;
  double eagerSeconds = 0;   // max(device, launches x eager launch) + device
  double graphSeconds = 0;   // device + launches x graph gap
  double modelFlops = 0;     // 6 x parameters x tokens (the usual MFU count)
  int64_t tokens = 0;        // per step
};

/// Predicts one optimizer step of `graph` (its Step phase `microBatches`
/// times, then its Update phase). `tokens` per step for the tok/s figures.
/// `twoByteBf16` false: bf16 values in four bytes, as the CUDA runtime keeps
/// them with STRETTO_BF16_STORAGE=0. `multiTensor` (kernel -> its
/// multi-tensor kernel, MultiTensor.h): the update phase's members of a
/// group cost one launch together (the runtime's grouping, taken as one
/// launch per group and update). `chains` (a chain's signature -> its
/// kernel, MultiTensor.h): the update's chains of those signatures
/// (UpdateChains.h, found with `multiTensor`) cost one launch each
/// signature, and neither the consumer's reads of its producers' values nor
/// a producer's reads of a value an earlier stage of its chain read move
/// through memory (they are an element's own, just written or read).
StepCost predictStep(const Graph &graph, const DeviceModel &device, CostPrecision precision,
                     int64_t microBatches, int64_t tokens, bool twoByteBf16 = true,
                     const std::map<std::string, std::string> *multiTensor = nullptr,
                     const std::map<std::string, std::string> *chains = nullptr);

/// The report: the step's time eager and as one graph, tok/s, model
/// TFLOP/s, a table by category and (detail > 0) the `detail` costliest
/// nodes.
std::string formatStepCost(const StepCost &cost, const DeviceModel &device,
                           CostPrecision precision, int detail);

} // namespace stretto

#endif // STRETTO_RUNTIME_COSTMODEL_H
