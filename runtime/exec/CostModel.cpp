//===- CostModel.cpp - a plan's step time predicted on a named GPU --------===//
#include "stretto/Runtime/CostModel.h"

#include "exec/OpSemantics.h"
#include "exec/UpdateChains.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

using namespace stretto;
using ops::AttentionDims;
using ops::attentionDimsOf;
using ops::packedAttention;

namespace {

// H200 SXM: NVIDIA's H200 product page (dense tensor-core peaks: bf16 989
// TFLOP/s, TF32 495, FP32 67; HBM3e 4.8 TB/s). Efficiencies: rules of thumb
// for cuBLASLt GEMMs (0.6-0.8) and streaming kernels with 16-byte accesses
// (0.8-0.9); FlashAttention-2 reaches about 35 % of the Hopper peak
// (FlashAttention-3 paper, arXiv:2407.08608), which the runtime's fused
// attention on CUDA cores (head dim 8), a thread a row in f32, is credited
// with of the FP32 peak (an upper guess, unmeasured); its tensor-core
// kernels (mma.sync, fragments read from global memory, low occupancy),
// with 25 % of the bf16 peak (a guess below FA2's 35 %, unmeasured) for
// the part products they run (see Costing::mmaWork). Eager launch: a few
// microseconds of host time per kernel; a replayed CUDA graph leaves gaps
// well under a microsecond. All estimates, to rank where a step's time
// goes, not to replace a measurement. H100 SXM: the same chip with 3.35
// TB/s HBM3.
const DeviceModel kDeviceModels[] = {
    {"h200", "NVIDIA H200 SXM", 989e12, 495e12, 67e12, 4.8e12, 0.7, 0.85, 0.35, 0.25, 5e-6, 0.2e-6,
     2e-6},
    {"h100", "NVIDIA H100 SXM", 989e12, 495e12, 67e12, 3.35e12, 0.7, 0.85, 0.35, 0.25, 5e-6, 0.2e-6,
     2e-6},
};

int64_t numelOf(const Shape &s) { return s.empty() ? 1 : numElements(s); }

/// What one node costs on `d`: its category and its FLOPs, bytes and
/// launches; {} (no launch) for what costs nothing (views, I/O, sinks).
struct Costing {
  const DeviceModel &d;
  CostPrecision precision;
  double elem;                   // storage bytes per element in this phase
  const std::vector<char> *half; // by node: stored in two bytes (bf16 runs)
  bool bf16Plan = false;         // the plan has bf16 storage (train-mixed-precision)

  /// Bytes of node i's value as stored.
  double valueBytes(const std::vector<Node> &list, int i) const {
    const double n = static_cast<double>(numelOf(list[i].shape));
    if (half && (*half)[i] == kRowsHalf) { // norm_grad: its dx rows in two bytes
      const double params = static_cast<double>((list[i].flag ? 2 : 1) * list[i].shape.back());
      return 2.0 * (n - params) + elem * params;
    }
    return n * (half && (*half)[i] ? 2.0 : elem);
  }
  static constexpr char kRowsHalf = 2; // `half`'s mark for a norm_grad's rows

  double peak() const {
    return precision == CostPrecision::BF16   ? d.bf16Flops
           : precision == CostPrecision::TF32 ? d.tf32Flops
                                              : d.f32Flops;
  }
  double memoryTime(double bytes) const { return bytes / (d.bandwidth * d.memoryEfficiency); }

  /// How the CUDA runtime runs this attention (or its gradient): fused on
  /// tensor cores (CudaPlan.cpp's attentionKernels: head dims 16, 32 and
  /// 64; every modelled GPU has bf16 mma.sync), fused on CUDA cores (head
  /// dim 8), or as GEMMs: other dims, values of another dim, and bf16
  /// products (--precision bf16 on an f32 plan).
  enum class AttentionPath { TensorCores, CudaCores, Gemms };
  AttentionPath attentionPath(const Node &n, const std::vector<Node> &list) const {
    const AttentionDims a = attentionDimsOf(n, list);
    const int64_t dq = a.d, dv = a.dv;
    if ((precision == CostPrecision::BF16 && !bf16Plan) || dq != dv)
      return AttentionPath::Gemms;
    if (dq == 16 || dq == 32 || dq == 64)
      return AttentionPath::TensorCores;
    return dq == 8 ? AttentionPath::CudaCores : AttentionPath::Gemms;
  }
  /// The tensor-core kernels' mma work for `flops` of an attention
  /// (forward) or its gradient: an f32 operand is three bf16 parts, a
  /// product of two six part products, of an f32 and a bf16 operand three
  /// (RuntimeOps.cu's st_mma_split). The forward computes S = QK^T and PV;
  /// the backward S and dP three times each (dQ's two passes, dK/dV's one)
  /// and dQ, dK, dV: nine products where `flops` counts five. In a
  /// bf16-storage plan Q, K, V and g are taken as stored rounded (one part
  /// each); P (and dS) one where the node rounds them (`roundsPdS`:
  /// train.attention's and attention_grad's `bf16`), else three parts.
  double mmaWork(double flops, bool forward, bool roundsPdS) const {
    const double sd = bf16Plan ? 1 : 6, withP = roundsPdS ? (bf16Plan ? 1 : 3) : (bf16Plan ? 3 : 6);
    return forward ? flops * (sd + withP) / 2 : flops * (3 * sd + 3 * sd + 3 * withP) / 5;
  }

  /// A library GEMM (`c` has the bytes of its operands and result as
  /// stored): FLOPs at the GEMM rate or bytes at the memory rate, plus any
  /// bf16 conversions of its operands and rounding of its result.
  NodeCost gemmCost(const std::vector<Node> &list, const Node &n, NodeCost c) const {
    auto in = [&](size_t i) -> const Shape & { return list[n.operands[i]].shape; };
    const int self = static_cast<int>(&n - list.data()); // n is in list
    ops::GemmDims g = ops::gemmDims(n, in(0), in(1));
    c.category = "gemm";
    c.flops = 2.0 * g.batch * g.m * g.n * g.k;
    double converted = 0; // elements of four-byte operands (bf16 runs)
    if (precision == CostPrecision::BF16) {
      // cuBLASLt reads bf16 operands (2 bytes) and writes f32 (bf16 where
      // the plan stores the result so); an operand stored in four bytes
      // is first rounded into a bf16 copy (a launch reading 4 and writing
      // 2 bytes an element).
      c.bytes = valueBytes(list, self); // f32 or bf16 result
      for (int k = 0; k < 2; ++k) {
        const int o = n.operands[k];
        const double e = static_cast<double>(numelOf(list[o].shape));
        c.bytes += 2 * e;
        if (!(half && (*half)[o])) {
          converted += e;
          c.launches += 1;
        }
      }
    }
    // A result stored in bf16 but held in four bytes (STRETTO_BF16_STORAGE
    // =0) is rounded in place after the GEMM (a launch, 8 bytes an element).
    const double roundedAfter =
        precision == CostPrecision::BF16 && n.dtype == DType::BF16 && !(half && (*half)[self])
            ? 8.0 * static_cast<double>(numelOf(n.shape))
            : 0.0;
    c.launches += roundedAfter > 0;
    if (n.operands.size() == 3 && precision == CostPrecision::BF16) // the bias, DGELU's x
      c.bytes += valueBytes(list, n.operands[2]);
    c.seconds = std::max(c.flops / (peak() * d.gemmEfficiency), memoryTime(c.bytes)) +
                memoryTime(6 * converted + roundedAfter);
    c.bytes += 6 * converted + roundedAfter;
    c.what = "gemm " + std::to_string(g.batch) + "x" + std::to_string(g.m) + "x" +
             std::to_string(g.n) + "x" + std::to_string(g.k);
    return c;
  }

  // The CUDA runtime's own ops of several launches, priced by their bytes:
  // opNormGrad (dx row by row: x, the gain, dy and any addend read, dx
  // written; each chunk of rows' partial gain (and bias) gradients, reading
  // x and dy again; the chunks added: three launches) and opScatterRows (the
  // chunks' first rows set to none, each id's rows linked, a thread a row
  // then a thread an id, then a thread per (id, column) adding its rows:
  // four launches, g read and y written once) and opCrossEntropy (each
  // row's loss written, then read by the mean: two launches).
  NodeCost runtimeOpCost(const std::vector<Node> &list, const Node &n, NodeCost c,
                         const std::string &shape) const {
    c.category = "runtime op";
    c.what = std::string(opKindName(n.kind)) + " " + shape;
    if (n.kind == OpKind::NormGrad) {
      c.bytes += valueBytes(list, n.operands[0]) + valueBytes(list, n.operands[2]);
      c.launches = 3;
    } else if (n.kind == OpKind::CrossEntropy) {
      c.bytes += 2.0 * 4 * numelOf(list[n.operands[1]].shape); // the rows' losses
      c.launches = 2;
    } else {
      c.launches = 4;
    }
    c.seconds = memoryTime(c.bytes);
    return c;
  }

  NodeCost cost(const std::vector<Node> &list, const Node &n) const {
    NodeCost c;
    auto in = [&](size_t i) -> const Shape & { return list[n.operands[i]].shape; };
    const int self = static_cast<int>(&n - list.data()); // n is in list
    c.bytes = valueBytes(list, self);
    for (int o : n.operands)
      c.bytes += valueBytes(list, o);
    c.launches = 1;
    c.what = opKindName(n.kind);
    auto shapeText = [](const Shape &s) {
      std::string t;
      for (int64_t v : s)
        t += (t.empty() ? "" : "x") + std::to_string(v);
      return t.empty() ? std::string("scalar") : t;
    };
    switch (n.kind) {
    case OpKind::Gemm:
      return gemmCost(list, n, std::move(c));
    case OpKind::Attention:
    case OpKind::AttentionGrad: {
      const AttentionDims a = attentionDimsOf(n, list); // [B H, T, D] blocks
      double b = static_cast<double>(a.batch);
      double t = static_cast<double>(a.tq), dd = static_cast<double>(a.d);
      double fwd = 4.0 * b * t * t * dd * (n.flag ? 0.5 : 1.0);
      // The backward's five T x T products against the forward's two.
      c.flops = n.kind == OpKind::Attention ? fwd : 2.5 * fwd;
      c.category = "attention";
      c.what = std::string(opKindName(n.kind)) + " " + shapeText(in(0));
      const AttentionPath path = attentionPath(n, list);
      c.launches = 0;
      if (packedAttention(n) && path != AttentionPath::TensorCores) {
        // (kernel-attention-layout's packed heads: the other paths gather
        // them into blocks first and put the result back, in f32)
        const double moved = 4.0 * (numelOf(in(0)) + (n.operands.size() > 1 ? numelOf(in(1)) : 0) +
                                    numelOf(n.shape));
        c.bytes += 2 * moved;
        c.launches += static_cast<int64_t>(n.operands.size()) + 1;
      }
      if (path == AttentionPath::TensorCores) { // st_flash_mma_*
        c.seconds = std::max(
            mmaWork(c.flops, n.kind == OpKind::Attention, ops::attentionRoundsProducts(n)) /
                (d.bf16Flops * d.mmaAttentionEfficiency),
            memoryTime(c.bytes));
        c.launches = n.kind == OpKind::Attention ? 1 : 2;
        c.what += " (fused, tensor cores)";
        return c;
      }
      if (path == AttentionPath::CudaCores) {
        // The CUDA runtime's fused kernels (st_flash_*): f32 on CUDA cores.
        c.seconds = std::max(c.flops / (d.f32Flops * d.attentionEfficiency), memoryTime(c.bytes));
        c.launches += n.kind == OpKind::Attention ? 1 : 2;
        c.what += " (fused, CUDA cores)";
        return c;
      }
      // The GEMM path: the products through cuBLASLt (bf16 tensor cores
      // with --precision bf16 on an f32 plan), the T x T scores through
      // memory in f32: written, read and written by the softmax, read by
      // the second product (4 passes); the backward's 9.
      const double tk = static_cast<double>(a.tk);
      const double scores = 4.0 * b * t * tk * (n.kind == OpKind::Attention ? 4 : 9);
      c.bytes += scores;
      c.launches += n.kind == OpKind::Attention ? 3 : 6;
      c.seconds = c.flops / (peak() * d.gemmEfficiency) + memoryTime(c.bytes);
      c.what += " (GEMMs, scores in memory)";
      return c;
    }
    case OpKind::NewtonSchulz: {
      // Per iteration on G [m, n], s = min(m, n), l = max: A = X Xᵀ, B =
      // bA + cA², X' = aX + BX: 4 s² l + 2 s³ FLOPs in three GEMMs, for
      // each matrix of a batch (its operands).
      double m = static_cast<double>(in(0)[0]), k = static_cast<double>(in(0)[1]);
      double s = std::min(m, k), l = std::max(m, k);
      double steps = n.ints.empty() ? 5 : static_cast<double>(n.ints[0]);
      const auto batch = static_cast<int64_t>(n.operands.size());
      c.flops = static_cast<double>(batch) * steps * (4 * s * s * l + 2 * s * s * s);
      c.category = "optimizer";
      // f32 GEMMs (optimizer math), bf16 ones where the plan rounds the
      // iteration's matrices (flag: train.newton_schulz's bf16); each
      // step's three (batched) GEMMs and two element-wise launches; before
      // the steps, each matrix's norm (two launches) and X = G / norm (one
      // more rounding all of X to bf16), after them X copied out.
      c.launches = static_cast<int64_t>(5 * steps) + 3 * batch + 1 + (n.flag ? 1 : 0);
      c.seconds = std::max(c.flops / ((n.flag ? d.bf16Flops : d.f32Flops) * d.gemmEfficiency),
                           memoryTime(c.bytes * steps));
      c.what = "newton_schulz " + (batch > 1 ? std::to_string(batch) + "x" : "") + shapeText(in(0));
      return c;
    }
    case OpKind::NormGrad:
    case OpKind::ScatterRows:
    case OpKind::CrossEntropy:
      return runtimeOpCost(list, n, c, shapeText(n.shape));
    case OpKind::Kernel:
      c.category = !n.ints.empty() && n.ints[0] == 1   ? "reduction kernel"
                   : !n.ints.empty() && n.ints[0] == 2 ? "row kernel"
                                                       : "element-wise kernel";
      c.what = n.name + " " + shapeText(n.shape);
      c.seconds = memoryTime(c.bytes);
      return c;
    case OpKind::Slice:
      // A window of whole leading rows of a value in the arena is a view
      // (PlanImpl.h's planner: the fused QKV split, attention_grad's dq,
      // dk, dv); of a state or a gradient sum, a copy.
      if (ops::windowOf(n, in(0)).outer == 1) {
        int root = n.operands[0];
        while (list[root].kind == OpKind::Reshape || list[root].kind == OpKind::Transfer ||
               list[root].kind == OpKind::Slice)
          root = list[root].operands[0];
        if (list[root].kind != OpKind::Read && list[root].kind != OpKind::AccumulatedGrad)
          return NodeCost();
      }
      c.category = "runtime op";
      c.what = "slice " + shapeText(n.shape);
      c.seconds = memoryTime(c.bytes);
      return c;
    case OpKind::Reshape:
    case OpKind::Input:
    case OpKind::Read:
    case OpKind::Write:
    case OpKind::AccumulatedGrad:
    case OpKind::Constant:
    case OpKind::StepCount:
    case OpKind::Yield:
    case OpKind::Transfer:
    case OpKind::StageSum:
    case OpKind::GossipMix:
      return NodeCost(); // views, state I/O and communication: not modelled
    case OpKind::Grad:
      // Accumulated into the gradient sum (read + write) when there are
      // several micro-batches; the caller drops it otherwise.
      c.category = "gradient sums";
      c.bytes = 3.0 * numelOf(in(0)) * elem;
      c.seconds = memoryTime(c.bytes);
      return c;
    default:
      c.category = opClass(n.kind) == OpClass::Optimizer ? "optimizer" : "runtime op";
      c.what = std::string(opKindName(n.kind)) + " " + shapeText(n.shape);
      c.seconds = memoryTime(c.bytes);
      return c;
    }
  }
};

} // namespace

const DeviceModel *stretto::findDeviceModel(const std::string &name, std::string *known) {
  std::string names;
  for (const DeviceModel &d : kDeviceModels) {
    if (d.name == name)
      return &d;
    names += (names.empty() ? "" : ", ") + d.name;
  }
  if (known)
    *known = names;
  return nullptr;
}

bool stretto::costPrecisionFromName(const std::string &name, CostPrecision &p) {
  if (name == "f32")
    p = CostPrecision::F32;
  else if (name == "tf32")
    p = CostPrecision::TF32;
  else if (name == "bf16")
    p = CostPrecision::BF16;
  else
    return false;
  return true;
}

const char *stretto::costPrecisionName(CostPrecision p) {
  return p == CostPrecision::BF16 ? "bf16" : p == CostPrecision::TF32 ? "tf32" : "f32";
}

StepCost stretto::predictStep(const Graph &graph, const DeviceModel &device,
                              CostPrecision precision, int64_t microBatches, int64_t tokens,
                              bool twoByteBf16,
                              const std::map<std::string, std::string> *multiTensor,
                              const std::map<std::string, std::string> *chains) {
  StepCost out;
  // The update's chains the runtime runs (UpdateChains.h): each node's
  // chain signature, and the operands whose reads stay on chip.
  std::map<int, std::string> chainOf;
  std::map<int, std::set<int>> onChip;
  if (multiTensor && chains)
    for (const planning::UpdateChain &ch :
         planning::findUpdateChains(graph.update, [&](const Node &n) {
           auto it = multiTensor->find(n.name);
           return it == multiTensor->end() ? std::string() : it->second;
         })) {
      if (!chains->count(ch.signature))
        continue;
      std::set<int> seen;
      std::vector<int> stages = ch.producers;
      stages.push_back(ch.consumer);
      for (int st : stages) {
        chainOf[st] = ch.signature;
        for (int o : graph.update[st].operands)
          if (numelOf(graph.update[o].shape) == numelOf(graph.update[st].shape) &&
              (seen.count(o) || std::count(ch.producers.begin(), ch.producers.end(), o)))
            onChip[st].insert(o);
        for (int o : graph.update[st].operands)
          seen.insert(o);
      }
    }
  out.tokens = tokens;
  bool bf16Plan = false;
  for (const Node &n : graph.nodes)
    bf16Plan = bf16Plan || n.kind == OpKind::RoundBf16 || n.dtype == DType::BF16;
  auto add = [&](const std::vector<Node> &list, double elem, int64_t times, bool grouped) {
    std::set<std::string> launched; // multi-tensor groups already launched
    // bf16 runs: which values the CUDA runtime keeps in two bytes (a
    // store_bf16 kernel's, and reshapes, transposes and slices, views, of
    // one).
    // A norm_grad whose dx rows are rounded keeps them in two bytes, its
    // gain and bias rows in four (Costing::kRowsHalf): a slice of the rows
    // is in two.
    std::vector<char> half(list.size(), 0);
    const bool halves = precision == CostPrecision::BF16 && twoByteBf16;
    for (size_t i = 0; i < list.size(); ++i) {
      const Node &n = list[i];
      if (halves && n.kind == OpKind::NormGrad && n.dtype == DType::BF16) {
        half[i] = Costing::kRowsHalf;
        continue;
      }
      if (halves && n.kind == OpKind::Slice && half[n.operands[0]] == Costing::kRowsHalf) {
        const Node &g = list[n.operands[0]];
        half[i] = n.ints[1] < g.shape[0] - (g.flag ? 2 : 1);
        continue;
      }
      half[i] =
          halves &&
          (((n.kind == OpKind::Kernel || n.kind == OpKind::Gemm || n.kind == OpKind::Attention ||
             n.kind == OpKind::AttentionGrad) &&
            n.dtype == DType::BF16) ||
           ((n.kind == OpKind::Reshape || n.kind == OpKind::Transpose || n.kind == OpKind::Slice) &&
            half[n.operands[0]]));
    }
    Costing costing{device, precision, elem, &half, bf16Plan};
    for (const Node &n : list) {
      if (n.kind == OpKind::Grad && microBatches <= 1)
        continue;
      NodeCost c = costing.cost(list, n);
      if (c.launches == 0)
        continue;
      const int self = static_cast<int>(&n - list.data());
      if (auto ch = chainOf.find(self); grouped && ch != chainOf.end()) {
        c.what += " (chain " + chains->at(ch->second) + ")";
        const double before = c.bytes;
        for (int o : onChip[self])
          c.bytes -= elem * static_cast<double>(numelOf(list[o].shape));
        if (before > 0)
          c.seconds *= c.bytes / before; // (memory-bound element-wise kernels)
        if (!launched.insert(ch->second).second)
          c.launches = 0; // the chains' one launch runs it
      } else if (grouped && multiTensor && n.kind == OpKind::Kernel)
        if (auto g = multiTensor->find(n.name); g != multiTensor->end()) {
          c.what += " (multi-tensor " + g->second + ")";
          if (!launched.insert(g->second).second)
            c.launches = 0; // the group's one launch runs it
          else if (g->second.rfind("st_multi_sum_", 0) == 0)
            c.launches = 2; // (whole-tensor sums: every part, then each sum's parts added)
        }
      // A launch takes the floor's time at least (a small kernel's launch,
      // ramp-up and drain), whatever little it moves.
      c.seconds = std::max(c.seconds, static_cast<double>(c.launches) * device.kernelFloorSeconds);
      c.times = times;
      out.deviceSeconds += c.seconds * times;
      out.launches += c.launches * times;
      out.flops += c.flops * times;
      out.bytes += c.bytes * times;
      out.nodes.push_back(std::move(c));
    }
  };
  // bf16: the step's values in two bytes where the plan stores them so
  // (kernel-bf16-storage), four elsewhere; the update reads and writes f32
  // master weights and optimizer states.
  add(graph.nodes, 4.0, std::max<int64_t>(1, microBatches), false);
  add(graph.update, 4.0, 1, true);
  // After each step the runtime checks the states for an inf or a NaN on
  // the device: those the update's multi-tensor kernels write as they
  // write them (CudaPlan.cpp's execGroup), the others in one launch that
  // reads them all (PlanExecutor::queueStep).
  std::set<std::string> flagged;
  if (multiTensor)
    for (const Node &n : graph.update)
      if (n.kind == OpKind::Write && graph.update[n.operands[0]].kind == OpKind::Kernel &&
          multiTensor->count(graph.update[n.operands[0]].name))
        flagged.insert(n.name);
  int64_t params = 0, stateElems = 0;
  for (const StateDecl &s : graph.states) {
    if (!flagged.count(s.name))
      stateElems += numelOf(s.shape);
    if (s.isParam)
      params += numelOf(s.shape);
  }
  if (stateElems > 0) {
    NodeCost check;
    check.category = "state check";
    check.what = flagged.empty() ? "st_flag_nonfinite over every state"
                                 : "st_flag_nonfinite over the states no update kernel checked";
    check.bytes = 4.0 * static_cast<double>(stateElems);
    check.seconds = std::max(check.bytes / (device.bandwidth * device.memoryEfficiency),
                             device.kernelFloorSeconds);
    check.launches = 1;
    out.deviceSeconds += check.seconds;
    out.launches += 1;
    out.bytes += check.bytes;
    out.nodes.push_back(std::move(check));
  }
  out.modelFlops = 6.0 * static_cast<double>(params) * static_cast<double>(tokens);
  double hostLaunch = static_cast<double>(out.launches) * device.eagerLaunchSeconds;
  out.eagerSeconds = std::max(out.deviceSeconds, hostLaunch);
  out.graphSeconds = out.deviceSeconds + static_cast<double>(out.launches) * device.graphGapSeconds;
  return out;
}

std::string stretto::formatStepCost(const StepCost &cost, const DeviceModel &d,
                                    CostPrecision precision, int detail) {
  std::string s;
  char buf[512];
  auto line = [&](const char *fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    s += buf;
  };
  const double peak = precision == CostPrecision::BF16   ? d.bf16Flops
                      : precision == CostPrecision::TF32 ? d.tf32Flops
                                                         : d.f32Flops;
  line("cost model: %s (%s), %s; a roofline estimate from the plan, not a measurement\n",
       d.description.c_str(), d.name.c_str(),
       precision == CostPrecision::BF16   ? "bf16 GEMMs, values in two bytes where the plan "
                                            "stores them so, f32 master weights"
       : precision == CostPrecision::TF32 ? "f32 storage, TF32 GEMMs"
                                          : "f32 storage and GEMMs (no tensor cores)");
  line("  assumed: GEMMs at %.0f%% of %.0f TFLOP/s, fused attention on tensor cores at %.0f%% of "
       "%.0f TFLOP/s for its bf16 part products (on CUDA cores, head dim 8: %.0f%% of %.0f), "
       "kernels at %.0f%% of %.2f TB/s, %.1f us at least a launch; %.1f us of host time per eager "
       "launch, %.2f us between kernels of a graph\n",
       100 * d.gemmEfficiency, peak / 1e12, 100 * d.mmaAttentionEfficiency, d.bf16Flops / 1e12,
       100 * d.attentionEfficiency, d.f32Flops / 1e12, 100 * d.memoryEfficiency, d.bandwidth / 1e12,
       d.kernelFloorSeconds * 1e6, d.eagerLaunchSeconds * 1e6, d.graphGapSeconds * 1e6);
  struct Sum {
    int64_t launches = 0;
    double flops = 0, bytes = 0, seconds = 0;
  };
  std::map<std::string, Sum> by;
  for (const NodeCost &n : cost.nodes) {
    Sum &t = by[n.category];
    t.launches += n.launches * n.times;
    t.flops += n.flops * n.times;
    t.bytes += n.bytes * n.times;
    t.seconds += n.seconds * n.times;
  }
  std::vector<std::pair<std::string, Sum>> rows(by.begin(), by.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto &a, const auto &b) { return a.second.seconds > b.second.seconds; });
  line("  %-20s | %8s | %9s | %8s | %9s | %5s\n", "per step", "launches", "GFLOP", "MB",
       "device ms", "share");
  for (const auto &[name, t] : rows)
    line("  %-20s | %8lld | %9.2f | %8.1f | %9.3f | %4.0f%%\n", name.c_str(),
         (long long)t.launches, t.flops / 1e9, t.bytes / 1e6, t.seconds * 1e3,
         cost.deviceSeconds > 0 ? 100 * t.seconds / cost.deviceSeconds : 0.0);
  line("  %-20s | %8lld | %9.2f | %8.1f | %9.3f |\n", "total", (long long)cost.launches,
       cost.flops / 1e9, cost.bytes / 1e6, cost.deviceSeconds * 1e3);
  const double hostMs = cost.launches * d.eagerLaunchSeconds * 1e3;
  line("  step, launched eagerly: %.3f ms (%s-bound: %lld launches x %.1f us = %.3f ms of host "
       "time, %.3f ms of device time)\n",
       cost.eagerSeconds * 1e3, hostMs > cost.deviceSeconds * 1e3 ? "launch" : "device",
       (long long)cost.launches, d.eagerLaunchSeconds * 1e6, hostMs, cost.deviceSeconds * 1e3);
  line("  step, as one CUDA graph: %.3f ms\n", cost.graphSeconds * 1e3);
  if (cost.tokens > 0) {
    auto rate = [&](double sec) { return sec > 0 ? cost.tokens / sec : 0.0; };
    line("  predicted: %.0f tok/s eager, %.0f tok/s as a graph; model FLOPs (6 x parameters x "
         "%lld tokens) %.3f TFLOP a step: %.1f TFLOP/s as a graph (%.0f%% of the peak)\n",
         rate(cost.eagerSeconds), rate(cost.graphSeconds), (long long)cost.tokens,
         cost.modelFlops / 1e12, cost.graphSeconds > 0 ? cost.modelFlops / cost.graphSeconds / 1e12 : 0.0,
         cost.graphSeconds > 0 ? 100 * cost.modelFlops / cost.graphSeconds / peak : 0.0);
  }
  if (detail > 0) {
    std::vector<const NodeCost *> top;
    for (const NodeCost &n : cost.nodes)
      top.push_back(&n);
    std::sort(top.begin(), top.end(), [](const NodeCost *a, const NodeCost *b) {
      return a->seconds * a->times > b->seconds * b->times;
    });
    top.resize(std::min<size_t>(top.size(), static_cast<size_t>(detail)));
    line("  the %zu costliest nodes (per step):\n", top.size());
    for (const NodeCost *n : top)
      line("    %9.3f ms  %-20s %s%s\n", n->seconds * n->times * 1e3, n->category.c_str(),
           n->what.c_str(), n->times > 1 ? (" x" + std::to_string(n->times)).c_str() : "");
  }
  return s;
}
