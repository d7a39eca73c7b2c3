//===- CostModelTest.cpp - the roofline prediction of a plan's step -------===//
#include "stretto/Runtime/CostModel.h"

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

/// x [64, 128] · w [128, 256], then an element-wise kernel over the
/// product, then a reshape (a view).
Graph gemmThenKernel() {
  Graph g;
  StateDecl w;
  w.name = "w";
  w.shape = {128, 256};
  w.isParam = true;
  g.states.push_back(w);
  g.add(node(OpKind::Input, {}, {64, 128}));
  Node read = node(OpKind::Read, {}, {128, 256});
  read.name = "w";
  g.add(read);
  Node gemm = node(OpKind::Gemm, {0, 1}, {64, 256});
  gemm.ints = {0, 0};
  g.add(gemm);
  Node k = node(OpKind::Kernel, {2}, {64, 256});
  k.name = "k0";
  g.add(k);
  g.add(node(OpKind::Reshape, {3}, {16384}));
  return g;
}

} // namespace

TEST(CostModel, GemmsAreComputeOrBandwidthBoundKernelsBandwidthBound) {
  const DeviceModel *d = findDeviceModel("h200");
  ASSERT_NE(d, nullptr);
  Graph g = gemmThenKernel();
  StepCost c = predictStep(g, *d, CostPrecision::F32, 1, 64);
  ASSERT_EQ(c.nodes.size(), 2u) << "the reshape is a view, the input and read are I/O";
  const NodeCost &gemm = c.nodes[0], &kernel = c.nodes[1];
  EXPECT_EQ(gemm.category, "gemm");
  EXPECT_DOUBLE_EQ(gemm.flops, 2.0 * 64 * 256 * 128);
  EXPECT_DOUBLE_EQ(gemm.bytes, 4.0 * (64 * 128 + 128 * 256 + 64 * 256));
  double compute = gemm.flops / (d->f32Flops * d->gemmEfficiency);
  double memory = gemm.bytes / (d->bandwidth * d->memoryEfficiency);
  EXPECT_DOUBLE_EQ(gemm.seconds, std::max(compute, memory));
  EXPECT_EQ(kernel.category, "element-wise kernel");
  EXPECT_DOUBLE_EQ(kernel.bytes, 4.0 * 2 * 64 * 256);
  EXPECT_DOUBLE_EQ(kernel.seconds, kernel.bytes / (d->bandwidth * d->memoryEfficiency));
  EXPECT_EQ(c.launches, 2);
  EXPECT_DOUBLE_EQ(c.deviceSeconds, gemm.seconds + kernel.seconds);
  // Two launches of a few microseconds outweigh two tiny kernels: eagerly
  // launched, the step is bound by the host.
  EXPECT_DOUBLE_EQ(c.eagerSeconds, 2 * d->eagerLaunchSeconds);
  EXPECT_DOUBLE_EQ(c.graphSeconds, c.deviceSeconds + 2 * d->graphGapSeconds);
  EXPECT_DOUBLE_EQ(c.modelFlops, 6.0 * 128 * 256 * 64);
}

TEST(CostModel, Bf16HalvesTheStepsBytesAndUsesTheTensorCorePeak) {
  const DeviceModel *d = findDeviceModel("h200");
  Graph g = gemmThenKernel();
  StepCost f32 = predictStep(g, *d, CostPrecision::F32, 1, 64);
  StepCost bf16 = predictStep(g, *d, CostPrecision::BF16, 1, 64);
  EXPECT_DOUBLE_EQ(bf16.bytes, f32.bytes / 2);
  EXPECT_DOUBLE_EQ(bf16.nodes[0].seconds,
                   std::max(bf16.nodes[0].flops / (d->bf16Flops * d->gemmEfficiency),
                            bf16.nodes[0].bytes / (d->bandwidth * d->memoryEfficiency)));
}

TEST(CostModel, MicroBatchesRepeatTheStepAndSumTheirGradients) {
  const DeviceModel *d = findDeviceModel("h200");
  Graph g = gemmThenKernel();
  Node grad = node(OpKind::Grad, {2}, {});
  grad.name = "w";
  g.add(grad);
  StepCost one = predictStep(g, *d, CostPrecision::F32, 1, 64);
  StepCost two = predictStep(g, *d, CostPrecision::F32, 2, 128);
  EXPECT_EQ(one.launches, 2) << "one micro-batch: the gradient is the sum, no accumulation";
  EXPECT_EQ(two.launches, 6) << "two micro-batches: each step's nodes twice, plus the sums";
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
  EXPECT_NE(r.find("the 2 costliest nodes"), std::string::npos) << r;
  EXPECT_NE(r.find("gemm 1x64x256x128"), std::string::npos) << r;
}
