//===- CostModelTest.cpp - the roofline prediction of a plan's step -------===//
#include "stretto/Runtime/CostModel.h"
#include "exec/UpdateChains.h"

#include <gtest/gtest.h>

using namespace stretto;

namespace {

Node node(OpKind kind, std::vector<int> operands, Shape shape) {
  Node n;
  n.kind = kind;
  n.operands = std::move(operands);
  n.shape = std::move(shape);
  return n;
}

/// A graph with the parameter w [128, 256].
Graph withWeight() {
  Graph g;
  StateDecl w;
  w.name = "w";
  w.shape = {128, 256};
  w.isParam = true;
  g.states.push_back(w);
  return g;
}

/// Adds a read of w and the GEMM x · w, x = node `x` ([..., 64, 128]).
void addGemmByWeight(Graph &g, int x, Shape out) {
  Node read = node(OpKind::Read, {}, {128, 256});
  read.name = "w";
  int r = g.add(read);
  Node gemm = node(OpKind::Gemm, {x, r}, std::move(out));
  gemm.ints = {0, 0};
  g.add(gemm);
}

/// x [64, 128] · w [128, 256], then an element-wise kernel over the
/// product, then a reshape (a view).
Graph gemmThenKernel() {
  Graph g = withWeight();
  g.add(node(OpKind::Input, {}, {64, 128}));
  addGemmByWeight(g, 0, {64, 256});
  Node k = node(OpKind::Kernel, {2}, {64, 256});
  k.name = "k0";
  g.add(k);
  g.add(node(OpKind::Reshape, {3}, {16384}));
  return g;
}

/// The h200 model without its floor on a launch's time: the roofline terms
/// alone (the tests of the floor use findDeviceModel's).
const DeviceModel *roofline() {
  static const DeviceModel d = [] {
    DeviceModel m = *findDeviceModel("h200");
    m.kernelFloorSeconds = 0;
    return m;
  }();
  return &d;
}

} // namespace

TEST(CostModel, GemmsAreComputeOrBandwidthBoundKernelsBandwidthBound) {
  const DeviceModel *d = roofline();
  ASSERT_NE(d, nullptr);
  Graph g = gemmThenKernel();
  StepCost c = predictStep(g, *d, CostPrecision::F32, 1, 64);
  ASSERT_EQ(c.nodes.size(), 3u) << "the reshape is a view, the input and read are I/O";
  const NodeCost &gemm = c.nodes[0], &kernel = c.nodes[1], &check = c.nodes[2];
  EXPECT_EQ(gemm.category, "gemm");
  EXPECT_DOUBLE_EQ(gemm.flops, 2.0 * 64 * 256 * 128);
  EXPECT_DOUBLE_EQ(gemm.bytes, 4.0 * (64 * 128 + 128 * 256 + 64 * 256));
  double compute = gemm.flops / (d->f32Flops * d->gemmEfficiency);
  double memory = gemm.bytes / (d->bandwidth * d->memoryEfficiency);
  EXPECT_DOUBLE_EQ(gemm.seconds, std::max(compute, memory));
  EXPECT_EQ(kernel.category, "element-wise kernel");
  EXPECT_DOUBLE_EQ(kernel.bytes, 4.0 * 2 * 64 * 256);
  EXPECT_DOUBLE_EQ(kernel.seconds, kernel.bytes / (d->bandwidth * d->memoryEfficiency));
  // After the step, every state is read once on the device for infs and
  // NaNs (one launch).
  EXPECT_EQ(check.category, "state check");
  EXPECT_DOUBLE_EQ(check.bytes, 4.0 * 128 * 256);
  EXPECT_EQ(check.launches, 1);
  EXPECT_EQ(c.launches, 3);
  EXPECT_DOUBLE_EQ(c.deviceSeconds, gemm.seconds + kernel.seconds + check.seconds);
  // Three launches of a few microseconds outweigh three tiny kernels:
  // eagerly launched, the step is bound by the host.
  EXPECT_DOUBLE_EQ(c.eagerSeconds, 3 * d->eagerLaunchSeconds);
  EXPECT_DOUBLE_EQ(c.graphSeconds, c.deviceSeconds + 3 * d->graphGapSeconds);
  EXPECT_DOUBLE_EQ(c.modelFlops, 6.0 * 128 * 256 * 64);
}

// bf16 as the CUDA runtime runs an f32 plan (no value stored in two
// bytes): the GEMM on the tensor-core peak reads bf16 copies of its
// operands, each made by a rounding launch (4 bytes read, 2 written an
// element); the kernel after it still moves four bytes an element.
TEST(CostModel, Bf16GemmsRoundFourByteOperandsFirst) {
  const DeviceModel *d = roofline();
  Graph g = gemmThenKernel();
  StepCost f32 = predictStep(g, *d, CostPrecision::F32, 1, 64);
  StepCost bf16 = predictStep(g, *d, CostPrecision::BF16, 1, 64);
  const NodeCost &gemm = bf16.nodes[0];
  const double ins = 64 * 128 + 128 * 256, out = 64 * 256;
  EXPECT_EQ(gemm.launches, 3) << "the GEMM and a rounding launch per operand";
  EXPECT_DOUBLE_EQ(gemm.bytes, 4 * out + 2 * ins + 6 * ins);
  const double memory = d->bandwidth * d->memoryEfficiency;
  EXPECT_DOUBLE_EQ(gemm.seconds,
                   std::max(gemm.flops / (d->bf16Flops * d->gemmEfficiency),
                            (4 * out + 2 * ins) / memory) +
                       6 * ins / memory);
  EXPECT_DOUBLE_EQ(bf16.nodes[1].bytes, f32.nodes[1].bytes) << "the kernel stays four bytes";
  EXPECT_EQ(bf16.launches, f32.launches + 2);
}

// A value a store_bf16 kernel writes (Node dtype BF16: two bytes on a GPU)
// costs two bytes an element where it is written and where the GEMM reads
// it, through a reshape, with no rounding launch; the weight, read in f32,
// still gets one.
TEST(CostModel, Bf16ValuesStoredInTwoBytesNeedNoRoundingLaunch) {
  const DeviceModel *d = findDeviceModel("h200");
  Graph g = withWeight();
  g.add(node(OpKind::Input, {}, {64, 128}));
  Node k = node(OpKind::Kernel, {0}, {64, 128});
  k.name = "round";
  k.dtype = DType::BF16;
  g.add(k);
  g.add(node(OpKind::Reshape, {1}, {1, 64, 128}));
  addGemmByWeight(g, 2, {1, 64, 256});
  StepCost c = predictStep(g, *d, CostPrecision::BF16, 1, 64);
  ASSERT_EQ(c.nodes.size(), 3u) << "the kernel, the GEMM and the state check";
  EXPECT_DOUBLE_EQ(c.nodes[0].bytes, 4.0 * 64 * 128 + 2.0 * 64 * 128) << "read f32, write bf16";
  EXPECT_EQ(c.nodes[1].launches, 2) << "one rounding launch: the weight's";
  EXPECT_DOUBLE_EQ(c.nodes[1].bytes, 4.0 * 64 * 256 + 2.0 * (64 * 128 + 128 * 256) +
                                         6.0 * 128 * 256);
  // With STRETTO_BF16_STORAGE=0 the value takes four bytes and its GEMM
  // operand a rounding launch too.
  StepCost four = predictStep(g, *d, CostPrecision::BF16, 1, 64, /*twoByteBf16=*/false);
  EXPECT_EQ(four.nodes[1].launches, 3);
  EXPECT_DOUBLE_EQ(four.nodes[0].bytes, 8.0 * 64 * 128);
  // In f32 the same plan moves four bytes everywhere.
  StepCost f = predictStep(g, *d, CostPrecision::F32, 1, 64);
  EXPECT_DOUBLE_EQ(f.nodes[0].bytes, 8.0 * 64 * 128);
}

// A GEMM result stored in bf16 (Node dtype BF16): cuBLASLt writes two
// bytes an element; held in four (STRETTO_BF16_STORAGE=0) it is rounded in
// place after the GEMM, a launch reading and writing four bytes.
TEST(CostModel, Bf16GemmResultsAreWrittenInTwoBytes) {
  const DeviceModel *d = findDeviceModel("h200");
  Graph g = gemmThenKernel();
  g.nodes[2].dtype = DType::BF16; // the GEMM
  StepCost two = predictStep(g, *d, CostPrecision::BF16, 1, 64);
  StepCost four = predictStep(g, *d, CostPrecision::BF16, 1, 64, /*twoByteBf16=*/false);
  const double ins = 64 * 128 + 128 * 256, out = 64 * 256;
  EXPECT_DOUBLE_EQ(two.nodes[0].bytes, 2 * out + 2 * ins + 6 * ins);
  EXPECT_EQ(two.nodes[0].launches, 3);
  EXPECT_DOUBLE_EQ(four.nodes[0].bytes, 4 * out + 2 * ins + 6 * ins + 8 * out);
  EXPECT_EQ(four.nodes[0].launches, 4);
  EXPECT_DOUBLE_EQ(two.nodes[1].bytes, 2 * out + 4 * out) << "the kernel reads two bytes";
}

// Attention as the CUDA runtime runs it: fused on tensor cores for head
// dims 16, 32 and 64 (the bf16 peak, for the part products: six a product
// of f32 operands, three with one bf16 operand, one of two), also in a
// bf16-storage plan (Q, K, V taken as bf16); fused on CUDA cores (the FP32
// peak) for head dim 8; with bf16 products on an f32 plan or head dim 128,
// the GEMM path (tensor-core peak) with the T x T scores through memory.
TEST(CostModel, AttentionIsFusedOnTensorCoresOrCudaCoresOrGemmsWithScoresInMemory) {
  const DeviceModel *d = roofline();
  auto attention = [](int64_t dim, bool bf16Plan, OpKind kind) {
    Graph g;
    for (int k = 0; k < (kind == OpKind::Attention ? 3 : 4); ++k)
      g.add(node(OpKind::Input, {}, {2, 4, 128, dim}));
    Node a = kind == OpKind::Attention ? node(kind, {0, 1, 2}, {2, 4, 128, dim})
                                       : node(kind, {0, 1, 2, 3}, {3, 2, 4, 128, dim});
    a.flag = 1; // causal
    const int at = g.add(a);
    if (bf16Plan)
      g.add(node(OpKind::RoundBf16, {at}, {2, 4, 128, dim}));
    return g;
  };
  auto timeOf = [&](const NodeCost &c, double work, double rate) {
    return std::max(work / rate, c.bytes / (d->bandwidth * d->memoryEfficiency));
  };
  const double flops = 4.0 * 8 * 128 * 128 * 64 * 0.5, mma = d->bf16Flops * d->mmaAttentionEfficiency;
  for (CostPrecision p : {CostPrecision::F32, CostPrecision::BF16}) {
    const bool bf16 = p == CostPrecision::BF16;
    NodeCost fwd = predictStep(attention(64, bf16, OpKind::Attention), *d, p, 1, 256).nodes[0];
    EXPECT_DOUBLE_EQ(fwd.flops, flops);
    // S = QK^T and PV: 6 + 6 part products from f32, 1 + 3 from bf16 Q, K, V
    EXPECT_DOUBLE_EQ(fwd.seconds, timeOf(fwd, flops * (bf16 ? 4 : 12) / 2, mma));
    // P rounded to bf16 (train.attention's `bf16`): PV one part beside a
    // bf16 V, three beside an f32 one
    Graph roundedFwd = attention(64, bf16, OpKind::Attention);
    roundedFwd.nodes[3].ints = {1};
    NodeCost fastFwd = predictStep(roundedFwd, *d, p, 1, 256).nodes[0];
    EXPECT_DOUBLE_EQ(fastFwd.seconds, timeOf(fastFwd, flops * (bf16 ? 2 : 9) / 2, mma));
    EXPECT_EQ(fwd.launches, 1);
    EXPECT_NE(fwd.what.find("tensor cores"), std::string::npos) << fwd.what;
    NodeCost bwd = predictStep(attention(64, bf16, OpKind::AttentionGrad), *d, p, 1, 256).nodes[0];
    EXPECT_DOUBLE_EQ(bwd.flops, 2.5 * flops);
    // S and dP three times, dQ, dK and dV once (each with P or dS)
    EXPECT_DOUBLE_EQ(bwd.seconds, timeOf(bwd, 2.5 * flops * (bf16 ? 15 : 54) / 5, mma));
    EXPECT_EQ(bwd.launches, 2);
    // P and dS rounded to bf16 (attention_grad's `bf16`): one part each
    // beside bf16 Q, K and g (a bf16 plan's), three beside f32 ones.
    Graph rounded = attention(64, bf16, OpKind::AttentionGrad);
    rounded.nodes[4].ints = {1};
    NodeCost fast = predictStep(rounded, *d, p, 1, 256).nodes[0];
    EXPECT_DOUBLE_EQ(fast.seconds, timeOf(fast, 2.5 * flops * (bf16 ? 9 : 45) / 5, mma));
  }
  NodeCost simt = predictStep(attention(8, false, OpKind::Attention), *d, CostPrecision::F32, 1, 256)
                      .nodes[0];
  EXPECT_DOUBLE_EQ(simt.seconds, timeOf(simt, flops / 8, d->f32Flops * d->attentionEfficiency));
  EXPECT_NE(simt.what.find("CUDA cores"), std::string::npos) << simt.what;
  // Head dim 128 has no fused kernel; bf16 products on an f32 plan neither.
  for (auto [dim, p] : {std::pair{int64_t(128), CostPrecision::F32}, {int64_t(64), CostPrecision::BF16}}) {
    NodeCost gemms = predictStep(attention(dim, false, OpKind::Attention), *d, p, 1, 256).nodes[0];
    const double io = 4.0 * 4 * 2 * 4 * 128 * dim, scores = 4.0 * 4 * 8 * 128 * 128;
    const double peak = p == CostPrecision::BF16 ? d->bf16Flops : d->f32Flops;
    EXPECT_DOUBLE_EQ(gemms.bytes, io + scores);
    EXPECT_DOUBLE_EQ(gemms.seconds, gemms.flops / (peak * d->gemmEfficiency) +
                                        (io + scores) / (d->bandwidth * d->memoryEfficiency));
    EXPECT_NE(gemms.what.find("GEMMs"), std::string::npos) << gemms.what;
  }
}

// A slice of whole leading rows of a value in the arena is a view (the
// planner aliases it): no launch, no bytes; a slice of a state, or one
// that cuts inner rows, is a copy.
TEST(CostModel, LeadingRowSlicesOfArenaValuesAreViews) {
  const DeviceModel *d = findDeviceModel("h200");
  Graph g;
  const int x = g.add(node(OpKind::Input, {}, {3, 8, 64}));
  Node state = node(OpKind::Read, {}, {3, 8, 64});
  state.name = "w";
  const int w = g.add(state);
  auto slice = [&](int of, int64_t axis, int64_t start, Shape shape) {
    Node s = node(OpKind::Slice, {of}, std::move(shape));
    s.ints = {axis, start};
    return g.add(s);
  };
  slice(x, 0, 1, {1, 8, 64});  // a view
  slice(w, 0, 1, {1, 8, 64});  // of a state: copied
  slice(x, 1, 2, {3, 4, 64});  // inner rows: copied
  StepCost c = predictStep(g, *d, CostPrecision::F32, 1, 256);
  ASSERT_EQ(c.nodes.size(), 2u);
  for (const NodeCost &n : c.nodes) {
    EXPECT_EQ(n.launches, 1);
    // (the slice written, its operand counted whole)
    EXPECT_DOUBLE_EQ(n.bytes, 4.0 * (n.what == "slice 1x8x64" ? 512 : 768) + 4.0 * 1536) << n.what;
  }
}

// The update's kernels of one multi-tensor group cost one launch together
// (their bytes and time are all still counted); the step's are not grouped.
TEST(CostModel, MultiTensorGroupsOfTheUpdateLaunchOnce) {
  const DeviceModel *d = roofline();
  Graph g;
  for (int k = 0; k < 4; ++k) {
    Node in = node(OpKind::Input, {}, {1024});
    in.name = "x" + std::to_string(k);
    g.add(in, Phase::Update);
  }
  for (int k = 0; k < 4; ++k) {
    Node kn = node(OpKind::Kernel, {k}, {1024});
    kn.name = "u" + std::to_string(k);
    g.add(kn, Phase::Update);
  }
  Node sk = node(OpKind::Kernel, {}, {1024});
  sk.name = "u0"; // a step kernel named like a member: the step is not grouped
  g.add(node(OpKind::Input, {}, {1024}));
  sk.operands = {0};
  g.add(sk);
  const std::map<std::string, std::string> groups{
      {"u0", "st_multi_0"}, {"u1", "st_multi_0"}, {"u2", "st_multi_0"}};
  StepCost plain = predictStep(g, *d, CostPrecision::F32, 1, 1);
  StepCost multi = predictStep(g, *d, CostPrecision::F32, 1, 1, true, &groups);
  EXPECT_EQ(plain.launches, 5);
  EXPECT_EQ(multi.launches, 3) << "u0-u2 as one launch, u3, the step's u0";
  EXPECT_DOUBLE_EQ(multi.bytes, plain.bytes);
  EXPECT_DOUBLE_EQ(multi.deviceSeconds, plain.deviceSeconds);
  // With the floor on a launch's time, kernels this small cost the floor
  // each: the group's two fewer launches save two floors, less the two
  // members' own (bandwidth) time the group's launch still spends.
  const DeviceModel *f = findDeviceModel("h200");
  StepCost plainF = predictStep(g, *f, CostPrecision::F32, 1, 1);
  StepCost multiF = predictStep(g, *f, CostPrecision::F32, 1, 1, true, &groups);
  const double member = 2 * 4.0 * 1024 / (f->bandwidth * f->memoryEfficiency);
  EXPECT_NEAR(plainF.deviceSeconds - multiF.deviceSeconds, 2 * (f->kernelFloorSeconds - member),
              1e-15);
}

// Whole-tensor sums (gradient clipping's sums of squares) grouped by the
// runtime (MultiTensor.h's sums) cost two launches for the group: every
// sum's parts, then the parts added.
TEST(CostModel, GroupedWholeTensorSumsLaunchTwice) {
  const DeviceModel *d = findDeviceModel("h200");
  Graph g;
  std::map<std::string, std::string> groups;
  for (int k = 0; k < 5; ++k) {
    Node in = node(OpKind::Input, {}, {100000});
    in.name = "g" + std::to_string(k);
    g.add(in, Phase::Update);
  }
  for (int k = 0; k < 5; ++k) {
    Node sum = node(OpKind::Kernel, {k}, {});
    sum.name = "s" + std::to_string(k);
    sum.ints = {1, 1};
    g.add(sum, Phase::Update);
    groups[sum.name] = "st_multi_sum_0";
  }
  StepCost plain = predictStep(g, *d, CostPrecision::F32, 1, 1);
  StepCost grouped = predictStep(g, *d, CostPrecision::F32, 1, 1, true, &groups);
  EXPECT_EQ(plain.launches, 5);
  EXPECT_EQ(grouped.launches, 2);
  EXPECT_DOUBLE_EQ(grouped.bytes, plain.bytes);
  EXPECT_LT(grouped.graphSeconds, plain.graphSeconds);
}

// A norm's backward (norm_grad: x, the gain, dy -> dx rows, then the
// gain's and the bias's gradient rows) is three launches on a GPU (dx row
// by row; each chunk of rows' partial parameter gradients; the chunks
// added), and the second reads x and dy again.
TEST(CostModel, NormGradIsThreeLaunchesReadingXAndDyTwice) {
  const DeviceModel *d = roofline();
  Graph g;
  g.add(node(OpKind::Input, {}, {1024, 768}));
  g.add(node(OpKind::Input, {}, {768}));
  g.add(node(OpKind::Input, {}, {1024, 768}));
  Node ng = node(OpKind::NormGrad, {0, 1, 2}, {1026, 768});
  ng.flag = true; // (a layer norm: the bias's gradient too)
  ng.floats = {1e-5};
  g.add(ng);
  StepCost c = predictStep(g, *d, CostPrecision::F32, 1, 1);
  ASSERT_EQ(c.nodes.size(), 1u);
  EXPECT_EQ(c.nodes[0].launches, 3);
  EXPECT_EQ(c.nodes[0].what, "norm_grad 1026x768");
  const double x = 4.0 * 1024 * 768;
  EXPECT_DOUBLE_EQ(c.nodes[0].bytes, 2 * x /* x */ + 4.0 * 768 + 2 * x /* dy */ + 4.0 * 1026 * 768);
  EXPECT_DOUBLE_EQ(c.nodes[0].seconds, c.nodes[0].bytes / (d->bandwidth * d->memoryEfficiency));
  // With an addend and its rows rounded (kernel-norm-grad-epilogue), in a
  // bf16 run: the addend read, the rows written in two bytes, the gain
  // and bias rows in four; a slice of the rows is two bytes an element
  // to its reader, one of the gain four.
  g.nodes[3].operands.push_back(0);
  g.nodes[3].dtype = DType::BF16;
  Node rows = node(OpKind::Slice, {3}, {1024, 768});
  rows.ints = {0, 0};
  g.add(rows);
  Node gain = node(OpKind::Slice, {3}, {1, 768});
  gain.ints = {0, 1024};
  g.add(gain);
  g.add(node(OpKind::Add, {4, 4}, {1024, 768}));
  g.add(node(OpKind::Add, {5, 5}, {1, 768}));
  c = predictStep(g, *d, CostPrecision::BF16, 1, 1, /*twoByteBf16=*/true);
  ASSERT_EQ(c.nodes.size(), 3u);
  EXPECT_DOUBLE_EQ(c.nodes[0].bytes, 3 * x /* x, dy, the addend */ + 4.0 * 768 +
                                         2 * x /* x and dy again */ + 2.0 * 1024 * 768 +
                                         4.0 * 2 * 768);
  EXPECT_DOUBLE_EQ(c.nodes[1].bytes, 2 * 2.0 * 1024 * 768 + x) << "the rows read twice";
  EXPECT_DOUBLE_EQ(c.nodes[2].bytes, 3 * 4.0 * 768) << "the gain read twice";
}

// scatter_rows as the CUDA runtime runs it: its lists' first rows set to
// none, two launches linking each id's rows, one summing them (four
// launches), moving the ids, g and y once.
TEST(CostModel, ScatterRowsIsFourLaunchesMovingGAndYOnce) {
  const DeviceModel *d = roofline();
  Graph g;
  g.add(node(OpKind::Input, {}, {32, 256}));
  g.add(node(OpKind::Input, {}, {32, 256, 768}));
  g.add(node(OpKind::ScatterRows, {0, 1}, {256, 768}));
  StepCost c = predictStep(g, *d, CostPrecision::F32, 1, 1);
  ASSERT_EQ(c.nodes.size(), 1u);
  EXPECT_EQ(c.nodes[0].launches, 4);
  EXPECT_EQ(c.nodes[0].what, "scatter_rows 256x768");
  EXPECT_EQ(c.nodes[0].category, "runtime op");
  EXPECT_DOUBLE_EQ(c.nodes[0].bytes, 4.0 * (32 * 256 + 32 * 256 * 768 + 256 * 768));
}

// cross_entropy as the CUDA runtime runs it: each row's loss, then their
// mean (two launches), the logits and the targets read once, the rows'
// losses written and read back.
TEST(CostModel, CrossEntropyIsTwoLaunchesThroughTheRowsLosses) {
  const DeviceModel *d = roofline();
  Graph g;
  g.add(node(OpKind::Input, {}, {32, 256, 256}));
  g.add(node(OpKind::Input, {}, {32, 256}));
  g.add(node(OpKind::CrossEntropy, {0, 1}, {}));
  StepCost c = predictStep(g, *d, CostPrecision::F32, 1, 1);
  ASSERT_EQ(c.nodes.size(), 1u);
  EXPECT_EQ(c.nodes[0].launches, 2);
  EXPECT_EQ(c.nodes[0].what, "cross_entropy scalar");
  const double rows = 32 * 256;
  EXPECT_DOUBLE_EQ(c.nodes[0].bytes, 4.0 * (rows * 256 + rows + 1) + 2 * 4.0 * rows);
}

// newton_schulz as the CUDA runtime runs it: each matrix's norm (sums of
// squares a block per span, then their sum) and X = G / norm, five
// launches a step (three GEMMs, batched over a batch's matrices, and two
// element-wise), X copied out; one launch more rounding X to bf16 with
// bf16 matrices. A batch of three: three times the FLOPs.
TEST(CostModel, NewtonSchulzCountsItsNormStartAndCopyOut) {
  const DeviceModel *d = roofline();
  double single = 0;
  for (int batch : {1, 3})
    for (bool bf16 : {false, true}) {
      Graph g;
      std::vector<int> in;
      for (int k = 0; k < batch; ++k)
        in.push_back(g.add(node(OpKind::Input, {}, {768, 3072})));
      Node ns =
          node(OpKind::NewtonSchulz, in, batch > 1 ? Shape{batch, 768, 3072} : Shape{768, 3072});
      ns.ints = {5};
      ns.floats = {3.4445, -4.7750, 2.0315};
      ns.flag = bf16;
      g.add(ns);
      StepCost c = predictStep(g, *d, CostPrecision::F32, 1, 1);
      ASSERT_EQ(c.nodes.size(), 1u);
      EXPECT_EQ(c.nodes[0].launches, 5 * 5 + 3 * batch + 1 + (bf16 ? 1 : 0)) << batch << bf16;
      EXPECT_EQ(c.nodes[0].what, batch > 1 ? "newton_schulz 3x768x3072" : "newton_schulz 768x3072");
      if (batch == 1)
        single = c.nodes[0].flops;
      else
        EXPECT_DOUBLE_EQ(c.nodes[0].flops, 3 * single);
    }
}

// A launch costs the device model's floor at least: a kernel over a few
// elements is priced at the floor, not at its bytes' time; a large one at
// its bytes' time.
TEST(CostModel, EveryLaunchCostsTheFloorAtLeast) {
  const DeviceModel *d = findDeviceModel("h200");
  ASSERT_GT(d->kernelFloorSeconds, 0);
  for (int64_t n : {16, 1 << 24}) {
    Graph g;
    g.add(node(OpKind::Input, {}, {n}));
    Node k = node(OpKind::Kernel, {0}, {n});
    k.name = "k";
    g.add(k);
    StepCost c = predictStep(g, *d, CostPrecision::F32, 1, 1);
    ASSERT_EQ(c.nodes.size(), 1u);
    const double bytesTime = c.nodes[0].bytes / (d->bandwidth * d->memoryEfficiency);
    EXPECT_DOUBLE_EQ(c.nodes[0].seconds, std::max(bytesTime, d->kernelFloorSeconds)) << n;
    EXPECT_EQ(c.nodes[0].seconds == d->kernelFloorSeconds, n == 16) << n;
  }
}

// An update chain (UpdateChains.h: moment kernels read only by the step
// kernel and state writes) of a signature the runtime has a kernel for
// costs one launch, and neither the step's reads of the moments nor the
// second moment's read of the gradient move through memory. A kernel
// read by another kernel is no producer (findUpdateChains).
TEST(CostModel, UpdateChainsLaunchOnceAndKeepTheirValuesOnChip) {
  const DeviceModel *d = findDeviceModel("h200");
  auto update = [](bool extraReader) {
    Graph g;
    for (const char *name : {"g", "m", "v", "w"}) {
      Node in = node(OpKind::Input, {}, {4096});
      in.name = name;
      g.add(in, Phase::Update);
    }
    auto kernel = [&](const char *name, std::vector<int> ops) {
      Node k = node(OpKind::Kernel, std::move(ops), {4096});
      k.name = name;
      return g.add(k, Phase::Update);
    };
    int m = kernel("um", {0, 1}), v = kernel("uv", {0, 2}), w = kernel("uw", {m, v, 3});
    for (auto [name, value] : {std::pair{"m", m}, {"v", v}, {"w", w}}) {
      Node wr = node(OpKind::Write, {value}, {});
      wr.name = name;
      g.add(wr, Phase::Update);
    }
    if (extraReader)
      kernel("ux", {m});
    return g;
  };
  const std::map<std::string, std::string> groups{
      {"um", "st_multi_0"}, {"uv", "st_multi_1"}, {"uw", "st_multi_2"}, {"ux", "st_multi_3"}};
  const std::map<std::string, std::string> chains{
      {"st_multi_0|st_multi_1|st_multi_2", "st_multi_chain_0"}};
  const std::vector<planning::UpdateChain> found =
      planning::findUpdateChains(update(false).update, [&](const Node &n) {
        auto it = groups.find(n.name);
        return it == groups.end() ? std::string() : it->second;
      });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].producers, (std::vector<int>{4, 5}));
  EXPECT_EQ(found[0].consumer, 6);
  EXPECT_EQ(found[0].signature, "st_multi_0|st_multi_1|st_multi_2");
  StepCost grouped = predictStep(update(false), *d, CostPrecision::F32, 1, 1, true, &groups);
  StepCost chained =
      predictStep(update(false), *d, CostPrecision::F32, 1, 1, true, &groups, &chains);
  EXPECT_EQ(grouped.launches, 3) << "three groups";
  EXPECT_EQ(chained.launches, 1);
  EXPECT_DOUBLE_EQ(grouped.bytes - chained.bytes, 3 * 4.0 * 4096) << "m, v and g's second read";
  EXPECT_LT(chained.deviceSeconds, grouped.deviceSeconds);
  // um read by another kernel too: only uv feeds uw on chip.
  StepCost other = predictStep(update(true), *d, CostPrecision::F32, 1, 1, true, &groups, &chains);
  StepCost otherGrouped = predictStep(update(true), *d, CostPrecision::F32, 1, 1, true, &groups);
  EXPECT_DOUBLE_EQ(other.bytes, otherGrouped.bytes) << "st_multi_1|st_multi_2 has no kernel";
}

TEST(CostModel, MicroBatchesRepeatTheStepAndSumTheirGradients) {
  const DeviceModel *d = findDeviceModel("h200");
  Graph g = gemmThenKernel();
  Node grad = node(OpKind::Grad, {2}, {});
  grad.name = "w";
  g.add(grad);
  StepCost one = predictStep(g, *d, CostPrecision::F32, 1, 64);
  StepCost two = predictStep(g, *d, CostPrecision::F32, 2, 128);
  EXPECT_EQ(one.launches, 3) << "one micro-batch: the gradient is the sum, no accumulation";
  EXPECT_EQ(two.launches, 7) << "two micro-batches: each step's nodes twice, plus the sums";
}

TEST(CostModel, UnknownDevicesAreNamed) {
  std::string known;
  EXPECT_EQ(findDeviceModel("a100x", &known), nullptr);
  EXPECT_NE(known.find("h200"), std::string::npos);
}

TEST(CostModel, TheReportNamesTheBoundAndThePrediction) {
  const DeviceModel *d = findDeviceModel("h200");
  Graph g = gemmThenKernel();
  StepCost c = predictStep(g, *d, CostPrecision::F32, 1, 64);
  std::string r = formatStepCost(c, *d, CostPrecision::F32, 5);
  EXPECT_NE(r.find("not a measurement"), std::string::npos) << r;
  EXPECT_NE(r.find("launch-bound"), std::string::npos) << r;
  EXPECT_NE(r.find("the 3 costliest nodes"), std::string::npos) << r;
  EXPECT_NE(r.find("gemm 1x64x256x128"), std::string::npos) << r;
}
