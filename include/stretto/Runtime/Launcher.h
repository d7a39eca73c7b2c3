//===- Launcher.h - start the local ranks of a job (--nproc) --*- C++ -*-===//
//
// Like `torchrun --standalone`: starts N copies of a command on this node,
// each with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT and the job's token in its environment, hosts the job's
// rendezvous store (on node 0), prefixes every output line with its rank,
// forwards Ctrl-C and SIGTERM, and stops the job when a rank fails.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_LAUNCHER_H
#define STRETTO_RUNTIME_LAUNCHER_H

#include <chrono>
#include <string>
#include <vector>

namespace stretto {

struct LaunchOptions {
  int nproc = 1;                  // ranks on this node
  int nnodes = 1, nodeRank = 0;   // several nodes: each runs a launcher
  std::string masterAddr;         // default 127.0.0.1 (one node)
  int masterPort = 0;             // 0: a free port (one node only)
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  std::string logDir;             // every rank's full output, rank<N>.log
  bool continueOnFailure = false; // --on-peer-failure=continue: others run on
  bool onPeerFailureGiven = false; // the flag was given (else the mode's default)
  std::vector<std::string> command; // program and arguments of every rank
};

/// The exit status of a rank whose failure every rank must stop for (a
/// diverged gossip replica): the launcher stops the job whatever
/// --on-peer-failure says.
constexpr int kExitRunFailed = 3;

/// Runs the job; returns 0 when every rank exited 0, else the first failing
/// rank's exit status (128+signal for a signal), after stopping the others
/// (SIGTERM, then SIGKILL past the timeout). Prints one line naming the
/// failed rank. With continueOnFailure the others run on (gossip replicas
/// drop the dead one) and the job's status is the survivors'. Throws
/// std::runtime_error on bad options.
int launchRanks(const LaunchOptions &options);

/// Splits launcher flags (--nproc, --nnodes, --node-rank, --master-addr,
/// --master-port, --log-dir: rows of the flag table, stretto/Runtime/Flags.h)
/// out of `args` into `options`; the rest is returned in order. `--timeout`
/// and `--on-peer-failure` stay in the rest (every rank needs them) but are
/// also read. Throws std::runtime_error on a malformed value.
std::vector<std::string> takeLaunchFlags(const std::vector<std::string> &args,
                                         LaunchOptions &options);

/// Unless --on-peer-failure was given, the plan at `planPath` decides what
/// a dead rank does to the job (peerFailureDefault: gossip and DiLoCo
/// replicas continue, pipelines and data parallelism stop). Throws
/// std::runtime_error when the plan cannot be read.
void applyPeerFailureDefault(LaunchOptions &options, const std::string &planPath);

/// The path of the running executable (/proc/self/exe).
std::string selfExecutable();

} // namespace stretto

#endif
