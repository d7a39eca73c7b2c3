//===- GlooCommunicator.cpp - ranks as processes over Gloo's TCP transport ===//
//
// Point-to-point: each message is two unbound-buffer sends on slots derived
// from its tag, the 40-byte header (WireFormat.h) then the payload, so the
// receiver checks what arrives before it takes a payload byte. Collectives
// are Gloo's (ring all-reduce, broadcast, barrier), each bounded by the
// communicator's timeout. A peer that died surfaces as Gloo's IoException on
// the pair ("connection closed by peer"), re-thrown as a CommError naming
// the rank.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/Distributed.h"
#include "comm/Socket.h"
#include "comm/WireFormat.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <arpa/inet.h>
#include <csignal>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

using namespace stretto;

namespace {

// Point-to-point slots live above Gloo's collective prefixes (0x01..0x08).
constexpr uint64_t kP2PPrefix = uint64_t(0x53) << 56;
constexpr uint64_t kMaxTag = uint64_t(1) << 48;
constexpr uint64_t kWatchSlot = uint64_t(0x54) << 56; // never sent to
constexpr uint32_t kAllreduceTag = 1, kBroadcastTag = 2, kBarrierTag = 3;

uint64_t slotOf(uint64_t tag, int part) { return kP2PPrefix | (tag << 1) | uint64_t(part); }

/// gloo::rendezvous::Store over our TCP store.
class TcpStoreAdapter : public gloo::rendezvous::Store {
public:
  explicit TcpStoreAdapter(StoreClient &c) : c(c) {}
  void set(const std::string &key, const std::vector<char> &data) override { c.set(key, data); }
  std::vector<char> get(const std::string &key) override { return c.get(key); }
  void wait(const std::vector<std::string> &keys) override {
    for (const std::string &k : keys)
      c.get(k);
  }
  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override {
    wait(keys);
  }

private:
  StoreClient &c;
};

class GlooComm final : public Communicator {
public:
  GlooComm(std::shared_ptr<gloo::rendezvous::Context> ctx,
           std::vector<std::shared_ptr<gloo::rendezvous::Context>> pairs,
           std::chrono::milliseconds timeout)
      : ctx(std::move(ctx)), pairs(std::move(pairs)), rank_(this->ctx->rank),
        size_(this->ctx->size) {
    timeout_ = timeout;
    if (const char *who = std::getenv("STRETTO_FAULT_CORRUPT_HEADERS"))
      if (std::atoi(who) == rank_) {
        corruptHeaders = true;
        corruptState = 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank_);
      }
    // A receive that never completes on every pair keeps the pair reading,
    // so a peer that dies is noticed at once and every later send to it
    // fails fast (a send alone would wait out the timeout).
    watchBytes.resize(this->pairs.size());
    for (size_t p = 0; p < this->pairs.size(); ++p)
      if (this->pairs[p]) {
        watches.push_back(this->pairs[p]->createUnboundBuffer(&watchBytes[p], 1));
        watches.back()->recv(pairRank(static_cast<int>(p)), kWatchSlot);
      }
  }
  ~GlooComm() override {
    for (auto &w : watches)
      w->abortWaitRecv();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string transport() const override { return "gloo/tcp"; }

  std::unique_ptr<Request> isend(int peer, uint64_t tag, WireType type, const void *data,
                                 size_t count) override {
    checkPeer(peer, tag);
    throwIfAborted();
    if (isDead(peer))
      throw CommError(peer, "rank " + std::to_string(rank()) + ": rank " + std::to_string(peer) +
                                " failed earlier; not sending to it");
    auto s = std::make_unique<Send>(*this, peer, tag);
    s->header = wire::makeHeader(tag, type, count);
    size_t bytes = count * wire::elementBytes(type);
    if (corruptHeaders) {
      // Fault injection (STRETTO_FAULT_CORRUPT_HEADERS=RANK, tests only):
      // that rank's headers are replaced by random bytes and no payload
      // follows, as a stranger or a broken peer would send.
      unsigned char *h = reinterpret_cast<unsigned char *>(&s->header);
      for (size_t i = 0; i < sizeof s->header; ++i) {
        corruptState = corruptState * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = static_cast<unsigned char>(corruptState >> 56);
      }
      if (corruptState & 1) { // half the time a plausible magic and version
        s->header.magic = wire::Header::kMagic;
        s->header.version = wire::Header::kVersion;
      }
      bytes = 0;
    }
    s->payload.assign(static_cast<const char *>(data), static_cast<const char *>(data) + bytes);
    try {
      gloo::Context &pc = *pairs.at(peer);
      s->hb = pc.createUnboundBuffer(&s->header, sizeof s->header);
      s->hb->send(pairRank(peer), slotOf(tag, 0));
      if (bytes) {
        s->pb = pc.createUnboundBuffer(s->payload.data(), bytes);
        s->pb->send(pairRank(peer), slotOf(tag, 1));
      }
    } catch (const std::exception &e) {
      throw failure(peer, "sending to", e);
    }
    bytesSent += static_cast<double>(bytes);
    trace("send to", peer, tag, "posted");
    return s;
  }

  void recv(int peer, uint64_t tag, WireType type, void *data, size_t count) override {
    checkPeer(peer, tag);
    auto t0 = std::chrono::steady_clock::now();
    trace("recv from", peer, tag, "start");
    wire::Header h;
    receive(peer, slotOf(tag, 0), &h, sizeof h, tag);
    wire::checkHeader(h, peer, tag, type, count);
    size_t bytes = count * wire::elementBytes(type);
    if (bytes)
      receive(peer, slotOf(tag, 1), data, bytes, tag);
    bytesReceived += static_cast<double>(bytes);
    commSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    trace("recv from", peer, tag, "done");
  }

  std::unique_ptr<Request> irecv(int peer, uint64_t tag, WireType type, void *data,
                                 size_t count) override {
    checkPeer(peer, tag);
    throwIfAborted();
    auto q = std::make_unique<Recv>(*this, peer, tag, type, data, count);
    try {
      q->hb = pairs.at(peer)->createUnboundBuffer(&q->header, sizeof q->header);
      q->hb->recv(pairRank(peer), slotOf(tag, 0), 0, sizeof q->header);
    } catch (const std::exception &e) {
      throw failure(peer, "receiving from", e);
    }
    trace("irecv from", peer, tag, "posted");
    return q;
  }

  void allReduceSum(double *data, size_t count) override { reduce(data, count); }
  void allReduceSum(float *data, size_t count) override { reduce(data, count); }

  void broadcast(void *data, size_t bytes, int root) override {
    if (bytes == 0 || size() == 1)
      return;
    collective("broadcast", [&] {
      gloo::BroadcastOptions opts(ctx);
      opts.setOutput(static_cast<uint8_t *>(data), bytes);
      opts.setRoot(root);
      opts.setTag(kBroadcastTag);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
    if (rank() == root)
      bytesSent += static_cast<double>(bytes);
    else
      bytesReceived += static_cast<double>(bytes);
  }

  void barrier() override {
    if (size() == 1)
      return;
    collective("barrier", [&] {
      gloo::BarrierOptions opts(ctx);
      opts.setTag(kBarrierTag);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

  void abort(const std::string &why) override {
    std::lock_guard<std::mutex> lock(mu);
    if (!aborted) {
      aborted = true;
      abortReason = why;
    }
    for (gloo::transport::UnboundBuffer *b : pendingRecvs)
      b->abortWaitRecv();
  }

private:
  struct Send final : Request {
    Send(GlooComm &c, int peer, uint64_t tag) : c(c), peer(peer), tag(tag) {}
    ~Send() override {
      try {
        wait();
      } catch (...) {
      }
    }
    void wait() override {
      if (done)
        return;
      done = true;
      auto t0 = std::chrono::steady_clock::now();
      struct Timed {
        double &into;
        std::chrono::steady_clock::time_point t0;
        ~Timed() {
          into += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
      } timed{c.commSeconds, t0};
      for (auto *b : {hb.get(), pb.get()})
        if (b) {
          if (c.isDead(peer)) {
            b->abortWaitSend();
            throw CommError(peer, "rank " + std::to_string(c.rank()) + ": rank " +
                                      std::to_string(peer) + " failed earlier; not sent");
          }
          bool ok;
          try {
            ok = b->waitSend(c.timeout_);
          } catch (const std::exception &e) {
            throw c.failure(peer, "sending to", e);
          }
          if (!ok)
            throw CommError(peer, "a send to rank " + std::to_string(peer) + " was aborted");
        }
    }
    GlooComm &c;
    int peer;
    uint64_t tag;
    bool done = false;
    wire::Header header;
    std::vector<char> payload;
    std::unique_ptr<gloo::transport::UnboundBuffer> hb, pb;
  };

  struct Recv final : RecvRequest {
    Recv(GlooComm &c, int peer, uint64_t tag, WireType type, void *data, size_t count)
        : RecvRequest(peer, tag, type, data, count), c(c) {}
    ~Recv() override {
      if (!done && hb)
        hb->abortWaitRecv();
    }
    void wait() override {
      if (done)
        return;
      done = true;
      auto t0 = std::chrono::steady_clock::now();
      bool ok;
      try {
        ok = hb->waitRecv(c.timeout_);
      } catch (const std::exception &e) {
        CommError err = c.failure(peer, "receiving from", e);
        throw CommError(peer, std::string(err.what()) + " (tag " + std::to_string(tag) + ")");
      }
      if (!ok)
        throw CommError(peer, "a receive from rank " + std::to_string(peer) + " was aborted");
      wire::checkHeader(header, peer, tag, type, count);
      size_t bytes = count * wire::elementBytes(type);
      if (bytes)
        c.receive(peer, slotOf(tag, 1), data, bytes, tag);
      c.bytesReceived += static_cast<double>(bytes);
      c.commSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      c.trace("irecv from", peer, tag, "done");
    }
    GlooComm &c;
    wire::Header header;
    std::unique_ptr<gloo::transport::UnboundBuffer> hb;
  };

  void checkPeer(int peer, uint64_t tag) const {
    if (peer < 0 || peer >= size() || peer == rank())
      throw CommError(peer, "rank " + std::to_string(rank()) + ": no peer rank " +
                                std::to_string(peer) + " in a world of " + std::to_string(size()));
    if (tag >= kMaxTag)
      throw CommError(peer, "message tag " + std::to_string(tag) + " is beyond 2^48");
  }

  void throwIfAborted() {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted)
      throw CommError(-1, "rank " + std::to_string(rank()) + " aborted: " + abortReason);
  }

  CommError failure(int peer, const char *doing, const std::exception &e) const {
    std::string what = e.what();
    auto gone = [](const std::string &w) {
      return w.find("closed") != std::string::npos || w.find("reset") != std::string::npos ||
             w.find("Broken pipe") != std::string::npos;
    };
    if (gone(what) ||
        what.find("imed out") != std::string::npos || what.find("timeout") != std::string::npos)
      markDead(peer);
    std::string why = what.find("imed out") != std::string::npos
                          ? "no progress within the timeout of " + describeTimeout(timeout_) +
                                " (is rank " + std::to_string(peer) + " stalled?)"
                      : gone(what)
                          ? "the connection was closed: rank " + std::to_string(peer) +
                                " exited or died"
                          : what;
    if (why != what)
      why += " [gloo: " + what + "]";
    return CommError(peer, "rank " + std::to_string(rank()) + ": " + doing + " rank " +
                               std::to_string(peer) + " failed: " + why);
  }

  void receive(int peer, uint64_t slot, void *data, size_t bytes, uint64_t tag) {
    throwIfAborted();
    std::unique_ptr<gloo::transport::UnboundBuffer> b;
    bool ok = false;
    try {
      b = pairs.at(peer)->createUnboundBuffer(data, bytes);
      {
        std::lock_guard<std::mutex> lock(mu);
        pendingRecvs.insert(b.get());
      }
      b->recv(pairRank(peer), slot, 0, bytes);
      ok = b->waitRecv(timeout_);
    } catch (const std::exception &e) {
      forget(b.get());
      CommError err = failure(peer, "receiving from", e);
      throw CommError(peer, std::string(err.what()) + " (tag " + std::to_string(tag) + ")");
    }
    forget(b.get());
    if (!ok) {
      std::lock_guard<std::mutex> lock(mu);
      throw CommError(-1, "rank " + std::to_string(rank()) + " aborted while receiving from rank " +
                              std::to_string(peer) + ": " + abortReason);
    }
  }
  void forget(gloo::transport::UnboundBuffer *b) {
    std::lock_guard<std::mutex> lock(mu);
    pendingRecvs.erase(b);
  }

  template <typename Fn> void collective(const char *what, Fn fn) {
    throwIfAborted();
    if (!ctx)
      throw CommError(-1, "rank " + std::to_string(rank()) + ": no " + what +
                              ": an earlier collective failed (point-to-point still works)");
    auto t0 = std::chrono::steady_clock::now();
    try {
      fn();
    } catch (const std::exception &e) {
      // The full mesh is unusable now. Closing it makes the ranks still
      // waiting in this collective fail at once instead of at their
      // timeout; the pairs' own contexts keep point-to-point working.
      ctx.reset();
      std::string w = e.what();
      const std::string head = "rank " + std::to_string(rank()) + ": " + what + " over " +
                               std::to_string(size()) + " ranks failed: ";
      if (w.find("closed") != std::string::npos || w.find("reset") != std::string::npos ||
          w.find("Broken pipe") != std::string::npos) {
        // Of two ranks, the other one is gone; of more, Gloo's message only
        // gives the socket address.
        if (size() == 2)
          throw failure(1 - rank(), (std::string(what) + " with").c_str(), e);
        throw CommError(-1, head + "a connection was closed: a rank exited or died [gloo: " + w +
                                "]");
      }
      throw CommError(-1, head + (w.find("imed out") != std::string::npos
                                      ? "not every rank joined within " + describeTimeout(timeout_)
                                      : w));
    }
    commSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  template <typename T> void reduce(T *data, size_t count) {
    if (count == 0 || size() == 1)
      return;
    collective("all-reduce", [&] {
      gloo::AllreduceOptions opts(ctx);
      opts.setOutput(data, count);
      void (*fn)(void *, const void *, const void *, size_t) = &gloo::sum<T>;
      opts.setReduceFunction(fn);
      opts.setTag(kAllreduceTag);
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    });
    bytesSent += static_cast<double>(count * sizeof(T));
    bytesReceived += static_cast<double>(count * sizeof(T));
  }

  /// STRETTO_TRACE_COMM=1: every point-to-point message on stderr.
  void trace(const char *what, int peer, uint64_t tag, const char *state) const {
    static const bool on = std::getenv("STRETTO_TRACE_COMM") != nullptr;
    if (!on)
      return;
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                   .count();
    std::fprintf(stderr, "comm %.3f rank %d %s %d tag %llu %s\n", t, rank(), what, peer,
                 (unsigned long long)tag, state);
  }

  /// The peer's rank in the two-rank context of this pair.
  int pairRank(int peer) const { return peer < rank() ? 0 : 1; }

  // Collectives run on the full mesh; point-to-point messages on a context
  // of their own per pair: Gloo signals a pair's failure to every pending
  // buffer of its context, so a dead peer must not fail the waits on others.
  std::shared_ptr<gloo::rendezvous::Context> ctx; // null after a failed collective
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> pairs; // by peer; [rank()] empty
  int rank_, size_;
  bool corruptHeaders = false;
  uint64_t corruptState = 0;
  std::vector<char> watchBytes;
  // Peers whose connection failed: a send to them is not waited for (Gloo
  // would wait out the timeout on a closed pair).
  mutable std::mutex deadMu;
  mutable std::set<int> deadPeers;
  void markDead(int peer) const {
    std::lock_guard<std::mutex> lock(deadMu);
    deadPeers.insert(peer);
  }
  bool isDead(int peer) const {
    std::lock_guard<std::mutex> lock(deadMu);
    return deadPeers.count(peer) > 0;
  }
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> watches;
  std::mutex mu;
  bool aborted = false;
  std::string abortReason;
  std::set<gloo::transport::UnboundBuffer *> pendingRecvs;
};

/// The address of this host that routes to `peer` (no packet is sent:
/// connect() on a UDP socket only picks the route).
std::string localAddressToward(const std::string &peer) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (::getaddrinfo(peer.c_str(), "9", &hints, &res) != 0)
    return "";
  std::unique_ptr<addrinfo, void (*)(addrinfo *)> guard(res, freeaddrinfo);
  net::Fd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (s.fd < 0 || ::connect(s.fd, res->ai_addr, res->ai_addrlen) != 0)
    return "";
  sockaddr_in me{};
  socklen_t len = sizeof me;
  if (::getsockname(s.fd, reinterpret_cast<sockaddr *>(&me), &len) != 0)
    return "";
  char buf[INET_ADDRSTRLEN];
  return inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf) ? buf : "";
}

} // namespace

std::unique_ptr<Communicator> stretto::connectGloo(const WorldInfo &w, const ConnectOptions &o) {
  // A write to the socket of a rank that died raises SIGPIPE, whose default
  // action ends this process without a word (Python ignores SIGPIPE, so
  // torch.distributed never meets it). Ignored, the write fails with EPIPE
  // and the error names the dead rank.
  std::signal(SIGPIPE, SIG_IGN);
  const std::string where = w.masterAddr + ":" + std::to_string(w.masterPort);
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<StoreClient> client;
  std::unique_ptr<gloo::rendezvous::Store> base;
  const bool fileStore = o.rendezvous.rfind("file:", 0) == 0;
  if (!o.rendezvous.empty() && !fileStore)
    throw std::runtime_error("--rendezvous must be empty (the TCP store) or file:DIR, got '" +
                             o.rendezvous + "'");
  if (fileStore) {
    std::string dir = o.rendezvous.substr(5);
    if (dir.empty() || ::access(dir.c_str(), W_OK) != 0)
      throw std::runtime_error("rendezvous folder '" + dir + "' is not a writable folder");
    if (o.runId.empty())
      throw std::runtime_error("a file-store rendezvous needs a run id (STRETTO_RUN_ID), fresh "
                               "for every run: the folder never forgets a key");
    base = std::make_unique<gloo::rendezvous::FileStore>(dir);
  } else {
    if (w.masterPort == 0)
      throw std::runtime_error("MASTER_PORT is not set: a run of " + std::to_string(w.size) +
                               " processes (from " + w.source +
                               ") meets at MASTER_ADDR:MASTER_PORT; set both (or start it with "
                               "--nproc, which picks them, or use --rendezvous file:DIR)");
    if (w.rank == 0 && !w.storeHostedElsewhere) {
      // Loopback unless the job spans hosts (MASTER_ADDR names this one).
      std::string bindAddr = isLoopback(w.masterAddr) ? "127.0.0.1" : w.masterAddr;
      server = std::make_unique<StoreServer>(bindAddr, w.masterPort, w.token);
    }
    try {
      client = std::make_unique<StoreClient>(w.masterAddr, w.masterPort, w.token, o.timeout);
    } catch (const std::exception &e) {
      throw std::runtime_error("rank " + std::to_string(w.rank) + ": rendezvous at " + where +
                               " failed within " + describeTimeout(o.timeout) + ": " + e.what());
    }
    base = std::make_unique<TcpStoreAdapter>(*client);
  }
  std::string prefix = "stretto/" + (o.runId.empty() ? std::string("run") : o.runId);
  gloo::rendezvous::PrefixStore store(prefix, *base);

  // Every rank announces itself and its idea of the world; all must agree.
  auto text = [](const std::string &s) { return std::vector<char>(s.begin(), s.end()); };
  try {
    if (client && client->add(prefix + "/claim/" + std::to_string(w.rank), 1) > 1)
      throw std::runtime_error("rank " + std::to_string(w.rank) +
                               " was claimed twice: two processes have the same RANK");
    store.set("hello/" + std::to_string(w.rank), text(std::to_string(w.size)));
    for (int r = 0; r < w.size; ++r) {
      std::vector<char> v;
      try {
        store.wait({"hello/" + std::to_string(r)}, o.timeout);
        v = store.get("hello/" + std::to_string(r));
      } catch (const std::exception &) {
        throw std::runtime_error("rank " + std::to_string(r) + " of " + std::to_string(w.size) +
                                 " did not join the rendezvous at " + where + " within " +
                                 describeTimeout(o.timeout) +
                                 " (not started, another MASTER_PORT, or another job token?)");
      }
      std::string theirs(v.begin(), v.end());
      if (theirs != std::to_string(w.size))
        throw std::runtime_error("rank " + std::to_string(r) + " was started with WORLD_SIZE=" +
                                 theirs + ", this rank (" + std::to_string(w.rank) +
                                 ") with WORLD_SIZE=" + std::to_string(w.size));
    }
  } catch (const gloo::Exception &e) {
    throw std::runtime_error(std::string("rendezvous: ") + e.what());
  }

  gloo::transport::tcp::attr attr;
  if (!o.iface.empty())
    attr.iface = o.iface;
  else if (isLoopback(w.masterAddr))
    attr.hostname = "127.0.0.1";
  else {
    attr.hostname = localAddressToward(w.masterAddr);
    if (attr.hostname.empty())
      throw std::runtime_error("no local address routes to MASTER_ADDR " + w.masterAddr +
                               "; name the network interface with --iface");
  }
  std::shared_ptr<gloo::transport::Device> dev;
  try {
    dev = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception &e) {
    throw std::runtime_error("Gloo could not open a TCP device on " +
                             (o.iface.empty() ? attr.hostname : "interface " + o.iface) + ": " +
                             e.what());
  }
  auto ctx = std::make_shared<gloo::rendezvous::Context>(w.rank, w.size);
  ctx->setTimeout(o.timeout);
  try {
    gloo::rendezvous::PrefixStore meshStore("mesh", store);
    ctx->connectFullMesh(meshStore, dev);
  } catch (const std::exception &e) {
    throw std::runtime_error("rank " + std::to_string(w.rank) + ": connecting to the other " +
                             std::to_string(w.size - 1) + " ranks failed: " + e.what());
  }
  // A two-rank context per pair, connected in one global order of pairs
  // (each rank waits only on pairs that come before in that order).
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> pairs(w.size);
  for (int a = 0; a < w.size; ++a)
    for (int b = a + 1; b < w.size; ++b) {
      if (a != w.rank && b != w.rank)
        continue;
      int peer = a == w.rank ? b : a;
      auto pc = std::make_shared<gloo::rendezvous::Context>(a == w.rank ? 0 : 1, 2);
      pc->setTimeout(o.timeout);
      try {
        gloo::rendezvous::PrefixStore pairStore(
            "pair/" + std::to_string(a) + "/" + std::to_string(b), store);
        pc->connectFullMesh(pairStore, dev);
      } catch (const std::exception &e) {
        throw std::runtime_error("rank " + std::to_string(w.rank) + ": connecting to rank " +
                                 std::to_string(peer) + " failed: " + e.what());
      }
      pairs[peer] = std::move(pc);
    }
  auto comm = std::make_unique<GlooComm>(ctx, std::move(pairs), o.timeout);
  // Everyone is connected before the store may go away with rank 0.
  comm->barrier();
  if (server) {
    // Rank 0 keeps hosting until the others no longer need it: they only
    // used it to rendezvous, which the barrier says is over.
    server.reset();
  }
  return comm;
}
