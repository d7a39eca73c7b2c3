// RUN: stretto-opt %s --kernel-fuse-elementwise | stretto-kernel-emit | FileCheck %s
// RUN: stretto-opt %s --kernel-fuse-elementwise | stretto-kernel-emit --target=cuda | FileCheck %s --check-prefix=CUDA-ONLY
// RUN: not stretto-kernel-emit --target=ptx %s 2>&1 | FileCheck %s --check-prefix=BAD-TARGET

// One kernel, two sources: the C++ and the CUDA C translation units carry
// the same element function text (loads: the same-shape input at i, the
// broadcast [8] row at an offset o1 that each target's loop computes, the
// scalar at 0; the scalar ops; the store) and differ only in their preludes
// and launch wrappers: C++ loops over rows x an inner extent with unit-stride
// or invariant loads (b1 + j: vectorisable), CUDA computes o1 from the
// element's index, one element a thread a step (a kernel this small has no
// vector step: the third kernel below has one).
// CHECK-LABEL: //=== m_step_k0 (C++) ===
// CHECK-NEXT:  #include <math.h>
// CHECK-NEXT:  #define ST_FN static inline
// CHECK:       ST_FN float st_tanh_f(float x) {
// CHECK:       ST_FN float st_gelu(float x) { return st_gelu_f(x); }
// CHECK:       // m_step_k0: (tensor<4x8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT:  [[SIG:ST_FN void m_step_k0_element\(const float \*__restrict__ in0, const float \*__restrict__ in1, const float \*__restrict__ in2, float \*__restrict__ out0, long long i, long long o1\) {]]
// CHECK-NEXT:  [[L0:  const float a0 = in0\[i\];]]
// CHECK-NEXT:  [[L1:  const float a1 = in1\[o1\];]]
// CHECK-NEXT:  [[L2:  const float a2 = in2\[0\];]]
// CHECK-NEXT:  [[V0:  const float v0 = a0 \* a1;]]
// CHECK-NEXT:  [[V1:  const float v1 = v0 - a2;]]
// CHECK-NEXT:  [[V2:  const float v2 = st_rsqrt\(v1\);]]
// CHECK-NEXT:  [[V3:  const float v3 = \(v2 > a0 \? 1.0f : 0.0f\);]]
// CHECK-NEXT:  [[V4:  const float v4 = st_max\(v3, a1\);]]
// CHECK-NEXT:  [[ST:  out0\[i\] = v4;]]
// CHECK-NEXT:  }
// CHECK-NEXT:  extern "C" void m_step_k0(const void *const *inputs, void *const *outputs) {
// CHECK-NEXT:    const float *in0 = (const float *)inputs[0];
// CHECK-NEXT:    const float *in1 = (const float *)inputs[1];
// CHECK-NEXT:    const float *in2 = (const float *)inputs[2];
// CHECK-NEXT:    float *out0 = (float *)outputs[0];
// CHECK-NEXT:    for (long long r = 0; r < 4LL; ++r) {
// CHECK-NEXT:      const long long i0 = r * 8LL;
// CHECK-NEXT:      const long long b1 = (i0 % 8LL);
// CHECK-NEXT:  #pragma omp parallel for simd if (32LL >= 65536LL)
// CHECK-NEXT:      for (long long j = 0; j < 8LL; ++j)
// CHECK-NEXT:        m_step_k0_element(in0, in1, in2, out0, i0 + j, b1 + j);
// CHECK-NEXT:    }
// CHECK-NEXT:  }
// CHECK-NEXT:  //=== m_step_k0 (CUDA) ===
// CHECK-NEXT:  #define ST_FN static __device__ __forceinline__
// CHECK:       // m_step_k0: (tensor<4x8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT:  [[SIG]]
// CHECK-NEXT:  [[L0]]
// CHECK-NEXT:  [[L1]]
// CHECK-NEXT:  [[L2]]
// CHECK-NEXT:  [[V0]]
// CHECK-NEXT:  [[V1]]
// CHECK-NEXT:  [[V2]]
// CHECK-NEXT:  [[V3]]
// CHECK-NEXT:  [[V4]]
// CHECK-NEXT:  [[ST]]
// CHECK-NEXT:  }
// CHECK-NEXT:  extern "C" __global__ void m_step_k0(const float *__restrict__ in0, const float *__restrict__ in1, const float *__restrict__ in2, float *__restrict__ out0) {
// CHECK-NEXT:    const long long s = (long long)gridDim.x * blockDim.x;
// CHECK-NEXT:    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
// CHECK-NEXT:    for (; i < 32LL; i += s)
// CHECK-NEXT:      m_step_k0_element(in0, in1, in2, out0, i, (i % 8LL));
// CHECK-NEXT:  }

// The second kernel is f64 with a [4, 1] column broadcast along the rows.
// CHECK-LABEL: //=== m_step_k1 (C++) ===
// CHECK:       const double a0 = in0[i];
// CHECK-NEXT:  const double a1 = in1[o1];
// CHECK-NEXT:  const double v0 = a0 + a1;
// CHECK-NEXT:  const double v1 = st_exp(v0);
// CHECK-NEXT:  out0[i] = v1;
// The column is constant along each row: its offset does not advance with j.
// CHECK:         const long long b1 = (i0 / 3LL);
// CHECK:           m_step_k1_element(in0, in1, out0, i0 + j, b1);

// The third, of 4,608 elements, has a vector step: where the operands read
// and written at the element's index (g, the result) are 16-byte aligned,
// eight consecutive elements a thread a step through 16-byte words (the
// element function on registers, index 0..7; the broadcast row read where
// it lies), then the rest (all of them where they are not) one at a time.
// CHECK-LABEL: //=== m_step_k2 (CUDA) ===
// CHECK:       extern "C" __global__ void m_step_k2(const float *__restrict__ in0, const float *__restrict__ in1, float *__restrict__ out0) {
// CHECK-NEXT:    const long long s = (long long)gridDim.x * blockDim.x;
// CHECK-NEXT:    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
// CHECK-NEXT:    if ((((unsigned long long)in0 | (unsigned long long)out0) & 15) == 0) {
// CHECK-NEXT:      for (long long v = 8 * i; v < 4608LL; v += 8 * s) {
// CHECK-NEXT:        alignas(16) float l0[8];
// CHECK-NEXT:        st_load8(l0, in0 + v);
// CHECK-NEXT:        alignas(16) float r0[8];
// CHECK-NEXT:        m_step_k2_element(l0, in1, r0, 0, ((v + 0) % 72LL));
// CHECK:             m_step_k2_element(l0, in1, r0, 7, ((v + 7) % 72LL));
// CHECK-NEXT:        st_copy8(out0 + v, r0);
// CHECK-NEXT:      }
// CHECK-NEXT:      i += 4608LL;
// CHECK-NEXT:    }
// CHECK-NEXT:    for (; i < 4608LL; i += s)
// CHECK-NEXT:      m_step_k2_element(in0, in1, out0, i, (i % 72LL));
// CHECK-NEXT:  }

// CUDA-ONLY-NOT: (C++)
// CUDA-ONLY:     //=== m_step_k0 (CUDA) ===
// CUDA-ONLY:     //=== m_step_k1 (CUDA) ===

// BAD-TARGET: stretto-kernel-emit: --target must be cpp, cuda or all, got 'ptx'
train.model @m {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %row = train.input "row" : tensor<8xf32>
    %s = train.input "s" : tensor<f32>
    %0 = train.mul %x, %row : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %1 = train.sub %0, %s : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    %2 = train.rsqrt %1 : tensor<4x8xf32>
    %3 = train.gt %2, %x : tensor<4x8xf32>
    %4 = train.max %3, %row : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %l = train.reduce_sum %4 [0, 1] : tensor<4x8xf32> -> tensor<f32>
    %c = train.input "c" : tensor<4x1xf64>
    %d = train.input "d" : tensor<4x3xf64>
    %e = train.add %d, %c : tensor<4x3xf64>, tensor<4x1xf64> -> tensor<4x3xf64>
    %f = train.exp %e : tensor<4x3xf64>
    %g = train.input "g" : tensor<64x72xf32>
    %h = train.input "h" : tensor<72xf32>
    %p = train.mul %g, %h : tensor<64x72xf32>, tensor<72xf32> -> tensor<64x72xf32>
    %q = train.tanh %p : tensor<64x72xf32>
    train.yield %l : tensor<f32>
  }
}
