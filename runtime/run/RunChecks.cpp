//===- RunChecks.cpp - a run's settings, checked before it starts --------===//
#include "stretto/Runtime/RunChecks.h"
#include "stretto/Runtime/Gossip.h"
#include "stretto/Runtime/Pipeline.h"

#include "exec/PlanImpl.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

using namespace stretto;

namespace {

/// A device that only counts: the planner runs as for a real device, and
/// no state, arena or constant is allocated.
class CountingDevice final : public PlanDevice {
public:
  const char *name() const override { return "estimate"; }
  bool hasKernel(const std::string &) const override { return true; }
  float *alloc(int64_t) override { return dummy; }
  void release(float *) override {}
  void upload(float *, const float *, int64_t) override {}
  void download(float *, const float *, int64_t) override {}
  void copy(float *, const float *, int64_t) override {}
  void accumulate(float *, const float *, int64_t) override {}
  void divide(float *, int64_t, float) override {}
  void exec(PlanExecutor::Impl &, const planning::PhasePlan &, int, const TensorMap &, int64_t,
            StepResult &) override {
    throw std::logic_error("the memory estimate's device runs nothing");
  }

private:
  alignas(64) float dummy[16] = {};
};

[[noreturn]] void refuse(const std::string &message) { throw std::runtime_error(message); }

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

/// One graph's memory on the executor `options` ask for: what stays for
/// the whole run (states, gradient sums, constants) and what one
/// micro-batch in flight and the update need on top.
struct GraphMemory {
  int64_t persistent = 0, perMicroBatch = 0, update = 0;
};

GraphMemory graphMemory(const Graph &graph, const TrainerOptions &options) {
  GraphMemory m;
  PlanStats plan;
  bool planned = false;
  std::string why;
  if (PlanExecutor::supports(graph, why)) {
    plan = planStatsOf(graph);
    planned = true;
  }
  if (options.compiled && planned) {
    m.persistent = plan.persistentBytes;
    m.perMicroBatch = plan.stepArenaBytes;
    m.update = plan.updateArenaBytes;
    return m;
  }
  // The reference executor keeps states and gradient sums as doubles and
  // computes in f32 or f64; its intermediates are freed after their last
  // use, about as the planner would place them.
  int64_t elem = options.precision == Precision::F64 ? 8 : 4, stateElems = 0, gradElems = 0;
  for (const StateDecl &s : graph.states) {
    stateElems += numElements(s.shape);
    if (s.isParam)
      gradElems += numElements(s.shape);
  }
  m.persistent = 8 * (stateElems + gradElems);
  if (planned) {
    m.perMicroBatch = plan.stepArenaBytes / 4 * elem;
    m.update = plan.updateArenaBytes / 4 * elem;
  }
  return m;
}

int64_t readInt64(const std::string &path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(text);
}

} // namespace

PlanStats stretto::planStatsOf(const Graph &graph) {
  PlanExecutor::Impl impl(graph, std::make_unique<CountingDevice>(), GemmPrecision::F32,
                          /*initialise=*/false);
  return impl.stats;
}

std::string stretto::formatBytes(double bytes) {
  char buf[48];
  if (bytes >= 1e12)
    std::snprintf(buf, sizeof buf, "%.2f TB", bytes / 1e12);
  else if (bytes >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  return buf;
}

MemoryEstimate stretto::estimateRunMemory(const Graph &graph, const TrainerOptions &options,
                                          int64_t stages, int64_t replicas) {
  MemoryEstimate e;
  std::string executor = options.compiled ? "buffer plan" : "reference executor";
  std::vector<StagePlan> parts;
  if (stages > 1) {
    try {
      parts = planStages(graph);
    } catch (const std::exception &) {
      parts.clear(); // estimated as one graph; the pipeline reports the partition error
    }
  }
  if (parts.size() > 1) {
    // 1F1B: stage s holds up to S - s micro-batches' activations at once.
    const int64_t S = static_cast<int64_t>(parts.size());
    for (const StagePlan &p : parts) {
      GraphMemory m = graphMemory(p.graph, options);
      int64_t inFlight = std::max<int64_t>(1, std::min(options.microBatches, S - p.stage));
      e.bytes += m.persistent + std::max(m.perMicroBatch * inFlight, m.update);
    }
    e.breakdown = executor + ": " + formatBytes(double(e.bytes)) + " over " + std::to_string(S) +
                  " pipeline stages with their micro-batches in flight";
  } else {
    GraphMemory m = graphMemory(graph, options);
    int64_t one = m.persistent + std::max(m.perMicroBatch, m.update);
    int64_t copies = graph.outer.empty() ? 1 : std::max<int64_t>(1, replicas);
    e.bytes = one * copies;
    e.breakdown = executor + " peak " + formatBytes(double(one)) + " (states, gradient sums and "
                  "constants " + formatBytes(double(m.persistent)) + ")";
    if (copies > 1)
      e.breakdown += " x " + std::to_string(copies) + " replicas";
  }
  if (!options.outDir.empty() && graph.outer.empty()) {
    // Writing a checkpoint: the states as doubles, the checkpoint's own
    // copy and bytes, and the parameters again for model.safetensors.
    int64_t stateElems = 0, paramElems = 0;
    for (const StateDecl &s : graph.states) {
      stateElems += numElements(s.shape);
      if (s.isParam)
        paramElems += numElements(s.shape);
    }
    int64_t ckpt = stateElems * 20 + paramElems * 12;
    e.bytes += ckpt;
    e.breakdown += ", checkpoint copies " + formatBytes(double(ckpt));
  }
  return e;
}

AvailableMemory stretto::availableMemory() {
  AvailableMemory a;
  {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    int64_t kb;
    while (in >> key >> kb) {
      std::getline(in, unit);
      if (key == "MemAvailable:") {
        a.bytes = kb * 1024;
        a.source = "MemAvailable in /proc/meminfo";
        break;
      }
    }
  }
  if (a.bytes < 0) {
    long pages = ::sysconf(_SC_AVPHYS_PAGES), size = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && size > 0) {
      a.bytes = int64_t(pages) * size;
      a.source = "free physical pages (sysconf)";
    }
  }
  // A cgroup (v2) limit below that is what the OOM killer goes by.
  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {
    if (line.rfind("0::", 0) != 0)
      continue;
    std::string dir = "/sys/fs/cgroup" + line.substr(3);
    int64_t max = readInt64(dir + "/memory.max"), current = readInt64(dir + "/memory.current");
    if (max >= 0 && current >= 0) {
      int64_t left = std::max<int64_t>(0, max - current);
      if (a.bytes < 0 || left < a.bytes) {
        a.bytes = left;
        a.source = "the memory limit of this process's cgroup (" + dir + "/memory.max)";
      }
    }
  }
  return a;
}

std::string stretto::inputSignature(const Graph &graph) {
  std::string s;
  for (const Node &n : graph.nodes)
    if (n.kind == OpKind::Input)
      s += (s.empty() ? "" : ", ") + n.name + " " + shapeToString(n.shape) + " " +
           dtypeName(n.dtype);
  return s;
}

std::map<std::string, std::string> stretto::checkpointMeta(const Graph &graph,
                                                           const TrainerOptions &options) {
  std::map<std::string, std::string> m;
  if (!options.modelFingerprint.empty())
    m["model.fingerprint"] = options.modelFingerprint;
  m["model.inputs"] = inputSignature(graph);
  m["train.micro_batches"] = std::to_string(options.microBatches);
  m["data.order"] = kDataOrder;
  return m;
}

std::string stretto::dataOrderNote(const Checkpoint &c, const std::string &path, int64_t parts) {
  if (parts <= 1 || c.meta.count("data.order"))
    return "";
  return "note: " + path + " was written before each step's batch was sliced into its " +
         "micro-batches and ranks (each drew windows of its own); from step " +
         std::to_string(c.step + 1) + " on this run reads the step-sliced batches, so its data " +
         "order differs from the run that wrote the checkpoint";
}

void stretto::validateRunSettings(const RunCheck &run) {
  const Graph &graph = run.graph;
  const TrainerOptions &opt = run.options;
  // --- counts and intervals (a plan file's settings are text: anything) --
  auto atLeast = [](const char *key, int64_t value, int64_t minimum) {
    if (value < minimum)
      refuse("'" + std::string(key) + "' must be >= " + std::to_string(minimum) + ", got " +
             std::to_string(value));
  };
  atLeast("train.steps", opt.steps, 1);
  atLeast("train.micro_batches", opt.microBatches, 1);
  atLeast("train.log_interval", opt.logInterval, 1);
  atLeast("train.eval_interval", opt.evalInterval, 1);
  atLeast("train.eval_batches", opt.evalBatches, 1);
  atLeast("train.checkpoint_interval", opt.checkpointInterval, 0);

  // --- pipeline stages ---------------------------------------------------
  int maxStage = -1;
  for (Phase ph : {Phase::Step, Phase::Update, Phase::Outer})
    for (const Node &n : graph.phase(ph)) {
      if (n.stage < -1)
        refuse(std::string(opKindName(n.kind)) + " at " + n.loc + " has stage " +
               std::to_string(n.stage));
      maxStage = std::max(maxStage, n.stage);
    }
  for (const StateDecl &s : graph.states)
    maxStage = std::max(maxStage, s.stage);
  if (run.stages != -1) {
    if (run.stages < 1 || run.stages > kMaxStages)
      refuse("'train.stages' must be in [1, " + std::to_string(kMaxStages) + "], got " +
             std::to_string(run.stages));
    if (maxStage >= run.stages)
      refuse("the step uses pipeline stage " + std::to_string(maxStage) + " but 'train.stages' is " +
             std::to_string(run.stages) + " (stages are numbered from 0)");
    if (run.stages > 1 && maxStage < run.stages - 1)
      refuse("'train.stages' is " + std::to_string(run.stages) + " but the step is partitioned into " +
             std::to_string(std::max(maxStage + 1, 1)) + " stage(s)");
  } else if (maxStage >= kMaxStages) {
    refuse("the step uses pipeline stage " + std::to_string(maxStage) + "; at most " +
           std::to_string(kMaxStages) + " stages run");
  }

  // --- replicas ----------------------------------------------------------
  if (run.replicas != -1) {
    if (run.replicas < 1 || run.replicas > kMaxReplicas)
      refuse("'train.replicas' must be in [1, " + std::to_string(kMaxReplicas) + "], got " +
             std::to_string(run.replicas));
    if (run.replicas > 1 && !run.sync.empty() && run.sync != "gossip" && run.sync != "diloco")
      refuse("'train.replicas' is " + std::to_string(run.replicas) + " but 'train.sync' is \"" +
             run.sync + "\": replicas train only with sync = \"gossip\" or \"diloco\" "
             "(synchronous data parallelism over replicas does not exist yet); set replicas = 1 "
             "or choose one of those");
  }
  if (!graph.outer.empty()) {
    const OuterLoop &o = graph.outerLoop;
    if (o.replicas < 1 || o.replicas > kMaxReplicas)
      refuse("the gossip step has " + std::to_string(o.replicas) + " replicas; it must be in [1, " +
             std::to_string(kMaxReplicas) + "]");
    if (o.localSteps.size() != 1 && int64_t(o.localSteps.size()) != o.replicas)
      refuse("the gossip step has " + std::to_string(o.localSteps.size()) +
             " local-step counts for " + std::to_string(o.replicas) + " replicas");
    for (int64_t h : o.localSteps)
      atLeast("train.local_steps", h, 0);
  }

  // --- the simulated network of a gossip/DiLoCo run ----------------------
  if (const GossipSettings *g = run.gossip) {
    auto inRange = [](const char *key, double v, double lo, bool loOpen, double hi, bool hiOpen,
                      const char *what) {
      bool ok = std::isfinite(v) && (loOpen ? v > lo : v >= lo) && (hiOpen ? v < hi : v <= hi);
      if (!ok)
        refuse("'" + std::string(key) + "' must be " + what + ", got " + num(v));
    };
    const double inf = HUGE_VAL;
    atLeast("train.outer_rounds", g->rounds, 0);
    inRange("train.net_step_time", g->stepTime, 0, true, inf, false, "a time > 0 (seconds)");
    inRange("train.net_bandwidth", g->bandwidth, 0, true, inf, false, "> 0 (bytes per second)");
    inRange("train.net_latency", g->latency, 0, false, inf, false, ">= 0 (seconds)");
    inRange("train.net_slow_replicas", g->slowReplicas, 0, false, 1, false,
            "a fraction in [0, 1]");
    inRange("train.net_slow_links", g->slowLinks, 0, false, 1, false, "a fraction in [0, 1]");
    inRange("train.net_slow_replica_factor", g->slowReplicaFactor, 1, false, inf, false,
            ">= 1 (a step-time multiplier)");
    inRange("train.net_slow_link_factor", g->slowLinkFactor, 1, false, inf, false,
            ">= 1 (a bandwidth divisor)");
  }

  // --- memory: what the run will allocate against what the machine has ----
  if (run.checkMemory && !opt.cuda) {
    MemoryEstimate need = estimateRunMemory(graph, opt, run.stages, std::max<int64_t>(
                                                                        run.replicas,
                                                                        graph.outerLoop.replicas));
    AvailableMemory have;
    if (run.availableBytes >= 0) {
      have.bytes = run.availableBytes;
      have.source = "given";
    } else {
      have = availableMemory();
    }
    if (have.bytes >= 0 && need.bytes > have.bytes)
      refuse("this run needs about " + formatBytes(double(need.bytes)) + " of memory (" +
             need.breakdown + ") but " + formatBytes(double(have.bytes)) + " is available (" +
             have.source + "); reduce the model ('model.layers', 'model.d_model', "
             "'model.hidden'), 'model.batch', or 'train.stages' / 'train.replicas' / "
             "'train.micro_batches'");
  }

  // --- a resume against the checkpoint it continues ------------------------
  if (const Checkpoint *c = run.resumeFrom) {
    const std::string &path = run.checkpointPath.empty() ? std::string("the checkpoint")
                                                         : run.checkpointPath;
    if (c->step < 0)
      refuse(path + ": the checkpoint's step is " + std::to_string(c->step));
    if (opt.forceResume)
      return;
    const std::string how = "; resume with the same settings, or pass --force-resume to continue "
                            "anyway";
    if (c->seed != opt.seed)
      refuse(path + " was written by a run with seed " + std::to_string(c->seed) +
             ", this run's seed is " + std::to_string(opt.seed) +
             " (the data order would change)" + how);
    auto differs = [&](const char *key, const std::string &now) {
      auto it = c->meta.find(key);
      return it != c->meta.end() && !now.empty() && it->second != now ? &it->second : nullptr;
    };
    if (const std::string *was = differs("train.micro_batches", std::to_string(opt.microBatches)))
      refuse(path + " was written by a run with " + *was + " micro-batches per step, this run "
             "has " + std::to_string(opt.microBatches) + how);
    if (const std::string *was = differs("model.inputs", inputSignature(graph)))
      refuse(path + " was written by another model: the step's inputs were " + *was +
             ", now they are " + inputSignature(graph) +
             " ('model.batch', 'model.seq_len' or 'train.micro_batches' changed)" + how);
    if (const std::string *was = differs("model.fingerprint", opt.modelFingerprint))
      refuse(path + " was written by another model: its forward computation differs (model "
             "fingerprint " + *was + " in the checkpoint, " + opt.modelFingerprint +
             " now: a [model] key such as 'model.heads' or 'model.activation' changed)" + how);
  }
}
