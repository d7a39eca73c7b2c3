//===- Profile.h - measured unit costs, cached on disk ----------*- C++ -*-===//
//
// A profile holds, per partition unit, what stretto-tune measured (forward,
// backward, update seconds with the compiled kernels) and counted (weight,
// optimizer, stash and cut bytes), under the key it was measured for: the
// model (fingerprint and micro-batch), the device (CPU model and ISA, or
// GPU), the threads per stage, the precision and the compiled kernels' cache
// entry. The cache keeps one file per (model, device, threads, precision);
// a file whose stored key differs (another kernel build, another format) is
// stale, one that does not parse or whose checksum fails is corrupt: either
// is measured again and replaced.
//
// File format (text, version 1): "stretto-profile 1", "key NAME LEN:VALUE"
// lines, "steps N", one "unit" line per unit (name and 8 numbers with 17
// significant digits), then "checksum <fnv1a64 of every preceding byte>".
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_TUNE_PROFILE_H
#define STRETTO_TUNE_PROFILE_H

#include "stretto/Tune/Partition.h"

#include <map>
#include <string>
#include <vector>

namespace stretto::tune {

struct Profile {
  std::map<std::string, std::string> key; // model, micro_batch, device, threads, precision, kernels
  int64_t steps = 0;                      // steps measured
  std::vector<UnitProfile> units;
};

std::string profileText(const Profile &p);
/// Throws std::runtime_error "name:line: what" on anything malformed.
Profile parseProfile(const std::string &text, const std::string &name);
/// Reads and parses a profile file (errors as parseProfile, or unreadable).
Profile loadProfile(const std::string &path);
/// Writes atomically (temporary file, then rename).
void saveProfile(const std::string &path, const Profile &p);

/// The cache file for a key: the fields that name an entry (all but
/// "kernels"), hashed, under `dir`.
std::string profileCachePath(const std::string &dir, const std::map<std::string, std::string> &key);

struct CacheLookup {
  enum Status { Hit, Missing, Stale, Corrupt } status = Missing;
  std::string why; // Stale / Corrupt: what was wrong
  Profile profile; // Hit
};
CacheLookup lookupProfile(const std::string &dir, const std::map<std::string, std::string> &key);

} // namespace stretto::tune

#endif
