//===- Gossip.cpp - topologies, mixing and a simulated network ------------===//
//
// The pieces of decentralized data parallelism that are not a run: peer
// draws over a topology, Metropolis–Hastings mixing, the network model and
// the simulated clock, a replica's executor and parameters, the settings a
// plan records. The run mode is GossipRun.cpp.
//
// The simulated clock (per network model) is carried on the messages: each
// carries its sender's time when it became ready to exchange; a pairwise
// exchange ends at max(ready_i, ready_j) + latency + bytes / bandwidth_ij. The
// complete graph is charged as a ring all-reduce (2(n−1) steps of bytes/n over
// the slowest ring link), which is what NCCL or Gloo would run.
//
//===----------------------------------------------------------------------===//
#include "run/GossipInternals.h"
#include "stretto/Runtime/RunChecks.h"
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Runtime/Communicator.h"
#include "stretto/Runtime/StopSignals.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <tuple>

namespace stretto {

// Topologies and mixing

Topology parseTopology(const std::string &name) {
  if (name == "complete") return Topology::Complete;
  if (name == "ring") return Topology::Ring;
  if (name == "exponential") return Topology::Exponential;
  if (name == "one-peer") return Topology::OnePeer;
  if (name == "two-peer") return Topology::TwoPeer;
  throw std::invalid_argument("unknown topology '" + name +
                              "'; expected complete, ring, exponential, one-peer or two-peer");
}

const char *topologyName(Topology t) {
  switch (t) {
  case Topology::Complete: return "complete";
  case Topology::Ring: return "ring";
  case Topology::Exponential: return "exponential";
  case Topology::OnePeer: return "one-peer";
  case Topology::TwoPeer: return "two-peer";
  }
  return "?";
}

std::vector<std::vector<int>> drawPeers(Topology topology, const std::vector<bool> &alive,
                                        uint64_t seed, int64_t round) {
  std::vector<int> live;
  for (size_t i = 0; i < alive.size(); ++i)
    if (alive[i])
      live.push_back(static_cast<int>(i));
  size_t n = live.size();
  std::vector<std::vector<int>> peers(alive.size());
  auto link = [&](int a, int b) {
    if (a == b || std::find(peers[a].begin(), peers[a].end(), b) != peers[a].end())
      return;
    peers[a].push_back(b);
    peers[b].push_back(a);
  };
  // A random perfect matching of the live replicas (one sits out when n is
  // odd): Fisher–Yates on a counter-based stream of (seed, round, stream).
  auto matching = [&](uint64_t stream) {
    std::vector<int> perm = live;
    uint64_t state = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(round) * 2 + stream));
    for (size_t i = n; i > 1; --i) {
      state = splitmix64(state);
      std::swap(perm[i - 1], perm[state % i]);
    }
    for (size_t i = 0; i + 1 < n; i += 2)
      link(perm[i], perm[i + 1]);
  };
  switch (topology) {
  case Topology::Complete:
    for (size_t a = 0; a < n; ++a)
      for (size_t b = a + 1; b < n; ++b)
        link(live[a], live[b]);
    break;
  case Topology::Ring:
    for (size_t p = 0; n > 1 && p < n; ++p)
      link(live[p], live[(p + 1) % n]);
    break;
  case Topology::Exponential: // peers p ± 2^k (Assran et al., SGP), undirected
    for (size_t p = 0; p < n; ++p)
      for (size_t s = 1; s < n; s *= 2)
        link(live[p], live[(p + s) % n]);
    break;
  case Topology::OnePeer:
    matching(0);
    break;
  case Topology::TwoPeer:
    matching(0);
    matching(1);
    break;
  }
  for (auto &p : peers)
    std::sort(p.begin(), p.end());
  return peers;
}

double mixingWeight(size_t di, size_t dj) { return 1.0 / (1.0 + static_cast<double>(std::max(di, dj))); }

HostTensor gossipMix(const HostTensor &zi, size_t degree,
                     const std::vector<std::pair<const HostTensor *, size_t>> &peers,
                     double alpha) {
  HostTensor out = zi;
  for (const auto &[zj, dj] : peers) {
    if (zj->data.size() != zi.data.size())
      throw std::runtime_error("gossip_mix: a peer sent " + std::to_string(zj->data.size()) +
                               " values, expected " + std::to_string(zi.data.size()));
    double w = alpha * mixingWeight(degree, dj);
    for (size_t e = 0; e < out.data.size(); ++e)
      out.data[e] -= w * (zi.data[e] - zj->data[e]);
  }
  return out;
}

// Network model

double NetworkModel::stepCost(int replica) const {
  double f = replica < static_cast<int>(replicaFactor.size()) ? replicaFactor[replica] : 1.0;
  return stepTime * f;
}

double NetworkModel::linkBandwidth(int i, int j) const {
  size_t r = static_cast<size_t>(std::sqrt(static_cast<double>(linkFactor.size())) + 0.5);
  if (linkFactor.empty() || static_cast<size_t>(std::max(i, j)) >= r)
    return bandwidth;
  return bandwidth / linkFactor[static_cast<size_t>(i) * r + j];
}

NetworkModel NetworkModel::heterogeneous(int replicas, double slowReplicas, double replicaFactor,
                                         double slowLinks, double linkFactor, uint64_t seed) {
  NetworkModel m;
  m.name = "heterogeneous";
  m.replicaFactor.assign(replicas, 1.0);
  m.linkFactor.assign(static_cast<size_t>(replicas) * replicas, 1.0);
  // Deterministic choices: shuffle with a counter-based stream, take a prefix.
  auto shuffled = [&](size_t count, uint64_t stream) {
    std::vector<size_t> idx(count);
    for (size_t i = 0; i < count; ++i)
      idx[i] = i;
    uint64_t state = splitmix64(seed ^ stream);
    for (size_t i = count; i > 1; --i) {
      state = splitmix64(state);
      std::swap(idx[i - 1], idx[state % i]);
    }
    return idx;
  };
  std::vector<size_t> order = shuffled(replicas, 0x5105);
  size_t slowR = static_cast<size_t>(std::ceil(slowReplicas * replicas - 1e-9));
  for (size_t k = 0; k < slowR && k < order.size(); ++k)
    m.replicaFactor[order[k]] = replicaFactor;
  std::vector<std::pair<int, int>> pairs;
  for (int a = 0; a < replicas; ++a)
    for (int b = a + 1; b < replicas; ++b)
      pairs.emplace_back(a, b);
  std::vector<size_t> linkOrder = shuffled(pairs.size(), 0x11c5);
  size_t slowL = static_cast<size_t>(std::ceil(slowLinks * pairs.size() - 1e-9));
  for (size_t k = 0; k < slowL && k < linkOrder.size(); ++k) {
    auto [a, b] = pairs[linkOrder[k]];
    m.linkFactor[static_cast<size_t>(a) * replicas + b] = linkFactor;
    m.linkFactor[static_cast<size_t>(b) * replicas + a] = linkFactor;
  }
  return m;
}

} // namespace stretto

namespace stretto::gossip {



size_t elementBytes(DType t) {
  switch (t) {
  case DType::F64: return 8;
  case DType::BF16: return 2;
  default: return 4;
  }
}

/// Ring all-reduce of `bytes` among `members` (sorted): 2(n−1) steps, each
/// moving bytes/n over every ring link at once, so the slowest link paces it.
double allReduceTime(const NetworkModel &net, const std::vector<int> &members, double bytes) {
  size_t n = members.size();
  if (n < 2)
    return 0.0;
  double bw = 1e300;
  for (size_t p = 0; p < n; ++p)
    bw = std::min(bw, net.linkBandwidth(members[p], members[(p + 1) % n]));
  return 2.0 * static_cast<double>(n - 1) * (net.latency + bytes / static_cast<double>(n) / bw);
}

/// Replica r's simulated clocks after a round: the peers that answered and
/// the time each was ready (per network); an all-reduce on the complete
/// graph, pairwise exchanges elsewhere. Counts the bytes sent.
void advanceClocks(ReplicaReport &rep, int r, Topology topo, const std::vector<int> &peers,
                   const std::vector<bool> &answered,
                   const std::vector<std::vector<double>> &peerReady,
                   const std::vector<double> &ready, double roundBytes,
                   const GossipOptions &opt) {
  const size_t NN = opt.networks.size();
  std::vector<int> members{r};
  for (size_t p = 0; p < peers.size(); ++p)
    if (answered[p])
      members.push_back(peers[p]);
  std::sort(members.begin(), members.end());
  if (topo == Topology::Complete) {
    size_t n = members.size();
    if (n > 1)
      rep.bytesSent += 2.0 * static_cast<double>(n - 1) / static_cast<double>(n) * roundBytes;
    for (size_t net = 0; net < NN; ++net) {
      double start = ready[net];
      for (size_t p = 0; p < peers.size(); ++p)
        if (answered[p])
          start = std::max(start, peerReady[p][net]);
      rep.simTime[net] = start + allReduceTime(opt.networks[net], members, roundBytes);
    }
  } else {
    rep.bytesSent += roundBytes * static_cast<double>(peers.size());
    for (size_t net = 0; net < NN; ++net) {
      const NetworkModel &nm = opt.networks[net];
      double end = ready[net];
      for (size_t p = 0; p < peers.size(); ++p)
        if (answered[p])
          end = std::max(end, std::max(ready[net], peerReady[p][net]) + nm.latency +
                                  roundBytes / nm.linkBandwidth(r, peers[p]));
      rep.simTime[net] = end;
    }
  }
}

std::vector<double> flattenParams(const Graph &g, const Executor &ex) {
  std::vector<double> flat;
  for (const StateDecl &s : g.states)
    if (s.isParam) {
      HostTensor t = ex.getState(s.name);
      flat.insert(flat.end(), t.data.begin(), t.data.end());
    }
  return flat;
}

std::map<std::string, HostTensor> unflattenParams(const Graph &g, const std::vector<double> &flat) {
  std::map<std::string, HostTensor> out;
  size_t off = 0;
  for (const StateDecl &s : g.states)
    if (s.isParam) {
      size_t n = static_cast<size_t>(numElements(s.shape));
      out[s.name] = HostTensor{s.shape, std::vector<double>(flat.begin() + off, flat.begin() + off + n)};
      off += n;
    }
  return out;
}

// The options' local steps, else the plan's: one value for every replica,
// or one per replica.
std::vector<int64_t> localStepsPerReplica(const Graph &graph, const GossipOptions &opt, int R) {
  std::vector<int64_t> H = !opt.localSteps.empty() ? opt.localSteps : graph.outerLoop.localSteps;
  if (H.empty())
    H = {1};
  if (H.size() == 1)
    H.assign(R, H[0]);
  if (static_cast<int>(H.size()) != R)
    throw std::runtime_error("local steps: " + std::to_string(H.size()) + " values for " +
                             std::to_string(R) + " replicas");
  return H;
}

Topology topologyOf(const Graph &graph, const GossipOptions &opt) {
  return parseTopology(!opt.topology.empty() ? opt.topology
                       : graph.outerLoop.topology.empty() ? std::string("complete")
                                                          : graph.outerLoop.topology);
}

} // namespace stretto::gossip

namespace stretto {

std::map<std::string, std::string> GossipSettings::toMeta() const {
  auto num = [](double v) {
    char b[40];
    std::snprintf(b, sizeof b, "%.17g", v);
    return std::string(b);
  };
  std::map<std::string, std::string> m = {{"gossip.rounds", std::to_string(rounds)},
                                          {"gossip.net_step_time", num(stepTime)},
                                          {"gossip.net_bandwidth", num(bandwidth)},
                                          {"gossip.net_latency", num(latency)}};
  if (heterogeneous) {
    m["gossip.net_slow_replicas"] = num(slowReplicas);
    m["gossip.net_slow_replica_factor"] = num(slowReplicaFactor);
    m["gossip.net_slow_links"] = num(slowLinks);
    m["gossip.net_slow_link_factor"] = num(slowLinkFactor);
  }
  return m;
}

GossipSettings GossipSettings::fromMeta(const std::map<std::string, std::string> &meta) {
  GossipSettings s;
  auto get = [&](const char *key, double &v) {
    auto it = meta.find(key);
    if (it != meta.end())
      v = std::strtod(it->second.c_str(), nullptr);
    return it != meta.end();
  };
  double rounds = 0;
  get("gossip.rounds", rounds);
  s.rounds = static_cast<int64_t>(rounds);
  get("gossip.net_step_time", s.stepTime);
  get("gossip.net_bandwidth", s.bandwidth);
  get("gossip.net_latency", s.latency);
  s.heterogeneous = get("gossip.net_slow_replicas", s.slowReplicas);
  s.heterogeneous |= get("gossip.net_slow_links", s.slowLinks);
  get("gossip.net_slow_replica_factor", s.slowReplicaFactor);
  get("gossip.net_slow_link_factor", s.slowLinkFactor);
  return s;
}

GossipOptions gossipOptionsFor(const Graph &graph, const TrainerOptions &opt,
                               const GossipSettings &settings) {
  GossipOptions g;
  int64_t maxH = 1;
  for (int64_t h : graph.outerLoop.localSteps)
    maxH = std::max(maxH, h);
  g.rounds = settings.rounds > 0 ? settings.rounds : (opt.steps + maxH - 1) / maxH;
  g.seed = opt.seed;
  g.executorFactory = executorFactory(opt);
  g.microBatches = opt.microBatches;
  g.evalInterval = std::max<int64_t>(1, opt.evalInterval / maxH);
  g.evalBatches = opt.evalBatches;
  g.outDir = opt.outDir;
  g.checkpointInterval = opt.checkpointInterval > 0 ? std::max<int64_t>(1, opt.checkpointInterval / maxH) : 0;
  g.resume = opt.resume;
  g.initFrom = opt.initFrom;
  NetworkModel net;
  net.stepTime = settings.stepTime;
  net.bandwidth = settings.bandwidth;
  net.latency = settings.latency;
  if (settings.heterogeneous) {
    NetworkModel h = NetworkModel::heterogeneous(
        static_cast<int>(graph.outerLoop.replicas), settings.slowReplicas,
        settings.slowReplicaFactor, settings.slowLinks, settings.slowLinkFactor, opt.seed);
    net.name = h.name;
    net.replicaFactor = h.replicaFactor;
    net.linkFactor = h.linkFactor;
  }
  g.networks = {net};
  return g;
}

} // namespace stretto
