// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | stretto-kernel-emit --target=all | FileCheck %s --check-prefix=EMIT

// A rounded weight copy read only by GEMMs (one directly, one through a
// reshape) is stored in bf16; so is a rounded activation read by GEMMs, a
// fused kernel, a column sum and, through a transpose, a GEMM.
// CHECK-LABEL: train.model @m
// CHECK:      %[[WB:.*]] = kernel.elementwise(%{{.*}}) {store_bf16} : tensor<8x6xf32> -> tensor<8x6xf32>
// CHECK:      %[[XB:.*]] = kernel.elementwise(%{{.*}}) {store_bf16} : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK:      kernel.gemm %[[XB]], %[[WB]]
// A rounded value that a row kernel (a softmax) also reads keeps four bytes.
// CHECK:      %[[HB:.*]] = kernel.elementwise(%{{.*}}) : tensor<4x6xf32> -> tensor<4x6xf32>
// A value that is not a rounding point keeps four bytes, even when only a
// GEMM reads it.
// CHECK:      %[[NR:.*]] = kernel.elementwise(%{{.*}}) : tensor<4x6xf32> -> tensor<4x6xf32>
// A kernel with two results keeps four bytes.
// CHECK:      kernel.elementwise(%{{.*}}) : tensor<4x6xf32> -> tensor<4x6xf32>, tensor<4x6xf32>
// CHECK-NOT:  store_bf16
train.model @m {
  train.step {
    %w = train.input "w" : tensor<8x6xf32>
    %x = train.input "x" : tensor<4x8xf32>
    %wb = kernel.elementwise(%w) : tensor<8x6xf32> -> tensor<8x6xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %xb = kernel.elementwise(%x) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %e = kernel.exp %a : f32
      %r = kernel.round_bf16 %e : f32
      kernel.yield %r : f32
    }
    %h = kernel.gemm %xb, %wb : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
    %w3 = train.reshape %wb : tensor<8x6xf32> -> tensor<1x8x6xf32>
    %w2 = train.reshape %w3 : tensor<1x8x6xf32> -> tensor<8x6xf32>
    %h2 = kernel.gemm %xb, %w2 : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
    %hb = kernel.elementwise(%h) : tensor<4x6xf32> -> tensor<4x6xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %g = kernel.gemm %hb, %hb transpose_a : tensor<4x6xf32>, tensor<4x6xf32> -> tensor<6x6xf32>
    %sm = kernel.rows "softmax"(%hb) : tensor<4x6xf32> -> tensor<4x6xf32>
    %s = train.reduce_sum %sm [0, 1] : tensor<4x6xf32> -> tensor<f32>
    %xs = train.reduce_sum %xb [0] : tensor<4x8xf32> -> tensor<8xf32>
    %xt = train.transpose %xb [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
    %gt = kernel.gemm %xt, %xb : tensor<8x4xf32>, tensor<4x8xf32> -> tensor<8x8xf32>
    %xe = kernel.elementwise(%xb, %x) : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %m = kernel.mul %a, %b : f32
      kernel.yield %m : f32
    }
    %nr = kernel.elementwise(%h2) : tensor<4x6xf32> -> tensor<4x6xf32> {
    ^bb0(%a: f32):
      %e = kernel.exp %a : f32
      kernel.yield %e : f32
    }
    %g2 = kernel.gemm %nr, %nr transpose_a : tensor<4x6xf32>, tensor<4x6xf32> -> tensor<6x6xf32>
    %two:2 = kernel.elementwise(%h2) : tensor<4x6xf32> -> tensor<4x6xf32>, tensor<4x6xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r, %r : f32, f32
    }
    %g3 = kernel.gemm %two#0, %two#1 transpose_a : tensor<4x6xf32>, tensor<4x6xf32> -> tensor<6x6xf32>
    %s1 = train.reduce_sum %g [0, 1] : tensor<6x6xf32> -> tensor<f32>
    %s2 = train.reduce_sum %g2 [0, 1] : tensor<6x6xf32> -> tensor<f32>
    %s3 = train.reduce_sum %g3 [0, 1] : tensor<6x6xf32> -> tensor<f32>
    %t = train.add %s, %s1 : tensor<f32>, tensor<f32> -> tensor<f32>
    %t2 = train.add %t, %s2 : tensor<f32>, tensor<f32> -> tensor<f32>
    %t3 = train.add %t2, %s3 : tensor<f32>, tensor<f32> -> tensor<f32>
    train.yield %t3 : tensor<f32>
  }
}

// The CUDA C stores the bf16's bits in the target's two-byte slot; C++
// keeps a float slot holding the rounded value (the prelude's macros).
// EMIT-LABEL: //=== m_step_k0 (C++) ===
// EMIT:       #define ST_BF16_SLOT float
// EMIT:       ST_FN void m_step_k0_element(const float *__restrict__ in0, ST_BF16_SLOT *__restrict__ out0, long long i) {
// EMIT:         out0[i] = ST_STORE_BF16(v0);
// EMIT-LABEL: //=== m_step_k0 (CUDA) ===
// EMIT:       #define ST_BF16_SLOT unsigned short
// EMIT:       extern "C" __global__ void m_step_k0(const float *__restrict__ in0, ST_BF16_SLOT *__restrict__ out0) {
// EMIT-LABEL: //=== m_step_k2 (C++) ===
// EMIT:         out0[i] = v0;
// A fused kernel loads a bf16 operand through the prelude's ST_LOAD_BF16
// (KernelMath.inc's st_widen: CUDA widens the bits; C++ the float slot).
// EMIT-LABEL: //=== m_step_k4 (CUDA) ===
// EMIT:       #define ST_LOAD_BF16(x) st_widen(x)
// EMIT:       ST_FN void m_step_k4_element(const ST_BF16_SLOT *__restrict__ in0, const float *__restrict__ in1, float *__restrict__ out0, long long i) {
// EMIT-NEXT:    const float a0 = ST_LOAD_BF16(in0[i]);
// EMIT-NEXT:    const float a1 = in1[i];
