//===- Gossip.cpp - replicas, gossip exchanges and a simulated network ----===//
//
// One thread per replica (replicas wait on their peers, so all must run at
// once), each owning a RefExecutor. The communicator is a mailbox keyed by
// (source, destination, round, tag): sends never block, a receive waits for
// its message or for the sender's death, so a dead replica never hangs its
// peers. The peers of round t are drawn once, by the first replica to reach
// the exchange of round t, over the replicas not known dead at that moment;
// every replica then uses that frozen draw, which keeps the exchanges
// symmetric. Without faults the numerics are deterministic whatever the
// thread timing.
//
// The simulated clock (per network model) is carried on the messages: each
// carries its sender's time when it became ready to exchange; a pairwise
// exchange ends at max(ready_i, ready_j) + latency + bytes / bandwidth_ij. The
// complete graph is charged as a ring all-reduce (2(n−1) steps of bytes/n over
// the slowest ring link), which is what NCCL or Gloo would run, although the
// in-process mailbox moves whole copies.
//
//===----------------------------------------------------------------------===//
#include "stretto/Gossip.h"
#include "stretto/PlanExecutor.h"
#include "stretto/Runtime/Communicator.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
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

//===----------------------------------------------------------------------===//
// Topologies and mixing
//===----------------------------------------------------------------------===//

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

//===----------------------------------------------------------------------===//
// Network model
//===----------------------------------------------------------------------===//

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

struct Message {
  HostTensor value;
  std::vector<double> ready; // sender's simulated time per network
  size_t degree = 0;         // sender's degree in the round's graph
};

/// The in-process communicator: mailboxes, deaths, and the frozen peer draw
/// of each round.
class ReplicaMailbox {
public:
  ReplicaMailbox(int replicas, Topology topology, uint64_t seed)
      : dead(replicas, false), topology(topology), seed(seed) {}

  void send(int src, int dst, int64_t round, int tag, Message m) {
    std::lock_guard<std::mutex> lock(mu);
    box[{src, dst, round, tag}] = std::move(m);
    cv.notify_all();
  }
  /// The message, or nothing when `src` died without sending it.
  std::optional<Message> recv(int dst, int src, int64_t round, int tag) {
    std::unique_lock<std::mutex> lock(mu);
    auto key = std::make_tuple(src, dst, round, tag);
    cv.wait(lock, [&] { return box.count(key) || dead[src]; });
    auto it = box.find(key);
    if (it == box.end())
      return std::nullopt;
    Message m = std::move(it->second);
    box.erase(it);
    return m;
  }
  void markDead(int r) {
    std::lock_guard<std::mutex> lock(mu);
    dead[r] = true;
    cv.notify_all();
  }
  std::vector<std::vector<int>> peers(int64_t round) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = frozen.find(round);
    if (it == frozen.end()) {
      std::vector<bool> alive(dead.size());
      for (size_t i = 0; i < dead.size(); ++i)
        alive[i] = !dead[i];
      it = frozen.emplace(round, drawPeers(topology, alive, seed, round)).first;
    }
    return it->second;
  }
  std::map<int64_t, std::vector<std::vector<int>>> frozenDraws() {
    std::lock_guard<std::mutex> lock(mu);
    return frozen;
  }

private:
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::tuple<int, int, int64_t, int>, Message> box;
  std::vector<bool> dead;
  std::map<int64_t, std::vector<std::vector<int>>> frozen;
  Topology topology;
  uint64_t seed;
};

/// Collects each replica's end-of-round report and closes round t once
/// every replica has either reported it or died before it: consensus,
/// validation of the mean model, progress callback, in round order.
class RoundAggregator {
public:
  RoundAggregator(const Graph &g, DataSource &data, const GossipOptions &opt, int replicas,
                  size_t networks)
      : graph(g), data(data), opt(opt), replicas(replicas), networks(networks),
        diedAt(replicas, -1), evalEx(makeExecutor(g, opt)) {}

  void report(int replica, int64_t round, std::vector<double> params, double loss,
              int64_t steps, double bytes, const std::vector<double> &clock) {
    std::lock_guard<std::mutex> lock(mu);
    Slot &s = slots[round];
    // Kept by replica and summed in replica order when the round closes:
    // the round's figures do not depend on which thread reported first.
    s.params[replica] = std::move(params);
    s.loss[replica] = loss;
    s.bytes[replica] = bytes;
    s.steps += steps;
    s.simTime.resize(networks, 0.0);
    for (size_t k = 0; k < networks; ++k)
      s.simTime[k] = std::max(s.simTime[k], clock[k]);
    closeReady();
  }
  void died(int r, int64_t round) {
    std::lock_guard<std::mutex> lock(mu);
    diedAt[r] = round;
    closeReady();
  }
  std::mutex &dataMutex() { return dataMu; }

  std::vector<RoundReport> rounds;
  std::vector<double> lastMean;

private:
  struct Slot {
    std::map<int, std::vector<double>> params;
    std::map<int, double> loss, bytes;
    int64_t steps = 0;
    std::vector<double> simTime;
  };

  int expected(int64_t round) const {
    int n = 0;
    for (int64_t d : diedAt)
      if (d < 0 || d > round)
        ++n;
    return n;
  }

  void closeReady() {
    while (next < opt.rounds) {
      auto it = slots.find(next);
      int have = it == slots.end() ? 0 : static_cast<int>(it->second.params.size());
      if (have < expected(next))
        return;
      if (have > 0)
        close(next, it->second);
      if (it != slots.end())
        slots.erase(it);
      ++next;
    }
  }

  void close(int64_t round, Slot &s) {
    size_t n = s.params.size(), len = s.params.begin()->second.size();
    std::vector<double> mean(len, 0.0);
    for (const auto &[replica, p] : s.params)
      for (size_t e = 0; e < len; ++e)
        mean[e] += p[e];
    for (double &v : mean)
      v /= static_cast<double>(n);
    double consensus = 0;
    for (const auto &[replica, p] : s.params)
      for (size_t e = 0; e < len; ++e)
        consensus += (p[e] - mean[e]) * (p[e] - mean[e]);
    double lossSum = 0, bytesSum = 0;
    for (const auto &[replica, l] : s.loss)
      lossSum += l;
    for (const auto &[replica, b] : s.bytes)
      bytesSum += b;
    RoundReport r;
    r.round = round;
    r.live = static_cast<int>(n);
    r.loss = lossSum / static_cast<double>(n);
    r.consensus = consensus / static_cast<double>(n);
    totalSteps += s.steps;
    totalBytes += bytesSum;
    r.localSteps = totalSteps;
    r.bytes = totalBytes;
    r.simTime = s.simTime;
    if (opt.evalInterval > 0 && ((round + 1) % opt.evalInterval == 0 || round + 1 == opt.rounds)) {
      for (auto &[name, t] : unflattenParams(graph, mean))
        evalEx->setState(name, t);
      double sum = 0;
      for (int64_t b = 0; b < opt.evalBatches; ++b) {
        std::map<std::string, HostTensor> batch;
        {
          std::lock_guard<std::mutex> lock(dataMu);
          batch = data.batch(Split::Val, static_cast<uint64_t>(b));
        }
        sum += evalEx->evaluate(batch).outputs.at(0);
      }
      r.valLoss = sum / static_cast<double>(opt.evalBatches);
    }
    lastMean = std::move(mean);
    rounds.push_back(r);
    if (opt.onRound)
      opt.onRound(r);
  }

  const Graph &graph;
  DataSource &data;
  const GossipOptions &opt;
  int replicas;
  size_t networks;
  std::vector<int64_t> diedAt;
  std::map<int64_t, Slot> slots;
  int64_t next = 0, totalSteps = 0;
  double totalBytes = 0;
  std::unique_ptr<Executor> evalEx;
  std::mutex mu, dataMu;
};

} // namespace

//===----------------------------------------------------------------------===//
// The gossip run
//===----------------------------------------------------------------------===//

GossipResult runGossip(const Graph &graph, DataSource &data, const GossipOptions &opt) {
  if (graph.outer.empty())
    throw std::runtime_error("the graph has no outer phase; compile it with train-gossip");
  int R = static_cast<int>(opt.replicas > 0 ? opt.replicas : graph.outerLoop.replicas);
  if (R < 1)
    throw std::runtime_error("gossip needs at least one replica, got " + std::to_string(R));
  std::vector<int64_t> H = !opt.localSteps.empty() ? opt.localSteps : graph.outerLoop.localSteps;
  if (H.empty())
    H = {1};
  if (H.size() == 1)
    H.assign(R, H[0]);
  if (static_cast<int>(H.size()) != R)
    throw std::runtime_error("local steps: " + std::to_string(H.size()) + " values for " +
                             std::to_string(R) + " replicas");
  for (int64_t h : H)
    if (h < 0)
      throw std::runtime_error("local steps must be >= 0, got " + std::to_string(h));
  Topology topo = parseTopology(!opt.topology.empty() ? opt.topology
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

  const size_t NN = opt.networks.size();
  ReplicaMailbox comm(R, topo, graph.outerLoop.seed);
  RoundAggregator agg(graph, data, opt, R, NN);
  GossipResult result;
  result.replicas.assign(R, ReplicaReport());
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  std::atomic<bool> stopAll{false};
  auto worker = [&](int r) {
    ReplicaReport &rep = result.replicas[r];
    rep.simTime.assign(NN, 0.0);
    int64_t round = 0;
    try {
      omp_set_num_threads(std::max(1, cores / R)); // per thread: no oversubscription
      std::unique_ptr<Executor> exPtr = makeExecutor(graph, opt);
      Executor &ex = *exPtr;
      ex.initialize(opt.distinctInit ? opt.seed + static_cast<uint64_t>(r) : opt.seed);
      applyInitParameters(ex, graph, opt.initParams);
      int64_t k = 0; // this replica's micro-batch counter
      for (; round < opt.rounds; ++round) {
        if (stopAll)
          throw std::runtime_error("stopped: another replica could not start");
        for (auto [victim, at] : opt.kills)
          if (victim == r && at == round) {
            rep.dead = true;
            rep.diedAtRound = round;
            comm.markDead(r);
            agg.died(r, round);
            return;
          }
        double loss = 0, bytesBefore = rep.bytesSent;
        int64_t losses = 0;
        for (int64_t s = 0; s < H[r]; ++s) {
          for (int64_t m = 0; m < opt.microBatches; ++m) {
            std::map<std::string, HostTensor> batch;
            {
              std::lock_guard<std::mutex> lock(agg.dataMutex());
              batch = data.batch(Split::Train, static_cast<uint64_t>(k * R + r));
            }
            ++k;
            loss += ex.microStep(batch).outputs.at(0);
            ++losses;
          }
          ex.update();
          ++rep.localSteps;
          for (size_t n = 0; n < NN; ++n)
            rep.simTime[n] += opt.networks[n].stepCost(r) * static_cast<double>(opt.microBatches);
        }
        if (!std::isfinite(loss))
          throw std::runtime_error("the local loss is " + std::to_string(loss) + " in round " +
                                   std::to_string(round));

        // The outer round: every gossip_mix node is one exchange with the
        // round's peers. Peers that died are left out of the sum.
        std::vector<std::vector<int>> draw = comm.peers(round);
        const std::vector<int> &peers = draw[r];
        std::vector<double> ready = rep.simTime;
        std::vector<std::vector<double>> peerReady(peers.size());
        std::vector<bool> answered(peers.size(), false);
        double roundBytes = 0;
        int tag = 0;
        ex.setCollective([&](const Node &n, const HostTensor &z) {
          Message mine{z, ready, peers.size()};
          for (int j : peers)
            comm.send(r, j, round, tag, mine);
          roundBytes += static_cast<double>(z.data.size() * elementBytes(n.dtype));
          std::vector<Message> got;
          got.reserve(peers.size());
          std::vector<std::pair<const HostTensor *, size_t>> inputs;
          for (size_t p = 0; p < peers.size(); ++p) {
            std::optional<Message> msg = comm.recv(r, peers[p], round, tag);
            if (!msg)
              continue;
            answered[p] = true;
            peerReady[p] = msg->ready;
            got.push_back(std::move(*msg));
            inputs.emplace_back(&got.back().value, got.back().degree);
          }
          HostTensor mixed = gossipMix(z, peers.size(), inputs, n.floats.at(0));
          if (opt.onMix)
            opt.onMix(r, round, tag, z, mixed);
          ++tag;
          return mixed;
        });
        ex.outerStep();
        ex.setCollective(nullptr);

        advanceClocks(rep, r, topo, peers, answered, peerReady, ready, roundBytes, opt);
        ++rep.rounds;
        std::vector<double> flat = flattenParams(graph, ex);
        if (opt.onRoundEnd)
          opt.onRoundEnd(r, round, unflattenParams(graph, flat));
        agg.report(r, round, std::move(flat), losses ? loss / static_cast<double>(losses) : 0.0,
                   H[r], rep.bytesSent - bytesBefore, rep.simTime);
      }
    } catch (const std::exception &e) {
      rep.dead = true;
      rep.diedAtRound = round;
      rep.error = e.what();
      comm.markDead(r);
      agg.died(r, round);
    }
  };

  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r) {
    try {
      threads.emplace_back(worker, r);
    } catch (const std::system_error &e) {
      // No thread for replica r (the system's thread limit): the replicas
      // that run stop at their next round, and the run fails.
      stopAll = true;
      for (int q = r; q < R; ++q) {
        comm.markDead(q);
        agg.died(q, 0);
      }
      for (std::thread &t : threads)
        t.join();
      throw std::runtime_error("cannot start a thread for gossip replica " + std::to_string(r) +
                               " of " + std::to_string(R) + ": " + e.what());
    }
  }
  for (std::thread &t : threads)
    t.join();

  result.rounds = agg.rounds;
  for (auto &[round, draw] : comm.frozenDraws()) {
    if (round >= static_cast<int64_t>(result.peers.size()))
      result.peers.resize(round + 1);
    result.peers[round] = draw;
  }
  if (!agg.lastMean.empty())
    result.meanParams = unflattenParams(graph, agg.lastMean);
  return result;
}

//===----------------------------------------------------------------------===//
// One replica per process
//===----------------------------------------------------------------------===//

namespace {
// Tags: exchanges by (round, mix node, part); reports and parameters to rank 0.
constexpr uint64_t kMixTag = 0, kReportTag = uint64_t(1) << 45, kParamTag = uint64_t(2) << 45,
                   kAckTag = uint64_t(3) << 45;
uint64_t mixTag(int64_t round, int node, int part) {
  return kMixTag | (uint64_t(round) << 20) | (uint64_t(node) << 2) | uint64_t(part);
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
  std::vector<int64_t> H = !opt.localSteps.empty() ? opt.localSteps : graph.outerLoop.localSteps;
  if (H.empty())
    H = {1};
  if (H.size() == 1)
    H.assign(R, H[0]);
  if (static_cast<int>(H.size()) != R)
    throw std::runtime_error("local steps: " + std::to_string(H.size()) + " values for " +
                             std::to_string(R) + " replicas");
  Topology topo = parseTopology(!opt.topology.empty() ? opt.topology
                                : graph.outerLoop.topology.empty() ? std::string("complete")
                                                                   : graph.outerLoop.topology);
  if (opt.rounds < 1)
    throw std::runtime_error("gossip needs at least one round, got " + std::to_string(opt.rounds));
  const size_t NN = opt.networks.size();
  GossipResult result;
  result.replicas.assign(R, ReplicaReport());
  ReplicaReport &rep = result.replicas[r];
  rep.simTime.assign(NN, 0.0);
  std::vector<bool> dead(R, false);
  const std::vector<bool> everyone(R, true);
  bool allReduceBroken = false; // DiLoCo: exchange pairwise after a failure
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
  int64_t k = 0, totalSteps = 0;
  double totalBytes = 0;
  struct Report { // to rank 0, with its acknowledgement
    std::unique_ptr<int64_t> ackValue;
    std::unique_ptr<Request> ack;
    std::vector<std::unique_ptr<Request>> sends;
  };
  std::vector<Report> reports;                    // oldest first
  std::vector<std::pair<int, std::unique_ptr<Request>>> acks; // rank 0's
  const int64_t one = 1;
  for (int64_t round = 0; round < opt.rounds; ++round) {
    double loss = 0, bytesBefore = rep.bytesSent;
    int64_t losses = 0;
    for (int64_t s = 0; s < H[r]; ++s) {
      for (int64_t m = 0; m < opt.microBatches; ++m) {
        loss += ex.microStep(data.batch(Split::Train, static_cast<uint64_t>(k * R + r)))
                    .outputs.at(0);
        ++k;
        ++losses;
      }
      ex.update();
      ++rep.localSteps;
      for (size_t n = 0; n < NN; ++n)
        rep.simTime[n] += opt.networks[n].stepCost(r) * static_cast<double>(opt.microBatches);
    }
    if (!std::isfinite(loss))
      throw std::runtime_error("the local loss is " + std::to_string(loss) + " in round " +
                               std::to_string(round + 1));

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
          std::fprintf(stderr, "replica %d: the all-reduce failed (%s); exchanging pairwise "
                               "from round %lld on\n",
                       r, e.what(), (long long)round + 1);
        }
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

    // The round's report to rank 0; at evaluation rounds the parameters too.
    const bool evalRound = opt.evalInterval > 0 &&
                           ((round + 1) % opt.evalInterval == 0 || round + 1 == opt.rounds);
    const bool lastRound = round + 1 == opt.rounds;
    std::vector<double> mine = {losses ? loss / static_cast<double>(losses) : 0.0,
                                static_cast<double>(H[r]), rep.bytesSent - bytesBefore};
    mine.insert(mine.end(), rep.simTime.begin(), rep.simTime.end());
    if (r != 0) {
      // Rank 0 may be rounds behind (it evaluates): only reports older than
      // a window are waited for. Each report's acknowledgement is received
      // first: a receive notices a dead rank 0 at once, where a send would
      // wait out the timeout.
      while (reports.size() >= 8) {
        Report &old = reports.front();
        try {
          old.ack->wait();
          for (auto &q : old.sends)
            q->wait();
        } catch (const CommError &e) {
          drop(0, round, e.what());
        }
        reports.erase(reports.begin());
      }
      if (dead[0])
        continue;
      try {
        Report rp;
        rp.ackValue = std::make_unique<int64_t>(0);
        rp.ack = comm.irecv(0, kAckTag | uint64_t(round), WireType::I64, rp.ackValue.get(), 1);
        rp.sends.push_back(comm.isend(0, kReportTag | uint64_t(round), WireType::F64, mine.data(),
                                      mine.size()));
        if (evalRound || lastRound)
          rp.sends.push_back(comm.isend(0, kParamTag | uint64_t(round), WireType::F64,
                                        flat.data(), flat.size()));
        reports.push_back(std::move(rp));
      } catch (const CommError &e) {
        drop(0, round, e.what());
      }
      continue;
    }
    RoundReport rr;
    rr.round = round;
    double lossSum = mine[0], steps = mine[1], bytes = mine[2];
    rr.simTime.assign(rep.simTime.begin(), rep.simTime.end());
    std::vector<std::vector<double>> params = {flat};
    int live = 1;
    for (int j = 1; j < R; ++j) {
      if (dead[j])
        continue;
      try {
        std::vector<double> v(mine.size());
        comm.recv(j, kReportTag | uint64_t(round), WireType::F64, v.data(), v.size());
        lossSum += v[0];
        steps += v[1];
        bytes += v[2];
        for (size_t n = 0; n < NN; ++n)
          rr.simTime[n] = std::max(rr.simTime[n], v[3 + n]);
        if (evalRound || lastRound) {
          std::vector<double> p(flat.size());
          comm.recv(j, kParamTag | uint64_t(round), WireType::F64, p.data(), p.size());
          params.push_back(std::move(p));
        }
        acks.emplace_back(j, comm.isend(j, kAckTag | uint64_t(round), WireType::I64, &one, 1));
        ++live;
      } catch (const CommError &e) {
        drop(j, round, e.what());
      }
    }
    rr.live = live;
    rr.loss = lossSum / live;
    totalSteps += static_cast<int64_t>(steps);
    totalBytes += bytes;
    rr.localSteps = totalSteps;
    rr.bytes = totalBytes;
    rr.consensus = -1;
    if (evalRound || lastRound) {
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
          sum += evalEx->evaluate(data.batch(Split::Val, static_cast<uint64_t>(b))).outputs.at(0);
        rr.valLoss = sum / static_cast<double>(opt.evalBatches);
      }
      result.meanParams = unflattenParams(graph, mean);
    }
    result.rounds.push_back(rr);
    if (opt.onRound)
      opt.onRound(rr);
  }
  for (Report &rp : reports) {
    if (dead[0])
      break;
    try {
      rp.ack->wait();
      for (auto &q : rp.sends)
        q->wait();
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

//===----------------------------------------------------------------------===//
// The synchronous baseline
//===----------------------------------------------------------------------===//

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
      loss += ex.microStep(data.batch(Split::Train, static_cast<uint64_t>(t * R + r))).outputs.at(0);
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
        sum += ex.evaluate(data.batch(Split::Val, static_cast<uint64_t>(b))).outputs.at(0);
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

//===----------------------------------------------------------------------===//
// stretto-train's driver
//===----------------------------------------------------------------------===//

namespace {
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
    if (opt.resume)
      throw std::runtime_error("--resume: gossip and DiLoCo runs write no checkpoint yet, so "
                               "there is nothing to continue (start a new run, or --init-from "
                               "the model.safetensors an earlier one wrote)");
    const bool lead = !comm || comm->rank() == 0; // prints and writes
    quiet = quiet || !lead;
    std::ofstream metrics;
    if (lead && !opt.outDir.empty()) {
      std::filesystem::create_directories(opt.outDir);
      metrics.open(opt.outDir + "/metrics.jsonl", std::ios::trunc);
      if (!metrics)
        throw std::runtime_error("cannot write " + opt.outDir + "/metrics.jsonl");
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
    GossipResult res = comm ? runGossipRank(graph, data, opt, *comm) : runGossip(graph, data, opt);
    if (!lead)
      return 0;
    if (!opt.outDir.empty() && !res.meanParams.empty())
      saveSafetensors(opt.outDir + "/model.safetensors", res.meanParams);
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
