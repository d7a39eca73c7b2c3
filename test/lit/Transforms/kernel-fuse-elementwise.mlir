// RUN: stretto-opt %s -split-input-file --kernel-fuse-elementwise | FileCheck %s

// A chain with single-use intermediates becomes one kernel; its operands
// are the chain's inputs in order of first use, the scalar %eps broadcast
// in; non-elementwise ops (reduce_sum) stay.
// CHECK-LABEL: train.model @chain
// CHECK:       %[[X:.*]] = train.input "x"
// CHECK-NEXT:  %[[E:.*]] = train.input "eps"
// CHECK-NEXT:  %[[K:.*]] = kernel.elementwise(%[[X]], %[[E]]) : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32> {
// CHECK-NEXT:  ^bb0(%[[A:.*]]: f32, %[[B:.*]]: f32):
// CHECK-NEXT:    %[[M:.*]] = kernel.mul %[[A]], %[[A]] : f32
// CHECK-NEXT:    %[[S:.*]] = kernel.add %[[M]], %[[B]] : f32
// CHECK-NEXT:    %[[R:.*]] = kernel.rsqrt %[[S]] : f32
// CHECK-NEXT:    %[[G:.*]] = kernel.gelu %[[R]] : f32
// CHECK-NEXT:    kernel.yield %[[G]] : f32
// CHECK-NEXT:  }
// CHECK-NEXT:  train.reduce_sum %[[K]] [0, 1]
// CHECK-NOT:   kernel.elementwise
train.model @chain {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %eps = train.input "eps" : tensor<f32>
    %sq = train.mul %x, %x : tensor<4x8xf32>
    %s = train.add %sq, %eps : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    %r = train.rsqrt %s : tensor<4x8xf32>
    %g = train.gelu %r : tensor<4x8xf32>
    %l = train.reduce_sum %g [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A value used twice outside one kernel is materialised once: %e feeds two
// kernels, and %p and %q, also reduced on their own, are not fused into
// their sum. A producer of a smaller type (the [8] row) is its own kernel,
// broadcast into the [4, 8] one rather than recomputed per element.
// CHECK-LABEL: train.model @shared
// CHECK:       %[[E:.*]] = kernel.elementwise(%{{.*}}) : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK:         kernel.exp
// CHECK:       %[[ROW:.*]] = kernel.elementwise(%{{.*}}) : tensor<8xf32> -> tensor<8xf32>
// CHECK:         kernel.tanh
// CHECK:       %[[P:.*]] = kernel.elementwise(%[[E]], %[[ROW]]) : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.neg
// CHECK-NEXT:    kernel.yield
// CHECK:       %[[Q:.*]] = kernel.elementwise(%[[E]]) : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.log
// CHECK-NEXT:    kernel.yield
// CHECK:       kernel.elementwise(%[[P]], %[[Q]])
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.add
// CHECK-NOT:   train.{{(add|neg|log|exp|tanh)}}
train.model @shared {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %b = train.input "b" : tensor<8xf32>
    %e = train.exp %x : tensor<4x8xf32>
    %row = train.tanh %b : tensor<8xf32>
    %a = train.add %e, %row : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %p = train.neg %a : tensor<4x8xf32>
    %q = train.log %e : tensor<4x8xf32>
    %z = train.add %p, %q : tensor<4x8xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %sp = train.reduce_sum %p [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %sq = train.reduce_sum %q [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l, %sp, %sq : tensor<f32>, tensor<f32>, tensor<f32>
  }
}

// -----

// AdamW's update of one parameter (train-optimizer's output, abridged):
// the clipped gradient, the two moments (each also written to state) and
// the decayed, bias-corrected step through train.descend: 14 train ops
// become 3 kernels; train.write and train.read stay. The clipped gradient
// (one multiply by a scalar, read by both moments) is recomputed in both
// moments' kernels, which read the raw gradient instead.
// CHECK-LABEL: train.model @adamw
// CHECK:       train.update
// CHECK:       %[[G0:.*]] = train.accumulated_grad @w
// CHECK:       %[[M:.*]] = kernel.elementwise(%[[G0]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : tensor<2x3xf32>, tensor<f32>, tensor<f32>, tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
// CHECK-NEXT:  ^bb0(%[[A:[^:]*]]: f32, %[[CLIP:[^:]*]]: f32,
// CHECK-NEXT:    kernel.mul %[[A]], %[[CLIP]] : f32
// CHECK:       %[[V:.*]] = kernel.elementwise(%[[G0]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : tensor<2x3xf32>, tensor<f32>, tensor<f32>, tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
// CHECK-NEXT:  ^bb0(%[[A:[^:]*]]: f32, %[[CLIP:[^:]*]]: f32,
// CHECK-NEXT:    %[[G:.*]] = kernel.mul %[[A]], %[[CLIP]] : f32
// CHECK-NEXT:    kernel.mul %[[G]], %[[G]] : f32
// CHECK:       train.write %[[M]] to @w.adam_m
// CHECK-NEXT:  train.write %[[V]] to @w.adam_v
// CHECK-NEXT:  %[[NEW:.*]] = kernel.elementwise(%[[V]], %{{.*}}, %{{.*}}, %[[M]], %{{.*}}, %[[P:.*]], %{{.*}}, %{{.*}}) : tensor<2x3xf32>, tensor<f32>, tensor<f32>, tensor<2x3xf32>, tensor<f32>, tensor<2x3xf32>, tensor<f32>, tensor<f32> -> tensor<2x3xf32> {
// CHECK:         kernel.div
// CHECK-NEXT:    kernel.sqrt
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.div
// CHECK-NEXT:    kernel.div
// CHECK-NEXT:    kernel.mul
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.mul
// CHECK-NEXT:    kernel.sub
// CHECK-NEXT:    kernel.yield
// CHECK:       train.write %[[NEW]] to @w :
// CHECK-NOT:   train.{{(add|sub|mul|div|sqrt|descend)}} {{.*}}tensor<2x3xf32>
train.model @adamw {
  train.param @w : tensor<2x3xf32> = normal(1.000000e-01)
  train.state @w.adam_m : tensor<2x3xf32> = zeros {of = @w}
  train.state @w.adam_v : tensor<2x3xf32> = zeros {of = @w}
  train.step {
    %w = train.read @w : tensor<2x3xf32>
    %l = train.reduce_sum %w [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.grad %w for @w : tensor<2x3xf32>
    train.yield %l : tensor<f32>
  }
  train.update {
    %eps = train.constant dense<1.0e-8> : tensor<f32>
    %b2c = train.constant dense<0.05> : tensor<f32>
    %b2 = train.constant dense<0.95> : tensor<f32>
    %wd = train.constant dense<0.1> : tensor<f32>
    %b1 = train.constant dense<0.9> : tensor<f32>
    %b1c = train.constant dense<0.1> : tensor<f32>
    %clip = train.constant dense<1.0> : tensor<f32>
    %bc1 = train.constant dense<0.1> : tensor<f32>
    %bc2 = train.constant dense<0.05> : tensor<f32>
    %lr = train.constant dense<3.0e-3> : tensor<f32>
    %g0 = train.accumulated_grad @w : tensor<2x3xf32>
    %g = train.mul %g0, %clip : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %p = train.read @w : tensor<2x3xf32>
    %m = train.read @w.adam_m : tensor<2x3xf32>
    %v = train.read @w.adam_v : tensor<2x3xf32>
    %1 = train.mul %g, %b1c : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %2 = train.mul %m, %b1 : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %m1 = train.add %2, %1 : tensor<2x3xf32>
    %3 = train.mul %g, %g : tensor<2x3xf32>
    %4 = train.mul %3, %b2c : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %5 = train.mul %v, %b2 : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %v1 = train.add %5, %4 : tensor<2x3xf32>
    train.write %m1 to @w.adam_m : tensor<2x3xf32>
    train.write %v1 to @w.adam_v : tensor<2x3xf32>
    %6 = train.div %v1, %bc2 : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %7 = train.sqrt %6 : tensor<2x3xf32>
    %8 = train.add %7, %eps : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %9 = train.div %m1, %bc1 : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %10 = train.div %9, %8 : tensor<2x3xf32>
    %11 = train.mul %p, %wd : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %12 = train.add %10, %11 : tensor<2x3xf32>
    %new = train.descend %p, %12, %lr : tensor<2x3xf32>, tensor<f32>
    train.write %new to @w : tensor<2x3xf32>
  }
}

// -----

// Ops of different pipeline stages are not fused; the kernel keeps its
// root's stage. max-ops is tested in kernel-fuse-elementwise-max-ops.mlir.
// CHECK-LABEL: train.model @stages
// CHECK:       %[[A:.*]] = kernel.elementwise(%{{.*}}) {stage = 0 : i64} : tensor<4xf32> -> tensor<4xf32> {
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.exp
// CHECK:       %[[B:.*]] = kernel.elementwise(%[[A]]) {stage = 1 : i64} : tensor<4xf32> -> tensor<4xf32> {
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.tanh
train.model @stages {
  train.step {
    %x = train.input "x" : tensor<4xf32>
    %a = train.exp %x {stage = 0 : i64} : tensor<4xf32>
    %b = train.tanh %a {stage = 1 : i64} : tensor<4xf32>
    %l = train.reduce_sum %b [0] {stage = 1 : i64} : tensor<4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A bias add read by GELU (forward) and by GELU's derivative (backward) is
// recomputed in both kernels, which read the GEMM output %h and the row %b
// instead of a materialised %a: one pass less, no more bytes read.
// CHECK-LABEL: train.model @recompute_bias_add
// CHECK:       %[[H:.*]] = train.input "h"
// CHECK-NEXT:  %[[B:.*]] = train.input "b"
// CHECK-NEXT:  %[[G:.*]] = train.input "g"
// CHECK-NEXT:  %[[Y:.*]] = kernel.elementwise(%[[H]], %[[B]]) : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
// CHECK-NEXT:  ^bb0(%[[X0:.*]]: f32, %[[B0:.*]]: f32):
// CHECK-NEXT:    %[[A0:.*]] = kernel.add %[[X0]], %[[B0]] : f32
// CHECK-NEXT:    %[[Y0:.*]] = kernel.gelu %[[A0]] : f32
// CHECK-NEXT:    kernel.yield %[[Y0]] : f32
// CHECK:       %[[D:.*]] = kernel.elementwise(%[[H]], %[[B]], %[[G]]) : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
// CHECK-NEXT:  ^bb0(%[[X1:.*]]: f32, %[[B1:.*]]: f32, %[[G1:.*]]: f32):
// CHECK-NEXT:    %[[A1:.*]] = kernel.add %[[X1]], %[[B1]] : f32
// CHECK-NEXT:    %[[D1:.*]] = kernel.gelu_grad %[[A1]] : f32
// CHECK-NEXT:    %[[M1:.*]] = kernel.mul %[[G1]], %[[D1]] : f32
// CHECK-NEXT:    kernel.yield %[[M1]] : f32
// CHECK-NOT:   train.add
// CHECK-NOT:   kernel.elementwise
train.model @recompute_bias_add {
  train.step {
    %h = train.input "h" : tensor<4x8xf32>
    %b = train.input "b" : tensor<8xf32>
    %g = train.input "g" : tensor<4x8xf32>
    %a = train.add %h, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %y = train.gelu %a : tensor<4x8xf32>
    %sy = train.reduce_sum %y [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %d = train.gelu_grad %a : tensor<4x8xf32>
    %dx = train.mul %g, %d : tensor<4x8xf32>
    %sd = train.reduce_sum %dx [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %sy, %sd : tensor<f32>, tensor<f32>
  }
}

// -----

// Not recomputed: a sum of two full-size tensors (a consumer would read
// both), an add also read by a non-element-wise op (reduce_sum), and an
// exp (not one instruction). Each is materialised once.
// CHECK-LABEL: train.model @materialised
// CHECK:       %[[S:.*]] = kernel.elementwise(%{{.*}}, %{{.*}}) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.yield
// CHECK:       %[[R:.*]] = kernel.elementwise(%{{.*}}, %{{.*}}) : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.yield
// CHECK:       %[[E:.*]] = kernel.elementwise(%{{.*}}) : tensor<4x8xf32> -> tensor<4x8xf32> {
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.exp
// CHECK-NEXT:    kernel.yield
// CHECK:       kernel.elementwise(%[[S]], %[[R]], %[[E]])
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.tanh
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.yield
// CHECK:       kernel.elementwise(%[[S]], %[[R]], %[[E]])
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.neg
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.yield
train.model @materialised {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %y = train.input "y" : tensor<4x8xf32>
    %b = train.input "b" : tensor<8xf32>
    %s = train.add %x, %y : tensor<4x8xf32>
    %r = train.add %x, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %e = train.exp %x : tensor<4x8xf32>
    %sr = train.reduce_sum %r [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %t = train.tanh %s : tensor<4x8xf32>
    %t1 = train.add %t, %r : tensor<4x8xf32>
    %t2 = train.add %t1, %e : tensor<4x8xf32>
    %n = train.neg %s : tensor<4x8xf32>
    %n1 = train.add %n, %r : tensor<4x8xf32>
    %n2 = train.add %n1, %e : tensor<4x8xf32>
    %l1 = train.reduce_sum %t2 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l2 = train.reduce_sum %n2 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l1, %l2, %sr : tensor<f32>, tensor<f32>, tensor<f32>
  }
}

// -----

// A rounding of a [rows, d] value reshaped to [b, t, d] for its only reader,
// an add: the reshape moves above the rounding (onto its operand, a view),
// and the rounding joins the add's kernel. Not moved: a reshape of an op with
// a broadcast operand, of an op used twice, or read by a non-fusible op.
// CHECK-LABEL: train.model @hoisted
// CHECK:       %[[G:.*]] = train.input "g"
// CHECK:       %[[V:.*]] = train.reshape %[[G]] {stage = 0 : i64} : tensor<8x4xf32> -> tensor<2x4x4xf32>
// CHECK-NEXT:  %[[K:.*]] = kernel.elementwise(%[[V]], %{{.*}}) {stage = 0 : i64} : tensor<2x4x4xf32>, tensor<2x4x4xf32> -> tensor<2x4x4xf32> {
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.round_bf16
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.round_bf16
// CHECK-NEXT:    kernel.yield
// CHECK:       %[[B:.*]] = kernel.elementwise(%[[G]], %{{.*}}) : tensor<8x4xf32>, tensor<4xf32> -> tensor<8x4xf32>
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.yield
// CHECK-NEXT:  }
// CHECK-NEXT:  train.reshape %[[B]] : tensor<8x4xf32> -> tensor<2x4x4xf32>
// CHECK:       %[[T:.*]] = kernel.elementwise(%[[G]]) : tensor<8x4xf32> -> tensor<8x4xf32>
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.exp
// CHECK-NEXT:    kernel.yield
// CHECK-NEXT:  }
// CHECK-NEXT:  train.reshape %[[T]] : tensor<8x4xf32> -> tensor<2x4x4xf32>
// CHECK:       %[[N:.*]] = kernel.elementwise(%[[G]]) : tensor<8x4xf32> -> tensor<8x4xf32>
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.neg
// CHECK-NEXT:    kernel.yield
// CHECK-NEXT:  }
// CHECK-NEXT:  train.reshape %[[N]] : tensor<8x4xf32> -> tensor<2x4x4xf32>
train.model @hoisted {
  train.step {
    %g = train.input "g" : tensor<8x4xf32>
    %res = train.input "res" : tensor<2x4x4xf32>
    %bias = train.input "bias" : tensor<4xf32>
    %r = train.round_bf16 %g {stage = 0} : tensor<8x4xf32>
    %v = train.reshape %r {stage = 0} : tensor<8x4xf32> -> tensor<2x4x4xf32>
    %s = train.add %res, %v {stage = 0} : tensor<2x4x4xf32>
    %o = train.round_bf16 %s {stage = 0} : tensor<2x4x4xf32>
    %l0 = train.reduce_sum %o [0, 1, 2] : tensor<2x4x4xf32> -> tensor<f32>
    // (broadcast operand)
    %b = train.add %g, %bias : tensor<8x4xf32>, tensor<4xf32> -> tensor<8x4xf32>
    %bv = train.reshape %b : tensor<8x4xf32> -> tensor<2x4x4xf32>
    %b1 = train.tanh %bv : tensor<2x4x4xf32>
    %l1 = train.reduce_sum %b1 [0, 1, 2] : tensor<2x4x4xf32> -> tensor<f32>
    // (read twice)
    %t = train.exp %g : tensor<8x4xf32>
    %tv = train.reshape %t : tensor<8x4xf32> -> tensor<2x4x4xf32>
    %t1 = train.tanh %tv : tensor<2x4x4xf32>
    %l2 = train.reduce_sum %t [0, 1] : tensor<8x4xf32> -> tensor<f32>
    %l3 = train.reduce_sum %t1 [0, 1, 2] : tensor<2x4x4xf32> -> tensor<f32>
    // (read by a reduction)
    %n = train.neg %g : tensor<8x4xf32>
    %nv = train.reshape %n : tensor<8x4xf32> -> tensor<2x4x4xf32>
    %l4 = train.reduce_sum %nv [0, 1, 2] : tensor<2x4x4xf32> -> tensor<f32>
    train.yield %l0, %l1, %l2, %l3, %l4 : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}

// -----

// A rounding of a value that another op reads unrounded (a linear layer's
// sum that its GELU reads in f32; the backward reads the rounding) is a
// kernel of its own: its reader reads the two-byte copy, not the sum. The
// bias add is recomputed in both kernels that read it.
// CHECK-LABEL: train.model @rounded_copy
// CHECK:       %[[C:.*]] = kernel.elementwise(%{{.*}}, %{{.*}}) : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.round_bf16
// CHECK-NEXT:    kernel.yield
// CHECK:       kernel.elementwise(%{{.*}}, %{{.*}}) : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.add
// CHECK-NEXT:    kernel.gelu
// CHECK-NEXT:    kernel.round_bf16
// CHECK-NEXT:    kernel.yield
// CHECK:       kernel.elementwise(%[[C]], %{{.*}}) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    kernel.gelu_grad
// CHECK-NEXT:    kernel.mul
// CHECK-NEXT:    kernel.yield
train.model @rounded_copy {
  train.step {
    %p = train.input "p" : tensor<4x8xf32>
    %b = train.input "b" : tensor<8xf32>
    %dy = train.input "dy" : tensor<4x8xf32>
    %s = train.add %p, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %c = train.round_bf16 %s : tensor<4x8xf32>
    %g = train.gelu %s : tensor<4x8xf32>
    %y = train.round_bf16 %g : tensor<4x8xf32>
    %gg = train.gelu_grad %c : tensor<4x8xf32>
    %d = train.mul %dy, %gg : tensor<4x8xf32>
    %l0 = train.reduce_sum %y [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %l1 = train.reduce_sum %d [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l0, %l1 : tensor<f32>, tensor<f32>
  }
}
