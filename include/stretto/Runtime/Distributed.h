//===- Distributed.h - ranks as processes: rendezvous and Gloo --*- C++ -*-===//
//
// A run of several processes finds its place from the environment the
// usual launchers set — torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; Open MPI's
// OMPI_COMM_WORLD_*; Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID — and
// meets its peers through a small key-value store: a TCP store hosted by
// rank 0 (or by the launcher) on MASTER_ADDR:MASTER_PORT, joined with a
// per-job token, or a folder on a shared file system. Over it, Gloo's TCP
// transport connects every pair of ranks; the result is a Communicator.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_DISTRIBUTED_H
#define STRETTO_RUNTIME_DISTRIBUTED_H

#include "stretto/Runtime/Communicator.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace stretto {

/// Where this process stands in a multi-process run.
struct WorldInfo {
  int rank = 0, size = 1;
  int localRank = 0, localSize = 1;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 0;  // 0: not set (a file-store rendezvous needs none)
  std::string token;   // joins the store; empty: none required
  std::string source;  // "torchrun variables", "Open MPI", "Slurm", "stretto launcher"
  bool storeHostedElsewhere = false; // the launcher hosts the store, not rank 0
};

/// The world described by the environment (`env`, or the process's when
/// empty), or nothing when no launcher variable is set (one process). Throws
/// std::runtime_error naming the variable when one is malformed or
/// inconsistent (rank outside the world, a missing MASTER_PORT, ...).
std::optional<WorldInfo> worldFromEnvironment(const std::vector<std::string> &env = {});

/// The per-job token: STRETTO_JOB_TOKEN when set, else derived from the
/// scheduler's job id (SLURM_JOB_ID, Open MPI's job id), else empty.
std::string jobTokenFromEnvironment(const std::vector<std::string> &env = {});

struct ConnectOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  std::string iface;  // network interface for Gloo's pairs (multi-homed hosts)
  std::string rendezvous; // "" : TCP store at MASTER_ADDR:MASTER_PORT; "file:DIR"
  std::string runId;      // separates runs sharing a file-store folder
};

/// Joins the world over Gloo (TCP). Rank 0 hosts the TCP store unless the
/// launcher does. Checks that every rank agrees on the world size. Throws
/// std::runtime_error with a message naming the address, port or missing
/// rank when rendezvous fails or runs past the timeout.
std::unique_ptr<Communicator> connectGloo(const WorldInfo &world, const ConnectOptions &options);

/// A TCP key-value store (the rendezvous of a job): serves set/get/wait to
/// clients that present `token`. Binds `bindAddr:port` (port 0: a free
/// one); throws naming the address and errno when it cannot.
class StoreServer {
public:
  StoreServer(const std::string &bindAddr, int port, const std::string &token);
  ~StoreServer();
  int port() const;
  StoreServer(const StoreServer &) = delete;
  StoreServer &operator=(const StoreServer &) = delete;

  struct Impl;

private:
  std::unique_ptr<Impl> impl;
};

/// A client of a StoreServer, for tests and tools.
class StoreClient {
public:
  StoreClient(const std::string &addr, int port, const std::string &token,
              std::chrono::milliseconds timeout);
  ~StoreClient();
  void set(const std::string &key, const std::vector<char> &value);
  /// Waits for the key (up to the timeout).
  std::vector<char> get(const std::string &key);
  /// Atomically adds `delta` to a decimal counter under `key`; returns the sum.
  int64_t add(const std::string &key, int64_t delta);

  struct Impl;

private:
  std::unique_ptr<Impl> impl;
};

/// True for 127.0.0.0/8, ::1 and "localhost".
bool isLoopback(const std::string &addr);

} // namespace stretto

#endif
