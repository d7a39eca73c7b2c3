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
#include "stretto/Pipeline.h"
#include "stretto/PlanExecutor.h"
#include "stretto/RunChecks.h"
#include "stretto/Runtime/Communicator.h"
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

PipelineResult stretto::runPipelineRank(const Graph &graph, DataSource &data,
                                        const PipelineOptions &opt, Communicator &comm) {
  std::vector<StagePlan> plans = planStages(graph);
  const int S = static_cast<int>(plans.size());
  const int s = comm.rank();
  if (comm.size() != S)
    throw std::runtime_error("the plan has " + std::to_string(S) + " pipeline stages but the run " +
                             std::to_string(comm.size()) +
                             " ranks: a pipelined plan runs one rank per stage");
  const int64_t m = opt.microBatches, total = opt.steps * m, first = opt.startStep * m;
  if (opt.startStep < 0 || opt.startStep > opt.steps)
    throw std::runtime_error("resume step " + std::to_string(opt.startStep) + " is outside [0, " +
                             std::to_string(opt.steps) + "]");
  const StagePlan &plan = plans[s];
  // Values travel in the executor's element type: an f64 reference run
  // computes every node in f64, whatever the node's declared type.
  const bool f64 = !opt.executorFactory && !opt.compiled && opt.precision == Precision::F64;
  auto wire = [f64](DType t) { return f64 ? DType::F64 : t; };
  PipelineResult result;
  StageReport report = reportFor(plan);
  std::vector<double> losses;
  auto t0 = std::chrono::steady_clock::now();
  double busy = 0;

  std::unique_ptr<Executor> exPtr;
  if (opt.executorFactory) {
    exPtr = opt.executorFactory(plan.graph);
  } else if (opt.compiled) {
    exPtr = std::make_unique<PlanExecutor>(plan.graph, opt.kernels, opt.gemmPrecision);
  } else {
    auto ref = std::make_unique<RefExecutor>(plan.graph, opt.precision);
    ref->setKernels(opt.kernels);
    exPtr = std::move(ref);
  }
  Executor &ex = *exPtr;
  std::vector<int> sent;
  for (const StagePlan::Send &snd : plan.sends)
    sent.push_back(snd.node);
  ex.preparePartialRuns({plan.forward, plan.backward}, sent);
  // The update's stage_sum (global-norm clipping) sums over the stages.
  ex.setCollective([&comm](const Node &n, const HostTensor &v) {
    if (n.kind != OpKind::StageSum)
      throw std::runtime_error(std::string("a pipeline stage cannot run ") +
                               opKindName(n.kind));
    std::vector<double> x = v.data;
    comm.allReduceSum(x.data(), x.size());
    return HostTensor{v.shape, std::move(x)};
  });
  ex.initialize(opt.seed);
  if (!opt.resumeStates.empty()) {
    for (const StateDecl &d : plan.graph.states) {
      auto it = opt.resumeStates.find(d.name);
      if (it == opt.resumeStates.end())
        throw std::runtime_error("the resume state has no '" + d.name + "'");
      ex.setState(d.name, it->second);
    }
    ex.setStepCount(opt.startStep);
  } else if (!opt.initParams.empty()) {
    applyInitParameters(ex, plan.graph, opt.initParams);
  }
  // Versions 2BW reads: "@p.prev" -> "@p" while the update is pending.
  std::map<std::string, std::string> toCurrent;
  for (const StateDecl &d : plan.graph.states)
    if (!d.copyOf.empty())
      toCurrent[d.name] = d.copyOf;
  const std::map<std::string, std::string> none;

  // Received values: input node -> (channel, sending stage).
  struct Recv {
    std::string name;
    int channel, from;
    bool backward;
    Shape shape;
    DType dtype;
  };
  std::vector<Recv> recvs;
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
  // Sends posted during this step, and during the previous one. A step's
  // sends may feed the next step (2BW runs ahead), which the receiver takes
  // only after its own end of step: they are waited for one step later.
  std::vector<std::unique_ptr<Request>> pending, pendingPrev;
  auto drainPrevious = [&] {
    for (auto &r : pendingPrev)
      r->wait();
    pendingPrev = std::move(pending);
    pending.clear();
  };
  auto drain = [&] {
    drainPrevious();
    drainPrevious();
  };

  std::map<int64_t, ValueEnv> envs;
  int64_t fwd = first, bwd = first, updates = opt.startStep;
  const int64_t window = S - s; // in flight on this stage (1F1B)
  auto timed = [&](double &bucket, auto &&fn) {
    auto a = std::chrono::steady_clock::now();
    fn();
    double d = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    busy += d;
    bucket += d;
  };
  // The version micro-batch j reads, given the updates applied so far.
  auto redirectFor = [&](int64_t j) -> const std::map<std::string, std::string> & {
    int64_t u = j / m + 1; // its step, 1-based; it needs x(u-2)
    return updates == u - 2 ? toCurrent : none;
  };
  auto run = [&](const std::vector<int> &nodes, int64_t j, bool backward) {
    // Data inputs are forward nodes; the backward part only receives.
    std::map<std::string, HostTensor> inputs;
    if (!backward)
      inputs = data.batch(Split::Train, static_cast<uint64_t>(j / m), j % m);
    for (const Recv &r : recvs)
      if (r.backward == backward)
        inputs[r.name] = recvTensor(comm, r.from, dataTag(r.channel, j), r.shape, wire(r.dtype));
    StepResult res;
    double &bucket = backward ? report.backwardSeconds : report.forwardSeconds;
    timed(bucket, [&] { res = ex.runNodes(nodes, envs[j], inputs, redirectFor(j)); });
    ++(backward ? report.backwards : report.forwards);
    for (const StagePlan::Send &snd : plan.sends)
      if (snd.backward == backward)
        pending.push_back(sendTensor(comm, snd.to, dataTag(snd.channel, j),
                                     ex.envValue(envs[j], snd.node),
                                     wire(plan.graph.nodes[snd.node].dtype)));
    return res;
  };

  // Every stage's states (or parameters), gathered on the last stage
  // (periodic checkpoints' model file, the end).
  auto gatherStates = [&](int64_t step, bool paramsOnly) {
    std::map<std::string, HostTensor> all;
    if (s != S - 1) {
      int k = 0;
      for (const StateDecl &d : plan.graph.states)
        if (!paramsOnly || d.isParam)
          sendTensor(comm, S - 1, kTagState | (uint64_t(step) << 12) | uint64_t(k++),
                     ex.getState(d.name), wire(d.dtype))
              ->wait();
      return all;
    }
    for (int from = 0; from < S; ++from) {
      int k = 0;
      for (const StateDecl &d : plans[from].graph.states) {
        if (paramsOnly && !d.isParam)
          continue;
        if (from == s)
          all[d.name] = ex.getState(d.name);
        else
          all[d.name] = recvTensor(comm, from, kTagState | (uint64_t(step) << 12) | uint64_t(k),
                                   d.shape, wire(d.dtype));
        ++k;
      }
    }
    return all;
  };

  // Stop agreement: at the end of step u every stage sends the others its
  // flag for u and reads theirs for u−1. A raised flag of u−1 stops
  // everyone after step u+1: no stage has started a micro-batch past u+1
  // when it reads it (2BW runs at most one step ahead of its updates), and
  // none starts one after, so nothing is left in flight.
  int64_t stopAfter = -1;
  bool failed = false;
  std::string why; // this stage's own reason to raise Failed
  std::vector<std::unique_ptr<Request>> flagSends; // waited a step later
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
  int64_t prevFlag = Go;

  while (bwd < total) {
    bool versionReady = opt.schedule == Schedule::TwoBW ? fwd / m - 1 <= updates
                                                         : fwd / m <= updates;
    bool allowed = stopAfter < 0 || fwd / m < stopAfter;
    if (fwd < total && fwd - bwd < window && versionReady && allowed) {
      StepResult r = run(plan.forward, fwd, false);
      if (!r.outputs.empty()) {
        losses.push_back(r.outputs[0]);
        if (static_cast<int64_t>(losses.size()) % m == 0) {
          double sum = 0;
          for (int64_t k = static_cast<int64_t>(losses.size()) - m;
               k < static_cast<int64_t>(losses.size()); ++k)
            sum += losses[k];
          if (opt.onStep)
            opt.onStep(opt.startStep + static_cast<int64_t>(losses.size()) / m,
                       sum / static_cast<double>(m));
        }
      }
      ++fwd;
      continue;
    }
    StepResult r = run(plan.backward, bwd, true);
    // Summing the micro-batch's gradients is backward work (schedule models
    // and stretto-tune's profile read backwardSeconds).
    timed(report.backwardSeconds, [&] { ex.accumulateGrads(r); });
    envs.erase(bwd);
    ++bwd;
    if (bwd % m != 0)
      continue;
    timed(report.updateSeconds, [&] { ex.update(); });
    ++report.updates;
    ++updates;
    const int64_t step = updates;
    // The last stage knows the loss: a non-finite one stops the run, as
    // does a non-finite state of any stage (a finite loss can hide one).
    int64_t flag = Go;
    if (s == S - 1 && !losses.empty() && !std::isfinite(losses.back())) {
      flag = Failed;
      if (why.empty())
        why = "the loss became " + std::to_string(losses.back()) + " at step " +
              std::to_string(step);
    } else if (std::string bad = ex.nonFiniteState(); !bad.empty()) {
      flag = Failed;
      if (why.empty())
        why = "after the update of step " + std::to_string(step) + ", state " + bad;
    } else if (opt.stopRequested && opt.stopRequested())
      flag = Stop;
    std::vector<std::unique_ptr<Request>> sentNow;
    for (int p = 0; p < S; ++p)
      if (p != s)
        sentNow.push_back(comm.isend(p, kTagFlag | uint64_t(step), WireType::I64, &flag, 1));
    if (step > opt.startStep + 1) {
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
    if (last)
      drain();
    else
      drainPrevious();
    if (last) {
      int64_t now = readFlags(step, flag); // every flag sent is read
      if (stopAfter < 0 && now != Go)
        failed = failed || now == Failed; // raised at the very last step
      for (auto &f : flagSends)
        f->wait();
      flagSends.clear();
    }
    if (step == stopAfter && step < opt.steps)
      result.stopped = true;
    bool ckpt = !failed && opt.onCheckpoint &&
                ((opt.checkpointInterval > 0 && step % opt.checkpointInterval == 0) ||
                 result.stopped || step == opt.steps);
    if (ckpt) {
      std::map<std::string, HostTensor> own;
      for (const StateDecl &d : plan.graph.states)
        own[d.name] = ex.getState(d.name);
      opt.onCheckpoint(step, s, own);
      comm.barrier(); // every stage has written this step
      if (opt.onCheckpointKept)
        opt.onCheckpointKept(step, s);
      if (opt.onModel && step < opt.steps && !result.stopped) {
        std::map<std::string, HostTensor> params = gatherStates(step, /*paramsOnly=*/true);
        if (s == S - 1)
          opt.onModel(step, params);
      }
    }
    if (!failed && opt.evalInterval > 0 && opt.evalBatches > 0 &&
        (step % opt.evalInterval == 0 || step == opt.steps)) {
      // Forward only, with this step's weights (x(step): no 2BW redirect),
      // stage by stage; every stage is here after the same update.
      // Every part of each validation batch (the step's batch, whatever m).
      double sum = 0;
      for (int64_t b = 0; b < opt.evalBatches * m; ++b) {
        std::map<std::string, HostTensor> inputs =
            data.batch(Split::Val, static_cast<uint64_t>(b / m), b % m);
        for (const Recv &r : recvs)
          if (!r.backward)
            inputs[r.name] = recvTensor(comm, r.from, evalTag(step, b, r.channel), r.shape,
                                        wire(r.dtype));
        ValueEnv env;
        StepResult res = ex.runNodes(plan.forward, env, inputs, none);
        for (const StagePlan::Send &snd : plan.sends)
          if (!snd.backward)
            sendTensor(comm, snd.to, evalTag(step, b, snd.channel), ex.envValue(env, snd.node),
                       wire(plan.graph.nodes[snd.node].dtype))
                ->wait();
        if (!res.outputs.empty())
          sum += res.outputs[0];
      }
      if (s == S - 1 && opt.onEval)
        opt.onEval(step, sum / static_cast<double>(opt.evalBatches * m));
    }
    if (last)
      break;
  }
  drain();
  result.lastStep = updates;
  if (failed)
    throw std::runtime_error((why.empty() ? "another stage stopped the run at step " +
                                                std::to_string(result.lastStep)
                                          : why) +
                             "; stopping without a checkpoint (the last good one is kept)");

  report.busySeconds = busy;
  report.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.seconds = report.wallSeconds;
  // The last stage gathers the final states, the reports and holds the losses.
  std::map<std::string, HostTensor> all = gatherStates(opt.steps + 1, /*paramsOnly=*/false);
  std::vector<double> mine = {double(report.stage), double(report.parameters),
                              double(report.weightVersions), double(report.efStates),
                              double(report.optimizerStates), double(report.bytes),
                              report.busySeconds, report.wallSeconds, report.forwardSeconds,
                              report.backwardSeconds, report.updateSeconds,
                              double(report.forwards), double(report.backwards),
                              double(report.updates)};
  if (s != S - 1) {
    comm.isend(S - 1, kTagReport, WireType::F64, mine.data(), mine.size())->wait();
    result.stages.push_back(report);
    return result;
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
  // A step's loss is the mean of its micro-batches.
  const int64_t ran = result.lastStep - opt.startStep;
  for (int64_t u = 0; u < ran; ++u) {
    double sum = 0;
    for (int64_t k = 0; k < m; ++k)
      sum += losses.at(u * m + k);
    result.losses.push_back(sum / static_cast<double>(m));
  }
  return result;
}

PipelineResult stretto::runPipeline(const Graph &graph, DataSource &data,
                                    const PipelineOptions &opt) {
  const int S = static_cast<int>(planStages(graph).size());
  InProcessGroup group(S);
  // Threads share the data source; batches are stateless but not thread-safe.
  struct Locked : DataSource {
    DataSource &d;
    std::mutex mu;
    explicit Locked(DataSource &d) : d(d) {}
    std::map<std::string, HostTensor> batch(Split sp, uint64_t i, int64_t part) override {
      std::lock_guard<std::mutex> lock(mu);
      return d.batch(sp, i, part);
    }
    std::string describe() const override { return d.describe(); }
    int64_t tokensPerBatch() const override { return d.tokensPerBatch(); }
  } locked(data);
  std::mutex errMu;
  std::string error;
  PipelineResult result;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  auto joinAll = [&] {
    for (std::thread &t : threads)
      t.join();
  };
  for (int s = 0; s < S; ++s) try {
    threads.emplace_back([&, s] {
      Communicator &c = group.rank(s);
      try {
        PipelineResult r = runPipelineRank(graph, locked, opt, c);
        if (s == S - 1)
          result = std::move(r);
      } catch (const std::exception &e) {
        {
          std::lock_guard<std::mutex> lock(errMu);
          // The stage that saw why wins over one that only heard of it.
          const char *echo = "another stage stopped the run";
          if (error.empty() || (error.find(echo) != std::string::npos &&
                                std::string(e.what()).find(echo) == std::string::npos))
            error = "stage " + std::to_string(s) + ": " + e.what();
        }
        c.abort("stage " + std::to_string(s) + " failed");
      }
    });
  } catch (const std::system_error &e) {
    // No thread for stage s (the system's thread limit): unblock the others.
    group.rank(0).abort("no thread could be started for stage " + std::to_string(s));
    joinAll();
    throw std::runtime_error("cannot start a thread for pipeline stage " + std::to_string(s) +
                             " of " + std::to_string(S) + ": " + e.what());
  }
  joinAll();
  if (!error.empty())
    throw std::runtime_error(error);
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

namespace stretto {

/// Trains on the pipeline runtime: one worker per stage, 1F1B. Progress,
/// the per-stage allocation and idle report, periodic validation,
/// metrics.jsonl, checkpoints every checkpoint_interval steps, at the end
/// and on Ctrl-C (resumable).
int runPipelineTraining(const Graph &graph, DataSource &data, const TrainerOptions &opt,
                        bool twoBW, Communicator *comm) {
  PipelineOptions po;
  po.steps = opt.steps;
  po.microBatches = opt.microBatches;
  po.schedule = twoBW ? Schedule::TwoBW : Schedule::Flush;
  po.executorFactory = executorFactory(opt);
  po.seed = opt.seed;
  // The last stage holds the loss: it prints and writes the output folder.
  const std::vector<StagePlan> plans = planStages(graph);
  const int S = static_cast<int>(plans.size());
  const bool lead = !comm || comm->rank() == S - 1;
  auto t0 = std::chrono::steady_clock::now();
  std::ofstream metrics;
  po.onStep = [&](int64_t step, double loss) {
    if (metrics.is_open())
      metrics << "{\"step\": " << step << ", \"loss\": " << loss << "}\n" << std::flush;
    if (opt.quiet || (step % opt.logInterval != 0 && step != opt.steps))
      return;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("step %6lld/%lld | loss %.4f | %8.0f tok/s\n", (long long)step,
                (long long)opt.steps, loss,
                s > 0 ? (step - po.startStep) * opt.microBatches * data.tokensPerBatch() / s : 0.0);
    std::fflush(stdout);
  };
  po.evalInterval = opt.evalInterval;
  po.evalBatches = opt.evalBatches;
  po.onEval = [&](int64_t step, double val) {
    if (metrics.is_open()) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "{\"step\": %lld, \"val_loss\": %.17g}\n", (long long)step,
                    val);
      metrics << buf << std::flush;
    }
    if (!opt.quiet) {
      std::printf("step %6lld/%lld | val %.4f\n", (long long)step, (long long)opt.steps, val);
      std::fflush(stdout);
    }
  };
  static std::atomic<bool> interrupted{false};
  interrupted = false;
  po.stopRequested = [] { return interrupted.load(); };
  StopOnSignal stopOnSignal(interrupted); // Ctrl-C, and SIGTERM from a launcher
  try {
    // Each stage writes and reads its own files (rankCheckpointPath), on
    // its own machine's disk when the stages are processes on several.
    const std::string files = opt.outDir + "/checkpoint-rank*-step";
    if (!opt.outDir.empty()) {
      prepareOutputDirectory(opt.outDir);
      if (opt.resume) {
        const int64_t step = newestCommonCheckpointStep(opt.outDir, S, comm);
        for (int r = 0; r < S; ++r) {
          if (comm && r != comm->rank())
            continue;
          Checkpoint c = loadRankCheckpoint(opt.outDir, r, step, plans[r].graph.states);
          RunCheck check(graph, opt);
          check.resumeFrom = &c;
          check.checkpointPath = rankCheckpointPath(opt.outDir, r, step);
          validateRunSettings(check);
          std::string note = dataOrderNote(c, check.checkpointPath, opt.microBatches);
          if (lead && !note.empty())
            std::cerr << note << "\n";
          po.resumeStates.merge(c.states);
        }
        if (step >= opt.steps) {
          // Nothing left to do: not an error, and no step counts below zero.
          if (lead)
            std::printf("the run in %s already finished: its checkpoint is at step %lld of "
                        "%lld; nothing to train (raise --steps to continue it)\n",
                        opt.outDir.c_str(), (long long)step, (long long)opt.steps);
          return 0;
        }
        po.startStep = step;
        if (lead)
          std::printf("resuming from %s%lld.bin at step %lld\n", files.c_str(), (long long)step,
                      (long long)step);
      } else {
        refuseExistingCheckpoint(opt.outDir, comm ? comm->rank() : -1);
      }
      checkWorld(opt.outDir, opt.resume, "pipeline stages " + std::to_string(S), lead);
      if (lead) {
        metrics.open(opt.outDir + "/metrics.jsonl", opt.resume ? std::ios::app : std::ios::trunc);
        metrics.precision(17); // every digit of a double: runs compare line by line
        if (!metrics)
          throw std::runtime_error("output directory '" + opt.outDir + "' is not writable");
      }
      po.checkpointInterval = opt.checkpointInterval;
      const std::map<std::string, std::string> meta = checkpointMeta(graph, opt);
      po.onCheckpoint = [&, meta](int64_t step, int stage,
                                  const std::map<std::string, HostTensor> &states) {
        saveRankCheckpoint(opt.outDir, stage, step, opt.seed, states, opt.precision, meta);
      };
      po.onCheckpointKept = [&](int64_t step, int stage) {
        removeRankCheckpointsBefore(opt.outDir, stage, step);
      };
      po.onModel = [&](int64_t, const std::map<std::string, HostTensor> &params) {
        saveModelSafetensors(opt.outDir + "/model.safetensors", graph, params);
      };
    } else if (opt.resume) {
      throw std::runtime_error("--resume needs --out");
    }
    if (!opt.initFrom.empty() && !po.resumeStates.empty()) {
      if (lead && !opt.quiet)
        std::printf("%s\n",
                    initFromIgnoredLine(opt.initFrom, files + std::to_string(po.startStep) +
                                                          ".bin")
                        .c_str());
    } else if (!opt.initFrom.empty()) {
      po.initParams = loadInitParameters(opt.initFrom, graph);
      if (lead && !opt.quiet)
        std::printf("initialised %zu parameters from %s\n", po.initParams.size(),
                    opt.initFrom.c_str());
    }
    PipelineResult r = comm ? runPipelineRank(graph, data, po, *comm) : runPipeline(graph, data, po);
    if (!lead)
      return 0;
    for (double l : r.losses)
      if (!std::isfinite(l))
        throw std::runtime_error("the loss became " + std::to_string(l) +
                                 "; no checkpoint written (the last good one is kept)");
    std::map<std::string, HostTensor> params;
    for (const StateDecl &d : graph.states)
      if (d.isParam)
        params.emplace(d.name, r.states.at(d.name));
    if (!opt.outDir.empty())
      saveModelSafetensors(opt.outDir + "/model.safetensors", graph, params);
    if (r.stopped) {
      std::printf("interrupted at step %lld", (long long)r.lastStep);
      if (!opt.outDir.empty())
        std::printf("; checkpoint written to %s%lld.bin (continue with --resume)", files.c_str(),
                    (long long)r.lastStep);
      std::printf("\n");
      return 130;
    }
    std::printf("%s", formatStageReport(r.stages).c_str());
    int64_t ran = opt.steps - po.startStep;
    std::printf("done: %lld steps in %.1f s (%s, %zu stages%s, %lld micro-batches), %.0f tok/s; "
                "train loss %.4f -> %.4f\n",
                (long long)ran, r.seconds, twoBW ? "PipeDream-2BW" : "flush", r.stages.size(),
                comm ? (" on " + std::to_string(comm->size()) + " processes").c_str() : "",
                (long long)opt.microBatches,
                ran * opt.microBatches * data.tokensPerBatch() / r.seconds,
                r.losses.empty() ? 0.0 : r.losses.front(), r.losses.empty() ? 0.0 : r.losses.back());
    if (!opt.outDir.empty())
      std::printf("wrote %s/{metrics.jsonl,checkpoint-rank*-step%lld.bin,model.safetensors}\n",
                  opt.outDir.c_str(), (long long)opt.steps);
    std::fflush(stdout);
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

} // namespace stretto
