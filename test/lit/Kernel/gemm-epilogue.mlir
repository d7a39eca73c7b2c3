// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-gemm-epilogue))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-gemm-epilogue))' | stretto-opt | FileCheck %s

// f32: the bias add after the GEMM moves into it; the kernel that only
// added goes, the GELU kernel reads the sum. The bias read after the GEMM
// moves up to it.
// CHECK-LABEL: train.model @f32
// CHECK:      %[[B:.*]] = train.read @b
// CHECK-NEXT: %[[Y:.*]] = kernel.gemm %{{.*}}, %{{.*}} bias %[[B]] : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
// CHECK-NEXT: %[[G:.*]] = kernel.elementwise(%[[Y]]) : tensor<4x16xf32> -> tensor<4x16xf32> {
// CHECK-NEXT: ^bb0(%[[A:.*]]: f32):
// CHECK-NEXT:   %[[E:.*]] = kernel.gelu %[[A]] : f32
// CHECK-NEXT:   kernel.yield %[[E]] : f32
// CHECK:      %[[Z:.*]] = kernel.gemm %{{.*}}, %{{.*}} bias %[[B]]
// CHECK-NOT:  kernel.elementwise
// CHECK:      train.reduce_sum %[[Z]]
train.model @f32 {
  train.state @b : tensor<16xf32> = zeros
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %w = train.input "w" : tensor<8x16xf32>
    %y = kernel.gemm %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
    %b = train.read @b : tensor<16xf32>
    %g = kernel.elementwise(%y, %b) : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32> {
    ^bb0(%a: f32, %c: f32):
      %0 = kernel.add %a, %c : f32
      %1 = kernel.gelu %0 : f32
      kernel.yield %1 : f32
    }
    %z = kernel.gemm %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
    %zb = kernel.elementwise(%b, %z) : tensor<16xf32>, tensor<4x16xf32> -> tensor<4x16xf32> {
    ^bb0(%c: f32, %a: f32):
      %0 = kernel.add %c, %a : f32
      kernel.yield %0 : f32
    }
    %s1 = train.reduce_sum %g [0, 1] : tensor<4x16xf32> -> tensor<f32>
    %s2 = train.reduce_sum %zb [0, 1] : tensor<4x16xf32> -> tensor<f32>
    train.yield %s1, %s2 : tensor<f32>, tensor<f32>
  }
}

// bf16 storage: the product is not rounded before its bias add
// (train-mixed-precision), so each reader rounds the sum first: the GEMM
// adds the bias and stores round(x w + b) itself, and the rounding-only
// kernel goes. A kernel that also adds the residual keeps that add and its
// roundings.
// CHECK-LABEL: train.model @bf16
// CHECK:      %[[B:.*]] = train.read @b
// CHECK-NEXT: %[[Y:.*]] = kernel.gemm %{{.*}}, %{{.*}} bias %[[B]] {store_bf16}
// CHECK-NEXT: %[[P:.*]] = kernel.gemm %{{.*}}, %{{.*}} bias %[[B]] {store_bf16}
// CHECK-NEXT: %[[R:.*]] = kernel.elementwise(%[[P]], %{{.*}}) {store_bf16} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x16xf32> {
// CHECK-NEXT: ^bb0(%[[A:.*]]: f32, %[[C:.*]]: f32):
// CHECK-NEXT:   %[[Q:.*]] = kernel.round_bf16 %[[A]] : f32
// CHECK-NEXT:   %[[S:.*]] = kernel.add %[[C]], %[[Q]] : f32
// CHECK-NEXT:   %[[T:.*]] = kernel.round_bf16 %[[S]] : f32
// CHECK-NEXT:   kernel.yield %[[T]] : f32
// CHECK:      kernel.gemm %[[Y]], %{{.*}} :
// CHECK-NEXT: kernel.gemm %[[R]], %{{.*}} :
train.model @bf16 {
  train.state @b : tensor<16xf32> = zeros
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %w = train.input "w" : tensor<8x16xf32>
    %v = train.input "v" : tensor<16x16xf32>
    %res = train.input "res" : tensor<4x16xf32>
    %y = kernel.gemm %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
    %p = kernel.gemm %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
    %b = train.read @b : tensor<16xf32>
    %h = kernel.elementwise(%y, %b) {store_bf16} : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32> {
    ^bb0(%a: f32, %c: f32):
      %1 = kernel.add %a, %c : f32
      %2 = kernel.round_bf16 %1 : f32
      kernel.yield %2 : f32
    }
    %r = kernel.elementwise(%p, %b, %res) {store_bf16} : tensor<4x16xf32>, tensor<16xf32>, tensor<4x16xf32> -> tensor<4x16xf32> {
    ^bb0(%a: f32, %c: f32, %d: f32):
      %1 = kernel.add %a, %c : f32
      %2 = kernel.round_bf16 %1 : f32
      %3 = kernel.add %d, %2 : f32
      %4 = kernel.round_bf16 %3 : f32
      kernel.yield %4 : f32
    }
    %o1 = kernel.gemm %h, %v : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
    %o2 = kernel.gemm %r, %v : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
    %s1 = train.reduce_sum %o1 [0, 1] : tensor<4x16xf32> -> tensor<f32>
    %s2 = train.reduce_sum %o2 [0, 1] : tensor<4x16xf32> -> tensor<f32>
    train.yield %s1, %s2 : tensor<f32>, tensor<f32>
  }
}

// Left as they are: a GEMM with a reader that does not add a bias first
// (here: also read by a reduction), a bias added second (after a multiply),
// a bias stored in bf16 (the epilogue reads f32), and a product rounded
// before its bias add (folding would take that rounding point out).
// CHECK-LABEL: train.model @kept
// CHECK-NOT:  bias
// CHECK:      train.yield
train.model @kept {
  train.state @b : tensor<16xf32> = zeros
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %w = train.input "w" : tensor<8x16xf32>
    %b = train.read @b : tensor<16xf32>
    %y = kernel.gemm %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
    %g = kernel.elementwise(%y, %b) : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32> {
    ^bb0(%a: f32, %c: f32):
      %0 = kernel.add %a, %c : f32
      kernel.yield %0 : f32
    }
    %n = train.reduce_sum %y [0, 1] : tensor<4x16xf32> -> tensor<f32>
    %z = kernel.gemm %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
    %m = kernel.elementwise(%z, %b) : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32> {
    ^bb0(%a: f32, %c: f32):
      %0 = kernel.mul %a, %a : f32
      %1 = kernel.add %0, %c : f32
      kernel.yield %1 : f32
    }
    %bh = kernel.elementwise(%b) {store_bf16} : tensor<16xf32> -> tensor<16xf32> {
    ^bb0(%c: f32):
      %0 = kernel.round_bf16 %c : f32
      kernel.yield %0 : f32
    }
    %u = kernel.gemm %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
    %k = kernel.elementwise(%u, %bh) : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32> {
    ^bb0(%a: f32, %c: f32):
      %0 = kernel.add %a, %c : f32
      kernel.yield %0 : f32
    }
    %q = kernel.gemm %x, %w {store_bf16} : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
    %qb = kernel.elementwise(%q, %b) : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32> {
    ^bb0(%a: f32, %c: f32):
      %0 = kernel.round_bf16 %a : f32
      %1 = kernel.add %0, %c : f32
      kernel.yield %1 : f32
    }
    %s1 = train.reduce_sum %g [0, 1] : tensor<4x16xf32> -> tensor<f32>
    %s2 = train.reduce_sum %m [0, 1] : tensor<4x16xf32> -> tensor<f32>
    %s3 = train.reduce_sum %k [0, 1] : tensor<4x16xf32> -> tensor<f32>
    %s4 = train.reduce_sum %qb [0, 1] : tensor<4x16xf32> -> tensor<f32>
    train.yield %s1, %s2, %s3, %s4, %n : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}
