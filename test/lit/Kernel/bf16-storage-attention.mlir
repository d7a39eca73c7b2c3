// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | FileCheck %s

// The fused QKV's rounded value, read by the attention (and its gradient)
// through a reshape, the head transpose and leading-row slices (views), is
// stored in bf16; so is the output's rounded gradient that attention_grad
// reads through a transpose.
// CHECK-LABEL: train.model @attn
// CHECK:      %[[QKV:.*]] = kernel.elementwise(%{{.*}}) {store_bf16} : tensor<2x4x48xf32> -> tensor<2x4x48xf32>
// CHECK:      %[[G:.*]] = kernel.elementwise(%{{.*}}) {store_bf16} : tensor<2x4x2x8xf32> -> tensor<2x4x2x8xf32>
// A rounded value that a slice of inner rows reads (a copy, not a view)
// keeps four bytes; so does one that is not a rounding point.
// CHECK:      kernel.elementwise(%{{.*}}) : tensor<2x4x48xf32> -> tensor<2x4x48xf32>
// CHECK:      kernel.elementwise(%{{.*}}) : tensor<2x4x48xf32> -> tensor<2x4x48xf32>
// CHECK-NOT:  store_bf16
train.model @attn {
  train.step {
    %x = train.input "x" : tensor<2x4x48xf32>
    %dy = train.input "dy" : tensor<2x4x2x8xf32>
    %qkv = kernel.elementwise(%x) : tensor<2x4x48xf32> -> tensor<2x4x48xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %g = kernel.elementwise(%dy) : tensor<2x4x2x8xf32> -> tensor<2x4x2x8xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %r5 = train.reshape %qkv : tensor<2x4x48xf32> -> tensor<2x4x3x2x8xf32>
    %t = train.transpose %r5 [2, 0, 3, 1, 4] : tensor<2x4x3x2x8xf32> -> tensor<3x2x2x4x8xf32>
    %s0 = train.slice %t axis = 0 offset = 0 : tensor<3x2x2x4x8xf32> -> tensor<1x2x2x4x8xf32>
    %s1 = train.slice %t axis = 0 offset = 1 : tensor<3x2x2x4x8xf32> -> tensor<1x2x2x4x8xf32>
    %s2 = train.slice %t axis = 0 offset = 2 : tensor<3x2x2x4x8xf32> -> tensor<1x2x2x4x8xf32>
    %q = train.reshape %s0 : tensor<1x2x2x4x8xf32> -> tensor<2x2x4x8xf32>
    %k = train.reshape %s1 : tensor<1x2x2x4x8xf32> -> tensor<2x2x4x8xf32>
    %v = train.reshape %s2 : tensor<1x2x2x4x8xf32> -> tensor<2x2x4x8xf32>
    %o = train.attention %q, %k, %v causal {scale = 0.35 : f64} : tensor<2x2x4x8xf32>
    %gt = train.transpose %g [0, 2, 1, 3] : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
    %d = train.attention_grad %q, %k, %v, %gt causal {scale = 0.35 : f64} : tensor<2x2x4x8xf32> -> tensor<3x2x2x4x8xf32>
    %inner = kernel.elementwise(%x) : tensor<2x4x48xf32> -> tensor<2x4x48xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %cut = train.slice %inner axis = 2 offset = 16 : tensor<2x4x48xf32> -> tensor<2x4x16xf32>
    %plain = kernel.elementwise(%x) : tensor<2x4x48xf32> -> tensor<2x4x48xf32> {
    ^bb0(%a: f32):
      %e = kernel.exp %a : f32
      kernel.yield %e : f32
    }
    %p5 = train.reshape %plain : tensor<2x4x48xf32> -> tensor<2x4x3x2x8xf32>
    %pt = train.transpose %p5 [2, 0, 3, 1, 4] : tensor<2x4x3x2x8xf32> -> tensor<3x2x2x4x8xf32>
    %p0 = train.slice %pt axis = 0 offset = 0 : tensor<3x2x2x4x8xf32> -> tensor<1x2x2x4x8xf32>
    %pq = train.reshape %p0 : tensor<1x2x2x4x8xf32> -> tensor<2x2x4x8xf32>
    %po = train.attention %pq, %pq, %pq {scale = 0.35 : f64} : tensor<2x2x4x8xf32>
    %s = train.reduce_sum %o [0, 1, 2, 3] : tensor<2x2x4x8xf32> -> tensor<f32>
    %sd = train.reduce_sum %d [0, 1, 2, 3, 4] : tensor<3x2x2x4x8xf32> -> tensor<f32>
    %sc = train.reduce_sum %cut [0, 1, 2] : tensor<2x4x16xf32> -> tensor<f32>
    %sp = train.reduce_sum %po [0, 1, 2, 3] : tensor<2x2x4x8xf32> -> tensor<f32>
    train.yield %s, %sd, %sc, %sp : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}
