//===- MultiTensor.cpp - one launch for many same-body kernels ------------===//
#include "cuda/MultiTensor.h"
#include "exec/UpdateChains.h"

#include <regex>
#include <vector>

using namespace stretto;

namespace {

struct ElementKernel {
  std::string name, params, body;
  int inputs = 0;
};

// Every function of the unit declared `head` NAME`suffix`(...) {...} (the
// emitter's helpers: "ST_FN void ", "_element"): NAME, its parameters and
// body, and where the text after it starts.
std::vector<std::pair<ElementKernel, size_t>>
functionsOf(const std::string &src, const std::string &head, const std::string &suffix) {
  std::vector<std::pair<ElementKernel, size_t>> out;
  for (size_t at = src.find(head); at != std::string::npos; at = src.find(head, at + 1)) {
    size_t nameEnd = src.find(suffix + "(", at);
    size_t lineEnd = src.find('\n', at);
    if (nameEnd == std::string::npos || nameEnd > lineEnd)
      continue;
    ElementKernel k;
    k.name = src.substr(at + head.size(), nameEnd - at - head.size());
    const size_t open = nameEnd + suffix.size() + 1;
    size_t paramsEnd = src.find(") {\n", nameEnd);
    size_t bodyEnd = src.find("\n}\n", paramsEnd);
    if (paramsEnd == std::string::npos || bodyEnd == std::string::npos)
      continue;
    k.params = src.substr(open, paramsEnd - open);
    k.body = src.substr(paramsEnd + 4, bodyEnd - paramsEnd - 4);
    out.emplace_back(std::move(k), bodyEnd + 3);
  }
  return out;
}

// The f32 input parameters (in0, in1, ...) of a helper's `params`.
int inputsOf(const std::string &params) {
  static const std::regex inParam("const float \\*__restrict__ in[0-9]+");
  return static_cast<int>(std::distance(std::sregex_iterator(params.begin(), params.end(), inParam),
                                        std::sregex_iterator()));
}

// "in0, in1, ..., " for n inputs: a wrapper's call of its helper.
std::string inArgs(int n) {
  std::string args;
  for (int i = 0; i < n; ++i)
    args += "in" + std::to_string(i) + ", ";
  return args;
}

// Every element-wise kernel of the unit: its element function's parameters
// and body, where its wrapper is the plain grid-stride loop calling it.
std::vector<ElementKernel> elementKernels(const std::string &src) {
  std::vector<ElementKernel> out;
  for (auto &[k, wrapper] : functionsOf(src, "ST_FN void ", "_element")) {
    // The wrapper right after: a grid-stride loop over a fixed count that
    // calls the element function with (in0, ..., out0, index).
    k.inputs = inputsOf(k.params);
    const std::string args = inArgs(k.inputs);
    const std::string expected = "extern \"C\" __global__ void " + k.name + "(";
    if (src.compare(wrapper, expected.size(), expected) != 0)
      continue;
    size_t wrapperEnd = src.find("\n}\n", wrapper);
    const std::string w = src.substr(wrapper, wrapperEnd - wrapper);
    // (Emitter.cpp's loop: four elements a step, then one at a time; the
    // element function called with its operands, out0 and the index only)
    const std::regex step("\\{ const long long e = i; " + k.name + "_element\\(" + args +
                          "out0, e\\); \\}\n");
    const std::regex loop("\n  for \\(; i < [0-9]+LL; i \\+= s\\)\n    " + k.name + "_element\\(" +
                          args + "out0, i\\);$");
    if (!std::regex_search(w, step) || !std::regex_search(w, loop) ||
        k.params.find("float *__restrict__ out0, long long i") == std::string::npos ||
        k.params.find("out1") != std::string::npos)
      continue;
    out.push_back(std::move(k));
  }
  return out;
}

// Every whole-tensor sum of the unit (a row-sum kernel over one row: a
// gradient's sum of squares for clipping) with a NAME_parts twin: its value
// function's parameters (f32 operands read at the element's own index)
// and body.
std::vector<ElementKernel> sumKernels(const std::string &src) {
  std::vector<ElementKernel> out;
  static const std::regex inParam("const float \\*__restrict__ in[0-9]+, ");
  for (auto &[k, w] : functionsOf(src, "ST_FN float ", "_value")) {
    // Only f32 operands, then the index: no strided operand's offsets.
    const std::string rest = std::regex_replace(k.params, inParam, "");
    if (rest != "long long i")
      continue;
    k.inputs = inputsOf(k.params);
    const std::string args = inArgs(k.inputs);
    // The wrapper right after (Emitter.cpp's row sums): one row, its
    // elements at r * len + j, and the split twin.
    const std::string wrapper = "extern \"C\" __global__ void " + k.name + "(";
    if (src.compare(w, wrapper.size(), wrapper) != 0)
      continue;
    const std::string text = src.substr(w, src.find("\n}\n", w) - w);
    static const std::regex oneRow(
        "for \\(long long r = blockIdx\\.x; r < 1LL; r \\+= gridDim\\.x\\)");
    if (!std::regex_search(text, oneRow) ||
        text.find("s += " + k.name + "_value(" + args + "i);") == std::string::npos ||
        src.find("extern \"C\" __global__ void " + k.name + "_parts(") == std::string::npos)
      continue;
    out.push_back(std::move(k));
  }
  return out;
}

// A block's sum of `s` over its threads, left in thread 0's `s`
// (Emitter.cpp's row sums: a warp-shuffle tree into warpSums, then the
// warps' sums by the first warp).
const char *kBlockSum =
    "  for (int o = 16; o > 0; o >>= 1)\n"
    "    s += __shfl_down_sync(0xffffffffu, s, o);\n"
    "  if ((threadIdx.x & 31) == 0)\n"
    "    warpSums[threadIdx.x >> 5] = s;\n"
    "  __syncthreads();\n"
    "  if (threadIdx.x < 32) {\n"
    "    s = threadIdx.x < (blockDim.x + 31) / 32 ? warpSums[threadIdx.x] : 0.0f;\n"
    "    for (int o = 16; o > 0; o >>= 1)\n"
    "      s += __shfl_down_sync(0xffffffffu, s, o);\n"
    "  }\n";

// A multi or chain kernel's start: its table entry `e` (w words) by binary
// search over the entries' first blocks, its element count and its blocks.
std::string entryOf(int w) {
  return "  const long long entries = table[0], w = " + std::to_string(w) + ";\n" +
         "  long long lo = 0, hi = entries - 1;\n" +
         "  while (lo < hi) { /* the last entry whose first block <= blockIdx.x */\n" +
         "    const long long mid = (lo + hi + 1) / 2;\n" +
         "    if (table[1 + mid * w + w - 1] <= (long long)blockIdx.x) lo = mid; else hi = "
         "mid - 1;\n  }\n" +
         "  const long long *e = table + 1 + lo * w;\n" +
         "  const long long first = e[w - 1], count = e[w - 2];\n" +
         "  const long long blocks = (lo + 1 < entries ? table[1 + (lo + 1) * w + w - 1] "
         ": (long long)gridDim.x) - first;\n";
}

} // namespace

MultiTensorKernels stretto::multiTensorKernels(const std::string &cudaSource) {
  std::map<std::string, std::vector<const ElementKernel *>> byText;
  std::vector<ElementKernel> all = elementKernels(cudaSource);
  for (const ElementKernel &k : all)
    byText[k.params + "\n" + k.body].push_back(&k);
  MultiTensorKernels m;
  int next = 0;
  for (auto &[text, members] : byText) {
    if (members.size() < 2)
      continue;
    const ElementKernel &k = *members.front();
    const std::string name = "st_multi_" + std::to_string(next++);
    const int n = k.inputs, w = n + 4;
    for (const ElementKernel *e : members)
      m.groupOf[e->name] = name;
    m.inputs[name] = n;
    m.elements[name] = {k.params, k.body, n};
    std::string call;
    for (int i = 0; i < n; ++i)
      call += "(const float *)e[" + std::to_string(i) + "], ";
    m.source += "// " + name + ": (one launch of " + std::to_string(members.size()) +
                " kernels like " + k.name + ")\n" + "ST_FN void " + name + "_element(" + k.params +
                ") {\n" + k.body + "\n}\n" + "extern \"C\" __global__ void " + name +
                "(const long long *__restrict__ table) {\n" + entryOf(w) +
                "  float *out = (float *)e[" + std::to_string(n) + "], *flag = (float *)e[" +
                std::to_string(n + 1) + "];\n" + "  bool bad = false;\n" +
                "  for (long long i = ((long long)blockIdx.x - first) * blockDim.x + threadIdx.x; "
                "i < count; i += blocks * blockDim.x) {\n" +
                "    " + name + "_element(" + call + "out, i);\n" +
                "    if (flag) /* a state's new value: x - x is 0 for finite x only */\n" +
                "      bad = bad || !(out[i] - out[i] == 0.0f);\n" + "  }\n" + "  if (bad)\n" +
                "    *flag = 1.0f;\n}\n\n";
  }
  // Whole-tensor sums with one value function: a launch of every sum's
  // parts, then one that adds each sum's parts.
  std::map<std::string, std::vector<const ElementKernel *>> sumsByText;
  std::vector<ElementKernel> sums = sumKernels(cudaSource);
  for (const ElementKernel &k : sums)
    sumsByText[k.params + "\n" + k.body].push_back(&k);
  next = 0;
  for (auto &[text, members] : sumsByText) {
    if (members.size() < 2)
      continue;
    const ElementKernel &k = *members.front();
    const std::string name = "st_multi_sum_" + std::to_string(next++);
    const int n = k.inputs, w = n + 5;
    for (const ElementKernel *e : members)
      m.groupOf[e->name] = name;
    m.inputs[name] = n;
    m.sums.insert(name);
    std::string call;
    for (int i = 0; i < n; ++i)
      call += "(const float *)e[" + std::to_string(i) + "], ";
    const std::string W = std::to_string(w);
    m.source +=
        "// " + name + ": (the sums of " + std::to_string(members.size()) + " kernels like " +
        k.name + " in one launch, each sum's parts added by " + name + "_finish)\n" +
        "ST_FN float " + name + "_value(" + k.params + ") {\n" + k.body + "\n}\n" +
        "extern \"C\" __global__ void " + name +
        "(const long long *__restrict__ table, float *__restrict__ partials) {\n" +
        "  __shared__ float warpSums[32];\n" + entryOf(w) +
        "  /* part q of `blocks` (NAME_parts' chunks), summed by the entry's first\n"
        "     `threads` threads, as the entry's own launch would */\n" +
        "  const long long q = (long long)blockIdx.x - first, threads = e[" +
        std::to_string(n + 2) + "];\n" +
        "  const long long chunk = (count + blocks - 1) / blocks;\n" +
        "  const long long j1 = (q + 1) * chunk < count ? (q + 1) * chunk : count;\n" +
        "  float s = 0;\n" + "  if ((long long)threadIdx.x < threads)\n" +
        "    for (long long j = q * chunk + threadIdx.x; j < j1; j += threads)\n" +
        "      s += " + name + "_value(" + call + "j);\n" + kBlockSum +
        "  if (threadIdx.x == 0) {\n" + "    if (blocks == 1)\n" + "      *(float *)e[" +
        std::to_string(n) + "] = s;\n" + "    else\n" + "      partials[blockIdx.x] = s;\n" +
        "  }\n}\n" + "extern \"C\" __global__ void " + name +
        "_finish(const long long *__restrict__ table, const float *__restrict__ partials) {\n" +
        "  /* an entry of several parts: their sum in st_row_sums' order */\n" +
        "  __shared__ float warpSums[8];\n" +
        "  if ((long long)blockIdx.x >= table[0])\n    return;\n" +
        "  const long long *e = table + 1 + (long long)blockIdx.x * " + W + ";\n" +
        "  const long long parts = e[" + std::to_string(n + 1) + "], first = e[" +
        std::to_string(w - 1) + "];\n" + "  if (parts < 2)\n    return;\n" + "  float v = 0.0f;\n" +
        "  for (long long j = threadIdx.x; j < parts; j += blockDim.x)\n" +
        "    v += partials[first + j];\n" + "  for (int o = 16; o > 0; o >>= 1)\n" +
        "    v += __shfl_down_sync(0xffffffffu, v, o);\n" +
        "  if ((threadIdx.x & 31) == 0)\n    warpSums[threadIdx.x >> 5] = v;\n" +
        "  __syncthreads();\n" + "  if (threadIdx.x == 0) {\n    float t = 0.0f;\n" +
        "    for (int k = 0; k < 8; ++k)\n      t += warpSums[k];\n" + "    *(float *)e[" +
        std::to_string(n) + "] = t;\n  }\n}\n\n";
  }
  return m;
}

void stretto::addChainKernels(MultiTensorKernels &m,
                              const std::vector<std::vector<std::string>> &stages) {
  for (const std::vector<std::string> &chain : stages) {
    const std::string signature = planning::chainSignature(chain);
    if (m.chains.count(signature) || chain.size() < 2)
      continue;
    bool known = true;
    for (const std::string &k : chain)
      known = known && m.elements.count(k);
    if (!known)
      continue;
    const std::string name = "st_multi_chain_" + std::to_string(m.chains.size());
    std::string text = "// " + name + ": " + signature + ", element by element\n", loop;
    std::vector<std::string> flags;
    int at = 0;
    for (size_t s = 0; s < chain.size(); ++s) {
      const MultiTensorKernels::Element &el = m.elements.at(chain[s]);
      std::string params = el.params;
      for (size_t r = params.find("__restrict__ "); r != std::string::npos;
           r = params.find("__restrict__ "))
        params.erase(r, 13);
      const std::string fn = name + "_s" + std::to_string(s) + "_element";
      text += "ST_FN void " + fn + "(" + params + ") {\n" + el.body + "\n}\n";
      std::string call;
      for (int i = 0; i < el.inputs; ++i)
        call += "(const float *)e[" + std::to_string(at + i) + "], ";
      const std::string out = "((float *)e[" + std::to_string(at + el.inputs) + "])",
                        flag = "((float *)e[" + std::to_string(at + el.inputs + 1) + "])";
      loop += "    " + fn + "(" + call + out + ", i);\n" + "    if (" + flag + ") bad" +
              std::to_string(s) + " = bad" + std::to_string(s) + " || !(" + out + "[i] - " + out +
              "[i] == 0.0f);\n";
      flags.push_back(flag);
      at += el.inputs + 2;
    }
    const int w = at + 2;
    text += "extern \"C\" __global__ void " + name + "(const long long *__restrict__ table) {\n" +
            entryOf(w);
    for (size_t s = 0; s < chain.size(); ++s)
      text += "  bool bad" + std::to_string(s) + " = false;\n";
    text += "  for (long long i = ((long long)blockIdx.x - first) * blockDim.x + threadIdx.x; "
            "i < count; i += blocks * blockDim.x) {\n" +
            loop + "  }\n";
    for (size_t s = 0; s < chain.size(); ++s)
      text += "  if (bad" + std::to_string(s) +
              ") /* a state's new value: x - x is 0 for finite "
              "x only */\n    *" +
              flags[s] + " = 1.0f;\n";
    text += "}\n\n";
    m.source += text;
    m.chains[signature] = name;
  }
}
