//===- PlanFileTest.cpp - saved plans round-trip; bad files are refused ---===//
#include "stretto/Runtime/PlanExecutor.h"
#include "stretto/Runtime/PlanFile.h"
#include "stretto/Runtime/RefExecutor.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

using namespace stretto;

namespace {

std::string tempPath(const std::string &name) {
  return (std::filesystem::temp_directory_path() /
          ("stretto-planfile-" + std::to_string(::getpid()) + "-" + name))
      .string();
}

// Every field of every kind of record, with awkward values.
PlanFile samplePlan() {
  PlanFile p;
  StateDecl w;
  w.name = "w with spaces";
  w.shape = {3, 2};
  w.init = InitKind::Normal;
  w.scale = 0.1 / 3; // not exact in decimal
  w.isParam = true;
  w.aliases = {"lm_head.weight", "a name with spaces"}; // a tied parameter's other names
  StateDecl m;
  m.name = "w.m";
  m.shape = {3, 2};
  m.copyOf = "w with spaces";
  m.of = "w with spaces";
  m.stage = 1;
  p.graph.states = {w, m};
  p.graph.outerLoop = OuterLoop{4, {10, 20}, "one-peer", 18446744073709551615ULL};
  auto add = [&](Phase ph, OpKind k, std::vector<int> ops, Shape s) -> Node & {
    Node n;
    n.kind = k;
    n.operands = std::move(ops);
    n.shape = std::move(s);
    n.loc = "model.toml:3:7";
    p.graph.phase(ph).push_back(n);
    return p.graph.phase(ph).back();
  };
  add(Phase::Step, OpKind::Input, {}, {2, 3}).name = "x";
  add(Phase::Step, OpKind::Read, {}, {3, 2}).name = "w with spaces";
  Node &c = add(Phase::Step, OpKind::Constant, {}, {2});
  c.data = {1e-30, -std::numeric_limits<double>::infinity()};
  Node &g = add(Phase::Step, OpKind::Gemm, {0, 1}, {2, 2});
  g.ints = {0, 0};
  g.floats = {0.7};
  Node &sm = add(Phase::Step, OpKind::Softmax, {3}, {2, 2});
  sm.flag = true;
  Node &r = add(Phase::Step, OpKind::ReduceSum, {4}, {});
  r.ints = {0, 1};
  add(Phase::Step, OpKind::Yield, {5}, {});
  add(Phase::Update, OpKind::Read, {}, {3, 2}).name = "w.m";
  add(Phase::Update, OpKind::Write, {0}, {}).name = "w.m";
  p.cppSource = "extern \"C\" void k(const void *const *i, void *const *o) {}\n// no newline at end";
  p.cudaSource = "extern \"C\" __global__ void k() {}\n\n";
  p.meta = {{"data.path", "/data/a b.txt"}, {"train.steps", "300"}};
  return p;
}

void expectSameNodes(const std::vector<Node> &a, const std::vector<Node> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].kind, b[i].kind) << i;
    EXPECT_EQ(a[i].operands, b[i].operands) << i;
    EXPECT_EQ(a[i].shape, b[i].shape) << i;
    EXPECT_EQ(a[i].dtype, b[i].dtype) << i;
    EXPECT_EQ(a[i].name, b[i].name) << i;
    EXPECT_EQ(a[i].ints, b[i].ints) << i;
    EXPECT_EQ(a[i].floats, b[i].floats) << i; // bit for bit (17 digits)
    EXPECT_EQ(a[i].data, b[i].data) << i;
    EXPECT_EQ(a[i].flag, b[i].flag) << i;
    EXPECT_EQ(a[i].loc, b[i].loc) << i;
    EXPECT_EQ(a[i].stage, b[i].stage) << i;
  }
}

TEST(PlanFile, RoundTripsEveryField) {
  PlanFile p = samplePlan();
  std::string path = tempPath("roundtrip");
  savePlanFile(path, p);
  PlanFile q = loadPlanFile(path);
  ASSERT_EQ(q.graph.states.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const StateDecl &a = p.graph.states[i], &b = q.graph.states[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.init, b.init);
    EXPECT_EQ(a.scale, b.scale);
    EXPECT_EQ(a.isParam, b.isParam);
    EXPECT_EQ(a.copyOf, b.copyOf);
    EXPECT_EQ(a.of, b.of);
    EXPECT_EQ(a.stage, b.stage);
    EXPECT_EQ(a.aliases, b.aliases);
  }
  EXPECT_EQ(q.graph.outerLoop.replicas, 4);
  EXPECT_EQ(q.graph.outerLoop.localSteps, (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(q.graph.outerLoop.topology, "one-peer");
  EXPECT_EQ(q.graph.outerLoop.seed, 18446744073709551615ULL);
  expectSameNodes(p.graph.nodes, q.graph.nodes);
  expectSameNodes(p.graph.update, q.graph.update);
  EXPECT_EQ(p.cppSource, q.cppSource);
  EXPECT_EQ(p.cudaSource, q.cudaSource);
  EXPECT_EQ(p.meta, q.meta);
  std::filesystem::remove(path);
}

// A loaded plan trains exactly like the graph it was saved from.
TEST(PlanFile, LoadedPlanRunsLikeTheOriginal) {
  PlanFile p = samplePlan();
  p.graph.outerLoop = OuterLoop{};
  p.graph.update.clear();
  std::string path = tempPath("run");
  savePlanFile(path, p);
  PlanFile q = loadPlanFile(path);
  HostTensor x{{2, 3}, {0.1, -0.2, 0.3, 0.4, -0.5, 0.6}};
  PlanExecutor a(p.graph, {}), b(q.graph, {});
  a.initialize(5);
  b.initialize(5);
  EXPECT_EQ(a.evaluate({{"x", x}}).outputs, b.evaluate({{"x", x}}).outputs);
  std::filesystem::remove(path);
}

// Truncation, corruption, a foreign file and a bad record: refused, with
// the file (and line) named.
TEST(PlanFile, RefusesBadFiles) {
  std::string path = tempPath("bad");
  savePlanFile(path, samplePlan());
  std::string good;
  {
    std::ifstream in(path, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto expectRefused = [&](const std::string &bytes, const std::string &what) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    try {
      loadPlanFile(path);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const std::runtime_error &e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(path, 0), 0u) << e.what();
    }
  };
  expectRefused(good.substr(0, good.size() / 2), "truncated");
  std::string flipped = good;
  flipped[good.find("scale=") + 6] = '7';
  expectRefused(flipped, "checksum mismatch");
  expectRefused("hello\n", "not a Stretto plan file");
  // Another format version: refused, saying so (not "corrupt").
  std::string older = good;
  older.replace(0, std::string("stretto-plan 2").size(), "stretto-plan 0");
  expectRefused(older, "has format '0' but this build reads format 2");
  // A well-formed checksum over a bad record: the line is named.
  std::string body = "stretto-plan 2\nphase step 1\nn frobnicate dtype=f32\n";
  char sum[40];
  std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(fnv1a64(body)));
  expectRefused(body + "checksum " + sum + "\n", ":3: unknown op 'frobnicate'");
  // A graph that does not validate (operand out of range).
  body = "stretto-plan 2\nphase step 1\nn neg dtype=f32 stage=-1 flag=0 shape=2 ops=5 ints= "
         "floats= data= name=0: loc=4:a:1:\n";
  std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(fnv1a64(body)));
  expectRefused(body + "checksum " + sum + "\n", "neg");
  EXPECT_THROW(loadPlanFile(path + ".missing"), std::runtime_error);
  std::filesystem::remove(path);
}

} // namespace

// The op table (stretto/Ops.def) is the one definition of the op kinds:
// every kind has one spelling that reads back as itself, each element-wise
// class numbers its ops 0..n-1 without gaps (the CUDA runtime's op codes),
// and the st_unary / st_binary dispatch that NVRTC compiles maps each code
// to the table's scalar function.
TEST(OpTable, NamesClassesAndCodesComeFromOneTable) {
  std::set<std::string> names;
  for (OpKind k : allOpKinds()) {
    OpKind back;
    ASSERT_TRUE(opKindFromName(opKindName(k), back)) << opKindName(k);
    EXPECT_EQ(back, k) << opKindName(k);
    EXPECT_TRUE(names.insert(opKindName(k)).second) << "two kinds spelled " << opKindName(k);
  }
  OpKind none;
  EXPECT_FALSE(opKindFromName("frobnicate", none));
  const std::string text = runtimeOpDispatch();
  std::map<OpClass, std::set<int>> codes;
  size_t elementwise = 0;
  for (OpKind k : allOpKinds()) {
    if (!isElementwise(k))
      continue;
    ++elementwise;
    EXPECT_TRUE(codes[opClass(k)].insert(opCode(k)).second) << opKindName(k);
  }
  for (const auto &[cls, set] : codes)
    EXPECT_EQ(*set.rbegin() + 1, static_cast<int>(set.size())) << "a gap in the op codes";
  EXPECT_EQ(codes[OpClass::Binary].size(), 8u);
  EXPECT_EQ(codes[OpClass::Unary].size(), 13u);
  size_t cases = 0;
  for (size_t at = text.find("  case "); at != std::string::npos; at = text.find("  case ", at + 1))
    ++cases;
  EXPECT_EQ(cases, elementwise);
  EXPECT_NE(text.find("  case " + std::to_string(opCode(OpKind::Gelu)) + ": return st_gelu(x);\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  case " + std::to_string(opCode(OpKind::Max)) + ": return st_max(a, b);\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(opArity(OpKind::LayerNorm), 3);
  EXPECT_EQ(opArity(OpKind::Yield), -1);
  EXPECT_EQ(opClass(OpKind::Relu), OpClass::Unary);
  EXPECT_FALSE(isElementwise(OpKind::Matmul));
}
