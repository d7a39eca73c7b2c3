// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | stretto-kernel-emit --target=all | FileCheck %s --check-prefix=EMIT

// A rounded value (the residual stream) that a norm reads as its input x
// (the forward kernel.rows and the backward train.norm_grad) and a fused
// kernel reads is stored in bf16, and so is one that norm_grad reads as its
// output gradient dy; norm_grad's gain is read in four bytes.
// CHECK-LABEL: train.model @m
// CHECK:      %[[H:.*]] = kernel.elementwise(%{{.*}}) {store_bf16} : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK:      %[[D:.*]] = kernel.elementwise(%{{.*}}) {store_bf16} : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK:      %[[G:.*]] = kernel.elementwise(%{{.*}}) : tensor<8xf32> -> tensor<8xf32>
// CHECK:      train.norm_grad %[[H]], %[[G]], %[[D]]
train.model @m {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %g = train.input "g" : tensor<8xf32>
    %b = train.input "b" : tensor<8xf32>
    %h = kernel.elementwise(%x) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %dy = kernel.elementwise(%x) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %e = kernel.exp %a : f32
      %r = kernel.round_bf16 %e : f32
      kernel.yield %r : f32
    }
    %gr = kernel.elementwise(%g) : tensor<8xf32> -> tensor<8xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %y = kernel.rows "layer_norm"(%h, %g, %b) : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %all = train.norm_grad %h, %gr, %dy centered {eps = 1.000000e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %z = kernel.elementwise(%h, %y) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %c: f32):
      %s = kernel.add %a, %c : f32
      kernel.yield %s : f32
    }
    %s1 = train.reduce_sum %z [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s2 = train.reduce_sum %all [0, 1] : tensor<6x8xf32> -> tensor<f32>
    %t = train.add %s1, %s2 : tensor<f32>, tensor<f32> -> tensor<f32>
    train.yield %t : tensor<f32>
  }
}

// The layer norm's row function takes x in the target's bf16 slot (C++:
// floats holding the rounded values; CUDA: two bytes) and widens it.
// EMIT-LABEL: //=== m_step_k3 (C++) ===
// EMIT:       ST_FN void m_step_k3_row(const ST_BF16_SLOT *__restrict__ xr, const float *__restrict__ p0, const float *__restrict__ p1, float *__restrict__ yr, long long pos) {
// EMIT-LABEL: //=== m_step_k3 (CUDA) ===
// EMIT:       extern "C" __global__ void m_step_k3(const ST_BF16_SLOT *__restrict__ in0, const float *__restrict__ in1, const float *__restrict__ in2, float *__restrict__ out0) {

// A GEMM whose one reader rounds its product (the rounding point after the
// matmul) before norm_grad reads it as dy: the GEMM stores the rounded
// product in bf16, the kernel that only rounds it would copy it, so it goes
// and norm_grad reads the GEMM's two bytes. A round-only kernel whose input
// is not stored in bf16 stays.
// CHECK-LABEL: train.model @copy
// CHECK:      %[[P:.*]] = kernel.gemm %{{.*}}, %{{.*}} {store_bf16}
// CHECK-NEXT: %[[Q:.*]] = kernel.elementwise(%{{.*}}) {store_bf16}
// CHECK:      train.norm_grad %{{.*}}, %{{.*}}, %[[P]]
// CHECK-NEXT: train.norm_grad %{{.*}}, %{{.*}}, %[[Q]]
train.model @copy {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %g = train.input "g" : tensor<8xf32>
    %w = train.input "w" : tensor<8x8xf32>
    %p = kernel.gemm %x, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
    %q = kernel.elementwise(%x) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %pr = kernel.elementwise(%p) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %n1 = train.norm_grad %x, %g, %pr centered {eps = 1.000000e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %n2 = train.norm_grad %x, %g, %q centered {eps = 1.000000e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %s1 = train.reduce_sum %n1 [0, 1] : tensor<6x8xf32> -> tensor<f32>
    %s2 = train.reduce_sum %n2 [0, 1] : tensor<6x8xf32> -> tensor<f32>
    train.yield %s1, %s2 : tensor<f32>, tensor<f32>
  }
}
