// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-lower-rows))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-lower-rows))' | stretto-kernel-emit --target=all | FileCheck %s --check-prefix=EMIT

// Softmax (causal or not), layer norm and RMS norm become kernel.rows with
// the same operands and eps.
// CHECK-LABEL: train.model @m
// CHECK:      %[[X:.*]] = train.input "x" : tensor<2x4x4xf32>
// CHECK:      %[[G:.*]] = train.input "g" : tensor<4xf32>
// CHECK:      %[[B:.*]] = train.input "b" : tensor<4xf32>
// CHECK-NEXT: %[[S:.*]] = kernel.rows "softmax"(%[[X]]) causal : tensor<2x4x4xf32> -> tensor<2x4x4xf32>
// CHECK-NEXT: %[[P:.*]] = kernel.rows "softmax"(%[[S]]) : tensor<2x4x4xf32> -> tensor<2x4x4xf32>
// CHECK-NEXT: %[[L:.*]] = kernel.rows "layer_norm"(%[[P]], %[[G]], %[[B]]) {eps = 1.000000e-03 : f64} : tensor<2x4x4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<2x4x4xf32>
// CHECK-NEXT: %[[R:.*]] = kernel.rows "rms_norm"(%[[L]], %[[G]]) : tensor<2x4x4xf32>, tensor<4xf32> -> tensor<2x4x4xf32>
// CHECK-NOT:  train.softmax
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4x4xf32>
    %g = train.input "g" : tensor<4xf32>
    %b = train.input "b" : tensor<4xf32>
    %s = train.softmax %x causal : tensor<2x4x4xf32>
    %p = train.softmax %s : tensor<2x4x4xf32>
    %l = train.layer_norm %p, %g, %b {eps = 1.0e-3 : f64} : tensor<2x4x4xf32>, tensor<4xf32>, tensor<4xf32>
    %r = train.rms_norm %l, %g : tensor<2x4x4xf32>, tensor<4xf32>
    %t = train.reduce_sum %r [0, 1, 2] : tensor<2x4x4xf32> -> tensor<f32>
    train.yield %t : tensor<f32>
  }
}

// The causal softmax's row function (shared by both targets) calls
// KernelMath.inc's st_softmax_row (the reference executor's own) up to the
// row's causal position; C++ runs rows under OpenMP, CUDA a thread per row.
// EMIT-LABEL: //=== m_step_k0 (C++) ===
// EMIT:       [[SIG:ST_FN void m_step_k0_row\(const float \*__restrict__ xr, float \*__restrict__ yr, long long pos\) {]]
// EMIT-NEXT:    st_softmax_row(xr, yr, 4LL, pos + 1);
// EMIT-NEXT:  }
// EMIT:       #pragma omp parallel for if (32LL >= 32768LL)
// EMIT-NEXT:    for (long long r = 0; r < 8LL; ++r)
// EMIT-NEXT:      m_step_k0_row(in0 + r * 4LL, out0 + r * 4LL, r % 4LL);
// EMIT:       //=== m_step_k0 (CUDA) ===
// EMIT:       [[SIG]]
// EMIT-NEXT:    st_softmax_row(xr, yr, 4LL, pos + 1);
// EMIT:       extern "C" __global__ void m_step_k0(const float *__restrict__ in0, float *__restrict__ out0) {
// The plain softmax: every entry of its row.
// EMIT-LABEL: //=== m_step_k1 (C++) ===
// EMIT:         st_softmax_row(xr, yr, 4LL, 4LL);
// The layer norm: eps as a literal, gamma and beta.
// EMIT-LABEL: //=== m_step_k2 (C++) ===
// EMIT:         st_norm_row(xr, p0, p1, yr, 4LL, (float)0.001);
// The RMS norm: no beta.
// EMIT-LABEL: //=== m_step_k3 (C++) ===
// EMIT:         st_norm_row(xr, p0, (const float *)0, yr, 4LL, (float)1.0000000000000001e-05);
