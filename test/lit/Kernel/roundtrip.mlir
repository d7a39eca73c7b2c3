// RUN: stretto-opt %s -split-input-file | stretto-opt -split-input-file | FileCheck %s

// A fused kernel with a broadcast row vector and a broadcast scalar, every
// scalar op of the dialect in its body, survives print and parse.
// CHECK-LABEL: train.model @all_ops
// CHECK:       %[[R:.*]] = kernel.elementwise(%{{.*}}, %{{.*}}, %{{.*}}) : tensor<4x8xf32>, tensor<8xf32>, tensor<f32> -> tensor<4x8xf32> {
// CHECK-NEXT:  ^bb0(%[[A:.*]]: f32, %[[B:.*]]: f32, %[[C:.*]]: f32):
// CHECK-NEXT:    %[[S:.*]] = kernel.add %[[A]], %[[B]] : f32
// CHECK-NEXT:    kernel.sub
// CHECK-NEXT:    kernel.mul
// CHECK-NEXT:    kernel.div
// CHECK-NEXT:    kernel.max
// CHECK-NEXT:    kernel.min
// CHECK-NEXT:    kernel.pow
// CHECK-NEXT:    kernel.gt
// CHECK-NEXT:    kernel.neg
// CHECK-NEXT:    kernel.exp
// CHECK-NEXT:    kernel.log
// CHECK-NEXT:    kernel.sqrt
// CHECK-NEXT:    kernel.rsqrt
// CHECK-NEXT:    kernel.tanh
// CHECK-NEXT:    kernel.cos
// CHECK-NEXT:    kernel.gelu
// CHECK-NEXT:    kernel.gelu_grad
// CHECK-NEXT:    %[[Y:.*]] = kernel.relu %{{.*}} : f32
// CHECK-NEXT:    kernel.yield %[[Y]] : f32
// CHECK-NEXT:  }
train.model @all_ops {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %row = train.input "row" : tensor<8xf32>
  %s = train.input "s" : tensor<f32>
  %r = kernel.elementwise (%x, %row, %s) : tensor<4x8xf32>, tensor<8xf32>, tensor<f32> -> tensor<4x8xf32> {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %0 = kernel.add %a, %b : f32
    %1 = kernel.sub %0, %c : f32
    %2 = kernel.mul %1, %a : f32
    %3 = kernel.div %2, %b : f32
    %4 = kernel.max %3, %c : f32
    %5 = kernel.min %4, %a : f32
    %6 = kernel.pow %5, %c : f32
    %7 = kernel.gt %6, %a : f32
    %8 = kernel.neg %7 : f32
    %9 = kernel.exp %8 : f32
    %10 = kernel.log %9 : f32
    %11 = kernel.sqrt %10 : f32
    %12 = kernel.rsqrt %11 : f32
    %13 = kernel.tanh %12 : f32
    %14 = kernel.cos %13 : f32
    %15 = kernel.gelu %14 : f32
    %16 = kernel.gelu_grad %15 : f32
    %17 = kernel.relu %16 : f32
    kernel.yield %17 : f32
  }
  %l = train.reduce_sum %r [0, 1] : tensor<4x8xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// f64 and several results (one scalar each) print and parse.
// CHECK-LABEL: train.model @two_results
// CHECK:       %{{.*}}:2 = kernel.elementwise(%{{.*}}) : tensor<3xf64> -> tensor<3xf64>, tensor<3xf64> {
// CHECK:         kernel.yield %{{.*}}, %{{.*}} : f64, f64
train.model @two_results {
  train.step {
  %x = train.input "x" : tensor<3xf64>
  %r:2 = kernel.elementwise (%x) : tensor<3xf64> -> tensor<3xf64>, tensor<3xf64> {
  ^bb0(%a: f64):
    %e = kernel.exp %a : f64
    %n = kernel.neg %a : f64
    kernel.yield %e, %n : f64, f64
  }
  %s = train.add %r#0, %r#1 : tensor<3xf64>
  %l = train.reduce_sum %s [0] : tensor<3xf64> -> tensor<f64>
  train.yield %l : tensor<f64>
  }
}

// -----

// Library GEMMs: plain, with transposes, batched with a shared b, scaled.
// CHECK-LABEL: train.model @gemm
// CHECK:       kernel.gemm %{{.*}}, %{{.*}} : tensor<4x3xf32>, tensor<3x5xf32> -> tensor<4x5xf32>
// CHECK-NEXT:  kernel.gemm %{{.*}}, %{{.*}} transpose_a transpose_b : tensor<3x4xf32>, tensor<5x3xf32> -> tensor<4x5xf32>
// CHECK-NEXT:  kernel.gemm %{{.*}}, %{{.*}} transpose_b {alpha = 1.250000e-01 : f64} : tensor<2x4x3xf32>, tensor<5x3xf32> -> tensor<2x4x5xf32>
train.model @gemm {
  train.step {
  %a = train.input "a" : tensor<4x3xf32>
  %b = train.input "b" : tensor<3x5xf32>
  %at = train.input "at" : tensor<3x4xf32>
  %bt = train.input "bt" : tensor<5x3xf32>
  %ab = train.input "ab" : tensor<2x4x3xf32>
  %0 = kernel.gemm %a, %b : tensor<4x3xf32>, tensor<3x5xf32> -> tensor<4x5xf32>
  %1 = kernel.gemm %at, %bt transpose_a transpose_b : tensor<3x4xf32>, tensor<5x3xf32> -> tensor<4x5xf32>
  %2 = kernel.gemm %ab, %bt transpose_b {alpha = 0.125 : f64} : tensor<2x4x3xf32>, tensor<5x3xf32> -> tensor<2x4x5xf32>
  %s = train.add %0, %1 : tensor<4x5xf32>
  %t = train.add %2, %s : tensor<2x4x5xf32>, tensor<4x5xf32> -> tensor<2x4x5xf32>
  %l = train.reduce_sum %t [0, 1, 2] : tensor<2x4x5xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}
