// RUN: stretto-opt %s -split-input-file --train-autodiff --train-optimizer | FileCheck %s

// Muon's shape scale is sqrt(max(1, fan_out / fan_in)) (Jordan et al. 2024,
// on PyTorch weights stored [out, in]). Stretto stores a linear weight as the
// rhs of x[.., K] x W[K, N], i.e. [in, out], so the scale is
// sqrt(max(1, cols/rows)): 2 for the up-projection [4, 16], 1 for [16, 4].
// CHECK-LABEL: train.model @mlp
// CHECK:         train.newton_schulz %{{.*}} : tensor<4x16xf32>
// CHECK-NEXT:    train.constant dense<2.000000e+00> : tensor<f32>
// CHECK:         train.newton_schulz %{{.*}} : tensor<16x4xf32>
// CHECK-NEXT:    train.constant dense<1.000000e+00> : tensor<f32>
train.model @mlp attributes {trainer = {optimizer = "muon"}} {
  train.param @up : tensor<4x16xf32> = normal(0.02) {role = "matrix"}
  train.param @down : tensor<16x4xf32> = normal(0.02) {role = "matrix"}
  train.step {
    %x = train.input "x" : tensor<3x4xf32>
    %up = train.read @up : tensor<4x16xf32>
    %h = train.matmul %x, %up : tensor<3x4xf32>, tensor<4x16xf32> -> tensor<3x16xf32>
    %down = train.read @down : tensor<16x4xf32>
    %y = train.matmul %h, %down : tensor<3x16xf32>, tensor<16x4xf32> -> tensor<3x4xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// The same two matrices held as PyTorch's nn.Linear holds them ([out, in],
// used as x·Wᵀ, `layout = "out_in"`, as exported models and kind = "llama"
// declare them): the scale reads fan_out from dim 0, so the up-projection
// [16, 4] gets 2 and the down-projection [4, 16] gets 1.
// CHECK-LABEL: train.model @mlp_out_in
// CHECK:         train.newton_schulz %{{.*}} : tensor<16x4xf32>
// CHECK-NEXT:    train.constant dense<2.000000e+00> : tensor<f32>
// CHECK:         train.newton_schulz %{{.*}} : tensor<4x16xf32>
// CHECK-NEXT:    train.constant dense<1.000000e+00> : tensor<f32>
train.model @mlp_out_in attributes {trainer = {optimizer = "muon"}} {
  train.param @up : tensor<16x4xf32> = normal(0.02) {role = "matrix", layout = "out_in"}
  train.param @down : tensor<4x16xf32> = normal(0.02) {role = "matrix", layout = "out_in"}
  train.step {
    %x = train.input "x" : tensor<3x4xf32>
    %up = train.read @up : tensor<16x4xf32>
    %upT = train.transpose %up [1, 0] : tensor<16x4xf32> -> tensor<4x16xf32>
    %h = train.matmul %x, %upT : tensor<3x4xf32>, tensor<4x16xf32> -> tensor<3x16xf32>
    %down = train.read @down : tensor<4x16xf32>
    %downT = train.transpose %down [1, 0] : tensor<4x16xf32> -> tensor<16x4xf32>
    %y = train.matmul %h, %downT : tensor<3x16xf32>, tensor<16x4xf32> -> tensor<3x4xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
