//===- GossipRun.cpp - the gossip and DiLoCo run mode ---------------------===//
//
// One replica per rank of a Communicator (GossipReplica, a StepMode whose
// step is an outer round): a process over Gloo, or a thread of runGossip
// over an InProcessGroup; the numerics are the same code either way. The
// peers of round t are drawn from (seed, t) over every replica, so each
// replica knows its peers without asking; a replica that died is skipped
// when its exchange fails. Rank 0 gathers the round reports, evaluates the
// mean model and decides when a stop request ends the run. Without faults
// the numerics are deterministic whatever the thread or process timing.
// driveSteps runs the rounds (progress, metrics, checkpoints' cadence,
// resume); the synchronous data-parallel baseline (runDataParallel) is a
// mode of its own here too.
//
//===----------------------------------------------------------------------===//
#include "run/GossipInternals.h"

#include "stretto/Runtime/Communicator.h"
#include "stretto/Runtime/Launcher.h"
#include "stretto/Runtime/RunChecks.h"
#include "stretto/Runtime/StepDriver.h"
#include "stretto/Runtime/StopSignals.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

using namespace stretto;
using namespace stretto::gossip;

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
// A ring all-reduce can complete on some ranks and fail on others. A rank
// whose all-reduce failed tells the ranks that may be waiting for it
// elsewhere: rank 0 by a note in place of its round's report (the steps
// entry kReportNote), the others by a note in place of rank 0's
// acknowledgement (kAckNote). The real message follows under the same tag.
constexpr double kReportNote = -1.0;
constexpr int64_t kAckNote = -2;

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

/// What one round's gossip_mix nodes share: the peers, this replica's
/// clocks when it became ready, what each peer said of its own.
struct Exchange {
  int64_t round = 0;
  std::vector<int> peers;
  std::vector<double> ready;
  std::vector<std::vector<double>> peerReady;
  std::vector<bool> answered;
  double bytes = 0;
  int node = 0;
};

/// One gossip or DiLoCo replica on rank r of `comm`. See the file comment.
class GossipReplica final : public StepMode {
public:
  GossipReplica(const Graph &graph, DataSource &data, const GossipOptions &opt,
                Communicator &comm);

  const char *unit() const override { return "round"; }
  int64_t totalSteps() const override { return opt.rounds; }
  bool lead() const override { return r == 0; }
  std::string layout() const override { return "gossip replicas " + std::to_string(R); }
  int checkpointRank() const override { return r; }
  bool agree(bool ok) override {
    double bad = ok ? 0 : 1;
    comm.allReduceSum(&bad, 1);
    return bad == 0;
  }
  int64_t start(const std::map<std::string, HostTensor> *init) override {
    applyInitParameters(ex(), graph, init ? *init : opt.initParams);
    return 0;
  }
  ResumePoint resume() override;
  StepReport step(const StepPlan &plan) override;
  std::map<std::string, HostTensor> parameters() override {
    return r == 0 ? result.meanParams : std::map<std::string, HostTensor>{};
  }
  std::string checkpointName(int64_t round) const override {
    return opt.outDir + "/checkpoint-rank*-step" + std::to_string(round) + ".bin";
  }
  std::string summaryDetail() const override;
  std::string report() const override;
  GossipResult &outcome() { return result; }
  /// This replica's loss or state went non-finite (the run fails).
  bool diverged() const { return diverged_; }

private:
  Executor &ex() { return *exPtr; }
  void drop(int j, int64_t round, const std::string &why);
  void checkRun(const Checkpoint &c, const std::string &path) const;
  std::map<std::string, HostTensor> ownStates();
  double localSteps(int64_t round, int64_t &count);
  HostTensor mix(const Node &node, const HostTensor &z, Exchange &x);
  std::optional<HostTensor> mixAllReduce(const Node &node, const HostTensor &z, Exchange &x);
  void fallBackToPairwise(int64_t round, int node, const std::string &what, int64_t noteRound);
  void noteFailedAllReduce(int64_t round);
  void waitAck(int64_t round, int64_t reported, std::unique_ptr<Request> &ack, int64_t &value);
  HostTensor mixPairwise(const Node &node, const HostTensor &z, Exchange &x);
  void exchange(int64_t round);
  void waitForAcks(int64_t round);
  void reportToLead(int64_t round, const std::vector<double> &mine,
                    const std::vector<double> &flat, bool ckptRound, bool paramsRound);
  RoundReport closeRound(int64_t round, const std::vector<double> &mine,
                         const std::vector<double> &flat, bool ckptRound, bool paramsRound,
                         bool evalRound);
  void finishReports();

  const Graph &graph;
  DataSource &data;
  const GossipOptions opt;
  Communicator &comm;
  const int R, r;
  const std::vector<int64_t> H;
  const Topology topo;
  const size_t NN;
  GossipResult result;
  std::vector<bool> dead;
  bool allReduceBroken = false; // DiLoCo: exchange pairwise after a failure
  int64_t pairwiseFrom = 0;     // ... from this (round << 20 | node) on
  std::unique_ptr<Executor> exPtr, evalEx;
  int64_t k = 0, totalSteps_ = 0;
  double totalBytes = 0;
  std::map<std::string, std::string> runMeta;
  struct Report { // to rank 0, with its acknowledgement
    std::unique_ptr<int64_t> ackValue;
    std::unique_ptr<Request> ack;
    std::vector<std::unique_ptr<Request>> sends;
    int64_t checkpoint = -1; // rounds done, when the replica wrote its file
    int64_t round = 0;       // the round reported
  };
  std::vector<Report> reports;                                // oldest first
  std::vector<std::pair<int, std::unique_ptr<Request>>> acks; // rank 0's
  std::vector<std::unique_ptr<int64_t>> ackValues;            // what they send
  std::vector<std::unique_ptr<Request>> notes; // of a failed all-reduce (kReportNote)
  int64_t stopAt = -1; // the round after which everyone stops (a Ctrl-C)
  bool diverged_ = false;
};

GossipReplica::GossipReplica(const Graph &graph, DataSource &data, const GossipOptions &opt,
                             Communicator &comm)
    : graph(graph), data(data), opt(opt), comm(comm), R(comm.size()), r(comm.rank()),
      H(localStepsPerReplica(graph, opt, comm.size())), topo(topologyOf(graph, opt)),
      NN(opt.networks.size()), dead(static_cast<size_t>(comm.size()), false) {
  if (graph.outer.empty())
    throw std::runtime_error("the graph has no outer phase; compile it with train-gossip");
  const int planned = static_cast<int>(opt.replicas > 0 ? opt.replicas : graph.outerLoop.replicas);
  if (planned != R)
    throw std::runtime_error("the plan has " + std::to_string(planned) +
                             " gossip replicas but the run " + std::to_string(R) +
                             " ranks: a gossip/DiLoCo plan runs one rank per replica");
  if (opt.rounds < 1)
    throw std::runtime_error("gossip needs at least one round, got " + std::to_string(opt.rounds));
  result.replicas.assign(R, ReplicaReport());
  result.replicas[r].simTime.assign(NN, 0.0);
  exPtr = executorFor(graph, opt);
  exPtr->initialize(opt.distinctInit ? opt.seed + static_cast<uint64_t>(r) : opt.seed);
  if (r == 0)
    evalEx = executorFor(graph, opt);
  // Checkpoints: every replica writes its own file (rankCheckpointPath) at
  // the end of a checkpoint round, before its report of that round; rank 0
  // writes its own once the reports of the round are in, naming the
  // replicas that sent them ("gossip.live"). Rank 0's newest file is thus
  // the newest complete checkpoint; a replica removes its older files when
  // rank 0 has acknowledged the round.
  runMeta = {{"gossip.replicas", std::to_string(R)},
             {"gossip.topology", topologyName(topo)},
             {"gossip.local_steps", joinSteps(H)},
             {"data.order", kDataOrder}};
}

void GossipReplica::drop(int j, int64_t round, const std::string &why) {
  if (dead[j])
    return;
  if (opt.stopOnPeerFailure)
    throw std::runtime_error(why + " (--on-peer-failure=continue drops a failed replica and "
                                   "finishes the run)");
  dead[j] = true;
  result.replicas[j].dead = true;
  result.replicas[j].diedAtRound = round;
  // A planned kill (tests) is reported as such, not as the receive it broke.
  bool planned = std::any_of(opt.kills.begin(), opt.kills.end(),
                             [&](auto kill) { return kill.first == j && kill.second <= round; });
  result.replicas[j].error = planned ? "" : why;
  std::fprintf(stderr, "replica %d: dropping replica %d in round %lld: %s\n", r, j,
               (long long)round + 1, why.c_str());
}

std::map<std::string, HostTensor> GossipReplica::ownStates() {
  std::map<std::string, HostTensor> st;
  for (const StateDecl &s : graph.states)
    st.emplace(s.name, ex().getState(s.name));
  return st;
}

std::string metaOf(const Checkpoint &c, const std::string &path, const std::string &key) {
  auto it = c.meta.find(key);
  if (it == c.meta.end())
    throw std::runtime_error(path + ": not a gossip checkpoint (no '" + key +
                             "'; a single-process or pipelined run wrote it?)");
  return it->second;
}

/// The file is this run's: replicas, topology, local steps and seed.
void GossipReplica::checkRun(const Checkpoint &c, const std::string &path) const {
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
}

/// --resume. Rank 0's newest file gives the round and who was live; it goes
/// to everyone as [status, rounds done, total steps, total bytes, live
/// mask]: status 1 resume, 2 the run already finished, 0 rank 0 could not
/// read its checkpoint (everyone stops). Every replica live at that round
/// then reads its own file (on its own machine's disk); one dropped before
/// it comes back with the first live replica's state.
ResumePoint GossipReplica::resume() {
  const size_t nStates = stateElements(graph), nTally = 4 + NN;
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
  const int64_t start = static_cast<int64_t>(header[1]);
  result.startRound = start;
  if (header[0] == 2.0) {
    result.finished = true;
    return {start, checkpointName(start)};
  }
  totalSteps_ = static_cast<int64_t>(header[2]);
  totalBytes = header[3];
  auto live = [&](int j) { return header[4 + static_cast<size_t>(j)] == 1.0; };
  int firstLive = 0;
  while (!live(firstLive))
    ++firstLive;
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
  restoreStates(graph, ex(), states);
  ex().setStepCount(static_cast<int64_t>(t[0]));
  ReplicaReport &rep = result.replicas[r];
  rep.localSteps = static_cast<int64_t>(t[1]);
  rep.rounds = static_cast<int64_t>(t[2]);
  rep.bytesSent = t[3];
  rep.simTime.assign(t.begin() + 4, t.end());
  k = start * H[r] * opt.microBatches;
  return {start, checkpointName(start)};
}

/// Replica r's H_r local steps of the round; the sum of their losses (and
/// how many micro-batches that is in `count`). A diverged replica stops
/// the run (it is not a fault to tolerate): before the update on a
/// non-finite loss, after it on a non-finite state (a finite loss can hide
/// one).
double GossipReplica::localSteps(int64_t round, int64_t &count) {
  ReplicaReport &rep = result.replicas[r];
  double loss = 0;
  for (int64_t s = 0; s < H[r]; ++s) {
    double stepLoss = 0;
    for (int64_t m = 0; m < opt.microBatches; ++m) {
      // Replica r's local step L is step L·R + r of the data, in parts.
      const int64_t local = k / opt.microBatches;
      stepLoss += ex().microStep(data.batch(Split::Train, static_cast<uint64_t>(local * R + r),
                                            k % opt.microBatches))
                      .outputs.at(0);
      ++k;
      ++count;
    }
    if (!std::isfinite(stepLoss))
      throw Diverged("replica " + std::to_string(r) + ": the local loss is " +
                     std::to_string(stepLoss) + " in round " + std::to_string(round + 1));
    ex().update();
    if (std::string bad = ex().nonFiniteState(); !bad.empty())
      throw Diverged("replica " + std::to_string(r) + ": after a local update in round " +
                     std::to_string(round + 1) + ", state " + bad);
    loss += stepLoss;
    ++rep.localSteps;
    for (size_t n = 0; n < NN; ++n)
      rep.simTime[n] += opt.networks[n].stepCost(r) * static_cast<double>(opt.microBatches);
  }
  return loss;
}

/// One gossip_mix node of round x.round: its value after the exchange with
/// this round's peers.
HostTensor GossipReplica::mix(const Node &node0, const HostTensor &z, Exchange &x) {
  // Values travel in the executor's element type (an f64 reference run
  // computes f32-declared nodes in f64).
  Node n = node0;
  if (!opt.executorFactory && !opt.compiled && opt.precision == Precision::F64)
    n.dtype = DType::F64;
  x.bytes += static_cast<double>(z.data.size() * elementBytes(node0.dtype));
  if (std::optional<HostTensor> mixed = mixAllReduce(n, z, x)) {
    if (opt.onMix)
      opt.onMix(r, x.round, x.node, z, *mixed);
    ++x.node;
    return *mixed;
  }
  if (allReduceBroken && ((int64_t(x.round) << 20) | x.node) < pairwiseFrom) {
    // Before the agreed node: this replica's value stays unmixed.
    if (opt.onMix)
      opt.onMix(r, x.round, x.node, z, z);
    ++x.node;
    return z;
  }
  HostTensor mixed = mixPairwise(n, z, x);
  if (opt.onMix)
    opt.onMix(r, x.round, x.node, z, mixed);
  ++x.node;
  return mixed;
}

/// DiLoCo (the complete graph, everyone alive): one all-reduce. With every
/// degree n−1 the mixing weight is 1/n, so
/// z_i − α Σ_j (z_i − z_j)/n = z_i − (α/n)(n z_i − Σ_all z), the pairwise
/// formula summed in another order (the in-process runtime's result to
/// rounding). Empty when it does not apply, or when the all-reduce failed:
/// then pairwise exchanges take over for the rest of the run, which find the
/// replica that died.
std::optional<HostTensor> GossipReplica::mixAllReduce(const Node &n, const HostTensor &z,
                                                      Exchange &x) {
  if (topo != Topology::Complete || allReduceBroken)
    return std::nullopt;
  if (std::any_of(dead.begin(), dead.end(), [](bool d) { return d; })) {
    // A replica dropped outside an all-reduce (rank 0 missing its report,
    // a replica missing rank 0's acknowledgement): the others may not know
    // yet and will fail this all-reduce, which the dead rank never joins,
    // then exchange positions; so does this one, at the same node, instead
    // of mixing pairwise while they wait for its position. No note: no
    // one's all-reduce of this node can complete without this rank.
    fallBackToPairwise(x.round, x.node, "a replica was dropped before it", -1);
    return std::nullopt;
  }
  const std::vector<int> &peers = x.peers;
  try {
    // Summed in f64 even for an f32 model: n·z_i − Σz is a small difference
    // of large sums, which an f32 sum would round away.
    std::vector<double> sum = z.data;
    comm.allReduceSum(sum.data(), sum.size());
    std::vector<double> when(static_cast<size_t>(R) * NN, 0.0);
    for (size_t q = 0; q < NN; ++q)
      when[static_cast<size_t>(r) * NN + q] = x.ready[q];
    comm.allReduceSum(when.data(), when.size());
    for (size_t p = 0; p < peers.size(); ++p) {
      x.peerReady[p].assign(when.begin() + static_cast<long>(peers[p]) * NN,
                            when.begin() + static_cast<long>(peers[p] + 1) * NN);
      x.answered[p] = true;
    }
    const int count = static_cast<int>(peers.size()) + 1;
    double w = n.floats.at(0) * mixingWeight(peers.size(), peers.size());
    HostTensor mixed = z;
    for (size_t e = 0; e < mixed.data.size(); ++e)
      mixed.data[e] -= w * (static_cast<double>(count) * z.data[e] - sum[e]);
    return mixed;
  } catch (const CommError &e) {
    if (opt.stopOnPeerFailure)
      throw std::runtime_error(std::string(e.what()) +
                               " (--on-peer-failure=continue finishes with the survivors)");
    fallBackToPairwise(x.round, x.node, e.what(), x.round);
    return std::nullopt;
  }
}

/// A ring all-reduce can complete on some survivors and fail on others:
/// they fail at this node or the next. The survivors agree on the last
/// failing node, mix nothing before it, and exchange pairwise from there,
/// so no one waits for a message of a node a peer already mixed. Every
/// survivor fails at its next all-reduce (the dead rank never joins), so
/// every one sends its position.
void GossipReplica::fallBackToPairwise(int64_t round, int node, const std::string &what,
                                       int64_t noteRound) {
  allReduceBroken = true;
  if (noteRound >= 0)
    noteFailedAllReduce(noteRound);
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
  std::fprintf(stderr,
               "replica %d: no more all-reduces (%s); exchanging pairwise "
               "from round %lld, node %lld on\n",
               r, what.c_str(), (long long)(pairwiseFrom >> 20) + 1,
               (long long)(pairwiseFrom & ((1 << 20) - 1)));
}

/// Where this rank's all-reduce failed, a rank whose all-reduce completed
/// goes on, and may wait for this one elsewhere before its own next
/// all-reduce fails: rank 0 for round `round`'s report, the others (in the
/// last round) for rank 0's acknowledgement of it. Without a word, each
/// would wait out the timeout for a message the other sends only after the
/// exchange of positions, and both would drop each other. A note under that
/// tag tells them to exchange positions first (waitAck, closeRound); every
/// note is read, as every live replica reports `round` and waits for its
/// acknowledgement.
void GossipReplica::noteFailedAllReduce(int64_t round) {
  if (r != 0) {
    if (dead[0])
      return;
    std::vector<double> note(4 + NN, 0.0);
    note[1] = kReportNote;
    try {
      notes.push_back(
          comm.isend(0, kReportTag | uint64_t(round), WireType::F64, note.data(), note.size()));
    } catch (const CommError &err) {
      drop(0, round, err.what());
    }
    return;
  }
  for (int j = 1; j < R; ++j)
    if (!dead[j])
      try {
        ackValues.push_back(std::make_unique<int64_t>(kAckNote));
        acks.emplace_back(
            j, comm.isend(j, kAckTag | uint64_t(round), WireType::I64, ackValues.back().get(), 1));
      } catch (const CommError &err) {
        drop(j, round, err.what());
      }
}

/// Waits for rank 0's acknowledgement of round `reported` (posted in `ack`);
/// a note of rank 0's failed all-reduce first makes this replica fall back
/// too, if its own all-reduce had completed. Throws CommError.
void GossipReplica::waitAck(int64_t round, int64_t reported, std::unique_ptr<Request> &ack,
                            int64_t &value) {
  ack->wait();
  if (value != kAckNote)
    return;
  if (!allReduceBroken)
    fallBackToPairwise(reported + 1, 0,
                       "rank 0's all-reduce of round " + std::to_string(reported + 1) + " failed",
                       -1); // rank 0 knows
  if (dead[0])
    throw CommError(0, "rank 0 was dropped in round " + std::to_string(round + 1));
  ack = comm.irecv(0, kAckTag | uint64_t(reported), WireType::I64, &value, 1);
  ack->wait();
}

/// Sends z (and this replica's degree and ready time) to every live peer
/// and mixes in what each sent. Receives are posted before the sends: a
/// posted receive notices a peer that died at once (a send alone would wait
/// out the timeout).
HostTensor GossipReplica::mixPairwise(const Node &n, const HostTensor &z, Exchange &x) {
  const std::vector<int> &peers = x.peers;
  const int64_t round = x.round;
  std::vector<double> meta = {static_cast<double>(peers.size())};
  meta.insert(meta.end(), x.ready.begin(), x.ready.end());
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
        q.v = comm.irecv(j, mixTag(round, x.node, 0), WireType::F64, q.value.data.data(), count);
      } else {
        q.f32.resize(count);
        q.v = comm.irecv(j, mixTag(round, x.node, 0), WireType::F32, q.f32.data(), count);
      }
      q.m = comm.irecv(j, mixTag(round, x.node, 1), WireType::F64, q.meta.data(), q.meta.size());
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
      sends.push_back(sendTensor(comm, j, mixTag(round, x.node, 0), z, n.dtype));
      sends.push_back(comm.isend(j, mixTag(round, x.node, 1), WireType::F64, meta.data(),
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
      x.peerReady[q.p].assign(q.meta.begin() + 1, q.meta.end());
      x.answered[q.p] = true;
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
  return gossipMix(z, peers.size(), inputs, n.floats.at(0));
}

/// The round's exchanges, with the peers of the draw over every replica,
/// then the outer update and the clocks.
void GossipReplica::exchange(int64_t round) {
  ReplicaReport &rep = result.replicas[r];
  const std::vector<bool> everyone(static_cast<size_t>(R), true);
  std::vector<std::vector<int>> draw = drawPeers(topo, everyone, graph.outerLoop.seed, round);
  if (result.peers.size() <= static_cast<size_t>(round))
    result.peers.resize(round + 1);
  result.peers[round] = draw;
  Exchange x;
  x.round = round;
  x.peers = draw[r];
  x.ready = rep.simTime;
  x.peerReady.resize(x.peers.size());
  x.answered.assign(x.peers.size(), false);
  ex().setCollective([&](const Node &node, const HostTensor &z) { return mix(node, z, x); });
  ex().outerStep();
  ex().setCollective(nullptr);
  advanceClocks(rep, r, topo, x.peers, x.answered, x.peerReady, x.ready, x.bytes, opt);
  ++rep.rounds;
}

/// A replica other than rank 0 keeps at most kAckWindow reports in flight:
/// each acknowledgement is received before its send is waited for (a
/// receive notices a dead rank 0 at once, where a send would wait out the
/// timeout); an acknowledgement carries rank 0's stop decision.
void GossipReplica::waitForAcks(int64_t round) {
  while (reports.size() >= kAckWindow && !dead[0]) {
    Report &old = reports.front();
    try {
      waitAck(round, old.round, old.ack, *old.ackValue);
      if (*old.ackValue >= 0 && (stopAt < 0 || *old.ackValue < stopAt))
        stopAt = *old.ackValue;
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

/// The round's report to rank 0 (loss, steps, bytes, stop request, clocks);
/// the parameters too when rank 0 needs them; the replica's checkpoint file
/// first at checkpoint rounds.
void GossipReplica::reportToLead(int64_t round, const std::vector<double> &mine,
                                 const std::vector<double> &flat, bool ckptRound,
                                 bool paramsRound) {
  if (dead[0])
    return;
  try {
    Report rp;
    rp.round = round;
    if (ckptRound) {
      std::map<std::string, std::string> meta = runMeta;
      meta["gossip.tally"] = joinNumbers(tally(ex(), result.replicas[r]));
      saveRankCheckpoint(opt.outDir, r, round + 1, opt.seed, ownStates(), opt.precision, meta);
      rp.checkpoint = round + 1;
    }
    rp.ackValue = std::make_unique<int64_t>(-1);
    rp.ack = comm.irecv(0, kAckTag | uint64_t(round), WireType::I64, rp.ackValue.get(), 1);
    rp.sends.push_back(comm.isend(0, kReportTag | uint64_t(round), WireType::F64, mine.data(),
                                  mine.size()));
    if (paramsRound)
      rp.sends.push_back(comm.isend(0, kParamTag | uint64_t(round), WireType::F64, flat.data(),
                                    flat.size()));
    reports.push_back(std::move(rp));
  } catch (const CommError &e) {
    drop(0, round, e.what());
  }
}

/// Rank 0 closes the round: every live replica's report (and parameters),
/// its own checkpoint file once theirs are written, the stop decision sent
/// with every acknowledgement, the consensus distance and the mean model's
/// validation loss.
RoundReport GossipReplica::closeRound(int64_t round, const std::vector<double> &mine,
                                      const std::vector<double> &flat, bool ckptRound,
                                      bool paramsRound, bool evalRound) {
  RoundReport rr;
  rr.round = round;
  double lossSum = mine[0], steps = mine[1], bytes = mine[2];
  bool stopNow = mine[3] != 0.0;
  rr.simTime.assign(result.replicas[r].simTime.begin(), result.replicas[r].simTime.end());
  std::vector<std::vector<double>> params = {flat};
  std::map<std::string, std::string> ckptMeta;
  std::map<std::string, HostTensor> ckptStates;
  if (ckptRound) {
    ckptMeta = runMeta;
    ckptMeta["gossip.tally"] = joinNumbers(tally(ex(), result.replicas[r]));
    ckptStates = ownStates();
  }
  std::vector<int> reported;
  for (int j = 1; j < R; ++j) {
    if (dead[j])
      continue;
    try {
      std::vector<double> v(mine.size());
      comm.recv(j, kReportTag | uint64_t(round), WireType::F64, v.data(), v.size());
      if (v[1] == kReportNote) { // replica j's all-reduce failed (noteFailedAllReduce)
        if (!allReduceBroken)
          fallBackToPairwise(round + 1, 0,
                             "replica " + std::to_string(j) + "'s all-reduce of round " +
                                 std::to_string(round + 1) + " failed",
                             round); // the others may wait for this round's acknowledgement
        if (dead[j])
          continue;
        comm.recv(j, kReportTag | uint64_t(round), WireType::F64, v.data(), v.size());
      }
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
  totalSteps_ += static_cast<int64_t>(steps);
  totalBytes += bytes;
  rr.localSteps = totalSteps_;
  rr.bytes = totalBytes;
  rr.consensus = -1;
  // Every replica that reported has written its file: rank 0's completes
  // the checkpoint, before any acknowledgement lets one remove an older.
  if (ckptRound) {
    ckptMeta["gossip.live"] = "0";
    for (int j : reported)
      ckptMeta["gossip.live"] += "," + std::to_string(j);
    ckptMeta["gossip.total_steps"] = std::to_string(totalSteps_);
    ckptMeta["gossip.total_bytes"] = joinNumbers({totalBytes});
    saveRankCheckpoint(opt.outDir, 0, round + 1, opt.seed, ckptStates, opt.precision, ckptMeta);
    removeRankCheckpointsBefore(opt.outDir, 0, round + 1);
    result.checkpointRound = round;
  }
  for (int j : reported) {
    ackValues.push_back(std::make_unique<int64_t>(stopAt));
    acks.emplace_back(j, comm.isend(j, kAckTag | uint64_t(round), WireType::I64,
                                    ackValues.back().get(), 1));
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
  return rr;
}

StepReport GossipReplica::step(const StepPlan &p) {
  const int64_t round = p.step - 1;
  StepReport out;
  ReplicaReport &rep = result.replicas[r];
  for (auto [victim, at] : opt.kills)
    if (victim == r && at == round) { // a planned failure (tests): this replica stops here
      rep.dead = true;
      rep.diedAtRound = round;
      out.end = StepEnd::Left;
      return out;
    }
  double bytesBefore = rep.bytesSent;
  int64_t count = 0;
  double loss;
  try {
    loss = localSteps(round, count);
  } catch (const Diverged &e) {
    // Every replica stops: the others learn it from the aborted group.
    diverged_ = true;
    comm.abort(e.what());
    out.end = StepEnd::Failed;
    out.failure = e.what();
    return out;
  }
  exchange(round);
  std::vector<double> flat = flattenParams(graph, ex());
  if (opt.onRoundEnd)
    opt.onRoundEnd(r, round, unflattenParams(graph, flat));
  if (r != 0)
    waitForAcks(round);
  const bool lastRound = round + 1 == opt.rounds || round == stopAt;
  const bool evalRound = opt.evalInterval > 0 && (p.evaluate || lastRound);
  const bool ckptRound = !opt.outDir.empty() && (p.checkpoint || lastRound);
  const bool paramsRound = evalRound || lastRound || ckptRound || opt.consensusEveryRound;
  std::vector<double> mine = {count ? loss / static_cast<double>(count) : 0.0,
                              static_cast<double>(H[r]), rep.bytesSent - bytesBefore,
                              p.stopWanted() ? 1.0 : 0.0};
  mine.insert(mine.end(), rep.simTime.begin(), rep.simTime.end());
  const bool stopHere = round == stopAt; // known before rank 0 closes this round
  if (r != 0) {
    reportToLead(round, mine, flat, ckptRound, paramsRound);
    out.checkpointed = ckptRound && !dead[0];
  } else {
    const int64_t before = totalSteps_;
    RoundReport rr = closeRound(round, mine, flat, ckptRound, paramsRound, evalRound);
    result.rounds.push_back(rr);
    if (opt.onRound)
      opt.onRound(rr);
    out.knowsLoss = true;
    out.loss = rr.loss;
    out.valLoss = rr.valLoss;
    out.checkpointed = ckptRound;
    out.tokens = static_cast<double>((totalSteps_ - before) * opt.microBatches *
                                     data.tokensPerBatch());
    char buf[160];
    std::snprintf(buf, sizeof buf, " | consensus %s | sim %.2f s | sent %s | live %d",
                  rr.consensus >= 0 ? scientific(rr.consensus).c_str() : "-",
                  rr.simTime.empty() ? 0.0 : rr.simTime[0], megabytes(rr.bytes).c_str(), rr.live);
    out.progress = buf;
    auto num = [](double v) {
      char b[40];
      std::snprintf(b, sizeof b, "%.17g", v);
      return std::string(b);
    };
    out.fields = {{"live", std::to_string(rr.live)},
                  {"bytes", num(rr.bytes)},
                  {"sim_time", num(rr.simTime.empty() ? 0.0 : rr.simTime[0])}};
    if (rr.consensus >= 0)
      out.fields.emplace_back("consensus", num(rr.consensus));
  }
  if (stopHere || round == stopAt) { // rank 0 may have decided it just now
    result.stoppedAfter = round;
    out.end = round + 1 < opt.rounds ? StepEnd::Stopped : StepEnd::Continue;
  }
  if (out.end != StepEnd::Continue || round + 1 == opt.rounds)
    finishReports();
  return out;
}

/// The end: every report acknowledged, every acknowledgement delivered.
void GossipReplica::finishReports() {
  for (Report &rp : reports) {
    if (dead[0])
      break;
    try {
      waitAck(opt.rounds - 1, rp.round, rp.ack, *rp.ackValue);
      for (auto &q : rp.sends)
        q->wait();
      if (rp.checkpoint > 0)
        removeRankCheckpointsBefore(opt.outDir, r, rp.checkpoint);
    } catch (const CommError &e) {
      drop(0, opt.rounds - 1, e.what());
    }
  }
  reports.clear();
  for (auto &q : notes)
    if (!dead[0])
      try {
        q->wait();
      } catch (const CommError &) {
      }
  notes.clear();
  for (auto &[j, q] : acks)
    if (!dead[j])
      try {
        q->wait();
      } catch (const CommError &) {
      }
  acks.clear();
}

std::string GossipReplica::summaryDetail() const {
  if (result.rounds.empty())
    return "";
  const RoundReport &last = result.rounds.back();
  double sent = last.bytes;
  int died = 0;
  for (const ReplicaReport &rep : result.replicas)
    died += rep.dead;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                " (mean model); %lld local steps; simulated wall-clock %.2f s; sent %s (%s per "
                "replica)",
                (long long)last.localSteps, last.simTime.empty() ? 0.0 : last.simTime[0],
                megabytes(sent).c_str(), megabytes(sent / result.replicas.size()).c_str());
  std::string s = buf;
  if (died)
    s += "; " + std::to_string(died) + " replica(s) died";
  return s;
}

std::string GossipReplica::report() const {
  std::string s;
  for (size_t j = 0; j < result.replicas.size(); ++j) {
    const ReplicaReport &rep = result.replicas[j];
    if (rep.dead)
      s += "replica " + std::to_string(j) + " died in round " +
           std::to_string(rep.diedAtRound + 1) +
           (rep.error.empty() ? " (planned kill)" : ": " + rep.error) +
           "; dropped from later rounds\n";
  }
  return s;
}

} // namespace

namespace {

/// The replicas share one data source: its reads are serialised.
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
};

/// The driver's settings for a run of `opt` (its rounds are the steps).
TrainerOptions roundsOf(const GossipOptions &opt, bool quiet) {
  TrainerOptions run;
  run.steps = opt.rounds;
  run.microBatches = opt.microBatches;
  run.seed = opt.seed;
  run.logInterval = 1;
  run.evalInterval = opt.evalInterval;
  run.evalBatches = opt.evalBatches;
  run.checkpointInterval = opt.checkpointInterval;
  run.outDir = opt.outDir;
  run.resume = opt.resume;
  run.initFrom = opt.initFrom;
  run.precision = opt.precision;
  run.quiet = quiet;
  return run;
}

/// What the replicas of one process did, one per rank.
struct ReplicaRuns {
  std::vector<GossipResult> results;
  std::vector<std::string> errors;
  std::vector<int64_t> failedAt;
  std::string diverged; // the first replica whose loss or state went non-finite
  std::vector<int> codes;
};

/// Every replica on a thread of this process, each driven by driveSteps
/// over an in-process group (OpenMP threads split among them). A replica
/// that fails or dies leaves the group (its peers drop it at once); one
/// that diverges aborts it (everyone stops).
ReplicaRuns replicasOnThreads(const Graph &graph, DataSource &data, const GossipOptions &o,
                              const TrainerOptions &run, const std::atomic<bool> &stop) {
  const int R = static_cast<int>(o.replicas);
  LockedData shared(data);
  InProcessGroup group(R);
  ReplicaRuns out;
  out.results.resize(R);
  out.errors.resize(R);
  out.failedAt.assign(R, -1);
  out.codes.assign(R, 0);
  std::vector<int64_t> rounds(static_cast<size_t>(R), 0);
  std::mutex mu;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  runOnThreads(group, [&](int r, Communicator &c) {
    omp_set_num_threads(std::max(1, cores / R)); // per thread: no oversubscription
    GossipOptions mine = o;
    mine.onRoundEnd = [&, r](int q, int64_t t, const std::map<std::string, HostTensor> &p) {
      rounds[static_cast<size_t>(r)] = t + 1;
      if (o.onRoundEnd)
        o.onRoundEnd(q, t, p);
    };
    TrainerOptions own = run;
    own.quiet = run.quiet || r != 0;
    own.errorsToCaller = true;
    GossipReplica mode(graph, shared, mine, o.communicatorFor ? o.communicatorFor(r, c) : c);
    TrainSummary sum;
    int code = driveSteps(mode, graph, own, &sum, &stop);
    out.codes[static_cast<size_t>(r)] = code;
    out.results[static_cast<size_t>(r)] = std::move(mode.outcome());
    if (code == 1) {
      out.errors[static_cast<size_t>(r)] = sum.error;
      out.failedAt[static_cast<size_t>(r)] = rounds[static_cast<size_t>(r)];
      std::lock_guard<std::mutex> lock(mu);
      if (mode.diverged() && out.diverged.empty())
        out.diverged = sum.error;
    }
    const GossipResult &res = out.results[static_cast<size_t>(r)];
    if (code != 0 || res.replicas.empty() || res.replicas[static_cast<size_t>(r)].dead)
      group.leave(r); // the others' receives from it fail at once
  }, [&](int r, const std::string &what) {
    out.errors[static_cast<size_t>(r)] = what;
    out.failedAt[static_cast<size_t>(r)] = rounds[static_cast<size_t>(r)];
    out.codes[static_cast<size_t>(r)] = 1;
    group.leave(r);
  });
  return out;
}

/// The checks runGossip makes before any replica starts.
void checkGossipRun(const Graph &graph, const GossipOptions &opt, int R) {
  if (graph.outer.empty())
    throw std::runtime_error("the graph has no outer phase; compile it with train-gossip");
  if (R < 1)
    throw std::runtime_error("gossip needs at least one replica, got " + std::to_string(R));
  for (int64_t h : localStepsPerReplica(graph, opt, R))
    if (h < 0)
      throw std::runtime_error("local steps must be >= 0, got " + std::to_string(h));
  topologyOf(graph, opt);
  if (opt.networks.empty())
    throw std::runtime_error("gossip needs at least one network model");
  if (opt.rounds < 1)
    throw std::runtime_error("gossip needs at least one round, got " + std::to_string(opt.rounds));
  for (auto [r, k] : opt.kills)
    if (r < 0 || r >= R)
      throw std::runtime_error("kill: no replica " + std::to_string(r) + " among " +
                               std::to_string(R));
}

} // namespace

GossipResult stretto::runGossip(const Graph &graph, DataSource &data, const GossipOptions &opt) {
  const int R = static_cast<int>(opt.replicas > 0 ? opt.replicas : graph.outerLoop.replicas);
  checkGossipRun(graph, opt, R);
  GossipOptions o = opt;
  o.replicas = R;
  o.stopOnPeerFailure = false; // a replica that fails is dropped, the others finish
  o.consensusEveryRound = true;
  const std::atomic<bool> never{false};
  ReplicaRuns runs =
      replicasOnThreads(graph, data, o, roundsOf(o, true), opt.stopRequested ? *opt.stopRequested
                                                                              : never);
  if (!runs.diverged.empty())
    throw std::runtime_error(runs.diverged);
  // Every replica failed before any round closed (bad settings, an
  // unreadable checkpoint): rank 0's error says why.
  if (std::all_of(runs.errors.begin(), runs.errors.end(),
                  [](const std::string &e) { return !e.empty(); }) &&
      runs.results[0].rounds.empty())
    throw std::runtime_error(runs.errors[0]);
  // Rank 0 holds the rounds, the draws and the mean model; every replica
  // its own counters.
  GossipResult result = runs.results[0];
  result.replicas.assign(R, ReplicaReport());
  for (int r = 0; r < R; ++r) {
    if (!runs.results[r].replicas.empty())
      result.replicas[r] = runs.results[r].replicas[r];
    if (!runs.errors[r].empty()) {
      result.replicas[r].dead = true;
      result.replicas[r].diedAtRound = runs.failedAt[r];
      result.replicas[r].error = runs.errors[r];
    }
  }
  return result;
}

int stretto::runGossipTraining(const Graph &graph, DataSource &data, const GossipOptions &options,
                               const TrainerOptions &trainer, Communicator *comm) {
  try {
    GossipOptions opt = options;
    const bool lead = !comm || comm->rank() == 0; // prints and writes
    const OuterLoop &loop = graph.outerLoop;
    opt.replicas = opt.replicas > 0 ? opt.replicas : loop.replicas;
    TrainerOptions run = roundsOf(opt, trainer.quiet);
    run.modelFingerprint = trainer.modelFingerprint;
    run.forceResume = trainer.forceResume;
    if (lead && !trainer.quiet) {
      std::cout << "gossip: " << opt.replicas << " replicas, topology "
                << topologyName(topologyOf(graph, opt)) << ", local steps";
      for (int64_t h : opt.localSteps.empty() ? loop.localSteps : opt.localSteps)
        std::cout << " " << h;
      std::cout << ", " << opt.rounds << " rounds; simulated clock: " << opt.networks[0].name
                << " network\n"
                << std::flush;
    }
    if (comm) { // this process is one replica
      GossipReplica mode(graph, data, opt, *comm);
      run.quiet = trainer.quiet || !lead;
      int code = driveSteps(mode, graph, run);
      // A diverged replica fails the job even where a dead one would not.
      return code == 1 && mode.diverged() ? kExitRunFailed : code;
    }
    checkGossipRun(graph, opt, static_cast<int>(opt.replicas));
    opt.stopOnPeerFailure = false;
    opt.consensusEveryRound = true;
    // Ctrl-C and SIGTERM (a launcher forwards both) stop every replica
    // after the same round, with a checkpoint.
    std::atomic<bool> stop{false};
    StopOnSignal signals(stop);
    ReplicaRuns runs = replicasOnThreads(graph, data, opt, run, stop);
    if (runs.codes[0] == 1 || !runs.diverged.empty()) {
      std::cerr << "error: " << (!runs.diverged.empty() ? runs.diverged : runs.errors[0])
                << "\n";
      return 1;
    }
    return runs.codes[0];
  } catch (const std::exception &e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

// The synchronous baseline

namespace {

/// runDataParallel's run: one executor with R micro-batches a step (replica
/// r's batch is runGossip's first local batch of r), the clock charging the
/// slowest replica and a ring all-reduce of the gradients per step.
class SimulatedDataParallel final : public StepMode {
public:
  SimulatedDataParallel(const Graph &graph, DataSource &data, int R, int64_t steps,
                        const GossipOptions &opt)
      : graph(graph), data(data), R(R), steps(steps), opt(opt), all(static_cast<size_t>(R)),
        clock(opt.networks.size(), 0.0) {
    if (R < 1)
      throw std::runtime_error("data parallelism needs at least one replica");
    exPtr = executorFor(graph, opt);
    exPtr->initialize(opt.seed);
    for (const StateDecl &s : graph.states)
      if (s.isParam)
        gradBytes += static_cast<double>(numElements(s.shape) * elementBytes(s.dtype));
    for (int r = 0; r < R; ++r)
      all[static_cast<size_t>(r)] = r;
    result.replicas.assign(R, ReplicaReport());
  }
  int64_t totalSteps() const override { return steps; }
  bool lead() const override { return true; }
  std::string layout() const override { return "simulated data-parallel replicas"; }
  int checkpointRank() const override { return -1; }
  bool agree(bool ok) override { return ok; }
  int64_t start(const std::map<std::string, HostTensor> *) override {
    applyInitParameters(*exPtr, graph, opt.initParams);
    return 0;
  }
  ResumePoint resume() override {
    throw std::runtime_error("the simulated data-parallel baseline does not resume");
  }
  StepReport step(const StepPlan &p) override;
  std::map<std::string, HostTensor> parameters() override { return {}; }
  std::string checkpointName(int64_t) const override { return ""; }
  GossipResult &outcome();

private:
  const Graph &graph;
  DataSource &data;
  const int R;
  const int64_t steps;
  const GossipOptions &opt;
  std::unique_ptr<Executor> exPtr;
  std::vector<int> all;
  std::vector<double> clock;
  double gradBytes = 0, bytes = 0;
  GossipResult result;
};

StepReport SimulatedDataParallel::step(const StepPlan &p) {
  const int64_t t = p.step - 1;
  double loss = 0;
  for (int r = 0; r < R; ++r)
    loss += exPtr->microStep(data.batch(Split::Train, static_cast<uint64_t>(t * R + r), 0))
                .outputs.at(0);
  exPtr->update();
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
  if (p.evaluate) {
    double sum = 0;
    for (int64_t b = 0; b < opt.evalBatches; ++b)
      sum += exPtr->evaluate(data.batch(Split::Val, static_cast<uint64_t>(b), 0)).outputs.at(0);
    rep.valLoss = sum / static_cast<double>(opt.evalBatches);
  }
  result.rounds.push_back(rep);
  if (opt.onRound)
    opt.onRound(rep);
  StepReport out;
  out.knowsLoss = true;
  out.loss = rep.loss;
  out.valLoss = rep.valLoss;
  out.tokens = static_cast<double>(R * data.tokensPerBatch());
  return out;
}

GossipResult &SimulatedDataParallel::outcome() {
  const int64_t ran = static_cast<int64_t>(result.rounds.size());
  for (int r = 0; r < R; ++r) {
    result.replicas[r].localSteps = ran;
    result.replicas[r].rounds = ran;
    result.replicas[r].bytesSent = R > 1 ? ran * 2.0 * (R - 1) / R * gradBytes : 0;
    result.replicas[r].simTime = clock;
  }
  for (const StateDecl &s : graph.states)
    if (s.isParam)
      result.meanParams[s.name] = exPtr->getState(s.name);
  return result;
}

} // namespace

GossipResult stretto::runDataParallel(const Graph &graph, DataSource &data, int R, int64_t steps,
                                      const GossipOptions &opt) {
  SimulatedDataParallel mode(graph, data, R, steps, opt);
  TrainerOptions run;
  run.steps = steps;
  run.logInterval = steps + 1;
  run.evalInterval = opt.evalInterval;
  run.evalBatches = opt.evalBatches;
  run.quiet = true;
  run.errorsToCaller = true;
  const std::atomic<bool> never{false};
  TrainSummary sum;
  if (driveSteps(mode, graph, run, &sum, &never) != 0)
    throw std::runtime_error(sum.error);
  return mode.outcome();
}
