//===- Startup.h - where a run's start-up time goes -------------*- C++ -*-===//
//
// The phases between a command and its first step (reading the plan,
// building kernels on the host, opening the GPU, NVRTC, loading modules),
// noted as they end and printed by --profile, so a slow start says which
// phase to fix. One list per process.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_STARTUP_H
#define STRETTO_RUNTIME_STARTUP_H

#include <chrono>
#include <string>

namespace stretto {

/// Appends `phase` (with an optional note, "cache hit") and its seconds.
void noteStartup(const std::string &phase, double seconds,
                 const std::string &note = "");

/// "start-up: plan file 0.81 s, host kernels 0.00 s (not built: GPU
/// only), ...": every phase noted so far, in order; empty if none.
std::string startupReport();

/// Notes the time from its construction to its destruction as `phase`
/// (the note may be set on the way).
class StartupTimer {
public:
  explicit StartupTimer(std::string phase)
      : phase_(std::move(phase)), t0_(std::chrono::steady_clock::now()) {}
  ~StartupTimer() {
    noteStartup(
        phase_,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_)
            .count(),
        note);
  }
  StartupTimer(const StartupTimer &) = delete;
  StartupTimer &operator=(const StartupTimer &) = delete;
  std::string note;

private:
  std::string phase_;
  std::chrono::steady_clock::time_point t0_;
};

} // namespace stretto

#endif
