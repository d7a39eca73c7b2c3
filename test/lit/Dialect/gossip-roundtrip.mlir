// RUN: stretto-opt %s | stretto-opt | FileCheck %s

// train.gossip_mix round-trips, with its default alpha (1, exact averaging)
// elided and another alpha printed; the gossip round's attributes on
// train.outer survive.
// CHECK-LABEL: train.model @m
// CHECK:         train.outer attributes {gossip_seed = 5 : i64, local_steps = array<i64: 3, 1>, replicas = 2 : i64, topology = "two-peer"} {
// CHECK-NEXT:      %[[Z:.*]] = train.read @w : tensor<2x3xbf16>
// CHECK-NEXT:      %[[A:.*]] = train.gossip_mix %[[Z]] : tensor<2x3xbf16>
// CHECK-NEXT:      %[[B:.*]] = train.gossip_mix %[[A]] {alpha = 2.500000e-01 : f64} : tensor<2x3xbf16>
// CHECK-NEXT:      train.write %[[B]] to @w : tensor<2x3xbf16>
train.model @m {
  train.param @w : tensor<2x3xbf16> = zeros
  train.step {
    %w = train.read @w : tensor<2x3xbf16>
    %l = train.reduce_sum %w [0, 1] : tensor<2x3xbf16> -> tensor<bf16>
    train.yield %l : tensor<bf16>
  }
  train.outer attributes {replicas = 2, local_steps = array<i64: 3, 1>, topology = "two-peer", gossip_seed = 5} {
    %z = train.read @w : tensor<2x3xbf16>
    %a = train.gossip_mix %z {alpha = 1.0} : tensor<2x3xbf16>
    %b = train.gossip_mix %a {alpha = 0.25} : tensor<2x3xbf16>
    train.write %b to @w : tensor<2x3xbf16>
  }
}
