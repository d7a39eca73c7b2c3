//===- GpuEmulator.cpp - the CUDA plan device on an emulated GPU ----------===//
#include "GpuEmulator.h"
#include "../../runtime/GpuBackend.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

// --- RuntimeOps.cu as C++: the CUDA built-ins it uses, on one host thread --
namespace stretto_emu {
struct StDim3 {
  unsigned x = 0, y = 1, z = 1;
};
thread_local StDim3 blockIdx, blockDim, gridDim, threadIdx;
inline void syncthreads() {}
inline float shflDown(unsigned, float v, int) { return v; } // unused: see st_row_sums below
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
} // namespace stretto_emu

namespace stretto_emu_ops {
using namespace stretto_emu;
#define ST_FN static inline
#define __global__
#define __forceinline__ inline
#define __shared__ static thread_local
#define __syncthreads syncthreads
#define __shfl_down_sync shflDown
#define __float_as_uint floatAsUint
#define __int_as_float intAsFloat
ST_FN float st_float_bits(int b) { return intAsFloat(b); }
#include "stretto/Support/KernelMath.inc"
#include "../../runtime/cuda/RuntimeOps.cu"
#undef __global__
#undef __forceinline__
#undef __shared__
#undef __syncthreads
#undef __shfl_down_sync
#undef __float_as_uint
#undef __int_as_float

// The block reductions, as host loops (the emulator runs one thread at a
// time, so warp shuffles cannot be emulated): same results up to the order
// of the sums.
void emu_row_sums(i64 rows, i64 len, const float *x, float *y) {
  if (blockIdx.x != 0 || threadIdx.x != 0)
    return;
  for (i64 r = 0; r < rows; ++r) {
    float s = 0.0f;
    for (i64 j = 0; j < len; ++j)
      s += x[r * len + j];
    y[r] = s;
  }
}
void emu_norm_plus_eps(i64 n, const float *x, float *norm) {
  if (blockIdx.x != 0 || threadIdx.x != 0)
    return;
  float s = 0.0f;
  for (i64 e = 0; e < n; ++e)
    s += x[e] * x[e];
  norm[0] = std::sqrt(s) + 1e-7f;
}
} // namespace stretto_emu_ops

namespace stretto {
namespace {

std::atomic<long long> gLive{0};

// A kernel the emulator can launch: a runtime op (called per block and
// thread with cuLaunchKernel-style arguments) or a generated kernel's C++
// twin.
struct EmuKernel {
  std::function<void(void **)> op;
  PlanExecutor::KernelFn model = nullptr;
};

template <typename... A, size_t... I>
void invoke(void (*f)(A...), void **p, std::index_sequence<I...>) {
  f(*static_cast<std::remove_reference_t<A> *>(p[I])...);
}
template <typename... A> std::function<void(void **)> adapt(void (*f)(A...)) {
  return [f](void **p) { invoke(f, p, std::index_sequence_for<A...>{}); };
}

std::map<std::string, EmuKernel> runtimeOps() {
  using namespace stretto_emu_ops;
  std::map<std::string, EmuKernel> m;
  auto add = [&](const char *name, std::function<void(void **)> f) { m[name].op = std::move(f); };
  add("st_unary_op", adapt(st_unary_op));
  add("st_binary_op", adapt(st_binary_op));
  add("st_gather", adapt(st_gather));
  add("st_scatter", adapt(st_scatter));
  add("st_accumulate", adapt(st_accumulate));
  add("st_divide", adapt(st_divide));
  add("st_row_sums", adapt(emu_row_sums));
  add("st_column_sums", adapt(st_column_sums));
  add("st_softmax_rows", adapt(st_softmax_rows));
  add("st_norm_rows", adapt(st_norm_rows));
  add("st_embedding", adapt(st_embedding));
  add("st_scatter_rows", adapt(st_scatter_rows));
  add("st_one_hot", adapt(st_one_hot));
  add("st_cross_entropy_rows", adapt(st_cross_entropy_rows));
  add("st_mean", adapt(st_mean));
  add("st_descend", adapt(st_descend));
  add("st_norm_plus_eps", adapt(emu_norm_plus_eps));
  add("st_ns_start", adapt(st_ns_start));
  add("st_axpy", adapt(st_axpy));
  add("st_scale_add", adapt(st_scale_add));
  add("st_to_bf16", adapt(st_to_bf16));
  return m;
}

class EmulatedGpu final : public GpuBackend {
public:
  explicit EmulatedGpu(std::map<std::string, PlanExecutor::KernelFn> k) : ops(runtimeOps()) {
    for (auto &[name, fn] : k)
      model[name].model = fn;
  }
  ~EmulatedGpu() override {
    for (Ptr p : live)
      std::free(reinterpret_cast<void *>(p));
    gLive -= static_cast<long long>(live.size());
  }
  std::string name() const override { return "emulated GPU"; }
  Ptr alloc(size_t bytes) override {
    void *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p)
      throw std::bad_alloc();
    std::memset(p, 0xFF, bytes); // garbage, as cuMemAlloc gives: NaN floats
    live.insert(reinterpret_cast<Ptr>(p));
    ++gLive;
    return reinterpret_cast<Ptr>(p);
  }
  void free(Ptr p) override {
    if (!live.erase(p))
      throw std::runtime_error("emulated GPU: free of an address it did not allocate");
    std::free(reinterpret_cast<void *>(p));
    --gLive;
  }
  void uploadAsync(Ptr dst, const void *src, size_t bytes) override {
    std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
  }
  void copyAsync(Ptr dst, Ptr src, size_t bytes) override {
    if (dst != src)
      std::memcpy(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), bytes);
  }
  void memsetAsync(Ptr dst, unsigned value, size_t words) override {
    unsigned *d = reinterpret_cast<unsigned *>(dst);
    for (size_t w = 0; w < words; ++w)
      d[w] = value;
  }
  void downloadSync(void *dst, Ptr src, size_t bytes) override {
    std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
  }
  void synchronize() override {}
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
    if (grid == 0 || block == 0 || grid > 65535 || block > 1024)
      throw std::runtime_error(std::string("emulated GPU: bad launch geometry for ") + what);
    EmuKernel &k = *static_cast<EmuKernel *>(fn);
    if (k.model) { // pointers: the inputs, then the output
      std::vector<const void *> in;
      for (int a = 0; a + 1 < count; ++a)
        in.push_back(*static_cast<const void *const *>(params[a]));
      void *out[1] = {*static_cast<void *const *>(params[count - 1])};
      k.model(in.data(), out);
      return;
    }
    using namespace stretto_emu;
    gridDim.x = grid;
    blockDim.x = block;
    for (unsigned b = 0; b < grid; ++b)
      for (unsigned t = 0; t < block; ++t) {
        blockIdx.x = b;
        threadIdx.x = t;
        k.op(params);
      }
  }
  // cuBLASLt's column-major problem, computed as it is specified.
  void gemm(const GemmCall &g, const void *a, const void *b, float *c) override {
    LtProblem p = columnMajorProblem(g);
    auto load = [&](const void *base, int64_t index) -> float {
      if (!g.bf16)
        return static_cast<const float *>(base)[index];
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
    checkAligned(c, p.c, 4, "C");
    int64_t kk = p.opA == cublaslt::kOpN ? p.a.cols : p.a.rows;
    for (int64_t bt = 0; bt < p.batch; ++bt)
      for (int64_t i = 0; i < p.c.rows; ++i)
        for (int64_t j = 0; j < p.c.cols; ++j) {
          float s = 0.0f;
          for (int64_t l = 0; l < kk; ++l) // cuBLASLt's A is our B
            s += at(b, p.a, p.opA, bt, i, l) * at(a, p.b, p.opB, bt, l, j);
          c[bt * p.c.stride + i + j * p.c.ld] = g.alpha * s;
        }
  }

private:
  std::map<std::string, EmuKernel> ops, model;
  std::set<Ptr> live;
};

} // namespace

std::unique_ptr<PlanExecutor>
emulatedGpuExecutor(const Graph &graph, std::map<std::string, PlanExecutor::KernelFn> kernels,
                    GemmPrecision gemm) {
  return makeGpuPlanExecutor(graph, std::make_unique<EmulatedGpu>(std::move(kernels)), gemm);
}

long long emulatedGpuLiveAllocations() { return gLive; }

} // namespace stretto
