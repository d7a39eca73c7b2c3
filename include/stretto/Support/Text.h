//===- Text.h - numbers as text that reads back exactly ----------*- C++ -*-===//
#ifndef STRETTO_SUPPORT_TEXT_H
#define STRETTO_SUPPORT_TEXT_H

#include <cstdint>
#include <cstdio>
#include <string>

namespace stretto {

/// `v` with 17 significant digits: strtod reads back the same double (plan
/// files, profiles, metrics).
inline std::string exactDecimal(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

/// `v` as 16 hex digits (checksums).
inline std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

} // namespace stretto

#endif // STRETTO_SUPPORT_TEXT_H
