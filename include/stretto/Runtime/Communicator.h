//===- Communicator.h - ranks that exchange tensors (no MLIR) --*- C++ -*-===//
//
// One interface under the pipeline runtime, synchronous data parallelism and
// the gossip/DiLoCo runtime, whatever carries the bytes: threads of one
// process (InProcessGroup) or processes over Gloo's TCP transport
// (Distributed.h). A communicator is one rank's view of a group of `size()`
// ranks.
//
// Point-to-point messages are tagged; a receive names its peer and tag and
// states the shape and element type it expects, and a message that does not
// match (another tag, size or type, or bytes that are not a Stretto message
// at all) is a CommError naming the peer — never a write past the buffer.
// Sends do not wait for the receiver: they return a Request whose wait()
// says when the buffer was handed over. Every wait is bounded by timeout();
// a peer that died or stalled past it is a CommError naming that peer.
// abort() unblocks every wait of this rank with a CommError.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_COMMUNICATOR_H
#define STRETTO_RUNTIME_COMMUNICATOR_H

#include "stretto/Runtime/Executor.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace stretto {

/// A failed exchange: `peer` is the rank at fault (-1 when none is known).
class CommError : public std::runtime_error {
public:
  CommError(int peer, const std::string &what) : std::runtime_error(what), peer(peer) {}
  int peer;
};

/// Element types on the wire.
enum class WireType : uint32_t { F32 = 1, F64 = 2, I64 = 3, Bytes = 4 };

/// A pending send; wait() returns once the bytes were handed over (or
/// throws CommError). Destroying an unwaited request waits.
class Request {
public:
  virtual ~Request() = default;
  virtual void wait() = 0;
};

/// A posted receive of every transport: what irecv was asked for; its
/// wait() fills `data` (once: `done`).
struct RecvRequest : Request {
  RecvRequest(int peer, uint64_t tag, WireType type, void *data, size_t count)
      : peer(peer), tag(tag), type(type), data(data), count(count) {}
  int peer;
  uint64_t tag;
  WireType type;
  void *data;
  size_t count;
  bool done = false;
};

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// What carries the bytes, for messages ("in-process", "gloo/tcp").
  virtual std::string transport() const = 0;

  /// Sends `count` elements of `type` at `data` to `peer` under `tag`
  /// (tags below 2^48). The data is copied before the call returns.
  virtual std::unique_ptr<Request> isend(int peer, uint64_t tag, WireType type,
                                         const void *data, size_t count) = 0;
  /// Receives exactly `count` elements of `type` from `peer` under `tag`.
  virtual void recv(int peer, uint64_t tag, WireType type, void *data, size_t count) = 0;
  /// The same, posted now and completed by wait() (`data` must stay valid
  /// until then). Posting a receive also watches the peer's connection: a
  /// peer that died is noticed at once, not after the timeout.
  virtual std::unique_ptr<Request> irecv(int peer, uint64_t tag, WireType type, void *data,
                                         size_t count) = 0;

  /// In place, over every rank; every rank gets the same bits.
  virtual void allReduceSum(double *data, size_t count) = 0;
  virtual void allReduceSum(float *data, size_t count) = 0;
  virtual void broadcast(void *data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  /// Makes every current and later wait of this rank throw CommError.
  virtual void abort(const std::string &why) = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void setTimeout(std::chrono::milliseconds t) { timeout_ = t; }

  /// Bytes this rank sent and received through point-to-point and
  /// collectives (payload only), and seconds spent waiting in them.
  double bytesSent = 0, bytesReceived = 0, commSeconds = 0;

protected:
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
};

/// Tensors: f32 tensors travel as f32 (exact: their values are f32), f64 as
/// f64. The receiver checks the shape's element count against `shape`.
std::unique_ptr<Request> sendTensor(Communicator &c, int peer, uint64_t tag,
                                    const HostTensor &t, DType dtype);
HostTensor recvTensor(Communicator &c, int peer, uint64_t tag, const Shape &shape, DType dtype);

/// Threads of one process: `size` ranks sharing mailboxes. rank(r) is rank
/// r's communicator; the group must outlive them.
class InProcessGroup {
public:
  explicit InProcessGroup(int size);
  ~InProcessGroup();
  Communicator &rank(int r);
  int size() const;
  /// Rank r stopped (its thread failed or was stopped on purpose): a receive
  /// from it with no message waiting, and any collective, fails at once
  /// with a CommError naming it, as a closed connection does between
  /// processes. Messages it sent before stopping are still delivered.
  void leave(int r);

  struct Shared;

private:
  std::shared_ptr<Shared> shared;
  std::vector<std::unique_ptr<Communicator>> ranks;
};

/// Runs `body(r, group.rank(r))` for every rank on a thread of its own and
/// waits for all. A rank whose body throws, or whose thread cannot start,
/// is handed to `onError(r, what)`, which decides what its peers see
/// (group.rank(r).abort or group.leave). Throws std::runtime_error after
/// joining when a thread could not start.
void runOnThreads(InProcessGroup &group, const std::function<void(int, Communicator &)> &body,
                  const std::function<void(int, const std::string &)> &onError);

/// A description of `timeout` for messages: "30 s", "250 ms".
std::string describeTimeout(std::chrono::milliseconds t);

} // namespace stretto

#endif
