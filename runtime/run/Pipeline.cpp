//===- Pipeline.cpp - pipeline-parallel training runtime -----------------===//
//
// A worker thread per stage runs its micro-batches in 1F1B order: up to
// S − s micro-batches in flight on stage s, one forward then one backward in
// the steady state. Flush (synchronous) lets no micro-batch of step u+1
// start before the stage applied update u; PipeDream-2BW lets them start
// as soon as the weight version they need exists (update u−1 applied), and
// serves their reads of `@p.prev` from `@p` while update u is pending —
// which is exactly when x(u−1) still lives there.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/Pipeline.h"
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Runtime/RunChecks.h"
#include "stretto/Runtime/Communicator.h"
#include "stretto/Runtime/StepDriver.h"
#include "stretto/Runtime/StopSignals.h"

#include <iostream>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

using namespace stretto;

// Planning

std::vector<StagePlan> stretto::planStages(const Graph &graph) {
  int S = 1;
  for (const std::vector<Node> *phase : {&graph.nodes, &graph.update})
    for (const Node &n : *phase)
      S = std::max(S, n.stage + 1);
  for (const StateDecl &s : graph.states)
    S = std::max(S, s.stage + 1);

  // Forward = what the loss needs (following operands), plus the yield.
  const std::vector<Node> &step = graph.nodes;
  std::vector<bool> forward(step.size(), false);
  for (size_t i = 0; i < step.size(); ++i)
    if (step[i].kind == OpKind::Yield) {
      forward[i] = true;
      std::vector<int> work(step[i].operands.begin(), step[i].operands.end());
      while (!work.empty()) {
        int n = work.back();
        work.pop_back();
        if (forward[n])
          continue;
        forward[n] = true;
        work.insert(work.end(), step[n].operands.begin(), step[n].operands.end());
      }
    }

  std::vector<StagePlan> plans(S);
  for (int s = 0; s < S; ++s) {
    StagePlan &plan = plans[s];
    plan.stage = s;
    for (const StateDecl &d : graph.states)
      if (d.stage == s || d.stage < 0)
        plan.graph.states.push_back(d);

    // One phase: keep the stage's nodes and the unstaged ones whose operands
    // are all here; transfers into s become inputs, transfers out are sends.
    auto build = [&](const std::vector<Node> &src, std::vector<Node> &dst, bool isStep) {
      std::vector<int> map(src.size(), -1);
      for (size_t i = 0; i < src.size(); ++i) {
        const Node &n = src[i];
        if (n.kind == OpKind::Transfer) {
          int from = static_cast<int>(n.ints[0]), to = static_cast<int>(n.ints[1]);
          if (from == s) {
            int src0 = map[n.operands[0]];
            if (src0 < 0)
              throw std::runtime_error("stage " + std::to_string(s) + " sends a value it does not have (" +
                                       n.loc + ")");
            plan.sends.push_back({src0, static_cast<int>(i), to, isStep && !forward[i]});
          }
          if (to == s) {
            Node in;
            in.kind = OpKind::Input;
            in.name = "xfer." + std::to_string(i);
            in.shape = n.shape;
            in.dtype = n.dtype;
            in.loc = n.loc;
            in.stage = s;
            map[i] = static_cast<int>(dst.size());
            dst.push_back(in);
            if (isStep)
              (forward[i] ? plan.forward : plan.backward).push_back(map[i]);
          }
          continue;
        }
        if (n.kind == OpKind::StageSum) {
          // Each stage keeps its own partial and all-reduces it (ints {1}).
          Node copy = n;
          copy.operands.clear();
          for (int o : n.operands)
            if (map[o] >= 0 && src[o].stage == s)
              copy.operands.push_back(map[o]);
          if (copy.operands.size() != 1)
            throw std::runtime_error("stage " + std::to_string(s) + ": stage_sum at " + n.loc +
                                     " has " + std::to_string(copy.operands.size()) +
                                     " partials of this stage; it needs one");
          copy.ints = {1};
          map[i] = static_cast<int>(dst.size());
          dst.push_back(std::move(copy));
          continue;
        }
        bool mine = n.stage == s;
        bool shared = n.stage < 0 && std::all_of(n.operands.begin(), n.operands.end(),
                                                 [&](int o) { return map[o] >= 0; });
        if (!mine && !shared)
          continue;
        Node copy = n;
        for (int &o : copy.operands) {
          if (map[o] < 0)
            throw std::runtime_error("stage " + std::to_string(s) + ": " + opKindName(n.kind) +
                                     " at " + n.loc +
                                     " uses a value of another stage without a transfer");
          o = map[o];
        }
        map[i] = static_cast<int>(dst.size());
        dst.push_back(std::move(copy));
        if (isStep)
          (forward[i] ? plan.forward : plan.backward).push_back(map[i]);
      }
    };
    build(graph.nodes, plan.graph.nodes, true);
    build(graph.update, plan.graph.update, false);
  }
  return plans;
}

namespace {

StageReport reportFor(const StagePlan &plan) {
  StageReport r;
  r.stage = plan.stage;
  for (const StateDecl &d : plan.graph.states) {
    r.bytes += numElements(d.shape) * (d.dtype == DType::F64 ? 8 : 4);
    if (d.isParam) {
      ++r.parameters;
      ++r.weightVersions;
    } else if (!d.copyOf.empty()) {
      ++r.weightVersions; // 2BW's second version
    } else if (d.name.size() > 5 && d.name.compare(d.name.size() - 5, 5, ".ef_u") == 0) {
      ++r.efStates;
    } else {
      ++r.optimizerStates;
    }
  }
  return r;
}

// Message tags: activations and cotangents by (transfer, micro-batch);
// control flags, gathered states and reports in their own ranges.
constexpr uint64_t kTagData = 0, kTagFlag = uint64_t(1) << 46, kTagState = uint64_t(2) << 46,
                   kTagReport = uint64_t(3) << 46;
uint64_t dataTag(int channel, int64_t mb) {
  return kTagData | (uint64_t(channel) << 26) | (uint64_t(mb) & ((uint64_t(1) << 26) - 1));
}

// Validation transfers, in the flag range above every step number.
uint64_t evalTag(int64_t step, int64_t batch, int channel) {
  return kTagFlag | (uint64_t(1) << 45) | ((uint64_t(step) & 0x1ffffff) << 20) |
         ((uint64_t(batch) & 0xff) << 12) | (uint64_t(channel) & 0xfff);
}

enum StopFlag : int64_t { Go = 0, Stop = 1, Failed = 2 };

} // namespace

// Running

namespace {

/// Values travel in the executor's element type: an f64 reference run
/// computes every node in f64, whatever the node's declared type.
bool travelsInF64(const PipelineOptions &opt) {
  return !opt.executorFactory && !opt.compiled && opt.precision == Precision::F64;
}

/// One pipeline stage on rank s of `comm` (rank s runs stage s): its
/// executor, its part of the 1F1B schedule and of every transfer, and the
/// stop agreement. driveSteps runs it step by step; between two updates it
/// runs as many micro-batches as the schedule allows (2BW runs ahead).
class PipelineStage final : public StepMode {
public:
  PipelineStage(const Graph &graph, DataSource &data, const PipelineOptions &opt,
                const TrainerOptions &run, Communicator &comm, bool processes);

  int64_t totalSteps() const override { return opt.steps; }
  bool lead() const override { return s == S - 1; }
  std::string layout() const override { return "pipeline stages " + std::to_string(S); }
  int checkpointRank() const override { return s; }
  bool agree(bool ok) override {
    double bad = ok ? 0 : 1;
    comm.allReduceSum(&bad, 1);
    return bad == 0;
  }
  void abort(const std::string &why) override { comm.abort(why); }
  int64_t start(const std::map<std::string, HostTensor> *init) override;
  ResumePoint resume() override;
  StepReport step(const StepPlan &plan) override;
  std::map<std::string, HostTensor> parameters() override {
    if (finished)
      return finalParameters();
    return gatherStates(updates, /*paramsOnly=*/true);
  }
  std::string checkpointName(int64_t step) const override {
    return run.outDir + "/checkpoint-rank*-step" + std::to_string(step) + ".bin";
  }
  std::string summaryDetail() const override;
  std::string report() const override { return formatStageReport(result.stages); }
  /// The run's result: on the last stage every stage's report and final
  /// states and the losses; on the others their own report.
  PipelineResult &outcome() { return result; }

private:
  struct Recv {
    std::string name;
    int channel, from;
    bool backward;
    Shape shape;
    DType dtype;
  };
  DType wire(DType t) const { return f64 ? DType::F64 : t; }
  void timed(double &bucket, const std::function<void()> &fn);
  StepResult runPart(const std::vector<int> &nodes, int64_t j, bool backward);
  void runUntilUpdate(int64_t u);
  int64_t stopFlag(int64_t step, bool stopWanted);
  void agreeOnStop(int64_t step, int64_t flag);
  void saveCheckpoint(int64_t step);
  double validate(int64_t step);
  std::map<std::string, HostTensor> gatherStates(int64_t step, bool paramsOnly);
  std::map<std::string, HostTensor> finalParameters();
  void gatherReports();
  void drainPrevious();
  /// The mean loss of the k-th step this run trained (the last stage's).
  double stepLoss(int64_t k) const {
    double sum = 0;
    for (int64_t j = k * m; j < (k + 1) * m; ++j)
      sum += losses.at(static_cast<size_t>(j));
    return sum / static_cast<double>(m);
  }

  const Graph &graph;
  DataSource &data;
  const PipelineOptions opt;
  const TrainerOptions run;
  Communicator &comm;
  const std::vector<StagePlan> plans;
  const int S, s;
  const bool processes;
  const int64_t m, total;
  const StagePlan &plan;
  const bool f64;
  std::unique_ptr<Executor> exPtr;
  std::map<std::string, std::string> toCurrent; // 2BW: "@p.prev" -> "@p"
  const std::map<std::string, std::string> none;
  std::vector<Recv> recvs;
  // Sends posted during this step and during the previous one: a step's
  // sends may feed the next step (2BW runs ahead), which the receiver takes
  // only after its own end of step, so they are waited for a step later.
  std::vector<std::unique_ptr<Request>> pending, pendingPrev, flagSends;
  std::map<int64_t, ValueEnv> envs;
  int64_t first = 0, fwd = 0, bwd = 0, updates = 0, startStep = 0;
  // Stop agreement: at the end of step u every stage sends the others its
  // flag for u and reads theirs for u−1. A raised flag of u−1 stops
  // everyone after step u+1: no stage has started a micro-batch past u+1
  // when it reads it (2BW runs at most one step ahead of its updates), and
  // none starts one after, so nothing is left in flight.
  int64_t stopAfter = -1, prevFlag = 0;
  bool failed = false, finished = false;
  std::string why; // this stage's own reason to raise Failed
  std::vector<double> losses; // the last stage's, one per micro-batch
  StageReport report_;
  PipelineResult result;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  double busy = 0;
};

PipelineStage::PipelineStage(const Graph &graph, DataSource &data, const PipelineOptions &opt,
                             const TrainerOptions &run, Communicator &comm, bool processes)
    : graph(graph), data(data), opt(opt), run(run), comm(comm), plans(planStages(graph)),
      S(static_cast<int>(plans.size())), s(comm.rank()), processes(processes), m(opt.microBatches),
      total(opt.steps * opt.microBatches), plan(plans.at(std::min<size_t>(comm.rank(), plans.size() - 1))),
      f64(travelsInF64(opt)) {
  if (comm.size() != S)
    throw std::runtime_error("the plan has " + std::to_string(S) + " pipeline stages but the run " +
                             std::to_string(comm.size()) +
                             " ranks: a pipelined plan runs one rank per stage");
  report_ = reportFor(plan);
  exPtr = executorFor(plan.graph, opt);
  std::vector<int> sent;
  for (const StagePlan::Send &snd : plan.sends)
    sent.push_back(snd.node);
  exPtr->preparePartialRuns({plan.forward, plan.backward}, sent);
  // The update's stage_sum (global-norm clipping) sums over the stages.
  exPtr->setCollective([&comm](const Node &n, const HostTensor &v) {
    if (n.kind != OpKind::StageSum)
      throw std::runtime_error(std::string("a pipeline stage cannot run ") +
                               opKindName(n.kind));
    std::vector<double> x = v.data;
    comm.allReduceSum(x.data(), x.size());
    return HostTensor{v.shape, std::move(x)};
  });
  exPtr->initialize(opt.seed);
  for (const StateDecl &d : plan.graph.states)
    if (!d.copyOf.empty())
      toCurrent[d.name] = d.copyOf;
  // Received values: input node -> (channel, sending stage).
  for (size_t i = 0; i < plan.graph.nodes.size(); ++i) {
    const Node &n = plan.graph.nodes[i];
    if (n.kind != OpKind::Input || n.name.rfind("xfer.", 0) != 0)
      continue;
    int channel = std::stoi(n.name.substr(5));
    bool isBackward = std::find(plan.backward.begin(), plan.backward.end(),
                                static_cast<int>(i)) != plan.backward.end();
    recvs.push_back({n.name, channel, static_cast<int>(graph.nodes.at(channel).ints[0]),
                     isBackward, n.shape, n.dtype});
  }
}

int64_t PipelineStage::start(const std::map<std::string, HostTensor> *init) {
  if (!opt.resumeStates.empty()) { // resumed from states in memory (tests)
    if (opt.startStep < 0 || opt.startStep > opt.steps)
      throw std::runtime_error("resume step " + std::to_string(opt.startStep) +
                               " is outside [0, " + std::to_string(opt.steps) + "]");
    for (const StateDecl &d : plan.graph.states) {
      auto it = opt.resumeStates.find(d.name);
      if (it == opt.resumeStates.end())
        throw std::runtime_error("the resume state has no '" + d.name + "'");
      exPtr->setState(d.name, it->second);
    }
    exPtr->setStepCount(opt.startStep);
    startStep = opt.startStep;
  } else if (init) {
    applyInitParameters(*exPtr, plan.graph, *init);
  } else if (!opt.initParams.empty()) {
    applyInitParameters(*exPtr, plan.graph, opt.initParams);
  }
  first = fwd = bwd = startStep * m;
  updates = startStep;
  return startStep;
}

/// Each stage reads its own files (on its own machine's disk when the
/// stages are processes on several) at the newest step every stage holds.
ResumePoint PipelineStage::resume() {
  const int64_t step = newestCommonCheckpointStep(run.outDir, S, &comm);
  const std::string path = rankCheckpointPath(run.outDir, s, step);
  Checkpoint c;
  std::string error;
  try {
    c = loadRankCheckpoint(run.outDir, s, step, plan.graph.states);
    RunCheck check(graph, run);
    check.resumeFrom = &c;
    check.checkpointPath = path;
    validateRunSettings(check);
  } catch (const std::exception &e) {
    error = e.what();
  }
  if (!agree(error.empty()))
    throw std::runtime_error(error.empty() ? "another stage could not read its checkpoint (its "
                                             "log says why)"
                                           : error);
  std::string note = dataOrderNote(c, path, m);
  if (lead() && !note.empty())
    std::cerr << note << "\n";
  for (const StateDecl &d : plan.graph.states)
    exPtr->setState(d.name, c.states.at(d.name));
  exPtr->setStepCount(step);
  startStep = step;
  first = fwd = bwd = step * m;
  updates = step;
  return {step, checkpointName(step)};
}

void PipelineStage::timed(double &bucket, const std::function<void()> &fn) {
  auto a = std::chrono::steady_clock::now();
  fn();
  double d = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  busy += d;
  bucket += d;
}

/// Runs `nodes` of micro-batch j: its data (forward) or received values.
StepResult PipelineStage::runPart(const std::vector<int> &nodes, int64_t j, bool backward) {
  // Data inputs are forward nodes; the backward part only receives.
  std::map<std::string, HostTensor> inputs;
  if (!backward)
    inputs = data.batch(Split::Train, static_cast<uint64_t>(j / m), j % m);
  for (const Recv &r : recvs)
    if (r.backward == backward)
      inputs[r.name] = recvTensor(comm, r.from, dataTag(r.channel, j), r.shape, wire(r.dtype));
  // The version micro-batch j reads, given the updates applied so far: its
  // step u = j / m + 1 needs x(u−2), which 2BW reads from "@p" until update
  // u − 1 is applied.
  const auto &redirect = updates == j / m - 1 ? toCurrent : none;
  StepResult res;
  double &bucket = backward ? report_.backwardSeconds : report_.forwardSeconds;
  timed(bucket, [&] { res = exPtr->runNodes(nodes, envs[j], inputs, redirect); });
  ++(backward ? report_.backwards : report_.forwards);
  for (const StagePlan::Send &snd : plan.sends)
    if (snd.backward == backward)
      pending.push_back(sendTensor(comm, snd.to, dataTag(snd.channel, j),
                                   exPtr->envValue(envs[j], snd.node),
                                   wire(plan.graph.nodes[snd.node].dtype)));
  return res;
}

/// 1F1B until update `u` is applied: a forward whenever the window, the
/// weight version and the stop agreement allow it, else a backward (and
/// the update after a step's last one).
void PipelineStage::runUntilUpdate(int64_t u) {
  const int64_t window = S - s; // in flight on this stage
  while (updates < u) {
    bool versionReady = opt.schedule == Schedule::TwoBW ? fwd / m - 1 <= updates
                                                         : fwd / m <= updates;
    bool allowed = stopAfter < 0 || fwd / m < stopAfter;
    if (fwd < total && fwd - bwd < window && versionReady && allowed) {
      StepResult r = runPart(plan.forward, fwd, false);
      if (!r.outputs.empty()) {
        losses.push_back(r.outputs[0]);
        if (opt.onStep && static_cast<int64_t>(losses.size()) % m == 0)
          opt.onStep(startStep + static_cast<int64_t>(losses.size()) / m, stepLoss(
              static_cast<int64_t>(losses.size()) / m - 1));
      }
      ++fwd;
      continue;
    }
    StepResult r = runPart(plan.backward, bwd, true);
    // Summing the micro-batch's gradients is backward work (schedule models
    // and stretto-tune's profile read backwardSeconds).
    timed(report_.backwardSeconds, [&] { exPtr->accumulateGrads(r); });
    envs.erase(bwd);
    ++bwd;
    if (bwd % m != 0)
      continue;
    timed(report_.updateSeconds, [&] { exPtr->update(); });
    ++report_.updates;
    ++updates;
  }
}

void PipelineStage::drainPrevious() {
  for (auto &r : pendingPrev)
    r->wait();
  pendingPrev = std::move(pending);
  pending.clear();
}

/// This stage's flag for `step`: the last stage knows the loss, and a
/// non-finite one stops the run, as does a non-finite state of any stage (a
/// finite loss can hide one); else a stop request.
int64_t PipelineStage::stopFlag(int64_t step, bool stopWanted) {
  if (s == S - 1 && !losses.empty() && !std::isfinite(losses.back())) {
    if (why.empty())
      why = "the loss became " + std::to_string(losses.back()) + " at step " +
            std::to_string(step);
    return Failed;
  }
  if (std::string bad = exPtr->nonFiniteState(); !bad.empty()) {
    if (why.empty())
      why = "after the update of step " + std::to_string(step) + ", state " + bad;
    return Failed;
  }
  return stopWanted ? Stop : Go;
}

/// Sends this stage's flag for `step`, reads the others' for step − 1
/// (see stopAfter) and, at the run's last step, for `step` too.
void PipelineStage::agreeOnStop(int64_t step, int64_t flag) {
  auto readFlags = [&](int64_t u, int64_t own) {
    int64_t agg = own;
    for (int p = 0; p < S; ++p)
      if (p != s) {
        int64_t theirs = 0;
        comm.recv(p, kTagFlag | uint64_t(u), WireType::I64, &theirs, 1);
        agg = std::max(agg, theirs);
      }
    return agg;
  };
  std::vector<std::unique_ptr<Request>> sentNow;
  for (int p = 0; p < S; ++p)
    if (p != s)
      sentNow.push_back(comm.isend(p, kTagFlag | uint64_t(step), WireType::I64, &flag, 1));
  if (step > startStep + 1) {
    int64_t prev = readFlags(step - 1, prevFlag);
    if (prev != Go && stopAfter < 0) {
      stopAfter = step + 1;
      failed = prev == Failed;
    }
  }
  for (auto &f : flagSends)
    f->wait();
  flagSends = std::move(sentNow);
  prevFlag = flag;
  const bool last = step == opt.steps || step == stopAfter;
  drainPrevious();
  if (!last)
    return;
  drainPrevious();
  int64_t now = readFlags(step, flag); // every flag sent is read
  if (stopAfter < 0 && now != Go)
    failed = failed || now == Failed; // raised at the very last step
  for (auto &f : flagSends)
    f->wait();
  flagSends.clear();
}

StepReport PipelineStage::step(const StepPlan &p) {
  StepReport r;
  runUntilUpdate(p.step);
  const int64_t step = updates;
  agreeOnStop(step, stopFlag(step, p.stopWanted()));
  const bool stopped = step == stopAfter && step < opt.steps;
  r.tokens = static_cast<double>(m * data.tokensPerBatch());
  if (lead()) {
    r.knowsLoss = true;
    r.loss = stepLoss(step - startStep - 1);
  }
  if (failed) {
    if (step == stopAfter || step == opt.steps) { // every stage ends here
      r.end = StepEnd::Failed;
      r.failure = why.empty() ? "another stage stopped the run at step " + std::to_string(step)
                              : why;
    }
    return r;
  }
  if ((p.checkpoint || stopped) && !run.outDir.empty()) {
    saveCheckpoint(step);
    r.checkpointed = true;
  }
  if (p.evaluate && opt.evalBatches > 0) {
    double val = validate(step);
    if (lead())
      r.valLoss = val;
  }
  if (p.last || stopped) {
    gatherReports();
    finished = true;
  }
  r.end = stopped ? StepEnd::Stopped : StepEnd::Continue;
  return r;
}

/// Each stage writes its own file; once every stage has (a barrier), each
/// removes its older ones.
void PipelineStage::saveCheckpoint(int64_t step) {
  std::map<std::string, HostTensor> own;
  for (const StateDecl &d : plan.graph.states)
    own[d.name] = exPtr->getState(d.name);
  saveRankCheckpoint(run.outDir, s, step, opt.seed, own, run.precision,
                     checkpointMeta(graph, run));
  comm.barrier();
  removeRankCheckpointsBefore(run.outDir, s, step);
}

/// Forward only, with this step's weights (x(step): no 2BW redirect), stage
/// by stage: every part of each validation batch (the step's batch,
/// whatever m). The mean on the last stage.
double PipelineStage::validate(int64_t step) {
  double sum = 0;
  for (int64_t b = 0; b < opt.evalBatches * m; ++b) {
    std::map<std::string, HostTensor> inputs =
        data.batch(Split::Val, static_cast<uint64_t>(b / m), b % m);
    for (const Recv &r : recvs)
      if (!r.backward)
        inputs[r.name] =
            recvTensor(comm, r.from, evalTag(step, b, r.channel), r.shape, wire(r.dtype));
    ValueEnv env;
    StepResult res = exPtr->runNodes(plan.forward, env, inputs, none);
    for (const StagePlan::Send &snd : plan.sends)
      if (!snd.backward)
        sendTensor(comm, snd.to, evalTag(step, b, snd.channel), exPtr->envValue(env, snd.node),
                   wire(plan.graph.nodes[snd.node].dtype))
            ->wait();
    if (!res.outputs.empty())
      sum += res.outputs[0];
  }
  return sum / static_cast<double>(opt.evalBatches * m);
}

/// Every stage's states (or parameters), gathered on the last stage.
std::map<std::string, HostTensor> PipelineStage::gatherStates(int64_t step, bool paramsOnly) {
  std::map<std::string, HostTensor> all;
  if (s != S - 1) {
    int k = 0;
    for (const StateDecl &d : plan.graph.states)
      if (!paramsOnly || d.isParam)
        sendTensor(comm, S - 1, kTagState | (uint64_t(step) << 12) | uint64_t(k++),
                   exPtr->getState(d.name), wire(d.dtype))
            ->wait();
    return all;
  }
  for (int from = 0; from < S; ++from) {
    int k = 0;
    for (const StateDecl &d : plans[from].graph.states) {
      if (paramsOnly && !d.isParam)
        continue;
      if (from == s)
        all[d.name] = exPtr->getState(d.name);
      else
        all[d.name] = recvTensor(comm, from, kTagState | (uint64_t(step) << 12) | uint64_t(k),
                                 d.shape, wire(d.dtype));
      ++k;
    }
  }
  return all;
}

std::map<std::string, HostTensor> PipelineStage::finalParameters() {
  std::map<std::string, HostTensor> params;
  for (const StateDecl &d : graph.states)
    if (d.isParam && result.states.count(d.name))
      params.emplace(d.name, result.states.at(d.name));
  return params;
}

/// The end of the run: the last stage gathers every stage's final states
/// and report, and holds the losses.
void PipelineStage::gatherReports() {
  for (auto &r : pending)
    r->wait();
  pending.clear();
  report_.busySeconds = busy;
  report_.wallSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.seconds = report_.wallSeconds;
  result.lastStep = updates;
  result.stopped = updates < opt.steps;
  std::map<std::string, HostTensor> all = gatherStates(opt.steps + 1, /*paramsOnly=*/false);
  const StageReport &o = report_;
  std::vector<double> mine = {double(o.stage), double(o.parameters), double(o.weightVersions),
                              double(o.efStates), double(o.optimizerStates), double(o.bytes),
                              o.busySeconds, o.wallSeconds, o.forwardSeconds,
                              o.backwardSeconds, o.updateSeconds, double(o.forwards),
                              double(o.backwards), double(o.updates)};
  if (s != S - 1) {
    comm.isend(S - 1, kTagReport, WireType::F64, mine.data(), mine.size())->wait();
    result.stages.push_back(report_);
    return;
  }
  result.states = std::move(all);
  result.stages.resize(S);
  for (int from = 0; from < S; ++from) {
    std::vector<double> v = mine;
    if (from != s)
      comm.recv(from, kTagReport, WireType::F64, v.data(), v.size());
    StageReport &r = result.stages[from];
    r.stage = int(v[0]);
    r.parameters = int64_t(v[1]);
    r.weightVersions = int64_t(v[2]);
    r.efStates = int64_t(v[3]);
    r.optimizerStates = int64_t(v[4]);
    r.bytes = int64_t(v[5]);
    r.busySeconds = v[6];
    r.wallSeconds = v[7];
    r.forwardSeconds = v[8];
    r.backwardSeconds = v[9];
    r.updateSeconds = v[10];
    r.forwards = int64_t(v[11]);
    r.backwards = int64_t(v[12]);
    r.updates = int64_t(v[13]);
  }
  for (int64_t u = 0; u < updates - startStep; ++u)
    result.losses.push_back(stepLoss(u));
}

std::string PipelineStage::summaryDetail() const {
  return std::string(" (") + (opt.schedule == Schedule::TwoBW ? "PipeDream-2BW" : "flush") +
         ", " + std::to_string(S) + " stages" +
         (processes ? " on " + std::to_string(comm.size()) + " processes" : "") + ", " +
         std::to_string(m) + " micro-batches)";
}

} // namespace

namespace {

/// The trainer options a library run of `opt` drives with: its steps and
/// evaluation, silent, no output folder.
TrainerOptions libraryRun(const PipelineOptions &opt) {
  TrainerOptions run;
  run.steps = opt.steps;
  run.microBatches = opt.microBatches;
  run.seed = opt.seed;
  run.evalInterval = opt.evalInterval > 0 ? opt.evalInterval : opt.steps + 1;
  run.evalBatches = opt.evalBatches;
  run.logInterval = opt.steps + 1;
  run.quiet = run.silent = true; // the caller reads the PipelineResult
  run.precision = opt.precision;
  return run;
}

/// Threads share the data source; batches are stateless but not thread-safe.
class LockedData final : public DataSource {
public:
  explicit LockedData(DataSource &d) : d(d) {}
  std::map<std::string, HostTensor> batch(Split sp, uint64_t i, int64_t part) override {
    std::lock_guard<std::mutex> lock(mu);
    return d.batch(sp, i, part);
  }
  std::string describe() const override { return d.describe(); }
  int64_t tokensPerBatch() const override { return d.tokensPerBatch(); }

private:
  DataSource &d;
  std::mutex mu;
};

/// Every stage on a thread of this process, each driven by driveSteps over
/// an in-process group; `stop` is their shared stop request. The last
/// stage's outcome, and its exit status; `error` is the failing stage's
/// message (the one that saw why, over one that only heard of it).
int pipelineOnThreads(const Graph &graph, DataSource &data, const PipelineOptions &opt,
                      const TrainerOptions &run, std::atomic<bool> &stop, PipelineResult &result,
                      std::string &error) {
  const int S = static_cast<int>(planStages(graph).size());
  InProcessGroup group(S);
  LockedData locked(data);
  std::mutex mu;
  std::vector<int> codes(static_cast<size_t>(S), 0);
  auto note = [&](int s, const std::string &what) {
    std::lock_guard<std::mutex> lock(mu);
    const char *echo = "another stage stopped the run";
    if (error.empty() || (error.find(echo) != std::string::npos &&
                          what.find(echo) == std::string::npos))
      error = "stage " + std::to_string(s) + ": " + what;
  };
  runOnThreads(group, [&](int s, Communicator &c) {
    TrainerOptions mine = run;
    mine.quiet = run.quiet || s != S - 1;
    mine.errorsToCaller = true;
    mine.onError = [&note, s](const std::string &what) { note(s, what); };
    PipelineStage mode(graph, locked, opt, mine, c, /*processes=*/false);
    TrainSummary sum;
    codes[static_cast<size_t>(s)] = driveSteps(mode, graph, mine, &sum, &stop);
    if (!sum.error.empty())
      note(s, sum.error);
    if (s == S - 1) {
      result = std::move(mode.outcome());
      result.stepEnds = std::move(sum.stepEnds);
    }
  }, [&](int s, const std::string &what) {
    note(s, what);
    codes[static_cast<size_t>(s)] = 1;
  });
  return std::count(codes.begin(), codes.end(), 1) ? 1 : codes.back();
}

} // namespace

PipelineResult stretto::runPipeline(const Graph &graph, DataSource &data,
                                    const PipelineOptions &opt) {
  auto t0 = std::chrono::steady_clock::now();
  std::atomic<bool> never{false};
  PipelineResult result;
  std::string error;
  if (pipelineOnThreads(graph, data, opt, libraryRun(opt), never, result, error) != 0)
    throw std::runtime_error(error.empty() ? "the pipeline failed" : error);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

std::string stretto::formatStageReport(const std::vector<StageReport> &stages) {
  std::ostringstream os;
  os << "stage | params | weight versions | EF states | optimizer states | state MB | busy s | idle\n";
  for (const StageReport &r : stages) {
    char line[160];
    std::snprintf(line, sizeof line, "%5d | %6lld | %15lld | %9lld | %16lld | %8.2f | %6.2f | %4.0f%%\n",
                  r.stage, (long long)r.parameters, (long long)r.weightVersions,
                  (long long)r.efStates, (long long)r.optimizerStates, r.bytes / 1e6,
                  r.busySeconds, 100 * r.idleFraction());
    os << line;
  }
  return os.str();
}

PipelineOptions stretto::pipelineOptionsFor(const TrainerOptions &opt, bool twoBW) {
  PipelineOptions po;
  po.steps = opt.steps;
  po.microBatches = opt.microBatches;
  po.schedule = twoBW ? Schedule::TwoBW : Schedule::Flush;
  po.executorFactory = executorFactory(opt);
  po.seed = opt.seed;
  po.evalInterval = opt.evalInterval;
  po.evalBatches = opt.evalBatches;
  return po;
}

int stretto::runPipelineTraining(const Graph &graph, DataSource &data, const TrainerOptions &opt,
                                 bool twoBW, Communicator *comm) {
  PipelineOptions po = pipelineOptionsFor(opt, twoBW);
  try {
    if (comm) { // this process is one stage
      PipelineStage mode(graph, data, po, opt, *comm, /*processes=*/true);
      return driveSteps(mode, graph, opt);
    }
    // One thread per stage; Ctrl-C and SIGTERM stop them all.
    std::atomic<bool> stop{false};
    StopOnSignal signals(stop);
    PipelineResult result;
    std::string error;
    int code = pipelineOnThreads(graph, data, po, opt, stop, result, error);
    if (code == 1)
      std::cerr << "error: " << (error.empty() ? "the pipeline failed" : error) << "\n";
    return code;
  } catch (const std::exception &e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
