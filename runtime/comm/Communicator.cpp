//===- Communicator.cpp - the in-process communicator and tensor helpers --===//
#include "stretto/Runtime/Communicator.h"
#include "comm/WireFormat.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <system_error>
#include <tuple>

using namespace stretto;

// Wire headers

size_t stretto::wire::elementBytes(WireType t) {
  switch (t) {
  case WireType::F32: return 4;
  case WireType::F64: return 8;
  case WireType::I64: return 8;
  case WireType::Bytes: return 1;
  }
  return 0;
}

const char *stretto::wire::typeName(WireType t) {
  switch (t) {
  case WireType::F32: return "f32";
  case WireType::F64: return "f64";
  case WireType::I64: return "i64";
  case WireType::Bytes: return "bytes";
  }
  return "an unknown type";
}

uint64_t stretto::wire::Header::digest() const {
  // FNV-1a over the fields before `check`.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(magic);
  mix(version);
  mix(tag);
  mix(type);
  mix(count);
  return h;
}

wire::Header stretto::wire::makeHeader(uint64_t tag, WireType type, size_t count) {
  Header h;
  h.tag = tag;
  h.type = static_cast<uint32_t>(type);
  h.count = count;
  h.check = h.digest();
  return h;
}

void stretto::wire::checkHeader(const Header &h, int peer, uint64_t tag, WireType type,
                                size_t count) {
  auto where = [&] { return "rank " + std::to_string(peer); };
  if (h.magic != Header::kMagic || h.check != h.digest())
    throw CommError(peer, "a message from " + where() +
                              " is not a Stretto message (bad magic or header checksum): "
                              "mismatched versions, or something else on this port");
  if (h.version != Header::kVersion)
    throw CommError(peer, where() + " speaks wire version " + std::to_string(h.version) +
                              ", this rank " + std::to_string(Header::kVersion));
  if (h.tag != tag || h.type != static_cast<uint32_t>(type) || h.count != count) {
    std::string got = h.type >= 1 && h.type <= 4 ? typeName(static_cast<WireType>(h.type))
                                                  : "type " + std::to_string(h.type);
    throw CommError(peer, where() + " sent tag " + std::to_string(h.tag) + " with " +
                              std::to_string(h.count) + " " + got + " elements where tag " +
                              std::to_string(tag) + " with " + std::to_string(count) + " " +
                              typeName(type) + " elements was expected");
  }
}

// Tensors

std::unique_ptr<Request> stretto::sendTensor(Communicator &c, int peer, uint64_t tag,
                                             const HostTensor &t, DType dtype) {
  if (dtype == DType::F64)
    return c.isend(peer, tag, WireType::F64, t.data.data(), t.data.size());
  std::vector<float> f(t.data.begin(), t.data.end());
  return c.isend(peer, tag, WireType::F32, f.data(), f.size());
}

HostTensor stretto::recvTensor(Communicator &c, int peer, uint64_t tag, const Shape &shape,
                               DType dtype) {
  HostTensor t;
  t.shape = shape;
  size_t n = static_cast<size_t>(numElements(shape));
  if (dtype == DType::F64) {
    t.data.resize(n);
    c.recv(peer, tag, WireType::F64, t.data.data(), n);
  } else {
    std::vector<float> f(n);
    c.recv(peer, tag, WireType::F32, f.data(), n);
    t.data.assign(f.begin(), f.end());
  }
  return t;
}

std::string stretto::describeTimeout(std::chrono::milliseconds t) {
  if (t.count() % 1000 == 0)
    return std::to_string(t.count() / 1000) + " s";
  return std::to_string(t.count()) + " ms";
}

// In-process group

struct InProcessGroup::Shared {
  explicit Shared(int n) : size(n), aborted(n, false), left(n, false) {}
  struct Message {
    WireType type;
    size_t count;
    std::vector<char> bytes;
  };
  int size;
  std::mutex mu;
  std::condition_variable cv;
  // (src, dst, tag) -> queue of messages, in send order.
  std::map<std::tuple<int, int, uint64_t>, std::vector<Message>> box;
  std::vector<bool> aborted;
  std::vector<bool> left; // ranks that stopped (InProcessGroup::leave)
  std::string abortReason;
  int abortedBy = -1;

  // Collectives: a generation counter and each rank's contribution.
  int64_t generation = 0;
  int arrived = 0;
  std::vector<std::vector<char>> contributions;
  std::vector<char> result;
  int leaving = 0; // ranks yet to copy the last result out
};

namespace {

class InProcessComm final : public Communicator {
public:
  InProcessComm(std::shared_ptr<InProcessGroup::Shared> s, int r) : s(std::move(s)), r(r) {}
  int rank() const override { return r; }
  int size() const override { return s->size; }
  std::string transport() const override { return "in-process"; }

  std::unique_ptr<Request> isend(int peer, uint64_t tag, WireType type, const void *data,
                                 size_t count) override {
    checkPeer(peer);
    size_t bytes = count * wire::elementBytes(type);
    InProcessGroup::Shared::Message m{type, count, std::vector<char>(bytes)};
    if (bytes)
      std::memcpy(m.bytes.data(), data, bytes);
    {
      std::lock_guard<std::mutex> lock(s->mu);
      throwIfAborted();
      s->box[{r, peer, tag}].push_back(std::move(m));
    }
    s->cv.notify_all();
    bytesSent += static_cast<double>(bytes);
    return std::make_unique<Done>();
  }

  void recv(int peer, uint64_t tag, WireType type, void *data, size_t count) override {
    checkPeer(peer);
    auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(s->mu);
    auto key = std::make_tuple(peer, r, tag);
    auto ready = [&] {
      auto it = s->box.find(key);
      return s->aborted[r] || s->left[peer] || (it != s->box.end() && !it->second.empty());
    };
    if (!s->cv.wait_for(lock, timeout_, ready))
      throw CommError(peer, "rank " + std::to_string(r) + ": no message from rank " +
                                std::to_string(peer) + " (tag " + std::to_string(tag) +
                                ") within the timeout of " + describeTimeout(timeout_));
    throwIfAborted();
    auto it = s->box.find(key);
    if (it == s->box.end() || it->second.empty())
      throw CommError(peer, "rank " + std::to_string(r) + ": rank " + std::to_string(peer) +
                                " stopped before sending the message with tag " +
                                std::to_string(tag));
    InProcessGroup::Shared::Message m = std::move(it->second.front());
    it->second.erase(it->second.begin());
    if (it->second.empty())
      s->box.erase(it);
    lock.unlock();
    wire::Header h = wire::makeHeader(tag, m.type, m.count);
    wire::checkHeader(h, peer, tag, type, count);
    if (!m.bytes.empty())
      std::memcpy(data, m.bytes.data(), m.bytes.size());
    bytesReceived += static_cast<double>(m.bytes.size());
    commSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  std::unique_ptr<Request> irecv(int peer, uint64_t tag, WireType type, void *data,
                                 size_t count) override {
    checkPeer(peer);
    struct Deferred final : RecvRequest {
      InProcessComm &c;
      Deferred(InProcessComm &c, int p, uint64_t t, WireType ty, void *d, size_t n)
          : RecvRequest(p, t, ty, d, n), c(c) {}
      void wait() override {
        if (!done) {
          done = true;
          c.recv(peer, tag, type, data, count);
        }
      }
    };
    return std::make_unique<Deferred>(*this, peer, tag, type, data, count);
  }

  void allReduceSum(double *data, size_t count) override { reduce(data, count); }
  void allReduceSum(float *data, size_t count) override { reduce(data, count); }

  void broadcast(void *data, size_t bytes, int root) override {
    if (root < 0 || root >= s->size)
      throw CommError(root, "broadcast from rank " + std::to_string(root) + " in a group of " +
                                std::to_string(s->size));
    std::vector<char> mine(bytes);
    if (r == root && bytes)
      std::memcpy(mine.data(), data, bytes);
    collective(std::move(mine), [&](std::vector<std::vector<char>> &all) { return all[root]; });
    if (r != root && bytes)
      std::memcpy(data, s->result.data(), bytes);
    finishCollective();
  }

  void barrier() override {
    collective({}, [](std::vector<std::vector<char>> &) { return std::vector<char>(); });
    finishCollective();
  }

  void abort(const std::string &why) override {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      for (size_t i = 0; i < s->aborted.size(); ++i)
        s->aborted[i] = true;
      if (s->abortReason.empty()) {
        s->abortReason = why;
        s->abortedBy = r;
      }
    }
    s->cv.notify_all();
  }

private:
  struct Done final : Request {
    void wait() override {}
  };

  void checkPeer(int peer) const {
    if (peer < 0 || peer >= s->size || peer == r)
      throw CommError(peer, "rank " + std::to_string(r) + ": no peer rank " +
                                std::to_string(peer) + " in a group of " +
                                std::to_string(s->size));
  }
  void throwIfAnyLeft() const {
    for (int q = 0; q < s->size; ++q)
      if (s->left[q])
        throw CommError(q, "rank " + std::to_string(r) + ": rank " + std::to_string(q) +
                               " stopped, so the collective cannot complete");
  }
  void throwIfAborted() const {
    if (s->aborted[r])
      throw CommError(s->abortedBy, "aborted by rank " + std::to_string(s->abortedBy) + ": " +
                                        s->abortReason);
  }

  template <typename T> void reduce(T *data, size_t count) {
    std::vector<char> mine(count * sizeof(T));
    if (count)
      std::memcpy(mine.data(), data, mine.size());
    // Summed in rank order, the same bits on every rank.
    collective(std::move(mine), [&](std::vector<std::vector<char>> &all) {
      std::vector<char> out(count * sizeof(T));
      T *o = reinterpret_cast<T *>(out.data());
      for (size_t i = 0; i < all.size(); ++i) {
        if (all[i].size() != out.size())
          throw CommError(static_cast<int>(i), "all-reduce: rank " + std::to_string(i) +
                                                   " contributed " +
                                                   std::to_string(all[i].size() / sizeof(T)) +
                                                   " elements, rank 0 " + std::to_string(count));
        const T *p = reinterpret_cast<const T *>(all[i].data());
        for (size_t e = 0; e < count; ++e)
          o[e] = i == 0 ? p[e] : o[e] + p[e];
      }
      return out;
    });
    if (count)
      std::memcpy(data, s->result.data(), count * sizeof(T));
    finishCollective();
  }

  /// Everyone deposits; the last to arrive computes the result; everyone
  /// leaves with s->result valid until finishCollective().
  template <typename Fn> void collective(std::vector<char> mine, Fn combine) {
    auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(s->mu);
    throwIfAborted();
    // Wait until the previous collective has been left by everyone.
    if (!s->cv.wait_for(lock, timeout_, [&] { return s->aborted[r] || s->leaving == 0; }))
      throw CommError(-1, "a collective did not finish within " + describeTimeout(timeout_));
    throwIfAborted();
    throwIfAnyLeft();
    if (s->contributions.empty())
      s->contributions.resize(s->size);
    s->contributions[r] = std::move(mine);
    int64_t gen = s->generation;
    if (++s->arrived == s->size) {
      s->result = combine(s->contributions);
      s->arrived = 0;
      s->contributions.clear();
      ++s->generation;
      s->leaving = s->size;
      s->cv.notify_all();
    } else if (!s->cv.wait_for(lock, timeout_, [&] {
                 return s->aborted[r] || s->generation != gen ||
                        std::find(s->left.begin(), s->left.end(), true) != s->left.end();
               })) {
      throw CommError(-1, "rank " + std::to_string(r) +
                              ": a collective was not joined by every rank within " +
                              describeTimeout(timeout_));
    }
    throwIfAborted();
    if (s->generation == gen)
      throwIfAnyLeft(); // a rank stopped: this collective will never complete
    lock.release(); // finishCollective unlocks
    commSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void finishCollective() {
    std::unique_lock<std::mutex> lock(s->mu, std::adopt_lock);
    if (--s->leaving == 0)
      s->cv.notify_all();
  }

  std::shared_ptr<InProcessGroup::Shared> s;
  int r;
};

} // namespace

InProcessGroup::InProcessGroup(int size) : shared(std::make_shared<Shared>(size)) {
  if (size < 1)
    throw std::invalid_argument("a communicator group needs at least one rank");
  for (int r = 0; r < size; ++r)
    ranks.push_back(std::make_unique<InProcessComm>(shared, r));
}
InProcessGroup::~InProcessGroup() = default;
Communicator &InProcessGroup::rank(int r) { return *ranks.at(static_cast<size_t>(r)); }
int InProcessGroup::size() const { return shared->size; }
void InProcessGroup::leave(int r) {
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->left.at(static_cast<size_t>(r)) = true;
  }
  shared->cv.notify_all();
}

void stretto::runOnThreads(InProcessGroup &group,
                           const std::function<void(int, Communicator &)> &body,
                           const std::function<void(int, const std::string &)> &onError) {
  const int n = group.size();
  std::vector<std::thread> threads;
  std::string cannotStart;
  for (int r = 0; r < n && cannotStart.empty(); ++r) {
    try {
      threads.emplace_back([&, r] {
        try {
          body(r, group.rank(r));
        } catch (const std::exception &e) {
          onError(r, e.what());
        }
      });
    } catch (const std::system_error &e) {
      // No thread for rank r (the system's thread limit): it and the ranks
      // after it never run; the others must not wait for them.
      cannotStart = "cannot start a thread for rank " + std::to_string(r) + " of " +
                    std::to_string(n) + ": " + e.what();
      for (int q = r; q < n; ++q)
        onError(q, cannotStart);
    }
  }
  for (std::thread &t : threads)
    t.join();
  if (!cannotStart.empty())
    throw std::runtime_error(cannotStart);
}
