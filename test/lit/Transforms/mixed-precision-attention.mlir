// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(train-autodiff,train-optimizer,canonicalize,cse,train-mixed-precision))' | FileCheck %s
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(train-autodiff,train-optimizer,canonicalize,cse))' | FileCheck %s --check-prefix=F32

// In a bf16 plan attention multiplies its weights P, and its backward P
// and dS, rounded to bf16 (`bf16`: they are GEMM operands, as the plan's
// other products' are); its inputs and output are rounded as activations.
// Without the pass both stay f32.
// CHECK-LABEL: train.model @attention
// CHECK:       train.matmul
// CHECK-NEXT:  %[[Q:.*]] = train.round_bf16 %{{.*}} : tensor<2x2x8x4xf32>
// CHECK-NEXT:  %[[O:.*]] = train.attention %[[Q]], %{{.*}}, %{{.*}} causal {bf16, scale = 5.000000e-01 : f64} : tensor<2x2x8x4xf32>
// CHECK-NEXT:  train.round_bf16 %[[O]]
// CHECK:       train.attention_grad %[[Q]], %{{.*}}, %{{.*}}, %{{.*}} causal {bf16, scale = 5.000000e-01 : f64} : tensor<2x2x8x4xf32> -> tensor<3x2x2x8x4xf32>
// F32-LABEL:   train.model @attention
// F32:         train.attention %{{.*}}, %{{.*}}, %{{.*}} causal {scale = 5.000000e-01 : f64}
// F32:         train.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} causal {scale = 5.000000e-01 : f64}
// F32-NOT:     bf16

train.model @attention attributes {trainer = {optimizer = "sgd", lr = 0.1 : f64}} {
  train.param @w : tensor<4x4xf32> = normal(0.5)
  train.step {
    %x = train.input "x" : tensor<2x2x8x4xf32>
    %w = train.read @w : tensor<4x4xf32>
    %q = train.matmul %x, %w : tensor<2x2x8x4xf32>, tensor<4x4xf32> -> tensor<2x2x8x4xf32>
    %o = train.attention %q, %x, %x causal {scale = 0.5 : f64} : tensor<2x2x8x4xf32>
    %l = train.reduce_sum %o [0, 1, 2, 3] : tensor<2x2x8x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
