//===- GpuEmulator.cpp - the CUDA plan device on an emulated GPU ----------===//
#include "GpuEmulator.h"

#include "stretto/Runtime/HostJit.h"
#include "stretto/Support/KernelMath.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

// --- CUDA's built-ins on host threads ---------------------------------------
// A launch runs block by block. A kernel that synchronises its block
// (__syncthreads, warp shuffles) runs each block on blockDim real threads
// with barriers; any other kernel runs its threads one after another.
namespace stretto_emu {
struct StDim3 {
  unsigned x = 0, y = 1, z = 1;
};
thread_local StDim3 blockIdx, threadIdx;
StDim3 blockDim, gridDim; // the running launch's (set before its threads start)

// A reusable barrier; a wait that never completes aborts (a kernel whose
// threads do not all reach a __syncthreads would deadlock).
class Barrier {
public:
  explicit Barrier(unsigned n) : n_(n) {}
  void wait() {
    const unsigned gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(m_);
        gen_.store(gen + 1, std::memory_order_release);
      }
      cv_.notify_all();
      return;
    }
    // A short spin (yielding: the host has fewer cores than a block has
    // threads) before sleeping: warps meet at every shuffle and mma.
    for (int i = 0; i < 64; ++i) {
      if (gen_.load(std::memory_order_acquire) != gen)
        return;
      std::this_thread::yield();
    }
    std::unique_lock<std::mutex> lock(m_);
    if (!cv_.wait_for(lock, std::chrono::seconds(60),
                      [&] { return gen_.load(std::memory_order_acquire) != gen; })) {
      std::fprintf(stderr, "emulated GPU: a block barrier was not reached by every thread\n");
      std::abort();
    }
  }

private:
  std::mutex m_;
  std::condition_variable cv_;
  const unsigned n_;
  std::atomic<unsigned> count_{0}, gen_{0};
};

// The running cooperative launch's barriers and warp exchange slots.
struct Cooperative {
  explicit Cooperative(unsigned block) : block(block) {
    for (unsigned w = 0; w < (block + 31) / 32; ++w)
      warps.push_back(std::make_unique<Barrier>(std::min(32u, block - 32 * w)));
    values.assign(block, 0.0f);
    words.assign(block, 0u);
    fragments.assign(block, {});
  }
  Barrier block;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<float> values;
  std::vector<unsigned> words;                  // st_warp_or's exchange
  std::vector<std::array<unsigned, 6>> fragments; // an mma's A (4) and B (2) registers
};
Cooperative *gCoop = nullptr;

void syncthreads() {
  if (!gCoop) {
    std::fprintf(stderr, "emulated GPU: __syncthreads in a kernel run thread by thread\n");
    std::abort();
  }
  gCoop->block.wait();
}
// __shfl_down_sync over a full warp: lane + offset's value, or one's own.
float shflDown(unsigned, float v, int offset) {
  if (!gCoop) {
    std::fprintf(stderr, "emulated GPU: a warp shuffle in a kernel run thread by thread\n");
    std::abort();
  }
  unsigned t = threadIdx.x, lane = t & 31, warp = t >> 5;
  gCoop->values[t] = v;
  gCoop->warps[warp]->wait();
  float r = lane + offset < 32 && t + offset < blockDim.x ? gCoop->values[t + offset] : v;
  gCoop->warps[warp]->wait();
  return r;
}
// __shfl_sync over a full warp: lane `src`'s value (every lane calls it).
float shflIdx(unsigned, float v, int src) {
  if (!gCoop) {
    std::fprintf(
        stderr,
        "emulated GPU: a warp shuffle in a kernel run thread by thread\n");
    std::abort();
  }
  unsigned t = threadIdx.x, warp = t >> 5,
           from = 32 * warp + (static_cast<unsigned>(src) & 31);
  gCoop->values[t] = v;
  gCoop->warps[warp]->wait();
  float r = from < blockDim.x ? gCoop->values[from] : v;
  gCoop->warps[warp]->wait();
  return r;
}
// RuntimeOps.cu's st_warp_or: the OR of x over the warp (__reduce_or_sync).
unsigned warpOr(unsigned x) {
  if (!gCoop) {
    std::fprintf(stderr, "emulated GPU: a warp vote in a kernel run thread by thread\n");
    std::abort();
  }
  unsigned t = threadIdx.x, warp = t >> 5, r = 0;
  gCoop->words[t] = x;
  gCoop->warps[warp]->wait();
  for (unsigned l = 32 * warp; l < std::min(32 * warp + 32, blockDim.x); ++l)
    r |= gCoop->words[l];
  gCoop->warps[warp]->wait();
  return r;
}
// RuntimeOps.cu's st_mma_bf16: mma.sync.aligned.m16n8k16.row.col.f32.bf16
// .bf16.f32 over the warp, from the PTX ISA's fragment layout (lane l,
// g = l >> 2, t = l & 3): A register r holds row g + 8 (r & 1), columns
// 2t + 8 (r >> 1) and the one after (low half first); B register r rows
// k = 2t + 8 r and the one after of column g; C value i row g + 8 (i >> 1),
// column 2t + (i & 1). The 16 products (exact in f32) are added to c in
// k order; the tensor cores' order is their own (the same to rounding).
void mmaBf16(float *c, const unsigned *a, const unsigned *b) {
  if (!gCoop) {
    std::fprintf(stderr, "emulated GPU: an mma in a kernel run thread by thread\n");
    std::abort();
  }
  unsigned t = threadIdx.x, warp = t >> 5, base = 32 * warp, lane = t & 31;
  if (blockDim.x < base + 32) {
    std::fprintf(stderr, "emulated GPU: an mma in a warp of fewer than 32 threads\n");
    std::abort();
  }
  auto &mine = gCoop->fragments[t];
  for (int r = 0; r < 4; ++r)
    mine[r] = a[r];
  mine[4] = b[0], mine[5] = b[1];
  gCoop->warps[warp]->wait();
  auto half = [](unsigned word, int k) {
    unsigned bits = (k & 1) ? word >> 16 : word & 0xffffu;
    float f;
    bits <<= 16;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  auto A = [&](int r, int k) {
    const auto &f = gCoop->fragments[base + 4 * (r & 7) + ((k & 7) >> 1)];
    return half(f[(r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k);
  };
  auto B = [&](int k, int n) {
    const auto &f = gCoop->fragments[base + 4 * n + ((k & 7) >> 1)];
    return half(f[4 + (k >= 8 ? 1 : 0)], k);
  };
  float out[4];
  for (int i = 0; i < 4; ++i) {
    int row = static_cast<int>(lane >> 2) + 8 * (i >> 1), col = 2 * static_cast<int>(lane & 3) + (i & 1);
    float s = c[i];
    for (int k = 0; k < 16; ++k)
      s += A(row, k) * B(k, col);
    out[i] = s;
  }
  gCoop->warps[warp]->wait();
  for (int i = 0; i < 4; ++i)
    c[i] = out[i];
}
inline unsigned floatAsUint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float intAsFloat(int b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Runs body(block, thread) over the grid.
void runGrid(unsigned grid, unsigned block, bool cooperative,
             const std::function<void(unsigned, unsigned)> &body) {
  gridDim.x = grid;
  blockDim.x = block;
  if (!cooperative) {
    for (unsigned b = 0; b < grid; ++b)
      for (unsigned t = 0; t < block; ++t)
        body(b, t);
    return;
  }
  Cooperative coop(block);
  gCoop = &coop;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < block; ++t)
    threads.emplace_back([&, t] {
      for (unsigned b = 0; b < grid; ++b) {
        body(b, t);
        coop.block.wait(); // shared memory is the next block's only after this one ends
      }
    });
  for (std::thread &th : threads)
    th.join();
  gCoop = nullptr;
}
} // namespace stretto_emu

// RuntimeOps.cu compiled as C++ against those built-ins.
namespace stretto_emu_ops {
using namespace stretto_emu;
#define ST_FN static inline
#define __global__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads syncthreads
#define __shfl_down_sync shflDown
#define __shfl_sync shflIdx
#define ST_HAVE_WARPS 1
#define ST_EMU_MMA mmaBf16
#define ST_EMU_WARP_OR warpOr
#define __float_as_uint floatAsUint
#define __int_as_float intAsFloat
ST_FN float st_float_bits(int b) { return intAsFloat(b); }
ST_FN int st_bits_of(float f) { return int(floatAsUint(f)); }
// CUDA's float4 and RuntimeOps.cu's 16-byte load, for the host.
struct float4 {
  float x, y, z, w;
};
#define ST_HAVE_LD4 1
ST_FN float4 st_ld4(const float *p) {
  float4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
#include "stretto/Support/KernelMath.inc"
// st_unary / st_binary as runtimeOpDispatch() generates them for NVRTC,
// from the same table.
#define EMU_UNARY_Unary(Kind, fn)                                                                \
  case stretto::opCode(stretto::OpKind::Kind):                                                   \
    return st_##fn(x);
#define EMU_BINARY_Binary(Kind, fn)                                                              \
  case stretto::opCode(stretto::OpKind::Kind):                                                   \
    return st_##fn(a, b);
#define EMU_NONE(Kind, fn)
#define EMU_UNARY_Binary EMU_NONE
#define EMU_BINARY_Unary EMU_NONE
#define EMU_UNARY_Io EMU_NONE
#define EMU_BINARY_Io EMU_NONE
#define EMU_UNARY_Layout EMU_NONE
#define EMU_BINARY_Layout EMU_NONE
#define EMU_UNARY_Fused EMU_NONE
#define EMU_BINARY_Fused EMU_NONE
#define EMU_UNARY_Pipeline EMU_NONE
#define EMU_BINARY_Pipeline EMU_NONE
#define EMU_UNARY_Optimizer EMU_NONE
#define EMU_BINARY_Optimizer EMU_NONE
#define EMU_UNARY_Gossip EMU_NONE
#define EMU_BINARY_Gossip EMU_NONE
#define EMU_UNARY_Compiled EMU_NONE
#define EMU_BINARY_Compiled EMU_NONE
ST_FN float st_unary(int op, float x) {
  switch (op) {
#define STRETTO_OP(Kind, name, arity, cls, fn) EMU_UNARY_##cls(Kind, fn)
#include "stretto/Ops.def"
#undef STRETTO_OP
  default: return intAsFloat(0x7fc00000);
  }
}
ST_FN float st_binary(int op, float a, float b) {
  switch (op) {
#define STRETTO_OP(Kind, name, arity, cls, fn) EMU_BINARY_##cls(Kind, fn)
#include "stretto/Ops.def"
#undef STRETTO_OP
  default: return intAsFloat(0x7fc00000);
  }
}
#include "cuda/RuntimeOps.cu"
#undef __global__
#undef __forceinline__
#undef __shared__
#undef __syncthreads
#undef __shfl_down_sync
#undef __shfl_sync
#undef ST_HAVE_WARPS
#undef ST_EMU_MMA
#undef ST_EMU_WARP_OR
#undef __float_as_uint
#undef __int_as_float

// Host loops for the block reductions, used unless a test asks for the
// real ones (cooperative blocks on real threads are slow): the reference's
// serial order, so executor-level tests stay bit for bit.
void host_row_sums(i64 rows, i64 len, const float *x, float *y) {
  if (blockIdx.x != 0 || threadIdx.x != 0)
    return;
  for (i64 r = 0; r < rows; ++r) {
    float s = 0.0f;
    for (i64 j = 0; j < len; ++j)
      s += x[r * len + j];
    y[r] = s;
  }
}
void host_mean(i64 n, const float *x, float *y) {
  if (blockIdx.x != 0 || threadIdx.x != 0)
    return;
  float s = 0.0f;
  for (i64 e = 0; e < n; ++e)
    s += x[e];
  y[0] = n ? s / (float)n : 0.0f;
}
// Newton-Schulz's norm: the sum of squares of all of x in order as part
// 0, the other parts 0, then the parts added in order: the reference's sum.
void host_sumsq_parts(i64 n, i64, const float *x, float *part) {
  if (threadIdx.x != 0)
    return;
  float s = 0.0f;
  for (i64 e = 0; blockIdx.x == 0 && e < n; ++e)
    s += x[e] * x[e];
  part[blockIdx.x] = s;
}
void host_norm_plus_eps(i64 parts, const float *part, float *norm) {
  if (blockIdx.x != 0 || threadIdx.x != 0)
    return;
  float s = 0.0f;
  for (i64 e = 0; e < parts; ++e)
    s += part[e];
  norm[0] = std::sqrt(s) + 1e-7f;
}
// st_column_partials' stand-in: each column's rows in order (the
// reference's sum) as chunk 0's partial, the other chunks 0, so that
// st_column_combine (run as written) returns the reference's sum bit for
// bit (s + 0 == s; a sum started at +0 is never -0).
template <typename X>
void host_column_partials_of(i64 outer, i64 nred, i64 inner, i64, i64 chunks, const X *x,
                             float *part) {
  if (blockIdx.x != 0 || threadIdx.x != 0)
    return;
  for (i64 o = 0; o < outer; ++o)
    for (i64 j = 0; j < inner; ++j) {
      float s = 0.0f;
      for (i64 r = 0; r < nred; ++r)
        s += st_widen(x[(o * nred + r) * inner + j]);
      for (i64 c = 0; c < chunks; ++c)
        part[(o * chunks + c) * inner + j] = c == 0 ? s : 0.0f;
    }
}
void host_column_partials(i64 outer, i64 nred, i64 inner, i64 per, i64 chunks, const float *x,
                          float *part) {
  host_column_partials_of(outer, nred, inner, per, chunks, x, part);
}
void host_column_partials16(i64 outer, i64 nred, i64 inner, i64 per, i64 chunks,
                            const unsigned short *x, float *part) {
  host_column_partials_of(outer, nred, inner, per, chunks, x, part);
}
} // namespace stretto_emu_ops

// The generated kernels' CUDA C, compiled as C++ by the host compiler: the
// same built-ins, reached through hooks the emulator installs.
static const char *kModelShim = R"(#include <math.h>
#include <string.h>
struct StDim3 { unsigned x, y, z; };
static thread_local StDim3 blockIdx, threadIdx;
static StDim3 blockDim, gridDim;
static void (*st_emu_sync)(void);
static float (*st_emu_shfl)(unsigned, float, int);
static float (*st_emu_shfl_idx)(unsigned, float, int);
extern "C" void st_emu_launch(unsigned grid, unsigned block, void (*sync)(void),
                              float (*shfl)(unsigned, float, int),
                              float (*shfl_idx)(unsigned, float, int)) {
  gridDim.x = grid; gridDim.y = gridDim.z = 1;
  blockDim.x = block; blockDim.y = blockDim.z = 1;
  st_emu_sync = sync; st_emu_shfl = shfl; st_emu_shfl_idx = shfl_idx;
}
extern "C" void st_emu_thread(unsigned b, unsigned t) {
  blockIdx.x = b; blockIdx.y = blockIdx.z = 0;
  threadIdx.x = t; threadIdx.y = threadIdx.z = 0;
}
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() st_emu_sync()
#define __shfl_down_sync(mask, v, off) st_emu_shfl((mask), (v), (off))
#define __shfl_sync(mask, v, src) st_emu_shfl_idx((mask), (v), (src))
static inline float __int_as_float(int b) { float f; memcpy(&f, &b, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
// The element-wise kernels' 16-byte words (Emitter.cpp's ST_VEC8), with
// the alignment the vector step promises checked.
struct alignas(16) StWord16 { unsigned w[4]; };
#define ST_WORD16 StWord16
static void st_emu_aligned16(const void *p) {
  if ((unsigned long long)p & 15) __builtin_trap();
}
static inline StWord16 st_ld16(const void *p) {
  st_emu_aligned16(p); StWord16 w; memcpy(&w, p, 16); return w;
}
static inline StWord16 st_word16(const void *p) { return st_ld16(p); }
static inline void st_st16(void *p, StWord16 w) { st_emu_aligned16(p); memcpy(p, &w, 16); }
)";

namespace stretto {
namespace {

std::atomic<long long> gLive{0};
std::atomic<bool> gRefuseEpilogues{false};
std::atomic<long long> gTf32Gemms{0};
std::atomic<long long> gGraphLaunches{0};
std::atomic<long long> gDirectWork{0};
std::atomic<long long> gDownloadedBytes{0};
std::atomic<bool> gTensorCores{false};
std::atomic<bool> gLazyStreams{false};
std::atomic<int> gCopyStream{1};
std::atomic<long long> gHostWaits{0}, gIdleWaits{0};
std::mutex gLaunchCountsLock;
std::map<std::string, long long> gLaunchCounts; // launches run, by kernel name

// A TF32 tensor core's input: f32 rounded to 10 mantissa bits (to nearest,
// ties to even), as cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32 documents.
float toTf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) // finite
    u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&x, &u, 4);
  return x;
}

// A kernel the emulator can launch: a runtime op or a generated kernel's
// CUDA C built for the host (both called per block and thread with
// cuLaunchKernel-style arguments), or a generated kernel's C++ twin.
// A launch's arguments copied out of cuLaunchKernel-style pointers (what a
// graph keeps of a recorded launch), with pointers to the copies.
struct ArgSnapshot {
  std::shared_ptr<void> storage;
  std::vector<void *> params;
};

// A runtime op: called with argument pointers, and how to copy its
// arguments (their types are the function's).
struct EmuOp {
  std::function<void(void **)> call;
  std::function<ArgSnapshot(void **)> snapshot;
  explicit operator bool() const { return static_cast<bool>(call); }
  void operator()(void **p) const { call(p); }
};

struct EmuKernel {
  EmuOp op;                              // runtime op
  void *cuda = nullptr;                  // generated CUDA C (all pointer arguments)
  PlanExecutor::KernelFn twin = nullptr; // C++ twin
  bool cooperative = false;              // synchronises its block
  bool bf16Slots = false;                // reads or writes two-byte bf16 (CUDA C only)
};

// Calls fn(args[0], ..., args[n-1]) for a function of n pointer arguments.
using PointerCall = void (*)(void *fn, void *const *args);
template <size_t... I> void callPointers(void *fn, void *const *args, std::index_sequence<I...>) {
  using F = void (*)(std::conditional_t<true, void *, std::integral_constant<size_t, I>>...);
  reinterpret_cast<F>(fn)(args[I]...);
}
template <size_t... N> std::vector<PointerCall> pointerCalls(std::index_sequence<N...>) {
  return {[](void *fn, void *const *args) { callPointers(fn, args, std::make_index_sequence<N>{}); }...};
}
const std::vector<PointerCall> &pointerCallers() {
  static const std::vector<PointerCall> calls = pointerCalls(std::make_index_sequence<65>{});
  return calls;
}

template <typename... A, size_t... I>
void invoke(void (*f)(A...), void **p, std::index_sequence<I...>) {
  f(*static_cast<std::remove_reference_t<A> *>(p[I])...);
}
template <typename... A, size_t... I>
ArgSnapshot snapshotArgs(void **p, std::index_sequence<I...>) {
  auto values =
      std::make_shared<std::tuple<std::decay_t<A>...>>(*static_cast<std::decay_t<A> *>(p[I])...);
  ArgSnapshot s;
  s.params = {static_cast<void *>(&std::get<I>(*values))...};
  s.storage = values;
  return s;
}
template <typename... A> EmuOp adapt(void (*f)(A...)) {
  EmuOp op;
  op.call = [f](void **p) { invoke(f, p, std::index_sequence_for<A...>{}); };
  op.snapshot = [](void **p) { return snapshotArgs<A...>(p, std::index_sequence_for<A...>{}); };
  return op;
}
// The arguments of a kernel that takes only pointers.
ArgSnapshot snapshotPointers(void **p, int count) {
  auto values = std::make_shared<std::vector<void *>>();
  for (int a = 0; a < count; ++a)
    values->push_back(*static_cast<void *const *>(p[a]));
  ArgSnapshot s;
  for (void *&v : *values)
    s.params.push_back(&v);
  s.storage = values;
  return s;
}

std::map<std::string, EmuKernel> runtimeOps(bool blockReductions) {
  using namespace stretto_emu_ops;
  std::map<std::string, EmuKernel> m;
  auto add = [&](const char *name, EmuOp f) { m[name].op = std::move(f); };
  // A kernel that reduces across its block, or its serial stand-in.
  auto addBlock = [&](const char *name, EmuOp block, EmuOp serial) {
    add(name, blockReductions ? std::move(block) : std::move(serial));
    m[name].cooperative = blockReductions;
  };
  add("st_unary_op", adapt(st_unary_op));
  add("st_binary_op", adapt(st_binary_op));
  add("st_gather", adapt(st_gather));
  add("st_scatter", adapt(st_scatter));
  add("st_accumulate", adapt(st_accumulate));
  add("st_divide", adapt(st_divide));
  addBlock("st_row_sums", adapt(st_row_sums), adapt(host_row_sums));
  add("st_column_sums", adapt(st_column_sums));
  add("st_softmax_rows", adapt(st_softmax_rows));
  add("st_softmax_grad_rows", adapt(st_softmax_grad_rows));
  add("st_norm_rows", adapt(st_norm_rows));
  add("st_norm_grad_rows", adapt(st_norm_grad_rows));
  add("st_norm_param_partials", adapt(st_norm_param_partials));
  add("st_norm_param_grad", adapt(st_norm_param_grad));
  // The half-warp row kernels give the thread-per-row kernels' values bit
  // for bit (KernelMath.inc's st_*_row16), so those stand in for them;
  // CudaHalfWarpRowsOnTheEmulatedGpu runs them as written against those.
  addBlock("st_softmax_rows16", adapt(st_softmax_rows16),
           adapt(st_softmax_rows));
  addBlock("st_softmax_grad_rows16", adapt(st_softmax_grad_rows16),
           adapt(st_softmax_grad_rows));
  addBlock("st_norm_rows16", adapt(st_norm_rows16), adapt(st_norm_rows));
  addBlock("st_norm_grad_rows16", adapt(st_norm_grad_rows16),
           adapt(st_norm_grad_rows));
  addBlock("st_norm_grad_rows16_x16", adapt(st_norm_grad_rows16_x16),
           adapt(st_norm_grad_rows_x16));
  add("st_norm_param_partials_x16", adapt(st_norm_param_partials_x16));
  addBlock("st_norm_grad_rows16_dy16", adapt(st_norm_grad_rows16_dy16),
           adapt(st_norm_grad_rows_dy16));
  addBlock("st_norm_grad_rows16_x16_dy16", adapt(st_norm_grad_rows16_x16_dy16),
           adapt(st_norm_grad_rows_x16_dy16));
  add("st_norm_param_partials_dy16", adapt(st_norm_param_partials_dy16));
  add("st_norm_param_partials_x16_dy16", adapt(st_norm_param_partials_x16_dy16));
  m["st_column_partials"].op =
      blockReductions ? adapt(st_column_partials) : adapt(host_column_partials);
  m["st_column_partials16"].op =
      blockReductions ? adapt(st_column_partials16) : adapt(host_column_partials16);
  add("st_column_combine", adapt(st_column_combine));
  add("st_column_sums16", adapt(st_column_sums16));
  add("st_gather16", adapt(st_gather16));
  add("st_gather_rows", adapt(st_gather_rows));
  add("st_gather_wide", adapt(st_gather_wide));
  add("st_round_f32", adapt(st_round_f32));
  add("st_attention_weights_rows", adapt(st_attention_weights_rows));
  add("st_add_bias", adapt(st_add_bias));
  add("st_dgelu", adapt(st_dgelu));
  add("st_gelu_aux", adapt(st_gelu_aux));
  add("st_flag_nonfinite", adapt(st_flag_nonfinite));
#define EMU_FLASH(D)                                                           \
  add("st_flash_fwd_d" #D, adapt(st_flash_fwd_d##D));                          \
  add("st_flash_bwd_q_d" #D, adapt(st_flash_bwd_q_d##D));                      \
  add("st_flash_bwd_kv_d" #D, adapt(st_flash_bwd_kv_d##D));
  EMU_FLASH(8)
  EMU_FLASH(16) EMU_FLASH(32) EMU_FLASH(64)
#undef EMU_FLASH
  // The tensor-core attention: warps exchange fragments (always on threads).
#define EMU_FLASH_MMA(D)                                                       \
  add("st_flash_mma_fwd_d" #D, adapt(st_flash_mma_fwd_d##D));                  \
  add("st_flash_mma_bwd_q_d" #D, adapt(st_flash_mma_bwd_q_d##D));              \
  add("st_flash_mma_bwd_kv_d" #D, adapt(st_flash_mma_bwd_kv_d##D));            \
  for (const char *f : {"fwd", "bwd_q", "bwd_kv"})                             \
    m[std::string("st_flash_mma_") + f + "_d" #D].cooperative = true;
  EMU_FLASH_MMA(16)
  EMU_FLASH_MMA(32)
  EMU_FLASH_MMA(64)
#undef EMU_FLASH_MMA
  add("st_heads_gather", adapt(st_heads_gather));
  add("st_heads_scatter", adapt(st_heads_scatter));
  add("st_embedding", adapt(st_embedding));
  add("st_scatter_links", adapt(st_scatter_links));
  add("st_scatter_heads", adapt(st_scatter_heads));
  add("st_scatter_rows", adapt(st_scatter_rows));
  add("st_one_hot", adapt(st_one_hot));
  add("st_cross_entropy_rows", adapt(st_cross_entropy_rows));
  // The thread-per-row kernel covers every row under the block kernel's
  // launch too (grid-stride): the reference's order, bit for bit.
  addBlock("st_cross_entropy_block_rows", adapt(st_cross_entropy_block_rows),
           adapt(st_cross_entropy_rows));
  addBlock("st_mean", adapt(st_mean), adapt(host_mean));
  add("st_descend", adapt(st_descend));
  addBlock("st_sumsq_parts", adapt(st_sumsq_parts), adapt(host_sumsq_parts));
  addBlock("st_norm_plus_eps", adapt(st_norm_plus_eps), adapt(host_norm_plus_eps));
  add("st_ns_start", adapt(st_ns_start));
  add("st_axpy", adapt(st_axpy));
  add("st_scale_add", adapt(st_scale_add));
  add("st_ns_x16", adapt(st_ns_x16));
  add("st_ns_b16", adapt(st_ns_b16));
  add("st_to_bf16", adapt(st_to_bf16));
  return m;
}

class EmulatedGpu final : public GpuBackend {
public:
  // Generated kernels: their CUDA C (`cudaSource`, built by the host
  // compiler through `cache`) when given, else their C++ twins.
  EmulatedGpu(std::map<std::string, PlanExecutor::KernelFn> k, const std::string &cudaSource,
              HostKernelCache *cache, bool blockReductions, bool cooperativeTwins = false)
      : ops(runtimeOps(blockReductions)), cooperativeTwins(cooperativeTwins) {
    for (auto &[name, fn] : k)
      model[name].twin = fn;
    if (cudaSource.empty() || k.empty())
      return;
    std::vector<std::string> symbols = {"st_emu_launch", "st_emu_thread"};
    for (auto &[name, fn] : k) {
      symbols.push_back(name);
      if (cudaSource.find("void " + name + "_parts(") != std::string::npos)
        symbols.push_back(name +
                          "_parts"); // a row sum's split twin (KernelSource.h)
    }
    // Multi-tensor kernels (MultiTensor.h) after the model's.
    const std::string entry = "extern \"C\" __global__ void ";
    for (size_t at = cudaSource.find(entry + "st_multi_"); at != std::string::npos;
         at = cudaSource.find(entry + "st_multi_", at + 1)) {
      const size_t name = at + entry.size();
      symbols.push_back(cudaSource.substr(name, cudaSource.find('(', name) - name));
    }
    std::string error;
    std::vector<HostKernelFn> fns = cache->loadAll(kModelShim + cudaSource, symbols, error);
    if (fns.size() != symbols.size())
      throw std::runtime_error("emulated GPU: the model's CUDA C does not build as C++: " + error);
    setLaunch = reinterpret_cast<SetLaunch>(fns[0]);
    setThread = reinterpret_cast<SetThread>(fns[1]);
    for (size_t i = 2; i < symbols.size(); ++i) {
      EmuKernel &e = model[symbols[i]];
      e.cuda = reinterpret_cast<void *>(fns[i]);
      // Cooperative: its body (the wrapper, to its closing brace)
      // synchronises, or calls a half-warp row function (KernelMath.inc's
      // shuffles). A kernel with two-byte bf16 operands (ST_BF16_SLOT)
      // never runs its C++ twin, whose slots are floats.
      size_t at = cudaSource.find("void " + symbols[i] + "(");
      size_t end = cudaSource.find("\n}\n", at);
      std::string body = cudaSource.substr(at, end == std::string::npos ? end : end - at);
      e.cooperative = body.find("__syncthreads") != std::string::npos ||
                      body.find("__shfl") != std::string::npos ||
                      body.find("_row16(") != std::string::npos;
      e.bf16Slots = body.substr(0, body.find('{')).find("ST_BF16_SLOT") != std::string::npos;
    }
  }
  ~EmulatedGpu() override {
    pending.clear(); // (work nobody waits for any more)
    for (Ptr p : live)
      std::free(reinterpret_cast<void *>(p));
    gLive -= static_cast<long long>(live.size());
  }
  std::string name() const override { return "emulated GPU"; }
  Ptr alloc(size_t bytes) override {
    notCapturing("an allocation");
    void *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p)
      throw std::bad_alloc();
    std::memset(p, 0xFF, bytes); // garbage, as cuMemAlloc gives: NaN floats
    live.insert(reinterpret_cast<Ptr>(p));
    ++gLive;
    return reinterpret_cast<Ptr>(p);
  }
  void free(Ptr p) override {
    notCapturing("a free");
    if (!pending.empty()) // (after the queued work, as the runtime's free)
      drain();
    if (!live.erase(p))
      throw std::runtime_error("emulated GPU: free of an address it did not allocate");
    std::free(reinterpret_cast<void *>(p));
    --gLive;
  }
  // Stream work runs at once (or, with a lazy stream, when the host waits),
  // or is recorded while a capture is open.
  void queue(std::function<void()> work) {
    if (recording) {
      tape.push_back(std::move(work));
      tapeMarks.push_back(-1);
      return;
    }
    ++gDirectWork;
    run(std::move(work));
  }
  void run(std::function<void()> work) {
    if (!lazy)
      return work();
    pending.push_back(std::move(work));
    ++queuedWork;
  }
  // Runs the lazy stream's work up to item `upTo` (all: -1). A host wait:
  // counted, and as idle when it leaves the stream with nothing queued.
  void drain(long long upTo = -1) {
    ++gHostWaits;
    while (!pending.empty() && (upTo < 0 || doneWork < upTo)) {
      std::function<void()> w = std::move(pending.front());
      pending.pop_front();
      ++doneWork;
      w();
    }
    if (upTo < 0) // (late copies nothing waited for: after everything)
      for (std::function<void()> &c : std::exchange(lateCopies, {}))
        c();
    if (pending.empty())
      ++gIdleWaits;
  }

  // The copy stream (see emulateCopyStream). A mark's latest record: the
  // number of the stream item that records it (done once doneWork reaches
  // it; 0: none yet).
  int newMark() override {
    if (copyTiming == 0)
      return -1;
    markAt.push_back(0);
    return static_cast<int>(markAt.size()) - 1;
  }
  void recordMark(int mark) override {
    if (mark < 0)
      return;
    if (recording) {
      tape.push_back([] {});
      tapeMarks.push_back(mark);
      return;
    }
    run([] {});
    markAt.at(static_cast<size_t>(mark)) = queuedWork;
  }
  void uploadAfter(int mark, Ptr dst, const void *src, size_t bytes) override {
    if (mark < 0)
      return uploadAsync(dst, src, bytes);
    notCapturing("a copy on the copy stream");
    if (!isHostAlloc(src, bytes))
      throw std::runtime_error("emulated GPU: a copy-stream upload from pageable host memory");
    std::function<void()> copy = [=] { std::memcpy(reinterpret_cast<void *>(dst), src, bytes); };
    if (!lazy) { // (the mark has run: everything runs at once)
      ++gDirectWork;
      return copy();
    }
    if (copyTiming == 2) {
      lateCopies.push_back(std::move(copy));
      return;
    }
    const long long at = markAt.at(static_cast<size_t>(mark));
    if (at <= doneWork) // the mark has passed: the copy runs now
      return copy();
    // Right after the mark's item: items after it move one on, and so do
    // the fences and marks that count them.
    pending.insert(pending.begin() + (at - doneWork), std::move(copy));
    ++queuedWork;
    for (long long &f : fences)
      f += f > at;
    for (long long &m : markAt)
      m += m > at;
  }
  void joinCopies() override {
    for (std::function<void()> &c : std::exchange(lateCopies, {}))
      run(std::move(c));
  }
  void uploadAsync(Ptr dst, const void *src, size_t bytes) override {
    if (recording && !isHostAlloc(src, bytes))
      throw std::runtime_error("emulated GPU: an upload from pageable host memory during stream "
                               "capture (its graph would read memory the host reuses)");
    if (lazy && !recording && !isHostAlloc(src, bytes)) { // (the driver stages pageable memory)
      auto copy = std::make_shared<std::vector<char>>(static_cast<const char *>(src),
                                                      static_cast<const char *>(src) + bytes);
      return queue([=] { std::memcpy(reinterpret_cast<void *>(dst), copy->data(), bytes); });
    }
    // Page-locked memory is read when the copy runs.
    queue([=] { std::memcpy(reinterpret_cast<void *>(dst), src, bytes); });
  }
  void downloadAsync(void *dst, Ptr src, size_t bytes) override {
    notCapturing("an asynchronous download");
    if (!isHostAlloc(dst, bytes))
      throw std::runtime_error("emulated GPU: an asynchronous download to pageable memory");
    queue([=] { std::memcpy(dst, reinterpret_cast<const void *>(src), bytes); });
  }
  int64_t fence() override {
    notCapturing("a fence");
    fences.push_back(queuedWork);
    return static_cast<int64_t>(fences.size());
  }
  bool fenceDone(int64_t ticket) override {
    return doneWork >= fences.at(static_cast<size_t>(ticket - 1));
  }
  void waitFence(int64_t ticket) override {
    notCapturing("a wait for a fence");
    drain(fences.at(static_cast<size_t>(ticket - 1)));
  }
  void copyAsync(Ptr dst, Ptr src, size_t bytes) override {
    if (dst != src)
      queue([=] {
        std::memcpy(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), bytes);
      });
  }
  void memsetAsync(Ptr dst, unsigned value, size_t words) override {
    queue([=] {
      unsigned *d = reinterpret_cast<unsigned *>(dst);
      for (size_t w = 0; w < words; ++w)
        d[w] = value;
    });
  }
  void downloadSync(void *dst, Ptr src, size_t bytes) override {
    notCapturing("a download");
    drain();
    gDownloadedBytes += static_cast<long long>(bytes);
    std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
  }
  void synchronize() override {
    notCapturing("a stream synchronisation");
    drain();
  }
  bool canRecord() const override { return true; }
  bool bf16TensorCores() const override { return tensorCores; }
  void beginRecording() override {
    notCapturing("a second capture");
    recording = true;
    tape.clear();
  }
  int endRecording() override {
    if (!recording)
      throw std::runtime_error("emulated GPU: endRecording without a capture");
    recording = false;
    graphs.push_back(std::move(tape));
    graphMarks.push_back(std::move(tapeMarks));
    tape.clear();
    tapeMarks.clear();
    return static_cast<int>(graphs.size()) - 1;
  }
  void abandonRecording() override {
    recording = false;
    tape.clear();
    tapeMarks.clear();
  }
  void launchGraph(int id) override {
    notCapturing("a graph launch");
    ++gGraphLaunches;
    const std::vector<std::function<void()>> &work = graphs.at(static_cast<size_t>(id));
    const std::vector<int> &marks = graphMarks.at(static_cast<size_t>(id));
    for (size_t k = 0; k < work.size(); ++k) {
      run(work[k]);
      if (marks[k] >= 0) // (each launch records the mark where it reaches it)
        markAt.at(static_cast<size_t>(marks[k])) = lazy ? queuedWork : doneWork;
    }
  }
  void dropGraphs() override {
    graphs.clear();
    graphMarks.clear();
  }
  void *hostAlloc(size_t bytes) override {
    hostBlocks.emplace_back(new char[bytes ? bytes : 1], bytes);
    return hostBlocks.back().first.get();
  }
  void *opsFunction(const std::string &n) override {
    auto it = ops.find(n);
    return it == ops.end() ? nullptr : &it->second;
  }
  void *modelFunction(const std::string &n) override {
    auto it = model.find(n);
    return it == model.end() ? nullptr : &it->second;
  }
  void launch(void *fn, unsigned grid, unsigned block, void **params, int count,
              const char *what) override {
    EmuKernel &k = *static_cast<EmuKernel *>(fn);
    if (!recording && !lazy) {
      ++gDirectWork;
      launchNow(k, grid, block, params, count, what);
      return;
    }
    // Arguments are copied now, as cuLaunchKernel does under capture.
    ArgSnapshot args = k.op && !k.cuda && !k.twin ? k.op.snapshot(params)
                                                  : snapshotPointers(params, count);
    queue([this, &k, grid, block, args, count, name = std::string(what)]() mutable {
      launchNow(k, grid, block, args.params.data(), count, name.c_str());
    });
  }
  void launchNow(EmuKernel &k, unsigned grid, unsigned block, void **params, int count,
                 const char *what) {
    // One launch at a time on the emulated GPU (pipeline stages and replicas
    // launch from several threads; the built-ins' state is global).
    static std::mutex gpuLock;
    std::lock_guard<std::mutex> lock(gpuLock);
    {
      std::lock_guard<std::mutex> counts(gLaunchCountsLock);
      ++gLaunchCounts[what];
    }
    if (grid == 0 || block == 0 || grid > 65535 || block > 1024)
      throw std::runtime_error(std::string("emulated GPU: bad launch geometry for ") + what);
    using namespace stretto_emu;
    if (k.cuda && (k.bf16Slots || !(cooperativeTwins && k.cooperative && k.twin))) {
      // generated CUDA C: pointer arguments, the output last
      if (count >= static_cast<int>(pointerCallers().size()))
        throw std::runtime_error(std::string("emulated GPU: too many arguments for ") + what);
      std::vector<void *> args;
      for (int a = 0; a < count; ++a)
        args.push_back(*static_cast<void *const *>(params[a]));
      setLaunch(grid, block, &syncthreads, &shflDown, &shflIdx);
      PointerCall call = pointerCallers()[count];
      runGrid(grid, block, k.cooperative, [&](unsigned b, unsigned t) {
        blockIdx.x = b, threadIdx.x = t;
        setThread(b, t);
        call(k.cuda, args.data());
      });
      return;
    }
    if (k.twin) { // pointers: the inputs, then the output
      std::vector<const void *> in;
      for (int a = 0; a + 1 < count; ++a)
        in.push_back(*static_cast<const void *const *>(params[a]));
      void *out[1] = {*static_cast<void *const *>(params[count - 1])};
      k.twin(in.data(), out);
      return;
    }
    runGrid(grid, block, k.cooperative, [&](unsigned b, unsigned t) {
      blockIdx.x = b, threadIdx.x = t;
      k.op(params);
    });
  }
  // cuBLASLt's column-major problem, computed as it is specified.
  void gemm(const GemmCall &g, const void *a, const void *b, void *c) override {
    if ((g.bias || g.aux || g.biasGrad || g.geluAux) && gRefuseEpilogues) // (as cuBLASLt's
      throw GemmRefused(std::string("emulated cuBLASLt: no algorithm for a ") + // heuristic would)
                        (g.geluAux ? "GELU_AUX" : g.bias ? "BIAS" : g.aux ? "DGELU" : "BGRADA") +
                        " epilogue");
    // (the epilogue's vectors 16-byte aligned: what cuBLASLt wants, so the
    // runtime must not hand it others)
    for (const void *v : {static_cast<const void *>(g.bias), g.aux,
                          static_cast<const void *>(g.biasGrad),
                          static_cast<const void *>(g.geluAux)})
      if (reinterpret_cast<uintptr_t>(v) % 16 != 0)
        throw std::runtime_error("emulated cuBLASLt: an epilogue's vector is not 16-byte aligned");
    // (cuBLASLt's rule for GELU's auxiliary vector: a leading dimension,
    // C's, that is a multiple of 8)
    if ((g.aux || g.geluAux) && columnMajorProblem(g).c.ld % 8 != 0)
      throw GemmRefused("emulated cuBLASLt: the GELU aux leading dimension is not a multiple of 8");
    queue([=] { gemmNow(g, a, b, c); });
  }
  void gemmNow(const GemmCall &g, const void *a, const void *b, void *c) {
    LtProblem p = columnMajorProblem(g);
    if (g.tf32)
      ++gTf32Gemms;
    auto load = [&](const void *base, int64_t index) -> float {
      if (!g.bf16)
        return g.tf32 ? toTf32(static_cast<const float *>(base)[index])
                      : static_cast<const float *>(base)[index];
      unsigned bits = static_cast<unsigned>(static_cast<const uint16_t *>(base)[index]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    };
    // Element (i, j) of op(M): M stored column-major with leading dim ld.
    auto at = [&](const void *base, const LtMatrix &m, int op, int64_t batch, int64_t i,
                  int64_t j) {
      int64_t r = op == cublaslt::kOpN ? i : j, col = op == cublaslt::kOpN ? j : i;
      return load(base, batch * m.stride + r + col * m.ld);
    };
    // The alignment cuBLASLt is promised (CublasLt.cpp's preferences) must
    // hold for every batch item's pointer.
    int inBytes = g.bf16 ? 2 : 4;
    auto checkAligned = [&](const void *base, const LtMatrix &m, int bytes, const char *which) {
      uint32_t align = m.alignment(p.batch, bytes, g.align);
      for (int64_t bt = 0; bt < p.batch; ++bt) {
        auto addr = reinterpret_cast<uintptr_t>(base) + uintptr_t(bt * m.stride * bytes);
        if (addr % align != 0)
          throw std::runtime_error(std::string("emulated GPU: GEMM operand ") + which +
                                   " is not " + std::to_string(align) + "-byte aligned");
      }
    };
    checkAligned(b, p.a, inBytes, "B");
    checkAligned(a, p.b, inBytes, "A");
    checkAligned(c, p.c, g.bf16Out ? 2 : 4, "C");
    if (g.aux || g.geluAux) // DGELU's x, GELU_AUX's sum: C's type and layout
      checkAligned(g.aux ? g.aux : g.geluAux, p.c, g.bf16Out ? 2 : 4, "aux");
    int64_t kk = p.opA == cublaslt::kOpN ? p.a.cols : p.a.rows;
    for (int64_t bt = 0; bt < p.batch; ++bt)
      for (int64_t i = 0; i < p.c.rows; ++i)
        for (int64_t j = 0; j < p.c.cols; ++j) {
          float s = 0.0f;
          for (int64_t l = 0; l < kk; ++l) // cuBLASLt's A is our B
            s += at(b, p.a, p.opA, bt, i, l) * at(a, p.b, p.opB, bt, l, j);
          // f32, or bf16 rounded to nearest even (cuBLASLt's conversion of
          // the scaled f32 result when D is CUDA_R_16BF).
          const int64_t at = bt * p.c.stride + i + j * p.c.ld;
          // The BIAS epilogue: one value per row of cuBLASLt's D (a
          // column of ours), added in f32 before D's conversion.
          float v = g.alpha * s + (g.bias ? g.bias[i] : 0.0f);
          // The DGELU epilogue: times gelu'(x), x read at D's place in
          // D's type (the tanh form's derivative, KernelMath.inc's).
          if (g.aux) {
            const float x = g.bf16Out ? stretto::kernelmath::st_widen(
                                            static_cast<const uint16_t *>(g.aux)[at])
                                      : static_cast<const float *>(g.aux)[at];
            v *= stretto::kernelmath::st_gelu_grad(x);
          }
          // GELU_AUX: the sum to aux (D's type and layout), gelu of it to D.
          auto put = [&](void *to, float x) {
            if (!g.bf16Out) {
              static_cast<float *>(to)[at] = x;
              return;
            }
            float r = roundToBF16(x);
            uint32_t bits;
            std::memcpy(&bits, &r, 4);
            static_cast<uint16_t *>(to)[at] = static_cast<uint16_t>(bits >> 16);
          };
          if (g.geluAux) {
            put(g.geluAux, v);
            v = stretto::kernelmath::st_gelu(v);
          }
          put(c, v);
        }
    // The BGRADA epilogue: each row of cuBLASLt's A (our b, a column of
    // ours) summed over k in f32, in increasing order, as stored (no TF32
    // rounding of the summands).
    if (g.biasGrad)
      for (int64_t i = 0; i < p.c.rows; ++i) {
        float s = 0.0f;
        for (int64_t l = 0; l < kk; ++l) {
          const int64_t index = (p.opA == cublaslt::kOpN ? i + l * p.a.ld : l + i * p.a.ld);
          s += g.bf16 ? stretto::kernelmath::st_widen(static_cast<const uint16_t *>(b)[index])
                      : static_cast<const float *>(b)[index];
        }
        g.biasGrad[i] = s;
      }
  }

private:
  using SetLaunch = void (*)(unsigned, unsigned, void (*)(),
                             float (*)(unsigned, float, int),
                             float (*)(unsigned, float, int));
  using SetThread = void (*)(unsigned, unsigned);
  SetLaunch setLaunch = nullptr;
  SetThread setThread = nullptr;
  std::map<std::string, EmuKernel> ops, model;
  std::set<Ptr> live;
  bool cooperativeTwins = false; // kernels that synchronise run their C++ twins
  bool recording = false;
  bool tensorCores = gTensorCores.load(); // as emulateTensorCores said at its creation
  std::vector<std::function<void()>> tape;                // the open capture
  std::vector<std::vector<std::function<void()>>> graphs; // by id
  std::vector<int> tapeMarks;                             // by tape item: its mark, or -1
  std::vector<std::vector<int>> graphMarks;               // by id, by item
  int copyTiming = gCopyStream.load();                    // as emulateCopyStream said
  std::vector<long long> markAt;                          // by mark
  std::vector<std::function<void()>> lateCopies;          // copyTiming 2: not yet joined
  std::vector<std::pair<std::unique_ptr<char[]>, size_t>> hostBlocks;
  // A lazy stream (emulateLazyStreams): work waits here until the host
  // waits for it; items queued and run so far; each fence's item count.
  bool lazy = gLazyStreams.load();
  std::deque<std::function<void()>> pending;
  long long queuedWork = 0, doneWork = 0;
  std::vector<long long> fences;

  // What CUDA forbids while a stream captures (it would invalidate the
  // capture): the emulator throws instead.
  void notCapturing(const char *what) const {
    if (recording)
      throw std::runtime_error(std::string("emulated GPU: ") + what +
                               " during stream capture");
  }
  bool isHostAlloc(const void *p, size_t bytes) const {
    for (const auto &[block, size] : hostBlocks)
      if (static_cast<const char *>(p) >= block.get() &&
          static_cast<const char *>(p) + bytes <= block.get() + size)
        return true;
    return false;
  }
};

} // namespace

HostKernelCache &emulatorCache() {
  static HostKernelCache cache((std::filesystem::temp_directory_path() /
                                ("stretto-emulated-gpu-" + std::to_string(::getpid())))
                                   .string());
  return cache;
}

std::unique_ptr<GpuBackend> emulatedGpu(std::map<std::string, PlanExecutor::KernelFn> kernels,
                                        const std::string &cudaSource, bool blockReductions) {
  return std::make_unique<EmulatedGpu>(std::move(kernels), cudaSource, &emulatorCache(),
                                       blockReductions);
}

std::unique_ptr<PlanExecutor>
emulatedGpuExecutor(const Graph &graph, std::map<std::string, PlanExecutor::KernelFn> kernels,
                    GemmPrecision gemm, const std::string &cudaSource, bool cooperativeTwins) {
  MultiTensorKernels multi = wantedMultiTensorKernels(cudaSource, graph);
  // The generated CUDA C's store_bf16 kernels write two bytes (as on a GPU)
  // unless STRETTO_BF16_STORAGE=0; C++ twins write floats.
  const bool halves = !cudaSource.empty() && wantedBf16Storage();
  const std::string full = cudaSource.empty() ? cudaSource
                           : halves           ? cudaSource + multi.source
                                              : kBf16AsF32Define + cudaSource + multi.source;
  return makeGpuPlanExecutor(graph,
                             std::make_unique<EmulatedGpu>(std::move(kernels), full,
                                                           &emulatorCache(), false,
                                                           cooperativeTwins),
                             gemm, std::move(multi), halves);
}

long long emulatedGpuLiveAllocations() { return gLive; }
long long emulatedGpuTf32Gemms() { return gTf32Gemms; }
long long emulatedGpuGraphLaunches() { return gGraphLaunches; }
long long emulatedGpuDirectWork() { return gDirectWork; }
long long emulatedGpuDownloadedBytes() { return gDownloadedBytes; }
void emulateTensorCores(bool on) { gTensorCores = on; }
void refuseGemmEpilogues(bool on) { gRefuseEpilogues = on; }
void emulateLazyStreams(bool on) { gLazyStreams = on; }
void emulateCopyStream(int timing) { gCopyStream = timing; }
long long emulatedGpuHostWaits() { return gHostWaits; }
long long emulatedGpuIdleWaits() { return gIdleWaits; }
long long emulatedGpuLaunchesOf(const std::string &prefix) {
  std::lock_guard<std::mutex> lock(gLaunchCountsLock);
  long long n = 0;
  for (const auto &[name, count] : gLaunchCounts)
    n += name.compare(0, prefix.size(), prefix) == 0 ? count : 0;
  return n;
}

} // namespace stretto
