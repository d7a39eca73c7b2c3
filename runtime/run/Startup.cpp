//===- Startup.cpp - where a run's start-up time goes ---------------------===//
#include "stretto/Runtime/Startup.h"

#include <cstdio>
#include <mutex>
#include <vector>

namespace stretto {
namespace {
struct Phase {
  std::string name, note;
  double seconds;
};
std::mutex gMutex;
std::vector<Phase> gPhases;
} // namespace

void noteStartup(const std::string &phase, double seconds,
                 const std::string &note) {
  std::lock_guard<std::mutex> lock(gMutex);
  gPhases.push_back({phase, note, seconds});
}

std::string startupReport() {
  std::lock_guard<std::mutex> lock(gMutex);
  if (gPhases.empty())
    return "";
  std::string out = "start-up:";
  double total = 0;
  char buf[48];
  for (size_t k = 0; k < gPhases.size(); ++k) {
    std::snprintf(buf, sizeof buf, " %.2f s", gPhases[k].seconds);
    out += (k ? ", " : " ") + gPhases[k].name + buf +
           (gPhases[k].note.empty() ? "" : " (" + gPhases[k].note + ")");
    total += gPhases[k].seconds;
  }
  std::snprintf(buf, sizeof buf, "; %.2f s in all\n", total);
  return out + buf;
}

} // namespace stretto
