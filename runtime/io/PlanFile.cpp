//===- PlanFile.cpp - a compiled training step as a file ------------------===//
#include "stretto/Runtime/PlanFile.h"
#include "stretto/Runtime/Trainer.h" // writeFileAtomically

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace stretto {
namespace {

// The plan-file format's version: bumped whenever the format changes (a
// record, a field, a spelling); a file of another version is refused.
constexpr int kPlanFormat = 2; // 2: states carry aliases
const std::string kHeader = "stretto-plan " + std::to_string(kPlanFormat);

const char *initName(InitKind k) {
  switch (k) {
  case InitKind::Zeros: return "zeros";
  case InitKind::Ones: return "ones";
  case InitKind::Normal: return "normal";
  case InitKind::Uniform: return "uniform";
  }
  return "zeros";
}

//===--- writing ------------------------------------------------------------===//

std::string str(const std::string &s) { return std::to_string(s.size()) + ":" + s; }

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

template <typename T> std::string list(const std::vector<T> &v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i)
      out += ",";
    if constexpr (std::is_floating_point_v<T>)
      out += num(v[i]);
    else
      out += std::to_string(v[i]);
  }
  return out;
}

void writeNode(std::ostringstream &os, const Node &n) {
  os << "n " << opKindName(n.kind) << " dtype=" << dtypeName(n.dtype) << " stage=" << n.stage
     << " flag=" << (n.flag ? 1 : 0) << " shape=" << list(n.shape) << " ops=" << list(n.operands)
     << " ints=" << list(n.ints) << " floats=" << list(n.floats) << " data=" << list(n.data)
     << " name=" << str(n.name) << " loc=" << str(n.loc) << "\n";
}

//===--- reading ------------------------------------------------------------===//

// A cursor over the file's text with the current line for messages.
struct Reader {
  std::string path, text;
  size_t at = 0;
  int line = 1;

  [[noreturn]] void fail(const std::string &what) const {
    throw std::runtime_error(path + ":" + std::to_string(line) + ": " + what);
  }
  bool atEnd() const { return at >= text.size(); }
  // The next space- or newline-delimited word.
  std::string word() {
    size_t start = at;
    while (at < text.size() && text[at] != ' ' && text[at] != '\n')
      ++at;
    return text.substr(start, at - start);
  }
  void expect(char c) {
    if (at >= text.size() || text[at] != c)
      fail(std::string("expected '") + (c == '\n' ? "\\n" : std::string(1, c)) + "'");
    ++at;
    if (c == '\n')
      ++line;
  }
  void endLine() { expect('\n'); }
  void space() { expect(' '); }
  std::string keyword(const char *key) { // key=
    std::string k;
    while (at < text.size() && text[at] != '=' && text[at] != ' ' && text[at] != '\n')
      k += text[at++];
    if (k != key)
      fail(std::string("expected '") + key + "=', found '" + k + "'");
    expect('=');
    return k;
  }
  int64_t integer(const std::string &w) {
    char *end = nullptr;
    errno = 0;
    long long v = std::strtoll(w.c_str(), &end, 10);
    if (w.empty() || *end || errno)
      fail("expected an integer, found '" + w + "'");
    return v;
  }
  double real(const std::string &w) {
    char *end = nullptr;
    double v = std::strtod(w.c_str(), &end);
    if (w.empty() || *end)
      fail("expected a number, found '" + w + "'");
    return v;
  }
  // `len:chars` (chars may hold spaces; no newline counting needed: names
  // and locations have none, sources are read by block()).
  std::string string() {
    size_t colon = text.find(':', at);
    if (colon == std::string::npos)
      fail("expected a length-prefixed string");
    int64_t len = integer(text.substr(at, colon - at));
    if (len < 0 || static_cast<size_t>(len) > text.size() - (colon + 1))
      fail("string runs past the end of the file");
    std::string s = text.substr(colon + 1, len);
    if (s.find('\n') != std::string::npos)
      fail("unexpected newline in a string");
    at = colon + 1 + len;
    return s;
  }
  template <typename T> std::vector<T> values(const char *key) {
    keyword(key);
    std::string w = word();
    std::vector<T> out;
    size_t s = 0;
    while (s < w.size()) {
      size_t e = w.find(',', s);
      if (e == std::string::npos)
        e = w.size();
      std::string item = w.substr(s, e - s);
      if constexpr (std::is_floating_point_v<T>)
        out.push_back(real(item));
      else
        out.push_back(static_cast<T>(integer(item)));
      s = e + 1;
    }
    return out;
  }
  std::string rawBlock(int64_t len) {
    if (len < 0 || static_cast<size_t>(len) > text.size() - at)
      fail("source block runs past the end of the file (truncated?)");
    std::string s = text.substr(at, len);
    for (char c : s)
      line += c == '\n';
    at += len;
    return s;
  }
};

// Dims of at most 2^31 and 2^40 elements: enough for any model, and no
// overflow in the element counts computed from them.
Shape checkedShape(Reader &r, Shape shape) {
  int64_t total = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > (int64_t(1) << 31))
      r.fail("dimension " + std::to_string(d) + " out of range");
    total *= std::max<int64_t>(d, 1);
    if (total > (int64_t(1) << 40))
      r.fail("shape has more than 2^40 elements");
  }
  if (shape.size() > 16)
    r.fail("more than 16 dimensions");
  return shape;
}

DType dtypeOf(Reader &r, const std::string &w) {
  for (DType t : {DType::F32, DType::BF16, DType::F64, DType::I32})
    if (w == dtypeName(t))
      return t;
  r.fail("unknown element type '" + w + "'");
}

OpKind kindOf(Reader &r, const std::string &w) {
  OpKind k;
  if (!opKindFromName(w, k))
    r.fail("unknown op '" + w + "'");
  return k;
}

} // namespace

std::string planFileText(const PlanFile &plan) {
  std::ostringstream os;
  os << kHeader << "\n";
  for (auto &[k, v] : plan.meta)
    os << "meta " << str(k) << " " << str(v) << "\n";
  for (const StateDecl &s : plan.graph.states) {
    os << "state " << str(s.name) << " dtype=" << dtypeName(s.dtype) << " init=" << initName(s.init)
       << " scale=" << num(s.scale) << " param=" << (s.isParam ? 1 : 0) << " copyof=" << str(s.copyOf)
       << " of=" << str(s.of) << " stage=" << s.stage << " shape=" << list(s.shape)
       << " aliases=" << s.aliases.size();
    for (const std::string &a : s.aliases)
      os << " " << str(a);
    os << "\n";
  }
  const OuterLoop &o = plan.graph.outerLoop;
  os << "outer replicas=" << o.replicas << " topology=" << str(o.topology) << " seed=" << o.seed
     << " local=" << list(o.localSteps) << "\n";
  for (auto [phase, name] :
       {std::pair{Phase::Step, "step"}, {Phase::Update, "update"}, {Phase::Outer, "outer"}}) {
    const std::vector<Node> &nodes = plan.graph.phase(phase);
    os << "phase " << name << " " << nodes.size() << "\n";
    for (const Node &n : nodes)
      writeNode(os, n);
  }
  os << "source cpp " << plan.cppSource.size() << "\n" << plan.cppSource << "\n";
  os << "source cuda " << plan.cudaSource.size() << "\n" << plan.cudaSource << "\n";
  std::string body = os.str();
  char sum[40];
  std::snprintf(sum, sizeof sum, "%016" PRIx64, fnv1a64(body));
  return body + "checksum " + sum + "\n";
}

void savePlanFile(const std::string &path, const PlanFile &plan) {
  writeFileAtomically(path, planFileText(plan));
}

PlanFile loadPlanFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot open the plan file");
  return parsePlanFile(
      std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), path);
}

PlanFile parsePlanFile(const std::string &text, const std::string &path, bool checkChecksum) {
  Reader r;
  r.path = path;
  r.text = text;
  if (r.text.compare(0, kHeader.size() + 1, kHeader + "\n") != 0) {
    const std::string magic = "stretto-plan ";
    if (r.text.compare(0, magic.size(), magic) == 0)
      throw std::runtime_error(
          path + ": the plan file has format '" +
          r.text.substr(magic.size(), r.text.find('\n') - magic.size()) +
          "' but this build reads format " + std::to_string(kPlanFormat) +
          ": it was saved by another version of Stretto (save it again with stretto-train "
          "--save-plan)");
    r.fail("not a Stretto plan file (expected the header '" + kHeader + "')");
  }
  // The checksum covers every byte before its line.
  size_t tail = r.text.rfind("checksum ");
  if (tail == std::string::npos || r.text.back() != '\n')
    throw std::runtime_error(path + ": the plan file is truncated (no checksum line)");
  char sum[40];
  std::snprintf(sum, sizeof sum, "%016" PRIx64, fnv1a64(r.text.substr(0, tail)));
  if (checkChecksum && r.text.substr(tail + 9, r.text.size() - tail - 10) != sum)
    throw std::runtime_error(path + ": the plan file is corrupt or truncated (checksum mismatch)");
  r.text.resize(tail);
  r.at = std::string(kHeader).size() + 1;
  r.line = 2;

  PlanFile plan;
  Graph &g = plan.graph;
  Phase phase = Phase::Step;
  int64_t expected = -1;
  while (!r.atEnd()) {
    std::string what = r.word();
    if (what == "meta") {
      r.space();
      std::string k = r.string();
      r.space();
      plan.meta[k] = r.string();
    } else if (what == "state") {
      StateDecl s;
      r.space();
      s.name = r.string();
      r.space(), r.keyword("dtype"), s.dtype = dtypeOf(r, r.word());
      r.space(), r.keyword("init");
      std::string init = r.word();
      bool known = false;
      for (InitKind k : {InitKind::Zeros, InitKind::Ones, InitKind::Normal, InitKind::Uniform})
        if (init == initName(k))
          s.init = k, known = true;
      if (!known)
        r.fail("unknown initialiser '" + init + "'");
      r.space(), r.keyword("scale"), s.scale = r.real(r.word());
      r.space(), r.keyword("param"), s.isParam = r.integer(r.word()) != 0;
      r.space(), r.keyword("copyof"), s.copyOf = r.string();
      r.space(), r.keyword("of"), s.of = r.string();
      r.space(), r.keyword("stage"), s.stage = static_cast<int>(r.integer(r.word()));
      r.space();
      s.shape = checkedShape(r, r.values<int64_t>("shape"));
      r.space(), r.keyword("aliases");
      int64_t n = r.integer(r.word());
      if (n < 0 || n > 1024)
        r.fail("bad alias count " + std::to_string(n));
      for (int64_t i = 0; i < n; ++i)
        r.space(), s.aliases.push_back(r.string());
      g.states.push_back(std::move(s));
    } else if (what == "outer") {
      OuterLoop &o = g.outerLoop;
      r.space(), r.keyword("replicas"), o.replicas = r.integer(r.word());
      r.space(), r.keyword("topology"), o.topology = r.string();
      r.space(), r.keyword("seed"), o.seed = static_cast<uint64_t>(std::strtoull(r.word().c_str(), nullptr, 10));
      r.space();
      o.localSteps = r.values<int64_t>("local");
    } else if (what == "phase") {
      if (expected >= 0 && static_cast<int64_t>(g.phase(phase).size()) != expected)
        r.fail("the previous phase has " + std::to_string(g.phase(phase).size()) +
               " nodes, its header said " + std::to_string(expected));
      r.space();
      std::string name = r.word();
      if (name == "step")
        phase = Phase::Step;
      else if (name == "update")
        phase = Phase::Update;
      else if (name == "outer")
        phase = Phase::Outer;
      else
        r.fail("unknown phase '" + name + "'");
      r.space();
      expected = r.integer(r.word());
    } else if (what == "n") {
      if (expected < 0)
        r.fail("a node before any phase line");
      Node n;
      r.space();
      n.kind = kindOf(r, r.word());
      r.space(), r.keyword("dtype"), n.dtype = dtypeOf(r, r.word());
      r.space(), r.keyword("stage"), n.stage = static_cast<int>(r.integer(r.word()));
      r.space(), r.keyword("flag"), n.flag = r.integer(r.word()) != 0;
      r.space(), n.shape = checkedShape(r, r.values<int64_t>("shape"));
      r.space(), n.operands = r.values<int>("ops");
      r.space(), n.ints = r.values<int64_t>("ints");
      r.space(), n.floats = r.values<double>("floats");
      r.space(), n.data = r.values<double>("data");
      r.space(), r.keyword("name"), n.name = r.string();
      r.space(), r.keyword("loc"), n.loc = r.string();
      g.phase(phase).push_back(std::move(n));
    } else if (what == "source") {
      r.space();
      std::string which = r.word();
      r.space();
      int64_t len = r.integer(r.word());
      r.endLine();
      std::string src = r.rawBlock(len);
      if (which == "cpp")
        plan.cppSource = std::move(src);
      else if (which == "cuda")
        plan.cudaSource = std::move(src);
      else
        r.fail("unknown source '" + which + "'");
    } else {
      r.fail("unexpected '" + what + "'");
    }
    r.endLine();
  }
  if (expected >= 0 && static_cast<int64_t>(g.phase(phase).size()) != expected)
    r.fail("the last phase has " + std::to_string(g.phase(phase).size()) +
           " nodes, its header said " + std::to_string(expected));
  try {
    g.validate();
  } catch (const std::exception &e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  return plan;
}

} // namespace stretto
