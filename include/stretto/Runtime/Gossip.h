//===- Gossip.h - decentralized data parallelism (no MLIR) ----*- C++ -*-===//
//
// Runs a Graph with an Outer phase (train-gossip) as R replicas, one per rank
// of a Communicator (threads of one process over an InProcessGroup, or
// processes over Gloo), each a run mode driven round by round by the step
// driver (StepDriver.h), each with its own executor (reference or
// compiled) over the same Graph and its own data shard. Replica i takes its
// own H_i local steps, then the outer round, whose `gossip_mix` nodes exchange
// with the peers drawn for that round by pairwise sends and receives: a
// replica exchanges as soon as it and its peers are ready, with no global
// barrier except on the complete graph (DiLoCo), where every replica is
// everyone's peer.
//
// A network model (per-replica compute speed, per-link bandwidth and
// latency) drives a simulated clock while the numerics run for real; the
// numerics do not depend on it, so one run reports the clock under several
// network models. Seed: GASLoC (Cagnasso, Belilovsky, Oyallon, arXiv
// 2606.11081); DiLoCo (Douillard et al., 2023).
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_GOSSIP_H
#define STRETTO_GOSSIP_H

#include "stretto/Runtime/Graph.h"
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Runtime/RefExecutor.h"
#include "stretto/Runtime/Trainer.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace stretto {

class Communicator;

enum class Topology { Complete, Ring, Exponential, OnePeer, TwoPeer };

/// "complete" | "ring" | "exponential" | "one-peer" | "two-peer"; throws
/// std::invalid_argument naming the choices otherwise.
Topology parseTopology(const std::string &name);
const char *topologyName(Topology t);

/// The peers of every replica in round `round`, drawn deterministically from
/// (seed, round) over the replicas with alive[i] (dead ones get no peers and
/// are nobody's peer). Symmetric: j in peers[i] iff i in peers[j]. Matchings
/// (one-/two-peer) are drawn anew each round; ring and exponential graphs
/// (peers i ± 2^k) are laid over the live replicas in index order.
std::vector<std::vector<int>> drawPeers(Topology topology, const std::vector<bool> &alive,
                                        uint64_t seed, int64_t round);

/// Metropolis–Hastings weight of an edge between degrees di and dj:
/// 1 / (1 + max(di, dj)). Symmetric, so mixing preserves the mean.
double mixingWeight(size_t di, size_t dj);

/// z_i − α·Σ_j λ_ij·(z_i − z_j) over `peers` (value, degree), in the order
/// given; `degree` is replica i's degree in the round's graph.
HostTensor gossipMix(const HostTensor &zi, size_t degree,
                     const std::vector<std::pair<const HostTensor *, size_t>> &peers,
                     double alpha);

/// Compute and link costs of the simulated clock.
struct NetworkModel {
  std::string name = "homogeneous";
  double stepTime = 1.0;             // simulated s per local step at speed 1
  double bandwidth = 1e9;            // bytes/s of a link
  double latency = 0.0;              // s per exchange on a link
  std::vector<double> replicaFactor; // step-time multiplier per replica (empty: 1)
  std::vector<double> linkFactor;    // R×R bandwidth divisor (empty: 1)

  double stepCost(int replica) const;
  double linkBandwidth(int i, int j) const;
  /// A quarter of the replicas 2× slower and a quarter of the links 10×
  /// slower (or the fractions and factors given), chosen from `seed`.
  static NetworkModel heterogeneous(int replicas, double slowReplicas, double replicaFactor,
                                    double slowLinks, double linkFactor, uint64_t seed);
};

struct GossipOptions {
  int64_t rounds = 10;
  uint64_t seed = 1337;        // initialisation (the same on every replica)
  Precision precision = Precision::F32;
  /// Replicas run on the compiled runtime (PlanExecutor, f32) with these
  /// fused kernels instead of the reference executor.
  bool compiled = false;
  std::map<std::string, RefExecutor::KernelFn> kernels;
  GemmPrecision gemmPrecision = GemmPrecision::F32; // compiled runtime's GEMMs
  /// When set, builds each replica (and the evaluation)'s executor (e.g. the compiled runtime on
  /// a GPU); called from the thread that will use it. Else `compiled`,
  /// `kernels` and `precision` decide.
  std::function<std::unique_ptr<Executor>(const Graph &)> executorFactory;
  int64_t microBatches = 1;    // micro-batches per local step
  int64_t evalInterval = 0;    // rounds between validation of the mean model; 0: never
  int64_t evalBatches = 4;
  std::vector<NetworkModel> networks{NetworkModel()}; // clocks to simulate (>= 1)
  /// Faults: replica `first` dies at the start of round `second`.
  std::vector<std::pair<int, int64_t>> kills;
  /// Faults (tests): the communicator replica r uses in place of `own`, its
  /// rank of the in-process group (e.g. one that fails a collective on some
  /// ranks only); it must outlive the run.
  std::function<Communicator &(int r, Communicator &own)> communicatorFor;
  /// Overrides of the graph's OuterLoop (tests, experiments); empty/0: keep.
  std::vector<int64_t> localSteps;
  int64_t replicas = 0;
  std::string topology;
  /// Observers (tests): every exchange (replica, round, node, z, mixed) and
  /// each replica's parameters after each round. Called from worker threads.
  std::function<void(int, int64_t, int, const HostTensor &, const HostTensor &)> onMix;
  std::function<void(int, int64_t, const std::map<std::string, HostTensor> &)> onRoundEnd;
  /// Progress: called once per round, when every live replica finished it.
  std::function<void(const struct RoundReport &)> onRound;
  /// Tests of consensus: replica r is initialised with seed + r, so the
  /// replicas start apart (normally they start from one common point).
  bool distinctInit = false;
  /// --init-from: every replica (and the data-parallel baseline) starts
  /// from these parameters (applyInitParameters); runGossipTraining loads
  /// `initFrom` into it when it is empty.
  std::map<std::string, HostTensor> initParams;
  std::string initFrom;
  /// Checkpoints: with an output directory, every replica writes its own
  /// file (rankCheckpointPath in Trainer.h: its states and counters) every
  /// `checkpointInterval` rounds (0: none between), after the last round and
  /// after a stop; rank 0's file, written when every live replica's is,
  /// completes the checkpoint. runGossipTraining also writes per-round
  /// metrics.jsonl and the mean model's model.safetensors.
  std::string outDir;
  int64_t checkpointInterval = 0;
  /// --resume: continue from rank 0's newest checkpoint file, every live
  /// replica from its own (same replicas, topology, local steps and seed; a
  /// replica dropped before it was written comes back with the first live
  /// replica's state).
  bool resume = false;
  /// Set (e.g. by a SIGINT handler) to stop: rank 0 collects the request
  /// from the round reports, and every replica stops after the same round,
  /// at most 4 rounds later, with a checkpoint.
  const std::atomic<bool> *stopRequested = nullptr;
  /// Rank 0 gathers every replica's parameters every round (the consensus
  /// distance of every round; the in-process runtime sets it).
  bool consensusEveryRound = false;
  /// Multi-process runs: a peer that fails stops this replica (the default)
  /// instead of being dropped.
  bool stopOnPeerFailure = true;
};

struct RoundReport {
  int64_t round = 0;
  int live = 0;                      // replicas that finished the round
  double loss = 0;                   // mean local training loss of the round
  double valLoss = -1;               // of the mean model (-1: not evaluated)
  double consensus = 0;              // (1/n) Σ_i ‖θ_i − θ̄‖² after the round
  int64_t localSteps = 0;            // summed over replicas, since the start
  double bytes = 0;                  // sent by all replicas, since the start
  std::vector<double> simTime;       // per network: latest replica end of round
};

struct ReplicaReport {
  int64_t localSteps = 0;
  int64_t rounds = 0;               // outer rounds completed
  double bytesSent = 0;
  std::vector<double> simTime;      // per network: its clock at the end
  bool dead = false;
  int64_t diedAtRound = -1;
  std::string error;                // why it died, when it was not a planned kill
};

struct GossipResult {
  std::vector<RoundReport> rounds;
  std::vector<ReplicaReport> replicas;
  std::vector<std::vector<std::vector<int>>> peers; // per round, the frozen draw
  std::map<std::string, HostTensor> meanParams;    // θ̄ over live replicas at the end
  int64_t startRound = 0;     // rounds done before this run (--resume)
  bool finished = false;      // --resume of a run that had done every round
  int64_t stoppedAfter = -1;  // the round after which a stop request ended it
  int64_t checkpointRound = -1; // rank 0: the round of the last checkpoint written
};

/// Runs the outer loop of `graph` (graph.outerLoop, overridable through
/// `options`). Data: micro-batch j of replica r's local step L is
/// data.batch(Train, L·R + r, j); each replica sees its own shard, and
/// micro-batching a local step does not change its rows. Throws
/// std::runtime_error on a graph without an Outer phase or bad options.
GossipResult runGossip(const Graph &graph, DataSource &data, const GossipOptions &options);

/// Fully synchronous data parallelism, the baseline: every step each of the
/// R replicas computes the gradient of its own batch (same indices as
/// runGossip's first local steps), the gradients are all-reduced and one
/// update is applied. Numerically one executor with R micro-batches per step;
/// the clock charges the slowest replica plus a ring all-reduce of the
/// gradients per step. Reported per step as rounds.
GossipResult runDataParallel(const Graph &graph, DataSource &data, int replicas, int64_t steps,
                             const GossipOptions &options);

/// A gossip run's settings from the trainer's keys (outer_rounds, net_*),
/// as stretto-train reads them from the model and stretto-run from a plan.
struct GossipSettings {
  int64_t rounds = 0; // 0: ceil(steps / longest local-step count)
  double stepTime = 1.0, bandwidth = 1e9, latency = 0.0;
  bool heterogeneous = false; // net_slow_replicas / net_slow_links given
  double slowReplicas = 0.0, slowReplicaFactor = 2.0, slowLinks = 0.0, slowLinkFactor = 10.0;
  /// As plan-file meta entries ("gossip.rounds", "gossip.net_bandwidth", ...).
  std::map<std::string, std::string> toMeta() const;
  static GossipSettings fromMeta(const std::map<std::string, std::string> &meta);
};

/// The options of a gossip run of `graph` with the trainer's options
/// (executors, micro-batches, evaluation) and `settings`.
GossipOptions gossipOptionsFor(const Graph &graph, const TrainerOptions &trainer,
                               const GossipSettings &settings);

/// stretto-train's and stretto-run's entry for sync = "gossip" | "diloco":
/// the replicas on threads of this process, or with `comm` this process as
/// replica comm->rank(); each driven round by round by driveSteps with
/// `trainer`'s output settings (rank 0 prints and writes the run's files).
/// Returns 0, 1 after printing an error, 130 after a stop, and
/// kExitRunFailed (Launcher.h) for a diverged replica of several processes.
int runGossipTraining(const Graph &graph, DataSource &data, const GossipOptions &options,
                      const TrainerOptions &trainer, Communicator *comm = nullptr);

} // namespace stretto

#endif // STRETTO_GOSSIP_H
