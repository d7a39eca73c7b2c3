//===- PlanExecutor.cpp - the compiled CPU runtime ------------------------===//
//
// See PlanExecutor.h. Where a row op can follow the reference executor's
// order of floating-point operations at no cost it does (softmax, norms,
// cross-entropy, column sums), so those values match the oracle bit for bit;
// row sums use 16 partial sums (vectorised), and attention, matmul and
// Newton-Schulz use BLAS: those match within f32 rounding. Every order is
// fixed, independent of the thread count.
//
//===----------------------------------------------------------------------===//

#include "stretto/PlanExecutor.h"
#include "OpSemantics.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

namespace stretto {

using namespace ops;

namespace {

// Arena offsets are multiples of 16 floats (64 bytes: a cache line, an
// AVX-512 vector).
constexpr int64_t kAlign = 16;

int64_t alignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool isSink(OpKind k) {
  return k == OpKind::Write || k == OpKind::Grad || k == OpKind::Yield;
}

// Offset of the first element of output row `row` (all dims but the last)
// through strides `st`.
int64_t rowOffset(int64_t row, const Shape &out, const std::vector<int64_t> &st) {
  int64_t off = 0;
  for (int d = static_cast<int>(out.size()) - 2; d >= 0; --d) {
    off += (row % out[d]) * st[d];
    row /= out[d];
  }
  return off;
}

// out[idx] = in[sum_d idx_d * st[d]] over the index space `out`: transposes
// and broadcasts. Parallel over rows; a contiguous or broadcast inner dim
// is a copy or a fill.
void stridedGather(const float *in, const Shape &out, const std::vector<int64_t> &st, float *dst) {
  if (out.empty()) {
    dst[0] = in[0];
    return;
  }
  int64_t inner = out.back(), rows = numElements(out) / std::max<int64_t>(inner, 1);
  int64_t s = st.back();
#pragma omp parallel for schedule(static) if (rows * inner > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float *src = in + rowOffset(r, out, st);
    float *d = dst + r * inner;
    if (s == 1)
      std::memcpy(d, src, sizeof(float) * inner);
    else if (s == 0)
      std::fill(d, d + inner, src[0]);
    else
      for (int64_t j = 0; j < inner; ++j)
        d[j] = src[j * s];
  }
}

// c = alpha * op(a) * op(b) for `batch` blocks; a shared rhs with an
// untransposed lhs folds the batch into the rows (one large GEMM).
void batchedGemm(const float *a, const float *b, float *c, int64_t batch, int64_t m, int64_t n,
                 int64_t k, bool ta, bool tb, bool rhsBatched, float alpha) {
  auto one = [&](int64_t rows, const float *ap, const float *bp, float *cp) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(rows), static_cast<int>(n), static_cast<int>(k), alpha, ap,
                ta ? static_cast<int>(rows) : static_cast<int>(k), bp,
                tb ? static_cast<int>(k) : static_cast<int>(n), 0.0f, cp, static_cast<int>(n));
  };
  if (!rhsBatched && !ta) {
    one(batch * m, a, b, c);
    return;
  }
  // Many small matrices (attention's per-head products): one matrix per
  // thread beats splitting each small GEMM over every thread. Inside the
  // parallel region OpenBLAS's OpenMP build runs single-threaded.
  if (batch >= 2 * omp_get_max_threads() && m * n * k <= (int64_t(1) << 22)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < batch; ++i)
      one(m, a + i * m * k, b + (rhsBatched ? i * k * n : 0), c + i * m * n);
    return;
  }
  for (int64_t i = 0; i < batch; ++i)
    one(m, a + i * m * k, b + (rhsBatched ? i * k * n : 0), c + i * m * n);
}

// Sum of n floats with 16 interleaved partial sums (vectorisable; a fixed
// order, so the result does not depend on threads). The reference sums
// serially: results agree within f32 rounding, not bit for bit.
float sumFloats(const float *x, int64_t n) {
  float acc[16] = {0};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l)
      acc[l] += x[j + l];
  float s = 0.0f;
  for (int l = 0; l < 16; ++l)
    s += acc[l];
  for (; j < n; ++j)
    s += x[j];
  return s;
}

// Row sums in blocks of kSumBlock, each by sumFloats, blocks added in order:
// the order of a fused row-sum kernel (kernel.reduce), so both give the
// same bits.
constexpr int64_t kSumBlock = 16384;
float blockedSum(const float *x, int64_t n) {
  float s = 0.0f;
  for (int64_t b = 0; b < n; b += kSumBlock)
    s += sumFloats(x + b, std::min(kSumBlock, n - b));
  return s;
}

// Rows of `len`; row r's causal position is r % causalPeriod.
void softmaxRowsSerial(const float *x, float *y, int64_t rows, int64_t len, bool causal,
                       int64_t causalPeriod) {
  for (int64_t r = 0; r < rows; ++r)
    softmaxRow(x + r * len, y + r * len, len, causal, r % causalPeriod);
}

void softmaxRows(const float *x, float *y, int64_t rows, int64_t len, bool causal,
                 int64_t causalPeriod) {
#pragma omp parallel for schedule(static) if (rows * len > 32768)
  for (int64_t r = 0; r < rows; ++r)
    softmaxRow(x + r * len, y + r * len, len, causal, r % causalPeriod);
}

} // namespace

//===----------------------------------------------------------------------===//
// The plan
//===----------------------------------------------------------------------===//

namespace {

enum class Where { None, Arena, State, GradSum, Constant, Alias };

struct Slot {
  Where where = Where::None;
  int64_t offset = 0; // Arena: in floats
  int64_t size = 0;   // floats
  int ref = -1;       // Alias: node; State/GradSum/Constant: index
  int dies = -1;      // the last node of the plan reading this buffer
};

struct PhasePlan {
  Phase phase = Phase::Step;
  std::vector<int> order;        // nodes to run, ascending
  std::vector<Slot> slots;       // by node index
  int64_t arenaFloats = 0;       // peak
  int64_t unplannedFloats = 0;   // without reuse
  std::vector<std::pair<int, int>> writes; // (state index, node written), in order
  std::vector<std::pair<int, int>> grads;  // (grad index, node), in order
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

} // namespace

struct PlanExecutor::Impl {
  Graph graph;
  std::map<std::string, KernelFn> kernels;
  std::map<std::string, int> stateIndex;
  std::vector<std::vector<float>> states;
  std::map<std::string, int> gradIndex;
  std::vector<std::vector<float>> gradSums;
  int64_t gradCount = 0;
  std::vector<std::vector<float>> constants;
  int64_t counter = 0;
  PlanStats stats;

  PhasePlan stepPlan, updatePlan, outerPlan;
  Collective collective; // GossipMix exchange; empty: identity
  std::map<std::vector<int>, PhasePlan> evalPlans; // by probe list
  std::vector<float> arena, scratch;
  std::vector<float *> val; // per node of the running phase

  bool profiling = false;
  std::map<OpKind, std::pair<double, int64_t>> profile; // seconds, calls
  std::map<std::string, std::pair<double, int64_t>> kernelProfile;

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
        constants.push_back(std::move(v));
      }
    }
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
        p.unplannedFloats += alignUp(s.size);
        break;
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

  Impl(const Graph &g, std::map<std::string, KernelFn> k) : graph(g), kernels(std::move(k)) {
    graph.validate();
    std::string why;
    if (!PlanExecutor::supports(graph, why))
      throw std::runtime_error("the compiled runtime cannot run this graph: " + why);
    for (size_t i = 0; i < graph.states.size(); ++i)
      stateIndex[graph.states[i].name] = static_cast<int>(i);
    states.resize(graph.states.size());
    for (const Node &n : graph.nodes)
      if (n.kind == OpKind::Grad && !gradIndex.count(n.name)) {
        gradIndex[n.name] = static_cast<int>(gradSums.size());
        gradSums.emplace_back(numElements(graph.nodes[n.operands[0]].shape));
      }
    for (Phase ph : {Phase::Step, Phase::Update, Phase::Outer}) {
      const std::vector<Node> &nodes = graph.phase(ph);
      for (size_t i = 0; i < nodes.size(); ++i) {
        const Node &n = nodes[i];
        cur = ph;
        if (n.kind == OpKind::Kernel && !kernels.count(n.name))
          fail(static_cast<int>(i), "compiled kernel '" + n.name + "' was not provided");
        if ((n.kind == OpKind::Read || n.kind == OpKind::Write) && !stateIndex.count(n.name))
          fail(static_cast<int>(i), "no state named '" + n.name + "'");
      }
    }
    collectConstants();
    stepPlan = plan(Phase::Step, allNodes(Phase::Step), {});
    updatePlan = plan(Phase::Update, allNodes(Phase::Update), {});
    outerPlan = plan(Phase::Outer, allNodes(Phase::Outer), {});
    stats.stepArenaBytes = stepPlan.arenaFloats * 4;
    stats.updateArenaBytes = std::max(updatePlan.arenaFloats, outerPlan.arenaFloats) * 4;
    stats.unplannedBytes =
        (stepPlan.unplannedFloats + updatePlan.unplannedFloats + outerPlan.unplannedFloats) * 4;
    for (const StateDecl &s : graph.states)
      stats.persistentBytes += numElements(s.shape) * 4;
    for (auto &gs : gradSums)
      stats.persistentBytes += static_cast<int64_t>(gs.size()) * 4;
    for (auto &c : constants)
      stats.persistentBytes += static_cast<int64_t>(c.size()) * 4;
    initialize(0);
  }

  void initialize(uint64_t seed) {
    for (size_t k = 0; k < graph.states.size(); ++k) {
      const StateDecl &s = graph.states[k];
      std::vector<float> &v = states[k];
      v.resize(numElements(s.shape));
      for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i)
        v[i] = static_cast<float>(initialValue(s, seed, i));
    }
    for (size_t k = 0; k < graph.states.size(); ++k)
      if (!graph.states[k].copyOf.empty())
        states[k] = states[stateIndex.at(graph.states[k].copyOf)];
    counter = 0;
    gradCount = 0;
  }

  //===--- running --------------------------------------------------------===//

  void checkInputs(const std::vector<int> &order, const TensorMap &inputs) {
    for (int i : order) {
      const Node &n = graph.nodes[i];
      if (n.kind != OpKind::Input)
        continue;
      checkInput(n, inputs);
    }
  }

  int64_t rowId(int i, float v, int64_t limit, const char *what) const {
    std::string bad = badId(static_cast<double>(v), limit, what);
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
  StepResult runRange(const PhasePlan &p, size_t begin, size_t end, float *arenaBase,
                      const TensorMap &inputs, int64_t t);

  // Partial runs (pipeline stages): one plan over the concatenated parts.
  PhasePlan partPlan;
  std::vector<std::vector<int>> parts;
  std::vector<size_t> partStart; // position of each part's first node
  const std::map<std::string, std::string> *redirect = nullptr;
  void exec(const PhasePlan &p, int i, const TensorMap &inputs, int64_t t, StepResult &result);
};

StepResult PlanExecutor::Impl::run(const PhasePlan &p, const TensorMap &inputs, int64_t t,
                                   bool probesOut, const std::vector<int> &probes) {
  cur = p.phase;
  if (p.phase == Phase::Step)
    checkInputs(p.order, inputs);
  if (static_cast<int64_t>(arena.size()) < p.arenaFloats)
    arena.resize(p.arenaFloats);
  const std::vector<Node> &nodes = graph.phase(p.phase);
  val.assign(nodes.size(), nullptr);
  StepResult result = runRange(p, 0, p.order.size(), arena.data(), inputs, t);
  if (probesOut)
    for (int k : probes) {
      int64_t cnt = numElements(nodes[k].shape);
      result.probes[k] = HostTensor{nodes[k].shape, std::vector<double>(val[k], val[k] + cnt)};
    }
  return result;
}

StepResult PlanExecutor::Impl::runRange(const PhasePlan &p, size_t begin, size_t end,
                                        float *arenaBase, const TensorMap &inputs, int64_t t) {
  cur = p.phase;
  const std::vector<Node> &nodes = graph.phase(p.phase);
  StepResult result;
  for (size_t k = begin; k < end; ++k) {
    int i = p.order[k];
    const Slot &s = p.slots[i];
    switch (s.where) {
    case Where::Arena: val[i] = arenaBase + s.offset; break;
    case Where::State: val[i] = states[s.ref].data(); break;
    case Where::GradSum: val[i] = gradSums[s.ref].data(); break;
    case Where::Constant: val[i] = constants[s.ref].data(); break;
    case Where::Alias: val[i] = val[s.ref]; break;
    case Where::None: break;
    }
    if (!profiling) {
      exec(p, i, inputs, t, result);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    exec(p, i, inputs, t, result);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto &e = profile[nodes[i].kind];
    e.first += sec;
    ++e.second;
    const Node &pn = nodes[i];
    if (pn.kind == OpKind::Kernel || pn.kind == OpKind::Gemm || pn.kind == OpKind::Attention) {
      std::string key = pn.kind == OpKind::Kernel ? pn.name : std::string(opKindName(pn.kind));
      if (pn.kind != OpKind::Kernel) {
        for (int o : pn.operands)
          key += " " + shapeToString(nodes[o].shape);
        if (pn.kind == OpKind::Gemm)
          key += " t" + std::to_string(pn.ints[0]) + std::to_string(pn.ints[1]);
      }
      auto &k = kernelProfile[key];
      k.first += sec;
      ++k.second;
    }
  }
  return result;
}

void PlanExecutor::Impl::exec(const PhasePlan &p, int i, const TensorMap &inputs, int64_t t,
                              StepResult &result) {
  const std::vector<Node> &nodes = graph.phase(p.phase);
  const Node &n = nodes[i];
  float *out = val[i];
  auto in = [&](int k) -> const float * { return val[n.operands[k]]; };
  auto inShape = [&](int k) -> const Shape & { return nodes[n.operands[k]].shape; };
  const int64_t count = numElements(n.shape);

  if (isBinary(n.kind)) {
    // An unfused elementwise op (the fusion pass leaves few): broadcast
    // operands through their strides, row by row.
    std::vector<int64_t> sa = broadcastStrides(inShape(0), n.shape),
                         sb = broadcastStrides(inShape(1), n.shape);
    const float *a = in(0), *b = in(1);
    if (n.shape.empty()) {
      out[0] = binaryOp(n.kind, a[0], b[0]);
      return;
    }
    int64_t inner = n.shape.back(), rows = count / std::max<int64_t>(inner, 1);
    int64_t ia = sa.back(), ib = sb.back();
#pragma omp parallel for schedule(static) if (count > 65536)
    for (int64_t r = 0; r < rows; ++r) {
      const float *ar = a + rowOffset(r, n.shape, sa), *br = b + rowOffset(r, n.shape, sb);
      float *o = out + r * inner;
      for (int64_t j = 0; j < inner; ++j)
        o[j] = binaryOp(n.kind, ar[j * ia], br[j * ib]);
    }
    return;
  }
  if (isUnary(n.kind)) {
    if (inShape(0) == n.shape) {
      const float *a = in(0);
#pragma omp parallel for schedule(static) if (count > 65536)
      for (int64_t e = 0; e < count; ++e)
        out[e] = unaryOp(n.kind, a[e]);
    } else {
      stridedGather(in(0), n.shape, broadcastStrides(inShape(0), n.shape), out);
      for (int64_t e = 0; e < count; ++e)
        out[e] = unaryOp(n.kind, out[e]);
    }
    return;
  }

  switch (n.kind) {
  case OpKind::Input: {
    const std::vector<double> &src = inputs.at(n.name).data;
    for (int64_t e = 0; e < count; ++e)
      out[e] = static_cast<float>(src[e]);
    return;
  }
  case OpKind::Read:
    if (p.slots[i].where == Where::Arena) { // a copy (see plan)
      const std::string *name = &n.name;
      if (redirect)
        if (auto r = redirect->find(n.name); r != redirect->end())
          name = &r->second;
      std::memcpy(out, states[stateIndex.at(*name)].data(), sizeof(float) * count);
    }
    return;
  case OpKind::Reshape:
  case OpKind::Transfer:
  case OpKind::Constant:
  case OpKind::AccumulatedGrad:
  case OpKind::Write: // committed by the caller once the phase succeeded
  case OpKind::Grad:
    return;
  case OpKind::StepCount:
    out[0] = static_cast<float>(t);
    return;
  case OpKind::Yield:
    for (size_t k = 0; k < n.operands.size(); ++k)
      result.outputs.push_back(static_cast<double>(in(static_cast<int>(k))[0]));
    return;
  case OpKind::Kernel: {
    const void *ins[16];
    std::vector<const void *> big;
    const void *const *args = ins;
    if (n.operands.size() <= 16) {
      for (size_t k = 0; k < n.operands.size(); ++k)
        ins[k] = in(static_cast<int>(k));
    } else {
      for (size_t k = 0; k < n.operands.size(); ++k)
        big.push_back(in(static_cast<int>(k)));
      args = big.data();
    }
    void *outs[1] = {out};
    kernels.at(n.name)(args, outs);
    return;
  }
  case OpKind::Gemm: {
    GemmDims g = gemmDims(n, inShape(0), inShape(1));
    batchedGemm(in(0), in(1), out, g.batch, g.m, g.n, g.k, g.ta, g.tb, g.rhsBatched,
                static_cast<float>(g.alpha));
    return;
  }
  case OpKind::Matmul: {
    const Shape &as = inShape(0), &bs = inShape(1);
    int64_t m = as[as.size() - 2], k = as.back(), nn = bs.back();
    int64_t batch = numElements(Shape(as.begin(), as.end() - 2));
    batchedGemm(in(0), in(1), out, batch, m, nn, k, false, false, bs.size() > 2, 1.0f);
    return;
  }
  case OpKind::Transpose: {
    std::vector<int64_t> inSt = stridesOf(inShape(0)), st(n.ints.size());
    for (size_t d = 0; d < n.ints.size(); ++d)
      st[d] = inSt[n.ints[d]];
    stridedGather(in(0), n.shape, st, out);
    return;
  }
  case OpKind::Broadcast:
    stridedGather(in(0), n.shape, broadcastStrides(inShape(0), n.shape), out);
    return;
  case OpKind::ReduceSum: {
    const Shape &s = inShape(0);
    const float *x = in(0);
    // Contiguous reduced block [lo, hi) (size-1 dims ignored): out[o, j] =
    // sum_r x[o, r, j], summed in increasing r like the reference.
    std::vector<char> red(s.size(), 0);
    for (int64_t d : n.ints)
      red[d] = 1;
    int lo = -1, hi = -1;
    bool contiguous = true;
    for (int d = 0; d < static_cast<int>(s.size()); ++d) {
      if (!red[d] || s[d] == 1)
        continue;
      if (lo < 0)
        lo = d;
      else if (hi != d)
        contiguous = false;
      hi = d + 1;
    }
    if (lo < 0) { // only size-1 dims summed: a copy
      std::memcpy(out, x, sizeof(float) * count);
      return;
    }
    if (contiguous) {
      auto prod = [&](int a, int b) {
        int64_t v = 1;
        for (int d = a; d < b; ++d)
          v *= s[d];
        return v;
      };
      int64_t outer = prod(0, lo), nred = prod(lo, hi), inner = prod(hi, static_cast<int>(s.size()));
      if (inner == 1 && outer == 1 && nred > kSumBlock) {
        // One long sum (the gradient norm's): fixed blocks in parallel, then
        // the block sums in order, so any thread count gives the same bits.
        const int64_t blocks = (nred + kSumBlock - 1) / kSumBlock;
        float *part = scratchFloats(blocks);
#pragma omp parallel for schedule(static)
        for (int64_t bl = 0; bl < blocks; ++bl)
          part[bl] = sumFloats(x + bl * kSumBlock, std::min(kSumBlock, nred - bl * kSumBlock));
        float acc = 0.0f;
        for (int64_t bl = 0; bl < blocks; ++bl)
          acc += part[bl];
        out[0] = acc;
      } else if (inner == 1) {
#pragma omp parallel for schedule(static) if (outer * nred > 65536)
        for (int64_t o = 0; o < outer; ++o)
          out[o] = blockedSum(x + o * nred, nred);
      } else {
        // Column sums: split the (outer, inner) output among threads in
        // blocks of 64 columns; each block sums its rows in order.
        int64_t blocks = (inner + 63) / 64;
#pragma omp parallel for schedule(static) if (outer * nred * inner > 65536)
        for (int64_t ob = 0; ob < outer * blocks; ++ob) {
          int64_t o = ob / blocks, j0 = (ob % blocks) * 64, j1 = std::min(inner, j0 + 64);
          float *dst = out + o * inner;
          const float *src = x + o * nred * inner;
          for (int64_t j = j0; j < j1; ++j)
            dst[j] = 0.0f;
          for (int64_t r = 0; r < nred; ++r) {
            const float *row = src + r * inner;
            for (int64_t j = j0; j < j1; ++j)
              dst[j] += row[j];
          }
        }
      }
      return;
    }
    // General: walk the input in order (the reference's loop).
    std::fill(out, out + count, 0.0f);
    reduceSumWalk(x, s, n.ints, out);
    return;
  }
  case OpKind::Slice:
  case OpKind::Pad: {
    bool isSlice = n.kind == OpKind::Slice;
    Window w = windowOf(n, inShape(0));
    const float *x = in(0);
    if (!isSlice)
      std::fill(out, out + count, 0.0f);
#pragma omp parallel for schedule(static) if (count > 65536)
    for (int64_t o = 0; o < w.outer; ++o) {
      if (isSlice)
        std::memcpy(out + w.smallStart(o), x + w.bigStart(o), sizeof(float) * w.smallA * w.inner);
      else
        std::memcpy(out + w.bigStart(o), x + w.smallStart(o), sizeof(float) * w.smallA * w.inner);
    }
    return;
  }
  case OpKind::Softmax: {
    int64_t len = n.shape.back();
    softmaxRows(in(0), out, count / std::max<int64_t>(len, 1), len, n.flag, len);
    return;
  }
  case OpKind::LayerNorm:
  case OpKind::RmsNorm: {
    const float *x = in(0), *gamma = in(1);
    const float *beta = n.kind == OpKind::LayerNorm ? in(2) : nullptr;
    int64_t d = n.shape.back(), rows = count / std::max<int64_t>(d, 1);
    float eps = static_cast<float>(n.floats[0]);
#pragma omp parallel for schedule(static) if (count > 32768)
    for (int64_t r = 0; r < rows; ++r)
      normRow(x + r * d, gamma, beta, out + r * d, d, eps);
    return;
  }
  case OpKind::Attention: {
    // Per batch block: S = scale Q K^T (BLAS), masked softmax over rows,
    // O = P V (BLAS); S for all blocks lives in the scratch buffer.
    AttentionDims a = attentionDims(inShape(0), inShape(1), inShape(2));
    const int64_t batch = a.batch, tq = a.tq, tk = a.tk, d = a.d, dv = a.dv;
    float scale = static_cast<float>(n.floats[0]);
    float *S = scratchFloats(batch * tq * tk);
    const float *q = in(0), *k = in(1), *v = in(2);
    // One (batch, head) block per thread; OpenBLAS runs single-threaded
    // inside the region (OpenMP build). Causal: query row i sees keys 0..i
    // (tq == tk, checked by the verifier).
#pragma omp parallel for schedule(static) if (batch > 1)
    for (int64_t b = 0; b < batch; ++b) {
      float *Sb = S + b * tq * tk;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tq),
                  static_cast<int>(tk), static_cast<int>(d), scale, q + b * tq * d,
                  static_cast<int>(d), k + b * tk * d, static_cast<int>(d), 0.0f, Sb,
                  static_cast<int>(tk));
      softmaxRowsSerial(Sb, Sb, tq, tk, n.flag, tq);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(tq),
                  static_cast<int>(dv), static_cast<int>(tk), 1.0f, Sb, static_cast<int>(tk),
                  v + b * tk * dv, static_cast<int>(dv), 0.0f, out + b * tq * dv,
                  static_cast<int>(dv));
    }
    return;
  }
  case OpKind::Embedding: {
    const float *table = in(0), *ids = in(1);
    int64_t vocab = inShape(0)[0], d = inShape(0)[1], rows = numElements(inShape(1));
    checkIds(i, ids, rows, vocab, "id");
#pragma omp parallel for schedule(static) if (rows * d > 65536)
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(out + r * d, table + static_cast<int64_t>(ids[r]) * d, sizeof(float) * d);
    return;
  }
  case OpKind::ScatterRows: {
    const float *ids = in(0), *g = in(1);
    int64_t vocab = n.shape[0], d = n.shape[1], rows = numElements(inShape(0));
    checkIds(i, ids, rows, vocab, "id");
    std::fill(out, out + count, 0.0f);
    // Rows in order (the reference's summation order); columns in parallel.
    int64_t blocks = (d + 63) / 64;
#pragma omp parallel for schedule(static) if (rows * d > 65536)
    for (int64_t bl = 0; bl < blocks; ++bl) {
      int64_t j0 = bl * 64, j1 = std::min(d, j0 + 64);
      for (int64_t r = 0; r < rows; ++r) {
        float *dst = out + static_cast<int64_t>(ids[r]) * d;
        const float *src = g + r * d;
        for (int64_t j = j0; j < j1; ++j)
          dst[j] += src[j];
      }
    }
    return;
  }
  case OpKind::OneHot: {
    const float *ids = in(0);
    int64_t c = n.shape.back(), rows = numElements(inShape(0));
    checkIds(i, ids, rows, c, "class id");
    std::fill(out, out + count, 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      out[r * c + static_cast<int64_t>(ids[r])] = 1.0f;
    return;
  }
  case OpKind::CrossEntropy: {
    const float *logits = in(0), *tgt = in(1);
    int64_t c = inShape(0).back(), rows = numElements(inShape(1));
    checkIds(i, tgt, rows, c, "target");
    float *loss = scratchFloats(rows);
#pragma omp parallel for schedule(static) if (rows * c > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      const float *x = logits + r * c;
      float mx = *std::max_element(x, x + c);
      float sum = 0;
      for (int64_t j = 0; j < c; ++j)
        sum += std::exp(x[j] - mx);
      loss[r] = std::log(sum) + mx - x[static_cast<int64_t>(tgt[r])];
    }
    float total = 0;
    for (int64_t r = 0; r < rows; ++r)
      total += loss[r];
    out[0] = rows ? total / static_cast<float>(rows) : 0.0f;
    return;
  }
  case OpKind::GossipMix: {
    // The replica's exchange with this round's peers (setCollective).
    if (!collective) {
      std::memcpy(out, in(0), sizeof(float) * count);
      return;
    }
    HostTensor z{n.shape, std::vector<double>(in(0), in(0) + count)};
    HostTensor mixed = collective(n, z);
    if (static_cast<int64_t>(mixed.data.size()) != count)
      fail(i, "the collective returned " + std::to_string(mixed.data.size()) +
                  " values for shape " + shapeToString(n.shape));
    for (int64_t e = 0; e < count; ++e)
      out[e] = static_cast<float>(mixed.data[e]);
    return;
  }
  case OpKind::Descend: {
    const float *pp = in(0), *dir = in(1);
    float lr = in(2)[0];
#pragma omp parallel for schedule(static) if (count > 65536)
    for (int64_t e = 0; e < count; ++e)
      out[e] = pp[e] - lr * dir[e];
    return;
  }
  case OpKind::NewtonSchulz: {
    int64_t m = n.shape[0], nn = n.shape[1], steps = n.ints[0];
    float a = static_cast<float>(n.floats[0]), b = static_cast<float>(n.floats[1]),
          c = static_cast<float>(n.floats[2]);
    const float *g = in(0);
    float norm = 0;
    for (int64_t e = 0; e < count; ++e)
      norm += g[e] * g[e];
    norm = std::sqrt(norm) + 1e-7f;
    // Work on the wide orientation so X X^T is the small Gram matrix:
    // X [r, s] with r <= s; scratch holds X, A, AA (=B) and BX.
    bool tr = m > nn;
    int64_t r = tr ? nn : m, s = tr ? m : nn;
    float *X = scratchFloats(2 * r * s + 2 * r * r);
    float *A = X + r * s, *B = A + r * r, *BX = B + r * r;
    if (tr) {
      for (int64_t i2 = 0; i2 < m; ++i2)
        for (int64_t j = 0; j < nn; ++j)
          X[j * m + i2] = g[i2 * nn + j] / norm;
    } else {
      for (int64_t e = 0; e < count; ++e)
        X[e] = g[e] / norm;
    }
    const int ir = static_cast<int>(r), is = static_cast<int>(s);
    for (int64_t st = 0; st < steps; ++st) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ir, ir, is, 1.0f, X, is, X, is, 0.0f,
                  A, ir);
      // B = b A + c A A
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ir, ir, ir, c, A, ir, A, ir, 0.0f,
                  B, ir);
      for (int64_t e = 0; e < r * r; ++e)
        B[e] += b * A[e];
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ir, is, ir, 1.0f, B, ir, X, is,
                  0.0f, BX, is);
      for (int64_t e = 0; e < r * s; ++e)
        X[e] = a * X[e] + BX[e];
    }
    if (tr) {
      for (int64_t i2 = 0; i2 < m; ++i2)
        for (int64_t j = 0; j < nn; ++j)
          out[i2 * nn + j] = X[j * m + i2];
    } else {
      std::memcpy(out, X, sizeof(float) * count);
    }
    return;
  }
  default:
    fail(i, "the compiled runtime has no implementation of this op");
  }
}

//===----------------------------------------------------------------------===//
// PlanExecutor
//===----------------------------------------------------------------------===//

PlanExecutor::PlanExecutor(const Graph &graph, std::map<std::string, KernelFn> kernels)
    : impl(std::make_unique<Impl>(graph, std::move(kernels))) {}

PlanExecutor::~PlanExecutor() = default;

bool PlanExecutor::supports(const Graph &graph, std::string &why) {
  for (const StateDecl &s : graph.states)
    if (s.dtype != DType::F32) {
      why = std::string("state '") + s.name + "' is " + dtypeName(s.dtype) + " (only f32 so far)";
      return false;
    }
  for (Phase ph : {Phase::Step, Phase::Update, Phase::Outer})
    for (const Node &n : graph.phase(ph))
      if (n.dtype != DType::F32 && n.dtype != DType::I32 && !isSink(n.kind)) {
        why = std::string(opKindName(n.kind)) + " at " + n.loc + " is " + dtypeName(n.dtype) +
              " (only f32 so far)";
        return false;
      }
  return true;
}

void PlanExecutor::initialize(uint64_t seed) { impl->initialize(seed); }

StepResult PlanExecutor::microStep(const TensorMap &inputs) {
  const PhasePlan &p = impl->stepPlan;
  StepResult r = impl->run(p, inputs, impl->counter + 1, false, {});
  // The phase succeeded: commit its writes and gradients.
  for (auto [s, node] : p.writes)
    std::memmove(impl->states[s].data(), impl->val[node], impl->states[s].size() * sizeof(float));
  for (auto [g, node] : p.grads) {
    std::vector<float> &sum = impl->gradSums[g];
    const float *v = impl->val[node];
    if (impl->gradCount == 0)
      std::memcpy(sum.data(), v, sum.size() * sizeof(float));
    else
      for (size_t e = 0; e < sum.size(); ++e)
        sum[e] += v[e];
  }
  ++impl->gradCount;
  return r;
}

void PlanExecutor::update() {
  if (impl->gradCount == 0 && !impl->gradSums.empty())
    throw std::runtime_error("update: no gradient was computed since the last update");
  if (impl->gradCount > 1)
    for (std::vector<float> &sum : impl->gradSums)
      for (float &v : sum)
        v /= static_cast<float>(impl->gradCount);
  const PhasePlan &p = impl->updatePlan;
  impl->run(p, {}, impl->counter + 1, false, {});
  for (auto [s, node] : p.writes)
    std::memmove(impl->states[s].data(), impl->val[node], impl->states[s].size() * sizeof(float));
  impl->gradCount = 0;
  ++impl->counter;
}

void PlanExecutor::outerStep() {
  // The Outer phase sees the step count of the last update (no +1).
  const PhasePlan &p = impl->outerPlan;
  impl->run(p, {}, impl->counter, false, {});
  for (auto [s, node] : p.writes)
    std::memmove(impl->states[s].data(), impl->val[node], impl->states[s].size() * sizeof(float));
}

void PlanExecutor::setCollective(Collective fn) { impl->collective = std::move(fn); }

void PlanExecutor::preparePartialRuns(const std::vector<std::vector<int>> &parts,
                                      const std::vector<int> &keep) {
  std::vector<int> order;
  impl->partStart.clear();
  for (const std::vector<int> &part : parts) {
    impl->partStart.push_back(order.size());
    order.insert(order.end(), part.begin(), part.end());
  }
  std::vector<int> seen(impl->graph.nodes.size(), 0);
  for (int i : order) {
    if (i < 0 || i >= static_cast<int>(seen.size()) || seen[i]++)
      throw std::runtime_error("preparePartialRuns: node " + std::to_string(i) +
                               " is not a step node or is listed twice");
  }
  impl->partStart.push_back(order.size());
  impl->parts = parts;
  impl->partPlan = impl->plan(Phase::Step, order, keep, /*snapshotReads=*/true);
}

StepResult PlanExecutor::runNodes(const std::vector<int> &nodes, ValueEnv &env,
                                  const TensorMap &inputs,
                                  const std::map<std::string, std::string> &redirect) {
  size_t part = 0;
  while (part < impl->parts.size() && impl->parts[part] != nodes)
    ++part;
  if (part == impl->parts.size())
    throw std::runtime_error("runNodes: this node list was not given to preparePartialRuns");
  const PhasePlan &p = impl->partPlan;
  impl->cur = Phase::Step;
  impl->checkInputs(nodes, inputs);
  if (static_cast<int64_t>(env.arena.size()) < p.arenaFloats)
    env.arena.resize(p.arenaFloats);
  env.pointers.resize(impl->graph.nodes.size(), nullptr);
  // This micro-batch's value pointers live in its env between the parts.
  std::swap(impl->val, env.pointers);
  impl->redirect = &redirect;
  StepResult r;
  try {
    r = impl->runRange(p, impl->partStart[part], impl->partStart[part + 1], env.arena.data(),
                       inputs, impl->counter + 1);
  } catch (...) {
    impl->redirect = nullptr;
    std::swap(impl->val, env.pointers);
    throw;
  }
  impl->redirect = nullptr;
  std::swap(impl->val, env.pointers);
  // Writes commit now; gradients are returned (accumulateGrads adds them).
  std::vector<char> inPart(impl->graph.nodes.size(), 0);
  for (int i : nodes)
    inPart[i] = 1;
  for (int i : nodes) {
    const Node &n = impl->graph.nodes[i];
    if (n.kind == OpKind::Write) {
      std::vector<float> &st = impl->states[impl->stateIndex.at(n.name)];
      std::memmove(st.data(), env.pointers[n.operands[0]], st.size() * sizeof(float));
    } else if (n.kind == OpKind::Grad) {
      const float *g = env.pointers[n.operands[0]];
      const Shape &shape = impl->graph.nodes[n.operands[0]].shape;
      r.grads[n.name] = HostTensor{shape, std::vector<double>(g, g + numElements(shape))};
    }
  }
  return r;
}

HostTensor PlanExecutor::envValue(ValueEnv &env, int node) const {
  const Node &n = impl->graph.nodes.at(node);
  if (static_cast<size_t>(node) >= env.pointers.size() || !env.pointers[node])
    throw std::runtime_error("envValue: node " + std::to_string(node) + " has no value yet");
  const float *v = env.pointers[node];
  return HostTensor{n.shape, std::vector<double>(v, v + numElements(n.shape))};
}

void PlanExecutor::accumulateGrads(const StepResult &r) {
  for (auto &[name, g] : r.grads) {
    auto it = impl->gradIndex.find(name);
    if (it == impl->gradIndex.end())
      throw std::runtime_error("accumulateGrads: no parameter '" + name + "' has a gradient");
    std::vector<float> &sum = impl->gradSums[it->second];
    for (size_t e = 0; e < sum.size(); ++e)
      sum[e] = impl->gradCount == 0 ? static_cast<float>(g.data[e])
                                    : sum[e] + static_cast<float>(g.data[e]);
  }
  ++impl->gradCount;
}

StepResult PlanExecutor::evaluate(const TensorMap &inputs, const std::vector<int> &probes) {
  const PhasePlan &p = impl->evalPlan(probes);
  return impl->run(p, inputs, impl->counter + 1, true, probes);
}

HostTensor PlanExecutor::getState(const std::string &name) const {
  auto it = impl->stateIndex.find(name);
  if (it == impl->stateIndex.end())
    throw std::runtime_error("getState: no state named '" + name + "'");
  const std::vector<float> &v = impl->states[it->second];
  return HostTensor{impl->graph.states[it->second].shape, std::vector<double>(v.begin(), v.end())};
}

void PlanExecutor::setState(const std::string &name, const HostTensor &value) {
  auto it = impl->stateIndex.find(name);
  if (it == impl->stateIndex.end())
    throw std::runtime_error("setState: no state named '" + name + "'");
  ops::checkStateValue(name, impl->graph.states[it->second].shape, value);
  std::vector<float> &v = impl->states[it->second];
  for (size_t e = 0; e < v.size(); ++e)
    v[e] = static_cast<float>(value.data[e]);
}

int64_t PlanExecutor::stepCount() const { return impl->counter; }
void PlanExecutor::setStepCount(int64_t t) { impl->counter = t; }
const PlanStats &PlanExecutor::stats() const { return impl->stats; }
void PlanExecutor::setProfiling(bool on) {
  impl->profiling = on;
  impl->profile.clear();
  impl->kernelProfile.clear();
}

std::string PlanExecutor::profileReport() const {
  double total = 0;
  for (auto &[k, e] : impl->profile)
    total += e.first;
  std::vector<std::pair<double, OpKind>> order;
  for (auto &[k, e] : impl->profile)
    order.push_back({e.first, k});
  std::sort(order.rbegin(), order.rend());
  std::ostringstream os;
  char line[160];
  std::snprintf(line, sizeof line, "%-16s %10s %8s %7s\n", "op", "seconds", "calls", "share");
  os << line;
  for (auto &[sec, k] : order) {
    std::snprintf(line, sizeof line, "%-16s %10.4f %8lld %6.1f%%\n", opKindName(k), sec,
                  static_cast<long long>(impl->profile.at(k).second),
                  total > 0 ? 100 * sec / total : 0.0);
    os << line;
  }
  // The slowest fused kernels, by name (their sources: --dump).
  std::vector<std::pair<double, std::string>> ks;
  for (auto &[name, e] : impl->kernelProfile)
    ks.push_back({e.first, name});
  std::sort(ks.rbegin(), ks.rend());
  if (!ks.empty())
    os << "slowest kernels, GEMMs and attention (by operand shapes):\n";
  for (size_t k = 0; k < std::min<size_t>(ks.size(), 12); ++k) {
    std::snprintf(line, sizeof line, "  %-48s %10.4f %6.1f%%\n", ks[k].second.c_str(), ks[k].first,
                  total > 0 ? 100 * ks[k].first / total : 0.0);
    os << line;
  }
  return os.str();
}

std::string PlanExecutor::describe() const {
  std::ostringstream os;
  const PlanStats &s = impl->stats;
  os << "// buffer plan: step arena " << s.stepArenaBytes << " B, update arena "
     << s.updateArenaBytes << " B, persistent " << s.persistentBytes << " B, peak "
     << s.peakBytes() << " B (intermediates without reuse: " << s.unplannedBytes << " B)\n";
  for (const PhasePlan *p : {&impl->stepPlan, &impl->updatePlan, &impl->outerPlan}) {
    const std::vector<Node> &nodes = impl->graph.phase(p->phase);
    if (nodes.empty())
      continue;
    os << "// "
       << (p->phase == Phase::Step ? "step" : p->phase == Phase::Update ? "update" : "outer")
       << "\n";
    for (int i : p->order) {
      const Node &n = nodes[i];
      const Slot &sl = p->slots[i];
      os << "%" << i << " = " << opKindName(n.kind);
      if (!n.name.empty())
        os << " \"" << n.name << "\"";
      for (int o : n.operands)
        os << " %" << o;
      if (!isSink(n.kind))
        os << " : " << shapeToString(n.shape);
      switch (sl.where) {
      case Where::Arena:
        os << "  -> arena[" << sl.offset * 4 << ", +" << sl.size * 4 << " B)";
        if (sl.dies == std::numeric_limits<int>::max())
          os << " live to the end";
        else
          os << " free after %" << p->order[sl.dies];
        break;
      case Where::State: os << "  -> state '" << impl->graph.states[sl.ref].name << "'"; break;
      case Where::GradSum: os << "  -> gradient sum"; break;
      case Where::Constant: os << "  -> constant"; break;
      case Where::Alias: os << "  -> alias of %" << sl.ref; break;
      case Where::None: break;
      }
      os << "\n";
    }
  }
  return os.str();
}

} // namespace stretto
