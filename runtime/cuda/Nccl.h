//===- Nccl.h - NCCL, loaded at run time (internal) ------------*- C++ -*-===//
//
// The CUDA toolkit's libnccl, opened with dlopen like cuBLASLt so that
// nothing links CUDA. The enum values and structs used are declared here
// and checked against <nccl.h> by NcclAbiTest. A communicator is created
// non-blocking (config.blocking = 0) from a unique id that rank 0 sends to
// the others over the bootstrap communicator (Gloo), polled against a
// deadline and aborted when it passes or a peer fails. NCCL refuses two
// ranks on one GPU: one rank per device.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_NCCL_H
#define STRETTO_RUNTIME_NCCL_H

#include "stretto/Runtime/Communicator.h"

#include <chrono>
#include <climits>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

namespace stretto::nccl {

// ncclResult_t, ncclDataType_t, ncclRedOp_t values (NCCL 2.x).
enum Result : int { kSuccess = 0, kInProgress = 7 };
enum DataType : int { kUint8 = 1, kFloat32 = 7, kFloat64 = 8 };
enum RedOp : int { kSum = 0 };

constexpr int kUniqueIdBytes = 128;
struct UniqueId {
  char internal[kUniqueIdBytes];
};

/// ncclConfig_t as of NCCL 2.28 (`size` and `version` tell the library which
/// fields exist, so an older library reads its prefix).
struct Config {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
  int trafficClass;
  const char *commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
};
constexpr unsigned int kConfigMagic = 0xcafebeef;
constexpr int kHeaderVersion = 22809; // NCCL_VERSION_CODE of the declarations above
/// NCCL_CONFIG_INITIALIZER.
Config defaultConfig();

using Comm = struct ncclComm *;

/// Every NCCL function the runtime calls, once: (member of Api, the name
/// after "nccl" in libnccl, the function's type).
#define STRETTO_NCCL_FUNCTIONS(X)                                                          \
  X(getVersion, GetVersion, int(int *))                                                    \
  X(getUniqueId, GetUniqueId, int(UniqueId *))                                             \
  X(commInitRankConfig, CommInitRankConfig, int(Comm *, int, UniqueId, int, Config *))     \
  X(commGetAsyncError, CommGetAsyncError, int(Comm, int *))                                \
  X(commAbort, CommAbort, int(Comm))                                                       \
  X(commDestroy, CommDestroy, int(Comm))                                                   \
  X(commFinalize, CommFinalize, int(Comm))                                                 \
  X(groupStart, GroupStart, int())                                                         \
  X(groupEnd, GroupEnd, int())                                                             \
  X(send, Send, int(const void *, size_t, int, int, Comm, void *))                         \
  X(recv, Recv, int(void *, size_t, int, int, Comm, void *))                               \
  X(allReduce, AllReduce, int(const void *, void *, size_t, int, int, Comm, void *))       \
  X(broadcast, Broadcast, int(const void *, void *, size_t, int, int, Comm, void *))       \
  X(getErrorString, GetErrorString, const char *(int))

struct Api {
#define STRETTO_NCCL_MEMBER(member, name, ...) std::add_pointer_t<__VA_ARGS__> member;
  STRETTO_NCCL_FUNCTIONS(STRETTO_NCCL_MEMBER)
#undef STRETTO_NCCL_MEMBER
  /// The library, or null with `why` (not installed, a symbol missing).
  static const Api *load(std::string &why);
};

/// One rank's NCCL communicator over device buffers on `stream` (a
/// CUstream; null: the default stream).
class Communicator {
public:
  /// Joins the `bootstrap` world's ranks as an NCCL communicator on the
  /// current CUDA device. Throws std::runtime_error naming the reason:
  /// no library, an NCCL error, or no progress within `timeout` (after
  /// aborting the half-made communicator).
  Communicator(stretto::Communicator &bootstrap, std::chrono::milliseconds timeout);
  /// The same over the given functions (tests: an NCCL without a GPU).
  Communicator(const Api &api, stretto::Communicator &bootstrap,
               std::chrono::milliseconds timeout);
  ~Communicator(); // finalizes, or aborts after an error
  int rank() const { return rank_; }
  int size() const { return size_; }
  int version() const { return version_; }

  /// Grouped point-to-point (between stages, gossip pairs) and all-reduce
  /// (data parallelism, DiLoCo), queued on `stream`. On a non-blocking
  /// communicator a call may return ncclInProgress, and NCCL refuses the
  /// next call until ncclCommGetAsyncError says ncclSuccess ("Attempt to use
  /// communicator before the previous operation returned ncclSuccess"):
  /// each call outside a group, and groupEnd, returns only once the
  /// communicator is ready again (polled against the deadline).
  void groupStart();
  void groupEnd();
  void send(const void *dev, size_t count, DataType t, int peer, void *stream);
  void recv(void *dev, size_t count, DataType t, int peer, void *stream);
  void allReduceSum(const void *in, void *out, size_t count, DataType t, void *stream);
  /// `root`'s `in` into every rank's `out` (a rank's first parameters from
  /// rank 0).
  void broadcast(const void *in, void *out, size_t count, DataType t, int root, void *stream);
  /// Polls `done` (e.g. the stream has drained) and the communicator's
  /// asynchronous error until the deadline; aborts and throws on an error
  /// or the timeout.
  void waitFor(const std::function<bool()> &done, const char *what);
  /// Aborts: every pending operation of this communicator ends.
  void abort();

private:
  void check(int rc, const char *what);
  /// check, then (outside a group) waits until the call has been taken.
  void settle(int rc, const char *what);
  const Api *api_ = nullptr;
  int groupDepth_ = 0;
  Comm comm_ = nullptr;
  int rank_ = 0, size_ = 1, version_ = 0;
  bool failed_ = false;
  std::chrono::milliseconds timeout_;
};

/// One rank on the current machine's GPU 0: a non-blocking init, a grouped
/// send/recv to itself, an all-reduce, a broadcast and an abort, checked against the
/// host. Prints one line per step; 0 ok, 1 wrong or failed, 2 no GPU or no
/// NCCL. (`stretto-run --nccl-check`, run by bench/gpu/device-check.sh.)
int selfCheck();

} // namespace stretto::nccl

#endif
