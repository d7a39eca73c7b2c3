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

#include <algorithm>
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
#include <thread>

using namespace stretto;

//===----------------------------------------------------------------------===//
// Planning
//===----------------------------------------------------------------------===//

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

//===----------------------------------------------------------------------===//
// In-process communicator
//===----------------------------------------------------------------------===//

namespace {

/// Point-to-point messages keyed by (channel, micro-batch); receives block.
class Mailbox {
public:
  void put(int channel, int64_t mb, HostTensor value) {
    {
      std::lock_guard<std::mutex> lock(mu);
      box[{channel, mb}] = std::move(value);
    }
    cv.notify_all();
  }
  HostTensor take(int channel, int64_t mb) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return failed || box.count({channel, mb}); });
    if (failed)
      throw std::runtime_error("another pipeline stage failed");
    auto it = box.find({channel, mb});
    HostTensor v = std::move(it->second);
    box.erase(it);
    return v;
  }
  void fail() {
    {
      std::lock_guard<std::mutex> lock(mu);
      failed = true;
    }
    cv.notify_all();
  }

private:
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int64_t>, HostTensor> box;
  bool failed = false;
};

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

} // namespace

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

PipelineResult stretto::runPipeline(const Graph &graph, DataSource &data,
                                    const PipelineOptions &opt) {
  std::vector<StagePlan> plans = planStages(graph);
  const int S = static_cast<int>(plans.size());
  const int64_t m = opt.microBatches, total = opt.steps * m, first = opt.startStep * m;
  if (opt.startStep < 0 || opt.startStep > opt.steps)
    throw std::runtime_error("resume step " + std::to_string(opt.startStep) + " is outside [0, " +
                             std::to_string(opt.steps) + "]");
  Mailbox mail;
  std::mutex dataMu, errMu;
  std::string error;
  std::vector<std::vector<double>> stageLosses(S);
  PipelineResult result;
  result.stages.resize(S);
  std::vector<std::map<std::string, HostTensor>> finals(S);

  auto worker = [&](int s) {
    const StagePlan &plan = plans[s];
    StageReport report = reportFor(plan);
    auto t0 = std::chrono::steady_clock::now();
    double busy = 0;
    try {
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
      ex.initialize(opt.seed);
      if (!opt.resumeStates.empty()) {
        for (const StateDecl &d : plan.graph.states) {
          auto it = opt.resumeStates.find(d.name);
          if (it == opt.resumeStates.end())
            throw std::runtime_error("the resume state has no '" + d.name + "'");
          ex.setState(d.name, it->second);
        }
        ex.setStepCount(opt.startStep);
      }
      // Versions 2BW reads: "@p.prev" -> "@p" while the update is pending.
      std::map<std::string, std::string> toCurrent;
      for (const StateDecl &d : plan.graph.states)
        if (!d.copyOf.empty())
          toCurrent[d.name] = d.copyOf;
      const std::map<std::string, std::string> none;

      std::map<int64_t, ValueEnv> envs;
      int64_t fwd = first, bwd = first, updates = opt.startStep;
      const int64_t window = S - s; // in flight on this stage (1F1B)
      auto batchInputs = [&](int64_t j) {
        std::lock_guard<std::mutex> lock(dataMu);
        return data.batch(Split::Train, static_cast<uint64_t>(j));
      };
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
          inputs = batchInputs(j);
        for (const Node &n : plan.graph.nodes)
          if (n.kind == OpKind::Input && n.name.rfind("xfer.", 0) == 0) {
            bool isBackward = std::find(plan.backward.begin(), plan.backward.end(),
                                        static_cast<int>(&n - plan.graph.nodes.data())) !=
                              plan.backward.end();
            if (isBackward == backward)
              inputs[n.name] = mail.take(std::stoi(n.name.substr(5)), j);
          }
        StepResult r;
        double &bucket = backward ? report.backwardSeconds : report.forwardSeconds;
        timed(bucket, [&] { r = ex.runNodes(nodes, envs[j], inputs, redirectFor(j)); });
        ++(backward ? report.backwards : report.forwards);
        for (const StagePlan::Send &snd : plan.sends)
          if (snd.backward == backward)
            mail.put(snd.channel, j, ex.envValue(envs[j], snd.node));
        return r;
      };
      while (bwd < total) {
        bool versionReady = opt.schedule == Schedule::TwoBW ? fwd / m - 1 <= updates
                                                             : fwd / m <= updates;
        if (fwd < total && fwd - bwd < window && versionReady) {
          StepResult r = run(plan.forward, fwd, false);
          if (!r.outputs.empty()) {
            std::vector<double> &l = stageLosses[s];
            l.push_back(r.outputs[0]);
            if (opt.onStep && static_cast<int64_t>(l.size()) % m == 0) {
              double sum = 0;
              for (int64_t k = static_cast<int64_t>(l.size()) - m; k < static_cast<int64_t>(l.size()); ++k)
                sum += l[k];
              opt.onStep(opt.startStep + static_cast<int64_t>(l.size()) / m,
                         sum / static_cast<double>(m));
            }
          }
          ++fwd;
          continue;
        }
        StepResult r = run(plan.backward, bwd, true);
        ex.accumulateGrads(r);
        envs.erase(bwd);
        ++bwd;
        if (bwd % m == 0) {
          timed(report.updateSeconds, [&] { ex.update(); });
          ++report.updates;
          ++updates;
        }
      }
      for (const StateDecl &d : plan.graph.states)
        finals[s][d.name] = ex.getState(d.name);
    } catch (const std::exception &e) {
      {
        std::lock_guard<std::mutex> lock(errMu);
        if (error.empty())
          error = "stage " + std::to_string(s) + ": " + e.what();
      }
      mail.fail();
    }
    report.busySeconds = busy;
    report.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.stages[s] = report;
  };

  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int s = 0; s < S; ++s)
    threads.emplace_back(worker, s);
  for (std::thread &t : threads)
    t.join();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!error.empty())
    throw std::runtime_error(error);

  // The loss is the last stage's; a step's loss is the mean of its micro-batches.
  const std::vector<double> &l = stageLosses[S - 1];
  for (int64_t u = 0; u < opt.steps - opt.startStep; ++u) {
    double sum = 0;
    for (int64_t k = 0; k < m; ++k)
      sum += l.at(u * m + k);
    result.losses.push_back(sum / static_cast<double>(m));
  }
  for (auto &f : finals)
    for (auto &[name, t] : f)
      result.states[name] = std::move(t);
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
/// the per-stage allocation and idle report, metrics.jsonl and a checkpoint
/// at the end (resumable); no validation or periodic checkpoints yet.
int runPipelineTraining(const Graph &graph, DataSource &data, const TrainerOptions &opt,
                        bool twoBW) {
  PipelineOptions po;
  po.steps = opt.steps;
  po.microBatches = opt.microBatches;
  po.schedule = twoBW ? Schedule::TwoBW : Schedule::Flush;
  po.executorFactory = executorFactory(opt);
  po.seed = opt.seed;
  auto t0 = std::chrono::steady_clock::now();
  std::ofstream metrics;
  po.onStep = [&](int64_t step, double loss) {
    if (metrics.is_open())
      metrics << "{\"step\": " << step << ", \"loss\": " << loss << "}\n";
    if (opt.quiet || (step % opt.logInterval != 0 && step != opt.steps))
      return;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("step %6lld/%lld | loss %.4f | %8.0f tok/s\n", (long long)step,
                (long long)opt.steps, loss,
                s > 0 ? (step - po.startStep) * opt.microBatches * data.tokensPerBatch() / s : 0.0);
    std::fflush(stdout);
  };
  try {
    if (!opt.outDir.empty()) {
      prepareOutputDirectory(opt.outDir);
      if (std::optional<Checkpoint> c = openRun(graph, opt)) {
        if (c->step >= opt.steps) {
          // Nothing left to do: not an error, and no step counts below zero.
          std::printf("the run in %s already finished: its checkpoint is at step %lld of %lld; "
                      "nothing to train (raise --steps to continue it)\n",
                      opt.outDir.c_str(), (long long)c->step, (long long)opt.steps);
          return 0;
        }
        po.startStep = c->step;
        po.resumeStates = std::move(c->states);
        std::printf("resuming from %s/checkpoint.bin at step %lld\n", opt.outDir.c_str(),
                    (long long)po.startStep);
      }
      metrics.open(opt.outDir + "/metrics.jsonl", opt.resume ? std::ios::app : std::ios::trunc);
      metrics.precision(17); // every digit of a double: runs compare line by line
      if (!metrics)
        throw std::runtime_error("output directory '" + opt.outDir + "' is not writable");
    } else if (opt.resume) {
      throw std::runtime_error("--resume needs --out");
    }
    PipelineResult r = runPipeline(graph, data, po);
    for (double l : r.losses)
      if (!std::isfinite(l))
        throw std::runtime_error("the loss became " + std::to_string(l) +
                                 "; no checkpoint written (the last good one is kept)");
    if (!opt.outDir.empty())
      saveRun(opt.outDir, graph, opt.steps, opt.seed, r.states, opt.precision);
    std::printf("%s", formatStageReport(r.stages).c_str());
    int64_t ran = opt.steps - po.startStep;
    std::printf("done: %lld steps in %.1f s (%s, %zu stages, %lld micro-batches), %.0f tok/s; "
                "train loss %.4f -> %.4f\n",
                (long long)ran, r.seconds, twoBW ? "PipeDream-2BW" : "flush", r.stages.size(),
                (long long)opt.microBatches,
                ran * opt.microBatches * data.tokensPerBatch() / r.seconds,
                r.losses.empty() ? 0.0 : r.losses.front(), r.losses.empty() ? 0.0 : r.losses.back());
    if (!opt.outDir.empty())
      std::printf("wrote %s/{metrics.jsonl,checkpoint.bin,model.safetensors}\n", opt.outDir.c_str());
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

} // namespace stretto
