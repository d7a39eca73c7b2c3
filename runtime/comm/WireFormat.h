//===- WireFormat.h - the header in front of every message ----*- C++ -*-===//
//
// A point-to-point message is a fixed 40-byte header, then the payload. The
// receiver checks the header against what it expects before it receives a
// payload byte, so a wrong tag, type or size, a peer of another version or
// stray bytes are an error naming the peer, never a write past a buffer.
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_WIREFORMAT_H
#define STRETTO_RUNTIME_WIREFORMAT_H

#include "stretto/Runtime/Communicator.h"

#include <cstdint>

namespace stretto::wire {

struct Header {
  static constexpr uint32_t kMagic = 0x54525453; // "STRT"
  static constexpr uint32_t kVersion = 1;
  uint32_t magic = kMagic;
  uint32_t version = kVersion;
  uint64_t tag = 0;
  uint32_t type = 0;
  uint32_t reserved = 0;
  uint64_t count = 0;
  uint64_t check = 0; // digest() of the fields above
  uint64_t digest() const;
};
static_assert(sizeof(Header) == 40, "the wire header is 40 bytes");

size_t elementBytes(WireType t);
const char *typeName(WireType t);
Header makeHeader(uint64_t tag, WireType type, size_t count);
/// Throws CommError naming `peer` unless `h` announces exactly this message.
void checkHeader(const Header &h, int peer, uint64_t tag, WireType type, size_t count);

} // namespace stretto::wire

#endif
