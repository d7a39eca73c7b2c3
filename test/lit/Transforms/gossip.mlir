// RUN: stretto-opt %s -split-input-file --train-autodiff --train-optimizer --train-gossip | FileCheck %s

// The spec of record (gamma before mixing) on a ring, options from the trainer
// dictionary: per parameter an anchor and a previous iterate, both copies of
// the parameter's initial value; drift g = local - anchor; y = anchor + eta*g;
// z = y + gamma*(y - y_prev); y_prev := y; the exchange mixes z; anchor and
// parameter restart from the mixed value. The outer region records the
// replicas, the per-replica local steps, the topology and the draw seed.
// CHECK-LABEL: train.model @ring
// CHECK:         train.state @w.gossip_anchor : tensor<4x2xf64> = zeros {copy_of = @w, of = @w}
// CHECK-NEXT:    train.state @w.gossip_y_prev : tensor<4x2xf64> = zeros {copy_of = @w, of = @w}
// CHECK-NEXT:    train.step {
// CHECK:         train.update {
// CHECK:         train.outer attributes {gossip_seed = 7 : i64, local_steps = array<i64: 5, 5, 3>, replicas = 3 : i64, topology = "ring"} {
// CHECK-NEXT:      %[[L:.*]] = train.read @w : tensor<4x2xf64>
// CHECK-NEXT:      %[[A:.*]] = train.read @w.gossip_anchor : tensor<4x2xf64>
// CHECK-NEXT:      %[[G:.*]] = train.sub %[[L]], %[[A]] : tensor<4x2xf64>
// CHECK-NEXT:      %[[ETA:.*]] = train.constant dense<6.000000e-01> : tensor<f64>
// CHECK-NEXT:      %[[EG:.*]] = train.mul %[[ETA]], %[[G]] : tensor<f64>, tensor<4x2xf64> -> tensor<4x2xf64>
// CHECK-NEXT:      %[[Y:.*]] = train.add %[[A]], %[[EG]] : tensor<4x2xf64>
// CHECK-NEXT:      %[[P:.*]] = train.read @w.gossip_y_prev : tensor<4x2xf64>
// CHECK-NEXT:      %[[D:.*]] = train.sub %[[Y]], %[[P]] : tensor<4x2xf64>
// CHECK-NEXT:      %[[GAM:.*]] = train.constant dense<2.500000e-01> : tensor<f64>
// CHECK-NEXT:      %[[M:.*]] = train.mul %[[GAM]], %[[D]] : tensor<f64>, tensor<4x2xf64> -> tensor<4x2xf64>
// CHECK-NEXT:      train.write %[[Y]] to @w.gossip_y_prev : tensor<4x2xf64>
// CHECK-NEXT:      %[[Z:.*]] = train.add %[[Y]], %[[M]] : tensor<4x2xf64>
// CHECK-NEXT:      %[[MIX:.*]] = train.gossip_mix %[[Z]] {alpha = 5.000000e-01 : f64} : tensor<4x2xf64>
// CHECK-NEXT:      train.write %[[MIX]] to @w.gossip_anchor : tensor<4x2xf64>
// CHECK-NEXT:      train.write %[[MIX]] to @w : tensor<4x2xf64>
// CHECK-NEXT:    }
train.model @ring attributes {trainer = {optimizer = "sgd", lr = 0.1, momentum = 0.0, replicas = 3,
    sync = "gossip", topology = "ring", local_steps = array<i64: 5, 5, 3>, outer_lr = 0.6,
    outer_momentum = 0.25, gossip_alpha = 0.5, gossip_seed = 7}} {
  train.param @w : tensor<4x2xf64> = normal(0.1)
  train.step {
    %x = train.input "x" : tensor<3x4xf64>
    %w = train.read @w : tensor<4x2xf64>
    %y = train.matmul %x, %w : tensor<3x4xf64>, tensor<4x2xf64> -> tensor<3x2xf64>
    %l = train.reduce_sum %y [0, 1] : tensor<3x2xf64> -> tensor<f64>
    train.yield %l : tensor<f64>
  }
}

// -----

// sync = "diloco" means the complete graph, gamma = 0.9 (DiLoCo's mu) and
// eta = 0.7 by default, with exact averaging (alpha = 1, elided); the seed
// falls back to trainer.seed and local steps to 1.
// CHECK-LABEL: train.model @diloco
// CHECK:         train.outer attributes {gossip_seed = 11 : i64, local_steps = array<i64: 1>, replicas = 8 : i64, topology = "complete"} {
// CHECK:           train.constant dense<0.69999999999999996> : tensor<f64>
// CHECK:           train.constant dense<9.000000e-01> : tensor<f64>
// CHECK:           %[[Z:.*]] = train.add
// CHECK-NEXT:      %[[MIX:.*]] = train.gossip_mix %[[Z]] : tensor<3xf64>
train.model @diloco attributes {trainer = {optimizer = "sgd", lr = 0.1, replicas = 8, sync = "diloco", seed = 11}} {
  train.param @w : tensor<3xf64> = normal(0.1)
  train.step {
    %w = train.read @w : tensor<3xf64>
    %l = train.reduce_sum %w [0] : tensor<3xf64> -> tensor<f64>
    train.yield %l : tensor<f64>
  }
}
