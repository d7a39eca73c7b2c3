//===- Trainer.cpp - the training loop ------------------------------------===//
#include "stretto/Trainer.h"
#include "stretto/Runtime/Gemm.h"
#include "stretto/PlanExecutor.h"
#include "stretto/RunChecks.h"
#include "stretto/Runtime/Communicator.h"
#include "stretto/Runtime/StopSignals.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <mutex>
#include <optional>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

using namespace stretto;

namespace {

std::atomic<bool> gInterrupted{false};

std::string fmtDuration(double s) {
  char buf[32];
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(t / 3600), (long long)(t / 60 % 60));
  else
    std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  return buf;
}

/// A loss-curve SVG a person can open in a browser: train (every step) and
/// validation (each evaluation) against the step.
void writePlot(const std::string &path, const std::vector<std::pair<int64_t, double>> &train,
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
  o << "<text x='" << W / 2 << "' y='" << H - 8 << "' text-anchor='middle'>step</text>\n";
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

// Creates the output folder and its missing parents; if it cannot, says
// why on stderr (one line) and returns false.
bool isDirWritable(const std::string &dir) {
  try {
    prepareOutputDirectory(dir);
    return true;
  } catch (const std::exception &e) {
    std::cerr << "error: " << e.what() << "\n";
    return false;
  }
}

/// The sum of the losses of parts [firstPart, firstPart + parts) of each of
/// the first `batches` validation batches: a rank's share of an evaluation
/// of whole step-sized batches, so the validation loss does not depend on
/// the micro-batch or rank count either.
double evaluateLossSum(Executor &ex, DataSource &data, int64_t batches, int64_t firstPart,
                       int64_t parts) {
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i)
    for (int64_t p = firstPart; p < firstPart + parts; ++p)
      sum += ex.evaluate(data.batch(Split::Val, static_cast<uint64_t>(i), p)).outputs.at(0);
  return sum;
}

} // namespace

void stretto::prepareOutputDirectory(const std::string &dir) {
  // Every missing folder on the way (`runs/` does not exist in a clone).
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error("cannot create the output directory '" + dir + "': " +
                             ec.message());
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    throw std::runtime_error("cannot use the output directory '" + dir + "': " +
                             std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    throw std::runtime_error("the output directory '" + dir + "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw std::runtime_error("the output directory '" + dir + "' is not writable: " +
                             std::strerror(errno));
}

std::optional<Checkpoint> stretto::openRun(const Graph &graph, const TrainerOptions &options) {
  std::optional<Checkpoint> c = openRun(options.outDir, options.resume, graph);
  if (c) {
    RunCheck check(graph, options);
    check.resumeFrom = &*c;
    check.checkpointPath = options.outDir + "/checkpoint.bin";
    validateRunSettings(check);
    const int64_t ranks = options.dataParallel ? options.dataParallel->size() : 1;
    std::string note = dataOrderNote(*c, check.checkpointPath, options.microBatches * ranks);
    if (!note.empty())
      std::cerr << note << "\n";
  }
  return c;
}

namespace {
/// The checkpoint at `path` holds exactly `expected`'s states and shapes.
void checkStatesOf(const std::string &path, const Checkpoint &c,
                   const std::vector<StateDecl> &expected) {
  for (const StateDecl &s : expected) {
    auto it = c.states.find(s.name);
    if (it == c.states.end())
      throw std::runtime_error(path + ": checkpoint has no state '" + s.name +
                               "' (was it written by another model?)");
    if (it->second.shape != s.shape)
      throw std::runtime_error(path + ": state '" + s.name + "' has shape " +
                               shapeToString(it->second.shape) + " in the checkpoint but " +
                               shapeToString(s.shape) + " in the model");
  }
  if (c.states.size() != expected.size())
    throw std::runtime_error(path + ": checkpoint holds " + std::to_string(c.states.size()) +
                             " states, the model " + std::to_string(expected.size()));
}

/// `states` as a checkpoint; refuses inf/NaN.
Checkpoint checkpointOf(int64_t step, uint64_t seed,
                        const std::map<std::string, HostTensor> &states,
                        const std::map<std::string, std::string> &meta) {
  Checkpoint c;
  c.step = step;
  c.seed = seed;
  c.meta = meta;
  for (const auto &[name, t] : states) {
    // A finite loss can still leave inf/NaN in the state (an overflowing
    // update): such a state must not replace the last good checkpoint.
    for (double v : t.data)
      if (!std::isfinite(v))
        throw std::runtime_error("step " + std::to_string(step) + ": state '" + name +
                                 "' holds " + std::to_string(v) +
                                 "; not checkpointing it (the last good checkpoint is kept)");
    c.states.emplace(name, t);
  }
  return c;
}
} // namespace

void stretto::saveRankCheckpoint(const std::string &outDir, int rank, int64_t step,
                                 uint64_t seed, const std::map<std::string, HostTensor> &states,
                                 Precision precision,
                                 const std::map<std::string, std::string> &meta) {
  saveCheckpoint(rankCheckpointPath(outDir, rank, step), checkpointOf(step, seed, states, meta),
                 precision);
}

std::optional<Checkpoint> stretto::openRun(const std::string &outDir, bool resume,
                                           const Graph &graph) {
  if (outDir.empty()) {
    if (resume)
      throw std::runtime_error("--resume needs an output directory holding checkpoint.bin");
    return std::nullopt;
  }
  std::string ckptPath = outDir + "/checkpoint.bin";
  if (!resume) {
    refuseExistingCheckpoint(outDir);
    return std::nullopt;
  }
  Checkpoint c = loadCheckpoint(ckptPath);
  checkStatesOf(ckptPath, c, graph.states);
  return c;
}

Checkpoint stretto::loadRankCheckpoint(const std::string &outDir, int rank, int64_t step,
                                       const std::vector<StateDecl> &expected) {
  const std::string path = rankCheckpointPath(outDir, rank, step);
  Checkpoint c = loadCheckpoint(path);
  if (c.step != step)
    throw std::runtime_error(path + ": the file holds step " + std::to_string(c.step) +
                             " (renamed?)");
  checkStatesOf(path, c, expected);
  return c;
}

void stretto::checkWorld(const std::string &outDir, bool resume, const std::string &layout,
                         bool write) {
  if (outDir.empty())
    return;
  const std::string path = outDir + "/world.txt";
  if (resume) {
    std::ifstream f(path);
    std::string was;
    std::getline(f, was);
    if (f && !was.empty() && was != layout)
      throw std::runtime_error(path + ": the checkpoint was written by a run of " + was +
                               "; this run has " + layout +
                               " (resume with the same processes and placement)");
  }
  if (write)
    writeFileAtomically(path, layout + "\n");
}

void stretto::saveRun(const std::string &outDir, const Graph &graph, int64_t step,
                      uint64_t seed, const std::map<std::string, HostTensor> &states,
                      Precision precision, const std::map<std::string, std::string> &meta) {
  std::map<std::string, HostTensor> own, params;
  for (const StateDecl &s : graph.states) {
    const HostTensor &t = states.at(s.name);
    own.emplace(s.name, t);
    if (s.isParam)
      params.emplace(s.name, t);
  }
  saveCheckpoint(outDir + "/checkpoint.bin", checkpointOf(step, seed, own, meta), precision);
  saveModelSafetensors(outDir + "/model.safetensors", graph, params);
}

void stretto::saveModelSafetensors(const std::string &path, const Graph &graph,
                                   const std::map<std::string, HostTensor> &params) {
  std::map<std::string, HostTensor> named = params;
  for (const StateDecl &s : graph.states)
    if (auto it = params.find(s.name); s.isParam && it != params.end())
      for (const std::string &alias : s.aliases)
        named.emplace(alias, it->second);
  saveSafetensors(path, named);
}

std::map<std::string, HostTensor> stretto::loadInitParameters(const std::string &path,
                                                              const Graph &graph) {
  std::map<std::string, HostTensor> file = loadSafetensors(path);
  std::map<std::string, HostTensor> params;
  int64_t n = 0;
  for (const StateDecl &s : graph.states) {
    if (!s.isParam)
      continue;
    ++n;
    auto it = file.find(s.name);
    if (it == file.end())
      throw std::runtime_error(path + ": no tensor '" + s.name + "' (the model's parameter " +
                               shapeToString(s.shape) + ")");
    if (it->second.shape != s.shape)
      throw std::runtime_error(path + ": tensor '" + s.name + "' has shape " +
                               shapeToString(it->second.shape) + " in the file but " +
                               shapeToString(s.shape) + " in the model");
    const HostTensor &value = params.emplace(s.name, std::move(it->second)).first->second;
    file.erase(it);
    for (const std::string &alias : s.aliases) {
      auto a = file.find(alias);
      if (a == file.end())
        continue;
      if (a->second.shape != value.shape || a->second.data != value.data)
        throw std::runtime_error(path + ": tensor '" + alias + "' is tied to '" + s.name +
                                 "' (one parameter) but holds other values");
      file.erase(a);
    }
  }
  if (!file.empty())
    throw std::runtime_error(path + ": tensor '" + file.begin()->first +
                             "' is not a parameter of the model (it has " + std::to_string(n) +
                             "; " + std::to_string(file.size()) + " tensors of the file are not)");
  return params;
}

int64_t stretto::applyInitParameters(Executor &ex, const Graph &graph,
                                     const std::map<std::string, HostTensor> &params) {
  int64_t set = 0;
  for (const StateDecl &s : graph.states) {
    const std::string &of = s.isParam ? s.name : s.copyOf;
    auto it = of.empty() ? params.end() : params.find(of);
    if (it == params.end())
      continue;
    ex.setState(s.name, it->second);
    set += s.isParam;
  }
  return set;
}

std::string stretto::initFromIgnoredLine(const std::string &initFrom,
                                         const std::string &checkpoint) {
  return "--init-from " + initFrom + " ignored: resuming from " + checkpoint +
         " (the checkpoint's parameters win)";
}

namespace {
/// openRun for one rank of `dp` (may be null): rank 0 opens the output
/// folder and reads the checkpoint, then sends the others its states, so
/// ranks on machines without a shared file system need no copy of it.
std::optional<Checkpoint> openDataParallelRun(const Graph &graph, const TrainerOptions &opt,
                                              Communicator *dp) {
  if (!dp || dp->size() == 1)
    return openRun(graph, opt);
  const bool root = dp->rank() == 0;
  std::optional<Checkpoint> c;
  double header[2] = {0, 0}; // 1 resume, 0 a new run, -1 rank 0 failed; the step
  std::string error;
  if (root) {
    try {
      c = openRun(graph, opt);
      if (c) {
        header[0] = 1;
        header[1] = static_cast<double>(c->step);
      }
    } catch (const std::exception &e) {
      error = e.what();
      header[0] = -1;
    }
  }
  dp->broadcast(header, sizeof header, 0);
  if (header[0] == -1)
    throw std::runtime_error(root ? error
                                  : "rank 0 could not open the run's checkpoint (its log says "
                                    "why)");
  if (header[0] == 0)
    return c;
  if (!root) {
    c.emplace();
    c->step = static_cast<int64_t>(header[1]);
    c->seed = opt.seed;
  }
  for (const StateDecl &s : graph.states) {
    std::vector<double> v = root ? c->states.at(s.name).data
                                 : std::vector<double>(static_cast<size_t>(numElements(s.shape)));
    dp->broadcast(v.data(), v.size() * sizeof(double), 0);
    if (!root)
      c->states[s.name] = HostTensor{s.shape, std::move(v)};
  }
  return c;
}
} // namespace

int stretto::runTraining(const Graph &graph, DataSource &data, const TrainerOptions &opt,
                   TrainSummary *summary) {
  Communicator *dp = opt.dataParallel;
  const int64_t ranks = dp ? dp->size() : 1;
  const int64_t me = dp ? dp->rank() : 0;
  const bool lead = me == 0; // evaluates, prints, writes the output folder
  const bool quiet = opt.quiet || !lead;
  const bool tty = lead && ::isatty(STDOUT_FILENO);
  std::string ckptPath, metricsPath, csvPath;
  if (!opt.outDir.empty()) {
    if (lead && !isDirWritable(opt.outDir)) {
      return 1;
    }
    ckptPath = opt.outDir + "/checkpoint.bin";
    metricsPath = opt.outDir + "/metrics.jsonl";
    csvPath = opt.outDir + "/metrics.csv";
  }

  try {
    std::unique_ptr<Executor> exPtr = executorFactory(opt)(graph);
    auto *plan = dynamic_cast<PlanExecutor *>(exPtr.get());
    if (plan) {
      plan->setProfiling(opt.profile);
      if (!quiet && plan->deviceName() != "cpu")
        std::cout << "device: " << plan->deviceName() << " (CUDA, "
                  << (opt.gemmPrecision == GemmPrecision::BF16 ? "bf16" : "f32")
                  << " GEMMs through cuBLASLt)\n";
      else if (!quiet) {
        // The library first: when STRETTO_GEMM names one that does not
        // load, its error must not follow a half-printed line.
        const std::string &library = gemmLibrary();
        std::cout << "GEMMs: " << library << ", " << omp_get_max_threads()
                  << " threads (STRETTO_GEMM=openblas|onednn|mkl chooses)\n";
      }
      if (!quiet) {
        const PlanStats &ps = plan->stats();
        std::printf("buffer plan: %.1f MB peak (states, gradient sums and constants %.1f MB, "
                    "largest arena %.1f MB; %.1f MB of intermediates without reuse)\n",
                    ps.peakBytes() / 1e6, ps.persistentBytes / 1e6,
                    std::max(ps.stepArenaBytes, ps.updateArenaBytes) / 1e6,
                    ps.unplannedBytes / 1e6);
      }
    }
    Executor &ex = *exPtr;
    ex.initialize(opt.seed);
    int64_t start = 0;
    if (std::optional<Checkpoint> c = openDataParallelRun(graph, opt, dp)) {
      if (c->step >= opt.steps) {
        // Nothing left to do: not an error, and no step counts below zero.
        std::cout << "the run in " << opt.outDir << " already finished: its checkpoint is at step "
                  << c->step << " of " << opt.steps
                  << "; nothing to train (raise --steps to continue it)\n";
        if (summary)
          *summary = TrainSummary{};
        return 0;
      }
      for (const StateDecl &s : graph.states)
        ex.setState(s.name, c->states.at(s.name));
      ex.setStepCount(c->step);
      start = c->step;
      if (!quiet)
        std::cout << "resuming from " << ckptPath << " at step " << start << "\n";
      if (!quiet && !opt.initFrom.empty())
        std::cout << initFromIgnoredLine(opt.initFrom, ckptPath) << "\n";
    } else if (!opt.initFrom.empty()) {
      int64_t n = applyInitParameters(ex, graph, loadInitParameters(opt.initFrom, graph));
      if (!quiet)
        std::cout << "initialised " << n << " parameters from " << opt.initFrom << "\n";
    }
    checkWorld(opt.outDir, opt.resume, "data-parallel ranks " + std::to_string(ranks), lead);

    std::ofstream metrics, csv;
    if (lead && !metricsPath.empty()) {
      auto mode = opt.resume ? std::ios::app : std::ios::trunc;
      metrics.open(metricsPath, mode);
      metrics.precision(17); // every digit of a double: runs compare line by line
      csv.open(csvPath, mode);
      if (!opt.resume)
        csv << "step,loss,val_loss,tokens_per_s,elapsed_s\n";
    }
    auto save = [&](int64_t step) {
      if (ckptPath.empty() || !lead)
        return;
      std::map<std::string, HostTensor> states;
      for (const StateDecl &s : graph.states)
        states.emplace(s.name, ex.getState(s.name));
      saveRun(opt.outDir, graph, step, opt.seed, states, opt.precision,
              checkpointMeta(graph, opt));
    };

    gInterrupted = false;
    std::optional<StopOnSignal> stopOnSignal; // a launcher forwards both signals
    stopOnSignal.emplace(gInterrupted);
    TrainSummary sum;
    std::vector<std::pair<int64_t, double>> trainCurve, valCurve;
    auto t0 = std::chrono::steady_clock::now();
    auto tLog = t0;
    int64_t tokensSinceLog = 0;
    double lastLoss = 0;
    int exitCode = 0;
    for (int64_t step = start + 1; step <= opt.steps; ++step) {
      // One optimizer step: the micro-batches' gradients, then the update.
      double loss = 0;
      for (int64_t k = 0; k < opt.microBatches; ++k)
        loss += ex.microStep(data.batch(Split::Train, static_cast<uint64_t>(step - 1),
                                        me * opt.microBatches + k))
                    .outputs.at(0);
      bool stop = gInterrupted;
      if (dp) {
        // One flat all-reduce of every gradient sum, then the losses and the
        // stop flag: every rank takes the same step and stops at the same one.
        ex.reduceGradSums(
            [&](Executor::GradSums &g) {
              if (!g.device.f32.empty())
                opt.deviceAllReduce(g);
              size_t n = 0;
              for (auto &[p, c] : g.f32)
                n += c;
              std::vector<float> flat;
              flat.reserve(n);
              for (auto &[p, c] : g.f32)
                flat.insert(flat.end(), p, p + c);
              if (!flat.empty()) // every rank takes the same path
                dp->allReduceSum(flat.data(), flat.size());
              size_t off = 0;
              for (auto &[p, c] : g.f32) {
                std::copy(flat.begin() + off, flat.begin() + off + c, p);
                off += c;
              }
              for (auto &[p, c] : g.f64)
                dp->allReduceSum(p, c);
            },
            ranks, static_cast<bool>(opt.deviceAllReduce));
        double shared[2] = {loss, stop ? 1.0 : 0.0};
        dp->allReduceSum(shared, 2);
        loss = shared[0];
        stop = shared[1] > 0;
      }
      loss /= static_cast<double>(opt.microBatches * ranks);
      if (std::isfinite(loss))
        ex.update();
      // A finite loss can still hide a non-finite state (relu(NaN) is 0).
      std::string bad = std::isfinite(loss) ? ex.nonFiniteState() : "";
      if (!std::isfinite(loss) || !bad.empty()) {
        std::cerr << "\nerror: step " << step << ": "
                  << (bad.empty() ? "the loss is " + std::to_string(loss)
                                  : "after the update, state " + bad)
                  << "; stopping without checkpointing this state (the last good checkpoint, "
                     "if any, is kept). Try a lower learning rate or grad_clip.\n";
        exitCode = 1;
        break;
      }
      if (step == start + 1)
        sum.firstLoss = loss;
      lastLoss = loss;
      sum.losses.push_back(loss);
      trainCurve.emplace_back(step, loss);
      tokensSinceLog += data.tokensPerBatch() * opt.microBatches * ranks;
      double val = -1;
      // Every rank evaluates its own parts of the validation batches.
      bool evalNow = step % opt.evalInterval == 0 || step == opt.steps;
      if (evalNow) {
        val = evaluateLossSum(ex, data, opt.evalBatches, me * opt.microBatches, opt.microBatches);
        if (dp)
          dp->allReduceSum(&val, 1);
        val /= static_cast<double>(opt.evalBatches * opt.microBatches * ranks);
        valCurve.emplace_back(step, val);
        sum.finalValLoss = val;
      }
      evalNow = evalNow && lead;
      auto now = std::chrono::steady_clock::now();
      double elapsed = std::chrono::duration<double>(now - t0).count();
      if (metrics.is_open()) {
        metrics << "{\"step\": " << step << ", \"loss\": " << loss;
        if (val >= 0)
          metrics << ", \"val_loss\": " << val;
        // Flushed every line: a killed run keeps every step it printed.
        metrics << ", \"elapsed_s\": " << elapsed << "}\n" << std::flush;
      }
      bool logNow = lead && (step % opt.logInterval == 0 || step == opt.steps || evalNow);
      if (logNow) {
        double dt = std::chrono::duration<double>(now - tLog).count();
        double tps = dt > 0 ? tokensSinceLog / dt : 0;
        double eta = elapsed / static_cast<double>(step - start) * (opt.steps - step);
        if (csv.is_open())
          csv << step << "," << loss << "," << (val >= 0 ? std::to_string(val) : "") << ","
              << tps << "," << elapsed << "\n" << std::flush;
        if (!quiet) {
          char line[256];
          std::snprintf(line, sizeof line,
                        "step %6lld/%lld | loss %.4f | %8.0f tok/s | elapsed %s | eta %s",
                        (long long)step, (long long)opt.steps, loss, tps,
                        fmtDuration(elapsed).c_str(), fmtDuration(eta).c_str());
          std::string s = line;
          if (val >= 0) {
            std::snprintf(line, sizeof line, " | val %.4f", val);
            s += line;
          }
          // On a terminal the line updates in place; evaluations stay visible.
          if (tty)
            std::cout << "\r\033[K" << s << (val >= 0 ? "\n" : "") << std::flush;
          else
            std::cout << s << "\n" << std::flush;
        }
        tLog = now;
        tokensSinceLog = 0;
      }
      sum.steps = step;
      bool ckptNow = opt.checkpointInterval > 0 && step % opt.checkpointInterval == 0;
      if (ckptNow || step == opt.steps)
        save(step);
      if (stop) {
        save(step);
        if (lead)
          std::cout << (tty ? "\n" : "") << "interrupted at step " << step;
        if (lead && !ckptPath.empty())
          std::cout << "; checkpoint written to " << ckptPath << " (continue with --resume)";
        if (lead)
          std::cout << "\n";
        sum.interrupted = true;
        exitCode = 130;
        break;
      }
    }
    stopOnSignal.reset();
    if (tty && !quiet)
      std::cout << "\n";
    auto t1 = std::chrono::steady_clock::now();
    sum.seconds = std::chrono::duration<double>(t1 - t0).count();
    sum.finalLoss = lastLoss;
    int64_t ran = sum.steps - start;
    sum.tokensPerSecond =
        sum.seconds > 0 ? ran * data.tokensPerBatch() * opt.microBatches * ranks / sum.seconds : 0;
    if (lead && !opt.outDir.empty())
      writePlot(opt.outDir + "/loss.svg", trainCurve, valCurve);
    if (exitCode != 1 && lead) { // the summary shows even with --quiet
      std::printf("done: %lld steps in %s, %.0f tok/s; train loss %.4f -> %.4f",
                  (long long)ran, fmtDuration(sum.seconds).c_str(), sum.tokensPerSecond,
                  sum.firstLoss, sum.finalLoss);
      if (sum.finalValLoss >= 0)
        std::printf(", val loss %.4f", sum.finalValLoss);
      std::printf("\n");
      std::fflush(stdout);
      if (!opt.outDir.empty())
        std::printf("wrote %s/{metrics.jsonl,metrics.csv,loss.svg,checkpoint.bin,model.safetensors}\n",
                    opt.outDir.c_str());
    }
    if (plan && opt.profile)
      std::printf("\ntime by op kind (training steps and evaluations):\n%s",
                  plan->profileReport().c_str());
    if (summary)
      *summary = sum;
    return exitCode;
  } catch (const std::exception &e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

namespace stretto {

std::function<std::unique_ptr<Executor>(const Graph &)> executorFactory(const TrainerOptions &opt) {
  auto warned = std::make_shared<std::once_flag>();
  return [opt, warned](const Graph &g) -> std::unique_ptr<Executor> {
    if (opt.compiled && opt.cuda) {
      std::string why;
      if (std::unique_ptr<PlanExecutor> p =
              PlanExecutor::onCuda(g, opt.cudaKernels, opt.gemmPrecision, why))
        return p;
      if (opt.cudaRequired)
        throw std::runtime_error("--device=cuda: " + why +
                                 " (--device=auto falls back to the CPU)");
      std::call_once(*warned, [&] { std::cerr << "cuda: " << why << "; training on the CPU\n"; });
    }
    if (opt.compiled)
      return std::make_unique<PlanExecutor>(g, opt.kernels, opt.gemmPrecision);
    auto ref = std::make_unique<RefExecutor>(g, opt.precision);
    ref->setKernels(opt.kernels);
    return ref;
  };
}

} // namespace stretto
