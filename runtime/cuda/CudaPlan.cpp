//===- CudaPlan.cpp - the compiled runtime on a CUDA GPU ------------------===//
//
// The plan executor's CUDA device: every buffer of the plan (states,
// gradient sums, constants, the arenas) in device memory, every node queued
// on one stream:
//   * Kernel nodes: the generated CUDA C of the model's fused kernels (the
//     bodies the CPU runs), compiled by NVRTC for this GPU's arch through
//     CudaKernelCache, launched with KernelSource's contract;
//   * Gemm / Matmul / Attention's products / Newton-Schulz: cuBLASLt, f32
//     or with bf16 operands (rounded by st_to_bf16, summed in f32);
//   * everything else: runtime/cuda/RuntimeOps.cu, compiled the same way.
// The host waits for the stream only where it needs a value: the step's
// results (Yield), ids it checks, a gossip exchange, gradients and states
// it reads. No MLIR here.
//
//===----------------------------------------------------------------------===//

#include "cuda/GpuBackend.h"
#include "exec/EnvSwitch.h"
#include "exec/PlanImpl.h"
#include "stretto/Runtime/CudaDriver.h"
#include "stretto/Runtime/CudaJit.h"
#include "stretto/Runtime/Startup.h"

#include "RuntimeOpsText.h"
#include "stretto/Support/KernelMathText.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <set>
#include <thread>

namespace stretto {

using namespace ops;
using namespace planning;

namespace {

using Ptr = GpuBackend::Ptr;

inline Ptr dptr(const void *p) { return reinterpret_cast<Ptr>(p); }

// RuntimeOps.cu's StSpace: an index space and two operands' strides in it.
struct StSpace {
  int rank = 0;
  int64_t dims[8] = {0};
  int64_t a[8] = {0};
  int64_t b[8] = {0};
};

StSpace spaceOf(const Shape &out, const std::vector<int64_t> &sa,
                const std::vector<int64_t> &sb = {}) {
  if (out.size() > 8)
    throw std::runtime_error("the CUDA runtime handles layouts of up to 8 dims, not " +
                             std::to_string(out.size()));
  StSpace s;
  s.rank = static_cast<int>(out.size());
  for (size_t d = 0; d < out.size(); ++d) {
    s.dims[d] = out[d];
    s.a[d] = sa[d];
    s.b[d] = sb.empty() ? 0 : sb[d];
  }
  return s;
}

} // namespace

std::string cudaRuntimeSource() {
  return std::string("#define ST_FN static __device__ __forceinline__\n"
                     "#define ST_HAVE_WARPS 1\n"
                     "ST_FN float st_float_bits(int b) { return "
                     "__int_as_float(b); }\n"
                     "ST_FN int st_bits_of(float f) { return __float_as_int(f); }\n") +
         kKernelMathText + runtimeOpDispatch() + kRuntimeOpsText;
}

std::vector<std::string> cudaRuntimeUnits() {
  // RuntimeOps.cu's parts: 0 and 5 the ops, 1 the attention on CUDA cores,
  // 2..4 on tensor cores (its largest compile, one head dim a part).
  const std::string all = cudaRuntimeSource();
  std::vector<std::string> units;
  for (int part = 0; part <= 5; ++part)
    units.push_back("#define ST_OPS_PART " + std::to_string(part) + "\n" + all);
  return units;
}

std::string runtimeOpDispatch() {
  // st_unary / st_binary: op code (opCode, the op's place in its class) ->
  // the op table's scalar function. An op without a code yields NaN.
  std::string unary = "ST_FN float st_unary(int op, float x) {\n  switch (op) {\n";
  std::string binary = "ST_FN float st_binary(int op, float a, float b) {\n  switch (op) {\n";
#define STRETTO_OP(Kind, name, arity, cls, fn)                                                   \
  if (opClass(OpKind::Kind) == OpClass::Unary)                                                   \
    unary += "  case " + std::to_string(opCode(OpKind::Kind)) + ": return st_" #fn "(x);\n";     \
  if (opClass(OpKind::Kind) == OpClass::Binary)                                                  \
    binary += "  case " + std::to_string(opCode(OpKind::Kind)) + ": return st_" #fn "(a, b);\n";
#include "stretto/Ops.def"
#undef STRETTO_OP
  const std::string nan = "  default: return __int_as_float(0x7fc00000);\n  }\n}\n";
  return unary + nan + binary + nan;
}
namespace {

struct AttentionIo; // where an attention's operands lie (opAttention)

class CudaPlanDevice final : public PlanDevice {
public:
  explicit CudaPlanDevice(std::unique_ptr<GpuBackend> g)
      : gpu(std::move(g)), deviceName(gpu->name()) {}
  std::unique_ptr<GpuBackend> gpu;
  std::map<std::string, void *> fns;               // runtime ops, by name
  mutable std::map<std::string, void *> kernelFns; // generated kernels, by name
  std::string deviceName;
  bool tf32 = false;          // f32 GEMMs on TF32 tensor cores (--precision=tf32)
  bool bf16Halves = false;    // store_bf16 kernels write two bytes (makeGpuPlanExecutor)
  bool tensorCoreAttention = false; // the GPU runs st_flash_mma_* (bf16 mma.sync: sm_80+)
  // A GEMM's bias added, or its product multiplied by gelu'(x), by
  // cuBLASLt's BIAS or DGELU epilogue (STRETTO_GEMM_EPILOGUE, on unless 0);
  // off, or once cuBLASLt refuses one of a kind: st_add_bias or st_dgelu
  // after an f32 product in scratch (the same value, rounded once).
  bool biasEpilogue = true, dgeluEpilogue = true, biasGradEpilogue = true, geluAuxEpilogue = true;
  void gemmWithBiasGrad(NodeCall &nc, GemmCall c);
  void gemmWithGeluAux(NodeCall &nc, GemmCall c);
  bool gemmByLibrary(bool &kind, const GemmCall &c, NodeCall &nc, const char *instead);
  void gemmWithEpilogue(NodeCall &nc, GemmCall c);
  bool storesBf16Halves() const override { return bf16Halves; }
  std::vector<float> staging; // host values on their way up
  // Device scratch: bf16 GEMM operands, attention scores, Newton-Schulz.
  DeviceBuffer scratch;
  // bf16 values widened for the attention kernels that read floats.
  DeviceBuffer wide;
  std::vector<const float *> attentionInputs(NodeCall &nc, int count, float **result);
  void storeAttentionResult(NodeCall &nc, const float *f32);
  float *packedAttentionInputs(NodeCall &nc, const AttentionIo &io, int count);
  void attentionFloats(NodeCall &nc, const AttentionDims &a, std::array<const float *, 3> in,
                       float *out);
  void attentionGradFloats(NodeCall &nc, const AttentionDims &a, std::array<const float *, 4> in,
                           float *out);
  // Yielded values, copied here during a run and downloaded at its end
  // (collect), or after a graph's launch; `yielded` of them so far.
  DeviceBuffer yields;
  int64_t yielded = 0;
  int64_t epoch = 0; // bumped when scratch or yields move

  // CUDA graphs. Each Input and StepCount node has a device buffer, its
  // stage, that its graph copies from; a recording keeps the host work
  // that checks ids and brings the inputs to the stages (page-locked
  // memory, then a copy queued before the graph), redone before each
  // launch.
  using HostWork = std::function<void(const TensorMap &, int64_t)>;
  struct Recording {
    std::vector<HostWork> before;
    int64_t yields = 0;
  };
  bool recording = false;
  Recording open;
  std::map<int, Recording> graphs; // by the backend's graph id
  // An input's stage and its mark (GpuBackend::newMark), recorded in the
  // graph after the graph's read of the stage: the next step's copy up (on
  // the copy stream) waits for it, so that it overwrites the stage while
  // the graph goes on, not before the graph has read it.
  struct Stage {
    Ptr at = 0;
    int mark = -1;
  };
  std::map<std::pair<int, int>, Stage> stages; // by (phase, node)

  // Page-locked buffers the stream reads (inputs on their way up) or
  // writes (yields, the states' flag) after the host has moved on. One is
  // taken again only once the fence after its last use has passed, so
  // nothing waits while the device is less than kPinnedEach uses behind.
  // A buffer the device writes for the host (a loss, the states' flag) is
  // `held` besides, until the host has read it (releaseResults).
  struct Pinned {
    float *p = nullptr;
    int64_t fence = -1; // -1: taken since the last fence
    bool held = false;
  };
  static constexpr size_t kPinnedEach = 8;
  std::map<int64_t, std::vector<Pinned>> pinned; // by use (a node, a size)
  std::vector<std::pair<int64_t, size_t>> unfenced;
  float *takePinned(int64_t use, int64_t n, bool held = false);
  void releaseResults(const std::vector<const float *> &read) override {
    for (auto &[use, bufs] : pinned)
      for (Pinned &b : bufs)
        if (b.held && std::find(read.begin(), read.end(), b.p) != read.end())
          b.held = false;
  }
  // Queued steps: where replays leave their yields (null: collected now).
  std::vector<std::pair<const float *, int64_t>> *yieldSink = nullptr;

  // Multi-tensor launches (MultiTensor.h): the groups of the model's
  // kernels, and each group's table in device memory, by its first node.
  MultiTensorKernels multi;
  struct Table {
    std::vector<long long> host;
    Ptr device = 0;
  };
  std::map<std::pair<int, int>, Table> tables;
  // anyNonFinite: its table (states do not move) and its flag.
  Table finiteTable;
  Ptr finiteFlag = 0;
  bool anyNonFinite(const std::vector<std::pair<const float *, int64_t>> &tensors) override;
  bool launchNonFiniteCheck(const std::vector<std::pair<const float *, int64_t>> &tensors);
  static constexpr int64_t kFlagUse = INT64_MIN; // takePinned's use for the flag
  std::string multiKernel(const std::string &name) const override {
    auto it = multi.groupOf.find(name);
    if (it == multi.groupOf.end() || !hasKernel(it->second) ||
        (multi.sums.count(it->second) && !hasKernel(it->second + "_finish")))
      return "";
    return it->second;
  }
  bool execGroup(PlanExecutor::Impl &rt, const PhasePlan &p,
                 const std::vector<int> &members) override;
  bool execSums(PlanExecutor::Impl &rt, const PhasePlan &p, const std::vector<int> &members,
                const std::string &fnName);
  std::string chainKernel(const std::string &signature) const override {
    auto it = multi.chains.find(signature);
    return it != multi.chains.end() && hasKernel(it->second) ? it->second : "";
  }
  bool execChain(PlanExecutor::Impl &rt, const PhasePlan &p,
                 const PhasePlan::ChainRun &run) override;
  // The update's writes: which state each node's value becomes (written in
  // place, or committed after the phase), where states are checked as
  // they are written.
  std::map<int, int> statesWritten(const PhasePlan &p, const std::vector<int> &nodes) const;
  // A multi-tensor or chain table to the device (cached by `key`) and its
  // launch of `fnName` over `blocks` blocks of 256 threads (with `extra`
  // as a second argument where not null).
  void launchTable(const PhasePlan &p, int key, const std::vector<long long> &table,
                   long long blocks, const std::string &fnName, const void *extra = nullptr);

  ~CudaPlanDevice() override {
    try {
      for (DeviceBuffer *b : {&scratch, &yields, &wide})
        if (b->data)
          gpu->free(dptr(b->data));
      for (auto &[k, t] : tables)
        if (t.device)
          gpu->free(t.device);
      for (Ptr p : {finiteTable.device, finiteFlag})
        if (p)
          gpu->free(p);
      for (auto &[k, st] : stages)
        gpu->free(st.at);
    } catch (...) {
    }
  }
  // Where the host must wait for the device (or allocate): not while
  // recording a graph.
  void hostWork(const char *what) const {
    if (recording)
      throw NotRecordable(std::string(what) + " inside the run");
  }
  bool canRecord() const override { return gpu->canRecord(); }
  void beginRecording() override {
    gpu->beginRecording();
    recording = true;
    open = Recording{};
    yielded = 0;
  }
  int endRecording() override {
    recording = false;
    int id = gpu->endRecording();
    open.yields = yielded;
    yielded = 0;
    graphs[id] = std::move(open);
    return id;
  }
  void abandonRecording() override {
    recording = false;
    yielded = 0;
    gpu->abandonRecording();
  }
  void replay(int graph, const TensorMap &inputs, int64_t t, StepResult &result) override {
    const Recording &r = graphs.at(graph);
    try {
      for (const HostWork &w : r.before) // (each input: its copy up, queued)
        w(inputs, t);
    } catch (...) { // (a bad batch: the copies queued so far joined all the same)
      gpu->joinCopies();
      throw;
    }
    if (!r.before.empty())
      gpu->joinCopies();
    gpu->launchGraph(graph);
    yielded = r.yields;
    if (yieldSink && yielded > 0) { // left on their way to the host
      float *p = takePinned(-yielded, yielded, /*held=*/true);
      gpu->downloadAsync(p, dptr(yields.data), sizeof(float) * yielded);
      yieldSink->emplace_back(p, yielded);
      yielded = 0;
    }
    collect(result);
    if (!unfenced.empty())
      fence();
  }
  void dropRecordings() override {
    gpu->dropGraphs();
    graphs.clear();
  }
  bool queues() const override { return gpu->canRecord(); }
  void deferYields(std::vector<std::pair<const float *, int64_t>> *sink) override {
    yieldSink = sink;
  }
  // The update's multi-tensor kernels flag the states they write (the flag
  // reset at its start); `checked`: those states, as of the update's last
  // run that was not a replay (replays run the same kernels).
  std::set<const float *> checked;
  void beginUpdate() override {
    if (!finiteFlag) {
      hostWork("the states' flag");
      finiteFlag = gpu->alloc(sizeof(float));
    }
    checked.clear();
    gpu->memsetAsync(finiteFlag, 0, 1);
  }
  // The states' check after an update: the states its kernels did not
  // check as they wrote them, into the same flag, then the flag.
  const float *
  queueNonFiniteCheck(const std::vector<std::pair<const float *, int64_t>> &tensors) override {
    if (!finiteFlag)
      return nullptr; // (no update ran)
    std::vector<std::pair<const float *, int64_t>> rest;
    for (auto t : tensors)
      if (!checked.count(t.first))
        rest.push_back(t);
    launchNonFiniteCheck(rest);
    float *p = takePinned(kFlagUse, 1, /*held=*/true);
    gpu->downloadAsync(p, finiteFlag, sizeof(float));
    return p;
  }
  int64_t fence() override {
    const int64_t ticket = gpu->fence();
    for (auto [use, k] : unfenced)
      pinned[use][k].fence = ticket;
    unfenced.clear();
    return ticket;
  }
  void waitFence(int64_t ticket) override { gpu->waitFence(ticket); }
  int64_t memoryEpoch() const override { return epoch; }
  void collect(StepResult &result) override {
    if (recording || yielded == 0)
      return;
    std::vector<float> v = fetch(yields.data, yielded);
    for (float x : v)
      result.outputs.push_back(static_cast<double>(x));
    yielded = 0;
  }
  // Node (phase, i)'s stage of n floats and its mark: made by an eager
  // run, read by recordings (null where the device cannot record).
  const Stage *stage(const NodeCall &nc, int64_t n) {
    auto key = std::make_pair(static_cast<int>(nc.p.phase), nc.i);
    auto it = stages.find(key);
    if (it != stages.end())
      return &it->second;
    if (!gpu->canRecord())
      return nullptr;
    hostWork("an input's stage");
    Stage st{gpu->alloc(sizeof(float) * static_cast<size_t>(n)), gpu->newMark()};
    return &(stages[key] = st);
  }
  // The host work of a recorded Input or StepCount node: `fill` writes its
  // n floats into page-locked memory, then their copy to its stage is
  // queued on the copy stream, after the last launch's read of the stage
  // (its mark), and the stream waits for the copies before the graph
  // (replay's joinCopies), which copies the stage to the node's value.
  void recordInput(const NodeCall &nc, int64_t n,
                   std::function<void(float *, const TensorMap &, int64_t)> fill) {
    const Stage *st = stage(nc, n);
    if (!st)
      throw NotRecordable("an input without a stage");
    const Ptr to = st->at;
    const int mark = st->mark;
    const int64_t use = (static_cast<int64_t>(nc.p.phase) << 32) + nc.i;
    open.before.push_back([this, to, use, n, fill, mark](const TensorMap &inputs, int64_t t) {
      float *p = takePinned(use, n);
      fill(p, inputs, t);
      gpu->uploadAfter(mark, to, p, sizeof(float) * static_cast<size_t>(n));
    });
    copy(nc.out, reinterpret_cast<const float *>(to), n);
    gpu->recordMark(mark);
  }

  const char *name() const override { return deviceName.c_str(); }
  bool hasKernel(const std::string &name) const override {
    if (!kernelFns.count(name))
      if (void *f = gpu->modelFunction(name))
        kernelFns[name] = f;
    return kernelFns.count(name) != 0;
  }
  float *alloc(int64_t n) override {
    hostWork("an allocation");
    Ptr p = gpu->alloc(static_cast<size_t>(alignUp(n)) * sizeof(float));
    gpu->memsetAsync(p, 0, static_cast<size_t>(alignUp(n)));
    return reinterpret_cast<float *>(p);
  }
  void release(float *p) override {
    hostWork("a free");
    gpu->free(dptr(p));
  }
  void upload(float *dst, const float *host, int64_t n) override {
    gpu->uploadAsync(dptr(dst), host, sizeof(float) * n);
  }
  void download(float *host, const float *src, int64_t n) override {
    hostWork("a download");
    gpu->downloadSync(host, dptr(src), sizeof(float) * n);
  }
  void copy(float *dst, const float *src, int64_t n) override {
    gpu->copyAsync(dptr(dst), dptr(src), sizeof(float) * n);
  }
  void accumulate(float *dst, const float *src, int64_t n) override {
    launch("st_accumulate", n, n, dst, src);
  }
  void divide(float *dst, int64_t n, float d) override { launch("st_divide", n, n, dst, d); }
  void finish() override {
    hostWork("a wait for the device");
    gpu->synchronize();
  }
  bool onDevice() const override { return true; }
  void *stream() override { return gpu->nativeStream(); }
  bool idle() override {
    hostWork("a query of the stream");
    return gpu->streamIdle();
  }
  void exec(PlanExecutor::Impl &rt, const PhasePlan &p, int i, const TensorMap &inputs, int64_t t,
            StepResult &result) override;

  // Each op kind's implementation on the GPU, in one table (OpTable.h).
  using Handler = void (CudaPlanDevice::*)(NodeCall &);
  static const OpTable<Handler> &ops();
  STRETTO_PLAN_DEVICE_HANDLERS
  void checkIds(NodeCall &nc, int operand, int64_t limit, const char *what);
  bool splitRowSums(NodeCall &nc, std::vector<void *> &params);
  // The parts splitRowSums splits `rows` rows of `len` elements of kernel
  // `name` into: 1 where it does not split them.
  int64_t rowSumParts(int64_t rows, int64_t len, const std::string &name) const;
  // The block size of a row-sum kernel's own launch (one row a block).
  static constexpr unsigned kRowSumBlock = 128;
  // An entry's blocks of 256 threads in a multi-tensor or chain launch: a
  // thread per eight elements (their vector step), at most 1024.
  static long long entryBlocks(long long count) {
    return std::min<long long>(std::max<long long>((count + 2047) / 2048, 1), 1024);
  }

  // Queues runtime op `name` over `items` work items (grid-stride loops)
  // with the given arguments (by value, in the kernel's order).
  template <typename... Args> void launch(const char *name, int64_t items, Args... args) {
    launchShaped(name, gridFor(items, 256), 256, args...);
  }
  template <typename... Args>
  void launchShaped(const char *name, unsigned grid, unsigned block, Args... args) {
    void *params[] = {static_cast<void *>(&args)...};
    gpu->launch(fn(name), grid, block, params, static_cast<int>(sizeof...(Args)), name);
  }
  // Queues a *_rows16 kernel: a half-warp per row (16 threads), 256 threads
  // a block.
  template <typename... Args>
  void launchHalfRows(const char *name, int64_t rows, Args... args) {
    launchShaped(name, gridFor(16 * rows, 256), 256, args...);
  }
  // Queues a kernel that gives each warp tiles of 16 rows (RuntimeOps.cu's
  // ST_BLOCK_GROUPS: the tensor-core attention), 4 warps a block.
  template <typename... Args>
  void launchWarpTiles(const char *name, int64_t tiles, Args... args) {
    launchShaped(name, gridFor(32 * tiles, 128), 128, args...);
  }
  // The device's multiprocessors (132, an H100's, where it does not say).
  unsigned multiprocessors() const {
    return gpu->multiprocessors() > 0 ? static_cast<unsigned>(gpu->multiprocessors()) : 132u;
  }
  static unsigned gridFor(int64_t items, unsigned block) {
    int64_t g = (std::max<int64_t>(items, 1) + block - 1) / block;
    return static_cast<unsigned>(std::min<int64_t>(g, 65535));
  }
  void *fn(const char *name) {
    auto it = fns.find(name);
    if (it != fns.end())
      return it->second;
    void *f = gpu->opsFunction(name);
    if (!f)
      throw std::runtime_error(std::string("the CUDA runtime's kernels lack ") + name);
    return fns[name] = f;
  }
  // `floats` of device scratch (contents not kept across calls).
  float *scratchFloats(int64_t floats) { return grown(scratch, floats, "more device scratch"); }
  // `b`, holding at least `floats` floats (grown, its contents dropped).
  float *grown(DeviceBuffer &b, int64_t floats, const char *what) {
    if (b.size < floats) {
      hostWork(what);
      ++epoch;
      if (b.data) // after the queued work that uses it (grows only early on)
        gpu->free(dptr(b.data));
      b.size = alignUp(floats);
      b.data = reinterpret_cast<float *>(gpu->alloc(b.size * sizeof(float)));
    }
    return b.data;
  }
  // A GEMM through cuBLASLt; bf16: both operands rounded into bf16 copies
  // in device scratch (after `scratchUsed` floats the caller keeps there),
  // except an operand stored in bf16 already (aHalf, bHalf: a store_bf16
  // kernel's two-byte value), which cuBLASLt reads where it is.
  void gemm(GemmCall g, const float *a, int64_t aCount, const float *b, int64_t bCount, void *c,
            bool bf16, int64_t scratchUsed = 0, bool aHalf = false, bool bHalf = false) {
    if (!bf16) {
      if (aHalf || bHalf)
        throw std::runtime_error("a GEMM with f32 operands reads a value stored in bf16 (run "
                                 "this plan with bf16 GEMMs)");
      g.tf32 = tf32;
      batched(g, a, b, c, 1);
      return;
    }
    // Two bf16 values per float of scratch.
    int64_t aF = aHalf ? 0 : alignUp((aCount + 1) / 2), bF = bHalf ? 0 : alignUp((bCount + 1) / 2);
    float *base = aF + bF ? scratchFloats(scratchUsed + aF + bF) + scratchUsed : nullptr;
    const void *a16 = a, *b16 = b;
    if (!aHalf) {
      launch("st_to_bf16", aCount, aCount, a, base);
      a16 = base;
    }
    if (!bHalf) {
      launch("st_to_bf16", bCount, bCount, b, base + aF);
      b16 = base + aF;
    }
    g.bf16 = true;
    batched(g, a16, b16, c, 2);
  }
  // A batch with a shared operand (stride 0) as one GEMM per item: not
  // every cuBLASLt algorithm takes a zero batch stride.
  void batched(GemmCall g, const void *a, const void *b, void *c, int bytes) {
    if (g.batch == 1 || (g.strideA != 0 && g.strideB != 0)) {
      gpu->gemm(g, a, b, c);
      return;
    }
    GemmCall one = g;
    one.batch = 1;
    const int outBytes = g.bf16Out ? 2 : 4;
    for (int64_t stride : {g.strideA * bytes, g.strideB * bytes, g.strideC * outBytes})
      while (one.align > 1 && stride % one.align != 0)
        one.align /= 2; // item i's pointers are base + i * stride
    one.strideA = one.strideB = one.strideC = 0;
    for (int64_t i = 0; i < g.batch; ++i)
      gpu->gemm(one, static_cast<const char *>(a) + i * g.strideA * bytes,
                static_cast<const char *>(b) + i * g.strideB * bytes,
                static_cast<char *>(c) + i * g.strideC * outBytes);
  }
  std::vector<float> fetch(const float *src, int64_t n) {
    std::vector<float> v(n);
    download(v.data(), src, n);
    return v;
  }
};

void CudaPlanDevice::exec(PlanExecutor::Impl &rt, const PhasePlan &p, int i,
                          const TensorMap &inputs, int64_t t, StepResult &result) {
  NodeCall nc(rt, p, i, inputs, t, result);
  runNode(*this, ops(), nc);
}

const OpTable<CudaPlanDevice::Handler> &CudaPlanDevice::ops() {
  static const OpTable<Handler> table = planDeviceOps<CudaPlanDevice>("CUDA");
  return table;
}

// Ids are checked on the host: from the step's inputs when they are one (no
// wait), else downloaded (a wait for the stream; they are small).
void CudaPlanDevice::checkIds(NodeCall &nc, int operand, int64_t limit, const char *what) {
  int64_t rows = numElements(nc.inShape(operand));
  const Node &src = nc.nodes[nc.n.operands[operand]];
  auto given = src.kind == OpKind::Input ? nc.inputs.find(src.name) : nc.inputs.end();
  std::vector<float> ids =
      given != nc.inputs.end()
          ? std::vector<float>(given->second.data.begin(), given->second.data.begin() + rows)
          : fetch(nc.in(operand), rows);
  nc.rt.checkIds(nc.i, ids.data(), rows, limit, what);
  if (recording) // each launch checks its own ids first
    open.before.push_back([&rt = nc.rt, i = nc.i, name = src.name, rows, limit,
                           what](const TensorMap &inputs, int64_t) {
      const std::vector<double> &d = inputs.at(name).data;
      std::vector<float> v(d.begin(), d.begin() + rows);
      rt.checkIds(i, v.data(), rows, limit, what);
    });
}

void CudaPlanDevice::opBinary(NodeCall &nc) {
  StSpace s = spaceOf(nc.n.shape, broadcastStrides(nc.inShape(0), nc.n.shape),
                      broadcastStrides(nc.inShape(1), nc.n.shape));
  launch("st_binary_op", nc.count, opCode(nc.n.kind), nc.count, nc.in(0), nc.in(1), nc.out, s);
}

void CudaPlanDevice::opUnary(NodeCall &nc) {
  StSpace s;
  if (nc.inShape(0) != nc.n.shape)
    s = spaceOf(nc.n.shape, broadcastStrides(nc.inShape(0), nc.n.shape));
  launch("st_unary_op", nc.count, opCode(nc.n.kind), nc.count, nc.in(0), nc.out, s);
}

void CudaPlanDevice::opInput(NodeCall &nc) {
  if (recording)
    return recordInput(
        nc, nc.count,
        [name = nc.n.name, count = nc.count](float *p, const TensorMap &inputs, int64_t) {
          const std::vector<double> &d = inputs.at(name).data;
          std::copy(d.begin(), d.begin() + count, p);
        });
  stage(nc, nc.count);
  // Pageable staging: the driver copies it before returning.
  const std::vector<double> &src = nc.inputs.at(nc.n.name).data;
  staging.assign(src.begin(), src.begin() + nc.count);
  upload(nc.out, staging.data(), nc.count);
}

void CudaPlanDevice::opRead(NodeCall &nc) {
  if (nc.p.slots[nc.i].where == Where::Arena) // a copy (see plan)
    copy(nc.out, nc.rt.readSource(nc.n).data, nc.count);
}

void CudaPlanDevice::opNothing(NodeCall &) {}

void CudaPlanDevice::opStepCount(NodeCall &nc) {
  if (recording)
    return recordInput(
        nc, 1, [](float *p, const TensorMap &, int64_t t) { p[0] = static_cast<float>(t); });
  stage(nc, 1);
  staging.assign(1, static_cast<float>(nc.t));
  upload(nc.out, staging.data(), 1);
}

// A page-locked buffer of n floats for `use` whose last use has passed
// (and, for one the device writes for the host, `held`, that the host has
// read): one from before (asked without waiting), a new one while `use`
// has fewer than kPinnedEach (or all are held), else the oldest, once its
// fence has passed.
float *CudaPlanDevice::takePinned(int64_t use, int64_t n, bool held) {
  std::vector<Pinned> &bufs = pinned[use];
  size_t pick = bufs.size();
  for (size_t k = 0; k < bufs.size() && pick == bufs.size(); ++k)
    if (!bufs[k].held && bufs[k].fence >= 0 && gpu->fenceDone(bufs[k].fence))
      pick = k;
  if (pick == bufs.size() && bufs.size() >= kPinnedEach) {
    for (size_t k = 0; k < bufs.size(); ++k)
      if (!bufs[k].held && bufs[k].fence >= 0 &&
          (pick == bufs.size() || bufs[k].fence < bufs[pick].fence))
        pick = k;
    if (pick < bufs.size())
      gpu->waitFence(bufs[pick].fence);
  }
  if (pick == bufs.size()) {
    hostWork("page-locking a buffer");
    bufs.push_back(
        {static_cast<float *>(gpu->hostAlloc(sizeof(float) * static_cast<size_t>(n))), -1});
  }
  bufs[pick].fence = -1;
  bufs[pick].held = held;
  unfenced.emplace_back(use, pick);
  return bufs[pick].p;
}

// Yielded scalars are gathered on the device and downloaded together at
// the run's end (collect): one wait a run, none inside it.
void CudaPlanDevice::opYield(NodeCall &nc) {
  const int64_t n = static_cast<int64_t>(nc.n.operands.size());
  if (yields.size < yielded + n) {
    hostWork("more room for yielded values");
    ++epoch;
    DeviceBuffer grown;
    grown.size = alignUp(std::max<int64_t>(64, 2 * (yielded + n)));
    grown.data = reinterpret_cast<float *>(gpu->alloc(grown.size * sizeof(float)));
    if (yields.data) { // this run's earlier yields move along
      copy(grown.data, yields.data, yielded);
      gpu->free(dptr(yields.data));
    }
    yields = grown;
  }
  for (int64_t k = 0; k < n; ++k)
    copy(yields.data + yielded + k, nc.in(static_cast<int>(k)), 1);
  yielded += n;
}

void CudaPlanDevice::opKernel(NodeCall &nc) {
  // KernelSource's launch contract (include/stretto/Runtime/KernelSource.h).
  std::vector<const void *> args;
  for (size_t k = 0; k < nc.n.operands.size(); ++k)
    args.push_back(nc.in(static_cast<int>(k)));
  args.push_back(nc.out);
  std::vector<void *> params;
  for (const void *&a : args)
    params.push_back(&a);
  int kind = nc.n.ints.empty() ? 0 : static_cast<int>(nc.n.ints[0]);
  bool rowSums = kind == 1 && nc.n.ints.size() > 1 && nc.n.ints[1] == 1;
  int64_t rowLen = nc.n.shape.empty() ? 1 : nc.n.shape.back();
  unsigned block = rowSums ? kRowSumBlock : 128, grid;
  if (rowSums && splitRowSums(nc, params))
    return;
  if (rowSums) // a block per row
    grid = static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(nc.count, 1), 65535));
  else if (kind == 2) // a half-warp per row
    block = 256,
    grid = gridFor(16 * (nc.count / std::max<int64_t>(rowLen, 1)), block);
  else if (kind == 0) // element-wise: a thread per eight elements (the
    // emitter's vector step: eight a thread a step in 16-byte words), at
    // most one wave of blocks (16 of 128 threads a multiprocessor)
    grid = std::min<unsigned>(gridFor((nc.count + 7) / 8, block), 16u * multiprocessors());
  else // a thread per column
    grid = gridFor(nc.count, block);
  gpu->launch(kernelFns.at(nc.n.name), grid, block, params.data(), static_cast<int>(params.size()),
              nc.n.name.c_str());
}

// Element-wise kernels with one element function (MultiTensor.h) as one
// launch: a table of their pointers and counts, each kernel's share of the
// grid (entryBlocks: a thread per eight elements, up to 1024 blocks of 256
// threads), uploaded when it changes (the
// buffers' addresses are fixed, so once). False (run one by one) where an
// output overlaps another member's input or output, or the grid would not
// fit.
bool CudaPlanDevice::execGroup(PlanExecutor::Impl &rt, const PhasePlan &p,
                               const std::vector<int> &members) {
  const std::vector<Node> &nodes = rt.graph.phase(p.phase);
  const std::string fnName = multiKernel(nodes[members.front()].name);
  if (fnName.empty())
    return false;
  if (multi.sums.count(fnName))
    return execSums(rt, p, members, fnName);
  const int n = multi.inputs.at(fnName);
  const std::map<int, int> stateOf = statesWritten(p, members);
  std::vector<long long> table{static_cast<long long>(members.size())};
  using Range = std::pair<uintptr_t, uintptr_t>;
  std::vector<std::vector<Range>> reads(members.size());
  std::vector<Range> writes(members.size());
  long long first = 0;
  for (size_t m = 0; m < members.size(); ++m) {
    const Node &k = nodes[members[m]];
    if (static_cast<int>(k.operands.size()) != n || multiKernel(k.name) != fnName)
      return false;
    for (int o : k.operands) {
      auto at = reinterpret_cast<uintptr_t>(rt.val[o]);
      table.push_back(static_cast<long long>(at));
      reads[m].push_back({at, at + sizeof(float) * numElements(nodes[o].shape)});
    }
    const long long count = numElements(k.shape);
    auto out = reinterpret_cast<uintptr_t>(rt.val[members[m]]);
    writes[m] = {out, out + sizeof(float) * count};
    table.push_back(static_cast<long long>(out));
    // (a state's new value: checked for infs and NaNs as it is written)
    auto w = stateOf.find(members[m]);
    table.push_back(w == stateOf.end() ? 0LL : static_cast<long long>(finiteFlag));
    if (w != stateOf.end())
      checked.insert(rt.states[w->second].data);
    table.push_back(count);
    table.push_back(first);
    first += entryBlocks(count);
  }
  auto overlap = [](Range a, Range b) { return a.first < b.second && b.first < a.second; };
  for (size_t a = 0; a < members.size(); ++a)
    for (size_t b = 0; b < members.size(); ++b) {
      if (a == b)
        continue;
      if (overlap(writes[a], writes[b]))
        return false;
      for (Range r : reads[b])
        if (overlap(writes[a], r))
          return false;
    }
  if (first > 65535)
    return false;
  launchTable(p, members.front(), table, first, fnName);
  return true;
}

// Whole-tensor sums with one value function (MultiTensor.h's sums) as two
// launches: every sum's parts, each entry split as splitRowSums would
// split its kernel (or summed whole by kRowSumBlock threads, as its own
// launch), then the parts of each split entry added. False (run one by
// one) where a member is not of the group, reads a two-byte value, or its
// output overlaps a member's input or output.
bool CudaPlanDevice::execSums(PlanExecutor::Impl &rt, const PhasePlan &p,
                              const std::vector<int> &members, const std::string &fnName) {
  const std::vector<Node> &nodes = rt.graph.phase(p.phase);
  const int n = multi.inputs.at(fnName);
  std::vector<long long> table{static_cast<long long>(members.size())};
  using Range = std::pair<uintptr_t, uintptr_t>;
  std::vector<Range> reads, writes;
  long long first = 0;
  for (int m : members) {
    const Node &k = nodes[m];
    if (static_cast<int>(k.operands.size()) != n || multiKernel(k.name) != fnName ||
        numElements(k.shape) != 1)
      return false;
    int64_t len = 0;
    for (int o : k.operands) {
      if (p.slots[o].half)
        return false;
      auto at = reinterpret_cast<uintptr_t>(rt.val[o]);
      table.push_back(static_cast<long long>(at));
      len = std::max(len, numElements(nodes[o].shape));
      reads.push_back({at, at + sizeof(float) * numElements(nodes[o].shape)});
    }
    auto out = reinterpret_cast<uintptr_t>(rt.val[m]);
    writes.push_back({out, out + sizeof(float)});
    const int64_t parts = rowSumParts(1, len, k.name);
    table.push_back(static_cast<long long>(out));
    table.push_back(parts);
    table.push_back(parts > 1 ? 256 : kRowSumBlock);
    table.push_back(len);
    table.push_back(first);
    first += parts;
  }
  auto overlap = [](Range a, Range b) { return a.first < b.second && b.first < a.second; };
  for (size_t a = 0; a < writes.size(); ++a) {
    for (size_t b = 0; b < writes.size(); ++b)
      if (a != b && overlap(writes[a], writes[b]))
        return false;
    for (Range r : reads)
      if (overlap(writes[a], r))
        return false;
  }
  if (first > 65535 || members.size() > 65535)
    return false;
  float *partials = scratchFloats(first);
  launchTable(p, members.front(), table, first, fnName, partials);
  const void *t = reinterpret_cast<const void *>(
      tables.at({static_cast<int>(p.phase), members.front()}).device);
  const void *parts = partials;
  void *params[] = {&t, &parts};
  const std::string finish = fnName + "_finish";
  gpu->launch(kernelFns.at(finish), static_cast<unsigned>(members.size()), 256, params, 2,
              finish.c_str());
  return true;
}

std::map<int, int> CudaPlanDevice::statesWritten(const PhasePlan &p,
                                                 const std::vector<int> &nodes) const {
  std::map<int, int> stateOf;
  if (p.phase == Phase::Update && finiteFlag) {
    for (auto [s, node] : p.writes)
      stateOf[node] = s;
    for (int m : nodes)
      if (p.slots[m].where == Where::State)
        stateOf[m] = p.slots[m].ref;
  }
  return stateOf;
}

void CudaPlanDevice::launchTable(const PhasePlan &p, int key, const std::vector<long long> &table,
                                 long long blocks, const std::string &fnName, const void *extra) {
  Table &t = tables[{static_cast<int>(p.phase), key}];
  if (t.host != table) {
    hostWork("a new multi-tensor table");
    if (!t.device || t.host.size() != table.size()) {
      if (t.device)
        gpu->free(t.device);
      ++epoch;
      t.device = gpu->alloc(sizeof(long long) * table.size());
    }
    t.host = table; // pageable: the driver copies it before the call returns
    gpu->uploadAsync(t.device, t.host.data(), sizeof(long long) * table.size());
  }
  const void *arg = reinterpret_cast<const void *>(t.device);
  void *params[] = {&arg, &extra};
  gpu->launch(kernelFns.at(fnName), static_cast<unsigned>(blocks), 256, params, extra ? 2 : 1,
              fnName.c_str());
}

// A chain run (UpdateChains.h) as one launch of its chain kernel
// (MultiTensor.h's addChainKernels): per chain, each stage's inputs, output
// and flag, then the element count and the chain's first block. False
// (its groups run instead) where a chain's output overlaps another chain's
// input or output, a stage is not the kernel the signature names, or the
// grid would not fit.
bool CudaPlanDevice::execChain(PlanExecutor::Impl &rt, const PhasePlan &p,
                               const PhasePlan::ChainRun &run) {
  const std::string fnName = chainKernel(run.signature);
  if (fnName.empty() || run.entries.empty())
    return false;
  const std::vector<Node> &nodes = rt.graph.phase(p.phase);
  std::vector<int> all;
  for (const std::vector<int> &entry : run.entries)
    all.insert(all.end(), entry.begin(), entry.end());
  const std::map<int, int> stateOf = statesWritten(p, all);
  using Range = std::pair<uintptr_t, uintptr_t>;
  std::vector<std::vector<Range>> reads(run.entries.size()), writes(run.entries.size());
  std::vector<long long> table{static_cast<long long>(run.entries.size())};
  long long first = 0;
  for (size_t e = 0; e < run.entries.size(); ++e) {
    const std::vector<int> &entry = run.entries[e];
    std::vector<std::string> stages;
    for (int m : entry) {
      const Node &k = nodes[m];
      const std::string stage = multiKernel(k.name);
      if (stage.empty() || static_cast<int>(k.operands.size()) != multi.inputs.at(stage) ||
          k.shape != nodes[entry.back()].shape)
        return false;
      stages.push_back(stage);
      for (int o : k.operands) {
        auto at = reinterpret_cast<uintptr_t>(rt.val[o]);
        table.push_back(static_cast<long long>(at));
        reads[e].push_back({at, at + sizeof(float) * numElements(nodes[o].shape)});
      }
      auto out = reinterpret_cast<uintptr_t>(rt.val[m]);
      writes[e].push_back({out, out + sizeof(float) * numElements(k.shape)});
      table.push_back(static_cast<long long>(out));
      auto w = stateOf.find(m);
      table.push_back(w == stateOf.end() ? 0LL : static_cast<long long>(finiteFlag));
      if (w != stateOf.end())
        checked.insert(rt.states[w->second].data);
    }
    if (planning::chainSignature(stages) != run.signature)
      return false;
    const long long count = numElements(nodes[entry.back()].shape);
    table.push_back(count);
    table.push_back(first);
    first += entryBlocks(count);
  }
  auto overlap = [](Range a, Range b) { return a.first < b.second && b.first < a.second; };
  for (size_t a = 0; a < run.entries.size(); ++a)
    for (size_t b = 0; b < run.entries.size(); ++b)
      if (a != b)
        for (Range wa : writes[a]) {
          for (Range wb : writes[b])
            if (overlap(wa, wb))
              return false;
          for (Range rb : reads[b])
            if (overlap(wa, rb))
              return false;
        }
  if (first > 65535)
    return false;
  launchTable(p, -1 - run.first, table, first, fnName);
  return true;
}

// One launch over every tensor (st_flag_nonfinite), then the flag's four
// bytes to the host: a step's check of its states reads them on the device
// (a gigabyte for gpt-small with AdamW) instead of bringing them up.
bool CudaPlanDevice::anyNonFinite(const std::vector<std::pair<const float *, int64_t>> &tensors) {
  if (!finiteFlag) {
    hostWork("the states' flag");
    finiteFlag = gpu->alloc(sizeof(float));
  }
  gpu->memsetAsync(finiteFlag, 0, 1);
  if (!launchNonFiniteCheck(tensors))
    return false;
  float bad = 0;
  gpu->downloadSync(&bad, finiteFlag, sizeof(float));
  return bad != 0;
}

// Queues st_flag_nonfinite over the tensors into finiteFlag (it sets the
// flag, never clears it); false (and nothing queued) when they hold no
// element.
bool CudaPlanDevice::launchNonFiniteCheck(
    const std::vector<std::pair<const float *, int64_t>> &tensors) {
  constexpr long long kChunk = 4096; // RuntimeOps.cu's ST_FINITE_CHUNK
  std::vector<long long> table{0, 0};
  for (auto [p, n] : tensors) {
    if (n <= 0)
      continue;
    table.push_back(static_cast<long long>(reinterpret_cast<uintptr_t>(p)));
    table.push_back(n);
    table.push_back(table[1]);
    table[1] += (n + kChunk - 1) / kChunk;
    ++table[0];
  }
  if (table[0] == 0)
    return false;
  hostWork("a check of the states");
  if (finiteTable.host != table) {
    if (finiteTable.device)
      gpu->free(finiteTable.device);
    finiteTable.device = gpu->alloc(sizeof(long long) * table.size());
    finiteTable.host = table;
    gpu->uploadAsync(finiteTable.device, finiteTable.host.data(),
                     sizeof(long long) * table.size());
  }
  const void *t = reinterpret_cast<const void *>(finiteTable.device);
  float *flag = reinterpret_cast<float *>(finiteFlag);
  void *params[] = {&t, &flag};
  gpu->launch(fn("st_flag_nonfinite"), gridFor(table[1] * 256, 256), 256, params, 2,
              "st_flag_nonfinite");
  return true;
}

int64_t CudaPlanDevice::rowSumParts(int64_t rows, int64_t len, const std::string &name) const {
  const int sms = static_cast<int>(multiprocessors());
  const int64_t parts = std::min<int64_t>((len + 4095) / 4096, 8 * sms / rows);
  return rows >= sms || parts < 2 || !hasKernel(name + "_parts") ? 1 : parts;
}

// A row-sum kernel with fewer rows than the device has multiprocessors and
// long rows (a whole-tensor sum of squares for gradient clipping) runs as
// its NAME_parts twin over rows x parts blocks, about 8 blocks a
// multiprocessor, then st_row_sums adds each row's parts in order. False
// (nothing queued) where that does not pay or the kernel has no twin (the
// C++ twins of an emulated GPU).
bool CudaPlanDevice::splitRowSums(NodeCall &nc, std::vector<void *> &params) {
  const int64_t rows = std::max<int64_t>(nc.count, 1);
  int64_t len = 0;
  for (size_t k = 0; k < nc.n.operands.size(); ++k)
    len = std::max(len, numElements(nc.inShape(static_cast<int>(k))) / rows);
  const int64_t parts = rowSumParts(rows, len, nc.n.name);
  const std::string twin = nc.n.name + "_parts";
  if (parts < 2)
    return false;
  float *partials = scratchFloats(rows * parts);
  const void *out = partials;
  params.back() = &out; // the output's place: the partials
  gpu->launch(kernelFns.at(twin), static_cast<unsigned>(rows * parts), 256,
              params.data(), static_cast<int>(params.size()), twin.c_str());
  launchShaped("st_row_sums", static_cast<unsigned>(rows), 256, rows, parts,
               static_cast<const float *>(partials), nc.out);
  return true;
}

void CudaPlanDevice::opGemm(NodeCall &nc) {
  GemmDims g = gemmDims(nc.n, nc.inShape(0), nc.inShape(1));
  GemmCall c;
  c.ta = g.ta, c.tb = g.tb, c.alpha = static_cast<float>(g.alpha);
  c.m = g.m, c.n = g.n, c.k = g.k, c.batch = g.batch;
  if (!g.rhsBatched && !g.ta) { // a shared rhs: the batch folds into the rows
    c.m = g.batch * g.m;
    c.batch = 1;
  } else {
    c.strideA = g.m * g.k, c.strideB = g.rhsBatched ? g.k * g.n : 0, c.strideC = g.m * g.n;
  }
  // A result stored in bf16 (kernel-bf16-storage): cuBLASLt writes bf16
  // where it has two bytes, else the f32 result is rounded in place.
  c.bf16Out = nc.p.slots[nc.i].half;
  if (gemmEpilogue(nc.n) == GemmEpilogue::GeluAux)
    gemmWithGeluAux(nc, c);
  else if (nc.n.operands.size() == 3)
    gemmWithEpilogue(nc, c);
  else if (gemmEpilogue(nc.n) == GemmEpilogue::BiasGrad)
    gemmWithBiasGrad(nc, c);
  else
    gemm(c, nc.in(0), numElements(nc.inShape(0)), nc.in(1), numElements(nc.inShape(1)), nc.out,
         nc.bf16, 0, nc.half(0), nc.half(1));
  if (nc.n.dtype == DType::BF16 && !c.bf16Out)
    launch("st_round_f32", nc.count, nc.count, nc.out);
}

static bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Queues the GEMM `c` with its epilogue through cuBLASLt: true if queued.
// Where cuBLASLt has no algorithm for it (GemmRefused, nothing queued),
// `kind` (that epilogue's switch) goes off for the rest of the run, said
// once with what is done `instead`.
bool CudaPlanDevice::gemmByLibrary(bool &kind, const GemmCall &c, NodeCall &nc,
                                   const char *instead) {
  try {
    gemm(c, nc.in(0), numElements(nc.inShape(0)), nc.in(1), numElements(nc.inShape(1)), nc.out,
         nc.bf16, 0, nc.half(0), nc.half(1));
    return true;
  } catch (const GemmRefused &e) {
    std::fprintf(stderr, "stretto: %s: %s from now on\n", e.what(), instead);
    kind = false;
    return false;
  }
}

// A GEMM with a bias or DGELU's x (kernel-gemm-epilogue): cuBLASLt's BIAS
// or DGELU epilogue makes the sum (the scaled product) from the f32
// product before rounding or storing it; where cuBLASLt has no algorithm
// for that (or STRETTO_GEMM_EPILOGUE=0), the product goes to scratch in
// f32 and st_add_bias (st_dgelu) makes the same value, rounded once.
void CudaPlanDevice::gemmWithEpilogue(NodeCall &nc, GemmCall c) {
  const bool dgelu = gemmEpilogue(nc.n) == GemmEpilogue::DGelu;
  if (!dgelu && nc.half(2))
    throw std::runtime_error("a GEMM's bias is stored in bf16; the epilogue reads f32");
  const int64_t aCount = numElements(nc.inShape(0)), bCount = numElements(nc.inShape(1));
  bool &library = dgelu ? dgeluEpilogue : biasEpilogue;
  // (cuBLASLt reads DGELU's x in C's type, two bytes where C has two, with
  // a leading dimension that is a multiple of 8: ours is the row length)
  if (library && aligned16(nc.in(2)) && (!dgelu || (nc.half(2) == c.bf16Out && c.n % 8 == 0))) {
    if (dgelu)
      c.aux = nc.in(2);
    else
      c.bias = nc.in(2);
    if (gemmByLibrary(library, c, nc,
                      dgelu ? "GELU's derivative applied by a kernel after the GEMM"
                            : "bias added by a kernel after the GEMM"))
      return;
  }
  // Scratch: the f32 product, then the operands' bf16 copies (gemm's).
  const int64_t product = alignUp(nc.count);
  scratchFloats(product + alignUp((aCount + 1) / 2) + alignUp((bCount + 1) / 2));
  float *f32 = scratchFloats(product);
  GemmCall plain = c;
  plain.bias = nullptr, plain.aux = nullptr, plain.bf16Out = false;
  gemm(plain, nc.in(0), aCount, nc.in(1), bCount, f32, nc.bf16, product, nc.half(0), nc.half(1));
  if (dgelu)
    launch("st_dgelu", nc.count, nc.count, static_cast<const float *>(f32),
           static_cast<const void *>(nc.in(2)), nc.half(2) ? 1 : 0, static_cast<void *>(nc.out),
           c.bf16Out ? 1 : 0);
  else
    launch("st_add_bias", nc.count, nc.count, static_cast<int64_t>(nc.n.shape.back()),
           static_cast<const float *>(f32), nc.in(2), static_cast<void *>(nc.out),
           c.bf16Out ? 1 : 0);
}

// GELU with its auxiliary output (kernel-gemm-epilogue's gelu_aux): the
// result's first half gelu(s), its second s = the product plus the bias
// (if any), by cuBLASLt's GELU_AUX(_BIAS) epilogue (s its auxiliary
// output, in C's type, leading dimension our row length: a multiple of 8)
// or, where cuBLASLt has no algorithm for it (or STRETTO_GEMM_EPILOGUE=0),
// by st_gelu_aux after the plain GEMM into f32 scratch.
void CudaPlanDevice::gemmWithGeluAux(NodeCall &nc, GemmCall c) {
  const bool bias = nc.n.operands.size() == 3;
  if (bias && nc.half(2))
    throw std::runtime_error("a GEMM's bias is stored in bf16; the epilogue reads f32");
  const int64_t aCount = numElements(nc.inShape(0)), bCount = numElements(nc.inShape(1));
  const int64_t count = nc.count / 2;
  void *sum = reinterpret_cast<char *>(nc.out) + count * (c.bf16Out ? 2 : 4);
  if (geluAuxEpilogue && aligned16(sum) && (!bias || aligned16(nc.in(2))) && c.n % 8 == 0) {
    c.geluAux = sum;
    c.bias = bias ? nc.in(2) : nullptr;
    if (gemmByLibrary(geluAuxEpilogue, c, nc,
                      "GELU and its input stored by a kernel after "
                      "the GEMM"))
      return;
  }
  const int64_t product = alignUp(count);
  scratchFloats(product + alignUp((aCount + 1) / 2) + alignUp((bCount + 1) / 2));
  float *f32 = scratchFloats(product);
  GemmCall plain = c;
  plain.bias = nullptr, plain.geluAux = nullptr, plain.bf16Out = false;
  gemm(plain, nc.in(0), aCount, nc.in(1), bCount, f32, nc.bf16, product, nc.half(0), nc.half(1));
  launch("st_gelu_aux", count, count, static_cast<int64_t>(nc.n.shape.back()),
         static_cast<const float *>(f32), bias ? nc.in(2) : static_cast<const float *>(nullptr),
         static_cast<void *>(nc.out), c.bf16Out ? 1 : 0);
}

// A weight gradient with its bias gradient (kernel-gemm-epilogue's
// bias_grad): the product's M rows, then b's column sums in the last row,
// by cuBLASLt's BGRADA epilogue (our b is its A) or, where cuBLASLt has no
// algorithm for it (or STRETTO_GEMM_EPILOGUE=0), by st_column_sums after
// the plain GEMM (a thread a column, rows in increasing order: the sums
// the reference makes).
void CudaPlanDevice::gemmWithBiasGrad(NodeCall &nc, GemmCall c) {
  const int64_t aCount = numElements(nc.inShape(0)), bCount = numElements(nc.inShape(1));
  float *sums = nc.out + c.m * c.n;
  // (the epilogue's vectors 16-byte aligned, as cuBLASLt wants them: the
  // sums are where the product has a multiple of 4 values)
  if (biasGradEpilogue && aligned16(sums)) {
    c.biasGrad = sums;
    if (gemmByLibrary(biasGradEpilogue, c, nc, "bias gradients summed by a kernel"))
      return;
  }
  c.biasGrad = nullptr;
  gemm(c, nc.in(0), aCount, nc.in(1), bCount, nc.out, nc.bf16, 0, nc.half(0), nc.half(1));
  launch(nc.half(1) ? "st_column_sums16" : "st_column_sums", c.n, int64_t(1), c.k, c.n, nc.in(1),
         sums);
}

void CudaPlanDevice::opMatmul(NodeCall &nc) {
  const Shape &as = nc.inShape(0), &bs = nc.inShape(1);
  GemmCall c;
  c.m = as[as.size() - 2], c.k = as.back(), c.n = bs.back();
  int64_t batch = numElements(Shape(as.begin(), as.end() - 2));
  if (bs.size() > 2) {
    c.batch = batch, c.strideA = c.m * c.k, c.strideB = c.k * c.n, c.strideC = c.m * c.n;
  } else {
    c.m *= batch;
  }
  gemm(c, nc.in(0), numElements(as), nc.in(1), numElements(bs), nc.out, nc.bf16);
}

void CudaPlanDevice::opTranspose(NodeCall &nc) {
  std::vector<int64_t> inSt = stridesOf(nc.inShape(0)), st(nc.n.ints.size());
  for (size_t d = 0; d < nc.n.ints.size(); ++d)
    st[d] = inSt[nc.n.ints[d]];
  // The last axis kept, rows of whole 16-byte chunks, both ends 16-byte
  // aligned: rows moved a chunk a thread (st_gather_rows).
  const size_t rank = nc.n.ints.size(), bytes = nc.half(0) ? 2 : 4;
  const int64_t last = rank ? nc.n.shape.back() : 0;
  const int64_t rowBytes = last * static_cast<int64_t>(bytes);
  if (rank >= 2 && nc.n.ints.back() == static_cast<int64_t>(rank) - 1 && rowBytes % 16 == 0 &&
      nc.count * static_cast<int64_t>(bytes) / 16 < 0x7fffffff &&
      reinterpret_cast<uintptr_t>(nc.in(0)) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(nc.out) % 16 == 0) {
    const int64_t per = 16 / static_cast<int64_t>(bytes), row = last / per,
                  chunks = nc.count / per;
    Shape rows(nc.n.shape.begin(), nc.n.shape.end() - 1);
    std::vector<int64_t> rowSt(st.begin(), st.end() - 1);
    for (int64_t &v : rowSt)
      v /= per; // (whole rows of x: its strides are multiples of the last dim)
    launch("st_gather_rows", chunks, chunks, nc.in(0), int64_t(0), nc.out, row,
           spaceOf(rows, rowSt));
    return;
  }
  launch(nc.half(0) ? "st_gather16" : "st_gather", nc.count, nc.count, nc.in(0), int64_t(0),
         nc.out, spaceOf(nc.n.shape, st));
}

void CudaPlanDevice::opBroadcast(NodeCall &nc) {
  launch("st_gather", nc.count, nc.count, nc.in(0), int64_t(0), nc.out,
         spaceOf(nc.n.shape, broadcastStrides(nc.inShape(0), nc.n.shape)));
}

void CudaPlanDevice::opReduceSum(NodeCall &nc) {
  // [outer, nred, inner] column sums when the summed dims are one block
  // with kept dims after it, else row sums of [count, nred] (the summed
  // dims permuted to the end first unless they already are).
  // A bf16 operand (two bytes an element): the column sums read it as it
  // is; the other forms widen it first.
  const Shape &s = nc.inShape(0);
  ReducedBlock rb = reducedBlock(s, nc.n.ints);
  const bool half = nc.half(0);
  if (!rb.any) {
    if (half)
      launch("st_gather_wide", nc.count, nc.count, nc.in(0), int64_t(0), nc.out, StSpace{});
    else
      copy(nc.out, nc.in(0), nc.count);
    return;
  }
  const float *x = nc.in(0);
  int64_t nred = numElements(s) / std::max<int64_t>(nc.count, 1);
  if (rb.contiguous && rb.inner > 1) {
    // Chunks of rows so that about 2^17 threads run, none under 32 rows.
    const int64_t cols = rb.outer * rb.inner;
    int64_t chunks =
        std::min((int64_t(1) << 17) / std::max<int64_t>(cols, 1), nred / 32);
    if (chunks < 2) {
      launch(half ? "st_column_sums16" : "st_column_sums", nc.count, rb.outer, nred, rb.inner, x,
             nc.out);
      return;
    }
    const int64_t per = (nred + chunks - 1) / chunks;
    chunks = (nred + per - 1) / per;
    float *part = scratchFloats(cols * chunks);
    launch(half ? "st_column_partials16" : "st_column_partials", cols * chunks, rb.outer, nred,
           rb.inner, per, chunks, x, part);
    launch("st_column_combine", cols, rb.outer, chunks, rb.inner,
           static_cast<const float *>(part), nc.out);
    return;
  }
  if (!rb.contiguous) {
    std::vector<char> red(s.size(), 0);
    for (int64_t d : nc.n.ints)
      red[d] = 1;
    Shape perm;
    std::vector<int64_t> st, inSt = stridesOf(s);
    for (int pass = 0; pass < 2; ++pass)
      for (size_t d = 0; d < s.size(); ++d)
        if ((red[d] != 0) == (pass == 1)) {
          perm.push_back(s[d]);
          st.push_back(inSt[d]);
        }
    float *tmp = scratchFloats(numElements(s));
    launch(half ? "st_gather_wide" : "st_gather", numElements(s), numElements(s), x, int64_t(0),
           tmp, spaceOf(perm, st));
    x = tmp;
  } else if (half) {
    float *tmp = scratchFloats(numElements(s));
    launch("st_gather_wide", numElements(s), numElements(s), x, int64_t(0), tmp, StSpace{});
    x = tmp;
  }
  int64_t rows = std::max<int64_t>(nc.count, 1);
  launchShaped("st_row_sums", gridFor(rows, 1), 256, rows, nred, x, nc.out);
}

void CudaPlanDevice::opSliceOrPad(NodeCall &nc) {
  bool isSlice = nc.n.kind == OpKind::Slice;
  if (isSlice && nc.p.slots[nc.i].where == Where::Alias)
    return; // a view of its operand (PlanImpl.h)
  const Shape &big = isSlice ? nc.inShape(0) : nc.n.shape,
              &small = isSlice ? nc.n.shape : nc.inShape(0);
  int64_t axis = nc.n.ints[0];
  std::vector<int64_t> st = stridesOf(big);
  int64_t base = nc.n.ints[1] * st[axis];
  if (isSlice) {
    launch("st_gather", nc.count, nc.count, nc.in(0), base, nc.out, spaceOf(small, st));
  } else {
    gpu->memsetAsync(dptr(nc.out), 0, static_cast<size_t>(nc.count));
    int64_t c = numElements(small);
    launch("st_scatter", c, c, nc.in(0), base, nc.out, spaceOf(small, st));
  }
}

void CudaPlanDevice::opSoftmax(NodeCall &nc) {
  int64_t len = nc.n.shape.back(), rows = nc.count / std::max<int64_t>(len, 1);
  launchHalfRows("st_softmax_rows16", rows, rows, len, nc.n.flag ? 1 : 0, len,
                 nc.in(0), nc.out);
}

void CudaPlanDevice::opNorm(NodeCall &nc) {
  int64_t d = nc.n.shape.back(), rows = nc.count / std::max<int64_t>(d, 1);
  const float *beta = nc.n.kind == OpKind::LayerNorm ? nc.in(2) : nullptr;
  launchHalfRows("st_norm_rows16", rows, rows, d,
                 static_cast<float>(nc.n.floats[0]), nc.in(0), nc.in(1), beta,
                 nc.out);
}

void CudaPlanDevice::opNormGrad(NodeCall &nc) {
  // As the CPU device, in the same order: dx row by row (mean and rstd
  // to the scratch), each chunk's partial dgamma (dbeta) sums, then the
  // chunks added in order.
  const int64_t d = nc.inShape(0).back(), rows = d ? numElements(nc.inShape(0)) / d : 0;
  const int64_t per = normChunkRows(rows), chunks = (rows + per - 1) / per;
  float *mean = scratchFloats(alignUp(2 * rows) + 2 * chunks * d), *rstd = mean + rows;
  float *pg = mean + alignUp(2 * rows), *pb = nc.n.flag ? pg + chunks * d : nullptr;
  // x or dy in bf16, two bytes an element (kernel-bf16-storage): the _x16
  // and _dy16 forms.
  const std::string x16 = std::string(nc.half(0) ? "_x16" : "") + (nc.half(2) ? "_dy16" : "");
  // The rows' epilogue (kernel-norm-grad-epilogue: RuntimeOps.cu's
  // st_norm_grad_put): rounded, an addend, the rows in two bytes where the
  // plan keeps them so (Slot::halfLead; the gain and bias rows after them
  // in four, from halfLeadFloats on).
  const int64_t halfRows = nc.p.slots[nc.i].halfLead; // elements in two bytes
  const bool addend = nc.n.operands.size() == 4, half = halfRows > 0;
  namespace km = kernelmath; // st_norm_grad_epilogue's bits
  const int epi = (nc.n.dtype == DType::BF16 ? km::ST_NG_ROUND : 0) | (addend ? km::ST_NG_ADD : 0) |
                  (addend && nc.half(3) ? km::ST_NG_ADD16 : 0) | (half ? km::ST_NG_OUT16 : 0);
  const void *add = addend ? nc.in(3) : nullptr;
  void *dx = nc.out;
  launchHalfRows(("st_norm_grad_rows16" + x16).c_str(), rows, rows, d,
                 static_cast<float>(nc.n.floats[0]), nc.n.flag ? 1 : 0, nc.in(0), nc.in(1),
                 nc.in(2), epi, add, dx, mean, rstd);
  launch(("st_norm_param_partials" + x16).c_str(), chunks * d, rows, d, per, chunks, nc.in(0),
         nc.in(2), static_cast<const float *>(mean), static_cast<const float *>(rstd), pg, pb);
  float *dgamma = nc.out + (half ? planning::halfLeadFloats(halfRows) : rows * d);
  float *dbeta = nc.n.flag ? dgamma + d : nullptr;
  launch("st_norm_param_grad", d, d, chunks, static_cast<const float *>(pg),
         static_cast<const float *>(pb), dgamma, dbeta);
}

// Which kernels run an attention (and its gradient): the fused kernels on
// tensor cores (RuntimeOps.cu's st_flash_mma_*: f32 inner products from
// split bf16 parts, sm_80 and later, head dims 16, 32 and 64), the fused
// kernels on CUDA cores (st_flash_*: head dims 8 to 64, rows the kernels
// read, `rowsRead`, 16-byte aligned), or the GEMM path (S materialised):
// bf16 GEMMs (every fused kernel is f32) and whatever else. Every path
// rounds P and dS to bf16 before the backward's products where the node
// says so (attention_grad's `bf16`).
// STRETTO_ATTENTION=gemm keeps the GEMM path, =simt the CUDA-core kernels.
struct AttentionKernels {
  std::string prefix, suffix; // st_flash_mma_, _d64: "st_flash_mma_fwd_d64"
  bool tensorCores = false;
  bool fused() const { return !prefix.empty(); }
  std::string name(const char *pass) const { return prefix + pass + suffix; }
};
AttentionKernels attentionKernels(const AttentionDims &a, bool bf16, bool tensorCores,
                                  std::initializer_list<const float *> rowsRead) {
  static const std::string mode = [] {
    const char *env = std::getenv("STRETTO_ATTENTION");
    return std::string(env ? env : "");
  }();
  AttentionKernels k;
  if (mode == "gemm" || bf16 || a.d != a.dv)
    return k;
  if (tensorCores && mode != "simt" && (a.d == 16 || a.d == 32 || a.d == 64)) {
    k.prefix = "st_flash_mma_", k.suffix = "_d" + std::to_string(a.d), k.tensorCores = true;
    return k;
  }
  for (const float *p : rowsRead) // read 16 bytes a load (RuntimeOps.cu's st_ld4)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      return k;
  for (int64_t d : {8, 16, 32, 64})
    if (a.d == d)
      k.prefix = "st_flash_", k.suffix = "_d" + std::to_string(d);
  return k;
}

// The attention's inputs (q, k, v and, for its gradient, g) as floats:
// those stored in bf16 (kernel-bf16-storage: two bytes) widened into
// device memory of their own first, for the kernels that read floats only
// (the CUDA-core kernels and the GEMM path; the tensor-core kernels read
// them where they are).
std::vector<const float *> CudaPlanDevice::attentionInputs(NodeCall &nc, int count,
                                                           float **result) {
  // (and, where the result is stored in two bytes, room for it in floats)
  const bool outHalf = nc.p.slots[nc.i].half;
  int64_t floats = outHalf ? alignUp(nc.count) : 0;
  for (int k = 0; k < count; ++k)
    floats += nc.half(k) ? alignUp(numElements(nc.inShape(k))) : 0;
  std::vector<const float *> in;
  float *at = grown(wide, floats, "more device memory for widened bf16 values");
  *result = nc.out;
  if (outHalf) {
    *result = at;
    at += alignUp(nc.count);
  }
  for (int k = 0; k < count; ++k) {
    if (!nc.half(k)) {
      in.push_back(nc.in(k));
      continue;
    }
    const int64_t n = numElements(nc.inShape(k));
    launch("st_gather_wide", n, n, nc.in(k), int64_t(0), at, StSpace{});
    in.push_back(at);
    at += alignUp(n);
  }
  return in;
}

// The result of an attention computed in floats at `f32` by kernels that
// write floats: where it is stored in bf16, rounded in place, or (two
// bytes) converted from there into its slot.
void CudaPlanDevice::storeAttentionResult(NodeCall &nc, const float *f32) {
  if (nc.p.slots[nc.i].half)
    launch("st_to_bf16", nc.count, nc.count, f32, reinterpret_cast<uint16_t *>(nc.out));
  else if (nc.n.dtype == DType::BF16)
    launch("st_round_f32", nc.count, nc.count, nc.out);
}

// Element `e` of a result (f32, or two bytes where stored so).
void *resultAt(NodeCall &nc, int64_t e) {
  if (nc.p.slots[nc.i].half)
    return reinterpret_cast<uint16_t *>(nc.out) + e;
  return nc.out + e;
}

// RuntimeOps.cu's StRows: where block bh's rows of an attention operand lie.
struct StRows {
  int64_t sb, sh, st;
};
StRows stRows(const ops::HeadRows &r) { return StRows{r.sb, r.sh, r.st}; }

// Where an attention's (or its gradient's) operands and results lie, as
// the kernels read and write them: q, k, v and g [B.., T, D] each, the
// result (o; dq, dk, dv stacked), or kernel-attention-layout's packed qkv
// [B, T, 3, H, D], g and o [B, T, H, D], dq, dk, dv the parts of
// [B, T, 3, H, D]. Element offsets of each operand's start (a part's
// offset in a packed one), and each one's rows.
struct AttentionIo {
  AttentionDims dims;
  bool packed = false;
  ops::HeadRows rq, rk, ro; // q and dq; k, v, dk and dv; o and g (`heads`: H)
  int operand[4] = {0, 1, 2, 3}; // q, k, v, g: which node operand
  int64_t start[4] = {0, 0, 0, 0}, outStart[3] = {0, 0, 0};
};
AttentionIo attentionIo(const NodeCall &nc) {
  AttentionIo io;
  io.packed = packedAttention(nc.n);
  if (!io.packed) {
    io.dims = attentionDims(nc.inShape(0), nc.inShape(1), nc.inShape(2));
    const AttentionDims &a = io.dims;
    io.rq = ops::denseHeadRows(a.tq, a.d), io.rk = ops::denseHeadRows(a.tk, a.d);
    io.ro = ops::denseHeadRows(a.tq, a.dv);
    io.outStart[1] = a.batch * a.tq * a.d;
    io.outStart[2] = io.outStart[1] + a.batch * a.tk * a.d;
    return io;
  }
  const Shape &x = nc.inShape(0); // [B, T, 3, H, D]
  io.dims = packedAttentionDims(x);
  io.rq = io.rk = ops::packedHeadRows(x, 3, 0);
  io.ro = ops::packedHeadRows(x, 1, 0);
  const int64_t hd = x[3] * x[4];
  io.operand[1] = io.operand[2] = 0, io.operand[3] = 1;
  io.start[1] = io.outStart[1] = hd, io.start[2] = io.outStart[2] = 2 * hd;
  return io;
}

// Operand k of q, k, v, g where it starts (two bytes or four an element).
const void *attentionOperand(const NodeCall &nc, const AttentionIo &io, int k) {
  const int o = io.operand[k];
  return nc.half(o)
             ? static_cast<const void *>(reinterpret_cast<const uint16_t *>(nc.in(o)) + io.start[k])
             : static_cast<const void *>(nc.in(o) + io.start[k]);
}

// RuntimeOps.cu's st_flash_mma_* `halves`: which of q, k, v, g (bits 0 to
// 3) are stored in bf16, and whether the result is rounded to bf16 (bit 4,
// store_bf16) and stored in two bytes (bit 5).
int halvesOf(const NodeCall &nc, const AttentionIo &io, int count) {
  int bits = 0;
  for (int k = 0; k < count; ++k)
    bits |= nc.half(io.operand[k]) ? 1 << k : 0;
  if (nc.p.slots[nc.i].half)
    bits |= 32;
  else if (nc.n.dtype == DType::BF16)
    bits |= 16;
  if (attentionRoundsProducts(nc.n))
    bits |= 64;
  return bits;
}

void CudaPlanDevice::opAttention(NodeCall &nc) {
  const AttentionIo io = attentionIo(nc);
  const AttentionDims &a = io.dims;
  const float scale = static_cast<float>(nc.n.floats[0]);
  const int causal = nc.n.flag ? 1 : 0;
  AttentionKernels fk = attentionKernels(a, nc.bf16Inside, tensorCoreAttention, {});
  if (fk.tensorCores) { // q, k and v read where they are, in two bytes or four
    launchWarpTiles(fk.name("fwd").c_str(), a.batch * ((a.tq + 15) / 16), a.batch, a.tq, a.tk,
                    causal, scale, io.rq.heads, stRows(io.rq), stRows(io.rk), stRows(io.ro),
                    attentionOperand(nc, io, 0), attentionOperand(nc, io, 1),
                    attentionOperand(nc, io, 2), halvesOf(nc, io, 3), resultAt(nc, 0));
    return;
  }
  if (io.packed) { // the other kernels read [B H, T, D] floats
    float *in = packedAttentionInputs(nc, io, 3);
    const int64_t n = a.batch * a.tq * a.d;
    attentionFloats(nc, a, {in, in + n, in + 2 * n}, in + 3 * n);
    launch("st_heads_scatter", n, a.batch, a.tq, a.d, io.rq.heads, stRows(io.ro),
           static_cast<const float *>(in + 3 * n), resultAt(nc, 0), halvesOf(nc, io, 0));
    return;
  }
  float *out = nullptr;
  const std::vector<const float *> in = attentionInputs(nc, 3, &out);
  attentionFloats(nc, a, {in[0], in[1], in[2]}, out);
  storeAttentionResult(nc, out);
}

// A packed attention's q, k, v (and g) gathered into [B H, T, D] floats,
// one after another in `wide`, room for the result after them.
float *CudaPlanDevice::packedAttentionInputs(NodeCall &nc, const AttentionIo &io, int count) {
  const AttentionDims &a = io.dims;
  const int64_t n = a.batch * a.tq * a.d;
  float *at = grown(wide, (count + (count == 4 ? 3 : 1)) * n, "more device memory for attention");
  for (int k = 0; k < count; ++k)
    launch("st_heads_gather", n, a.batch, a.tq, a.d, io.rq.heads, stRows(k == 3 ? io.ro : io.rq),
           attentionOperand(nc, io, k), nc.half(io.operand[k]) ? 1 : 0, at + k * n);
  return at;
}

// Attention of [B.., T, D] floats into floats: the fused kernels on CUDA
// cores where they fit (no T x T matrix), else S = scale Q Kᵀ, masked
// softmax rows, O = P V as two batched GEMMs.
void CudaPlanDevice::attentionFloats(NodeCall &nc, const AttentionDims &a,
                                     std::array<const float *, 3> in, float *out) {
  const float scale = static_cast<float>(nc.n.floats[0]);
  const int causal = nc.n.flag ? 1 : 0;
  const AttentionKernels fk = attentionKernels(a, nc.bf16Inside, false, {in[0], in[1], in[2]});
  const bool rounds = attentionRoundsProducts(nc.n); // (train.attention {bf16})
  if (fk.fused()) {
    const int64_t rows = a.batch * a.tq;
    launch(fk.name("fwd").c_str(), rows, rows, a.tq, a.tk, causal, scale, in[0], in[1], in[2], out,
           rounds ? 1 : 0);
    return;
  }
  const int64_t qCount = a.batch * a.tq * a.d, kCount = a.batch * a.tk * a.d,
                vCount = a.batch * a.tk * a.dv;
  int64_t sCount = a.batch * a.tq * a.tk;
  // S, then room for either product's bf16 operands (see gemm).
  int64_t operands = qCount + kCount + vCount + sCount + 4 * kAlign;
  float *S = scratchFloats(alignUp(sCount) + (nc.bf16Inside ? operands : 0));
  GemmCall qk;
  qk.batch = a.batch, qk.m = a.tq, qk.n = a.tk, qk.k = a.d, qk.tb = true;
  qk.alpha = scale;
  qk.strideA = a.tq * a.d, qk.strideB = a.tk * a.d, qk.strideC = a.tq * a.tk;
  gemm(qk, in[0], qCount, in[1], kCount, S, nc.bf16Inside, alignUp(sCount));
  if (rounds)
    launch("st_attention_weights_rows", a.batch * a.tq, a.batch * a.tq, a.tq, a.tk, causal, S);
  else
    launchHalfRows("st_softmax_rows16", a.batch * a.tq, a.batch * a.tq, a.tk, causal, a.tq,
                   static_cast<const float *>(S), S);
  GemmCall pv;
  pv.batch = a.batch, pv.m = a.tq, pv.n = a.dv, pv.k = a.tk;
  pv.strideA = a.tq * a.tk, pv.strideB = a.tk * a.dv, pv.strideC = a.tq * a.dv;
  gemm(pv, S, sCount, in[2], vCount, out, nc.bf16Inside && !rounds, alignUp(sCount));
}

void CudaPlanDevice::opAttentionGrad(NodeCall &nc) {
  const AttentionIo io = attentionIo(nc);
  const AttentionDims &a = io.dims;
  if (a.batch * a.tq * a.d == 0)
    return; // an empty batch (no queries or features: refused by validation)
  AttentionKernels fk = attentionKernels(a, nc.bf16Inside, tensorCoreAttention, {});
  if (fk.tensorCores) { // dQ by query tiles, then dK and dV by key tiles, read in place
    const float scale = static_cast<float>(nc.n.floats[0]);
    const int causal = nc.n.flag ? 1 : 0;
    float *stats = scratchFloats(3 * a.batch * a.tq);
    const float *st = stats;
    const void *q = attentionOperand(nc, io, 0), *k = attentionOperand(nc, io, 1),
               *v = attentionOperand(nc, io, 2), *g = attentionOperand(nc, io, 3);
    const int halves = halvesOf(nc, io, 4);
    const StRows rq = stRows(io.rq), rk = stRows(io.rk), ro = stRows(io.ro);
    launchWarpTiles(fk.name("bwd_q").c_str(), a.batch * ((a.tq + 15) / 16), a.batch, a.tq, a.tk,
                    causal, scale, io.rq.heads, rq, rk, ro, q, k, v, g, halves, resultAt(nc, 0),
                    stats);
    launchWarpTiles(fk.name("bwd_kv").c_str(), a.batch * ((a.tk + 15) / 16), a.batch, a.tq, a.tk,
                    causal, scale, io.rq.heads, rq, rk, ro, q, k, v, g, halves, st,
                    resultAt(nc, io.outStart[1]), resultAt(nc, io.outStart[2]));
    return;
  }
  if (io.packed) { // the other kernels read and write [B H, T, D] floats
    float *in = packedAttentionInputs(nc, io, 4);
    const int64_t n = a.batch * a.tq * a.d;
    attentionGradFloats(nc, a, {in, in + n, in + 2 * n, in + 3 * n}, in + 4 * n);
    for (int part = 0; part < 3; ++part)
      launch("st_heads_scatter", n, a.batch, a.tq, a.d, io.rq.heads, stRows(io.rq),
             static_cast<const float *>(in + (4 + part) * n), resultAt(nc, io.outStart[part]),
             halvesOf(nc, io, 0));
    return;
  }
  float *out = nullptr;
  const std::vector<const float *> in = attentionInputs(nc, 4, &out);
  attentionGradFloats(nc, a, {in[0], in[1], in[2], in[3]}, out);
  storeAttentionResult(nc, out);
}

// attention_grad of [B.., T, D] floats into floats (dq, dk, dv stacked):
// the fused kernels on CUDA cores where they fit, else as the CPU device
// (PlanExecutor.cpp) runs it: P recomputed, dP = G Vᵀ, dS in dP's place
// (st_softmax_grad_rows), then dV = Pᵀ G, dQ = dS K, dK = dSᵀ Q; five
// batched GEMMs over [B, H] with [B, H, T, T] scratch.
void CudaPlanDevice::attentionGradFloats(NodeCall &nc, const AttentionDims &a,
                                         std::array<const float *, 4> in, float *out) {
  const float *q = in[0], *k = in[1], *v = in[2], *g = in[3];
  const int64_t batch = a.batch, t = a.tq, d = a.d, elems = batch * t * d, sCount = batch * t * t;
  const float scale = static_cast<float>(nc.n.floats[0]);
  const int causal = nc.n.flag ? 1 : 0;
  const bool roundPdS = nc.bf16Inside || attentionRoundsProducts(nc.n);
  const AttentionKernels fk = attentionKernels(a, nc.bf16Inside, false, {q, k, v, g});
  if (fk.fused()) { // dQ by query rows, then dK and dV by key rows
    const int64_t rows = batch * t, keys = batch * a.tk, kElems = batch * a.tk * d;
    float *stats = scratchFloats(3 * rows);
    const float *st = stats;
    const int rounds = roundPdS ? 1 : 0;
    launch(fk.name("bwd_q").c_str(), rows, rows, t, a.tk, causal, scale, q, k, v, g, out, stats,
           rounds);
    launch(fk.name("bwd_kv").c_str(), keys, keys, t, a.tk, causal, scale, q, k, v, g, st,
           out + elems, out + elems + kElems, rounds);
    return;
  }
  // P and dS, then room for any product's bf16 operands (see gemm).
  const int64_t used = 2 * alignUp(sCount);
  float *P = scratchFloats(used + (nc.bf16Inside ? 2 * elems + 2 * sCount + 4 * kAlign : 0));
  float *dS = P + alignUp(sCount);
  GemmCall scores; // [T, D] x [T, D]ᵀ per block
  scores.batch = batch, scores.m = t, scores.n = t, scores.k = d, scores.tb = true;
  scores.strideA = t * d, scores.strideB = t * d, scores.strideC = t * t;
  GemmCall qk = scores;
  qk.alpha = scale;
  gemm(qk, q, elems, k, elems, P, nc.bf16Inside, used);
  launchHalfRows("st_softmax_rows16", batch * t, batch * t, t, causal, t,
                 static_cast<const float *>(P), P);
  gemm(scores, g, elems, v, elems, dS, nc.bf16Inside, used);
  launchHalfRows("st_softmax_grad_rows16", batch * t, batch * t, t, causal, t, scale,
                 static_cast<const float *>(P), dS);
  if (roundPdS && !nc.bf16Inside) { // (only P and dS: q, k and g as they are)
    launch("st_round_f32", sCount, sCount, P);
    launch("st_round_f32", sCount, sCount, dS);
  }
  GemmCall back; // [T, T] (transposed or not) x [T, D] per block
  back.batch = batch, back.m = t, back.n = d, back.k = t;
  back.strideA = t * t, back.strideB = t * d, back.strideC = t * d;
  GemmCall backT = back;
  backT.ta = true;
  gemm(backT, P, sCount, g, elems, out + 2 * elems, nc.bf16Inside, used);
  gemm(back, dS, sCount, k, elems, out, nc.bf16Inside, used);
  gemm(backT, dS, sCount, q, elems, out + elems, nc.bf16Inside, used);
}

void CudaPlanDevice::opEmbedding(NodeCall &nc) {
  int64_t vocab = nc.inShape(0)[0], d = nc.inShape(0)[1], rows = numElements(nc.inShape(1));
  checkIds(nc, 1, vocab, "id");
  launch("st_embedding", rows * d, rows, d, nc.in(0), nc.in(1), nc.out);
}

void CudaPlanDevice::opScatterRows(NodeCall &nc) {
  // Each id's rows linked in order (RuntimeOps.cu's st_scatter_links, then
  // st_scatter_heads), then summed down the lists a thread per (id,
  // column): the reference's order, in four launches.
  int64_t vocab = nc.n.shape[0], d = nc.n.shape[1], rows = numElements(nc.inShape(0));
  checkIds(nc, 0, vocab, "id");
  const int64_t chunk = 256, chunks = (rows + chunk - 1) / chunk;
  int *first = reinterpret_cast<int *>(
          scratchFloats(alignUp(2 * chunks * vocab) + alignUp(rows) + alignUp(vocab))),
      *last = first + chunks * vocab, *next = first + alignUp(2 * chunks * vocab),
      *head = next + alignUp(rows);
  gpu->memsetAsync(dptr(first), 0xffffffffu, static_cast<size_t>(chunks * vocab));
  launch("st_scatter_links", rows, rows, vocab, chunk, nc.in(0), next, first, last);
  launch("st_scatter_heads", vocab, chunks, vocab, static_cast<const int *>(first),
         static_cast<const int *>(last), next, head);
  launch("st_scatter_rows", vocab * d, vocab, d, static_cast<const int *>(head),
         static_cast<const int *>(next), nc.in(1), nc.out);
}

void CudaPlanDevice::opOneHot(NodeCall &nc) {
  int64_t c = nc.n.shape.back(), rows = numElements(nc.inShape(0));
  checkIds(nc, 0, c, "class id");
  gpu->memsetAsync(dptr(nc.out), 0, static_cast<size_t>(nc.count));
  launch("st_one_hot", rows, rows, c, nc.in(0), nc.out);
}

void CudaPlanDevice::opCrossEntropy(NodeCall &nc) {
  int64_t c = nc.inShape(0).back(), rows = numElements(nc.inShape(1));
  checkIds(nc, 1, c, "target");
  float *loss = scratchFloats(rows);
  if (c >= 256) // a vocabulary: a block per row
    launchShaped("st_cross_entropy_block_rows", gridFor(rows, 1), 256, rows, c, nc.in(0), nc.in(1),
                 loss);
  else
    launch("st_cross_entropy_rows", rows, rows, c, nc.in(0), nc.in(1), loss);
  launchShaped("st_mean", 1, 256, rows, static_cast<const float *>(loss), nc.out);
}

void CudaPlanDevice::opStageSum(NodeCall &nc) {
  double sum = 0;
  for (size_t k = 0; k < nc.n.operands.size(); ++k)
    sum += fetch(nc.in(static_cast<int>(k)), 1)[0];
  if (!nc.n.ints.empty()) { // a pipeline stage's copy: all-reduced over the stages
    if (!nc.rt.collective)
      nc.rt.fail(nc.i, "stage_sum of a pipeline stage runs only under the pipeline runtime");
    sum = nc.rt.collective(nc.n, HostTensor{nc.n.shape, {sum}}).data.at(0);
  }
  staging.assign(1, static_cast<float>(sum));
  upload(nc.out, staging.data(), 1);
  gpu->synchronize(); // staging is reused
}

void CudaPlanDevice::opGossipMix(NodeCall &nc) {
  if (!nc.rt.collective) {
    copy(nc.out, nc.in(0), nc.count);
    return;
  }
  std::vector<float> z = fetch(nc.in(0), nc.count);
  HostTensor mixed =
      nc.rt.collective(nc.n, HostTensor{nc.n.shape, std::vector<double>(z.begin(), z.end())});
  if (static_cast<int64_t>(mixed.data.size()) != nc.count)
    nc.rt.fail(nc.i, "the collective returned " + std::to_string(mixed.data.size()) +
                         " values for shape " + shapeToString(nc.n.shape));
  staging.assign(mixed.data.begin(), mixed.data.end());
  upload(nc.out, staging.data(), nc.count);
  gpu->synchronize(); // staging is reused
}

void CudaPlanDevice::opDescend(NodeCall &nc) {
  launch("st_descend", nc.count, nc.count, nc.in(0), nc.in(1), nc.in(2), nc.out);
}

// One matrix, or a batch of them (train-batch-newton-schulz): each
// matrix's norm and start on its own, then every step's products as
// batched GEMMs and its element-wise updates as one launch over all of
// them, the results stacked.
void CudaPlanDevice::opNewtonSchulz(NodeCall &nc) {
  const int64_t batch = static_cast<int64_t>(nc.n.operands.size());
  const int64_t m = nc.inShape(0)[0], nn = nc.inShape(0)[1], count = m * nn, steps = nc.n.ints[0];
  float a = static_cast<float>(nc.n.floats[0]), b = static_cast<float>(nc.n.floats[1]),
        c = static_cast<float>(nc.n.floats[2]);
  bool tr = m > nn;
  int64_t r = tr ? nn : m, s = tr ? m : nn;
  // Scratch: the norms and their parts, X [batch, r, s] in f32, then A, B
  // [batch, r, r] and BX [batch, r, s] in f32 (an f32 plan: optimizer
  // math is not a model GEMM) or, with bf16 matrices
  // (train.newton_schulz's bf16), Xh, Ah, Bh in bf16, P [batch, r, r] and
  // BX in f32: cuBLASLt reads the bf16 matrices where they are and writes
  // A in bf16, each matrix rounded where the reference rounds it.
  const bool bf16 = nc.n.flag;
  const int64_t xs = alignUp(batch * r * s), rr = alignUp(batch * r * r),
                hs = alignUp((batch * r * s + 1) / 2), hr = alignUp((batch * r * r + 1) / 2);
  // A norm's sums of squares: a block per span of 4,096 or more.
  const int64_t parts = std::min<int64_t>((count + 4095) / 4096, 1024),
                span = (count + parts - 1) / parts;
  float *norm = scratchFloats(alignUp(batch) + alignUp(batch * parts) + 2 * xs +
                              (bf16 ? hs + 2 * hr + rr : 2 * rr));
  float *part = norm + alignUp(batch), *X = part + alignUp(batch * parts), *BX = X + xs,
        *A = BX + xs, *B = A + rr;                                 // f32 plan
  float *Xh = BX + xs, *Ah = Xh + hs, *Bh = Ah + hr, *P = Bh + hr; // bf16 matrices
  auto bits = [](float *p) { return reinterpret_cast<unsigned short *>(p); };
  for (int64_t k = 0; k < batch; ++k) {
    const float *g = nc.in(static_cast<int>(k));
    launchShaped("st_sumsq_parts", static_cast<unsigned>(parts), 256, count, span, g,
                 part + k * parts);
    launchShaped("st_norm_plus_eps", 1, 256, parts, static_cast<const float *>(part + k * parts),
                 norm + k);
    launch("st_ns_start", count, m, nn, tr ? 1 : 0, g, static_cast<const float *>(norm + k),
           X + k * r * s);
  }
  GemmCall xxt, bb, bx;
  xxt.m = r, xxt.n = r, xxt.k = s, xxt.tb = true;
  bb.m = r, bb.n = r, bb.k = r, bb.alpha = c;
  bx.m = r, bx.n = s, bx.k = r;
  xxt.batch = bb.batch = bx.batch = batch;
  xxt.strideA = xxt.strideB = r * s, xxt.strideC = r * r;
  bb.strideA = bb.strideB = bb.strideC = r * r;
  bx.strideA = r * r, bx.strideB = bx.strideC = r * s;
  xxt.bf16 = bb.bf16 = bx.bf16 = xxt.bf16Out = bf16;
  const int64_t xn = batch * r * s, an = batch * r * r;
  if (bf16)
    launch("st_ns_x16", xn, xn, 1.0f, X, static_cast<const float *>(nullptr), bits(Xh));
  for (int64_t st = 0; st < steps; ++st) {
    if (bf16) {
      gpu->gemm(xxt, Xh, Xh, Ah); // A = round(X X^T)
      gpu->gemm(bb, Ah, Ah, P);   // P = c A A
      launch("st_ns_b16", an, an, b, static_cast<const unsigned short *>(bits(Ah)),
             static_cast<const float *>(P), bits(Bh)); // B = round(b A + P)
      gpu->gemm(bx, Bh, Xh, BX);                       // BX = B X
      launch("st_ns_x16", xn, xn, a, X, static_cast<const float *>(BX),
             bits(Xh)); // X = round(a X + BX)
    } else {
      gpu->gemm(xxt, X, X, A);                                        // A = X X^T
      gpu->gemm(bb, A, A, B);                                         // B = c A A
      launch("st_axpy", an, an, b, static_cast<const float *>(A), B); // B += b A
      gpu->gemm(bx, B, X, BX);                                        // BX = B X
      launch("st_scale_add", xn, xn, a, X,
             static_cast<const float *>(BX)); // X = a X + BX
    }
  }
  if (tr) { // out [.., m, n] = each X^T
    std::vector<int64_t> st =
        batch > 1 ? std::vector<int64_t>{m * nn, 1, m} : std::vector<int64_t>{1, m};
    launch("st_gather", nc.count, nc.count, static_cast<const float *>(X), int64_t(0), nc.out,
           spaceOf(nc.n.shape, st));
  } else {
    copy(nc.out, X, nc.count);
  }
}

} // namespace

OpTableCoverage cudaOpTable() { return coverageOf(CudaPlanDevice::ops()); }

// Every backend's table (OpTable.h). Here, not beside the validator in
// Graph.cpp: the fuzzers link Graph.cpp without the executors.
std::vector<OpTableCoverage> opTableCoverage() {
  std::vector<OpTableCoverage> all = referenceOpTables();
  for (OpTableCoverage t : {hostOpTable(), cudaOpTable(), validatorOpTable()})
    all.push_back(std::move(t));
  return all;
}

namespace {

// The real GPU: device 0 through the driver API, the runtime's and the
// model's kernels as NVRTC-compiled modules, GEMMs through cuBLASLt.
class CudaBackend final : public GpuBackend {
public:
  std::unique_ptr<CudaDevice> dev;
  std::unique_ptr<CublasLt> blas;
  std::vector<void *> opsModules;   // the runtime's own kernels, in parts
  std::vector<void *> modelModules; // the model's kernels, compiled in parts

  ~CudaBackend() override { blas.reset(); }
  std::string name() const override { return dev->name(); }
  int multiprocessors() const override { return dev->multiprocessors(); }
  Ptr alloc(size_t bytes) override {
    try {
      return dev->alloc(bytes);
    } catch (const std::runtime_error &e) {
      size_t free = 0, total = 0;
      try {
        dev->memoryInfo(free, total);
      } catch (...) {
      }
      char msg[160];
      std::snprintf(msg, sizeof msg, " (allocating %.1f MB on %s; %.1f MB of %.1f MB free)",
                    bytes / 1e6, dev->name().c_str(), free / 1e6, total / 1e6);
      throw std::runtime_error(e.what() + std::string(msg));
    }
  }
  void *nativeStream() override { return dev->stream(); }
  bool streamIdle() override { return dev->streamIdle(); }
  void free(Ptr p) override {
    dev->synchronize();
    dev->free(p);
  }
  void uploadAsync(Ptr dst, const void *src, size_t bytes) override {
    dev->uploadAsync(dst, src, bytes);
  }
  void copyAsync(Ptr dst, Ptr src, size_t bytes) override { dev->copyAsync(dst, src, bytes); }
  void memsetAsync(Ptr dst, unsigned value, size_t words) override {
    dev->memsetAsync(dst, value, words);
  }
  void downloadSync(void *dst, Ptr src, size_t bytes) override {
    dev->downloadSync(dst, src, bytes);
  }
  void synchronize() override { dev->synchronize(); }
  void *opsFunction(const std::string &name) override {
    for (void *m : opsModules)
      if (void *f = dev->function(m, name))
        return f;
    return nullptr;
  }
  void *modelFunction(const std::string &name) override {
    for (void *m : modelModules)
      if (void *f = dev->function(m, name))
        return f;
    return nullptr;
  }
  void launch(void *fn, unsigned grid, unsigned block, void **params, int,
              const char *what) override {
    dev->launchAsync(fn, grid, block, params, 0, what);
  }
  void gemm(const GemmCall &g, const void *a, const void *b, void *c) override {
    blas->gemm(g, a, b, c);
  }
  bool canRecord() const override { return dev->canCapture(); }
  // The copy stream, unless the driver lacks it or STRETTO_COPY_STREAM=0.
  bool copyStream = false;
  int newMark() override { return copyStream ? dev->newMark() : -1; }
  void recordMark(int mark) override {
    if (mark >= 0)
      dev->recordMark(mark);
  }
  void uploadAfter(int mark, Ptr dst, const void *src, size_t bytes) override {
    if (mark >= 0)
      dev->uploadAfter(mark, dst, src, bytes);
    else
      dev->uploadAsync(dst, src, bytes);
  }
  void joinCopies() override {
    if (copyStream)
      dev->joinCopies();
  }
  bool bf16TensorCores() const override {
    const std::string a = dev->arch(); // sm_XY
    return a.size() >= 5 && std::atoi(a.c_str() + 3) >= 80;
  }
  void beginRecording() override { dev->beginCapture(); }
  int endRecording() override { return dev->endCapture(); }
  void abandonRecording() override { dev->abandonCapture(); }
  void launchGraph(int id) override { dev->launchGraph(id); }
  void dropGraphs() override { dev->dropGraphs(); }
  void *hostAlloc(size_t bytes) override { return dev->hostAlloc(bytes); }
  void downloadAsync(void *dst, Ptr src, size_t bytes) override {
    dev->downloadAsync(dst, src, bytes);
  }
  int64_t fence() override { return dev->fence(); }
  bool fenceDone(int64_t ticket) override { return dev->fenceDone(ticket); }
  void waitFence(int64_t ticket) override { dev->waitFence(ticket); }
};

} // namespace

MultiTensorKernels wantedMultiTensorKernels(const std::string &cudaSource, const Graph &graph) {
  if (!envSwitchOn("STRETTO_MULTI_TENSOR"))
    return {};
  MultiTensorKernels m = multiTensorKernels(cudaSource);
  if (envSwitchOn("STRETTO_UPDATE_CHAINS")) {
    std::vector<std::vector<std::string>> stages;
    for (const planning::UpdateChain &ch :
         planning::findUpdateChains(graph.update, [&](const Node &n) {
           auto it = m.groupOf.find(n.name);
           return it == m.groupOf.end() ? std::string() : it->second;
         }))
      stages.push_back(ch.kernels);
    addChainKernels(m, stages);
  }
  return m;
}

bool wantedBf16Storage() { return envSwitchOn("STRETTO_BF16_STORAGE"); }

std::unique_ptr<PlanExecutor> makeGpuPlanExecutor(const Graph &graph,
                                                  std::unique_ptr<GpuBackend> gpu,
                                                  GemmPrecision gemm, MultiTensorKernels multi,
                                                  bool bf16Halves) {
  auto dev = std::make_unique<CudaPlanDevice>(std::move(gpu));
  dev->tf32 = gemm == GemmPrecision::TF32;
  dev->multi = std::move(multi);
  dev->bf16Halves = bf16Halves;
  dev->tensorCoreAttention = dev->gpu->bf16TensorCores();
  dev->biasEpilogue = dev->dgeluEpilogue = dev->biasGradEpilogue = dev->geluAuxEpilogue =
      envSwitchOn("STRETTO_GEMM_EPILOGUE");
  return std::make_unique<PlanExecutor>(
      std::make_unique<PlanExecutor::Impl>(graph, std::move(dev), gemm));
}

std::unique_ptr<PlanExecutor> PlanExecutor::onCuda(const Graph &graph, const CudaKernelSet &kernels,
                                                   GemmPrecision gemm, std::string &why) {
  auto gpu = std::make_unique<CudaBackend>();
  {
    StartupTimer t("CUDA device");
    gpu->dev = CudaDevice::open(why);
  }
  if (!gpu->dev)
    return nullptr;
  // A step's inputs copied up on a stream of their own while the step
  // before runs (STRETTO_COPY_STREAM=0: on the stream, before the graph).
  gpu->copyStream = gpu->dev->canCopyAhead() && envSwitchOn("STRETTO_COPY_STREAM");
  {
    StartupTimer t("cuBLASLt");
    gpu->blas = CublasLt::open(*gpu->dev, why);
  }
  if (!gpu->blas)
    return nullptr;
  // Each GEMM shape's algorithm: timed once, then kept in the kernel cache
  // (STRETTO_GEMM_TUNING=0: the heuristic's first).
  if (wantedGemmTuning())
    gpu->blas->tuneWith(std::make_unique<GemmChoiceFile>(
      gemmChoicePath(kernels.cacheDir, gpu->dev->name() + " " + gpu->dev->arch(),
                     gpu->blas->version())));
  CudaKernelCache nvrtc(kernels.cacheDir);
  if (!nvrtc.available(why))
    return nullptr;
  std::string arch = gpu->dev->arch(), error;
  MultiTensorKernels multi = wantedMultiTensorKernels(kernels.source, graph);
  const bool halves = wantedBf16Storage();
  int kernelNodes = 0;
  for (Phase ph : {Phase::Step, Phase::Update, Phase::Outer})
    for (const Node &n : graph.phase(ph))
      kernelNodes += n.kind == OpKind::Kernel;
  // The runtime's own kernels in their parts, then the model's in parts of
  // at least 32: all compiled at once on the host's cores, each unit
  // cached on its own (cold, a start waits for the longest unit, not for
  // their sum).
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::string> units = cudaRuntimeUnits();
  const size_t opsUnits = units.size();
  if (kernelNodes > 0)
    for (std::string &part :
         splitCudaUnit(kernels.source + multi.source, std::min(threads, kernelNodes / 32 + 1)))
      units.push_back(halves ? std::move(part) : kBf16AsF32Define + part);
  std::vector<CudaBinary> bins;
  {
    StartupTimer t("NVRTC kernels");
    int hits = 0;
    const bool ok = compileCudaUnits(kernels.cacheDir, units, arch, threads, bins, hits, error);
    t.note = std::to_string(opsUnits) + " runtime and " + std::to_string(units.size() - opsUnits) +
             " model units, " + std::to_string(hits) + " cached";
    if (!ok) {
      bool runtime = false;
      for (size_t k = 0; k < opsUnits; ++k)
        runtime = runtime || bins[k].cubin.empty();
      throw std::runtime_error(
          std::string(runtime ? "the CUDA runtime's own kernels" : "the model's CUDA kernels") +
          " do not compile for " + arch + ": " + error);
    }
  }
  {
    StartupTimer t("module load");
    for (size_t k = 0; k < bins.size(); ++k)
      (k < opsUnits ? gpu->opsModules : gpu->modelModules)
          .push_back(gpu->dev->loadModule(bins[k].cubin));
  }
  return makeGpuPlanExecutor(graph, std::move(gpu), gemm, std::move(multi), halves);
}

} // namespace stretto
