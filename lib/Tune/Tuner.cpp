//===- Tuner.cpp - stretto-tune: profile, search, measure, pick ----------===//
//
// The flow of stretto/Tune/Tuner.h: flags checked before anything runs, a
// profile per micro-batch count (recorded, cached or measured), the search
// and the candidate table, the measured runs (TuneRuns.cpp) and the winner.
//
//===----------------------------------------------------------------------===//
#include "TunerInternals.h"

#include "stretto/Frontend/Load.h"
#include "stretto/Transforms/Passes.h"
#include "stretto/Transforms/Pipelines.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sys/resource.h>
#include <thread>
#include <tuple>
#include <unistd.h>

using mlir::MLIRContext;
using namespace stretto;
using namespace stretto::tune;
using namespace stretto::tune::internal;

int internal::fail(const std::string &msg) {
  std::fflush(stdout); // the table and notes first, then the error
  llvm::errs() << "stretto-tune: error: " << msg << "\n";
  return 1;
}

std::string internal::ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", s * 1e3);
  return b;
}

std::string internal::joinUnits(const std::vector<std::string> &v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? " | " : "") + v[i];
  return s;
}

std::string internal::unitsOverride(const std::vector<std::string> &stageUnits) {
  std::string s = "train.stage_units=[";
  for (size_t i = 0; i < stageUnits.size(); ++i)
    s += (i ? ",\"" : "\"") + stageUnits[i] + "\"";
  return s + "]";
}

std::vector<std::string> internal::stageUnitsOf(const std::vector<std::string> &units,
                                              const std::vector<int> &bounds) {
  std::vector<std::string> out;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const std::string &a = units[bounds[s]], &b = units[bounds[s + 1] - 1];
    out.push_back(a == b ? a : a + ".." + b);
  }
  return out;
}

std::pair<double, double> tune::pairedSpeedup(const Measured &x, const Measured &even) {
  std::vector<double> q;
  for (size_t k = 0; k < x.runs.size() && k < even.runs.size(); ++k)
    if (x.runs[k] > 0)
      q.push_back(even.runs[k] / x.runs[k]);
  if (q.empty())
    return {0, 0};
  std::sort(q.begin(), q.end());
  double med = q[q.size() / 2];
  return {med, (q.back() - q.front()) / 2 / med};
}

std::string tune::tuneCacheDirectory() {
  const char *env = std::getenv("STRETTO_CACHE_DIR");
  const char *home = std::getenv("HOME");
  return env ? std::string(env) + "/tune"
             : std::string(home ? home : "/tmp") + "/.cache/stretto/tune";
}

namespace {

/// "cpu: <model name> (<isa>)" from /proc/cpuinfo.
std::string hostDevice() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model = "unknown CPU", flags;
  while (std::getline(f, line)) {
    auto value = [&] { return line.substr(line.find(':') + 2); };
    if (line.rfind("model name", 0) == 0 && model == "unknown CPU")
      model = value();
    else if (line.rfind("flags", 0) == 0 && flags.empty())
      flags = " " + value() + " ";
  }
  std::string isa;
  for (const char *f : {"avx512f", "avx2", "fma", "avx", "sse4_2"})
    if (flags.find(std::string(" ") + f + " ") != std::string::npos)
      isa += (isa.empty() ? "" : ",") + std::string(f);
#if defined(__aarch64__)
  isa = "aarch64";
#endif
  return "cpu: " + model + " (" + (isa.empty() ? "x86-64" : isa) + ")";
}

/// Bytes with an optional binary suffix: 512MiB, 2GiB, 1.5e9.
bool parseBytes(const std::string &s, double &out) {
  char *end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end ? std::string(end) : "";
  double mult = unit.empty() || unit == "B" ? 1
                : unit == "KiB"             ? 1024.0
                : unit == "MiB"             ? 1024.0 * 1024
                : unit == "GiB"             ? 1024.0 * 1024 * 1024
                : unit == "TiB"             ? 1024.0 * 1024 * 1024 * 1024
                                            : -1;
  if (end == s.c_str() || mult < 0 || !(v > 0) || std::isinf(v))
    return false;
  out = v * mult;
  return true;
}

/// CPU seconds every process has run (user, nice, system, irq, softirq).
double machineBusySeconds() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  long long v[7] = {0, 0, 0, 0, 0, 0, 0};
  f >> cpu >> v[0] >> v[1] >> v[2] >> v[3] >> v[4] >> v[5] >> v[6];
  return double(v[0] + v[1] + v[2] + v[5] + v[6]) / double(sysconf(_SC_CLK_TCK));
}

/// CPU seconds this process (all its threads) and its waited-for children used.
double ownCpuSeconds() {
  struct rusage self, kids;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  auto sec = [](const timeval &t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  return sec(self.ru_utime) + sec(self.ru_stime) + sec(kids.ru_utime) + sec(kids.ru_stime);
}

/// One tuning: the options, the model as configured, and what was found.
class Tuning {
public:
  Tuning(MLIRContext &ctx, const TuneOptions &o) : ctx(ctx), o(o) {}
  bool checkFlags();
  bool loadConfig();
  bool search();
  bool measure();
  TuneResult finish();

private:
  std::optional<Profile> getProfile(int64_t mb);
  std::optional<Profile> recordedProfile();
  std::optional<Profile> cachedOrMeasured(int64_t mb, std::map<std::string, std::string> key);
  void printProfile(const Profile &profile, int64_t mb);
  void searchStages(const Profile &profile, int64_t mb, int S);

  MLIRContext &ctx;
  const TuneOptions &o;
  unsigned cores = 1;
  int maxMeasured = 1, fixedS = 0;
  double memLimit = 0;
  std::vector<std::string> units;
  std::string fingerprint;
  bool efMemory = false;
  std::vector<int64_t> mbs;
  TuneResult r;
};

bool Tuning::checkFlags() {
  cores = std::max(1u, std::thread::hardware_concurrency());
  maxMeasured = std::max(1, int(cores) / std::max(1, o.threadsPerStage));
  r.autoStages = o.stages == "auto";
  r.threadsPerStage = o.threadsPerStage;
  r.configPath = o.configPath;
  if (!r.autoStages) {
    char *end = nullptr;
    long v = std::strtol(o.stages.c_str(), &end, 10);
    if (o.stages.empty() || *end || v < 1 || v > 64)
      return !fail("--stages must be a stage count from 1 to 64 or 'auto', got '" + o.stages +
                   "'");
    fixedS = int(v);
  }
  if (o.top < 1 || o.measureSteps < 3 || o.repeats < 1 || o.profileSteps < 1 ||
      o.profileRuns < 1 || o.threadsPerStage < 1)
    return !fail("--top, --repeats, --profile-steps, --profile-runs and --threads-per-stage "
                 "must be >= 1 and --measure-steps >= 3");
  if (!(o.linkLatency >= 0) || !(o.linkBandwidth > 0))
    return !fail("--link-latency must be >= 0 and --link-bandwidth > 0");
  if (o.runtime != "threads" && o.runtime != "processes")
    return !fail("--runtime must be 'threads' or 'processes', got '" + o.runtime + "'");
  if (!o.memoryLimit.empty() && !parseBytes(o.memoryLimit, memLimit))
    return !fail("--memory-limit must be a byte count such as 512MiB, 2GiB or 1e9, got '" +
                 o.memoryLimit + "'");
  return true;
}

/// The model as configured: its units, schedule and micro-batches.
bool Tuning::loadConfig() {
  std::optional<LoadedModel> loaded = loadModel(ctx, o.configPath, o.overrides);
  if (!loaded)
    return false;
  units = train::partitionUnits(loaded->model);
  if (units.empty())
    return !fail(o.configPath + ": no parameter has a layer, so there are no partition units");
  fingerprint = modelFingerprint(loaded->model);
  r.microBatches = loaded->model.getTrainerInt("micro_batches", 1);
  r.twoBW = TrainingPipelineOptions::fromTrainer(loaded->model).twoBW;
  efMemory = loaded->model.getTrainerOption("ef_lambda") != nullptr;
  const int U = int(units.size());
  if (!r.autoStages && fixedS > U)
    return !fail("--stages " + std::to_string(fixedS) + ": the model has only " +
                 std::to_string(U) + " partition units (" + joinUnits(units) + ")");
  // One profile per micro-batch count: the micro-batch shape changes.
  mbs = o.microBatches;
  if (mbs.empty())
    mbs.push_back(r.microBatches);
  for (int64_t mb : mbs)
    if (mb < 1)
      return !fail("--micro-batches must list counts >= 1, got " + std::to_string(mb));
  if (!o.profilePath.empty() && (mbs.size() > 1 || mbs[0] != r.microBatches))
    return !fail("--profile holds one micro-batch count (the config's); it does not combine "
                 "with --micro-batches");
  return true;
}

std::optional<Profile> Tuning::recordedProfile() {
  Profile profile;
  try {
    profile = loadProfile(o.profilePath);
  } catch (const std::exception &e) {
    return fail(e.what()), std::nullopt;
  }
  if (profile.key["model"] != fingerprint)
    return fail(o.profilePath + ": recorded for another model (fingerprint " +
                profile.key["model"] + ", this config's is " + fingerprint + ")"),
           std::nullopt;
  std::vector<std::string> names;
  for (const UnitProfile &u : profile.units)
    names.push_back(u.name);
  if (names != units)
    return fail(o.profilePath + ": its units (" + joinUnits(names) + ") are not the model's (" +
                joinUnits(units) + ")"),
           std::nullopt;
  std::printf("profile: %s (recorded on %s, %s thread(s)/stage)\n", o.profilePath.c_str(),
              profile.key["device"].c_str(), profile.key["threads"].c_str());
  return profile;
}

std::optional<Profile> Tuning::cachedOrMeasured(int64_t mb,
                                                std::map<std::string, std::string> key) {
  std::string dir = o.cacheDir.empty() ? tuneCacheDirectory() : o.cacheDir;
  llvm::sys::fs::create_directories(dir);
  // The profiling build's kernels are part of the key (a kernel-cache hit
  // after the first run): another kernel build makes a cached entry stale.
  std::optional<Built> pb = buildProfiling(ctx, o, units, mb);
  if (!pb)
    return std::nullopt;
  key["kernels"] = pb->kernelsKey;
  CacheLookup hit;
  if (!o.noCache)
    hit = lookupProfile(dir, key);
  if (hit.status == CacheLookup::Stale)
    std::printf("profile cache: stale entry (%s); measuring again\n", hit.why.c_str());
  else if (hit.status == CacheLookup::Corrupt)
    std::printf("profile cache: corrupt entry (%s); measuring again\n", hit.why.c_str());
  if (hit.status == CacheLookup::Hit) {
    std::printf("profile: cached (%s)\n", profileCachePath(dir, key).c_str());
    return hit.profile;
  }
  std::printf("profiling %d partition units (%s): %d runs x %d steps, 1 micro-batch each, "
              "%d thread(s) per stage...\n",
              int(units.size()), joinUnits(units).c_str(), o.profileRuns, o.profileSteps,
              o.threadsPerStage);
  std::fflush(stdout);
  std::optional<Profile> p;
  try {
    p = measureProfile(*pb, o, units, key);
  } catch (const std::exception &e) {
    return fail(std::string("the profiling run failed: ") + e.what()), std::nullopt;
  }
  if (!p)
    return std::nullopt;
  try {
    saveProfile(profileCachePath(dir, p->key), *p);
  } catch (const std::exception &e) {
    std::printf("note: %s (the profile is not cached)\n", e.what());
  }
  return p;
}

void Tuning::printProfile(const Profile &profile, int64_t mb) {
  std::printf("\nunit costs per micro-batch (%lld micro-batches per step):\n", (long long)mb);
  std::printf("%-8s %9s %9s %9s %11s %11s %11s %11s\n", "unit", "fwd ms", "bwd ms", "upd ms",
              "weights", "optimizer", "stash/mb", "cut before");
  for (const UnitProfile &u : profile.units)
    std::printf("%-8s %9s %9s %9s %11s %11s %11s %11s\n", u.name.c_str(), ms(u.forward).c_str(),
                ms(u.backward).c_str(), ms(u.update).c_str(), formatBytes(u.paramBytes).c_str(),
                formatBytes(u.optimizerBytes).c_str(), formatBytes(u.stashBytes).c_str(),
                formatBytes(u.cutBytes).c_str());
}

std::optional<Profile> Tuning::getProfile(int64_t mb) {
  std::map<std::string, std::string> key = {{"model", fingerprint},
                                            {"micro_batch", std::to_string(mb)},
                                            {"device", hostDevice()},
                                            {"threads", std::to_string(o.threadsPerStage)},
                                            {"precision", "f32"}};
  std::optional<Profile> profile =
      o.profilePath.empty() ? cachedOrMeasured(mb, key) : recordedProfile();
  if (!profile)
    return std::nullopt;
  if (!o.saveProfilePath.empty()) {
    try {
      saveProfile(o.saveProfilePath, *profile);
    } catch (const std::exception &e) {
      return fail(e.what()), std::nullopt;
    }
  }
  printProfile(*profile, mb);
  return profile;
}

/// The DP's pick, the even split and (when there are few) every partition
/// into S stages, as rows; those over the memory limit as infeasible.
void Tuning::searchStages(const Profile &profile, int64_t mb, int S) {
  const int U = int(units.size());
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  double ram = pages > 0 && pageSize > 0 ? double(pages) * double(pageSize) : 0;
  CostModel cm;
  cm.units = profile.units;
  cm.microBatches = mb;
  cm.schedule = r.twoBW ? Sched::TwoBW : Sched::Flush;
  cm.link = Link{o.linkLatency, o.linkBandwidth};
  cm.efMemory = efMemory;
  double limit = memLimit > 0 ? memLimit : ram / S;
  if (limit > 0)
    cm.memoryLimit = {limit};
  const std::string at = "S=" + std::to_string(S) + " m=" + std::to_string(mb);
  Candidate best = searchPartition(cm, S);
  if (!best.feasible) {
    r.infeasible.push_back(at + ": " + best.why);
    return;
  }
  std::vector<bool> isBlock;
  for (const std::string &u : units)
    isBlock.push_back(u.rfind("block", 0) == 0);
  std::vector<int> evenBounds;
  bool haveEven = true;
  try {
    evenBounds = evenSplit(isBlock, S);
  } catch (const std::exception &) {
    haveEven = false; // more stages than blocks
  }
  std::vector<std::vector<int>> all;
  try {
    all = allPartitions(U, S, 20000);
  } catch (const std::length_error &) {
    all = {best.bounds};
    if (haveEven)
      all.push_back(evenBounds);
  }
  for (const std::vector<int> &bounds : all) {
    TuneRow row;
    row.S = S;
    row.cand = evaluate(cm, bounds);
    if (!row.cand.feasible) {
      r.infeasible.push_back(at + " " + joinUnits(stageUnitsOf(units, bounds)) +
                             (haveEven && bounds == evenBounds ? " (the even split)" : "") +
                             ": " + row.cand.why);
      continue;
    }
    row.m = mb;
    row.sim = simulate(row.cand.stages, mb, r.twoBW ? 8 : 4, cm.schedule);
    row.stageUnits = stageUnitsOf(units, bounds);
    row.dpPick = bounds == best.bounds;
    row.even = haveEven && bounds == evenBounds;
    r.rows.push_back(std::move(row));
  }
}

bool Tuning::search() {
  std::vector<int> counts;
  if (r.autoStages) {
    for (int S = 1; S <= std::min(int(units.size()), 8); ++S)
      counts.push_back(S);
  } else {
    counts.push_back(fixedS);
  }
  for (int64_t mb : mbs) {
    std::optional<Profile> profile = getProfile(mb);
    if (!profile)
      return false;
    r.device = profile->key.count("device") ? profile->key.at("device") : "";
    for (int S : counts)
      searchStages(*profile, mb, S);
  }
  if (r.rows.empty()) {
    for (const std::string &why : r.infeasible)
      std::printf("infeasible: %s\n", why.c_str());
    return !fail("no partition fits the memory limit" +
                 (o.memoryLimit.empty() ? std::string(" (the machine's RAM per stage)")
                                        : " of " + o.memoryLimit));
  }
  // By predicted (simulated) step time.
  std::stable_sort(r.rows.begin(), r.rows.end(), [](const TuneRow &a, const TuneRow &b) {
    return a.sim.stepTime < b.sim.stepTime;
  });
  return true;
}

/// Per stage count this machine can run, the top k and the even split.
bool Tuning::measure() {
  std::vector<size_t> toMeasure;
  if (!o.noMeasure) {
    std::map<int, int> taken;
    for (size_t i = 0; i < r.rows.size(); ++i) {
      const TuneRow &row = r.rows[i];
      if (row.S > maxMeasured)
        continue;
      if (taken[row.S] < o.top || row.even) {
        if (!row.even)
          ++taken[row.S];
        toMeasure.push_back(i);
      }
    }
  }
  if (r.autoStages)
    std::printf("\n--stages auto: this machine has %u core(s) and runs %d thread(s) per stage, "
                "so it can measure only up to %d stage(s) at a time; larger stage counts are "
                "predicted only%s\n",
                cores, o.threadsPerStage, maxMeasured,
                o.noMeasure ? " (--no-measure: nothing is measured)" : "");
  if (toMeasure.empty())
    return true;
  std::printf("\nmeasuring %zu candidate(s): %d runs x %d steps each on the pipeline runtime "
              "(%s, %d kernel thread(s) per stage)...\n",
              toMeasure.size(), o.repeats, o.measureSteps,
              o.runtime == "processes" ? "stretto-train --nproc S, a process per stage"
                                       : "a thread per stage",
              o.threadsPerStage);
  std::fflush(stdout);
  // Other processes' share of the CPU during the measurements: the
  // simulator assumes a core per stage, which a busy machine does not give.
  double busy0 = machineBusySeconds(), own0 = ownCpuSeconds();
  auto wall0 = std::chrono::steady_clock::now();
  if (!measureRows(ctx, o, r.rows, toMeasure))
    return false;
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  double other = std::max(0.0, machineBusySeconds() - busy0 - (ownCpuSeconds() - own0));
  r.otherShare = wall > 0 ? other / (wall * double(cores)) : 0;
  return true;
}

/// The winner: the fastest measured candidate, else the fastest predicted
/// (the simulator sees every stage's update; the DP's flush objective only
/// the first stage's, so the two can differ by an update). Measured times
/// within the run-to-run noise of each other are a tie, which goes to the
/// better prediction -- but only among candidates that themselves beat the
/// even split by more than the noise (pickWinner).
TuneResult Tuning::finish() {
  // The even split at the config's micro-batch count is the baseline (at
  // the first one searched when that is not among them).
  r.baseM = std::count(mbs.begin(), mbs.end(), r.microBatches) ? r.microBatches : mbs.front();
  r.manyM = mbs.size() > 1;
  std::vector<Choice> choices;
  for (const TuneRow &row : r.rows) {
    Choice c;
    c.stages = row.S;
    if (row.measured) {
      c.measured = true;
      c.median = row.measured->median;
      c.noise = row.measured->noise;
    }
    for (size_t e = 0; e < r.rows.size(); ++e) {
      const TuneRow &ev = r.rows[e];
      if (!(ev.even && ev.S == row.S && ev.m == r.baseM))
        continue;
      c.even = int(e);
      if (row.measured && ev.measured)
        std::tie(c.vsEven, c.vsEvenNoise) = pairedSpeedup(*row.measured, *ev.measured);
      break;
    }
    choices.push_back(c);
  }
  r.pick = pickWinner(choices);
  return std::move(r);
}

} // namespace

std::optional<TuneResult> tune::tunePartition(MLIRContext &ctx, const TuneOptions &options) {
  Tuning t(ctx, options);
  if (!t.checkFlags() || !t.loadConfig() || !t.search() || !t.measure())
    return std::nullopt;
  return t.finish();
}
