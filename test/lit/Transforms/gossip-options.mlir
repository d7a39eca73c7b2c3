// RUN: stretto-opt %s -split-input-file --train-autodiff --train-optimizer \
// RUN:   --train-gossip="replicas=4 local-steps=2,2,1,0 topology=one-peer outer-lr=1.0 momentum=0.5 gamma-placement=after-mixing seed=3" \
// RUN:   | FileCheck %s

// Pass options win over the trainer dictionary (which says complete/diloco
// defaults here). With gamma after the mixing (the published transcription)
// the exchange mixes y itself and the momentum term gamma*(y - y_prev) is
// added to the mixed value.
// CHECK-LABEL: train.model @after
// CHECK:         train.outer attributes {gossip_seed = 3 : i64, local_steps = array<i64: 2, 2, 1, 0>, replicas = 4 : i64, topology = "one-peer"} {
// CHECK:           %[[Y:.*]] = train.add %{{.*}}, %{{.*}} : tensor<3xf64>
// CHECK-NEXT:      %[[P:.*]] = train.read @w.gossip_y_prev : tensor<3xf64>
// CHECK-NEXT:      %[[D:.*]] = train.sub %[[Y]], %[[P]] : tensor<3xf64>
// CHECK-NEXT:      %[[GAM:.*]] = train.constant dense<5.000000e-01> : tensor<f64>
// CHECK-NEXT:      %[[M:.*]] = train.mul %[[GAM]], %[[D]]
// CHECK-NEXT:      train.write %[[Y]] to @w.gossip_y_prev : tensor<3xf64>
// CHECK-NEXT:      %[[MIX:.*]] = train.gossip_mix %[[Y]] : tensor<3xf64>
// CHECK-NEXT:      %[[NEXT:.*]] = train.add %[[MIX]], %[[M]] : tensor<3xf64>
// CHECK-NEXT:      train.write %[[NEXT]] to @w.gossip_anchor : tensor<3xf64>
// CHECK-NEXT:      train.write %[[NEXT]] to @w : tensor<3xf64>
train.model @after attributes {trainer = {optimizer = "sgd", lr = 0.1, replicas = 2, topology = "complete"}} {
  train.param @w : tensor<3xf64> = normal(0.1)
  train.step {
    %w = train.read @w : tensor<3xf64>
    %l = train.reduce_sum %w [0] : tensor<3xf64> -> tensor<f64>
    train.yield %l : tensor<f64>
  }
}

// -----

// With gamma = 0 there is no previous iterate to keep: no y_prev state.
// RUN: stretto-opt %s -split-input-file --train-autodiff --train-optimizer \
// RUN:   --train-gossip="replicas=2 momentum=0" | FileCheck %s --check-prefix=NOMOM
// NOMOM-LABEL: train.model @no_momentum
// NOMOM-NOT:     gossip_y_prev
// NOMOM:         train.outer
// NOMOM:           %[[Y:.*]] = train.add
// NOMOM-NEXT:      %[[MIX:.*]] = train.gossip_mix %[[Y]] : tensor<3xf64>
// NOMOM-NOT:     gossip_y_prev
train.model @no_momentum attributes {trainer = {optimizer = "sgd", lr = 0.1}} {
  train.param @w : tensor<3xf64> = normal(0.1)
  train.step {
    %w = train.read @w : tensor<3xf64>
    %l = train.reduce_sum %w [0] : tensor<3xf64> -> tensor<f64>
    train.yield %l : tensor<f64>
  }
}
