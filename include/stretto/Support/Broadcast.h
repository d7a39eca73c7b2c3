//===- Broadcast.h - the NumPy broadcasting rule, shared ------*- C++ -*-===//
//
// One definition for the dialects' verifiers and the MLIR-free runtime.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_SUPPORT_BROADCAST_H
#define STRETTO_SUPPORT_BROADCAST_H

#include <cstddef>

namespace stretto {

/// Whether shape `from` broadcasts to `to`: dims align at the right and each
/// of `from`'s equals the matching dim of `to` or is 1.
template <typename From, typename To> bool broadcastsTo(const From &from, const To &to) {
  if (from.size() > to.size())
    return false;
  size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[off + i])
      return false;
  return true;
}

} // namespace stretto

#endif
