//===- Data.cpp - data sources for the trainer ---------------------------===//
//
// Batches are a pure function of (seed, split, step, row): random windows
// for language models (as nanoGPT samples them), Gaussian inputs labelled by
// a fixed random teacher for the synthetic classifier. Resume needs no
// state. A part of a step is a range of its rows, so micro-batches and
// data-parallel ranks read slices of the same step batch.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/Trainer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>

using namespace stretto;

namespace {

const Node *findInput(const Graph &g, const std::string &name) {
  for (const Node &n : g.nodes)
    if (n.kind == OpKind::Input && n.name == name)
      return &n;
  return nullptr;
}

uint64_t draw(uint64_t seed, Split split, uint64_t step, uint64_t row) {
  uint64_t h = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(split) + 1));
  h = splitmix64(h ^ splitmix64(step));
  return splitmix64(h ^ splitmix64(row + 0x5151));
}

std::string readFile(const std::string &path) {
  // A folder opens like a file on Linux and reads as empty: say what it is.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw std::runtime_error(path + ": is a directory, not a data file (give 'data.path' a file)");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot open the data file (" + std::strerror(errno) + ")");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Next-token windows over a token sequence split into train | val.
class TokenWindows : public DataSource {
public:
  TokenWindows(std::vector<int32_t> tokens, std::string what, int64_t batch, int64_t seq,
               double valFraction, uint64_t seed)
      : tokens(std::move(tokens)), what(std::move(what)), B(batch), T(seq), seed(seed) {
    int64_t n = static_cast<int64_t>(this->tokens.size());
    valStart = n - static_cast<int64_t>(std::floor(valFraction * n));
    if (valStart < T + 1 || n - valStart < T + 1)
      throw std::runtime_error(this->what + ": too little data (" + std::to_string(n) +
                               " tokens) for sequences of " + std::to_string(T) +
                               " in both the training and the validation split");
  }
  std::map<std::string, HostTensor> batch(Split split, uint64_t step, int64_t part) override {
    int64_t lo = split == Split::Train ? 0 : valStart;
    int64_t hi = split == Split::Train ? valStart : static_cast<int64_t>(tokens.size());
    uint64_t windows = static_cast<uint64_t>(hi - lo - T);
    HostTensor x{{B, T}, {}}, y{{B, T}, {}};
    x.data.reserve(B * T);
    y.data.reserve(B * T);
    for (int64_t b = 0; b < B; ++b) {
      uint64_t row = static_cast<uint64_t>(part * B + b);
      int64_t off = lo + static_cast<int64_t>(draw(seed, split, step, row) % windows);
      for (int64_t t = 0; t < T; ++t) {
        x.data.push_back(tokens[off + t]);
        y.data.push_back(tokens[off + t + 1]);
      }
    }
    return {{"tokens", std::move(x)}, {"targets", std::move(y)}};
  }
  std::string describe() const override {
    return what + " (" + std::to_string(valStart) + " train / " +
           std::to_string(tokens.size() - valStart) + " val tokens)";
  }
  int64_t tokensPerBatch() const override { return B * T; }

private:
  std::vector<int32_t> tokens;
  std::string what;
  int64_t B, T, valStart;
  uint64_t seed;
};

/// Gaussian inputs, labels = argmax of a fixed random linear teacher.
class SyntheticClassification : public DataSource {
public:
  SyntheticClassification(int64_t batch, int64_t inputs, int64_t classes, uint64_t seed)
      : B(batch), N(inputs), C(classes), seed(seed), teacher(inputs * classes) {
    for (size_t i = 0; i < teacher.size(); ++i)
      teacher[i] = gaussian(splitmix64(0x7EAC4E2ull ^ splitmix64(i)));
  }
  std::map<std::string, HostTensor> batch(Split split, uint64_t step, int64_t part) override {
    HostTensor x{{B, N}, std::vector<double>(B * N)}, y{{B}, std::vector<double>(B)};
    for (int64_t b = 0; b < B; ++b) {
      uint64_t row = draw(seed, split, step, static_cast<uint64_t>(part * B + b));
      for (int64_t i = 0; i < N; ++i)
        x.data[b * N + i] = gaussian(splitmix64(row ^ splitmix64(i)));
      int64_t best = 0;
      double bestScore = -1e300;
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t i = 0; i < N; ++i)
          s += x.data[b * N + i] * teacher[i * C + c];
        if (s > bestScore)
          bestScore = s, best = c;
      }
      y.data[b] = static_cast<double>(best);
    }
    return {{"x", std::move(x)}, {"y", std::move(y)}};
  }
  std::string describe() const override {
    return "synthetic classification (" + std::to_string(N) + " inputs, " + std::to_string(C) +
           " classes, random linear teacher)";
  }
  int64_t tokensPerBatch() const override { return B; }

private:
  static double gaussian(uint64_t bits) {
    double u0 = unitOpenClosed(bits), u1 = unitOpenClosed(splitmix64(bits));
    return std::sqrt(-2.0 * std::log(u0)) * std::cos(6.283185307179586 * u1);
  }
  int64_t B, N, C;
  uint64_t seed;
  std::vector<double> teacher;
};

} // namespace

std::unique_ptr<DataSource> stretto::makeDataSource(const Graph &graph, const DataConfig &config,
                                                    int64_t vocabOrClasses) {
  if (const Node *tok = findInput(graph, "tokens")) {
    if (tok->shape.size() != 2 || !findInput(graph, "targets"))
      throw std::runtime_error("a language model needs inputs tokens [B, T] and targets [B, T]");
    int64_t B = tok->shape[0], T = tok->shape[1];
    if (config.format == "synthetic")
      throw std::runtime_error("a language model needs text or token data ([data] path)");
    std::string bytes = readFile(config.path);
    if (bytes.empty())
      throw std::runtime_error(config.path + ": the data file is empty");
    std::vector<int32_t> tokens;
    if (config.format == "text") {
      tokens.reserve(bytes.size());
      for (unsigned char c : bytes) {
        if (c >= vocabOrClasses)
          throw std::runtime_error(config.path + ": byte " + std::to_string(c) + " at offset " +
                                   std::to_string(tokens.size()) + " is outside the vocabulary of " +
                                   std::to_string(vocabOrClasses));
        tokens.push_back(c);
      }
    } else {
      // nanoGPT-style: little-endian uint16 token ids, no header.
      if (bytes.size() % 2)
        throw std::runtime_error(config.path + ": a .bin token file must hold uint16 ids (odd size " +
                                 std::to_string(bytes.size()) + " bytes)");
      tokens.resize(bytes.size() / 2);
      for (size_t i = 0; i < tokens.size(); ++i) {
        int32_t id = static_cast<unsigned char>(bytes[2 * i]) |
                     (static_cast<unsigned char>(bytes[2 * i + 1]) << 8);
        if (id >= vocabOrClasses)
          throw std::runtime_error(config.path + ": token " + std::to_string(id) + " at index " +
                                   std::to_string(i) + " is outside the vocabulary of " +
                                   std::to_string(vocabOrClasses));
        tokens[i] = id;
      }
    }
    return std::make_unique<TokenWindows>(std::move(tokens), config.path, B, T,
                                          config.valFraction, config.seed);
  }
  const Node *x = findInput(graph, "x");
  if (x && x->shape.size() == 2 && findInput(graph, "y")) {
    if (config.format != "synthetic")
      throw std::runtime_error("classifier data from files is not supported yet; use "
                               "[data] format = \"synthetic\"");
    return std::make_unique<SyntheticClassification>(x->shape[0], x->shape[1], vocabOrClasses,
                                                     config.seed);
  }
  throw std::runtime_error("the model's inputs are neither tokens/targets nor x/y");
}
