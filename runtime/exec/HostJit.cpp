//===- HostJit.cpp - host compiler JIT with a persistent cache ------------===//
#include "stretto/Runtime/HostJit.h"
#include "exec/JitCache.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using namespace stretto;

uint64_t stretto::fnv1a64(const void *data, size_t size, uint64_t h) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

namespace stretto::jitcache {

// Runs `cmd` through the shell; returns its exit status, output in `out`.
// The compiler inherits the caller's signal mask on purpose: stretto-run
// and the trainers block SIGINT/SIGTERM in every thread (a sigwait thread
// takes them), so a Ctrl-C that arrives while a rank is still compiling
// lets the compile finish and the rank stop after the same step as the
// others, with its checkpoint. (Unblocking them killed the compiler, and
// with it that rank, so the job failed without checkpoints: dist-faults'
// gossip Ctrl-C test caught it.)
int run(const std::string &cmd, std::string &out) {
  out.clear();
  FILE *pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe)
    return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0)
    out.append(buf, n);
  return pclose(pipe);
}

bool readFile(const std::string &path, std::string &data) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  data = ss.str();
  return true;
}

bool writeFileAtomically(const std::string &path, const std::string &data) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out.write(data.data(), data.size()))
      return false;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  return !ec;
}

std::string sumOf(const std::string &bytes) {
  return std::to_string(bytes.size()) + " " +
         std::to_string(fnv1a64(bytes.data(), bytes.size())) + "\n";
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The kernel whose generated text holds line `line` of `source`: the last
// "// <name>: (" header comment at or before it.
std::string kernelAtLine(const std::string &source, int line) {
  std::istringstream in(source);
  std::string text, name;
  for (int n = 1; std::getline(in, text) && n <= line; ++n)
    if (text.rfind("// ", 0) == 0 && text.find(": (") != std::string::npos)
      name = text.substr(3, text.find(": (") - 3);
  return name;
}

} // namespace stretto::jitcache

using namespace stretto::jitcache;

std::vector<std::string> HostKernelCache::defaultFlags() {
  // No FP contraction: the kernels must round like the reference executor.
  // -march=native: the kernels run where they are compiled (the cache key
  // holds this machine's CPU model); -fno-math-errno lets sqrt vectorise
  // (it only drops errno updates, not a rounding change); -fno-trapping-math
  // lets GCC if-convert the clamps and selects of the scalar functions
  // (tanh, GELU) without AVX-512's masked moves: with AVX2 alone, their
  // loops stayed scalar (3x slower kernels). It assumes no FP exception is
  // trapped, which nothing here does; results are unchanged.
  // -mprefer-vector-width=512: GCC's tuning for recent Intel cores
  // (Ice Lake on) stops at 256-bit vectors; the element-wise kernels are
  // compute-bound where they call tanh or GELU, and 512-bit ones ran them
  // 15-20 % faster on a Xeon (model 167). Without AVX-512 it is ignored.
  // STRETTO_HOST_ARCH=haswell (any -march value) targets another ISA
  // instead, e.g. AVX2 kernels on an AVX-512 host for a benchmark.
  // (A value the shell could misread is refused when a kernel is loaded.)
  const char *a = std::getenv("STRETTO_HOST_ARCH");
  std::string arch = a && *a ? a : "native";
  return {"-O3", "-march=" + arch, "-std=c++17", "-fPIC", "-shared", "-fopenmp",
          "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
          "-mprefer-vector-width=512"};
}

HostKernelCache::HostKernelCache(std::string dir, std::string compiler,
                                 std::vector<std::string> flags)
    : dir_(std::move(dir)), compiler_(std::move(compiler)) {
  for (const std::string &f : flags) {
    flagText_ += " " + f;
    // The compiler runs through the shell: a flag is one plain word.
    for (char c : f)
      if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr("-_.=+,/:", c))
        flagError_ = "host compiler flag '" + f + "' is not one plain word" +
                     (f.rfind("-march=", 0) == 0 ? " (set by STRETTO_HOST_ARCH: a -march value "
                                                    "such as native, haswell or x86-64-v3)"
                                                  : "");
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  std::string out;
  run(compiler_ + " --version", out);
  compilerVersion_ = out.substr(0, out.find('\n'));
  // -march=native code is only valid on this CPU model: key on it.
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0 || line.rfind("flags", 0) == 0) {
      compilerVersion_ += "\n" + line;
      if (line.rfind("flags", 0) == 0)
        break;
    }
}

HostKernelCache::~HostKernelCache() {
  for (void *h : handles_)
    dlclose(h);
}

std::string HostKernelCache::entryPath(const std::string &source) const {
  std::string keyText = compilerVersion_ + "\n" + flagText_ + "\n" + source;
  return (fs::path(dir_) / hex(fnv1a64(keyText.data(), keyText.size()))).string();
}

HostKernelFn HostKernelCache::load(const std::string &source, const std::string &symbol,
                                   std::string &error) {
  std::vector<HostKernelFn> fns = loadAll(source, {symbol}, error);
  return fns.empty() ? nullptr : fns[0];
}

std::vector<HostKernelFn> HostKernelCache::loadAll(const std::string &source,
                                                   const std::vector<std::string> &symbols,
                                                   std::string &error) {
  if (!flagError_.empty()) {
    error = flagError_;
    return {};
  }
  std::string stem = entryPath(source);
  std::string so = stem + ".so", sum = stem + ".sum";
  std::string first = symbols.empty() ? std::string("(none)") : symbols.front();
  auto tryLoad = [&]() -> std::vector<HostKernelFn> {
    void *h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h)
      return {};
    std::vector<HostKernelFn> fns;
    for (const std::string &sym : symbols) {
      auto fn = reinterpret_cast<HostKernelFn>(dlsym(h, sym.c_str()));
      if (!fn) {
        dlclose(h);
        return {};
      }
      fns.push_back(fn);
    }
    handles_.push_back(h);
    return fns;
  };

  // The ranks of a job want the same entry at once: one compiles, the
  // others wait here and load what it wrote.
  int lockFd = ::open((stem + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lockFd >= 0)
    ::flock(lockFd, LOCK_EX);
  struct Unlock {
    int fd;
    ~Unlock() {
      if (fd >= 0)
        ::close(fd); // releases the lock
    }
  } unlock{lockFd};

  std::string soBytes, sumText;
  bool present = readFile(so, soBytes);
  if (present) {
    if (readFile(sum, sumText) && sumText == sumOf(soBytes)) {
      std::vector<HostKernelFn> fns = tryLoad();
      if (!fns.empty() || symbols.empty()) {
        ++stats_.hits;
        return fns;
      }
    }
    ++stats_.rebuilt; // truncated, overwritten, or not loadable
  }

  std::string cpp = stem + ".cpp";
  if (!writeFileAtomically(cpp, source)) {
    error = "kernel " + first + ": cannot write " + cpp;
    return {};
  }
  std::string tmp = so + ".tmp." + std::to_string(getpid());
  std::string out;
  if (onCompile_)
    onCompile_(symbols.size());
  int rc = run(compiler_ + flagText_ + " -o " + tmp + " " + cpp, out);
  ++stats_.compiles;
  std::error_code ec;
  if (rc != 0) {
    fs::remove(tmp, ec);
    // Name the kernel at the compiler's first error location.
    std::string where = cpp, culprit = first;
    size_t at = out.find(cpp + ":");
    if (at != std::string::npos) {
      int line = std::atoi(out.c_str() + at + cpp.size() + 1);
      if (line > 0) {
        where = cpp + ":" + std::to_string(line);
        std::string k = kernelAtLine(source, line);
        if (!k.empty())
          culprit = k;
      }
    }
    error = "kernel " + culprit + ": host compiler failed at " + where + ":\n" + out;
    return {};
  }
  if (!readFile(tmp, soBytes)) {
    error = "kernel " + first + ": compiler wrote no " + tmp;
    return {};
  }
  fs::rename(tmp, so, ec);
  if (ec || !writeFileAtomically(sum, sumOf(soBytes))) {
    error = "kernel " + first + ": cannot store the cache entry " + so;
    return {};
  }
  std::vector<HostKernelFn> fns = tryLoad();
  if (!fns.empty() || symbols.empty())
    return fns;
  const char *why = dlerror();
  error = "kernel " + first + ": cannot load " + so + ": " + (why ? why : "a symbol was not found");
  return {};
}

std::string stretto::hostKernelSubset(const std::string &unit,
                                      const std::set<std::string> &names) {
  // Every kernel's source starts with the same line; the unit's first
  // chunk may be the shared prelude alone (no kernel named in it), which
  // every subset keeps.
  static const std::string kStart = "#include <math.h>\n";
  std::vector<size_t> starts;
  for (size_t at = 0; (at = unit.find(kStart, at)) != std::string::npos; at += kStart.size())
    if (at == 0 || unit[at - 1] == '\n')
      starts.push_back(at);
  if (starts.empty() || starts[0] != 0)
    return unit;
  std::string out;
  std::set<std::string> found;
  for (size_t k = 0; k < starts.size(); ++k) {
    size_t end = k + 1 < starts.size() ? starts[k + 1] : unit.size();
    std::string chunk = unit.substr(starts[k], end - starts[k]);
    std::string name = kernelAtLine(chunk, 1 << 30);
    if (name.empty() && k == 0) {
      out += chunk;
      continue;
    }
    if (name.empty())
      return unit;
    if (names.count(name)) {
      out += chunk;
      found.insert(name);
    }
  }
  return found.size() == names.size() ? out : unit;
}
