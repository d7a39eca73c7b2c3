//===- PipelineBench.cpp - flush vs PipeDream-2BW throughput and idle time -===//
//
//   build/bin/stretto-bench-pipeline bench/configs/pipe-bench.toml [steps]
//
// Trains the same partitioned model with the flush (synchronous 1F1B) and
// the 2BW schedule on the pipeline runtime and prints, for each:
//  - measured tokens/s and per-stage idle fraction (threads on this
//    machine: with fewer cores than stages, idle time includes waiting for a
//    core, so these are figures of this machine, not of the schedule);
//  - the schedule's idle fraction with one processor per stage, from a
//    discrete-event model fed with the measured mean forward, backward and
//    update times of each stage (the runtime's exact op order), next to the
//    ideal (S-1)/(m+S-1) for flush and 0 for 2BW in steady state.
// Figures, not assertions: speed is never tested.
//
//===----------------------------------------------------------------------===//
#include "stretto/Compiler/Lowering.h"
#include "stretto/Frontend/Load.h"
#include "stretto/Pipeline.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"

#include <cstdio>
#include <vector>

using namespace stretto;

namespace {

struct Op {
  char kind; // 'F', 'B', 'U'
  int64_t mb;
};

/// The order in which the runtime's worker for stage s runs its work
/// (mirrors runtime/Pipeline.cpp's decision rule).
std::vector<Op> stageOrder(int s, int S, int64_t m, int64_t steps, Schedule sched) {
  std::vector<Op> ops;
  int64_t total = steps * m, fwd = 0, bwd = 0, updates = 0;
  while (bwd < total) {
    bool ready = sched == Schedule::TwoBW ? fwd / m - 1 <= updates : fwd / m <= updates;
    if (fwd < total && fwd - bwd < S - s && ready) {
      ops.push_back({'F', fwd++});
      continue;
    }
    ops.push_back({'B', bwd++});
    if (bwd % m == 0) {
      ops.push_back({'U', bwd / m - 1});
      ++updates;
    }
  }
  return ops;
}

/// Makespan and per-stage idle fraction with one processor per stage.
std::pair<double, std::vector<double>> simulate(const std::vector<StageReport> &rep, int64_t m,
                                                int64_t steps, Schedule sched) {
  int S = static_cast<int>(rep.size());
  int64_t total = steps * m;
  std::vector<std::vector<Op>> order(S);
  for (int s = 0; s < S; ++s)
    order[s] = stageOrder(s, S, m, steps, sched);
  std::vector<std::vector<double>> fDone(S, std::vector<double>(total, -1)),
      bDone(S, std::vector<double>(total, -1));
  std::vector<size_t> next(S, 0);
  std::vector<double> clock(S, 0), busy(S, 0);
  auto cost = [&](int s, char k) {
    const StageReport &r = rep[s];
    if (k == 'F')
      return r.forwardSeconds / std::max<int64_t>(1, r.forwards);
    if (k == 'B')
      return r.backwardSeconds / std::max<int64_t>(1, r.backwards);
    return r.updateSeconds / std::max<int64_t>(1, r.updates);
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < S; ++s) {
      while (next[s] < order[s].size()) {
        Op op = order[s][next[s]];
        double dep = 0;
        if (op.kind == 'F' && s > 0) {
          if (fDone[s - 1][op.mb] < 0)
            break;
          dep = fDone[s - 1][op.mb];
        }
        if (op.kind == 'B' && s < S - 1) {
          if (bDone[s + 1][op.mb] < 0)
            break;
          dep = bDone[s + 1][op.mb];
        }
        double start = std::max(clock[s], dep), c = cost(s, op.kind);
        clock[s] = start + c;
        busy[s] += c;
        if (op.kind == 'F')
          fDone[s][op.mb] = clock[s];
        if (op.kind == 'B')
          bDone[s][op.mb] = clock[s];
        ++next[s];
        progress = true;
      }
    }
  }
  double makespan = *std::max_element(clock.begin(), clock.end());
  std::vector<double> idle(S);
  for (int s = 0; s < S; ++s)
    idle[s] = 1 - busy[s] / makespan;
  return {makespan, idle};
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CONFIG.toml [steps]\n", argv[0]);
    return 2;
  }
  int64_t steps = argc > 2 ? std::atoll(argv[2]) : 8;
  mlir::MLIRContext ctx;
  auto diagnostics = printDiagnostics(ctx);
  std::printf("%-6s | %9s | %9s | %-28s | %s\n", "sched", "tok/s", "vs flush",
              "measured idle per stage", "modelled idle (1 core/stage), mean; ideal");
  double flushTps = 0, flushMakespan = 0;
  for (Schedule sched : {Schedule::Flush, Schedule::TwoBW}) {
    auto loaded = loadModel(ctx, argv[1], {});
    if (!loaded)
      return 1;
    TrainingPipelineOptions po = TrainingPipelineOptions::fromTrainer(loaded->model);
    po.twoBW = sched == Schedule::TwoBW;
    mlir::PassManager pm(&ctx);
    buildTrainingPipeline(pm, po);
    if (mlir::failed(pm.run(*loaded->module)))
      return 1;
    auto graph = lowerToGraph(loaded->model);
    if (mlir::failed(graph))
      return 1;
    int64_t m = loaded->model.getTrainerInt("micro_batches", 1);
    DataConfig dc;
    auto d = loaded->model->getAttrOfType<mlir::DictionaryAttr>("data");
    llvm::SmallString<256> path(llvm::sys::path::parent_path(argv[1]));
    llvm::sys::path::append(path, d.getAs<mlir::StringAttr>("path").getValue());
    dc.path = std::string(path);
    auto data = makeDataSource(*graph, dc, loaded->model->getAttrOfType<mlir::IntegerAttr>("vocab").getInt());
    PipelineOptions o;
    o.steps = steps;
    o.microBatches = m;
    o.schedule = sched;
    PipelineResult r = runPipeline(*graph, *data, o);
    double tps = steps * m * data->tokensPerBatch() / r.seconds;
    if (sched == Schedule::Flush)
      flushTps = tps;
    std::string measured;
    for (const StageReport &st : r.stages) {
      char b[16];
      std::snprintf(b, sizeof b, "%s%.0f%%", measured.empty() ? "" : " ", 100 * st.idleFraction());
      measured += b;
    }
    auto [makespan, idle] = simulate(r.stages, m, steps, sched);
    if (sched == Schedule::Flush)
      flushMakespan = makespan;
    double mean = 0;
    for (double i : idle)
      mean += i / idle.size();
    int S = static_cast<int>(r.stages.size());
    double ideal = sched == Schedule::Flush ? double(S - 1) / double(m + S - 1) : 0.0;
    std::string modelled;
    for (double i : idle) {
      char b[16];
      std::snprintf(b, sizeof b, "%s%.0f%%", modelled.empty() ? "" : " ", 100 * i);
      modelled += b;
    }
    std::string work;
    for (const StageReport &st : r.stages) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%.2f", work.empty() ? "" : " ",
                    st.forwardSeconds + st.backwardSeconds + st.updateSeconds);
      work += b;
    }
    std::printf("%-6s | stage compute s: %s | modelled idle per stage: %s | modelled speed-up "
                "%.2fx\n",
                sched == Schedule::Flush ? "flush" : "2bw", work.c_str(), modelled.c_str(),
                flushMakespan / makespan);
    std::printf("%-6s | %9.0f | %8.2fx | %-28s | %.1f%%; ideal %.1f%% (S=%d, m=%lld, %lld steps)\n",
                sched == Schedule::Flush ? "flush" : "2bw", tps, tps / flushTps, measured.c_str(),
                100 * mean, 100 * ideal, S, (long long)m, (long long)steps);
  }
  return 0;
}
