//===- StopSignals.h - Ctrl-C and SIGTERM stop a run after a step --------===//
//
// A run stops on Ctrl-C (SIGINT) or SIGTERM (what launchers and schedulers
// send) after a step every rank agrees on, and checkpoints. The signal only
// sets a flag that the run polls.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_STOPSIGNALS_H
#define STRETTO_RUNTIME_STOPSIGNALS_H

#include <atomic>

namespace stretto {

/// While one lives, SIGINT and SIGTERM set `flag` instead of ending the
/// process. Scopes nest: the innermost flag is set.
class StopOnSignal {
public:
  explicit StopOnSignal(std::atomic<bool> &flag);
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal &) = delete;
  StopOnSignal &operator=(const StopOnSignal &) = delete;

private:
  std::atomic<bool> *outer;
  void (*previousInt)(int) = nullptr;
  void (*previousTerm)(int) = nullptr;
};

/// From now on one thread takes SIGINT and SIGTERM (sigwait): call it first
/// in main, before any thread starts. The threads started after inherit the
/// blocked signals, so none of them (Gloo's event loop, OpenMP and oneDNN
/// workers, the pipeline's stages) is interrupted in a system call or runs a
/// handler. A signal before the first StopOnSignal is remembered: that run
/// starts with its flag set, so it stops after its first step (a launcher
/// forwards Ctrl-C to every rank at once, some of them maybe still loading
/// or compiling); a second one before the run ends the process. Child
/// processes started with the signals blocked inherit that: a host compiler
/// started for a kernel finishes its file.
void takeStopSignalsOnOneThread();

/// Whether a stop signal arrived before any run began and waits for the
/// next StopOnSignal (takeStopSignalsOnOneThread).
bool stopSignalPending();

} // namespace stretto

#endif
