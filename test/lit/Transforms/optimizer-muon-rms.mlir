// RUN: stretto-opt %s -split-input-file --pass-pipeline='builtin.module(train.model(train-autodiff,train-optimizer{optimizer=muon muon-scale=rms}))' | FileCheck %s

// Pass options win over the trainer dictionary: Muon although the trainer
// says sgd, and the RMS-matching scale 0.2 * sqrt(max(rows, cols)) although
// it says shape: 0.2 * sqrt(18) = 0.848528147 (f32) for 18x2,
// 0.2 * sqrt(32) = 1.1313709 for 2x32; no SGD momentum state.
// CHECK-LABEL: train.model @options_win
// CHECK:         train.state @tall.muon_m : tensor<18x2xf32> = zeros {of = @tall}
// CHECK-NEXT:    train.state @wide.muon_m : tensor<2x32xf32> = zeros {of = @wide}
// CHECK-NOT:     .momentum
// CHECK:         train.newton_schulz %{{.*}} : tensor<18x2xf32>
// CHECK-NEXT:    %[[S1:.*]] = train.constant dense<0.848528147> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[S1]] : tensor<18x2xf32>, tensor<f32> -> tensor<18x2xf32>
// CHECK:         train.write %{{.*}} to @tall : tensor<18x2xf32>
// CHECK:         train.newton_schulz %{{.*}} : tensor<2x32xf32>
// CHECK-NEXT:    %[[S2:.*]] = train.constant dense<1.1313709> : tensor<f32>
// CHECK-NEXT:    train.mul %{{.*}}, %[[S2]] : tensor<2x32xf32>, tensor<f32> -> tensor<2x32xf32>
// CHECK:         train.write %{{.*}} to @wide : tensor<2x32xf32>
train.model @options_win attributes {trainer = {optimizer = "sgd", muon_scale = "shape"}} {
  train.param @tall : tensor<18x2xf32> = normal(0.02) {role = "matrix"}
  train.param @wide : tensor<2x32xf32> = normal(0.02) {role = "matrix"}
  train.step {
    %0 = train.read @tall : tensor<18x2xf32>
    %1 = train.read @wide : tensor<2x32xf32>
    %l0 = train.reduce_sum %0 [0, 1] : tensor<18x2xf32> -> tensor<f32>
    %l1 = train.reduce_sum %1 [0, 1] : tensor<2x32xf32> -> tensor<f32>
    %l = train.add %l0, %l1 : tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Under optimizer=muon the embedding and head still use AdamW, and a square
// matrix gets 0.2 * sqrt(16) = 0.8.
// CHECK-LABEL: train.model @mixed_groups
// CHECK-NEXT:    train.param @wte
// CHECK-NEXT:    train.param @w
// CHECK-NEXT:    train.param @head
// CHECK-NEXT:    train.state @wte.adam_m : tensor<8x16xf32> = zeros {of = @wte}
// CHECK-NEXT:    train.state @wte.adam_v : tensor<8x16xf32> = zeros {of = @wte}
// CHECK-NEXT:    train.state @w.muon_m : tensor<16x16xf32> = zeros {of = @w}
// CHECK-NEXT:    train.state @head.adam_m : tensor<16x8xf32> = zeros {of = @head}
// CHECK-NEXT:    train.state @head.adam_v : tensor<16x8xf32> = zeros {of = @head}
// CHECK-NEXT:    train.step
// CHECK:         train.newton_schulz %{{.*}} : tensor<16x16xf32>
// CHECK-NEXT:    train.constant dense<8.000000e-01> : tensor<f32>
// CHECK-NOT:     train.newton_schulz
train.model @mixed_groups {
  train.param @wte : tensor<8x16xf32> = normal(0.02) {role = "embedding"}
  train.param @w : tensor<16x16xf32> = normal(0.02) {role = "matrix"}
  train.param @head : tensor<16x8xf32> = normal(0.02) {role = "head"}
  train.step {
    %tok = train.input "tokens" : tensor<4xi32>
    %tgt = train.input "targets" : tensor<4xi32>
    %e = train.read @wte : tensor<8x16xf32>
    %x = train.embedding %e[%tok] : tensor<8x16xf32>, tensor<4xi32> -> tensor<4x16xf32>
    %w = train.read @w : tensor<16x16xf32>
    %h = train.matmul %x, %w : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
    %hd = train.read @head : tensor<16x8xf32>
    %lg = train.matmul %h, %hd : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
    %l = train.cross_entropy %lg, %tgt : tensor<4x8xf32>, tensor<4xi32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
