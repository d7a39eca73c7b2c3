// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | stretto-kernel-emit --target=cuda | FileCheck %s --check-prefix=EMIT

// A GEMM result that every reader rounds to bf16 before anything else
// (directly, or through a reshape) is stored in bf16: cuBLASLt writes it so.
// CHECK-LABEL: train.model @m
// CHECK:      %[[Y:.*]] = kernel.gemm %{{.*}}, %{{.*}} {store_bf16} : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
// A reader that uses the product unrounded keeps it in f32.
// CHECK:      kernel.gemm %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
// So does a reader that is not a fused kernel (a sum), and a GEMM read by
// nobody.
// CHECK:      kernel.gemm %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
// CHECK-NOT:  store_bf16
train.model @m {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %w = train.input "w" : tensor<8x6xf32>
    %b = train.input "b" : tensor<6xf32>
    %y = kernel.gemm %x, %w : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
    %yb = kernel.elementwise(%y, %b) : tensor<4x6xf32>, tensor<6xf32> -> tensor<4x6xf32> {
    ^bb0(%a: f32, %c: f32):
      %r = kernel.round_bf16 %a : f32
      %s = kernel.add %r, %c : f32
      kernel.yield %s : f32
    }
    %y3 = train.reshape %y : tensor<4x6xf32> -> tensor<2x2x6xf32>
    %ys = kernel.reduce(%y3) sum [0, 1] of [2, 2, 6] : tensor<2x2x6xf32> -> tensor<6xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      %q = kernel.mul %r, %r : f32
      kernel.yield %q : f32
    }
    %z = kernel.gemm %x, %w : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
    %zb = kernel.elementwise(%z) : tensor<4x6xf32> -> tensor<4x6xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      %s = kernel.add %r, %a : f32
      kernel.yield %s : f32
    }
    %u = kernel.gemm %x, %w : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
    %us = train.reduce_sum %u [0, 1] : tensor<4x6xf32> -> tensor<f32>
    %v = kernel.gemm %x, %w : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
    %t1 = train.reduce_sum %yb [0, 1] : tensor<4x6xf32> -> tensor<f32>
    %t2 = train.reduce_sum %zb [0, 1] : tensor<4x6xf32> -> tensor<f32>
    %t3 = train.reduce_sum %ys [0] : tensor<6xf32> -> tensor<f32>
    %t4 = train.add %t1, %t2 : tensor<f32>, tensor<f32> -> tensor<f32>
    %t5 = train.add %t4, %t3 : tensor<f32>, tensor<f32> -> tensor<f32>
    %t6 = train.add %t5, %us : tensor<f32>, tensor<f32> -> tensor<f32>
    train.yield %t6 : tensor<f32>
  }
}

// The kernels reading the bf16 product load it through ST_LOAD_BF16.
// EMIT-LABEL: //=== m_step_k0 (CUDA) ===
// EMIT:       ST_FN void m_step_k0_element(const ST_BF16_SLOT *__restrict__ in0, const float *__restrict__ in1, float *__restrict__ out0, long long i, long long o1) {
// EMIT-NEXT:    const float a0 = ST_LOAD_BF16(in0[i]);
// EMIT-LABEL: //=== m_step_k1 (CUDA) ===
// EMIT:       const ST_BF16_SLOT *__restrict__ in0
// EMIT-LABEL: //=== m_step_k2 (CUDA) ===
// EMIT:       ST_FN void m_step_k2_element(const float *__restrict__ in0, float *__restrict__ out0, long long i) {
