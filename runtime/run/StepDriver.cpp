//===- StepDriver.cpp - one training loop for every run mode --------------===//
//
// driveSteps: opening the run (a new one, --resume, --init-from), the loop
// over steps with its evaluation and checkpoint cadence, the run's files
// (metrics.jsonl, metrics.csv, loss.svg, model.safetensors), progress lines,
// Ctrl-C and the stop at a non-finite loss, and the summary. The modes
// (SingleStage.cpp, Pipeline.cpp, Gossip.cpp) run the steps.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/StepDriver.h"

#include "stretto/Runtime/StopSignals.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

using namespace stretto;

namespace {

using Clock = std::chrono::steady_clock;

std::string fmtDuration(double s) {
  char buf[32];
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(t / 3600), (long long)(t / 60 % 60));
  else
    std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  return buf;
}

std::string exact(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

/// Keeps the lines of a metrics file up to `step` (a resumed run writes the
/// later ones again; they were written before a crash): JSON lines keyed by
/// `"unit": N`, CSV lines starting "N,".
void dropLinesAfter(const std::string &path, const char *unit, int64_t step, bool csv) {
  std::ifstream in(path);
  if (!in)
    return;
  std::string line, kept;
  const std::string key = std::string("{\"") + unit + "\": %lld";
  while (std::getline(in, line)) {
    long long n = 0;
    bool numbered = csv ? std::sscanf(line.c_str(), "%lld,", &n) == 1
                        : std::sscanf(line.c_str(), key.c_str(), &n) == 1;
    if (numbered && n > step)
      continue;
    kept += line + "\n";
  }
  writeFileAtomically(path, kept);
}

/// The lead rank's files and lines.
class RunRecord {
public:
  RunRecord(const StepMode &mode, const TrainerOptions &opt, int64_t start)
      : unit(mode.unit()), opt(opt), lead(mode.lead()), quiet(opt.quiet || !mode.lead()),
        tty(mode.lead() && ::isatty(STDOUT_FILENO)), total(mode.totalSteps()), start(start) {
    if (!lead || opt.outDir.empty())
      return;
    const std::string jsonl = opt.outDir + "/metrics.jsonl", csvPath = opt.outDir + "/metrics.csv";
    if (opt.resume) {
      dropLinesAfter(jsonl, unit, start, false);
      dropLinesAfter(csvPath, unit, start, true);
    }
    auto mode_ = opt.resume ? std::ios::app : std::ios::trunc;
    metrics.open(jsonl, mode_);
    metrics.precision(17); // every digit of a double: runs compare line by line
    bool fresh = !opt.resume || !std::ifstream(csvPath);
    csv.open(csvPath, mode_);
    if (!metrics || !csv)
      throw std::runtime_error("cannot write the metrics files in '" + opt.outDir + "'");
    if (fresh)
      csv << unit << ",loss,val_loss,tokens_per_s,elapsed_s\n";
  }

  void step(int64_t step, const StepReport &r, bool logAnyway) {
    double now = seconds();
    tokensSinceLog += r.tokens;
    tokens += r.tokens;
    if (r.valLoss >= 0) {
      valCurve.emplace_back(step, r.valLoss);
      finalVal = r.valLoss;
    }
    if (!r.knowsLoss)
      return;
    if (losses.empty())
      firstLoss = r.loss;
    losses.push_back(r.loss);
    ends.push_back(now);
    trainCurve.emplace_back(step, r.loss);
    if (metrics.is_open()) {
      metrics << "{\"" << unit << "\": " << step << ", \"loss\": " << exact(r.loss);
      for (const auto &[name, value] : r.fields)
        metrics << ", \"" << name << "\": " << value;
      if (r.valLoss >= 0)
        metrics << ", \"val_loss\": " << exact(r.valLoss);
      // Flushed every line: a killed run keeps every step it printed.
      metrics << ", \"elapsed_s\": " << exact(now) << "}\n" << std::flush;
    }
    if (!(step % opt.logInterval == 0 || step == total || r.valLoss >= 0 || logAnyway))
      return;
    double dt = now - tLog, tps = dt > 0 ? tokensSinceLog / dt : 0;
    double eta = now / static_cast<double>(step - start) * static_cast<double>(total - step);
    if (csv.is_open())
      csv << step << "," << exact(r.loss) << "," << (r.valLoss >= 0 ? exact(r.valLoss) : "")
          << "," << tps << "," << now << "\n" << std::flush;
    tLog = now;
    tokensSinceLog = 0;
    if (quiet)
      return;
    char line[256];
    std::snprintf(line, sizeof line, "%s %6lld/%lld | loss %.4f%s | %8.0f tok/s | elapsed %s | eta %s",
                  unit, (long long)step, (long long)total, r.loss, r.progress.c_str(), tps,
                  fmtDuration(now).c_str(), fmtDuration(eta).c_str());
    std::string s = line;
    if (r.valLoss >= 0) {
      std::snprintf(line, sizeof line, " | val %.4f", r.valLoss);
      s += line;
    }
    // On a terminal the line updates in place; evaluations stay visible.
    if (tty)
      std::cout << "\r\033[K" << s << (r.valLoss >= 0 ? "\n" : "") << std::flush;
    else
      std::cout << s << "\n" << std::flush;
  }

  /// The plot and the end of an in-place progress line.
  void close() {
    if (tty && !quiet)
      std::cout << "\n";
    if (lead && !opt.outDir.empty())
      writeLossPlot(opt.outDir + "/loss.svg", unit, trainCurve, valCurve);
  }

  double seconds() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  const char *unit;
  const TrainerOptions &opt;
  const bool lead, quiet, tty;
  const int64_t total, start;
  std::vector<double> losses, ends; // the loss and end time of each step
  double firstLoss = 0, finalVal = -1, tokens = 0;

private:
  std::ofstream metrics, csv;
  std::vector<std::pair<int64_t, double>> trainCurve, valCurve;
  Clock::time_point t0 = Clock::now();
  double tLog = 0, tokensSinceLog = 0;
};

/// `fn` on every rank, then every rank learns whether all succeeded; the
/// one that failed says why, the others name it as another rank's failure.
template <typename Fn> void onEveryRank(StepMode &mode, const char *what, Fn &&fn) {
  std::string error;
  try {
    fn();
  } catch (const std::exception &e) {
    error = e.what();
  }
  if (!mode.agree(error.empty()))
    throw std::runtime_error(error.empty() ? std::string("another rank could not ") + what +
                                                 " (its log says why)"
                                           : error);
}

/// Opens the run: the output folder, a new run's states or the resumed
/// checkpoint's, the layout record. The steps already done, or -1 when
/// the run had finished.
int64_t beginRun(StepMode &mode, const Graph &graph, const TrainerOptions &opt) {
  const bool quiet = opt.quiet || !mode.lead();
  if (opt.resume && opt.outDir.empty())
    throw std::runtime_error("--resume needs an output directory (--out) holding a checkpoint");
  onEveryRank(mode, "open the output folder", [&] {
    if (opt.outDir.empty())
      return;
    if (mode.lead() || mode.checkpointRank() >= 0)
      prepareOutputDirectory(opt.outDir);
    if (!opt.resume && (mode.lead() || mode.checkpointRank() >= 0))
      refuseExistingCheckpoint(opt.outDir, mode.checkpointRank());
  });
  int64_t start = 0;
  if (opt.resume) {
    ResumePoint at = mode.resume();
    start = at.step;
    if (start >= mode.totalSteps()) {
      // Nothing left to do: not an error, and no step counts below zero.
      if (mode.lead())
        std::cout << "the run in " << opt.outDir << " already finished: its checkpoint is at "
                  << mode.unit() << " " << start << " of " << mode.totalSteps()
                  << "; nothing to train (raise --steps to continue it)\n";
      return -1;
    }
    if (mode.lead()) { // even with --quiet: it says which run this is
      std::cout << "resuming from " << at.from << " at " << mode.unit() << " " << start << "\n";
      if (!opt.initFrom.empty())
        std::cout << initFromIgnoredLine(opt.initFrom, at.from) << "\n";
    }
  } else {
    std::map<std::string, HostTensor> init;
    onEveryRank(mode, "read --init-from", [&] {
      if (!opt.initFrom.empty())
        init = loadInitParameters(opt.initFrom, graph);
    });
    start = mode.start(opt.initFrom.empty() ? nullptr : &init);
    if (!quiet && !opt.initFrom.empty())
      std::cout << "initialised " << init.size() << " parameters from " << opt.initFrom << "\n";
  }
  onEveryRank(mode, "record the run's layout",
              [&] { checkWorld(opt.outDir, opt.resume, mode.layout(), mode.lead()); });
  return start;
}

/// The lines after the last step: the mode's report, "done:", the files.
void printSummary(const StepMode &mode, const RunRecord &rec, int64_t ran, double seconds) {
  std::string report = mode.report();
  if (!report.empty())
    std::cout << report << std::flush;
  std::printf("done: %lld %ss in %s, %.0f tok/s; train loss %.4f -> %.4f", (long long)ran,
              mode.unit(), fmtDuration(seconds).c_str(), seconds > 0 ? rec.tokens / seconds : 0.0,
              rec.firstLoss, rec.losses.empty() ? 0.0 : rec.losses.back());
  if (rec.finalVal >= 0)
    std::printf(", val loss %.4f", rec.finalVal);
  std::printf("%s\n", mode.summaryDetail().c_str());
  if (!rec.opt.outDir.empty()) {
    std::string ckpt = mode.checkpointName(rec.total);
    ckpt = ckpt.substr(ckpt.rfind('/') + 1);
    std::printf("wrote %s/{metrics.jsonl,metrics.csv,loss.svg,%s,model.safetensors}\n",
                rec.opt.outDir.c_str(), ckpt.c_str());
  }
  std::fflush(stdout);
}

} // namespace

int stretto::driveSteps(StepMode &mode, const Graph &graph, const TrainerOptions &opt,
                        TrainSummary *summary, const std::atomic<bool> *stop) {
  std::atomic<bool> own{false};
  std::optional<StopOnSignal> signals;
  if (!stop) { // Ctrl-C, and SIGTERM from a launcher or a scheduler
    signals.emplace(own);
    stop = &own;
  }
  TrainSummary sum;
  int code = 0;
  try {
    const int64_t start = beginRun(mode, graph, opt);
    if (start < 0) {
      if (summary)
        *summary = sum;
      return 0;
    }
    RunRecord rec(mode, opt, start);
    const int64_t total = mode.totalSteps();
    int64_t step = start;
    StepReport r;
    while (step < total && r.end == StepEnd::Continue) {
      ++step;
      StepPlan plan;
      plan.step = step;
      plan.last = step == total;
      plan.evaluate = opt.evalInterval > 0 && (step % opt.evalInterval == 0 || plan.last);
      plan.checkpoint = !opt.outDir.empty() &&
                        ((opt.checkpointInterval > 0 && step % opt.checkpointInterval == 0) ||
                         plan.last);
      plan.stop = stop;
      r = mode.step(plan);
      if (r.end == StepEnd::Failed || r.end == StepEnd::Left)
        break;
      rec.step(step, r, r.end == StepEnd::Stopped);
      // The model file beside every checkpoint (every rank takes part: the
      // parameters may live on several).
      if (r.checkpointed) {
        std::map<std::string, HostTensor> params = mode.parameters();
        if (mode.lead() && !opt.outDir.empty() && !params.empty())
          saveModelSafetensors(opt.outDir + "/model.safetensors", graph, params);
      }
    }
    rec.close();
    sum.steps = r.end == StepEnd::Failed || r.end == StepEnd::Left ? step - 1 : step;
    sum.seconds = rec.seconds();
    sum.losses = rec.losses;
    sum.stepEnds = rec.ends;
    sum.firstLoss = rec.firstLoss;
    sum.finalLoss = rec.losses.empty() ? 0.0 : rec.losses.back();
    sum.finalValLoss = rec.finalVal;
    sum.tokensPerSecond = sum.seconds > 0 ? rec.tokens / sum.seconds : 0;
    if (r.end == StepEnd::Failed) {
      sum.error = std::string(mode.unit()) + " " + std::to_string(step) + ": " + r.failure +
                  "; stopping without checkpointing this state (the last good checkpoint, if "
                  "any, is kept). Try a lower learning rate or grad_clip.";
      if (!opt.errorsToCaller && (mode.lead() || !r.failure.empty()))
        std::cerr << "\nerror: " << sum.error << "\n";
      code = 1;
    } else if (r.end == StepEnd::Stopped) {
      sum.interrupted = true;
      if (mode.lead()) {
        std::cout << "interrupted at " << mode.unit() << " " << step;
        if (!opt.outDir.empty() && r.checkpointed)
          std::cout << "; checkpoint written to " << mode.checkpointName(step)
                    << " (continue with --resume)";
        std::cout << "\n" << std::flush;
      }
      code = 130;
    } else if (mode.lead() && r.end != StepEnd::Left && !opt.silent) { // even with --quiet
      printSummary(mode, rec, step - start, sum.seconds);
    }
  } catch (const std::exception &e) {
    if (opt.onError)
      opt.onError(e.what());
    mode.abort(e.what());
    sum.error = e.what();
    if (!opt.errorsToCaller)
      std::cerr << "error: " << e.what() << "\n";
    code = 1;
  }
  if (summary)
    *summary = sum;
  return code;
}

void stretto::writeLossPlot(const std::string &path, const char *unit,
                            const std::vector<std::pair<int64_t, double>> &train,
                            const std::vector<std::pair<int64_t, double>> &val) {
  if (train.empty())
    return;
  const double W = 720, H = 420, L = 60, R = 20, T = 30, Bm = 45;
  double x0 = train.front().first, x1 = train.back().first;
  double y0 = 1e300, y1 = -1e300;
  for (auto *s : {&train, &val})
    for (auto &[x, y] : *s)
      if (std::isfinite(y))
        y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (x1 <= x0)
    x1 = x0 + 1;
  if (y1 <= y0)
    y1 = y0 + 1;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return T + (y1 - y) / (y1 - y0) * (H - T - Bm); };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  o << "<text x='" << W / 2 << "' y='18' text-anchor='middle' font-size='14'>loss</text>\n";
  for (int i = 0; i <= 4; ++i) {
    double y = y0 + (y1 - y0) * i / 4, yy = py(y);
    o << "<line x1='" << L << "' x2='" << W - R << "' y1='" << yy << "' y2='" << yy
      << "' stroke='#ddd'/><text x='" << L - 6 << "' y='" << yy + 4
      << "' text-anchor='end'>" << std::fixed << std::setprecision(2) << y << "</text>\n";
    double x = x0 + (x1 - x0) * i / 4;
    o << "<text x='" << px(x) << "' y='" << H - Bm + 16 << "' text-anchor='middle'>"
      << std::setprecision(0) << x << "</text>\n";
  }
  o << "<text x='" << W / 2 << "' y='" << H - 8 << "' text-anchor='middle'>" << unit
    << "</text>\n";
  auto line = [&](const std::vector<std::pair<int64_t, double>> &s, const char *color,
                  const char *name, double ly) {
    if (s.empty())
      return;
    o << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5' points='";
    for (auto &[x, y] : s)
      if (std::isfinite(y))
        o << std::setprecision(1) << px(x) << "," << py(y) << " ";
    o << "'/>\n<text x='" << W - R - 110 << "' y='" << ly << "' fill='" << color << "'>" << name
      << "</text>\n";
    if (s.size() <= 50) // sparse series (validation): mark each point
      for (auto &[x, y] : s)
        if (std::isfinite(y))
          o << "<circle cx='" << px(x) << "' cy='" << py(y) << "' r='3' fill='" << color
            << "'/>\n";
  };
  line(train, "#1f77b4", "train", T + 16);
  line(val, "#d62728", "validation", T + 32);
  o << "</svg>\n";
  std::ofstream(path) << o.str();
}
