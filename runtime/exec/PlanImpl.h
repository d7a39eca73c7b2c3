//===- PlanImpl.h - the compiled runtime's plan and state (internal) -*- C++ -*-===//
//
// Shared by the plan executor's devices (PlanExecutor.cpp: the host, with
// OpenMP loops and OpenBLAS; CudaPlan.cpp: a CUDA GPU through the driver
// API, NVRTC-compiled kernels and cuBLASLt). The plan (buffer placement by
// liveness), the states, gradient sums and constants, and the order in
// which a phase's writes commit are the same on every device; a device
// owns its memory (PlanDevice) and runs one node at a time (exec).
// No MLIR here.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_PLANIMPL_H
#define STRETTO_RUNTIME_PLANIMPL_H

#include "exec/EnvSwitch.h"
#include "exec/OpSemantics.h"
#include "exec/UpdateChains.h"
#include "stretto/Runtime/OpTable.h"
#include "stretto/Runtime/PlanExecutor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace stretto {
namespace planning {

// Arena offsets are multiples of 16 floats (64 bytes: a cache line, an
// AVX-512 vector).
constexpr int64_t kAlign = 16;

inline int64_t alignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

inline bool isSink(OpKind k) {
  return k == OpKind::Write || k == OpKind::Grad || k == OpKind::Yield;
}

enum class Where { None, Arena, State, GradSum, Constant, Alias };

struct Slot {
  Where where = Where::None;
  int64_t offset = 0; // Arena: in floats; Alias: floats into the aliased value
  int64_t size = 0;   // floats
  int ref = -1;       // Alias: node; State/GradSum/Constant: index
  int dies = -1;      // the last node of the plan reading this buffer
  bool half = false;  // bf16 in two bytes an element (PlanDevice::storesBf16Halves)
  // Elements at the front stored in two bytes, the rest in four from
  // halfLeadFloats(halfLead) on: a norm_grad whose dx rows are rounded
  // (dtype BF16, kernel-norm-grad-epilogue), dgamma and dbeta after them.
  int64_t halfLead = 0;
};

// Where the four-byte part of a slot with `halfLead` two-byte elements
// starts, in floats (aligned, for the vector loads of its readers).
inline int64_t halfLeadFloats(int64_t halfLead) { return alignUp((halfLead + 1) / 2); }

struct PhasePlan {
  Phase phase = Phase::Step;
  std::vector<int> order;        // nodes to run, ascending
  std::vector<Slot> slots;       // by node index
  int64_t arenaFloats = 0;       // peak
  int64_t unplannedFloats = 0;   // without reuse
  std::vector<std::pair<int, int>> writes; // (state index, node written), in order
  std::vector<std::pair<int, int>> grads;  // (grad index, node), in order
  // [begin, end) positions in order whose kernels run as one launch
  // (PlanDevice::execGroup: multi-tensor updates).
  std::vector<std::pair<int, int>> groups;
  // Chains (UpdateChains.h) of one signature: the positions [first, end)
  // of their producers and consumers (each stage's kernels of every chain
  // adjacent, so the groups above run them where the device runs no
  // chain), and each chain's nodes, producers then consumer
  // (PlanDevice::execChain).
  struct ChainRun {
    int first = 0, end = 0;
    std::string signature;
    std::vector<std::vector<int>> entries;
  };
  std::vector<ChainRun> chains;
};

// First-fit allocator over an arena of floats with coalescing free list.
class ArenaAllocator {
public:
  int64_t allocate(int64_t size) {
    size = alignUp(std::max<int64_t>(size, 1));
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= size) {
        int64_t off = it->first;
        if (it->second == size)
          free_.erase(it);
        else
          *it = {off + size, it->second - size};
        return off;
      }
    // Grow: a free block at the top extends instead of being skipped.
    if (!free_.empty() && free_.back().first + free_.back().second == top_) {
      int64_t off = free_.back().first;
      free_.pop_back();
      top_ = off + size;
      return off;
    }
    int64_t off = top_;
    top_ += size;
    return off;
  }
  void release(int64_t off, int64_t size) {
    size = alignUp(std::max<int64_t>(size, 1));
    auto it = std::lower_bound(free_.begin(), free_.end(), std::make_pair(off, int64_t(0)));
    it = free_.insert(it, {off, size});
    // Merge with the next, then with the previous block.
    if (it + 1 != free_.end() && it->first + it->second == (it + 1)->first) {
      it->second += (it + 1)->second;
      free_.erase(it + 1);
    }
    if (it != free_.begin() && (it - 1)->first + (it - 1)->second == it->first) {
      (it - 1)->second += it->second;
      free_.erase(it);
    }
  }
  int64_t peak() const { return top_; }

private:
  std::vector<std::pair<int64_t, int64_t>> free_; // (offset, size), sorted
  int64_t top_ = 0;
};


// Floats on a device (host memory, or a CUDA device pointer the host never
// dereferences).
struct DeviceBuffer {
  float *data = nullptr;
  int64_t size = 0;
};

} // namespace planning

// A plan executor's device: its memory, and how it runs a node.
class PlanDevice {
public:
  virtual ~PlanDevice() = default;
  virtual const char *name() const = 0;
  // Whether the fused kernel `name` (a Kernel node's) can run here.
  virtual bool hasKernel(const std::string &name) const = 0;
  virtual float *alloc(int64_t floats) = 0;
  virtual void release(float *p) = 0;
  // host <-> device; download waits for the work queued before it.
  virtual void upload(float *dst, const float *host, int64_t n) = 0;
  virtual void download(float *host, const float *src, int64_t n) = 0;
  virtual void copy(float *dst, const float *src, int64_t n) = 0;       // no overlap
  virtual void accumulate(float *dst, const float *src, int64_t n) = 0; // dst += src
  virtual void divide(float *dst, int64_t n, float d) = 0;              // dst /= d
  // Runs node i of plan p; its value goes to x.val[i].
  virtual void exec(PlanExecutor::Impl &rt, const planning::PhasePlan &p, int i,
                    const TensorMap &inputs, int64_t t, StepResult &result) = 0;
  // Waits for the queued work (profiling timers; asynchronous devices).
  virtual void finish() {}
  // A GPU: buffers are device addresses, work is queued on stream() (a
  // CUstream; null on an emulated GPU), idle() polls it without waiting.
  virtual bool onDevice() const { return false; }
  // Whether store_bf16 kernels and GEMMs (Node dtype BF16) write two bytes
  // an element here, so that their buffers take half the floats; plan()
  // checks that only ops that read bf16 read such a value.
  virtual bool storesBf16Halves() const { return false; }
  // Whether any of these tensors holds an inf or a NaN; a device answers
  // without bringing them to the host (PlanExecutor::nonFiniteState).
  // true: maybe (the caller looks at each one).
  virtual bool anyNonFinite(const std::vector<std::pair<const float *, int64_t>> &) {
    return true;
  }
  virtual void *stream() { return nullptr; }
  virtual bool idle() { return true; }
  // Multi-tensor launches: the device's launch that runs element-wise
  // kernel `name` (or whole-tensor sum `name`) together with others like
  // it ("" when none), and that
  // launch over `members` (Kernel nodes of p at adjacent positions, values
  // bound); false: they run one by one.
  virtual std::string multiKernel(const std::string &name) const {
    (void)name;
    return "";
  }
  virtual bool execGroup(PlanExecutor::Impl &rt, const planning::PhasePlan &p,
                         const std::vector<int> &members) {
    (void)rt, (void)p, (void)members;
    return false;
  }
  // Chains (UpdateChains.h): the device's kernel for chains of `signature`
  // ("" when none), and that launch over a ChainRun (values bound); false:
  // its groups run instead.
  virtual std::string chainKernel(const std::string &signature) const {
    (void)signature;
    return "";
  }
  virtual bool execChain(PlanExecutor::Impl &rt, const planning::PhasePlan &p,
                         const planning::PhasePlan::ChainRun &chain) {
    (void)rt, (void)p, (void)chain;
    return false;
  }
  // Host work a run deferred to its end (a GPU's yielded values: copied on
  // the device during the run, downloaded here at once).
  virtual void collect(StepResult &) {}

  // CUDA graphs (PlanExecutor.cpp's Impl::recorded). A device that can
  // record its queued work runs a phase once as a recording, then replays
  // it: replay() redoes the recording's host work (inputs into page-locked
  // memory, id checks), launches the graph and collects its yields. While
  // recording, a node that needs the host mid-run (a download, a
  // collective, more scratch) throws NotRecordable.
  virtual bool canRecord() const { return false; }
  virtual void beginRecording() {}
  virtual int endRecording() { return -1; }
  virtual void abandonRecording() {}
  virtual void replay(int graph, const TensorMap &inputs, int64_t t, StepResult &result) {
    (void)graph, (void)inputs, (void)t, (void)result;
  }
  virtual void dropRecordings() {}
  // Changes whenever memory the device owns and a graph may use moves.
  virtual int64_t memoryEpoch() const { return 0; }

  // Queued steps (PlanExecutor::queueStep): a device whose stream runs
  // behind the host and that can leave a step's results there. While
  // deferYields has a sink, each replay queues its yields' copy to
  // page-locked memory and appends where they will be instead of
  // collecting them; queueNonFiniteCheck queues the states' check and its
  // flag's copy (null: no state holds an element). Both are readable once
  // waitFence has waited for a fence() queued after them.
  virtual bool queues() const { return false; }
  virtual void deferYields(std::vector<std::pair<const float *, int64_t>> *sink) { (void)sink; }
  virtual const float *
  queueNonFiniteCheck(const std::vector<std::pair<const float *, int64_t>> &tensors) {
    (void)tensors;
    return nullptr;
  }
  virtual int64_t fence() { return 0; }
  // The host has read these results (their buffers may be reused).
  virtual void releaseResults(const std::vector<const float *> &read) { (void)read; }
  // An update starts (run or recorded, not replayed): a device whose
  // update kernels check the states they write resets its flag here.
  virtual void beginUpdate() {}
  virtual void waitFence(int64_t ticket) { (void)ticket; }
};

// A phase run that cannot be recorded as a graph (it needs the host).
struct NotRecordable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct PlanExecutor::Impl {
  using Where = planning::Where;
  using Slot = planning::Slot;
  using PhasePlan = planning::PhasePlan;
  using DeviceBuffer = planning::DeviceBuffer;
  using ArenaAllocator = planning::ArenaAllocator;
  static int64_t alignUp(int64_t n) { return planning::alignUp(n); }

  Graph graph;
  std::unique_ptr<PlanDevice> dev;
  GemmPrecision gemmPrecision = GemmPrecision::F32;
  std::map<std::string, int> stateIndex;
  std::vector<DeviceBuffer> states;
  std::map<std::string, int> gradIndex;
  std::vector<DeviceBuffer> gradSums;
  int64_t gradCount = 0;
  std::vector<DeviceBuffer> constants;
  int64_t counter = 0;
  PlanStats stats;

  // Steps queued on a device that queues (PlanExecutor::queueStep), oldest
  // first: each micro-batch's loss (known, or where it will be), the
  // states' flag, and the fence after them.
  struct QueuedStep {
    std::vector<std::pair<double, const float *>> losses;
    const float *nonFiniteFlag = nullptr;
    int64_t fence = 0;
  };
  std::vector<QueuedStep> queued;

  PhasePlan stepPlan, updatePlan, outerPlan;
  Collective collective; // GossipMix exchange; empty: identity
  std::map<std::vector<int>, PhasePlan> evalPlans; // by probe list
  DeviceBuffer arena;           // the running phase's intermediates
  std::vector<float> scratch;   // the host device's temporaries
  std::vector<float *> val;     // per node of the running phase

  // CUDA graphs, by what a run does: 0 a first micro-step, 1 an
  // accumulating one, 2 + n an update over n micro-steps' sums.
  struct Recorded {
    int runs = 0;       // eager runs so far
    int graph = -1;     // the device's graph, or -1
    bool never = false; // needs the host mid-run: stays eager
  };
  std::map<int64_t, Recorded> recordings;
  int64_t memoryEpoch = 0;   // bumped when a buffer a graph may use moves
  int64_t recordedEpoch = 0; // memoryEpoch + the device's when they were made
  bool graphsWanted = true;  // STRETTO_CUDA_GRAPHS=0 turns them off
  StepResult recorded(int64_t key, const TensorMap &inputs, int64_t t,
                      const std::function<StepResult()> &body);

  bool profiling = false;
  std::map<OpKind, std::pair<double, int64_t>> profile; // seconds, calls
  struct KernelTime {
    double seconds = 0;
    int64_t calls = 0;
    double bytes = 0; // fused kernels: operands + result, once each (f32)
    double flops = 0; // GEMMs and attention: 2 m n k per product
  };
  std::map<std::string, KernelTime> kernelProfile;

  Phase cur = Phase::Step;

  [[noreturn]] void fail(int i, const std::string &msg) const {
    const Node &n = graph.phase(cur)[i];
    std::ostringstream os;
    os << opKindName(n.kind) << " (node " << i << ") at "
       << (n.loc.empty() ? std::string("<unknown>") : n.loc) << ": " << msg;
    throw std::runtime_error(os.str());
  }

  //===--- planning -------------------------------------------------------===//

  // Constants of both phases, one persistent buffer each.
  std::map<std::pair<int, int>, int> constIndex; // (phase, node) -> index

  void collectConstants() {
    for (Phase ph : {Phase::Step, Phase::Update, Phase::Outer}) {
      const std::vector<Node> &nodes = graph.phase(ph);
      for (size_t i = 0; i < nodes.size(); ++i) {
        const Node &n = nodes[i];
        if (n.kind != OpKind::Constant)
          continue;
        int64_t cnt = numElements(n.shape);
        std::vector<float> v(cnt);
        for (int64_t e = 0; e < cnt; ++e)
          v[e] = static_cast<float>(n.data.size() == 1 ? n.data[0] : n.data[e]);
        constIndex[{static_cast<int>(ph), static_cast<int>(i)}] = static_cast<int>(constants.size());
        constants.push_back(allocate(cnt));
        dev->upload(constants.back().data, v.data(), cnt);
      }
    }
  }

  // Slice n's slot in p. A window of whole leading rows (every dim before
  // the axis is 1, as attention_grad's dq/dk/dv and the fused QKV split) is
  // one contiguous range of its operand: a view, when the operand lives in
  // the arena (`inArena`; states and gradient sums are written in place),
  // also of a value stored in bf16 (two bytes; the offset in floats). Else
  // a copy; of a bf16 value none can be (kernel-bf16-storage lets only
  // leading-row slices read bf16): the error, or "".
  std::string planSlice(const std::vector<Node> &nodes, const Node &n, PhasePlan &p,
                        bool inArena) {
    Slot &s = p.slots[static_cast<size_t>(&n - nodes.data())];
    const ops::Window w = ops::windowOf(n, nodes[n.operands[0]].shape);
    if (const int64_t lead = p.slots[n.operands[0]].halfLead; lead > 0) {
      // Of a value two bytes an element at the front, four after: a view of
      // whole leading rows within one part (norm_grad's dx rows, its gain or
      // bias row).
      const int64_t from = n.ints[1] * w.inner, to = from + numElements(n.shape);
      if (w.outer == 1 && inArena && (to <= lead ? from % 2 == 0 : from >= lead)) {
        s.where = Where::Alias, s.ref = n.operands[0], s.half = to <= lead;
        s.offset = s.half ? from / 2 : planning::halfLeadFloats(lead) + (from - lead);
        return "";
      }
      return "a slice across the two-byte rows and the four-byte rows of node " +
             std::to_string(n.operands[0]) +
             " (norm_grad's rows rounded to bf16, kernel-norm-grad-epilogue): only views of "
             "whole leading rows within one part can read it";
    }
    const bool half = p.slots[n.operands[0]].half; // two bytes an element
    if (w.outer == 1 && inArena && (!half || (n.ints[1] * w.inner) % 2 == 0)) {
      s.where = Where::Alias, s.ref = n.operands[0], s.half = half;
      s.offset = half ? n.ints[1] * w.inner / 2 : n.ints[1] * w.inner;
      return "";
    }
    s.where = Where::Arena, s.size = std::max<int64_t>(numElements(n.shape), 1);
    p.unplannedFloats += alignUp(s.size);
    if (!half)
      return "";
    return "a slice of inner rows, or at an odd element, reads node " +
           std::to_string(n.operands[0]) +
           ", a value stored in bf16 (kernel-bf16-storage): only views of whole leading rows can";
  }

  // Why node n cannot read an operand as p stores it ("" when it can):
  // who may read a two-byte value is what kernel-bf16-storage allows
  // (norm_grad: its x, dy and addend, not gamma), and a value two bytes an
  // element at the front and four after (Slot::halfLead) only slices read.
  static std::string twoByteReadError(const Node &n, const PhasePlan &p) {
    static constexpr OpKind kReadsBf16[] = {
        OpKind::Gemm,      OpKind::Reshape, OpKind::Transpose, OpKind::Kernel,
        OpKind::ReduceSum, OpKind::Slice,   OpKind::Attention, OpKind::AttentionGrad};
    const bool readsBf16 =
        std::find(std::begin(kReadsBf16), std::end(kReadsBf16), n.kind) != std::end(kReadsBf16);
    for (size_t k = 0; k < n.operands.size(); ++k) {
      const int o = n.operands[k];
      if (p.slots[o].half && !(n.kind == OpKind::NormGrad && k != 1) && !readsBf16)
        return std::string(opKindName(n.kind)) + " reads node " + std::to_string(o) +
               ", a value stored in bf16 (kernel-bf16-storage), which this op cannot read on "
               "this device";
      if (p.slots[o].halfLead > 0 && n.kind != OpKind::Slice)
        return std::string(opKindName(n.kind)) + " reads node " + std::to_string(o) +
               " whole, whose rows are in two bytes and the rest in four "
               "(kernel-norm-grad-epilogue): only slices can read it";
    }
    return "";
  }

  // Plans `order` (ascending nodes of `phase`); values of `keep` live to the
  // end (probes). Writes and Grad values live to the end too: they commit
  // only once the whole phase succeeded.
  PhasePlan plan(Phase phase, std::vector<int> order, const std::vector<int> &keep,
                 bool snapshotReads = false) {
    const std::vector<Node> &nodes = graph.phase(phase);
    PhasePlan p;
    p.phase = phase;
    p.order = std::move(order);
    p.slots.assign(nodes.size(), Slot{});
    // Liveness is by position in `order` (partial runs concatenate lists).
    std::vector<int> pos(nodes.size(), -1);
    for (size_t k = 0; k < p.order.size(); ++k)
      pos[p.order[k]] = static_cast<int>(k);
    std::map<std::string, int> writtenBy; // state -> node holding its new value
    auto root = [&](int i) {
      while (p.slots[i].where == Where::Alias)
        i = p.slots[i].ref;
      return i;
    };
    // Where each value lives.
    for (int i : p.order) {
      const Node &n = nodes[i];
      Slot &s = p.slots[i];
      switch (n.kind) {
      case OpKind::Reshape:
      case OpKind::Transfer:
        s.where = Where::Alias, s.ref = n.operands[0];
        s.half = p.slots[n.operands[0]].half;
        break;
      case OpKind::Slice:
        if (std::string e = planSlice(nodes, n, p, p.slots[root(n.operands[0])].where ==
                                                       Where::Arena);
            !e.empty()) {
          cur = phase;
          fail(i, e);
        }
        break;
      case OpKind::Read:
        if (auto w = writtenBy.find(n.name); w != writtenBy.end()) {
          s.where = Where::Alias, s.ref = w->second;
        } else if (snapshotReads) {
          // Partial runs: the state may change between a micro-batch's
          // forward and backward parts; the value read is copied.
          s.where = Where::Arena, s.size = std::max<int64_t>(numElements(n.shape), 1);
          p.unplannedFloats += alignUp(s.size);
        } else {
          s.where = Where::State, s.ref = stateIndex.at(n.name);
        }
        break;
      case OpKind::AccumulatedGrad: {
        auto g = gradIndex.find(n.name);
        if (g == gradIndex.end()) {
          cur = phase;
          fail(i, "no Grad node of the step phase produces '" + n.name + "'");
        }
        s.where = Where::GradSum, s.ref = g->second;
        break;
      }
      case OpKind::Constant:
        s.where = Where::Constant, s.ref = constIndex.at({static_cast<int>(phase), i});
        break;
      case OpKind::Write:
        writtenBy[n.name] = n.operands[0];
        p.writes.push_back({stateIndex.at(n.name), n.operands[0]});
        break;
      case OpKind::Grad:
        p.grads.push_back({gradIndex.at(n.name), n.operands[0]});
        break;
      case OpKind::Yield:
        break;
      default:
        s.where = Where::Arena, s.size = std::max<int64_t>(numElements(n.shape), 1);
        // Two bytes an element: a store_bf16 kernel's value, and a
        // transpose of one (moved as bf16).
        if (((n.kind == OpKind::Kernel || n.kind == OpKind::Gemm ||
              n.kind == OpKind::Attention || n.kind == OpKind::AttentionGrad) &&
             n.dtype == DType::BF16 && dev->storesBf16Halves()) ||
            (n.kind == OpKind::Transpose && p.slots[n.operands[0]].half)) {
          s.half = true;
          s.size = std::max<int64_t>((numElements(n.shape) + 1) / 2, 1);
        }
        // norm_grad's rounded dx rows in two bytes, dgamma and dbeta in four.
        if (n.kind == OpKind::NormGrad && n.dtype == DType::BF16 && dev->storesBf16Halves()) {
          const int64_t d = n.shape.back(), params = n.flag ? 2 : 1;
          s.halfLead = numElements(n.shape) - params * d;
          s.size = planning::halfLeadFloats(s.halfLead) + params * d;
        }
        p.unplannedFloats += alignUp(s.size);
        break;
      }
      if (std::string e = twoByteReadError(n, p); !e.empty()) {
        cur = phase;
        fail(i, e);
      }
    }
    // A Write whose value is a state's old value, of a state this phase
    // writes (another one, or the same one more than once), must see that
    // old value whatever the commit order: such a Read gets its own copy.
    std::map<int, int> writesOf;
    for (auto [st, node] : p.writes)
      ++writesOf[st];
    for (auto [st, node] : p.writes) {
      Slot &src = p.slots[root(node)];
      if (src.where == Where::State && writesOf.count(src.ref) &&
          !(src.ref == st && writesOf[st] == 1)) {
        src.where = Where::Arena;
        src.size = std::max<int64_t>(numElements(nodes[root(node)].shape), 1);
        p.unplannedFloats += alignUp(src.size);
      }
    }
    // Last reader of each root buffer.
    const int end = std::numeric_limits<int>::max();
    for (int i : p.order) {
      int r = root(i);
      p.slots[r].dies = std::max(p.slots[r].dies, pos[i]);
      const Node &n = nodes[i];
      bool toEnd = n.kind == OpKind::Write || n.kind == OpKind::Grad;
      for (int o : n.operands) {
        int ro = root(o);
        p.slots[ro].dies = std::max(p.slots[ro].dies, toEnd ? end : pos[i]);
      }
    }
    for (int k : keep)
      p.slots[root(k)].dies = end;
    if (phase == Phase::Update)
      writeInPlace(p, nodes, root, pos);
    // Offsets: allocate each result before its operands die, so that no
    // kernel writes over its own input.
    ArenaAllocator alloc;
    std::vector<std::vector<int>> dyingAt(p.order.size());
    for (size_t k = 0; k < p.order.size(); ++k) {
      Slot &s = p.slots[p.order[k]];
      if (s.where == Where::Arena) {
        s.offset = alloc.allocate(s.size);
        if (s.dies != end)
          dyingAt[s.dies].push_back(p.order[k]);
      }
      for (int d : dyingAt[k])
        alloc.release(p.slots[d].offset, p.slots[d].size);
    }
    p.arenaFloats = alloc.peak();
    return p;
  }

  // The update phase on a device with multi-tensor launches: its nodes by
  // level (longest path from the phase's leaves, a Read or Write of a state
  // after the earlier Reads and Writes of it), the kernels of one launch
  // adjacent within a level (nodes of a level do not depend on each
  // other), so that each group runs as one launch. Chains the device can
  // run (UpdateChains.h) move their producers to their consumer's level,
  // each stage's kernels adjacent and a signature's chains one block
  // (ChainRun), and the writes of the producers' values after it; where
  // that would reorder a state's reads and writes, no chains. Kept unless
  // its arena outgrows the plain order's by more than a quarter and 256 KB.
  void groupUpdate() {
    const std::vector<Node> &nodes = graph.update;
    std::vector<std::string> key(nodes.size());
    bool any = false;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].kind == OpKind::Kernel) { // (element-wise, or a whole-tensor sum)
        key[i] = dev->multiKernel(nodes[i].name);
        any = any || !key[i].empty();
      }
    if (!any)
      return;
    const std::vector<int> level = updateLevels(nodes);
    std::vector<planning::UpdateChain> chains;
    if (envSwitchOn("STRETTO_UPDATE_CHAINS"))
      for (planning::UpdateChain &ch : planning::findUpdateChains(
               nodes, [&](const Node &n) { return dev->multiKernel(n.name); }))
        if (!dev->chainKernel(ch.signature).empty())
          chains.push_back(std::move(ch));
    std::vector<int> order;
    std::vector<std::tuple<int, std::string, int, std::string>> rank;
    if (!chainedOrder(nodes, level, key, chains, order, rank)) {
      chains.clear();
      chainedOrder(nodes, level, key, chains, order, rank);
    }
    PhasePlan grouped = plan(Phase::Update, order, {});
    // The level order keeps a level's values alive together: a few small
    // scalars more is fine; all of Muon's orthogonalised updates at once
    // (a parameter-sized arena) is not, and keeps the plain order.
    if (grouped.arenaFloats > updatePlan.arenaFloats + updatePlan.arenaFloats / 4 + 65536)
      return;
    for (size_t k = 0; k < order.size();) {
      size_t end = k + 1;
      while (end < order.size() && !key[order[k]].empty() && rank[order[end]] == rank[order[k]])
        ++end;
      if (end - k >= 2)
        grouped.groups.push_back({static_cast<int>(k), static_cast<int>(end)});
      k = end;
    }
    std::map<int, const planning::UpdateChain *> chainOf; // consumer -> its chain
    for (const planning::UpdateChain &ch : chains)
      chainOf[ch.consumer] = &ch;
    for (size_t k = 0; k < order.size();) {
      const std::string &sig = std::get<1>(rank[order[k]]);
      size_t end = k + 1;
      while (end < order.size() && !sig.empty() &&
             std::get<0>(rank[order[end]]) == std::get<0>(rank[order[k]]) &&
             std::get<1>(rank[order[end]]) == sig)
        ++end;
      if (!sig.empty()) {
        PhasePlan::ChainRun run;
        run.first = static_cast<int>(k), run.end = static_cast<int>(end), run.signature = sig;
        for (size_t j = k; j < end; ++j)
          if (auto it = chainOf.find(order[j]); it != chainOf.end()) {
            std::vector<int> entry = it->second->producers;
            entry.push_back(order[j]);
            run.entries.push_back(std::move(entry));
          }
        grouped.chains.push_back(std::move(run));
      }
      k = end;
    }
    updatePlan = std::move(grouped);
  }

  // The levels of the update's nodes (groupUpdate).
  static std::vector<int> updateLevels(const std::vector<Node> &nodes) {
    std::vector<int> level(nodes.size(), 0);
    std::map<std::string, int> lastRead, lastWrite;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node &n = nodes[i];
      for (int o : n.operands)
        level[i] = std::max(level[i], level[o] + 1);
      if (n.kind == OpKind::Read) {
        if (lastWrite.count(n.name))
          level[i] = std::max(level[i], lastWrite[n.name] + 1);
        lastRead[n.name] = std::max(lastRead[n.name], level[i]);
      } else if (n.kind == OpKind::Write) {
        for (auto *last : {&lastRead, &lastWrite})
          if (last->count(n.name))
            level[i] = std::max(level[i], (*last)[n.name] + 1);
        lastWrite[n.name] = std::max(lastWrite[n.name], level[i]);
      }
    }
    return level;
  }

  // groupUpdate's order: nodes sorted by (level, chain signature, stage,
  // multi kernel), a chain's producers at its consumer's level and the
  // writes of their values a level later. False where that order is not
  // the update's (an operand after its reader, or a state's reads and
  // writes in another order).
  bool chainedOrder(const std::vector<Node> &nodes, const std::vector<int> &level,
                    const std::vector<std::string> &key,
                    const std::vector<planning::UpdateChain> &chains, std::vector<int> &order,
                    std::vector<std::tuple<int, std::string, int, std::string>> &rank) {
    rank.assign(nodes.size(), {});
    for (size_t i = 0; i < nodes.size(); ++i)
      rank[i] = {level[i], "", 0, key[i]};
    for (const planning::UpdateChain &ch : chains) {
      const int at = level[ch.consumer];
      for (size_t s = 0; s < ch.producers.size(); ++s) {
        const int p = ch.producers[s];
        rank[p] = {at, ch.signature, static_cast<int>(s) + 1, key[p]};
        for (size_t w = 0; w < nodes.size(); ++w)
          if (nodes[w].kind == OpKind::Write && nodes[w].operands[0] == p)
            std::get<0>(rank[w]) = std::max(std::get<0>(rank[w]), at + 1);
      }
      rank[ch.consumer] = {at, ch.signature, static_cast<int>(ch.producers.size()) + 1,
                           key[ch.consumer]};
    }
    order = allNodes(Phase::Update);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return rank[a] < rank[b]; });
    std::vector<int> pos(nodes.size(), -1);
    for (size_t k = 0; k < order.size(); ++k)
      pos[order[k]] = static_cast<int>(k);
    // A state's reads and writes in order, each run of reads as a set.
    auto accesses = [&](const std::vector<int> &seq) {
      std::map<std::string, std::vector<std::vector<int>>> runs;
      for (int i : seq) {
        const Node &n = nodes[i];
        if (n.kind != OpKind::Read && n.kind != OpKind::Write)
          continue;
        std::vector<std::vector<int>> &r = runs[n.name];
        if (n.kind == OpKind::Write || r.empty() || nodes[r.back().front()].kind == OpKind::Write)
          r.push_back({i});
        else
          r.back().push_back(i);
      }
      for (auto &[name, r] : runs)
        for (std::vector<int> &run : r)
          std::sort(run.begin(), run.end());
      return runs;
    };
    std::vector<int> original;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (pos[i] < 0)
        continue;
      original.push_back(static_cast<int>(i));
      for (int o : nodes[i].operands)
        if (pos[o] > pos[i])
          return false;
    }
    return accesses(original) == accesses(order);
  }

  // Update-phase writes of a fused kernel's value go straight into the state
  // (no arena buffer, no copy at the end) when that is invisible: the kernel
  // reads the state's old value, if at all, only at each element's own index
  // (same shape), and nothing reads the old value after the kernel ran. The
  // Update phase has no failure mode after its first kernel, so committing
  // early loses no atomicity.
  template <typename Root>
  void writeInPlace(PhasePlan &p, const std::vector<Node> &nodes, Root root,
                    const std::vector<int> &pos) {
    std::map<int, int> writesOf; // state -> number of writes
    for (auto [st, node] : p.writes)
      ++writesOf[st];
    std::vector<std::pair<int, int>> kept;
    for (auto [st, node] : p.writes) {
      const Node &k = nodes[node];
      Slot &slot = p.slots[node];
      bool elementwise = k.kind == OpKind::Kernel && (k.ints.empty() || k.ints[0] == 0);
      bool ok = elementwise && slot.where == Where::Arena && writesOf[st] == 1 &&
                root(node) == node;
      // Every Read of st that sees the old value (not an alias of a Write)
      // runs no later than the kernel and its value dies there.
      for (int i : p.order) {
        const Slot &r = p.slots[i];
        bool oldValue = nodes[i].kind == OpKind::Read && r.where != Where::Alias &&
                        stateIndex.at(nodes[i].name) == st;
        if (ok && oldValue &&
            (pos[i] > pos[node] || (r.where == Where::State && r.dies > pos[node])))
          ok = false;
      }
      for (int o : k.operands) // old values read elementwise only
        if (ok && p.slots[root(o)].where == Where::State && p.slots[root(o)].ref == st &&
            nodes[o].shape != k.shape)
          ok = false;
      if (!ok) {
        kept.push_back({st, node});
        continue;
      }
      slot.where = Where::State;
      slot.ref = st;
      p.unplannedFloats -= alignUp(slot.size);
    }
    p.writes = kept;
  }

  std::vector<int> allNodes(Phase ph) const {
    std::vector<int> v(graph.phase(ph).size());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<int>(i);
    return v;
  }

  // Evaluation: the nodes the Yield operands and the probes need.
  const PhasePlan &evalPlan(const std::vector<int> &probes) {
    auto it = evalPlans.find(probes);
    if (it != evalPlans.end())
      return it->second;
    const std::vector<Node> &nodes = graph.nodes;
    std::vector<char> need(nodes.size(), 0);
    for (int p : probes) {
      if (p < 0 || p >= static_cast<int>(nodes.size()))
        throw std::runtime_error("evaluate: probe " + std::to_string(p) + " is not a node");
      need[p] = 1;
    }
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].kind == OpKind::Yield)
        need[i] = 1;
    for (int i = static_cast<int>(nodes.size()) - 1; i >= 0; --i)
      if (need[i])
        for (int o : nodes[i].operands)
          need[o] = 1;
    std::vector<int> order;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (need[i])
        order.push_back(static_cast<int>(i));
    return evalPlans.emplace(probes, plan(Phase::Step, order, probes)).first->second;
  }

  DeviceBuffer allocate(int64_t n) {
    return DeviceBuffer{dev->alloc(std::max<int64_t>(n, 1)), n};
  }
  void release(DeviceBuffer &b) {
    if (b.data)
      dev->release(b.data);
    b = DeviceBuffer{};
  }
  // Grows `b` to at least n floats (contents not kept).
  void ensure(DeviceBuffer &b, int64_t n) {
    if (b.size >= n && b.data)
      return;
    release(b);
    b = allocate(n);
    ++memoryEpoch; // graphs recorded over the old buffer are stale
  }
  std::vector<float> download(const float *src, int64_t n) const {
    std::vector<float> v(n);
    if (n)
      dev->download(v.data(), src, n);
    return v;
  }
  HostTensor hostTensor(const Shape &shape, const float *src, bool half = false,
                        int64_t halfLead = 0) const {
    if (halfLead > 0) { // two bytes an element, then four (Slot::halfLead)
      std::vector<double> v = hostTensor(Shape{halfLead}, src, true).data;
      std::vector<float> rest =
          download(src + planning::halfLeadFloats(halfLead), numElements(shape) - halfLead);
      v.insert(v.end(), rest.begin(), rest.end());
      return HostTensor{shape, std::move(v)};
    }
    if (half) { // two bytes an element: the bf16's bits
      const int64_t n = numElements(shape);
      std::vector<float> packed = download(src, (n + 1) / 2);
      std::vector<uint16_t> bits(static_cast<size_t>(packed.size()) * 2);
      std::memcpy(bits.data(), packed.data(), packed.size() * sizeof(float));
      std::vector<double> v(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) {
        uint32_t u = static_cast<uint32_t>(bits[static_cast<size_t>(k)]) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        v[static_cast<size_t>(k)] = f;
      }
      return HostTensor{shape, std::move(v)};
    }
    std::vector<float> v = download(src, numElements(shape));
    return HostTensor{shape, std::vector<double>(v.begin(), v.end())};
  }
  // State s := the value at src (unless it is already there).
  void commit(int s, const float *src) {
    if (src != states[s].data)
      dev->copy(states[s].data, src, states[s].size);
  }
  void addGrad(int g, const float *v) {
    if (gradCount == 0)
      dev->copy(gradSums[g].data, v, gradSums[g].size);
    else
      dev->accumulate(gradSums[g].data, v, gradSums[g].size);
  }

  ~Impl() {
    for (auto *list : {&states, &gradSums, &constants})
      for (DeviceBuffer &b : *list)
        release(b);
    release(arena);
  }

  // With `initialise` false the states keep the device's contents (a
  // device that only counts bytes: the run's memory estimate, RunChecks.cpp).
  Impl(const Graph &g, std::unique_ptr<PlanDevice> d, GemmPrecision gp, bool initialise = true)
      : graph(g), dev(std::move(d)), gemmPrecision(gp) {
    if (std::getenv("STRETTO_CUDA_GRAPHS"))
      graphsWanted = envSwitchOn("STRETTO_CUDA_GRAPHS");
    graph.validate();
    std::string why;
    if (!PlanExecutor::supports(graph, why))
      throw std::runtime_error("the compiled runtime cannot run this graph: " + why);
    for (size_t i = 0; i < graph.states.size(); ++i)
      stateIndex[graph.states[i].name] = static_cast<int>(i);
    for (const StateDecl &s : graph.states)
      states.push_back(allocate(numElements(s.shape)));
    for (const Node &n : graph.nodes)
      if (n.kind == OpKind::Grad && !gradIndex.count(n.name)) {
        gradIndex[n.name] = static_cast<int>(gradSums.size());
        gradSums.push_back(allocate(numElements(graph.nodes[n.operands[0]].shape)));
      }
    for (Phase ph : {Phase::Step, Phase::Update, Phase::Outer}) {
      const std::vector<Node> &nodes = graph.phase(ph);
      for (size_t i = 0; i < nodes.size(); ++i) {
        const Node &n = nodes[i];
        cur = ph;
        if (n.kind == OpKind::Kernel && !dev->hasKernel(n.name))
          fail(static_cast<int>(i), "compiled kernel '" + n.name + "' was not provided");
        if ((n.kind == OpKind::Read || n.kind == OpKind::Write) && !stateIndex.count(n.name))
          fail(static_cast<int>(i), "no state named '" + n.name + "'");
      }
    }
    collectConstants();
    stepPlan = plan(Phase::Step, allNodes(Phase::Step), {});
    updatePlan = plan(Phase::Update, allNodes(Phase::Update), {});
    groupUpdate();
    outerPlan = plan(Phase::Outer, allNodes(Phase::Outer), {});
    stats.stepArenaBytes = stepPlan.arenaFloats * 4;
    stats.updateArenaBytes = std::max(updatePlan.arenaFloats, outerPlan.arenaFloats) * 4;
    stats.unplannedBytes =
        (stepPlan.unplannedFloats + updatePlan.unplannedFloats + outerPlan.unplannedFloats) * 4;
    for (const StateDecl &s : graph.states)
      stats.persistentBytes += numElements(s.shape) * 4;
    for (auto *list : {&gradSums, &constants})
      for (const DeviceBuffer &b : *list)
        stats.persistentBytes += b.size * 4;
    if (initialise)
      initialize(0);
  }

  void initialize(uint64_t seed) {
    for (size_t k = 0; k < graph.states.size(); ++k) {
      const StateDecl &s = graph.states[k];
      std::vector<float> v(states[k].size);
      for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i)
        v[i] = static_cast<float>(initialValue(s, seed, i));
      dev->upload(states[k].data, v.data(), states[k].size);
    }
    for (size_t k = 0; k < graph.states.size(); ++k)
      if (!graph.states[k].copyOf.empty())
        dev->copy(states[k].data, states[stateIndex.at(graph.states[k].copyOf)].data,
                  states[k].size);
    counter = 0;
    gradCount = 0;
  }

  //===--- running --------------------------------------------------------===//

  void checkInputs(const std::vector<int> &order, const TensorMap &inputs) {
    for (int i : order) {
      const Node &n = graph.nodes[i];
      if (n.kind != OpKind::Input)
        continue;
      ops::checkInput(n, inputs);
    }
  }

  int64_t rowId(int i, float v, int64_t limit, const char *what) const {
    std::string bad = ops::badId(static_cast<double>(v), limit, what);
    if (!bad.empty())
      fail(i, bad);
    return static_cast<int64_t>(v);
  }

  // Checks a whole id tensor before an op uses it (serially: the message
  // names the first bad id).
  void checkIds(int i, const float *ids, int64_t count, int64_t limit, const char *what) const {
    for (int64_t r = 0; r < count; ++r)
      rowId(i, ids[r], limit, what);
  }

  float *scratchFloats(int64_t n) {
    if (static_cast<int64_t>(scratch.size()) < n)
      scratch.resize(n);
    return scratch.data();
  }

  StepResult run(const PhasePlan &p, const TensorMap &inputs, int64_t t, bool probesOut,
                 const std::vector<int> &probes);
  // Runs positions [begin, end) of p's order over `arenaBase`, with value
  // pointers in `val` (kept by the caller for partial runs).
  // A multi-tensor group or chain run (`members`, values bound) by `run`,
  // timed as one entry `key`[members] of the profile where profiling (so a
  // profiled update runs as an unprofiled one does): its bytes are
  // the members' results and the operands no member produced. False (not
  // run) where `run` declines.
  bool runLaunchGroup(const PhasePlan &p, const std::vector<int> &members, const std::string &key,
                      const std::function<bool()> &run);
  StepResult runRange(const PhasePlan &p, size_t begin, size_t end, float *arenaBase,
                      const TensorMap &inputs, int64_t t);
  // Where a state Read of a partial run reads (2BW redirects).
  const DeviceBuffer &readSource(const Node &n) const {
    const std::string *name = &n.name;
    if (redirect)
      if (auto r = redirect->find(n.name); r != redirect->end())
        name = &r->second;
    return states[stateIndex.at(*name)];
  }

  // Partial runs (pipeline stages): one plan over the concatenated parts.
  PhasePlan partPlan;
  std::vector<std::vector<int>> parts;
  std::vector<size_t> partStart; // position of each part's first node
  const std::map<std::string, std::string> *redirect = nullptr;
};

/// One node being run by a device: what every op handler of a device's
/// table reads (PlanDevice::exec builds it; the handlers write `out`).
struct NodeCall {
  NodeCall(PlanExecutor::Impl &rt, const planning::PhasePlan &p, int i, const TensorMap &inputs,
           int64_t t, StepResult &result)
      : rt(rt), p(p), i(i), inputs(inputs), t(t), result(result), nodes(rt.graph.phase(p.phase)),
        n(nodes[i]), out(rt.val[i]), count(numElements(n.shape)),
        bf16(rt.gemmPrecision == GemmPrecision::BF16 ||
             rt.gemmPrecision == GemmPrecision::BF16Operands),
        bf16Inside(rt.gemmPrecision == GemmPrecision::BF16) {}

  PlanExecutor::Impl &rt;
  const planning::PhasePlan &p;
  const int i; // the node's index in its phase
  const TensorMap &inputs;
  const int64_t t; // the optimizer step
  StepResult &result;
  const std::vector<Node> &nodes;
  const Node &n;
  float *const out;
  const int64_t count; // elements of the result
  const bool bf16;       // bf16 GEMM operands
  const bool bf16Inside; // attention's inner products (P, dS) in bf16 too

  const float *in(int k) const { return rt.val[n.operands[k]]; }
  // Operand k is bf16 in two bytes an element (PlanDevice::storesBf16Halves).
  bool half(int k) const { return p.slots[n.operands[k]].half; }
  const Shape &inShape(int k) const { return nodes[n.operands[k]].shape; }
};

/// The op handlers of a plan device (HostDevice, CudaPlanDevice), one per
/// group of kinds that share an implementation; planDeviceOps maps the kinds.
#define STRETTO_PLAN_DEVICE_HANDLERS                                                               \
  void opBinary(NodeCall &nc);                                                                     \
  void opUnary(NodeCall &nc);                                                                      \
  void opInput(NodeCall &nc);                                                                      \
  void opRead(NodeCall &nc);                                                                       \
  void opNothing(NodeCall &nc); /* views, constants, sinks: nothing to run */                      \
  void opStepCount(NodeCall &nc);                                                                  \
  void opYield(NodeCall &nc);                                                                      \
  void opKernel(NodeCall &nc);                                                                     \
  void opGemm(NodeCall &nc);                                                                       \
  void opMatmul(NodeCall &nc);                                                                     \
  void opTranspose(NodeCall &nc);                                                                  \
  void opBroadcast(NodeCall &nc);                                                                  \
  void opReduceSum(NodeCall &nc);                                                                  \
  void opSliceOrPad(NodeCall &nc);                                                                 \
  void opSoftmax(NodeCall &nc);                                                                    \
  void opNorm(NodeCall &nc);                                                                       \
  void opNormGrad(NodeCall &nc);                                                                   \
  void opAttention(NodeCall &nc);                                                                  \
  void opAttentionGrad(NodeCall &nc);                                                              \
  void opEmbedding(NodeCall &nc);                                                                  \
  void opScatterRows(NodeCall &nc);                                                                \
  void opOneHot(NodeCall &nc);                                                                     \
  void opCrossEntropy(NodeCall &nc);                                                               \
  void opStageSum(NodeCall &nc);                                                                   \
  void opGossipMix(NodeCall &nc);                                                                  \
  void opDescend(NodeCall &nc);                                                                    \
  void opNewtonSchulz(NodeCall &nc);

/// A plan device's op table: which handler runs each kind.
template <class Device> OpTable<void (Device::*)(NodeCall &)> planDeviceOps(const char *name) {
  using D = Device;
  return OpTable<void (D::*)(NodeCall &)>(name)
      .onClass(OpClass::Binary, &D::opBinary)
      .onClass(OpClass::Unary, &D::opUnary)
      .on({OpKind::Input}, &D::opInput)
      .on({OpKind::Read}, &D::opRead)
      .on({OpKind::Reshape, OpKind::Transfer, OpKind::Constant, OpKind::AccumulatedGrad,
           OpKind::Write, OpKind::Grad},
          &D::opNothing)
      .on({OpKind::StepCount}, &D::opStepCount)
      .on({OpKind::Yield}, &D::opYield)
      .on({OpKind::Kernel}, &D::opKernel)
      .on({OpKind::Gemm}, &D::opGemm)
      .on({OpKind::Matmul}, &D::opMatmul)
      .on({OpKind::Transpose}, &D::opTranspose)
      .on({OpKind::Broadcast}, &D::opBroadcast)
      .on({OpKind::ReduceSum}, &D::opReduceSum)
      .on({OpKind::Slice, OpKind::Pad}, &D::opSliceOrPad)
      .on({OpKind::Softmax}, &D::opSoftmax)
      .on({OpKind::LayerNorm, OpKind::RmsNorm}, &D::opNorm)
      .on({OpKind::NormGrad}, &D::opNormGrad)
      .on({OpKind::Attention}, &D::opAttention)
      .on({OpKind::AttentionGrad}, &D::opAttentionGrad)
      .on({OpKind::Embedding}, &D::opEmbedding)
      .on({OpKind::ScatterRows}, &D::opScatterRows)
      .on({OpKind::OneHot}, &D::opOneHot)
      .on({OpKind::CrossEntropy}, &D::opCrossEntropy)
      .on({OpKind::StageSum}, &D::opStageSum)
      .on({OpKind::GossipMix}, &D::opGossipMix)
      .on({OpKind::Descend}, &D::opDescend)
      .on({OpKind::NewtonSchulz}, &D::opNewtonSchulz);
}

/// Runs `nc` with the handler `table` has for its kind.
template <class Device, class Handler>
void runNode(Device &dev, const OpTable<Handler> &table, NodeCall &nc) {
  Handler h = table[nc.n.kind];
  if (!h)
    nc.rt.fail(nc.i, std::string("the ") + table.name() + " runtime has no implementation of " +
                         opKindName(nc.n.kind));
  (dev.*h)(nc);
}

} // namespace stretto

#endif
