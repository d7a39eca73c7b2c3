//===- CublasLt.cpp - cuBLASLt GEMMs through dlopen -----------------------===//
#include "cuda/CublasLt.h"

#include "stretto/Runtime/CudaDriver.h"

#include "cuda/DynamicLibrary.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace stretto {

using namespace cublaslt;

struct CublasLt::Api {
  DynamicLibrary lib;
  int (*create)(void **) = nullptr;
  int (*destroy)(void *) = nullptr;
  int (*descCreate)(void **, int, int) = nullptr;
  int (*descDestroy)(void *) = nullptr;
  int (*descSet)(void *, int, const void *, size_t) = nullptr;
  int (*layoutCreate)(void **, int, uint64_t, uint64_t, int64_t) = nullptr;
  int (*layoutDestroy)(void *) = nullptr;
  int (*layoutSet)(void *, int, const void *, size_t) = nullptr;
  int (*prefCreate)(void **) = nullptr;
  int (*prefDestroy)(void *) = nullptr;
  int (*prefSet)(void *, int, const void *, size_t) = nullptr;
  int (*heuristic)(void *, void *, void *, void *, void *, void *, void *, int, HeuristicResult *,
                   int *) = nullptr;
  int (*matmul)(void *, void *, const void *, const void *, void *, const void *, void *,
                const void *, const void *, void *, void *, void *, const Algo *, void *, size_t,
                void *) = nullptr;
  const char *(*statusName)(int) = nullptr;
  size_t (*getVersion)() = nullptr;

  bool load() {
    if (!lib.open({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}))
      return false;
    auto sym = [&](auto &fn, const char *name) { lib.bind(fn, name); };
    sym(create, "cublasLtCreate");
    sym(destroy, "cublasLtDestroy");
    sym(descCreate, "cublasLtMatmulDescCreate");
    sym(descDestroy, "cublasLtMatmulDescDestroy");
    sym(descSet, "cublasLtMatmulDescSetAttribute");
    sym(layoutCreate, "cublasLtMatrixLayoutCreate");
    sym(layoutDestroy, "cublasLtMatrixLayoutDestroy");
    sym(layoutSet, "cublasLtMatrixLayoutSetAttribute");
    sym(prefCreate, "cublasLtMatmulPreferenceCreate");
    sym(prefDestroy, "cublasLtMatmulPreferenceDestroy");
    sym(prefSet, "cublasLtMatmulPreferenceSetAttribute");
    sym(heuristic, "cublasLtMatmulAlgoGetHeuristic");
    sym(matmul, "cublasLtMatmul");
    sym(statusName, "cublasLtGetStatusName");
    sym(getVersion, "cublasLtGetVersion");
    return lib.missing().empty();
  }
};

// One GEMM shape's descriptors and chosen algorithm.
struct CublasLt::Plan {
  Api *api = nullptr;
  void *desc = nullptr, *a = nullptr, *b = nullptr, *c = nullptr;
  Algo algo{};
  ~Plan() {
    for (void *l : {a, b, c})
      if (l)
        api->layoutDestroy(l);
    if (desc)
      api->descDestroy(desc);
  }
};

namespace {
std::string shapeText(const GemmCall &g) {
  return std::to_string(g.batch) + "x[" + std::to_string(g.m) + "x" + std::to_string(g.k) +
         (g.ta ? "^T" : "") + "]x[" + std::to_string(g.k) + "x" + std::to_string(g.n) +
         (g.tb ? "^T" : "") + "] " +
         (g.bf16   ? "bf16"
          : g.tf32 ? "tf32"
                   : "f32") +
         (g.bf16Out ? " -> bf16" : "") + (g.bias ? " +bias" : "") + (g.aux ? " *dgelu" : "") +
         (g.biasGrad ? " +bgrad" : "") + (g.geluAux ? " gelu+aux" : "") + " strides " +
         std::to_string(g.strideA) + "/" + std::to_string(g.strideB) + "/" +
         std::to_string(g.strideC) + " align " + std::to_string(g.align);
}
} // namespace

std::unique_ptr<CublasLt> CublasLt::open(CudaDevice &device, std::string &why) {
  std::unique_ptr<CublasLt> lt(new CublasLt);
  lt->device_ = &device;
  lt->api_ = std::make_unique<Api>();
  if (!lt->api_->load()) {
    why = lt->api_->lib.isOpen() ? "libcublasLt lacks " + lt->api_->lib.missing()
                        : "cuBLASLt not found (libcublasLt.so.13)";
    return nullptr;
  }
  if (int rc = lt->api_->create(&lt->handle_); rc != 0) {
    why = "cublasLtCreate failed with status " + std::to_string(rc);
    return nullptr;
  }
  lt->workspaceBytes_ = size_t(32) << 20;
  lt->workspace_ = device.alloc(lt->workspaceBytes_);
  return lt;
}

CublasLt::~CublasLt() {
  plans_.clear();
  if (handle_)
    api_->destroy(handle_);
  if (workspace_) {
    try {
      device_->synchronize();
      device_->free(workspace_);
    } catch (...) {
    }
  }
}

uint32_t LtMatrix::alignment(int64_t batch, int elementBytes, uint32_t base) const {
  uint32_t a = base;
  if (batch > 1 && stride != 0)
    while (a > 1 && (stride * elementBytes) % a != 0)
      a /= 2;
  return a;
}

int computeTypeOf(const GemmCall &g) {
  return g.tf32 && !g.bf16 ? kComputeF32FastTF32 : kComputeF32;
}

LtProblem columnMajorProblem(const GemmCall &g) {
  LtProblem p;
  p.opA = g.tb ? kOpT : kOpN;
  p.opB = g.ta ? kOpT : kOpN;
  // Our B is [k, n] row-major (n x k column-major), or [n, k] when
  // transposed; our A likewise; C [m, n] row-major is n x m column-major.
  p.a = LtMatrix{g.tb ? g.k : g.n, g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.strideB};
  p.b = LtMatrix{g.ta ? g.m : g.k, g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.strideA};
  p.c = LtMatrix{g.n, g.m, g.n, g.strideC};
  p.batch = g.batch;
  return p;
}

size_t CublasLt::version() const { return api_->getVersion(); }

double CublasLt::timeAlgorithm(Plan &p, const Algo &algo, const GemmCall &g, const void *a,
                               const void *b, void *c) {
  const float beta = 0.0f;
  auto call = [&] {
    return api_->matmul(handle_, p.desc, &g.alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c, &algo,
                        reinterpret_cast<void *>(workspace_), workspaceBytes_,
                        device_->stream());
  };
  device_->synchronize();
  if (call() != 0) // (refused before anything ran)
    return HUGE_VAL;
  device_->synchronize();
  constexpr int kCalls = 4;
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < kCalls; ++k)
    if (call() != 0)
      return HUGE_VAL;
  device_->synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kCalls;
}

CublasLt::Plan &CublasLt::planFor(const GemmCall &g, const void *a_, const void *b_, void *c_) {
  std::string key = shapeText(g) + " a" + std::to_string(g.alpha);
  auto it = plans_.find(key);
  if (it != plans_.end())
    return *it->second;
  auto p = std::make_unique<Plan>();
  p->api = api_.get();
  Api &a = *api_;
  auto ok = [&](int rc, const char *what) {
    if (rc != 0)
      throw std::runtime_error(std::string("cuBLASLt ") + what + " failed (" +
                               (a.statusName ? a.statusName(rc) : std::to_string(rc).c_str()) +
                               ") for GEMM " + shapeText(g));
  };
  ok(a.descCreate(&p->desc, computeTypeOf(g), kR32F), "matmul descriptor");
  LtProblem lp = columnMajorProblem(g);
  ok(a.descSet(p->desc, kDescTransA, &lp.opA, sizeof lp.opA), "transa");
  ok(a.descSet(p->desc, kDescTransB, &lp.opB, sizeof lp.opB), "transb");
  if (g.bias) { // f32 bias values, one per column of ours (row of cuBLASLt's D)
    const int32_t biasType = kR32F;
    const uint32_t epilogue = g.geluAux ? kEpilogueGeluAuxBias : kEpilogueBias;
    ok(a.descSet(p->desc, kDescEpilogue, &epilogue, sizeof epilogue), "epilogue");
    ok(a.descSet(p->desc, kDescBiasDataType, &biasType, sizeof biasType), "bias type");
    // (the heuristic reads the pointer's alignment: set before it)
    ok(a.descSet(p->desc, kDescBiasPointer, &g.bias, sizeof g.bias), "bias pointer");
  } else if (g.geluAux) {
    ok(a.descSet(p->desc, kDescEpilogue, &kEpilogueGeluAux, sizeof kEpilogueGeluAux), "epilogue");
  }
  if (g.aux || g.geluAux) { // DGELU's x (GELU_AUX's sum) laid out as C: its type, ld, stride
    const int32_t auxType = g.bf16Out ? kR16BF : kR32F;
    const int64_t ld = lp.c.ld, stride = lp.c.stride;
    const void *aux = g.aux ? g.aux : g.geluAux;
    if (g.aux)
      ok(a.descSet(p->desc, kDescEpilogue, &kEpilogueDGelu, sizeof kEpilogueDGelu), "epilogue");
    ok(a.descSet(p->desc, kDescAuxDataType, &auxType, sizeof auxType), "aux type");
    ok(a.descSet(p->desc, kDescAuxLd, &ld, sizeof ld), "aux leading dimension");
    if (lp.batch > 1)
      ok(a.descSet(p->desc, kDescAuxBatchStride, &stride, sizeof stride), "aux batch stride");
    ok(a.descSet(p->desc, kDescAuxPointer, &aux, sizeof aux), "aux pointer");
  }
  if (g.biasGrad) { // BGRADA: the column sums of our B (cuBLASLt's A), in C's type
    const int32_t sumType = kR32F;
    ok(a.descSet(p->desc, kDescEpilogue, &kEpilogueBGradA, sizeof kEpilogueBGradA), "epilogue");
    ok(a.descSet(p->desc, kDescBiasDataType, &sumType, sizeof sumType), "bias gradient type");
    ok(a.descSet(p->desc, kDescBiasPointer, &g.biasGrad, sizeof g.biasGrad),
       "bias gradient pointer");
  }
  int inType = g.bf16 ? kR16BF : kR32F;
  auto layout = [&](void **l, int type, const LtMatrix &m) {
    ok(a.layoutCreate(l, type, m.rows, m.cols, m.ld), "matrix layout");
    if (lp.batch > 1) {
      int32_t count = static_cast<int32_t>(lp.batch);
      int64_t stride = m.stride;
      ok(a.layoutSet(*l, kLayoutBatchCount, &count, sizeof count), "batch count");
      ok(a.layoutSet(*l, kLayoutBatchStride, &stride, sizeof stride), "batch stride");
    }
  };
  layout(&p->a, inType, lp.a);
  layout(&p->b, inType, lp.b);
  layout(&p->c, g.bf16Out ? kR16BF : kR32F, lp.c);
  void *pref = nullptr;
  ok(a.prefCreate(&pref), "preference");
  uint64_t ws = workspaceBytes_;
  a.prefSet(pref, kPrefMaxWorkspace, &ws, sizeof ws);
  // cuBLASLt assumes 256-byte aligned matrices unless told otherwise; ours
  // are g.align-byte aligned (64: arena offsets), batch items as their
  // strides allow.
  int inBytes = g.bf16 ? 2 : 4, outBytes = g.bf16Out ? 2 : 4;
  uint32_t align[4] = {lp.a.alignment(lp.batch, inBytes, g.align),
                       lp.b.alignment(lp.batch, inBytes, g.align),
                       lp.c.alignment(lp.batch, outBytes, g.align),
                       lp.c.alignment(lp.batch, outBytes, g.align)};
  for (int m = 0; m < 4; ++m)
    ok(a.prefSet(pref, kPrefMinAlignA + m, &align[m], sizeof align[m]), "alignment preference");
  HeuristicResult results[kCandidates] = {};
  int found = 0;
  const bool tune = choices_ != nullptr;
  int rc = a.heuristic(handle_, p->desc, p->a, p->b, p->c, p->c, pref, tune ? kCandidates : 1,
                       results, &found);
  a.prefDestroy(pref);
  if ((g.bias || g.aux || g.biasGrad || g.geluAux) && (rc != 0 || found == 0))
    throw GemmRefused("cuBLASLt has no algorithm for GEMM " + shapeText(g) + " (status " +
                      std::to_string(rc) + ")");
  ok(rc, "algorithm heuristic");
  if (found == 0)
    throw std::runtime_error("cuBLASLt has no algorithm for GEMM " + shapeText(g));
  // The heuristic's first, or the choice recorded for this shape, or (not
  // while the stream is captured: timing waits for it) the fastest.
  int chosen = 0;
  if (tune) {
    if (std::optional<int> known = choices_->find(key); known && *known < found) {
      chosen = *known;
    } else if (!known && found > 1 && !device_->capturing()) {
      std::vector<double> seconds;
      for (int i = 0; i < found; ++i)
        seconds.push_back(timeAlgorithm(*p, results[i].algo, g, a_, b_, c_));
      chosen = std::max(fastestCandidate(seconds), 0);
      choices_->record(key, chosen);
    }
  }
  p->algo = results[chosen].algo;
  return *plans_.emplace(key, std::move(p)).first->second;
}

void CublasLt::gemm(const GemmCall &g, const void *a, const void *b, void *c) {
  device_->makeCurrent();
  Plan &p = planFor(g, a, b, c);
  if (g.bias) { // the descriptor is the shape's; the bias is this call's
    int rc = api_->descSet(p.desc, kDescBiasPointer, &g.bias, sizeof g.bias);
    if (rc != 0)
      throw std::runtime_error("cuBLASLt bias pointer failed for GEMM " + shapeText(g));
  }
  if (g.biasGrad) { // and where the bias gradient goes
    int rc = api_->descSet(p.desc, kDescBiasPointer, &g.biasGrad, sizeof g.biasGrad);
    if (rc != 0)
      throw std::runtime_error("cuBLASLt bias gradient pointer failed for GEMM " + shapeText(g));
  }
  if (g.aux || g.geluAux) { // and DGELU's input (GELU_AUX's output) too
    const void *aux = g.aux ? g.aux : g.geluAux;
    int rc = api_->descSet(p.desc, kDescAuxPointer, &aux, sizeof aux);
    if (rc != 0)
      throw std::runtime_error("cuBLASLt aux pointer failed for GEMM " + shapeText(g));
  }
  const float beta = 0.0f;
  int rc = api_->matmul(handle_, p.desc, &g.alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c, &p.algo,
                        reinterpret_cast<void *>(workspace_), workspaceBytes_, device_->stream());
  if (rc != 0 &&
      (g.bias || g.aux || g.biasGrad || g.geluAux)) // (refused at launch: nothing queued)
    throw GemmRefused(std::string("cublasLtMatmul refused (") +
                      (api_->statusName ? api_->statusName(rc) : "?") + ") GEMM " + shapeText(g));
  if (rc != 0)
    throw std::runtime_error(std::string("cublasLtMatmul failed (") +
                             (api_->statusName ? api_->statusName(rc) : "?") + ") for GEMM " +
                             shapeText(g));
}

} // namespace stretto
