// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | stretto-kernel-emit --target=all | FileCheck %s --check-prefix=EMIT

// A layer norm whose one reader is a kernel that only rounds it, stored in
// bf16 (a GEMM reads it): the norm's kernel.rows rounds and stores its
// result itself (store_bf16) and the rounding kernel goes. A softmax, and a
// norm with a second reader, keep theirs.
// CHECK-LABEL: train.model @r
// CHECK:      %[[N:.*]] = kernel.rows "layer_norm"(%{{.*}}, %{{.*}}, %{{.*}}) {store_bf16}
// CHECK-NEXT: kernel.gemm %[[N]], %{{.*}}
// CHECK:      %[[S:.*]] = kernel.rows "softmax"(%{{.*}}) :
// CHECK-NEXT: kernel.elementwise(%[[S]]) {store_bf16}
// CHECK:      %[[T:.*]] = kernel.rows "rms_norm"(%{{.*}}, %{{.*}}) :
// CHECK-NEXT: kernel.elementwise(%[[T]]) {store_bf16}
// The folded norm's kernels: the C++ row function rounds into a float
// slot, the CUDA one stores the bf16 bits through the same macro.
// EMIT-LABEL: //=== r_step_k0 (C++) ===
// EMIT:       st_norm_row_put(xr, p0, p1, 8LL, (float)1.0000000000000001e-05, [&](long long j, float v) { yr[j] = ST_STORE_BF16(v); });
// EMIT-LABEL: //=== r_step_k0 (CUDA) ===
// EMIT:       st_norm_row16_put(xr, p0, p1, n, (float)1.0000000000000001e-05, [&](long long j, float v) { yr[j] = ST_STORE_BF16(v); });
// EMIT:       extern "C" __global__ void r_step_k0(const float *__restrict__ in0, const float *__restrict__ in1, const float *__restrict__ in2, ST_BF16_SLOT *__restrict__ out0) {
train.model @r {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %g = train.input "g" : tensor<8xf32>
    %b = train.input "b" : tensor<8xf32>
    %w = train.input "w" : tensor<8x8xf32>
    %n = kernel.rows "layer_norm"(%x, %g, %b) {eps = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %nb = kernel.elementwise(%n) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %y = kernel.gemm %nb, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
    %s = kernel.rows "softmax"(%x) : tensor<4x8xf32> -> tensor<4x8xf32>
    %sb = kernel.elementwise(%s) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %y2 = kernel.gemm %sb, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
    %t = kernel.rows "rms_norm"(%x, %g) {eps = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %tb = kernel.elementwise(%t) : tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %y3 = kernel.gemm %tb, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
    %s1 = train.reduce_sum %y [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s2 = train.reduce_sum %y2 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s3 = train.reduce_sum %y3 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s4 = train.reduce_sum %t [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %s1, %s2, %s3, %s4 : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}
