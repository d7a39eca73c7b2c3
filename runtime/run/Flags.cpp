//===- Flags.cpp - the flag table and the parsers it drives --------------===//
//
// stretto/Runtime/Flags.h. A row per flag; takeRunFlags (RunSettings.h) and
// takeLaunchFlags (Launcher.h) walk the same arguments with the same rows,
// each taking the flags it reads.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/Flags.h"
#include "stretto/Runtime/CostModel.h"
#include "stretto/Runtime/Launcher.h"
#include "stretto/Runtime/RunSettings.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

using namespace stretto;

//===--- values ----------------------------------------------------------===//

int64_t FlagArg::inRange(int64_t lo, int64_t hi) const {
  char *end = nullptr;
  errno = 0;
  long long n = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end || errno == ERANGE)
    throw std::runtime_error(name + " expects an integer, got '" + value + "'");
  if (n < lo || n > hi)
    throw std::runtime_error(name + " must be " +
                             (hi == INT64_MAX
                                  ? "at least " + std::to_string(lo)
                                  : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]") +
                             ", got " + std::to_string(n));
  return n;
}

int64_t FlagArg::atLeast(int64_t minimum) const { return inRange(minimum, INT64_MAX); }

std::string FlagArg::oneOf(std::initializer_list<const char *> allowed) const {
  std::string list;
  size_t k = 0;
  for (const char *x : allowed) {
    if (value == x)
      return value;
    list += std::string(k == 0 ? "" : k + 1 == allowed.size() ? " or " : ", ") + x;
    ++k;
  }
  throw std::runtime_error(name + " must be " + list + ", got '" + value + "'");
}

//===--- the table -------------------------------------------------------===//

namespace {

using D = FlagSpec::Destination;
using A = const FlagArg &;

void killReplica(RunFlags &f, A a) {
  int replica = -1;
  long long round = 0;
  char tail;
  if (std::sscanf(a.value.c_str(), "%d@%lld%c", &replica, &round, &tail) != 2 || replica < 0 ||
      round < 1)
    throw std::runtime_error("--kill-replica " + a.value + ": expected R@K with R >= 0 and K >= 1");
  f.kills.emplace_back(replica, round - 1);
}

void deviceModel(RunFlags &f, A a) {
  std::string known;
  if (!findDeviceModel(a.value, &known))
    throw std::runtime_error("--device-model must be one of " + known + ", got '" + a.value + "'");
  f.deviceModel = a.value;
}

const std::vector<FlagSpec> kFlags = {
    // Run flags.
    {"--steps", "N", D::Compile, "train.steps",
     "training steps (stretto-train: overrides train.steps before compiling; stretto-run: the "
     "schedule stays the plan's)",
     [](RunFlags &f, A a) { f.steps = a.atLeast(1); }, nullptr},
    {"--seed", "S", D::Compile, "train.seed", "seed for initialisation and data order",
     [](RunFlags &f, A a) { f.seed = a.atLeast(0); }, nullptr},
    {"--log-interval", "N", D::Compile, "train.log_interval", "steps between progress lines",
     [](RunFlags &f, A a) { f.logInterval = a.atLeast(1); }, nullptr},
    {"--out", "DIR", D::Ranks, nullptr, "metrics, loss plot, checkpoints, model.safetensors",
     [](RunFlags &f, A a) { f.outDir = a.value; }, nullptr},
    {"--resume", nullptr, D::Ranks, nullptr,
     "continue from the checkpoint in DIR (checkpoint.bin, or each rank's newest "
     "checkpoint-rank<r>-step<N>.bin)",
     [](RunFlags &f, A) { f.resume = true; }, nullptr},
    {"--force-resume", nullptr, D::Ranks, nullptr,
     "--resume even from another seed's, model's or micro-batch count's checkpoint",
     [](RunFlags &f, A) { f.resume = f.forceResume = true; }, nullptr},
    {"--init-from", "FILE", D::Ranks, nullptr,
     "start from a safetensors file's parameters (with --resume the checkpoint wins)",
     [](RunFlags &f, A a) { f.initFrom = a.value; }, nullptr},
    {"--device", "cpu|cuda|auto", D::Ranks, nullptr,
     "cuda: the compiled runtime on CUDA device 0, or an error naming what is missing; auto: the "
     "GPU when usable, else the CPU (said on stderr)",
     [](RunFlags &f, A a) {
       f.device = a.oneOf({"cpu", "cuda", "auto"});
     },
     nullptr},
    {"--precision", "f32|tf32|bf16|f64", D::Both, nullptr,
     "bf16: stretto-train compiles the step with bf16 storage (activations, their gradients, "
     "GEMM operands; f32 master weights), stretto-run of an f32 plan rounds GEMM operands; tf32: "
     "f32 GEMMs on the GPU's TF32 tensor cores (CUDA only); f64: the reference executor",
     [](RunFlags &f, A a) {
       f.precision = a.oneOf({"f32", "tf32", "bf16", "f64"});
     },
     nullptr},
    {"--executor", "compiled|reference", D::Compile, nullptr,
     "fused kernels over a planned arena, or plain loops",
     [](RunFlags &f, A a) {
       f.executor = a.oneOf({"compiled", "reference"});
       f.executorGiven = true;
     },
     nullptr},
    {"--profile", nullptr, D::Ranks, nullptr,
     "where the compiled runtime spent its time, at the end",
     [](RunFlags &f, A) { f.profile = true; }, nullptr},
    {"--device-model", "NAME", D::Both, nullptr,
     "predict a step's time on that GPU (h200, h100) from the plan, a roofline estimate that "
     "needs no GPU, and exit; with --profile, also the costliest nodes",
     deviceModel, nullptr},
    {"--quiet", nullptr, D::Both, nullptr, "only errors and the final summary",
     [](RunFlags &f, A) { f.quiet = true; }, nullptr},
    {"--kill-replica", "R@K", D::Ranks, nullptr,
     "gossip/DiLoCo fault injection: replica R dies at round K", killReplica, nullptr},
    {"--data", "FILE", D::Compile, "data.path", "(stretto-run) another data file than the plan's",
     [](RunFlags &f, A a) { f.dataPath = a.value; }, nullptr},
    {"--check", "N", D::Compile, nullptr, "(stretto-run) N steps beside the reference executor",
     [](RunFlags &f, A a) { f.check = a.atLeast(1); }, nullptr},
    // Several processes: read by each rank, or by the launcher, or both.
    {"--nproc", "N", D::Launcher, nullptr,
     "start N local processes: one per pipeline stage, or synchronous data parallelism for a "
     "one-stage model",
     nullptr, [](LaunchOptions &o, A a) { o.nproc = int(a.inRange(1, 4096)); }},
    {"--nnodes", "N", D::Launcher, nullptr, "machines in the job, each running a launcher", nullptr,
     [](LaunchOptions &o, A a) { o.nnodes = int(a.inRange(1, 65536)); }},
    {"--node-rank", "K", D::Launcher, nullptr, "this machine's place among them", nullptr,
     [](LaunchOptions &o, A a) { o.nodeRank = int(a.inRange(0, 65535)); }},
    {"--master-addr", "A", D::Launcher, nullptr, "node 0's address (default 127.0.0.1)", nullptr,
     [](LaunchOptions &o, A a) { o.masterAddr = a.value; }},
    {"--master-port", "P", D::Launcher, nullptr, "node 0's rendezvous port", nullptr,
     [](LaunchOptions &o, A a) { o.masterPort = int(a.inRange(1, 65535)); }},
    {"--log-dir", "DIR", D::Launcher, nullptr, "every rank's full output, rank<N>.log", nullptr,
     [](LaunchOptions &o, A a) { o.logDir = a.value; }},
    {"--timeout", "S", D::Ranks, nullptr,
     "(300) bounds the rendezvous and every wait of a multi-process run",
     [](RunFlags &f, A a) { f.timeoutSeconds = a.atLeast(1); },
     [](LaunchOptions &o, A a) {
       o.timeout = std::chrono::milliseconds(1000 * a.inRange(1, 7 * 24 * 3600));
     }},
    {"--iface", "NAME", D::Ranks, nullptr, "the network interface Gloo uses",
     [](RunFlags &f, A a) { f.iface = a.value; }, nullptr},
    {"--rendezvous", "file:DIR", D::Ranks, nullptr, "meet through a shared folder instead of TCP",
     [](RunFlags &f, A a) { f.rendezvous = a.value; }, nullptr},
    {"--on-peer-failure", "stop|continue", D::Ranks, nullptr,
     "default: continue for gossip and DiLoCo replicas, which drop a dead peer and finish; stop "
     "for pipeline stages and data-parallel ranks, where every rank is needed",
     [](RunFlags &f, A a) {
       f.onPeerFailure = a.oneOf({"stop", "continue"});
     },
     [](LaunchOptions &o, A a) {
       o.continueOnFailure = a.oneOf({"stop", "continue"}) == "continue";
       o.onPeerFailureGiven = true;
     }},
    // stretto-train's own (llvm::cl options built from these rows).
    {"--dump", "DIR", D::Compile, nullptr,
     "Write the IR after every pass, the lowered graph, the kernel sources, PTX/cubin and the "
     "buffer plan here",
     nullptr, nullptr, ""},
    {"--save-plan", "FILE", D::Compile, nullptr,
     "Compile, write the trainer plan (lowered step, kernel sources, settings) to this file for "
     "stretto-run, and stop",
     nullptr, nullptr, ""},
    {"--cuda-arch", "ARCH", D::Compile, nullptr,
     "GPU architecture of the CUDA kernels --dump compiles with NVRTC (PTX, cubin, ptxas report)",
     nullptr, nullptr, "sm_90"},
};

/// `text` wrapped to `width` columns, each line after the first indented
/// by `indent`.
std::string wrap(const std::string &text, size_t indent, size_t width) {
  std::string out, line;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t sp = text.find(' ', pos);
    std::string word = text.substr(pos, sp == std::string::npos ? std::string::npos : sp - pos);
    pos = sp == std::string::npos ? text.size() : sp + 1;
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

std::string helpLine(const FlagSpec &f) {
  std::string head = std::string("  ") + f.name + (f.value ? std::string(" ") + f.value : "");
  constexpr size_t kColumn = 24;
  head += head.size() + 1 < kColumn ? std::string(kColumn - head.size(), ' ')
                                    : "\n" + std::string(kColumn, ' ');
  return head + wrap(f.help, kColumn, 92) + "\n";
}

} // namespace

const std::vector<FlagSpec> &stretto::flagTable() { return kFlags; }

const FlagSpec *stretto::findFlag(const std::string &name) {
  for (const FlagSpec &f : kFlags)
    if (name == f.name)
      return &f;
  return nullptr;
}

std::vector<const FlagSpec *> stretto::compileFlags() {
  std::vector<const FlagSpec *> out;
  for (const FlagSpec &f : kFlags)
    if (f.compileDefault)
      out.push_back(&f);
  return out;
}

std::string stretto::runFlagsHelp() {
  // The rows from --nproc on are the several-processes group.
  std::string run = "Run flags (stretto-train and stretto-run):\n", procs;
  bool inProcs = false;
  for (const FlagSpec &f : kFlags) {
    inProcs |= f.goesTo == D::Launcher;
    if (!f.compileDefault)
      (inProcs ? procs : run) += helpLine(f);
  }
  return run + "Several processes (the launcher's flags, then each rank's):\n" + procs +
         "More in the guide: docs/guide/training.md (steps, resume, --init-from),\n"
         "  docs/guide/devices.md (--device, --precision, --executor, --check, plan files),\n"
         "  docs/guide/distributed.md (several processes and machines, faults).\n";
}

//===--- the parsers -----------------------------------------------------===//

namespace {

/// Walks `args`, reading each flag whose row `reads` says this side reads;
/// returns the arguments it leaves, in order. A flag both sides read stays
/// in the rest as --name=value (`keepShared`).
template <class Reads>
std::vector<std::string> takeFlags(const std::vector<std::string> &args, Reads reads,
                                   bool keepShared) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], inlineValue;
    bool hasInline = false;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      inlineValue = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
      hasInline = true;
    }
    // Not this side's flag, or a switch given a value ("--resume=1"): the
    // caller's (which refuses what it does not know either).
    const FlagSpec *spec = findFlag(a);
    if (!spec || !reads(*spec, nullptr) || (!spec->takesValue() && hasInline)) {
      rest.push_back(args[i]);
      continue;
    }
    FlagArg arg{a, ""};
    if (spec->takesValue()) {
      if (!hasInline && i + 1 >= args.size())
        throw std::runtime_error(a + " needs a value");
      arg.value = hasInline ? inlineValue : args[++i];
    }
    reads(*spec, &arg);
    if (keepShared && spec->toRun && spec->toLaunch)
      rest.push_back(a + "=" + arg.value);
  }
  return rest;
}

} // namespace

std::vector<std::string> stretto::takeRunFlags(const std::vector<std::string> &args, RunFlags &f) {
  std::vector<std::string> rest = takeFlags(
      args,
      [&](const FlagSpec &s, const FlagArg *a) {
        if (a)
          s.toRun(f, *a);
        return s.toRun != nullptr;
      },
      false);
  if (f.executor == "reference" && f.precision == "tf32")
    throw std::runtime_error("--precision=" + f.precision +
                             " is a mode of the compiled runtime; the reference executor "
                             "computes in f32 or f64");
  return rest;
}

std::vector<std::string> stretto::takeLaunchFlags(const std::vector<std::string> &args,
                                                  LaunchOptions &o) {
  std::vector<std::string> rest = takeFlags(
      args,
      [&](const FlagSpec &s, const FlagArg *a) {
        if (a)
          s.toLaunch(o, *a);
        return s.toLaunch != nullptr;
      },
      true);
  if (o.nodeRank >= o.nnodes)
    throw std::invalid_argument("--node-rank " + std::to_string(o.nodeRank) +
                                " is outside --nnodes " + std::to_string(o.nnodes));
  return rest;
}
