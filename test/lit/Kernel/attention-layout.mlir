// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-attention-layout))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-attention-layout))' | stretto-opt | FileCheck %s

// A fused QKV split into heads, its attention transposed back, and the
// backward's transposes of the output's gradient and of dq, dk, dv: both
// attentions read the packed [B, T, 3, H, D] in place; every head
// transpose, slice and reshape goes; store_bf16, bf16 (P and dS rounded)
// and the stage carry over.
// CHECK-LABEL: train.model @packed
// CHECK:      %[[X:.*]] = train.reshape %{{.*}} {stage = 0 : i64} : tensor<2x8x48xf32> -> tensor<2x8x3x2x8xf32>
// CHECK-NEXT: %[[O:.*]] = kernel.attention %[[X]] causal {bf16, scale = 3.500000e-01 : f64, stage = 0 : i64, store_bf16} : tensor<2x8x3x2x8xf32> -> tensor<2x8x2x8xf32>
// CHECK-NEXT: %[[Y:.*]] = train.reshape %[[O]] {stage = 0 : i64} : tensor<2x8x2x8xf32> -> tensor<2x8x16xf32>
// CHECK:      %[[G:.*]] = train.reshape %{{.*}} {stage = 0 : i64} : tensor<2x8x16xf32> -> tensor<2x8x2x8xf32>
// CHECK-NEXT: %[[D:.*]] = kernel.attention_grad %[[X]], %[[G]] causal {bf16, scale = 3.500000e-01 : f64, stage = 0 : i64} : tensor<2x8x3x2x8xf32>, tensor<2x8x2x8xf32> -> tensor<2x8x3x2x8xf32>
// CHECK-NEXT: train.reshape %[[D]] {stage = 0 : i64} : tensor<2x8x3x2x8xf32> -> tensor<2x8x48xf32>
// CHECK-NOT:  train.transpose
// CHECK-NOT:  train.slice
// CHECK-NOT:  train.attention
train.model @packed {
  train.step {
    %y = train.input "y" : tensor<2x8x48xf32>
    %dy = train.input "dy" : tensor<2x8x16xf32>
    %x = train.reshape %y {stage = 0} : tensor<2x8x48xf32> -> tensor<2x8x3x2x8xf32>
    %t = train.transpose %x [2, 0, 3, 1, 4] {stage = 0} : tensor<2x8x3x2x8xf32> -> tensor<3x2x2x8x8xf32>
    %s0 = train.slice %t axis = 0 offset = 0 {stage = 0} : tensor<3x2x2x8x8xf32> -> tensor<1x2x2x8x8xf32>
    %q = train.reshape %s0 {stage = 0} : tensor<1x2x2x8x8xf32> -> tensor<2x2x8x8xf32>
    %s1 = train.slice %t axis = 0 offset = 1 {stage = 0} : tensor<3x2x2x8x8xf32> -> tensor<1x2x2x8x8xf32>
    %k = train.reshape %s1 {stage = 0} : tensor<1x2x2x8x8xf32> -> tensor<2x2x8x8xf32>
    %s2 = train.slice %t axis = 0 offset = 2 {stage = 0} : tensor<3x2x2x8x8xf32> -> tensor<1x2x2x8x8xf32>
    %v = train.reshape %s2 {stage = 0} : tensor<1x2x2x8x8xf32> -> tensor<2x2x8x8xf32>
    %a = train.attention %q, %k, %v causal {bf16, scale = 0.35 : f64, stage = 0, kernel.store_bf16} : tensor<2x2x8x8xf32>
    %o = train.transpose %a [0, 2, 1, 3] {stage = 0} : tensor<2x2x8x8xf32> -> tensor<2x8x2x8xf32>
    %or = train.reshape %o {stage = 0} : tensor<2x8x2x8xf32> -> tensor<2x8x16xf32>
    %g4 = train.reshape %dy {stage = 0} : tensor<2x8x16xf32> -> tensor<2x8x2x8xf32>
    %g = train.transpose %g4 [0, 2, 1, 3] {stage = 0} : tensor<2x8x2x8xf32> -> tensor<2x2x8x8xf32>
    %d = train.attention_grad %q, %k, %v, %g causal {bf16, scale = 0.35 : f64, stage = 0} : tensor<2x2x8x8xf32> -> tensor<3x2x2x8x8xf32>
    %dt = train.transpose %d [1, 3, 0, 2, 4] {stage = 0} : tensor<3x2x2x8x8xf32> -> tensor<2x8x3x2x8xf32>
    %dr = train.reshape %dt {stage = 0} : tensor<2x8x3x2x8xf32> -> tensor<2x8x48xf32>
    %s3 = train.reduce_sum %or [0, 1, 2] : tensor<2x8x16xf32> -> tensor<f32>
    %s4 = train.reduce_sum %dr [0, 1, 2] : tensor<2x8x48xf32> -> tensor<f32>
    train.yield %s3, %s4 : tensor<f32>, tensor<f32>
  }
}

// Left as they are: an attention whose result is also read untransposed
// (its heads transpose stays for the backward, which still matches), one
// whose k is not part 1 of the split (the parts swapped), and one whose
// pieces lie on another pipeline stage.
// CHECK-LABEL: train.model @kept
// CHECK:      train.transpose %{{.*}} [2, 0, 3, 1, 4]
// CHECK:      %[[A:.*]] = train.attention %{{.*}}, %{{.*}}, %{{.*}} causal
// CHECK:      train.transpose %[[A]] [0, 2, 1, 3]
// CHECK:      train.reduce_sum %[[A]]
// CHECK:      kernel.attention_grad
// CHECK:      train.attention %[[K:.*]], %[[Q:.*]], %{{.*}} {scale
// CHECK:      train.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f64, stage = 1
// CHECK-NOT:  kernel.attention
train.model @kept {
  train.step {
    %y = train.input "y" : tensor<2x8x48xf32>
    %dy = train.input "dy" : tensor<2x8x16xf32>
    %x = train.reshape %y : tensor<2x8x48xf32> -> tensor<2x8x3x2x8xf32>
    %t = train.transpose %x [2, 0, 3, 1, 4] : tensor<2x8x3x2x8xf32> -> tensor<3x2x2x8x8xf32>
    %s0 = train.slice %t axis = 0 offset = 0 : tensor<3x2x2x8x8xf32> -> tensor<1x2x2x8x8xf32>
    %q = train.reshape %s0 : tensor<1x2x2x8x8xf32> -> tensor<2x2x8x8xf32>
    %s1 = train.slice %t axis = 0 offset = 1 : tensor<3x2x2x8x8xf32> -> tensor<1x2x2x8x8xf32>
    %k = train.reshape %s1 : tensor<1x2x2x8x8xf32> -> tensor<2x2x8x8xf32>
    %s2 = train.slice %t axis = 0 offset = 2 : tensor<3x2x2x8x8xf32> -> tensor<1x2x2x8x8xf32>
    %v = train.reshape %s2 : tensor<1x2x2x8x8xf32> -> tensor<2x2x8x8xf32>
    %a = train.attention %q, %k, %v causal {scale = 0.35 : f64} : tensor<2x2x8x8xf32>
    %o = train.transpose %a [0, 2, 1, 3] : tensor<2x2x8x8xf32> -> tensor<2x8x2x8xf32>
    %r0 = train.reduce_sum %a [0, 1, 2, 3] : tensor<2x2x8x8xf32> -> tensor<f32>
    %g4 = train.reshape %dy : tensor<2x8x16xf32> -> tensor<2x8x2x8xf32>
    %g = train.transpose %g4 [0, 2, 1, 3] : tensor<2x8x2x8xf32> -> tensor<2x2x8x8xf32>
    %d = train.attention_grad %q, %k, %v, %g causal {scale = 0.35 : f64} : tensor<2x2x8x8xf32> -> tensor<3x2x2x8x8xf32>
    %dt = train.transpose %d [1, 3, 0, 2, 4] : tensor<3x2x2x8x8xf32> -> tensor<2x8x3x2x8xf32>
    %b = train.attention %k, %q, %v {scale = 0.3 : f64} : tensor<2x2x8x8xf32>
    %bo = train.transpose %b [0, 2, 1, 3] : tensor<2x2x8x8xf32> -> tensor<2x8x2x8xf32>
    %c = train.attention %q, %k, %v {scale = 0.25 : f64, stage = 1} : tensor<2x2x8x8xf32>
    %co = train.transpose %c [0, 2, 1, 3] {stage = 1} : tensor<2x2x8x8xf32> -> tensor<2x8x2x8xf32>
    %r1 = train.reduce_sum %o [0, 1, 2, 3] : tensor<2x8x2x8xf32> -> tensor<f32>
    %r2 = train.reduce_sum %dt [0, 1, 2, 3, 4] : tensor<2x8x3x2x8xf32> -> tensor<f32>
    %r3 = train.reduce_sum %bo [0, 1, 2, 3] : tensor<2x8x2x8xf32> -> tensor<f32>
    %r4 = train.reduce_sum %co [0, 1, 2, 3] : tensor<2x8x2x8xf32> -> tensor<f32>
    train.yield %r0, %r1, %r2, %r3, %r4 : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}
