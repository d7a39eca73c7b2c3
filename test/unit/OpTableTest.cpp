//===- OpTableTest.cpp - every backend has a handler for every op kind ----===//
//
// One test per row of Ops.def (the list below is generated from it), each
// asking every backend's op table (stretto/Runtime/OpTable.h) for the
// kind's handler: adding an op to the table without an implementation in
// the reference executor, the compiled runtime's host or CUDA device, or a
// check in the graph validator fails here, naming the backend.
//
//===----------------------------------------------------------------------===//
#include "stretto/Runtime/OpTable.h"

#include <gtest/gtest.h>

using namespace stretto;

namespace {

const OpKind kEveryKind[] = {
#define STRETTO_OP(Kind, name, arity, cls, fn) OpKind::Kind,
#include "stretto/Ops.def"
#undef STRETTO_OP
};

class OpTableTest : public ::testing::TestWithParam<OpKind> {};

TEST_P(OpTableTest, EveryBackendHasAHandler) {
  const OpKind kind = GetParam();
  for (const OpTableCoverage &table : opTableCoverage())
    EXPECT_TRUE(table.has(kind)) << "the " << table.backend << " op table has no row for "
                                 << opKindName(kind) << " (Ops.def)";
}

INSTANTIATE_TEST_SUITE_P(OpsDef, OpTableTest, ::testing::ValuesIn(kEveryKind),
                         [](const ::testing::TestParamInfo<OpKind> &info) {
                           return std::string(opKindName(info.param));
                         });

TEST(OpTable, CoversEveryBackend) {
  std::vector<std::string> names;
  for (const OpTableCoverage &table : opTableCoverage())
    names.push_back(table.backend);
  EXPECT_EQ(names, (std::vector<std::string>{"reference f32", "reference f64", "compiled CPU",
                                             "CUDA", "validator"}));
  EXPECT_EQ(sizeof(kEveryKind) / sizeof(kEveryKind[0]), kNumOpKinds);
  EXPECT_EQ(allOpKinds().size(), kNumOpKinds);
}

TEST(OpTable, AKindWithoutARowHasNoHandler) {
  using Handler = void (*)();
  OpTable<Handler> t("partial");
  t.on({OpKind::Add}, [] {}).onClass(OpClass::Unary, [] {});
  EXPECT_TRUE(t.has(OpKind::Add));
  EXPECT_TRUE(t.has(OpKind::Exp));
  EXPECT_FALSE(t.has(OpKind::Sub));
  EXPECT_EQ(t[OpKind::Matmul], nullptr);
}

} // namespace
