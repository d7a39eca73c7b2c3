//===- RunFolder.cpp - a run's output folder and checkpoint files ---------===//
//
// What every mode of run shares about its folder: creating and checking it,
// refusing to overwrite an earlier run, the one-stage checkpoint.bin and the
// per-rank checkpoint files, the layout record (world.txt), and
// --init-from's parameters.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/RunChecks.h"
#include "stretto/Runtime/Trainer.h"
#include "stretto/Runtime/Communicator.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

using namespace stretto;

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
  std::map<std::string, HostTensor> own;
  for (const StateDecl &s : graph.states)
    own.emplace(s.name, states.at(s.name));
  saveCheckpoint(outDir + "/checkpoint.bin", checkpointOf(step, seed, own, meta), precision);
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

