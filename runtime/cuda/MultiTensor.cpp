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
    // (Emitter.cpp's element loop, after its vector step: the element
    // function called with its operands, out0 and the index only)
    const std::regex loop("\n  for \\(; i < [0-9]+LL; i \\+= s\\)\n    " + k.name + "_element\\(" +
                          args + "out0, i\\);$");
    if (!std::regex_search(w, loop) ||
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

// One stage of a multi or chain kernel's entry: its element function, its
// body (which says how it reads each input), its inputs' first table word
// and its bad flag's variable; its output and flag pointers follow its
// inputs in the entry.
struct Stage {
  std::string fn, body;
  int inputs = 0, at = 0;
  std::string bad;
  std::string word(int k) const { return "e[" + std::to_string(at + k) + "]"; }
  bool sameIndex(int k) const { // read at the element's own index, not [0]
    return body.find("in" + std::to_string(k) + "[i]") != std::string::npos;
  }
};

// A multi or chain kernel's element loops from `i` (a thread's first
// element of its entry): Emitter.cpp's vector step where every pointer the
// entry's stages read or write at the element's index is 16-byte aligned
// (eight consecutive elements a thread a step, each stage's inputs loaded
// as 16-byte words into registers, its element function run on them,
// index 0..7, its results stored as 16-byte words and checked there; a
// chain loads with plain loads, as a stage reads what an earlier one wrote
// in this kernel), then the rest one element at a time, every stage in
// order. The elements' values are those of the element loop.
std::string elementLoops(const std::vector<Stage> &stages, bool chain) {
  std::string aligned, vector, scalar;
  for (const Stage &st : stages) {
    const std::string p = st.fn.substr(0, st.fn.size() - 8) + "_";
    std::string call, args;
    for (int k = 0; k < st.inputs; ++k) {
      const std::string ptr = "(const float *)" + st.word(k), l = p + "l" + std::to_string(k);
      call += ptr + ", ";
      if (!st.sameIndex(k)) {
        args += ptr + ", ";
        continue;
      }
      aligned += st.word(k) + " | ";
      vector += "      alignas(16) float " + l + "[8];\n      " +
                (chain ? "st_copy8(" : "st_load8(") + l + ", " + ptr + " + v);\n";
      args += l + ", ";
    }
    const std::string out = "((float *)" + st.word(st.inputs) + ")",
                      flag = "((float *)" + st.word(st.inputs + 1) + ")", r = p + "r";
    aligned += st.word(st.inputs) + " | ";
    vector += "      alignas(16) float " + r + "[8];\n";
    for (int j = 0; j < 8; ++j)
      vector += "      " + st.fn + "(" + args + r + ", " + std::to_string(j) + ");\n";
    vector += "      st_copy8(" + out + " + v, " + r + ");\n" + "      if (" + flag +
              ") /* a state's new value: x - x is 0 for finite x only */\n" +
              "        for (int j = 0; j < 8; ++j)\n          " + st.bad + " = " + st.bad +
              " || !(" + r + "[j] - " + r + "[j] == 0.0f);\n";
    scalar += "    " + st.fn + "(" + call + out + ", i);\n" + "    if (" + flag + ") " + st.bad +
              " = " + st.bad + " || !(" + out + "[i] - " + out + "[i] == 0.0f);\n";
  }
  aligned.resize(aligned.size() - 3);
  return "  long long i = ((long long)blockIdx.x - first) * blockDim.x + threadIdx.x;\n"
         "  if ((((unsigned long long)(" +
         aligned +
         ")) & 15) == 0) {\n"
         "    const long long n8 = count / 8 * 8;\n"
         "    for (long long v = 8 * i; v < n8; v += 8 * blocks * blockDim.x) {\n" +
         vector + "    }\n    i += n8;\n  }\n" +
         "  for (; i < count; i += blocks * blockDim.x) {\n" + scalar + "  }\n";
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
    const Stage stage{name + "_element", k.body, n, 0, "bad"};
    m.source += "// " + name + ": (one launch of " + std::to_string(members.size()) +
                " kernels like " + k.name + ")\n" + "ST_FN void " + name + "_element(" + k.params +
                ") {\n" + k.body + "\n}\n" + "extern \"C\" __global__ void " + name +
                "(const long long *__restrict__ table) {\n" + entryOf(w) + "  bool bad = false;\n" +
                elementLoops({stage}, /*chain=*/false) + "  if (bad)\n    *(float *)e[" +
                std::to_string(n + 1) + "] = 1.0f;\n}\n\n";
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
    std::string text = "// " + name + ": " + signature + ", element by element\n";
    std::vector<Stage> stages;
    int at = 0;
    for (size_t s = 0; s < chain.size(); ++s) {
      const MultiTensorKernels::Element &el = m.elements.at(chain[s]);
      std::string params = el.params;
      for (size_t r = params.find("__restrict__ "); r != std::string::npos;
           r = params.find("__restrict__ "))
        params.erase(r, 13);
      const std::string fn = name + "_s" + std::to_string(s) + "_element";
      text += "ST_FN void " + fn + "(" + params + ") {\n" + el.body + "\n}\n";
      stages.push_back({fn, el.body, el.inputs, at, "bad" + std::to_string(s)});
      at += el.inputs + 2;
    }
    const int w = at + 2;
    text += "extern \"C\" __global__ void " + name + "(const long long *__restrict__ table) {\n" +
            entryOf(w);
    for (const Stage &st : stages)
      text += "  bool " + st.bad + " = false;\n";
    text += elementLoops(stages, /*chain=*/true);
    for (const Stage &st : stages)
      text += "  if (" + st.bad + ") /* a state's new value: x - x is 0 for finite x only */\n" +
              "    *(float *)" + st.word(st.inputs + 1) + " = 1.0f;\n";
    text += "}\n\n";
    m.source += text;
    m.chains[signature] = name;
  }
}
