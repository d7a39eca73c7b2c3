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

// GELU's backward: a product multiplied first thing by gelu_grad of
// another input moves into the GEMM as its `dgelu`. f32: the kernel that
// only multiplied goes; one that also adds keeps its add and reads the
// scaled product. bf16 (neither factor rounded, the product is): the GEMM
// stores the rounded product and the rounding kernel goes.
// CHECK-LABEL: train.model @dgelu
// CHECK:      %[[X:.*]] = train.input "x"
// CHECK:      %[[D:.*]] = kernel.gemm %{{.*}}, %{{.*}} transpose_b dgelu(%[[X]] : tensor<4x8xf32>) : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[E:.*]] = kernel.gemm %{{.*}}, %{{.*}} transpose_b dgelu(%[[X]] : tensor<4x8xf32>) : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[R:.*]] = kernel.elementwise(%[[E]], %{{.*}}) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[A:.*]]: f32, %[[B:.*]]: f32):
// CHECK-NEXT:   %[[S:.*]] = kernel.add %[[A]], %[[B]] : f32
// CHECK-NEXT:   kernel.yield %[[S]] : f32
// CHECK:      %[[H:.*]] = kernel.gemm %{{.*}}, %{{.*}} transpose_b dgelu(%[[X]] : tensor<4x8xf32>) {store_bf16}
// CHECK-NOT:  kernel.elementwise
// CHECK:      train.reduce_sum %[[D]]
// CHECK-NEXT: train.reduce_sum %[[R]]
// CHECK-NEXT: train.reduce_sum %[[H]]
train.model @dgelu {
  train.step {
    %dy = train.input "dy" : tensor<4x16xf32>
    %w = train.input "w" : tensor<8x16xf32>
    %x = train.input "x" : tensor<4x8xf32>
    %res = train.input "res" : tensor<4x8xf32>
    %p = kernel.gemm %dy, %w transpose_b : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
    %d = kernel.elementwise(%p, %x) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.gelu_grad %b : f32
      %1 = kernel.mul %a, %0 : f32
      kernel.yield %1 : f32
    }
    %q = kernel.gemm %dy, %w transpose_b : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
    %r = kernel.elementwise(%x, %q, %res) : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%b: f32, %a: f32, %c: f32):
      %0 = kernel.gelu_grad %b : f32
      %1 = kernel.mul %0, %a : f32
      %2 = kernel.add %1, %c : f32
      kernel.yield %2 : f32
    }
    %u = kernel.gemm %dy, %w transpose_b : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
    %h = kernel.elementwise(%u, %x) {store_bf16} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.gelu_grad %b : f32
      %1 = kernel.mul %a, %0 : f32
      %2 = kernel.round_bf16 %1 : f32
      kernel.yield %2 : f32
    }
    %s1 = train.reduce_sum %d [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s2 = train.reduce_sum %r [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s3 = train.reduce_sum %h [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %s1, %s2, %s3 : tensor<f32>, tensor<f32>, tensor<f32>
  }
}

// Left as they are: a product rounded before its scaling (that rounding
// point stays), scaled by GELU itself rather than its derivative, scaled
// by the derivative of a value of another shape (broadcast), read by a
// reduction too, and two readers scaling by different inputs.
// CHECK-LABEL: train.model @dgelu_kept
// CHECK-NOT:  dgelu
// CHECK:      train.yield
train.model @dgelu_kept {
  train.step {
    %dy = train.input "dy" : tensor<4x16xf32>
    %w = train.input "w" : tensor<8x16xf32>
    %x = train.input "x" : tensor<4x8xf32>
    %x2 = train.input "x2" : tensor<4x8xf32>
    %v = train.input "v" : tensor<8xf32>
    %p = kernel.gemm %dy, %w transpose_b {store_bf16} : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
    %d = kernel.elementwise(%p, %x) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.round_bf16 %a : f32
      %1 = kernel.gelu_grad %b : f32
      %2 = kernel.mul %0, %1 : f32
      kernel.yield %2 : f32
    }
    %q = kernel.gemm %dy, %w transpose_b : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
    %e = kernel.elementwise(%q, %x) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.gelu %b : f32
      %1 = kernel.mul %a, %0 : f32
      kernel.yield %1 : f32
    }
    %u = kernel.gemm %dy, %w transpose_b : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
    %f = kernel.elementwise(%u, %v) : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.gelu_grad %b : f32
      %1 = kernel.mul %a, %0 : f32
      kernel.yield %1 : f32
    }
    %t = kernel.gemm %dy, %w transpose_b : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
    %g = kernel.elementwise(%t, %x) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.gelu_grad %b : f32
      %1 = kernel.mul %a, %0 : f32
      kernel.yield %1 : f32
    }
    %n = train.reduce_sum %t [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %z = kernel.gemm %dy, %w transpose_b : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
    %k1 = kernel.elementwise(%z, %x) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.gelu_grad %b : f32
      %1 = kernel.mul %a, %0 : f32
      kernel.yield %1 : f32
    }
    %k2 = kernel.elementwise(%z, %x2) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.gelu_grad %b : f32
      %1 = kernel.mul %a, %0 : f32
      kernel.yield %1 : f32
    }
    %s1 = train.reduce_sum %d [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s2 = train.reduce_sum %e [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s3 = train.reduce_sum %f [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s4 = train.reduce_sum %g [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s5 = train.reduce_sum %k1 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s6 = train.reduce_sum %k2 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %s1, %s2, %s3, %s4, %s5, %s6, %n : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}

// A linear layer's weight gradient x^T dy and its bias gradient, dy summed
// over its rows (a train.reduce_sum of dy or of a reshape of it, before or
// after the GEMM): one GEMM whose result has a last row of b's column
// sums (`bias_grad`, cuBLASLt's BGRADA epilogue); the weight gradient and
// the bias gradient are views of it, the sum and its reshape go.
// CHECK-LABEL: train.model @bias_grad
// CHECK:      %[[DY:.*]] = train.input "dy"
// CHECK-NEXT: %[[XR:.*]] = train.reshape
// CHECK-NEXT: %[[DYR:.*]] = train.reshape %[[DY]]
// CHECK-NEXT: %[[P:.*]] = kernel.gemm %[[XR]], %[[DYR]] transpose_a {bias_grad} : tensor<8x8xf32>, tensor<8x16xf32> -> tensor<9x16xf32>
// CHECK-NEXT: %[[DW:.*]] = train.slice %[[P]] axis = 0 offset = 0 : tensor<9x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: %[[ROW:.*]] = train.slice %[[P]] axis = 0 offset = 8 : tensor<9x16xf32> -> tensor<1x16xf32>
// CHECK-NEXT: %[[DB:.*]] = train.reshape %[[ROW]] : tensor<1x16xf32> -> tensor<16xf32>
// CHECK-NEXT: train.grad %[[DW]] for @w
// CHECK-NEXT: train.grad %[[DB]] for @b
// CHECK:      %[[Q:.*]] = kernel.gemm %{{.*}}, %[[DY2:.*]] transpose_a {bias_grad} : tensor<8x8xf32>, tensor<8x16xf32> -> tensor<9x16xf32>
// CHECK-NOT:  train.reduce_sum %[[DY2]]
// CHECK:      train.grad %{{.*}} for @w2
// CHECK-NEXT: train.grad %{{.*}} for @b2
// A fused QKV's gradient [B, T, 3, H, D]: the GEMM reads one reshape of
// it, the sum another (the columns last in both).
// CHECK:      %[[QKV:.*]] = train.input "qkv"
// CHECK-NEXT: %[[QR:.*]] = train.reshape %[[QKV]] : tensor<2x4x3x2x2xf32> -> tensor<8x12xf32>
// CHECK-NEXT: kernel.gemm %{{.*}}, %[[QR]] transpose_a {bias_grad} : tensor<8x8xf32>, tensor<8x12xf32> -> tensor<9x12xf32>
// CHECK-NOT:  train.reduce_sum
// CHECK:      train.grad %{{.*}} for @wq
// CHECK-NEXT: train.grad %{{.*}} for @bq
train.model @bias_grad {
  train.param @w : tensor<8x16xf32> = zeros
  train.param @b : tensor<16xf32> = zeros
  train.param @w2 : tensor<8x16xf32> = zeros
  train.param @b2 : tensor<16xf32> = zeros
  train.param @wq : tensor<8x12xf32> = zeros
  train.param @bq : tensor<12xf32> = zeros
  train.step {
    %x = train.input "x" : tensor<2x4x8xf32>
    %dy = train.input "dy" : tensor<2x4x16xf32>
    %db = train.reduce_sum %dy [0, 1] : tensor<2x4x16xf32> -> tensor<16xf32>
    %x2 = train.reshape %x : tensor<2x4x8xf32> -> tensor<8x8xf32>
    %dy2 = train.reshape %dy : tensor<2x4x16xf32> -> tensor<8x16xf32>
    %dw = kernel.gemm %x2, %dy2 transpose_a : tensor<8x8xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
    train.grad %dw for @w : tensor<8x16xf32>
    train.grad %db for @b : tensor<16xf32>
    %e = train.input "e" : tensor<8x16xf32>
    %dw2 = kernel.gemm %x2, %e transpose_a : tensor<8x8xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
    %e3 = train.reshape %e : tensor<8x16xf32> -> tensor<2x4x16xf32>
    %db2 = train.reduce_sum %e3 [0, 1] : tensor<2x4x16xf32> -> tensor<16xf32>
    train.grad %dw2 for @w2 : tensor<8x16xf32>
    train.grad %db2 for @b2 : tensor<16xf32>
    %qkv = train.input "qkv" : tensor<2x4x3x2x2xf32>
    %q3 = train.reshape %qkv : tensor<2x4x3x2x2xf32> -> tensor<2x4x12xf32>
    %dbq = train.reduce_sum %q3 [0, 1] : tensor<2x4x12xf32> -> tensor<12xf32>
    %q2 = train.reshape %qkv : tensor<2x4x3x2x2xf32> -> tensor<8x12xf32>
    %dwq = kernel.gemm %x2, %q2 transpose_a : tensor<8x8xf32>, tensor<8x12xf32> -> tensor<8x12xf32>
    train.grad %dwq for @wq : tensor<8x12xf32>
    train.grad %dbq for @bq : tensor<12xf32>
    %l = train.reduce_sum %x [0, 1, 2] : tensor<2x4x8xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// Left as they are: b transposed (cuBLASLt's BGRADA needs its A not
// transposed), alpha not 1, a result stored in bf16, sums over the
// columns rather than the rows, a sum in another pipeline stage, a sum
// read before the GEMM that comes after it, and a sum of a reshape whose
// last dim is not b's columns.
// CHECK-LABEL: train.model @bias_grad_kept
// CHECK-NOT:  bias_grad
// CHECK:      train.yield
train.model @bias_grad_kept {
  train.step {
    %x = train.input "x" : tensor<8x8xf32>
    %dy = train.input "dy" : tensor<8x16xf32>
    %dyt = train.input "dyt" : tensor<16x8xf32>
    %s1 = train.reduce_sum %dyt [0] : tensor<16x8xf32> -> tensor<8xf32>
    %g1 = kernel.gemm %x, %dyt transpose_a transpose_b : tensor<8x8xf32>, tensor<16x8xf32> -> tensor<8x16xf32>
    %g2 = kernel.gemm %x, %dy transpose_a {alpha = 5.000000e-01 : f64} : tensor<8x8xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
    %s2 = train.reduce_sum %dy [0] : tensor<8x16xf32> -> tensor<16xf32>
    %e = train.input "e" : tensor<8x16xf32>
    %g3 = kernel.gemm %x, %e transpose_a {store_bf16} : tensor<8x8xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
    %s3 = train.reduce_sum %e [0] : tensor<8x16xf32> -> tensor<16xf32>
    %f = train.input "f" : tensor<8x16xf32>
    %g4 = kernel.gemm %x, %f transpose_a : tensor<8x8xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
    %s4 = train.reduce_sum %f [1] : tensor<8x16xf32> -> tensor<8xf32>
    %h = train.input "h" : tensor<8x16xf32>
    %g5 = kernel.gemm %x, %h transpose_a {stage = 0 : i64} : tensor<8x8xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
    %s5 = train.reduce_sum %h [0] {stage = 1 : i64} : tensor<8x16xf32> -> tensor<16xf32>
    %m = train.input "m" : tensor<8x16xf32>
    %g7 = kernel.gemm %x, %m transpose_a : tensor<8x8xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
    %m3 = train.reshape %m : tensor<8x16xf32> -> tensor<8x4x4xf32>
    %s7 = train.reduce_sum %m3 [0, 1] : tensor<8x4x4xf32> -> tensor<4xf32>
    %a7 = train.reduce_sum %g7 [0, 1] : tensor<8x16xf32> -> tensor<f32>
    %b7 = train.reduce_sum %s7 [0] : tensor<4xf32> -> tensor<f32>
    %k = train.input "k" : tensor<8x16xf32>
    %s6 = train.reduce_sum %k [0] : tensor<8x16xf32> -> tensor<16xf32>
    %t6 = train.reduce_sum %s6 [0] : tensor<16xf32> -> tensor<f32>
    %g6 = kernel.gemm %x, %k transpose_a : tensor<8x8xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
    %u6 = train.reduce_sum %g6 [0, 1] : tensor<8x16xf32> -> tensor<f32>
    %v6 = train.add %t6, %u6 : tensor<f32>, tensor<f32> -> tensor<f32>
    %a1 = train.reduce_sum %g1 [0, 1] : tensor<8x16xf32> -> tensor<f32>
    %a2 = train.reduce_sum %g2 [0, 1] : tensor<8x16xf32> -> tensor<f32>
    %a3 = train.reduce_sum %g3 [0, 1] : tensor<8x16xf32> -> tensor<f32>
    %a4 = train.reduce_sum %g4 [0, 1] : tensor<8x16xf32> -> tensor<f32>
    %a5 = train.reduce_sum %g5 [0, 1] : tensor<8x16xf32> -> tensor<f32>
    %b1 = train.reduce_sum %s1 [0] : tensor<8xf32> -> tensor<f32>
    %b2 = train.reduce_sum %s2 [0] : tensor<16xf32> -> tensor<f32>
    %b3 = train.reduce_sum %s3 [0] : tensor<16xf32> -> tensor<f32>
    %b4 = train.reduce_sum %s4 [0] : tensor<8xf32> -> tensor<f32>
    %b5 = train.reduce_sum %s5 [0] : tensor<16xf32> -> tensor<f32>
    train.yield %a1, %a2, %a3, %a4, %a5, %b1, %b2, %b3, %b4, %b5, %v6, %a7, %b7 : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}


// GELU with its auxiliary output. bf16: the sum (bias added in the GEMM)
// read by one kernel that applies GELU and rounds, and by one that only
// rounds it (the backward's copy): one GEMM makes both, [2, 4, 8], stored
// rounded; the GELU's result and the sum are its halves (views), and both
// kernels go. f32: the GELU kernel and a reader of the sum itself (a
// DGELU GEMM, the GELU's backward): the reader reads the second half.
// CHECK-LABEL: train.model @gelu_aux
// CHECK:      %[[P:.*]] = kernel.gemm %{{.*}}, %{{.*}} bias %{{.*}} {gelu_aux, stage = 0 : i64, store_bf16} : tensor<4x16xf32>, tensor<16x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[Y0:.*]] = train.slice %[[P]] axis = 0 offset = 0 {stage = 0 : i64} : tensor<2x4x8xf32> -> tensor<1x4x8xf32>
// CHECK-NEXT: %[[Y:.*]] = train.reshape %[[Y0]] {stage = 0 : i64} : tensor<1x4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[S0:.*]] = train.slice %[[P]] axis = 0 offset = 1 {stage = 0 : i64} : tensor<2x4x8xf32> -> tensor<1x4x8xf32>
// CHECK-NEXT: %[[S:.*]] = train.reshape %[[S0]] {stage = 0 : i64} : tensor<1x4x8xf32> -> tensor<4x8xf32>
// CHECK-NOT:  kernel.elementwise
// CHECK:      %[[Q:.*]] = kernel.gemm %{{.*}}, %{{.*}} {gelu_aux} : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[G0:.*]] = train.slice %[[Q]] axis = 0 offset = 0
// CHECK-NEXT: %[[G:.*]] = train.reshape %[[G0]]
// CHECK-NEXT: %[[T0:.*]] = train.slice %[[Q]] axis = 0 offset = 1
// CHECK-NEXT: %[[T:.*]] = train.reshape %[[T0]]
// CHECK-NEXT: kernel.gemm %{{.*}}, %{{.*}} transpose_b dgelu(%[[T]] : tensor<4x8xf32>)
// CHECK:      train.reduce_sum %[[Y]]
// CHECK-NEXT: train.reduce_sum %[[S]]
// CHECK-NEXT: train.reduce_sum %[[G]]
train.model @gelu_aux {
  train.step {
    %x = train.input "x" : tensor<4x16xf32>
    %w = train.input "w" : tensor<16x8xf32>
    %b = train.input "b" : tensor<8xf32>
    %dy = train.input "dy" : tensor<4x16xf32>
    %w2 = train.input "w2" : tensor<8x16xf32>
    %p = kernel.gemm %x, %w bias %b {stage = 0} : tensor<4x16xf32>, tensor<16x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %y = kernel.elementwise(%p) {stage = 0, store_bf16} : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %0 = kernel.gelu %a : f32
      %1 = kernel.round_bf16 %0 : f32
      kernel.yield %1 : f32
    }
    %s = kernel.elementwise(%p) {stage = 0, store_bf16} : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %0 = kernel.round_bf16 %a : f32
      kernel.yield %0 : f32
    }
    %q = kernel.gemm %x, %w : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
    %g = kernel.elementwise(%q) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %0 = kernel.gelu %a : f32
      kernel.yield %0 : f32
    }
    %d = kernel.gemm %dy, %w2 transpose_b dgelu(%q : tensor<4x8xf32>) : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
    %l0 = train.reduce_sum %y [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l1 = train.reduce_sum %s [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l2 = train.reduce_sum %g [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l3 = train.reduce_sum %d [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l0, %l1, %l2, %l3 : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}


// Left as they are: the GELU kernel alone (nothing reads the sum), a sum
// stored rounded already (its GELU would read it rounded), a rounded GELU
// whose other reader reads the sum unrounded, a GELU kernel doing more
// than GELU, and two GELU kernels of one sum.
// CHECK-LABEL: train.model @gelu_aux_kept
// CHECK-NOT:  gelu_aux
// CHECK:      train.yield
train.model @gelu_aux_kept {
  train.step {
    %x = train.input "x" : tensor<4x16xf32>
    %w = train.input "w" : tensor<16x8xf32>
    %r = train.input "r" : tensor<4x8xf32>
    %p = kernel.gemm %x, %w : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
    %y = kernel.elementwise(%p) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %0 = kernel.gelu %a : f32
      kernel.yield %0 : f32
    }
    %q = kernel.gemm %x, %w {store_bf16} : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
    %qy = kernel.elementwise(%q) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %0 = kernel.gelu %a : f32
      kernel.yield %0 : f32
    }
    %qs = train.reduce_sum %q [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %u = kernel.gemm %x, %w : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
    %uy = kernel.elementwise(%u) {store_bf16} : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %0 = kernel.gelu %a : f32
      %1 = kernel.round_bf16 %0 : f32
      kernel.yield %1 : f32
    }
    %us = train.reduce_sum %u [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %v = kernel.gemm %x, %w : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
    %vy = kernel.elementwise(%v, %r) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %c: f32):
      %0 = kernel.gelu %a : f32
      %1 = kernel.add %0, %c : f32
      kernel.yield %1 : f32
    }
    %vs = train.reduce_sum %v [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %t = kernel.gemm %x, %w : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
    %t1 = kernel.elementwise(%t) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %0 = kernel.gelu %a : f32
      kernel.yield %0 : f32
    }
    %t2 = kernel.elementwise(%t) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %0 = kernel.gelu %a : f32
      kernel.yield %0 : f32
    }
    %l0 = train.reduce_sum %y [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l1 = train.reduce_sum %qy [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l2 = train.reduce_sum %uy [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l3 = train.reduce_sum %vy [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l4 = train.reduce_sum %t1 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l5 = train.reduce_sum %t2 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l0, %l1, %l2, %l3, %l4, %l5, %qs, %us, %vs : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}
