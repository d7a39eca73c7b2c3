//===- EnvSwitch.h - the runtime's on/off environment variables -*- C++ -*-===//
//
// STRETTO_CUDA_GRAPHS, STRETTO_MULTI_TENSOR, STRETTO_BF16_STORAGE,
// STRETTO_GEMM_TUNING: unset, empty or 1 is on, 0 is off, anything else an
// error naming the variable.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_EXEC_ENVSWITCH_H
#define STRETTO_RUNTIME_EXEC_ENVSWITCH_H

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace stretto {

/// Whether the switch `name` is on (it is unless set to 0); throws
/// std::runtime_error for a value other than 0, 1 or empty.
inline bool envSwitchOn(const char *name) {
  const char *e = std::getenv(name);
  const std::string v = e ? e : "";
  if (v != "0" && v != "1" && !v.empty())
    throw std::runtime_error(std::string(name) + "='" + v + "': expected 0 (off) or 1 (on)");
  return v != "0";
}

} // namespace stretto

#endif
