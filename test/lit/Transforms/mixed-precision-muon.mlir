// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(train-autodiff,train-optimizer,canonicalize,cse,train-mixed-precision))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(train-autodiff,train-optimizer,canonicalize,cse))' | FileCheck %s --check-prefix=F32

// Muon's Newton-Schulz iteration in a bf16 plan runs on bf16 matrices
// (`bf16`: rounded where they are made, bf16 GEMMs); the update adds no
// rounding point of its own. Without the pass it stays f32.
// CHECK-LABEL: train.model @mlp
// CHECK:       train.update {
// CHECK-NOT:   train.round_bf16
// CHECK:       train.newton_schulz %{{.*}} {bf16} : tensor<8x16xf32>
// CHECK-NOT:   train.round_bf16
// CHECK:       train.write %{{.*}} to @w :
// F32-LABEL:   train.model @mlp
// F32:         train.newton_schulz %{{.*}} : tensor<8x16xf32>
// F32-NOT:     bf16

train.model @mlp attributes {trainer = {optimizer = "muon", lr = 0.02 : f64}} {
  train.param @w : tensor<8x16xf32> = normal(0.1) {role = "matrix"}
  train.step {
    %x = train.input "x" : tensor<2x8xf32>
    %w = train.read @w : tensor<8x16xf32>
    %0 = train.matmul %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
    %l = train.reduce_sum %0 [0, 1] : tensor<2x16xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
