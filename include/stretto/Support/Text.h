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

/// `s` as a JSON string: quoted, with quotes, backslashes and control
/// characters escaped (RFC 8259 §7), so any name or path reads back.
inline std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

/// `v` as 16 hex digits (checksums).
inline std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

} // namespace stretto

#endif // STRETTO_SUPPORT_TEXT_H
