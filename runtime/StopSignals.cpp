//===- StopSignals.cpp - Ctrl-C and SIGTERM stop a run after a step ------===//
#include "stretto/Runtime/StopSignals.h"

#include <csignal>
#include <pthread.h>
#include <thread>

using namespace stretto;

namespace {
std::atomic<std::atomic<bool> *> gFlag{nullptr};
std::atomic<bool> gOneThread{false};

extern "C" void setStopFlag(int) {
  if (std::atomic<bool> *f = gFlag.load())
    f->store(true);
}

sigset_t stopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
} // namespace

StopOnSignal::StopOnSignal(std::atomic<bool> &flag) : outer(gFlag.exchange(&flag)) {
  if (!gOneThread) {
    previousInt = std::signal(SIGINT, setStopFlag);
    previousTerm = std::signal(SIGTERM, setStopFlag);
  }
}

StopOnSignal::~StopOnSignal() {
  if (!gOneThread) {
    std::signal(SIGINT, previousInt);
    std::signal(SIGTERM, previousTerm);
  }
  gFlag.store(outer);
}

void stretto::takeStopSignalsOnOneThread() {
  if (gOneThread.exchange(true))
    return;
  const sigset_t set = stopSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0)
        continue;
      if (std::atomic<bool> *f = gFlag.load()) {
        f->store(true);
        continue;
      }
      // No run to stop: the default action, as without this thread.
      std::signal(sig, SIG_DFL);
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
      std::raise(sig);
    }
  }).detach();
}
