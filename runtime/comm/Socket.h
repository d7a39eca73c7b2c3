//===- Socket.h - small POSIX socket helpers with deadlines ----*- C++ -*-===//
#ifndef STRETTO_RUNTIME_SOCKET_H
#define STRETTO_RUNTIME_SOCKET_H

#include <chrono>
#include <cstddef>
#include <string>

namespace stretto::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

/// An owned file descriptor.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd &&o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd &operator=(Fd &&o) noexcept {
    if (this != &o) {
      reset(o.fd);
      o.fd = -1;
    }
    return *this;
  }
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  ~Fd() { reset(); }
  void reset(int f = -1);
};

std::string errnoText(int e);
int msLeft(Deadline d);
/// poll() for `events` until `d`; false on timeout.
bool waitFor(int fd, short events, Deadline d);
/// All bytes or a std::runtime_error starting with `what`.
void sendAll(int fd, const void *data, size_t n, Deadline d, const std::string &what);
void recvAll(int fd, void *data, size_t n, Deadline d, const std::string &what);
/// Connects (retrying until `d` while nothing listens there yet).
Fd connectTo(const std::string &host, int port, Deadline d);

} // namespace stretto::net

#endif
