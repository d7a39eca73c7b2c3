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
#include "stretto/Transforms/Pipelines.h"
#include "stretto/Frontend/Load.h"
#include "stretto/Runtime/Pipeline.h"
#include "stretto/Tune/Partition.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"

#include <cstdio>
#include <vector>

using namespace stretto;

namespace {

/// Makespan and per-stage idle fraction with one processor per stage: the
/// schedule simulator of stretto/Tune/Partition.h (the runtime's order of
/// work on each stage) fed with the measured mean times.
std::pair<double, std::vector<double>> simulate(const std::vector<StageReport> &rep, int64_t m,
                                                int64_t steps, Schedule sched) {
  std::vector<tune::StageEstimate> st;
  for (const StageReport &r : rep) {
    tune::StageEstimate e;
    e.forward = r.forwardSeconds / std::max<int64_t>(1, r.forwards);
    e.backward = r.backwardSeconds / std::max<int64_t>(1, r.backwards);
    e.update = r.updateSeconds / std::max<int64_t>(1, r.updates);
    st.push_back(e);
  }
  tune::SimResult r = tune::simulate(st, m, steps,
                                     sched == Schedule::TwoBW ? tune::Sched::TwoBW : tune::Sched::Flush);
  return {r.makespan, r.idle};
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
