//===- Gossip.cpp - replicas, gossip exchanges and a simulated network ----===//
//
// One replica per rank of a Communicator (runGossipRank): a process over
// Gloo, or a thread of runGossip over an InProcessGroup; the numerics are
// the same code either way. The peers of round t are drawn from (seed, t)
// over every replica, so each replica knows its peers without asking; a
// replica that died is skipped when its exchange fails. Rank 0 gathers the
// round reports, evaluates the mean model, writes checkpoints and decides
// when a stop request ends the run. Without faults the numerics are
// deterministic whatever the thread or process timing.
//
// The simulated clock (per network model) is carried on the messages: each
// carries its sender's time when it became ready to exchange; a pairwise
// exchange ends at max(ready_i, ready_j) + latency + bytes / bandwidth_ij. The
// complete graph is charged as a ring all-reduce (2(n−1) steps of bytes/n over
// the slowest ring link), which is what NCCL or Gloo would run.
//
//===----------------------------------------------------------------------===//
#include "stretto/Gossip.h"
#include "stretto/RunChecks.h"
#include "stretto/PlanExecutor.h"
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

namespace {

/// A replica whose loss or state went non-finite: the run stops (unlike a
/// replica that dies, which the others survive).
struct Diverged : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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

// The executor of one replica (or of the evaluation): the compiled runtime
// when the options ask for it, else the reference executor.
std::unique_ptr<Executor> makeExecutor(const Graph &g, const GossipOptions &opt) {
  if (opt.executorFactory)
    return opt.executorFactory(g);
  if (opt.compiled)
    return std::make_unique<PlanExecutor>(g, opt.kernels, opt.gemmPrecision);
  auto ref = std::make_unique<RefExecutor>(g, opt.precision);
  ref->setKernels(opt.kernels);
  return ref;
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

} // namespace

// The gossip run

namespace {
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

bool everyReplicaFailed(const std::vector<std::string> &errors) {
  return std::all_of(errors.begin(), errors.end(), [](const std::string &e) { return !e.empty(); });
}
} // namespace

GossipResult runGossip(const Graph &graph, DataSource &data, const GossipOptions &opt) {
  if (graph.outer.empty())
    throw std::runtime_error("the graph has no outer phase; compile it with train-gossip");
  int R = static_cast<int>(opt.replicas > 0 ? opt.replicas : graph.outerLoop.replicas);
  if (R < 1)
    throw std::runtime_error("gossip needs at least one replica, got " + std::to_string(R));
  std::vector<int64_t> H = localStepsPerReplica(graph, opt, R);
  for (int64_t h : H)
    if (h < 0)
      throw std::runtime_error("local steps must be >= 0, got " + std::to_string(h));
  parseTopology(!opt.topology.empty() ? opt.topology
                : graph.outerLoop.topology.empty() ? std::string("complete")
                                                   : graph.outerLoop.topology);
  if (opt.networks.empty())
    throw std::runtime_error("gossip needs at least one network model");
  if (opt.rounds < 1)
    throw std::runtime_error("gossip needs at least one round, got " + std::to_string(opt.rounds));
  for (auto [r, k] : opt.kills)
    if (r < 0 || r >= R)
      throw std::runtime_error("kill: no replica " + std::to_string(r) + " among " +
                               std::to_string(R));

  // The replicas share one data source: its reads are serialised.
  class LockedData final : public DataSource {
  public:
    explicit LockedData(DataSource &inner) : inner(inner) {}
    std::map<std::string, HostTensor> batch(Split s, uint64_t i, int64_t part) override {
      std::lock_guard<std::mutex> lock(mu);
      return inner.batch(s, i, part);
    }
    std::string describe() const override { return inner.describe(); }
    int64_t tokensPerBatch() const override { return inner.tokensPerBatch(); }

  private:
    DataSource &inner;
    std::mutex mu;
  } shared(data);

  GossipOptions o = opt;
  o.replicas = R;
  o.stopOnPeerFailure = false; // a replica that fails is dropped, the others finish
  o.consensusEveryRound = true;
  InProcessGroup group(R);
  std::vector<GossipResult> results(R);
  std::vector<std::string> errors(R);
  std::vector<int64_t> failedAt(R, -1);
  std::mutex divergedMu;
  std::string diverged; // the first replica whose loss or state went non-finite
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto worker = [&](int r) {
    omp_set_num_threads(std::max(1, cores / R)); // per thread: no oversubscription
    int64_t round = 0;
    GossipOptions mine = o;
    mine.onRoundEnd = [&](int q, int64_t t, const std::map<std::string, HostTensor> &p) {
      round = t + 1;
      if (opt.onRoundEnd)
        opt.onRoundEnd(q, t, p);
    };
    try {
      results[r] = runGossipRank(graph, shared, mine, group.rank(r));
    } catch (const Diverged &e) {
      // Not a fault to tolerate: every replica stops.
      {
        std::lock_guard<std::mutex> lock(divergedMu);
        if (diverged.empty())
          diverged = e.what();
      }
      errors[r] = e.what();
      failedAt[r] = round;
      group.rank(r).abort(e.what());
    } catch (const std::exception &e) {
      errors[r] = e.what();
      failedAt[r] = round;
    }
    if (!errors[r].empty() || results[r].replicas.empty() || results[r].replicas[r].dead)
      group.leave(r); // the others' receives from it fail at once
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r) {
    try {
      threads.emplace_back(worker, r);
    } catch (const std::system_error &e) {
      // No thread for replica r (the system's thread limit): the replicas
      // that run fail at their first exchange with it, and the run fails.
      for (int q = r; q < R; ++q)
        group.leave(q);
      for (std::thread &t : threads)
        t.join();
      throw std::runtime_error("cannot start a thread for gossip replica " + std::to_string(r) +
                               " of " + std::to_string(R) + ": " + e.what());
    }
  }
  for (std::thread &t : threads)
    t.join();
  if (!diverged.empty())
    throw std::runtime_error(diverged + "; stopping without checkpointing this state (the last "
                                        "good checkpoint, if any, is kept)");

  // Every replica failed before any round closed (bad settings, an
  // unreadable checkpoint): rank 0's error says why.
  if (everyReplicaFailed(errors) && results[0].rounds.empty())
    throw std::runtime_error(errors[0]);
  // Rank 0 holds the rounds, the draws and the mean model; every replica
  // its own counters.
  GossipResult result = results[0];
  result.replicas.assign(R, ReplicaReport());
  for (int r = 0; r < R; ++r) {
    if (!results[r].replicas.empty())
      result.replicas[r] = results[r].replicas[r];
    if (!errors[r].empty()) {
      result.replicas[r].dead = true;
      result.replicas[r].diedAtRound = failedAt[r];
      result.replicas[r].error = errors[r];
    }
  }
  return result;
}

// One replica per process

namespace {
// Tags: exchanges by (round, mix node, part); reports, parameters, states
// and acknowledgements to and from rank 0; the resume hand-out.
constexpr uint64_t kMixTag = 0, kReportTag = uint64_t(1) << 45, kParamTag = uint64_t(2) << 45,
                   kAckTag = uint64_t(3) << 45, kFallbackTag = uint64_t(4) << 45,
                   kResumeTag = uint64_t(5) << 45;
uint64_t mixTag(int64_t round, int node, int part) {
  return kMixTag | (uint64_t(round) << 20) | (uint64_t(node) << 2) | uint64_t(part);
}
// A replica waits for rank 0's acknowledgement of its report of round
// t − kAckWindow at the end of round t: no replica runs more than
// kAckWindow rounds ahead of rank 0, and a stop rank 0 decides while
// closing round t' (stop after round t' + kAckWindow) reaches everyone in
// time.
constexpr size_t kAckWindow = 4;

size_t stateElements(const Graph &g) {
  size_t n = 0;
  for (const StateDecl &s : g.states)
    n += static_cast<size_t>(numElements(s.shape));
  return n;
}
void restoreStates(const Graph &g, Executor &ex, const std::vector<double> &flat) {
  size_t off = 0;
  for (const StateDecl &s : g.states) {
    size_t n = static_cast<size_t>(numElements(s.shape));
    ex.setState(s.name, HostTensor{s.shape, std::vector<double>(flat.begin() + off,
                                                                flat.begin() + off + n)});
    off += n;
  }
}

// A replica's counters, as they travel and sit in a checkpoint: executor
// step count, local steps, rounds, bytes sent, then the simulated clocks.
std::vector<double> tally(const Executor &ex, const ReplicaReport &rep) {
  std::vector<double> t = {static_cast<double>(ex.stepCount()),
                           static_cast<double>(rep.localSteps), static_cast<double>(rep.rounds),
                           rep.bytesSent};
  t.insert(t.end(), rep.simTime.begin(), rep.simTime.end());
  return t;
}

std::string joinNumbers(const std::vector<double> &v) {
  std::string s;
  char b[40];
  for (double x : v) {
    std::snprintf(b, sizeof b, "%.17g", x);
    s += (s.empty() ? "" : ",") + std::string(b);
  }
  return s;
}
std::vector<double> splitNumbers(const std::string &s) {
  std::vector<double> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    v.push_back(std::strtod(item.c_str(), nullptr));
  return v;
}
std::string joinSteps(const std::vector<int64_t> &H) {
  std::string s;
  for (int64_t h : H)
    s += (s.empty() ? "" : ",") + std::to_string(h);
  return s;
}
} // namespace


GossipResult runGossipRank(const Graph &graph, DataSource &data, const GossipOptions &opt,
                           Communicator &comm) {
  if (graph.outer.empty())
    throw std::runtime_error("the graph has no outer phase; compile it with train-gossip");
  const int R = comm.size(), r = comm.rank();
  const int planned = static_cast<int>(opt.replicas > 0 ? opt.replicas : graph.outerLoop.replicas);
  if (planned != R)
    throw std::runtime_error("the plan has " + std::to_string(planned) +
                             " gossip replicas but the run " + std::to_string(R) +
                             " ranks: a gossip/DiLoCo plan runs one rank per replica");
  std::vector<int64_t> H = localStepsPerReplica(graph, opt, R);
  Topology topo = parseTopology(!opt.topology.empty() ? opt.topology
                                : graph.outerLoop.topology.empty() ? std::string("complete")
                                                                   : graph.outerLoop.topology);
  if (opt.rounds < 1)
    throw std::runtime_error("gossip needs at least one round, got " + std::to_string(opt.rounds));
  if (opt.resume && opt.outDir.empty())
    throw std::runtime_error("--resume needs an output directory holding checkpoint.bin");
  const size_t NN = opt.networks.size();
  GossipResult result;
  result.replicas.assign(R, ReplicaReport());
  ReplicaReport &rep = result.replicas[r];
  rep.simTime.assign(NN, 0.0);
  std::vector<bool> dead(R, false);
  const std::vector<bool> everyone(R, true);
  bool allReduceBroken = false; // DiLoCo: exchange pairwise after a failure
  int64_t pairwiseFrom = 0;      // ... from this (round << 20 | node) on
  auto drop = [&](int j, int64_t round, const std::string &why) {
    if (dead[j])
      return;
    if (opt.stopOnPeerFailure)
      throw std::runtime_error(why + " (--on-peer-failure=continue drops a failed replica and "
                                     "finishes the run)");
    dead[j] = true;
    result.replicas[j].dead = true;
    result.replicas[j].diedAtRound = round;
    result.replicas[j].error = why;
    std::fprintf(stderr, "replica %d: dropping replica %d in round %lld: %s\n", r, j,
                   (long long)round + 1, why.c_str());
  };

  std::unique_ptr<Executor> exPtr = makeExecutor(graph, opt);
  Executor &ex = *exPtr;
  ex.initialize(opt.distinctInit ? opt.seed + static_cast<uint64_t>(r) : opt.seed);
  applyInitParameters(ex, graph, opt.initParams);
  std::unique_ptr<Executor> evalEx = r == 0 ? makeExecutor(graph, opt) : nullptr;
  int64_t k = 0, totalSteps = 0, start = 0;
  double totalBytes = 0;
  const size_t nStates = stateElements(graph), nTally = 4 + NN;

  // Checkpoints: every replica writes its own file (rankCheckpointPath) at
  // the end of a checkpoint round, before its report of that round; rank 0
  // writes its own once the reports of the round are in, naming the replicas
  // that sent them ("gossip.live"). Rank 0's newest file is thus the newest
  // complete checkpoint; a replica removes its older files when rank 0 has
  // acknowledged the round.
  const std::map<std::string, std::string> runMeta = {{"gossip.replicas", std::to_string(R)},
                                                      {"gossip.topology", topologyName(topo)},
                                                      {"gossip.local_steps", joinSteps(H)},
                                                      {"data.order", kDataOrder}};
  auto ownStates = [&] {
    std::map<std::string, HostTensor> st;
    for (const StateDecl &s : graph.states)
      st.emplace(s.name, ex.getState(s.name));
    return st;
  };
  auto metaOf = [](const Checkpoint &c, const std::string &path, const std::string &key) {
    auto it = c.meta.find(key);
    if (it == c.meta.end())
      throw std::runtime_error(path + ": not a gossip checkpoint (no '" + key +
                               "'; a single-process or pipelined run wrote it?)");
    return it->second;
  };
  // The file is this run's: replicas, topology, local steps and seed.
  auto checkRun = [&](const Checkpoint &c, const std::string &path) {
    if (metaOf(c, path, "gossip.replicas") != std::to_string(R))
      throw std::runtime_error(path + ": the checkpoint was written by a run of " +
                               metaOf(c, path, "gossip.replicas") + " replicas; this run has " +
                               std::to_string(R) + " (resume with the same replicas)");
    if (metaOf(c, path, "gossip.topology") != topologyName(topo) ||
        metaOf(c, path, "gossip.local_steps") != joinSteps(H))
      throw std::runtime_error(path + ": the checkpoint's topology " +
                               metaOf(c, path, "gossip.topology") + " and local steps " +
                               metaOf(c, path, "gossip.local_steps") + " differ from this run's " +
                               topologyName(topo) + " and " + joinSteps(H));
    if (c.seed != opt.seed)
      throw std::runtime_error(path + ": the checkpoint was written with seed " +
                               std::to_string(c.seed) + ", this run has seed " +
                               std::to_string(opt.seed));
    std::string note = dataOrderNote(c, path, opt.microBatches);
    if (r == 0 && !note.empty())
      std::cerr << note << "\n";
  };

  // --resume. Rank 0's newest file gives the round and who was live; it
  // goes to everyone as [status, rounds done, total steps, total bytes,
  // live mask]: status 1 resume, 2 the run already finished, 0 rank 0 could
  // not read its checkpoint (everyone stops).
  if (opt.resume) {
    std::vector<double> header(4 + static_cast<size_t>(R), 0.0);
    std::string error;
    std::optional<Checkpoint> own;
    if (r == 0) {
      try {
        std::vector<int64_t> steps = rankCheckpointSteps(opt.outDir, 0);
        if (steps.empty())
          throw std::runtime_error(opt.outDir +
                                   ": no checkpoint of rank 0 (checkpoint-rank0-step<N>.bin)");
        const std::string path = rankCheckpointPath(opt.outDir, 0, steps.front());
        own = loadRankCheckpoint(opt.outDir, 0, steps.front(), graph.states);
        checkRun(*own, path);
        header[1] = static_cast<double>(own->step);
        header[2] = std::strtod(metaOf(*own, path, "gossip.total_steps").c_str(), nullptr);
        header[3] = std::strtod(metaOf(*own, path, "gossip.total_bytes").c_str(), nullptr);
        for (double j : splitNumbers(metaOf(*own, path, "gossip.live")))
          if (j >= 0 && j < R)
            header[4 + static_cast<size_t>(j)] = 1.0;
        if (header[4] != 1.0)
          throw std::runtime_error(path + ": rank 0 is not among the live replicas it lists");
        header[0] = own->step >= opt.rounds ? 2.0 : 1.0;
      } catch (const std::exception &e) {
        error = e.what();
        header[0] = 0.0;
      }
    }
    comm.broadcast(header.data(), header.size() * sizeof(double), 0);
    if (header[0] == 0.0)
      throw std::runtime_error(r == 0 ? error
                                      : "rank 0 could not resume from its checkpoint (its log "
                                        "says why)");
    start = static_cast<int64_t>(header[1]);
    result.startRound = start;
    if (header[0] == 2.0) {
      result.finished = true;
      return result;
    }
    totalSteps = static_cast<int64_t>(header[2]);
    totalBytes = header[3];
    auto live = [&](int j) { return header[4 + static_cast<size_t>(j)] == 1.0; };
    int firstLive = 0;
    while (!live(firstLive))
      ++firstLive;
    // Every replica live at that round reads its own file (on its own
    // machine's disk); the ranks agree that all could before going on.
    std::vector<double> states, t;
    std::vector<double> ok(static_cast<size_t>(R), 0.0);
    try {
      if (live(r)) {
        if (r != 0) {
          own = loadRankCheckpoint(opt.outDir, r, start, graph.states);
          checkRun(*own, rankCheckpointPath(opt.outDir, r, start));
        }
        for (const StateDecl &s : graph.states) {
          const HostTensor &v = own->states.at(s.name);
          states.insert(states.end(), v.data.begin(), v.data.end());
        }
        t = splitNumbers(metaOf(*own, rankCheckpointPath(opt.outDir, r, start), "gossip.tally"));
        if (t.size() != nTally)
          throw std::runtime_error(rankCheckpointPath(opt.outDir, r, start) +
                                   ": the replica's counters have " + std::to_string(t.size()) +
                                   " entries, expected " + std::to_string(nTally));
      }
      ok[static_cast<size_t>(r)] = 1.0;
    } catch (const std::exception &e) {
      error = e.what();
    }
    comm.allReduceSum(ok.data(), ok.size());
    for (int j = 0; j < R; ++j)
      if (ok[static_cast<size_t>(j)] != 1.0)
        throw std::runtime_error(j == r ? error
                                        : "replica " + std::to_string(j) +
                                              " could not read its checkpoint (its log says why)");
    // A replica dropped before that round comes back with the first live
    // replica's state, and its own counters restarted.
    if (r == firstLive) {
      for (int j = 0; j < R; ++j)
        if (!live(j)) {
          comm.isend(j, kResumeTag | 1, WireType::F64, states.data(), states.size())->wait();
          comm.isend(j, kResumeTag | 2, WireType::F64, t.data(), t.size())->wait();
        }
    }
    if (r == 0)
      for (int j = 0; j < R; ++j)
        if (!live(j))
          std::printf("replica %d was not in the checkpoint (dropped in an earlier run); it "
                      "resumes from replica %d's state\n",
                      j, firstLive);
    if (!live(r)) {
      states.resize(nStates);
      t.resize(nTally);
      comm.recv(firstLive, kResumeTag | 1, WireType::F64, states.data(), states.size());
      comm.recv(firstLive, kResumeTag | 2, WireType::F64, t.data(), t.size());
      t[0] = t[1] = static_cast<double>(start * H[r]);
      t[3] = 0;
    }
    restoreStates(graph, ex, states);
    ex.setStepCount(static_cast<int64_t>(t[0]));
    rep.localSteps = static_cast<int64_t>(t[1]);
    rep.rounds = static_cast<int64_t>(t[2]);
    rep.bytesSent = t[3];
    rep.simTime.assign(t.begin() + 4, t.end());
    k = start * H[r] * opt.microBatches;
  }

  struct Report { // to rank 0, with its acknowledgement
    std::unique_ptr<int64_t> ackValue;
    std::unique_ptr<Request> ack;
    std::vector<std::unique_ptr<Request>> sends;
    int64_t checkpoint = -1; // rounds done, when the replica wrote its file
  };
  std::vector<Report> reports;                    // oldest first
  std::vector<std::pair<int, std::unique_ptr<Request>>> acks; // rank 0's
  int64_t stopAt = -1; // the round after which everyone stops (a Ctrl-C)
  auto learnAck = [&](int64_t v) {
    if (v >= 0 && (stopAt < 0 || v < stopAt))
      stopAt = v;
  };
  for (int64_t round = start; round < opt.rounds; ++round) {
    bool killed = false;
    for (auto [victim, at] : opt.kills)
      killed |= victim == r && at == round;
    if (killed) { // a planned failure (tests): this replica stops here
      rep.dead = true;
      rep.diedAtRound = round;
      return result;
    }
    double loss = 0, bytesBefore = rep.bytesSent;
    int64_t losses = 0;
    for (int64_t s = 0; s < H[r]; ++s) {
      double stepLoss = 0;
      for (int64_t m = 0; m < opt.microBatches; ++m) {
        // Replica r's local step L is step L·R + r of the data, in parts.
        const int64_t local = k / opt.microBatches;
        stepLoss += ex.microStep(data.batch(Split::Train, static_cast<uint64_t>(local * R + r),
                                            k % opt.microBatches))
                        .outputs.at(0);
        ++k;
        ++losses;
      }
      // A diverged replica stops the run (it is not a fault to tolerate):
      // before the update on a non-finite loss, after it on a non-finite
      // state (a finite loss can hide one).
      if (!std::isfinite(stepLoss))
        throw Diverged("replica " + std::to_string(r) + ": the local loss is " +
                       std::to_string(stepLoss) + " in round " + std::to_string(round + 1));
      ex.update();
      if (std::string bad = ex.nonFiniteState(); !bad.empty())
        throw Diverged("replica " + std::to_string(r) + ": after a local update in round " +
                       std::to_string(round + 1) + ", state " + bad);
      loss += stepLoss;
      ++rep.localSteps;
      for (size_t n = 0; n < NN; ++n)
        rep.simTime[n] += opt.networks[n].stepCost(r) * static_cast<double>(opt.microBatches);
    }

    // The round's exchanges, with the peers of the draw over every replica.
    std::vector<std::vector<int>> draw = drawPeers(topo, everyone, graph.outerLoop.seed, round);
    if (result.peers.size() <= static_cast<size_t>(round))
      result.peers.resize(round + 1);
    result.peers[round] = draw;
    const std::vector<int> &peers = draw[r];
    std::vector<double> ready = rep.simTime;
    std::vector<std::vector<double>> peerReady(peers.size());
    std::vector<bool> answered(peers.size(), false);
    double roundBytes = 0;
    int node = 0;
    ex.setCollective([&](const Node &node0, const HostTensor &z) {
      // Values travel in the executor's element type (an f64 reference run
      // computes f32-declared nodes in f64).
      Node n = node0;
      if (!opt.executorFactory && !opt.compiled && opt.precision == Precision::F64)
        n.dtype = DType::F64;
      roundBytes += static_cast<double>(z.data.size() * elementBytes(node0.dtype));
      // DiLoCo (the complete graph, everyone alive): one all-reduce. With
      // every degree n−1 the mixing weight is 1/n, so
      // z_i − α Σ_j (z_i − z_j)/n = z_i − (α/n)(n z_i − Σ_all z), the pairwise
      // formula summed in another order (the in-process runtime's result to
      // rounding). A failed all-reduce falls back to pairwise exchanges for
      // the rest of the run, which find the replica that died.
      const int n_ = static_cast<int>(peers.size()) + 1;
      if (topo == Topology::Complete && !allReduceBroken &&
          std::none_of(dead.begin(), dead.end(), [](bool d) { return d; })) {
        try {
          // Summed in f64 even for an f32 model: n·z_i − Σz is a small
          // difference of large sums, and an f32 sum lost 4e-3 relative.
          std::vector<double> sum = z.data;
          comm.allReduceSum(sum.data(), sum.size());
          std::vector<double> when(static_cast<size_t>(R) * NN, 0.0);
          for (size_t k = 0; k < NN; ++k)
            when[static_cast<size_t>(r) * NN + k] = ready[k];
          comm.allReduceSum(when.data(), when.size());
          for (size_t p = 0; p < peers.size(); ++p) {
            peerReady[p].assign(when.begin() + static_cast<long>(peers[p]) * NN,
                                when.begin() + static_cast<long>(peers[p] + 1) * NN);
            answered[p] = true;
          }
          double w = n.floats.at(0) * mixingWeight(peers.size(), peers.size());
          HostTensor mixed = z;
          for (size_t e = 0; e < mixed.data.size(); ++e)
            mixed.data[e] -= w * (static_cast<double>(n_) * z.data[e] - sum[e]);
          if (opt.onMix)
            opt.onMix(r, round, node, z, mixed);
          ++node;
          return mixed;
        } catch (const CommError &e) {
          if (opt.stopOnPeerFailure)
            throw std::runtime_error(std::string(e.what()) +
                                     " (--on-peer-failure=continue finishes with the survivors)");
          allReduceBroken = true;
          // A ring all-reduce can complete on some survivors and fail on
          // others: they fail at this node or the next. The survivors agree
          // on the last failing node, mix nothing before it, and exchange
          // pairwise from there, so no one waits for a message of a node a
          // peer already mixed. Every survivor fails at its next all-reduce
          // (the dead rank never joins), so every one sends its position.
          int64_t mine = (int64_t(round) << 20) | node;
          std::vector<int64_t> theirs(static_cast<size_t>(R), -1);
          std::vector<std::pair<int, std::unique_ptr<Request>>> asks, tells;
          for (int j = 0; j < R; ++j)
            if (j != r && !dead[j])
              try {
                asks.emplace_back(j, comm.irecv(j, kFallbackTag, WireType::I64, &theirs[j], 1));
                tells.emplace_back(j, comm.isend(j, kFallbackTag, WireType::I64, &mine, 1));
              } catch (const CommError &err) {
                drop(j, round, err.what());
              }
          pairwiseFrom = mine;
          for (auto &[j, q] : asks)
            if (!dead[j])
              try {
                q->wait();
                pairwiseFrom = std::max(pairwiseFrom, theirs[static_cast<size_t>(j)]);
              } catch (const CommError &err) {
                drop(j, round, err.what());
              }
          for (auto &[j, q] : tells)
            if (!dead[j])
              try {
                q->wait();
              } catch (const CommError &err) {
                drop(j, round, err.what());
              }
          std::fprintf(stderr, "replica %d: the all-reduce failed (%s); exchanging pairwise "
                               "from round %lld, node %lld on\n",
                       r, e.what(), (long long)(pairwiseFrom >> 20) + 1,
                       (long long)(pairwiseFrom & ((1 << 20) - 1)));
        }
      }
      if (allReduceBroken && ((int64_t(round) << 20) | node) < pairwiseFrom) {
        // Before the agreed node: this replica's value stays unmixed.
        if (opt.onMix)
          opt.onMix(r, round, node, z, z);
        ++node;
        return z;
      }
      std::vector<double> meta = {static_cast<double>(peers.size())};
      meta.insert(meta.end(), ready.begin(), ready.end());
      // Receives are posted before the sends: a posted receive notices a
      // peer that died at once (a send alone would wait out the timeout).
      struct Incoming {
        size_t p;
        HostTensor value;
        std::vector<float> f32;
        std::vector<double> meta;
        std::unique_ptr<Request> v, m;
      };
      std::vector<Incoming> incoming;
      incoming.reserve(peers.size());
      const size_t count = z.data.size();
      for (size_t p = 0; p < peers.size(); ++p) {
        int j = peers[p];
        if (dead[j])
          continue;
        Incoming in;
        in.p = p;
        in.meta.resize(1 + NN);
        incoming.push_back(std::move(in));
        Incoming &q = incoming.back();
        try {
          if (n.dtype == DType::F64) {
            q.value.data.resize(count);
            q.v = comm.irecv(j, mixTag(round, node, 0), WireType::F64, q.value.data.data(), count);
          } else {
            q.f32.resize(count);
            q.v = comm.irecv(j, mixTag(round, node, 0), WireType::F32, q.f32.data(), count);
          }
          q.m = comm.irecv(j, mixTag(round, node, 1), WireType::F64, q.meta.data(), q.meta.size());
        } catch (const CommError &e) {
          drop(j, round, e.what());
        }
      }
      std::vector<std::unique_ptr<Request>> sends;
      std::vector<int> sentTo;
      for (int j : peers) {
        if (dead[j])
          continue;
        try {
          sends.push_back(sendTensor(comm, j, mixTag(round, node, 0), z, n.dtype));
          sends.push_back(comm.isend(j, mixTag(round, node, 1), WireType::F64, meta.data(),
                                     meta.size()));
          sentTo.push_back(j);
          sentTo.push_back(j);
        } catch (const CommError &e) {
          drop(j, round, e.what());
        }
      }
      std::vector<HostTensor> got;
      std::vector<size_t> degrees;
      got.reserve(peers.size());
      for (Incoming &q : incoming) {
        int j = peers[q.p];
        if (dead[j] || !q.v || !q.m)
          continue;
        try {
          q.v->wait();
          q.m->wait();
          HostTensor v;
          v.shape = z.shape;
          if (n.dtype == DType::F64)
            v.data = std::move(q.value.data);
          else
            v.data.assign(q.f32.begin(), q.f32.end());
          got.push_back(std::move(v));
          degrees.push_back(static_cast<size_t>(q.meta[0]));
          peerReady[q.p].assign(q.meta.begin() + 1, q.meta.end());
          answered[q.p] = true;
        } catch (const CommError &e) {
          drop(j, round, e.what());
        }
      }
      for (size_t q = 0; q < sends.size(); ++q) {
        if (dead[sentTo[q]])
          continue;
        try {
          sends[q]->wait();
        } catch (const CommError &e) {
          drop(sentTo[q], round, e.what());
        }
      }
      std::vector<std::pair<const HostTensor *, size_t>> inputs;
      for (size_t q = 0; q < got.size(); ++q)
        inputs.emplace_back(&got[q], degrees[q]);
      HostTensor mixed = gossipMix(z, peers.size(), inputs, n.floats.at(0));
      if (opt.onMix)
        opt.onMix(r, round, node, z, mixed);
      ++node;
      return mixed;
    });
    ex.outerStep();
    ex.setCollective(nullptr);

    advanceClocks(rep, r, topo, peers, answered, peerReady, ready, roundBytes, opt);
    ++rep.rounds;
    std::vector<double> flat = flattenParams(graph, ex);
    if (opt.onRoundEnd)
      opt.onRoundEnd(r, round, unflattenParams(graph, flat));

    // The round's report to rank 0; at evaluation rounds the parameters
    // too. At checkpoint rounds the replica's file is written first.
    const bool stopRequested = opt.stopRequested && opt.stopRequested->load();
    if (r != 0) {
      // Each report's acknowledgement is received before its send is
      // waited for: a receive notices a dead rank 0 at once, where a send
      // would wait out the timeout.
      while (reports.size() >= kAckWindow && !dead[0]) {
        Report &old = reports.front();
        try {
          old.ack->wait();
          learnAck(*old.ackValue);
          for (auto &q : old.sends)
            q->wait();
          if (old.checkpoint > 0) // rank 0 holds this round's checkpoint
            removeRankCheckpointsBefore(opt.outDir, r, old.checkpoint);
        } catch (const CommError &e) {
          drop(0, round, e.what());
        }
        reports.erase(reports.begin());
      }
    }
    const bool lastRound = round + 1 == opt.rounds || round == stopAt;
    const bool evalRound = opt.evalInterval > 0 &&
                           ((round + 1) % opt.evalInterval == 0 || lastRound);
    const bool paramsRound = evalRound || lastRound || opt.consensusEveryRound;
    const bool ckptRound = !opt.outDir.empty() &&
                           (lastRound || (opt.checkpointInterval > 0 &&
                                          (round + 1) % opt.checkpointInterval == 0));
    std::vector<double> mine = {losses ? loss / static_cast<double>(losses) : 0.0,
                                static_cast<double>(H[r]), rep.bytesSent - bytesBefore,
                                stopRequested ? 1.0 : 0.0};
    mine.insert(mine.end(), rep.simTime.begin(), rep.simTime.end());
    if (r != 0) {
      if (!dead[0]) {
        try {
          Report rp;
          if (ckptRound) {
            std::map<std::string, std::string> meta = runMeta;
            meta["gossip.tally"] = joinNumbers(tally(ex, rep));
            saveRankCheckpoint(opt.outDir, r, round + 1, opt.seed, ownStates(), opt.precision,
                               meta);
            rp.checkpoint = round + 1;
          }
          rp.ackValue = std::make_unique<int64_t>(-1);
          rp.ack = comm.irecv(0, kAckTag | uint64_t(round), WireType::I64, rp.ackValue.get(), 1);
          rp.sends.push_back(comm.isend(0, kReportTag | uint64_t(round), WireType::F64,
                                        mine.data(), mine.size()));
          if (paramsRound)
            rp.sends.push_back(comm.isend(0, kParamTag | uint64_t(round), WireType::F64,
                                          flat.data(), flat.size()));
          reports.push_back(std::move(rp));
        } catch (const CommError &e) {
          drop(0, round, e.what());
        }
      }
      if (round == stopAt) {
        result.stoppedAfter = round;
        break;
      }
      continue;
    }
    RoundReport rr;
    rr.round = round;
    double lossSum = mine[0], steps = mine[1], bytes = mine[2];
    bool stopNow = stopRequested;
    rr.simTime.assign(rep.simTime.begin(), rep.simTime.end());
    std::vector<std::vector<double>> params = {flat};
    std::map<std::string, std::string> ckptMeta; // checkpoint rounds: rank 0's file
    std::map<std::string, HostTensor> ckptStates;
    if (ckptRound) {
      ckptMeta = runMeta;
      ckptMeta["gossip.tally"] = joinNumbers(tally(ex, rep));
      ckptStates = ownStates();
    }
    std::vector<int> reported;
    for (int j = 1; j < R; ++j) {
      if (dead[j])
        continue;
      try {
        std::vector<double> v(mine.size());
        comm.recv(j, kReportTag | uint64_t(round), WireType::F64, v.data(), v.size());
        lossSum += v[0];
        steps += v[1];
        bytes += v[2];
        stopNow |= v[3] != 0.0;
        for (size_t n = 0; n < NN; ++n)
          rr.simTime[n] = std::max(rr.simTime[n], v[4 + n]);
        if (paramsRound) {
          std::vector<double> p(flat.size());
          comm.recv(j, kParamTag | uint64_t(round), WireType::F64, p.data(), p.size());
          params.push_back(std::move(p));
        }
        reported.push_back(j);
      } catch (const CommError &e) {
        drop(j, round, e.what());
      }
    }
    // One decision for everyone, sent with every acknowledgement of the
    // round: a replica learns it at the latest at the end of round
    // round + kAckWindow, which is where everyone stops.
    if (stopNow && stopAt < 0)
      stopAt = std::min<int64_t>(round + static_cast<int64_t>(kAckWindow), opt.rounds - 1);
    const int live = 1 + static_cast<int>(reported.size());
    rr.live = live;
    rr.loss = lossSum / live;
    totalSteps += static_cast<int64_t>(steps);
    totalBytes += bytes;
    rr.localSteps = totalSteps;
    rr.bytes = totalBytes;
    rr.consensus = -1;
    // Every replica that reported has written its file: rank 0's completes
    // the checkpoint, before any acknowledgement lets one remove an older.
    if (ckptRound) {
      ckptMeta["gossip.live"] = "0";
      for (int j : reported)
        ckptMeta["gossip.live"] += "," + std::to_string(j);
      ckptMeta["gossip.total_steps"] = std::to_string(totalSteps);
      ckptMeta["gossip.total_bytes"] = joinNumbers({totalBytes});
      saveRankCheckpoint(opt.outDir, 0, round + 1, opt.seed, ckptStates, opt.precision, ckptMeta);
      removeRankCheckpointsBefore(opt.outDir, 0, round + 1);
      result.checkpointRound = round;
    }
    for (int j : reported) {
      int64_t v = stopAt;
      acks.emplace_back(j, comm.isend(j, kAckTag | uint64_t(round), WireType::I64, &v, 1));
    }
    if (paramsRound) {
      std::vector<double> mean(flat.size(), 0.0);
      for (const auto &p : params)
        for (size_t e = 0; e < mean.size(); ++e)
          mean[e] += p[e];
      for (double &v : mean)
        v /= static_cast<double>(params.size());
      double consensus = 0;
      for (const auto &p : params)
        for (size_t e = 0; e < mean.size(); ++e)
          consensus += (p[e] - mean[e]) * (p[e] - mean[e]);
      rr.consensus = consensus / static_cast<double>(params.size());
      if (evalRound) {
        for (auto &[name, t] : unflattenParams(graph, mean))
          evalEx->setState(name, t);
        double sum = 0;
        for (int64_t b = 0; b < opt.evalBatches; ++b)
          for (int64_t p = 0; p < opt.microBatches; ++p)
            sum += evalEx->evaluate(data.batch(Split::Val, static_cast<uint64_t>(b), p))
                       .outputs.at(0);
        rr.valLoss = sum / static_cast<double>(opt.evalBatches * opt.microBatches);
      }
      result.meanParams = unflattenParams(graph, mean);
    }
    result.rounds.push_back(rr);
    if (opt.onRound)
      opt.onRound(rr);
    if (round == stopAt) {
      result.stoppedAfter = round;
      break;
    }
  }
  for (Report &rp : reports) {
    if (dead[0])
      break;
    try {
      rp.ack->wait();
      for (auto &q : rp.sends)
        q->wait();
      if (rp.checkpoint > 0)
        removeRankCheckpointsBefore(opt.outDir, r, rp.checkpoint);
    } catch (const CommError &e) {
      drop(0, opt.rounds - 1, e.what());
    }
  }
  for (auto &[j, q] : acks)
    if (!dead[j])
      try {
        q->wait();
      } catch (const CommError &) {
      }
  return result;
}

// The synchronous baseline

GossipResult runDataParallel(const Graph &graph, DataSource &data, int R, int64_t steps,
                             const GossipOptions &opt) {
  if (R < 1)
    throw std::runtime_error("data parallelism needs at least one replica");
  std::unique_ptr<Executor> exPtr = makeExecutor(graph, opt);
  Executor &ex = *exPtr;
  ex.initialize(opt.seed);
  applyInitParameters(ex, graph, opt.initParams);
  double gradBytes = 0;
  for (const StateDecl &s : graph.states)
    if (s.isParam)
      gradBytes += static_cast<double>(numElements(s.shape) * elementBytes(s.dtype));
  std::vector<int> all(R);
  for (int r = 0; r < R; ++r)
    all[r] = r;
  GossipResult result;
  result.replicas.assign(R, ReplicaReport());
  std::vector<double> clock(opt.networks.size(), 0.0);
  double bytes = 0;
  for (int64_t t = 0; t < steps; ++t) {
    double loss = 0;
    for (int r = 0; r < R; ++r)
      loss += ex.microStep(data.batch(Split::Train, static_cast<uint64_t>(t * R + r), 0))
                  .outputs.at(0);
    ex.update();
    for (size_t n = 0; n < clock.size(); ++n) {
      double slowest = 0;
      for (int r = 0; r < R; ++r)
        slowest = std::max(slowest, opt.networks[n].stepCost(r));
      clock[n] += slowest + allReduceTime(opt.networks[n], all, gradBytes);
    }
    if (R > 1)
      bytes += R * 2.0 * (R - 1) / R * gradBytes;
    RoundReport rep;
    rep.round = t;
    rep.live = R;
    rep.loss = loss / R;
    rep.localSteps = (t + 1) * R;
    rep.bytes = bytes;
    rep.simTime = clock;
    if (opt.evalInterval > 0 && ((t + 1) % opt.evalInterval == 0 || t + 1 == steps)) {
      double sum = 0;
      for (int64_t b = 0; b < opt.evalBatches; ++b)
        sum += ex.evaluate(data.batch(Split::Val, static_cast<uint64_t>(b), 0)).outputs.at(0);
      rep.valLoss = sum / static_cast<double>(opt.evalBatches);
    }
    result.rounds.push_back(rep);
    if (opt.onRound)
      opt.onRound(rep);
  }
  for (int r = 0; r < R; ++r) {
    result.replicas[r].localSteps = steps;
    result.replicas[r].rounds = steps;
    result.replicas[r].bytesSent = R > 1 ? steps * 2.0 * (R - 1) / R * gradBytes : 0;
    result.replicas[r].simTime = clock;
  }
  for (const StateDecl &s : graph.states)
    if (s.isParam)
      result.meanParams[s.name] = ex.getState(s.name);
  return result;
}

// stretto-train's driver

namespace {
std::atomic<bool> gGossipStop{false};
std::string scientific(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}
std::string megabytes(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  return buf;
}
} // namespace

int runGossipTraining(const Graph &graph, DataSource &data, const GossipOptions &options,
                      bool quiet, Communicator *comm) {
  try {
    GossipOptions opt = options;
    const bool lead = !comm || comm->rank() == 0; // prints and writes
    quiet = quiet || !lead;
    std::ofstream metrics;
    const std::string files = opt.outDir + "/checkpoint-rank*-step";
    if (!opt.outDir.empty()) {
      // Every replica writes its own checkpoint files there.
      prepareOutputDirectory(opt.outDir);
      if (!opt.resume)
        refuseExistingCheckpoint(opt.outDir, comm ? comm->rank() : -1);
    }
    if (lead && !opt.outDir.empty()) {
      const std::string path = opt.outDir + "/metrics.jsonl";
      const std::vector<int64_t> done0 = rankCheckpointSteps(opt.outDir, 0);
      if (opt.resume && !done0.empty()) {
        // Lines past the checkpoint's round (written before a crash) go:
        // the resumed run writes them again.
        int64_t done = done0.front();
        std::ifstream in(path);
        std::string line, kept;
        while (std::getline(in, line)) {
          long long round = 0;
          if (std::sscanf(line.c_str(), "{\"round\": %lld", &round) == 1 && round > done)
            continue;
          kept += line + "\n";
        }
        writeFileAtomically(path, kept);
      }
      metrics.open(path, opt.resume ? std::ios::app : std::ios::trunc);
      if (!metrics)
        throw std::runtime_error("cannot write " + path);
    }
    const OuterLoop &loop = graph.outerLoop;
    if (!opt.initFrom.empty() && opt.initParams.empty()) {
      opt.initParams = loadInitParameters(opt.initFrom, graph);
      if (!quiet)
        std::cout << "initialised " << opt.initParams.size() << " parameters of every replica from "
                  << opt.initFrom << "\n";
    }
    if (!quiet) {
      std::cout << "gossip: " << (opt.replicas > 0 ? opt.replicas : loop.replicas)
                << " replicas, topology "
                << (opt.topology.empty() ? loop.topology : opt.topology) << ", local steps";
      for (int64_t h : opt.localSteps.empty() ? loop.localSteps : opt.localSteps)
        std::cout << " " << h;
      std::cout << ", " << opt.rounds << " rounds; simulated clock: " << opt.networks[0].name
                << " network\n"
                << std::flush;
    }
    auto t0 = std::chrono::steady_clock::now();
    opt.onRound = [&](const RoundReport &r) {
      if (metrics.is_open()) {
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "{\"round\": %lld, \"loss\": %.17g, \"live\": %d, \"bytes\": %.17g, "
                      "\"sim_time\": %.17g%s",
                      (long long)r.round + 1, r.loss, r.live, r.bytes,
                      r.simTime.empty() ? 0.0 : r.simTime[0], "");
        metrics << buf;
        std::snprintf(buf, sizeof buf, ", \"elapsed_s\": %.3f",
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        metrics << buf;
        if (r.consensus >= 0)
          metrics << ", \"consensus\": " << r.consensus;
        if (r.valLoss >= 0) {
          std::snprintf(buf, sizeof buf, ", \"val_loss\": %.17g", r.valLoss);
          metrics << buf;
        }
        metrics << "}\n" << std::flush;
      }
      if (quiet)
        return;
      char line[256];
      std::snprintf(line, sizeof line,
                    "round %4lld/%lld | loss %.4f | consensus %s | sim %.2f s | sent %s | live %d",
                    (long long)r.round + 1, (long long)opt.rounds, r.loss,
                    r.consensus >= 0 ? scientific(r.consensus).c_str() : "-",
                    r.simTime.empty() ? 0.0 : r.simTime[0], megabytes(r.bytes).c_str(), r.live);
      std::cout << line;
      if (r.valLoss >= 0) {
        std::snprintf(line, sizeof line, " | val %.4f", r.valLoss);
        std::cout << line;
      }
      std::cout << "\n" << std::flush;
    };
    // Ctrl-C and SIGTERM (a launcher forwards both) stop every replica
    // after the same round, with a checkpoint.
    gGossipStop = false;
    opt.stopRequested = &gGossipStop;
    GossipResult res;
    {
      StopOnSignal stopOnSignal(gGossipStop);
      res = comm ? runGossipRank(graph, data, opt, *comm) : runGossip(graph, data, opt);
    }
    if (res.finished) {
      if (!quiet)
        std::cout << "the run in " << opt.outDir << " already finished: its checkpoint is after "
                  << "round " << res.startRound << " of " << opt.rounds
                  << "; nothing to train (raise train.steps to continue it)\n";
      return 0;
    }
    if (!lead)
      return 0;
    if (!quiet && res.startRound > 0)
      std::cout << "resumed from " << files << res.startRound << ".bin after round "
                << res.startRound << "\n";
    if (!opt.outDir.empty() && !res.meanParams.empty())
      saveModelSafetensors(opt.outDir + "/model.safetensors", graph, res.meanParams);
    if (res.stoppedAfter >= 0 && res.stoppedAfter + 1 < opt.rounds) {
      std::cout << "stopped after round " << res.stoppedAfter + 1 << " of " << opt.rounds;
      if (res.checkpointRound == res.stoppedAfter)
        std::cout << "; checkpoint written to " << files << res.checkpointRound + 1
                  << ".bin (continue with --resume)";
      std::cout << "\n" << std::flush;
      return 130;
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double sent = 0;
    int dead = 0;
    for (size_t r = 0; r < res.replicas.size(); ++r) {
      const ReplicaReport &rep = res.replicas[r];
      sent += rep.bytesSent;
      if (rep.dead) {
        ++dead;
        std::cout << "replica " << r << " died in round " << rep.diedAtRound + 1
                  << (rep.error.empty() ? " (planned kill)" : ": " + rep.error)
                  << "; dropped from later rounds\n";
      }
    }
    if (res.rounds.empty()) {
      std::cerr << "error: no round completed (every replica died)\n";
      return 1;
    }
    if (comm) // rank 0 knows the others' bytes from their round reports only
      sent = res.rounds.back().bytes;
    const RoundReport &first = res.rounds.front(), &last = res.rounds.back();
    std::printf("done: %lld rounds, %lld local steps in %.1f s; train loss %.4f -> %.4f",
                (long long)res.rounds.size(), (long long)last.localSteps, seconds, first.loss,
                last.loss);
    if (last.valLoss >= 0)
      std::printf(", val loss %.4f (mean model)", last.valLoss);
    std::printf("; simulated wall-clock %.2f s; sent %s (%s per replica)", last.simTime[0],
                megabytes(sent).c_str(), megabytes(sent / res.replicas.size()).c_str());
    if (dead)
      std::printf("; %d replica(s) died", dead);
    std::printf("\n");
    std::fflush(stdout);
    return 0;
  } catch (const std::exception &e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

} // namespace stretto

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
