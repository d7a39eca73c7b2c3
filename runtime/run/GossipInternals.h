//===- GossipInternals.h - what the gossip run mode shares ------*- C++ -*-===//
//
// Gossip.cpp's helpers that GossipRun.cpp (the replicas' run mode) uses:
// the simulated clock, a replica's executor and flat parameters, the local
// steps and topology a run uses.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUN_GOSSIPINTERNALS_H
#define STRETTO_RUN_GOSSIPINTERNALS_H

#include "stretto/Runtime/Gossip.h"

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace stretto::gossip {

/// A replica whose loss or state went non-finite: the run stops (unlike a
/// replica that dies, which the others survive).
struct Diverged : std::runtime_error {
  using std::runtime_error::runtime_error;
};

size_t elementBytes(DType t);

/// Ring all-reduce of `bytes` among `members` (sorted): 2(n−1) steps, each
/// moving bytes/n over every ring link at once, so the slowest link paces it.
double allReduceTime(const NetworkModel &net, const std::vector<int> &members, double bytes);

/// Replica r's simulated clocks after a round: the peers that answered and
/// the time each was ready (per network); an all-reduce on the complete
/// graph, pairwise exchanges elsewhere. Counts the bytes sent.
void advanceClocks(ReplicaReport &rep, int r, Topology topo, const std::vector<int> &peers,
                   const std::vector<bool> &answered,
                   const std::vector<std::vector<double>> &peerReady,
                   const std::vector<double> &ready, double roundBytes,
                   const GossipOptions &opt);

/// The parameters in the graph's order, as one vector, and back.
std::vector<double> flattenParams(const Graph &g, const Executor &ex);
std::map<std::string, HostTensor> unflattenParams(const Graph &g, const std::vector<double> &flat);

/// The options' local steps, else the plan's: one value for every replica,
/// or one per replica.
std::vector<int64_t> localStepsPerReplica(const Graph &graph, const GossipOptions &opt, int R);

/// The options' topology, else the plan's (complete when neither names one).
Topology topologyOf(const Graph &graph, const GossipOptions &opt);

} // namespace stretto::gossip

#endif // STRETTO_RUN_GOSSIPINTERNALS_H
