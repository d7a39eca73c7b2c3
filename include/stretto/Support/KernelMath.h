//===- KernelMath.h - the kernels' f32 tanh and GELU for host code -*- C++ -*-===//
//
// Includes KernelMath.inc (the text the emitter pastes into every generated
// kernel) as host functions stretto::kernelmath::st_tanh_f, st_gelu_f,
// st_exp_f, ..., so executors written in C++ round exactly like the fused
// kernels.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_SUPPORT_KERNELMATH_H
#define STRETTO_SUPPORT_KERNELMATH_H

#include <cstdint>
#include <cstring>
#include <math.h>

namespace stretto {
namespace kernelmath {
#define ST_FN inline
inline float st_float_bits(int b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
inline int st_bits_of(float f) {
  int b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
#include "stretto/Support/KernelMath.inc"
#undef ST_FN
} // namespace kernelmath
} // namespace stretto

#endif
