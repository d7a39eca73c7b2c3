//===- stretto-run.cpp - train from a saved plan, with no MLIR ------------===//
//
//   stretto-run PLAN [run flags]      (stretto-run --help lists them)
//
// PLAN is what `stretto-train MODEL --save-plan PLAN` wrote: the lowered
// training step, the fused kernels' sources and the run's settings. This
// tool links the runtime only (no MLIR, no LLVM): the kernels come from the
// host compiler or NVRTC through their caches, and runPlan trains on the
// compiled runtime (CPU, or CUDA device 0) or the reference executor, in
// this process or as one rank of several.
// --check N trains N steps on the chosen runtime beside the reference
// executor on the same batches and reports how far the losses and the
// states (parameters and optimizer states) drift. Exit status 1 when a
// loss drifts past f32 rounding (1e-4 relative; 2% with bf16 GEMMs) or a
// state tensor past 1e-3 (relative L2; with bf16 GEMMs on a GPU, 1e-2
// against the same bf16 GEMMs on the CPU): a self-test of a device against
// the oracle.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/Flags.h"
#include "stretto/Runtime/Launcher.h"
#include "stretto/Runtime/PlanFile.h"
#include "stretto/Runtime/RunSettings.h"
#include "stretto/Runtime/Startup.h"
#include "stretto/Runtime/StopSignals.h"

#include <iostream>
#include <string>

using namespace stretto;

namespace {

const char *kUsage =
    "usage: stretto-run PLAN [run flags]\n"
    "       stretto-run --nccl-check   (one-rank NCCL self-check on GPU 0)\n"
    "Trains from a plan written by `stretto-train MODEL --save-plan PLAN` (no MLIR here).\n"
    "--nproc N starts N ranks here (one per pipeline stage; a one-stage plan runs\n"
    "synchronous data parallelism); under torchrun-style variables, mpirun or srun\n"
    "each process is one rank. --steps defaults to the plan's; the learning-rate\n"
    "schedule was fixed when the plan was compiled (recompile with train.steps=N).\n"
    "Plan files and --check: docs/guide/devices.md; several processes and machines:\n"
    "docs/guide/distributed.md.\n";

int fail(const std::string &msg) {
  std::cerr << "stretto-run: " << msg << "\n";
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--nccl-check")
    return ncclSelfCheck();
  // --nproc N / --nnodes: this process only launches the ranks.
  LaunchOptions launch;
  RunFlags flags;
  try {
    args = takeLaunchFlags(args, launch);
    if (launch.nproc > 1 || launch.nnodes > 1) {
      launch.command = {selfExecutable()};
      launch.command.insert(launch.command.end(), args.begin(), args.end());
      // The plan (the one argument that is not a run flag) decides what a
      // dead rank does, unless --on-peer-failure says.
      RunFlags ignored;
      for (const std::string &a : takeRunFlags(args, ignored))
        if (!a.empty() && a[0] != '-') {
          applyPeerFailureDefault(launch, a);
          break;
        }
      return launchRanks(launch);
    }
    // A run: one thread takes Ctrl-C and SIGTERM, before any other starts.
    takeStopSignalsOnOneThread();
    args = takeRunFlags(args, flags);
  } catch (const std::exception &e) {
    std::cerr << "stretto-run: " << e.what() << "\n" << kUsage;
    return 2;
  }
  std::string planPath;
  for (const std::string &a : args) {
    if (a == "--help" || a == "-h") {
      std::cout << kUsage << runFlagsHelp();
      return 0;
    }
    if (!planPath.empty() || a.empty() || a[0] == '-') {
      std::cerr << "stretto-run: unknown argument '" << a << "'\n" << kUsage;
      return 2;
    }
    planPath = a;
  }
  if (planPath.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  PlanFile plan;
  RunSettings s;
  PlanKernels kernels;
  std::unique_ptr<DataSource> source;
  try {
    {
      StartupTimer t("plan file");
      plan = loadPlanFile(planPath);
    }
    s = RunSettings::fromMeta(plan.meta);
    s.apply(flags);
    s.tool = "stretto-run";
    s.origin = planPath;
    if (flags.executor == "compiled" && flags.precision == "f64")
      return fail("--precision=f64 runs on the reference executor (--executor=reference)");
    {
      StartupTimer t("host kernels");
      kernels = loadPlanKernels(plan, s);
      if (kernels.count && kernels.functions.empty())
        t.note = "not built: GPU only";
    }
    source = dataSourceFor(plan.graph, s);
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  if (!flags.quiet)
    std::cout << "plan " << planPath << ": model @"
              << (s.modelName.empty() ? "?" : s.modelName) << ", "
              << plan.graph.nodes.size() << " ops per step, " << kernels.count
              << " fused kernels"
              << (kernels.count && kernels.functions.empty()
                      ? " (CUDA only: no host build)"
                      : "")
              << "\n";
  return runPlan(plan.graph, *source, s, kernels);
}
