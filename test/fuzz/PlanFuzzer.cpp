//===- PlanFuzzer.cpp - libFuzzer harness: plan files ---------------------===//
//
// stretto-run reads plan files from disk, so stretto::parsePlanFile must
// never crash, hang or trip ASan/UBSan on any text. The checksum is not
// compared (else no mutation would reach the parser). Its contract:
//  - a bad file raises std::runtime_error naming the file ("fuzz.plan...");
//    any other exception is a bug;
//  - a file it accepts prints back (planFileText) to a file it accepts,
//    checksum and all, and that one prints back to itself.
// A broken contract aborts, so libFuzzer records the input.
//
// Build: test/fuzz/build.sh BUILD_DIR OUT_DIR; seeds in test/fuzz/corpus/plan.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/PlanFile.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 64 * 1024)
    return 0;
  std::string text(reinterpret_cast<const char *>(data), size);
  stretto::PlanFile plan;
  try {
    plan = stretto::parsePlanFile(text, "fuzz.plan", /*checkChecksum=*/false);
  } catch (const std::runtime_error &e) {
    if (std::string(e.what()).rfind("fuzz.plan", 0) != 0) {
      std::fprintf(stderr, "error message does not name the file: %s\n", e.what());
      std::abort();
    }
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
  std::string printed = stretto::planFileText(plan);
  try {
    stretto::PlanFile again = stretto::parsePlanFile(printed, "round-trip.plan");
    if (stretto::planFileText(again) != printed) {
      std::fprintf(stderr, "a printed plan does not print back to itself\n");
      std::abort();
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "a printed plan does not parse: %s\n", e.what());
    std::abort();
  }
  return 0;
}
