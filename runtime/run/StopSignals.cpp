//===- StopSignals.cpp - Ctrl-C and SIGTERM stop a run after a step ------===//
#include "stretto/Runtime/StopSignals.h"

#include <csignal>
#include <pthread.h>
#include <thread>
#include <unistd.h>

using namespace stretto;

namespace {
std::atomic<std::atomic<bool> *> gFlag{nullptr};
std::atomic<bool> gOneThread{false};
// A stop signal taken (by the sigwait thread) before any run began: the
// next run starts with its flag set.
std::atomic<bool> gPending{false};

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
  if (gPending.exchange(false))
    flag.store(true);
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
      // No run yet (the plan loading, kernels compiling, ranks meeting): the
      // run stops once it has begun, after its first step every rank agrees
      // on, with a checkpoint. A launcher forwards Ctrl-C to every rank at
      // once, and a rank still starting up must not die while the others
      // stop cleanly. A second signal before the run ends the process.
      if (!gPending.exchange(true)) {
        static const char msg[] = "stretto-run: stop requested before the run began: it stops "
                                  "after its first step, with a checkpoint (again to exit now)\n";
        ssize_t ignored = write(2, msg, sizeof msg - 1);
        (void)ignored;
        continue;
      }
      // The default action, as without this thread.
      std::signal(sig, SIG_DFL);
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
      std::raise(sig);
    }
  }).detach();
}

bool stretto::stopSignalPending() { return gPending.load(); }
