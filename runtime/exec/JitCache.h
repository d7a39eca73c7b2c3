//===- JitCache.h - files of the kernel caches (internal) ------*- C++ -*-===//
//
// Shared by the host-compiler cache (HostJit.cpp) and the NVRTC cache
// (CudaJit.cpp): whole-file reads, atomic writes (temporary + rename),
// checksum lines, hex keys, and the kernel a generated source line belongs
// to (for compile errors).
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_JITCACHE_H
#define STRETTO_RUNTIME_JITCACHE_H

#include <cstdint>
#include <string>

namespace stretto::jitcache {

int run(const std::string &cmd, std::string &out);
bool readFile(const std::string &path, std::string &data);
bool writeFileAtomically(const std::string &path, const std::string &data);
/// "<size> <fnv1a64>\n" of `bytes`: what a .sum file holds.
std::string sumOf(const std::string &bytes);
std::string hex(uint64_t v);
std::string kernelAtLine(const std::string &source, int line);

} // namespace stretto::jitcache

#endif
