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
// become 4 kernels; train.write and train.read stay.
// CHECK-LABEL: train.model @adamw
// CHECK:       train.update
// CHECK:       %[[G:.*]] = kernel.elementwise(%{{.*}}, %{{.*}}) : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
// CHECK:       %[[M:.*]] = kernel.elementwise(%[[G]], %{{.*}}, %{{.*}}, %{{.*}}) : tensor<2x3xf32>, tensor<f32>, tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
// CHECK:       %[[V:.*]] = kernel.elementwise(%[[G]], %{{.*}}, %{{.*}}, %{{.*}}) : tensor<2x3xf32>, tensor<f32>, tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
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
