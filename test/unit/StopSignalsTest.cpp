//===- StopSignalsTest.cpp - Ctrl-C before and during a run ---------------===//
//
// With takeStopSignalsOnOneThread (stretto-run's main), a stop signal that
// arrives before any run began is kept for the run, which then starts with
// its stop flag set: a launcher forwards Ctrl-C to every rank at once, and
// a rank still loading or compiling must stop with the others after a step,
// with its checkpoint, instead of dying. A second signal before the run
// ends the process; a signal during a run sets that run's flag. Each case
// runs in a child process (death-test style): the signal mask and the
// sigwait thread are process-wide.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/StopSignals.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>
#include <unistd.h>

using namespace stretto;

namespace {

// Waits up to 10 s for `cond`.
template <typename F> bool eventually(F cond) {
  for (int i = 0; i < 1000; ++i) {
    if (cond())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Exit status 0 when a SIGINT sent before the run is waiting for it, and
// the run's flag is set as the run begins (and the signal is used up).
int signalBeforeTheRun() {
  takeStopSignalsOnOneThread();
  ::kill(::getpid(), SIGINT);
  if (!eventually([] { return stopSignalPending(); }))
    return 2;
  std::atomic<bool> flag{false};
  {
    StopOnSignal stop(flag);
    if (!flag.load())
      return 3;
  }
  return stopSignalPending() ? 4 : 0;
}

// Exit status 0 when a SIGINT during a run sets its flag and nothing else.
int signalDuringTheRun() {
  takeStopSignalsOnOneThread();
  std::atomic<bool> flag{false};
  StopOnSignal stop(flag);
  ::kill(::getpid(), SIGINT);
  if (!eventually([&] { return flag.load(); }))
    return 2;
  return stopSignalPending() ? 3 : 0;
}

// Ends by SIGINT: the second signal before any run.
void twoSignalsBeforeTheRun() {
  takeStopSignalsOnOneThread();
  ::kill(::getpid(), SIGINT);
  if (!eventually([] { return stopSignalPending(); }))
    std::_Exit(2);
  ::kill(::getpid(), SIGINT);
  std::this_thread::sleep_for(std::chrono::seconds(10));
  std::_Exit(0);
}

TEST(StopSignals, ASignalBeforeTheRunStopsTheRunAfterItsFirstStep) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(signalBeforeTheRun()), ::testing::ExitedWithCode(0),
              "stop requested before the run began");
}

TEST(StopSignals, ASignalDuringTheRunSetsItsFlag) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(signalDuringTheRun()), ::testing::ExitedWithCode(0), "");
}

TEST(StopSignals, ASecondSignalBeforeTheRunEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(twoSignalsBeforeTheRun(), ::testing::KilledBySignal(SIGINT),
              "stop requested before the run began");
}

} // namespace
