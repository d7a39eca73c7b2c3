// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-bf16-storage))' | stretto-kernel-emit --target=cuda | FileCheck %s --check-prefix=EMIT

// A fused kernel reading a leading-row slice (a view) of a value stored in
// bf16 loads two bytes an element: the emitter follows the slice to the
// store_bf16 kernel behind it.
// CHECK:      kernel.elementwise(%{{.*}}) {store_bf16} : tensor<3x4x8xf32> -> tensor<3x4x8xf32>
// CHECK:      train.slice
// EMIT-LABEL: //=== s_step_k1 (CUDA) ===
// EMIT:       ST_FN void s_step_k1_element(const ST_BF16_SLOT *__restrict__ in0, float *__restrict__ out0, long long i) {
// EMIT-NEXT:    const float a0 = ST_LOAD_BF16(in0[i]);
// EMIT:       extern "C" __global__ void s_step_k1(const ST_BF16_SLOT *__restrict__ in0, float *__restrict__ out0) {
train.model @s {
  train.step {
    %x = train.input "x" : tensor<3x4x8xf32>
    %xb = kernel.elementwise(%x) : tensor<3x4x8xf32> -> tensor<3x4x8xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %s = train.slice %xb axis = 0 offset = 1 : tensor<3x4x8xf32> -> tensor<1x4x8xf32>
    %e = kernel.elementwise(%s) : tensor<1x4x8xf32> -> tensor<1x4x8xf32> {
    ^bb0(%a: f32):
      %x2 = kernel.exp %a : f32
      kernel.yield %x2 : f32
    }
    %sum = train.reduce_sum %e [0, 1, 2] : tensor<1x4x8xf32> -> tensor<f32>
    train.yield %sum : tensor<f32>
  }
}
