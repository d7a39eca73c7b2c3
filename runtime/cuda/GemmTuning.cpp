//===- GemmTuning.cpp - cuBLASLt algorithms chosen by timing --------------===//
#include "cuda/GemmTuning.h"
#include "exec/EnvSwitch.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

namespace stretto {

int fastestCandidate(const std::vector<double> &seconds) {
  int best = -1;
  for (size_t i = 0; i < seconds.size(); ++i)
    if (std::isfinite(seconds[i]) && (best < 0 || seconds[i] < seconds[static_cast<size_t>(best)]))
      best = static_cast<int>(i);
  return best;
}

GemmChoiceFile::GemmChoiceFile(std::string path) : path_(std::move(path)) {
  std::ifstream in(path_);
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0 || tab + 1 >= line.size())
      continue;
    int index = 0;
    bool digits = true;
    for (size_t c = 0; c < tab; ++c) {
      digits = digits && line[c] >= '0' && line[c] <= '9';
      index = digits && index < 100000 ? index * 10 + (line[c] - '0') : index;
    }
    if (digits)
      choices_.emplace(line.substr(tab + 1), index); // (the first line of a key wins)
  }
}

std::optional<int> GemmChoiceFile::find(const std::string &key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = choices_.find(key);
  if (it == choices_.end())
    return std::nullopt;
  return it->second;
}

void GemmChoiceFile::record(const std::string &key, int index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!choices_.emplace(key, index).second || path_.empty())
    return;
  std::ofstream out(path_, std::ios::app);
  if (out) // one write of one line (the key has no newline)
    out << (std::to_string(index) + "\t" + key + "\n") << std::flush;
}

std::string gemmChoicePath(const std::string &cacheDir, const std::string &gpu,
                           size_t cublasLtVersion) {
  if (cacheDir.empty())
    return "";
  std::ostringstream name;
  name << std::hex << std::hash<std::string>{}(gpu + "\n" + std::to_string(cublasLtVersion));
  return cacheDir + "/gemm-algos-" + name.str() + ".txt";
}

bool wantedGemmTuning() { return envSwitchOn("STRETTO_GEMM_TUNING"); }

} // namespace stretto
