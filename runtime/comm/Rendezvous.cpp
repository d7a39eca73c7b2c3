//===- Rendezvous.cpp - the job's environment and its TCP store -----------===//
//
// The store speaks length-prefixed frames over one TCP connection per
// client: a request is [u32 length][u8 op][fields], a field is [u32
// length][bytes]; a reply is [u32 length][u8 status][bytes]. The first
// request must be HELLO with the job's token. GET is answered when the key
// exists, so a rank waiting for another blocks on its own socket (with its
// own deadline), not on the server.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/Distributed.h"
#include "stretto/Runtime/Graph.h" // fnv1a64
#include "comm/Socket.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace stretto;

// Environment

namespace {

std::optional<std::string> lookup(const std::vector<std::string> &env, const std::string &key) {
  if (env.empty()) {
    const char *v = std::getenv(key.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  }
  for (const std::string &kv : env)
    if (kv.size() > key.size() && kv.compare(0, key.size(), key) == 0 && kv[key.size()] == '=')
      return kv.substr(key.size() + 1);
  return std::nullopt;
}

int parseCount(const std::string &var, const std::string &value, int min) {
  char *end = nullptr;
  errno = 0;
  long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end || errno || v < min || v > 1 << 20)
    throw std::runtime_error(var + "='" + value + "' is not an integer >= " + std::to_string(min));
  return static_cast<int>(v);
}

} // namespace

std::string stretto::jobTokenFromEnvironment(const std::vector<std::string> &env) {
  if (auto t = lookup(env, "STRETTO_JOB_TOKEN"))
    return *t;
  // Not a secret: a scheduler's job id keeps two jobs on one port apart.
  for (const char *var : {"SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"})
    if (auto id = lookup(env, var)) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%016llx",
                    static_cast<unsigned long long>(fnv1a64(std::string(var) + "=" + *id)));
      return buf;
    }
  return "";
}

std::optional<WorldInfo> stretto::worldFromEnvironment(const std::vector<std::string> &env) {
  WorldInfo w;
  struct Scheme {
    const char *name, *rank, *size, *localRank, *localSize;
  };
  // torchrun first: a torchrun inside an allocation wins over Slurm's own.
  const Scheme schemes[] = {
      {"torchrun variables", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
  };
  const Scheme *found = nullptr;
  for (const Scheme &s : schemes)
    if (lookup(env, s.rank) && lookup(env, s.size)) {
      found = &s;
      break;
    }
  if (!found)
    return std::nullopt;
  w.source = found->name;
  if (lookup(env, "STRETTO_LAUNCHER"))
    w.source = "stretto launcher";
  w.rank = parseCount(found->rank, *lookup(env, found->rank), 0);
  w.size = parseCount(found->size, *lookup(env, found->size), 1);
  if (w.rank >= w.size)
    throw std::runtime_error(std::string(found->rank) + "=" + std::to_string(w.rank) +
                             " is outside the world of " + found->size + "=" +
                             std::to_string(w.size));
  w.localRank = w.rank;
  w.localSize = w.size;
  if (auto v = lookup(env, found->localRank))
    w.localRank = parseCount(found->localRank, *v, 0);
  if (auto v = lookup(env, found->localSize)) {
    // Slurm writes "2(x3)" for uneven layouts; take the leading count.
    std::string s = v->substr(0, v->find('('));
    w.localSize = parseCount(found->localSize, s, 1);
  }
  if (w.localRank >= w.localSize)
    throw std::runtime_error(std::string(found->localRank) + "=" + std::to_string(w.localRank) +
                             " is outside " + found->localSize + "=" +
                             std::to_string(w.localSize));
  // The store's address. torchrun and our launcher always set both;
  // mpirun and srun leave them to the user, except on one node.
  auto addr = lookup(env, "MASTER_ADDR");
  auto port = lookup(env, "MASTER_PORT");
  // Without MASTER_PORT only a file-store rendezvous works (connectGloo
  // says so when it needs the port).
  if (port) {
    w.masterPort = parseCount("MASTER_PORT", *port, 1);
    if (w.masterPort > 65535)
      throw std::runtime_error("MASTER_PORT=" + *port + " is not a TCP port (1-65535)");
  }
  if (addr && !addr->empty())
    w.masterAddr = *addr;
  else if (w.localSize != w.size)
    throw std::runtime_error("MASTER_ADDR is not set and the run spans several nodes (" +
                             std::to_string(w.size) + " ranks, " + std::to_string(w.localSize) +
                             " on this node): set MASTER_ADDR to rank 0's host");
  w.token = jobTokenFromEnvironment(env);
  w.storeHostedElsewhere = lookup(env, "STRETTO_STORE_HOSTED").has_value();
  return w;
}

bool stretto::isLoopback(const std::string &addr) {
  if (addr == "localhost" || addr == "::1")
    return true;
  in_addr a{};
  return inet_pton(AF_INET, addr.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

// Sockets

std::string net::errnoText(int e) { return std::strerror(e); }

void net::Fd::reset(int f) {
  if (fd >= 0)
    ::close(fd);
  fd = f;
}

int net::msLeft(Deadline d) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

bool net::waitFor(int fd, short events, Deadline d) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, msLeft(d));
    if (rc > 0)
      return true;
    if (rc == 0)
      return false;
    if (errno != EINTR)
      throw std::runtime_error("poll: " + errnoText(errno));
  }
}

void net::sendAll(int fd, const void *data, size_t n, Deadline d, const std::string &what) {
  const char *p = static_cast<const char *>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitFor(fd, POLLOUT, d))
        throw std::runtime_error(what + ": timed out sending");
      continue;
    }
    throw std::runtime_error(what + ": " + errnoText(errno));
  }
}

void net::recvAll(int fd, void *data, size_t n, Deadline d, const std::string &what) {
  char *p = static_cast<char *>(data);
  while (n > 0) {
    if (!waitFor(fd, POLLIN, d))
      throw std::runtime_error(what + ": timed out");
    ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0)
      throw std::runtime_error(what + ": the connection was closed");
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
      continue;
    throw std::runtime_error(what + ": " + errnoText(errno));
  }
}

net::Fd net::connectTo(const std::string &host, int port, Deadline d) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  std::string where = host + ":" + std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0)
    throw std::runtime_error("cannot resolve " + host + ": " + gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo *)> guard(res, freeaddrinfo);
  int lastErr = ETIMEDOUT;
  // Retry while the server is not listening yet (rank 0 may start later).
  while (Clock::now() < d) {
    for (addrinfo *ai = res; ai; ai = ai->ai_next) {
      Fd s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (s.fd < 0)
        throw std::runtime_error("socket: " + errnoText(errno));
      int one = 1;
      ::setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (::connect(s.fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return s;
      if (errno == EINPROGRESS) {
        if (waitFor(s.fd, POLLOUT, std::min(d, Clock::now() + std::chrono::seconds(2)))) {
          int err = 0;
          socklen_t len = sizeof err;
          ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err == 0)
            return s;
          lastErr = err;
        } else {
          lastErr = ETIMEDOUT;
        }
      } else {
        lastErr = errno;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("cannot reach the store at " + where + ": " + errnoText(lastErr));
}

// Frames

namespace {

enum Op : uint8_t { Hello = 1, Set = 2, Get = 3, Add = 4 };
enum Status : uint8_t { Ok = 0, Error = 1 };
constexpr uint32_t kMaxFrame = 64u << 20; // values are addresses and ids
constexpr uint32_t kMaxKey = 4096;

void putU32(std::string &out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t getU32(const char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
void putField(std::string &out, const std::string &s) {
  putU32(out, static_cast<uint32_t>(s.size()));
  out += s;
}
/// Reads fields from a frame body; false when it is malformed.
bool takeField(const std::string &body, size_t &pos, std::string &out) {
  if (body.size() - pos < 4)
    return false;
  uint32_t n = getU32(body.data() + pos);
  pos += 4;
  if (body.size() - pos < n)
    return false;
  out = body.substr(pos, n);
  pos += n;
  return true;
}

} // namespace

// Server

struct StoreServer::Impl {
  net::Fd listenFd;
  int wake[2] = {-1, -1};
  int port = 0;
  std::string token;
  std::thread loop;

  struct Client {
    net::Fd fd;
    std::string in, out;
    bool hello = false, closing = false;
    std::vector<std::string> waiting; // keys of pending GETs, in order
  };
  std::map<std::string, std::string> data;

  ~Impl() {
    if (wake[1] >= 0) {
      char c = 0;
      (void)!::write(wake[1], &c, 1);
    }
    if (loop.joinable())
      loop.join();
    for (int f : wake)
      if (f >= 0)
        ::close(f);
  }

  static void reply(Client &c, Status s, const std::string &payload) {
    putU32(c.out, static_cast<uint32_t>(payload.size() + 1));
    c.out.push_back(static_cast<char>(s));
    c.out += payload;
  }

  /// Answers the GETs at the front of each queue whose key now exists.
  void serveWaiting(Client &c) {
    while (!c.waiting.empty()) {
      auto it = data.find(c.waiting.front());
      if (it == data.end())
        return;
      reply(c, Ok, it->second);
      c.waiting.erase(c.waiting.begin());
    }
  }

  void handle(Client &c, const std::string &frame) {
    if (frame.empty()) {
      c.closing = true;
      return;
    }
    uint8_t op = static_cast<uint8_t>(frame[0]);
    std::string body = frame.substr(1);
    size_t pos = 0;
    std::string a, b;
    if (!c.hello) {
      if (op != Hello || !takeField(body, pos, a)) {
        reply(c, Error, "the first request must present the job token");
        c.closing = true;
      } else if (a != token) {
        reply(c, Error,
              "wrong job token: this store belongs to another job (set STRETTO_JOB_TOKEN to the "
              "token of the job you mean to join)");
        c.closing = true;
      } else {
        c.hello = true;
        reply(c, Ok, "");
      }
      return;
    }
    switch (op) {
    case Set:
      if (!takeField(body, pos, a) || !takeField(body, pos, b) || a.size() > kMaxKey)
        break;
      data[a] = b;
      reply(c, Ok, "");
      return;
    case Get:
      if (!takeField(body, pos, a) || a.size() > kMaxKey)
        break;
      c.waiting.push_back(a);
      serveWaiting(c);
      return;
    case Add: {
      if (!takeField(body, pos, a) || !takeField(body, pos, b) || a.size() > kMaxKey)
        break;
      long long sum = std::atoll(data.count(a) ? data[a].c_str() : "0") + std::atoll(b.c_str());
      data[a] = std::to_string(sum);
      reply(c, Ok, data[a]);
      return;
    }
    default:
      break;
    }
    reply(c, Error, "malformed store request");
    c.closing = true;
  }

  void run() {
    std::vector<std::unique_ptr<Client>> clients;
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({wake[0], POLLIN, 0});
      fds.push_back({listenFd.fd, POLLIN, 0});
      for (auto &c : clients)
        fds.push_back({c->fd.fd, static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR)
          continue;
        return;
      }
      if (fds[0].revents)
        return;
      // Clients accepted below have no entry in `fds` yet (polled next time).
      const size_t polled = fds.size() - 2;
      if (fds[1].revents & POLLIN) {
        int f = ::accept4(listenFd.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (f >= 0) {
          auto c = std::make_unique<Client>();
          c->fd.reset(f);
          clients.push_back(std::move(c));
        }
      }
      bool changed = false;
      for (size_t i = 0; i < clients.size(); ++i) {
        Client &c = *clients[i];
        short ev = i < polled ? fds[i + 2].revents : 0;
        if (ev & (POLLIN | POLLHUP | POLLERR)) {
          char buf[65536];
          ssize_t k = ::recv(c.fd.fd, buf, sizeof buf, MSG_DONTWAIT);
          if (k > 0) {
            c.in.append(buf, static_cast<size_t>(k));
          } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
            c.closing = true;
            c.out.clear();
          }
          while (!c.closing && c.in.size() >= 4) {
            uint32_t n = getU32(c.in.data());
            if (n > kMaxFrame) {
              reply(c, Error, "store request too large");
              c.closing = true;
              break;
            }
            if (c.in.size() < 4 + static_cast<size_t>(n))
              break;
            std::string frame = c.in.substr(4, n);
            c.in.erase(0, 4 + static_cast<size_t>(n));
            handle(c, frame);
            changed = true;
          }
        }
        if (!c.out.empty() && (ev & POLLOUT || changed)) {
          ssize_t k = ::send(c.fd.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          if (k > 0)
            c.out.erase(0, static_cast<size_t>(k));
          else if (k < 0 && errno != EAGAIN && errno != EINTR)
            c.closing = true, c.out.clear();
        }
      }
      if (changed)
        for (auto &c : clients)
          if (!c->closing)
            serveWaiting(*c);
      clients.erase(std::remove_if(clients.begin(), clients.end(),
                                   [](const std::unique_ptr<Client> &c) {
                                     return c->closing && c->out.empty();
                                   }),
                    clients.end());
    }
  }
};

StoreServer::StoreServer(const std::string &bindAddr, int port, const std::string &token)
    : impl(std::make_unique<Impl>()) {
  impl->token = token;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  std::string where = bindAddr + ":" + std::to_string(port);
  int rc = ::getaddrinfo(bindAddr.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0)
    throw std::runtime_error("store: cannot resolve " + bindAddr + ": " + gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo *)> guard(res, freeaddrinfo);
  int err = 0;
  for (addrinfo *ai = res; ai && impl->listenFd.fd < 0; ai = ai->ai_next) {
    net::Fd s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    int one = 1;
    ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(s.fd, 128) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(s.fd, reinterpret_cast<sockaddr *>(&ss), &len);
      impl->port = ntohs(ss.ss_family == AF_INET6
                             ? reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port
                             : reinterpret_cast<sockaddr_in *>(&ss)->sin_port);
      impl->listenFd = std::move(s);
    } else {
      err = errno;
    }
  }
  if (impl->listenFd.fd < 0)
    throw std::runtime_error("store: cannot listen on " + where + ": " + net::errnoText(err) +
                             (err == EADDRINUSE ? " (choose another MASTER_PORT / --master-port)"
                                                : ""));
  if (::pipe2(impl->wake, O_CLOEXEC) != 0)
    throw std::runtime_error("store: pipe: " + net::errnoText(errno));
  impl->loop = std::thread([this] { impl->run(); });
}

StoreServer::~StoreServer() = default;
int StoreServer::port() const { return impl->port; }

// Client

struct StoreClient::Impl {
  net::Fd fd;
  std::string where;
  std::chrono::milliseconds timeout;
  std::mutex mu;

  std::string call(Op op, const std::vector<std::string> &fields, const std::string &what) {
    std::lock_guard<std::mutex> lock(mu);
    if (fd.fd < 0)
      throw std::runtime_error("store at " + where + ": the connection was lost earlier");
    std::string body(1, static_cast<char>(op));
    for (const std::string &f : fields)
      putField(body, f);
    std::string frame;
    putU32(frame, static_cast<uint32_t>(body.size()));
    frame += body;
    net::Deadline d = net::Clock::now() + timeout;
    try {
      net::sendAll(fd.fd, frame.data(), frame.size(), d, "store at " + where);
      char head[5];
      net::recvAll(fd.fd, head, 4, d, "store at " + where + " (" + what + ")");
      uint32_t n = getU32(head);
      if (n == 0 || n > kMaxFrame)
        throw std::runtime_error("store at " + where + ": malformed reply");
      std::string reply(n, '\0');
      net::recvAll(fd.fd, reply.data(), n, d, "store at " + where + " (" + what + ")");
      if (reply[0] != Ok)
        throw std::runtime_error("store at " + where + " refused " + what + ": " +
                                 reply.substr(1));
      return reply.substr(1);
    } catch (...) {
      fd.reset(); // the stream is out of step now
      throw;
    }
  }
};

StoreClient::StoreClient(const std::string &addr, int port, const std::string &token,
                         std::chrono::milliseconds timeout)
    : impl(std::make_unique<Impl>()) {
  impl->where = addr + ":" + std::to_string(port);
  impl->timeout = timeout;
  impl->fd = net::connectTo(addr, port, net::Clock::now() + timeout);
  impl->call(Hello, {token}, "this rank");
}
StoreClient::~StoreClient() = default;

void StoreClient::set(const std::string &key, const std::vector<char> &value) {
  impl->call(Set, {key, std::string(value.begin(), value.end())}, "set '" + key + "'");
}

std::vector<char> StoreClient::get(const std::string &key) {
  std::string v = impl->call(Get, {key}, "waiting for '" + key + "'");
  return std::vector<char>(v.begin(), v.end());
}

int64_t StoreClient::add(const std::string &key, int64_t delta) {
  return std::atoll(impl->call(Add, {key, std::to_string(delta)}, "add '" + key + "'").c_str());
}
