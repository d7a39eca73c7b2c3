// RUN: stretto-opt %s -split-input-file --kernel-lower-matmul | FileCheck %s

// A plain matmul becomes a GEMM; transposes of the last two dims fold into
// the flags and, left without uses, disappear; a transpose also used
// elsewhere stays; a permutation that is not a last-two-dims swap is not
// folded; the stage is kept.
// CHECK-LABEL: train.model @gemms
// CHECK:       %[[X:.*]] = train.input "x" : tensor<4x3xf32>
// CHECK-NEXT:  %[[W:.*]] = train.input "w" : tensor<3x5xf32>
// CHECK-NEXT:  %[[DY:.*]] = train.input "dy" : tensor<4x5xf32>
// CHECK-NEXT:  %[[Q:.*]] = train.input "q" : tensor<2x6x4xf32>
// CHECK-NEXT:  %[[Y:.*]] = kernel.gemm %[[X]], %[[W]] {stage = 0 : i64} : tensor<4x3xf32>, tensor<3x5xf32> -> tensor<4x5xf32>
// CHECK-NEXT:  %[[DW:.*]] = kernel.gemm %[[X]], %[[DY]] transpose_a : tensor<4x3xf32>, tensor<4x5xf32> -> tensor<3x5xf32>
// CHECK-NEXT:  %[[WT:.*]] = train.transpose %[[W]] [1, 0]
// CHECK-NEXT:  %[[DX:.*]] = kernel.gemm %[[DY]], %[[W]] transpose_b : tensor<4x5xf32>, tensor<3x5xf32> -> tensor<4x3xf32>
// CHECK-NEXT:  %[[QP:.*]] = train.transpose %[[Q]] [1, 0, 2]
// CHECK-NEXT:  %[[B:.*]] = kernel.gemm %[[QP]], %[[X]] : tensor<6x2x4xf32>, tensor<4x3xf32> -> tensor<6x2x3xf32>
// CHECK-NOT:   train.matmul
train.model @gemms {
  train.step {
    %x = train.input "x" : tensor<4x3xf32>
    %w = train.input "w" : tensor<3x5xf32>
    %dy = train.input "dy" : tensor<4x5xf32>
    %q = train.input "q" : tensor<2x6x4xf32>
    %y = train.matmul %x, %w {stage = 0 : i64} : tensor<4x3xf32>, tensor<3x5xf32> -> tensor<4x5xf32>
    %xt = train.transpose %x [1, 0] : tensor<4x3xf32> -> tensor<3x4xf32>
    %dw = train.matmul %xt, %dy : tensor<3x4xf32>, tensor<4x5xf32> -> tensor<3x5xf32>
    %wt = train.transpose %w [1, 0] : tensor<3x5xf32> -> tensor<5x3xf32>
    %dx = train.matmul %dy, %wt : tensor<4x5xf32>, tensor<5x3xf32> -> tensor<4x3xf32>
    %qp = train.transpose %q [1, 0, 2] : tensor<2x6x4xf32> -> tensor<6x2x4xf32>
    %bq = train.matmul %qp, %x : tensor<6x2x4xf32>, tensor<4x3xf32> -> tensor<6x2x3xf32>
    %s0 = train.reduce_sum %y [0, 1] : tensor<4x5xf32> -> tensor<f32>
    %s1 = train.reduce_sum %dw [0, 1] : tensor<3x5xf32> -> tensor<f32>
    %s2 = train.reduce_sum %dx [0, 1] : tensor<4x3xf32> -> tensor<f32>
    %s3 = train.reduce_sum %wt [0, 1] : tensor<5x3xf32> -> tensor<f32>
    %s4 = train.reduce_sum %bq [0, 1, 2] : tensor<6x2x3xf32> -> tensor<f32>
    train.yield %s0, %s1, %s2, %s3, %s4 : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}

// -----

// Batched operands: a swap of the last two dims of a rank-3 b folds.
// CHECK-LABEL: train.model @batched
// CHECK:       kernel.gemm %{{.*}}, %{{.*}} transpose_b : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x4xf32>
// CHECK-NOT:   train.transpose
train.model @batched {
  train.step {
    %q = train.input "q" : tensor<2x4x8xf32>
    %k = train.input "k" : tensor<2x4x8xf32>
    %kt = train.transpose %k [0, 2, 1] : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
    %s = train.matmul %q, %kt : tensor<2x4x8xf32>, tensor<2x8x4xf32> -> tensor<2x4x4xf32>
    %l = train.reduce_sum %s [0, 1, 2] : tensor<2x4x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
