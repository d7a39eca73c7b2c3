// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | FileCheck %s --check-prefix=FOLD

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
// CHECK-LABEL: train.model @fold
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

// An attention (and its gradient) whose one reader is a kernel that only
// rounds it, stored in bf16: the rounding moves into the attention
// (kernel.store_bf16) and the kernel goes; the readers read the attention.
// One with another reader, or whose kernel does more than round, keeps it.
// FOLD-LABEL: train.model @fold
// FOLD:       %[[O:.*]] = train.attention %{{.*}}, %{{.*}}, %{{.*}} causal {kernel.store_bf16, scale = 3.500000e-01 : f64}
// FOLD:       %[[D:.*]] = train.attention_grad %{{.*}} causal {kernel.store_bf16, scale = 3.500000e-01 : f64}
// FOLD-NOT:   kernel.round_bf16 %
// FOLD:       %[[R:.*]] = train.reshape %[[O]]
// FOLD:       kernel.gemm %[[R]], %{{.*}}
// FOLD:       %[[KEEP:.*]] = train.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 3.500000e-01 : f64}
// FOLD-NEXT:  kernel.elementwise(%[[KEEP]]) {store_bf16}
// FOLD:       %[[MORE:.*]] = train.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 3.500000e-01 : f64}
// FOLD-NEXT:  kernel.elementwise(%[[MORE]]) {store_bf16}
train.model @fold {
  train.step {
    %q = train.input "q" : tensor<2x2x4x8xf32>
    %w = train.input "w" : tensor<8x8xf32>
    %o = train.attention %q, %q, %q causal {scale = 0.35 : f64} : tensor<2x2x4x8xf32>
    %ob = kernel.elementwise(%o) : tensor<2x2x4x8xf32> -> tensor<2x2x4x8xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %d = train.attention_grad %q, %q, %q, %q causal {scale = 0.35 : f64} : tensor<2x2x4x8xf32> -> tensor<3x2x2x4x8xf32>
    %db = kernel.elementwise(%d) : tensor<3x2x2x4x8xf32> -> tensor<3x2x2x4x8xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %o2 = train.reshape %ob : tensor<2x2x4x8xf32> -> tensor<16x8xf32>
    %y = kernel.gemm %o2, %w : tensor<16x8xf32>, tensor<8x8xf32> -> tensor<16x8xf32>
    %keep = train.attention %q, %q, %q {scale = 0.35 : f64} : tensor<2x2x4x8xf32>
    %kb = kernel.elementwise(%keep) : tensor<2x2x4x8xf32> -> tensor<2x2x4x8xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %more = train.attention %q, %q, %q {scale = 0.35 : f64} : tensor<2x2x4x8xf32>
    %mb = kernel.elementwise(%more) : tensor<2x2x4x8xf32> -> tensor<2x2x4x8xf32> {
    ^bb0(%a: f32):
      %e = kernel.exp %a : f32
      %r = kernel.round_bf16 %e : f32
      kernel.yield %r : f32
    }
    %s1 = train.reduce_sum %y [0, 1] : tensor<16x8xf32> -> tensor<f32>
    %s2 = train.reduce_sum %db [0, 1, 2, 3, 4] : tensor<3x2x2x4x8xf32> -> tensor<f32>
    %s3 = train.reduce_sum %kb [0, 1, 2, 3] : tensor<2x2x4x8xf32> -> tensor<f32>
    %s4 = train.reduce_sum %keep [0, 1, 2, 3] : tensor<2x2x4x8xf32> -> tensor<f32>
    %s5 = train.reduce_sum %mb [0, 1, 2, 3] : tensor<2x2x4x8xf32> -> tensor<f32>
    train.yield %s1, %s2, %s3, %s4, %s5 : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}
