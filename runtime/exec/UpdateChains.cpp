//===- UpdateChains.cpp - update kernels that can run as one --------------===//
#include "exec/UpdateChains.h"

#include <algorithm>
#include <set>

using namespace stretto;
using namespace stretto::planning;

std::string planning::chainSignature(const std::vector<std::string> &kernels) {
  std::string s;
  for (const std::string &k : kernels)
    s += (s.empty() ? "" : "|") + k;
  return s;
}

std::vector<UpdateChain>
planning::findUpdateChains(const std::vector<Node> &update,
                           const std::function<std::string(const Node &)> &keyOf) {
  const int n = static_cast<int>(update.size());
  std::vector<std::string> key(n);
  for (int i = 0; i < n; ++i) {
    const Node &k = update[i];
    if (k.kind == OpKind::Kernel && (k.ints.empty() || k.ints[0] == 0) && k.dtype == DType::F32)
      key[i] = keyOf(k);
  }
  std::vector<std::vector<int>> readers(n);
  for (int i = 0; i < n; ++i)
    for (int o : update[i].operands)
      if (readers[o].empty() || readers[o].back() != i)
        readers[o].push_back(i);
  std::vector<UpdateChain> found;
  for (int c = 0; c < n; ++c) {
    if (key[c].empty())
      continue;
    UpdateChain ch;
    ch.consumer = c;
    std::set<int> seen;
    for (int o : update[c].operands) {
      if (key[o].empty() || update[o].shape != update[c].shape || !seen.insert(o).second)
        continue;
      bool only = true;
      for (int r : readers[o])
        only = only && (r == c || update[r].kind == OpKind::Write);
      if (only)
        ch.producers.push_back(o);
    }
    if (ch.producers.empty())
      continue;
    std::sort(ch.producers.begin(), ch.producers.end()); // (the order they run in)
    for (int p : ch.producers)
      ch.kernels.push_back(key[p]);
    ch.kernels.push_back(key[c]);
    ch.signature = chainSignature(ch.kernels);
    found.push_back(std::move(ch));
  }
  // A consumer that is another chain's producer leaves its own chain (the
  // other keeps it as a producer): chains do not nest.
  std::set<int> produce;
  for (const UpdateChain &ch : found)
    produce.insert(ch.producers.begin(), ch.producers.end());
  std::vector<UpdateChain> out;
  for (UpdateChain &ch : found)
    if (!produce.count(ch.consumer))
      out.push_back(std::move(ch));
  return out;
}
