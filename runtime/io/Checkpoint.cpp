//===- Checkpoint.cpp - atomic, checksummed checkpoints ------------------===//
//
// Layout (little-endian): "STRETTOCKPT2", u32 value bytes (4|8), i64 step,
// u64 seed, u32 meta count, per meta entry: u32 key length, key, u32 value
// length, value; u32 count, then per state: u32 name length, name, u32 rank,
// i64 dims[rank], values; finally u64 FNV-1a of every preceding byte.
// "STRETTOCKPT1" files (no meta entries) still load. A checksum only says
// the file is what was written: shapes are bounded by the bytes present,
// and openRun compares them with the model. A run of several ranks keeps
// one such file per rank and step, checkpoint-rank<r>-step<N>.bin.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/Trainer.h"
#include "stretto/Runtime/Communicator.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

using namespace stretto;

namespace {
const char kMagic[] = "STRETTOCKPT2";
const char kMagicV1[] = "STRETTOCKPT1";

uint64_t fnv(const std::string &bytes) { return fnv1a64(bytes); }

template <typename T> void put(std::string &out, T v) {
  out.append(reinterpret_cast<const char *>(&v), sizeof(T));
}

struct Reader {
  const std::string &bytes;
  size_t pos;
  const std::string &path;
  template <typename T> T get() {
    if (pos + sizeof(T) > bytes.size())
      throw std::runtime_error(path + ": checkpoint is truncated");
    T v;
    std::memcpy(&v, bytes.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
};
} // namespace

void stretto::writeFileAtomically(const std::string &path, const std::string &bytes) {
  // Never leave a half-written file under the real name.
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    throw std::runtime_error(tmp + ": cannot write (" + std::strerror(errno) + ")");
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error(tmp + ": write failed (" + std::strerror(e) + ")");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error(tmp + ": flush failed (" + std::strerror(errno) + ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error(path + ": cannot move the file into place (" +
                             std::strerror(errno) + ")");
}

void stretto::saveCheckpoint(const std::string &path, const Checkpoint &ckpt,
                             Precision precision) {
  std::string out(kMagic, sizeof(kMagic) - 1);
  uint32_t width = precision == Precision::F64 ? 8 : 4;
  put<uint32_t>(out, width);
  put<int64_t>(out, ckpt.step);
  put<uint64_t>(out, ckpt.seed);
  put<uint32_t>(out, static_cast<uint32_t>(ckpt.meta.size()));
  for (const auto &[key, value] : ckpt.meta) {
    put<uint32_t>(out, static_cast<uint32_t>(key.size()));
    out += key;
    put<uint32_t>(out, static_cast<uint32_t>(value.size()));
    out += value;
  }
  put<uint32_t>(out, static_cast<uint32_t>(ckpt.states.size()));
  for (const auto &[name, t] : ckpt.states) {
    put<uint32_t>(out, static_cast<uint32_t>(name.size()));
    out += name;
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape)
      put<int64_t>(out, d);
    for (double v : t.data) {
      if (width == 8)
        put<double>(out, v);
      else
        put<float>(out, static_cast<float>(v));
    }
  }
  put<uint64_t>(out, fnv(out));

  writeFileAtomically(path, out);
}

Checkpoint stretto::loadCheckpoint(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot open the checkpoint (" + std::strerror(errno) + ")");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  size_t magic = sizeof(kMagic) - 1;
  bool v1 = bytes.size() >= magic && bytes.compare(0, magic, kMagicV1) == 0;
  if (bytes.size() < magic || (!v1 && bytes.compare(0, magic, kMagic) != 0)) {
    // "STRETTOCKPT" and a version this build does not read: say so.
    if (bytes.size() >= magic && bytes.compare(0, magic - 1, kMagic, magic - 1) == 0)
      throw std::runtime_error(path + ": the checkpoint has format " + bytes.substr(magic - 1, 1) +
                               " but this build reads formats 1 and 2 (written by another "
                               "version of Stretto)");
    throw std::runtime_error(path + ": not a Stretto checkpoint");
  }
  if (bytes.size() < magic + 8)
    throw std::runtime_error(path + ": checkpoint is truncated");
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  if (fnv(bytes.substr(0, bytes.size() - 8)) != stored)
    throw std::runtime_error(path + ": checkpoint is corrupt or truncated (checksum mismatch)");
  Reader r{bytes, magic, path};
  uint32_t width = r.get<uint32_t>();
  if (width != 4 && width != 8)
    throw std::runtime_error(path + ": checkpoint has an unknown value width");
  Checkpoint c;
  c.step = r.get<int64_t>();
  c.seed = r.get<uint64_t>();
  const size_t end = bytes.size() - 8; // the checksum follows
  auto text = [&]() {
    uint32_t len = r.get<uint32_t>();
    if (len > end - std::min(end, r.pos))
      throw std::runtime_error(path + ": checkpoint is truncated");
    std::string s = bytes.substr(r.pos, len);
    r.pos += len;
    return s;
  };
  if (!v1) {
    uint32_t entries = r.get<uint32_t>();
    for (uint32_t i = 0; i < entries; ++i) {
      std::string key = text();
      c.meta[key] = text();
    }
  }
  uint32_t count = r.get<uint32_t>();
  for (uint32_t i = 0; i < count; ++i) {
    std::string name = text();
    HostTensor t;
    uint32_t rank = r.get<uint32_t>();
    if (rank > 16)
      throw std::runtime_error(path + ": state '" + name + "' has rank " + std::to_string(rank) +
                               " in the checkpoint");
    // The values must be in the file: no dimension, or their product,
    // may claim more than the bytes left (nor be negative).
    uint64_t n = 1, left = (end - std::min(end, r.pos)) / width;
    for (uint32_t d = 0; d < rank; ++d) {
      int64_t dim = r.get<int64_t>();
      if (dim < 0 || (dim > 0 && n > left / static_cast<uint64_t>(dim)) ||
          n * static_cast<uint64_t>(dim) > left)
        throw std::runtime_error(path + ": state '" + name + "' has a dimension of " +
                                 std::to_string(dim) +
                                 ", more values than the checkpoint holds (truncated or not "
                                 "written by Stretto)");
      n *= static_cast<uint64_t>(dim);
      t.shape.push_back(dim);
    }
    t.data.resize(n);
    for (uint64_t k = 0; k < n; ++k)
      t.data[k] = width == 8 ? r.get<double>() : static_cast<double>(r.get<float>());
    c.states.emplace(std::move(name), std::move(t));
  }
  return c;
}

std::string stretto::rankCheckpointPath(const std::string &outDir, int rank, int64_t step) {
  return outDir + "/checkpoint-rank" + std::to_string(rank) + "-step" + std::to_string(step) +
         ".bin";
}

namespace {
/// "checkpoint-rank<r>-step<N>.bin" → (r, N); anything else → nullopt.
std::optional<std::pair<int, int64_t>> parseRankFile(const std::string &name) {
  int rank = -1;
  long long step = -1;
  int used = 0;
  if (std::sscanf(name.c_str(), "checkpoint-rank%d-step%lld.bin%n", &rank, &step, &used) != 2 ||
      used != static_cast<int>(name.size()) || rank < 0 || step < 0 ||
      name != "checkpoint-rank" + std::to_string(rank) + "-step" + std::to_string(step) + ".bin")
    return std::nullopt;
  return std::make_pair(rank, static_cast<int64_t>(step));
}

std::vector<std::string> namesIn(const std::string &dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto &e : std::filesystem::directory_iterator(dir, ec))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}
} // namespace

std::vector<int64_t> stretto::rankCheckpointSteps(const std::string &outDir, int rank) {
  std::vector<int64_t> steps;
  for (const std::string &n : namesIn(outDir))
    if (auto rs = parseRankFile(n); rs && rs->first == rank)
      steps.push_back(rs->second);
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

void stretto::removeRankCheckpointsBefore(const std::string &outDir, int rank, int64_t step) {
  for (int64_t s : rankCheckpointSteps(outDir, rank))
    if (s < step)
      std::filesystem::remove(rankCheckpointPath(outDir, rank, s));
}

std::vector<std::string> stretto::checkpointFilesIn(const std::string &outDir) {
  std::vector<std::string> files;
  for (const std::string &n : namesIn(outDir))
    if (n == "checkpoint.bin" || parseRankFile(n))
      files.push_back(outDir + "/" + n);
  return files;
}

void stretto::refuseExistingCheckpoint(const std::string &outDir, int rank) {
  std::vector<std::string> files;
  for (const std::string &f : checkpointFilesIn(outDir)) {
    auto rs = parseRankFile(std::filesystem::path(f).filename().string());
    if (rank < 0 || !rs || rs->first == rank)
      files.push_back(f);
  }
  if (!files.empty())
    throw std::runtime_error(files.front() +
                             " already exists: pass --resume to continue that run, or choose "
                             "another --out (a new run never overwrites an earlier run's "
                             "checkpoint)");
}

int64_t stretto::newestCommonCheckpointStep(const std::string &outDir, int ranks,
                                            Communicator *comm) {
  // Each rank's newest step + 1 (0: none); exact in a double.
  std::vector<double> newest(ranks, 0.0);
  auto newestOf = [&](int r) {
    std::vector<int64_t> s = rankCheckpointSteps(outDir, r);
    return s.empty() ? 0.0 : static_cast<double>(s.front() + 1);
  };
  if (comm) {
    newest[comm->rank()] = newestOf(comm->rank());
    comm->allReduceSum(newest.data(), newest.size());
  } else {
    for (int r = 0; r < ranks; ++r)
      newest[r] = newestOf(r);
  }
  std::string missing;
  for (int r = 0; r < ranks; ++r)
    if (newest[r] == 0.0)
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  if (!missing.empty())
    throw std::runtime_error(
        outDir + ": no checkpoint of rank" + (missing.find(',') != std::string::npos ? "s " : " ") +
        missing + " (checkpoint-rank<r>-step<N>.bin; each rank resumes from its own file" +
        (comm ? ", in its own --out folder" : "") + ")");
  return static_cast<int64_t>(*std::min_element(newest.begin(), newest.end())) - 1;
}
