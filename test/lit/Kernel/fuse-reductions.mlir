// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-fuse-elementwise,kernel-fuse-reductions))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(kernel-fuse-elementwise,kernel-fuse-reductions))' | stretto-kernel-emit --target=all | FileCheck %s --check-prefix=EMIT

// Row sums (trailing run), column sums (leading run) and a full sum each
// take their elementwise producer into one kernel.reduce; the broadcast
// operands ([8] row, [4, 1] column) are contiguous or constant along the
// inner loop.
// CHECK-LABEL: train.model @m
// CHECK:      %[[X:.*]] = train.input "x" : tensor<4x8xf32>
// CHECK:      kernel.reduce(%[[X]], %{{.*}}, %{{.*}}) sum [1] of [4, 8] : tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32> -> tensor<4xf32> {
// CHECK-NEXT: ^bb0(%[[A:.*]]: f32, %[[B:.*]]: f32, %[[C:.*]]: f32):
// CHECK-NEXT:   %[[M:.*]] = kernel.mul %[[A]], %[[B]] : f32
// CHECK-NEXT:   %[[N:.*]] = kernel.mul %[[M]], %[[C]] : f32
// CHECK-NEXT:   kernel.yield %[[N]] : f32
// CHECK:      kernel.reduce(%[[X]]) sum [0] of [4, 8] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK:      kernel.reduce(%[[X]]) sum [0, 1] of [4, 8] : tensor<4x8xf32> -> tensor<f32>
// A sum of a kernel.reduce's result has no elementwise producer: it stays.
// CHECK:      train.reduce_sum %{{.*}} [0] : tensor<4xf32> -> tensor<f32>
// CHECK-NEXT: train.reduce_sum %{{.*}} [0] : tensor<8xf32> -> tensor<f32>
train.model @m {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %row = train.input "row" : tensor<8xf32>
    %c = train.input "c" : tensor<4x1xf32>
    %0 = train.mul %x, %row : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %1 = train.mul %0, %c : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
    %r = train.reduce_sum %1 [1] : tensor<4x8xf32> -> tensor<4xf32>
    %2 = train.mul %x, %x : tensor<4x8xf32>
    %col = train.reduce_sum %2 [0] : tensor<4x8xf32> -> tensor<8xf32>
    %3 = train.exp %x : tensor<4x8xf32>
    %all = train.reduce_sum %3 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s = train.reduce_sum %r [0] : tensor<4xf32> -> tensor<f32>
    %t = train.reduce_sum %col [0] : tensor<8xf32> -> tensor<f32>
    %u = train.add %s, %t : tensor<f32>
    %v = train.add %u, %all : tensor<f32>
    train.yield %v : tensor<f32>
  }
}

// Left alone: a kernel whose values are also used elsewhere, a middle run
// of dims, an operand that is contiguous in one reduced dim and broadcast
// in the other ([4, 1] in [2, 4, 8] summed over [1, 2]), and a sum of a
// value no kernel produced.
// CHECK-LABEL: train.model @kept
// CHECK:      %[[E:.*]] = kernel.elementwise
// CHECK:      train.reduce_sum %[[E]] [1]
// CHECK:      %[[F:.*]] = kernel.elementwise
// CHECK:      train.reduce_sum %[[F]] [1] : tensor<2x4x8xf32> -> tensor<2x8xf32>
// CHECK:      %[[G:.*]] = kernel.elementwise
// CHECK:      train.reduce_sum %[[G]] [1, 2] : tensor<2x4x8xf32> -> tensor<2xf32>
// CHECK:      train.reduce_sum %{{.*}} [0] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NOT:  kernel.reduce
train.model @kept {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %y = train.input "y" : tensor<2x4x8xf32>
    %w = train.input "w" : tensor<4x1xf32>
    %0 = train.exp %x : tensor<4x8xf32>
    %1 = train.reduce_sum %0 [1] : tensor<4x8xf32> -> tensor<4xf32>
    %2 = train.exp %y : tensor<2x4x8xf32>
    %3 = train.reduce_sum %2 [1] : tensor<2x4x8xf32> -> tensor<2x8xf32>
    %4 = train.mul %y, %w : tensor<2x4x8xf32>, tensor<4x1xf32> -> tensor<2x4x8xf32>
    %5 = train.reduce_sum %4 [1, 2] : tensor<2x4x8xf32> -> tensor<2xf32>
    %6 = train.reduce_sum %x [0] : tensor<4x8xf32> -> tensor<8xf32>
    %a = train.reduce_sum %1 [0] : tensor<4xf32> -> tensor<f32>
    %b = train.reduce_sum %3 [0, 1] : tensor<2x8xf32> -> tensor<f32>
    %c = train.reduce_sum %5 [0] : tensor<2xf32> -> tensor<f32>
    %d = train.reduce_sum %6 [0] : tensor<8xf32> -> tensor<f32>
    %e = train.reduce_sum %0 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %s0 = train.add %a, %b : tensor<f32>
    %s1 = train.add %s0, %c : tensor<f32>
    %s2 = train.add %s1, %d : tensor<f32>
    %s3 = train.add %s2, %e : tensor<f32>
    train.yield %s3 : tensor<f32>
  }
}

// The row sum's C++: the value function (the shared body), rows in blocks
// with 16 partial sums; its CUDA: a block per row, warp shuffles.
// EMIT-LABEL: //=== m_step_k0 (C++) ===
// EMIT:       // m_step_k0: (tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>) -> tensor<4xf32>
// EMIT-NEXT:  [[SIG:ST_FN float m_step_k0_value\(const float \*__restrict__ in0, const float \*__restrict__ in1, const float \*__restrict__ in2, long long i, long long o1, long long o2\) {]]
// EMIT:         return v1;
// EMIT:       extern "C" void m_step_k0(const void *const *inputs, void *const *outputs) {
// EMIT:           const long long b1 = (i0 % 8LL);
// EMIT-NEXT:      const long long b2 = (i0 / 8LL);
// EMIT:             acc[l] += m_step_k0_value(in0, in1, in2, i0 + j + l, b1 + (j + l), b2);
// EMIT:       //=== m_step_k0 (CUDA) ===
// EMIT:       [[SIG]]
// EMIT:       extern "C" __global__ void m_step_k0(const float *__restrict__ in0, const float *__restrict__ in1, const float *__restrict__ in2, float *__restrict__ out0) {
// EMIT:             s += __shfl_down_sync(0xffffffffu, s, o);
// The column sum adds rows in order, vectorised across columns.
// EMIT-LABEL: //=== m_step_k1 (C++) ===
// EMIT:           for (long long r = 0; r < 4LL; ++r) {
// EMIT:             out0[c] += m_step_k1_value(in0, i0 + c);
// EMIT:       //=== m_step_k1 (CUDA) ===
// EMIT:           for (long long r = 0; r < 4LL; ++r) {
