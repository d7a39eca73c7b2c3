// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(train-autodiff,train-optimizer,canonicalize,cse,train-mixed-precision))' | FileCheck %s
// Running it twice adds nothing (every stored value is rounded once):
// RUN: stretto-opt %s --pass-pipeline='builtin.module(train.model(train-autodiff,train-optimizer,canonicalize,cse,train-mixed-precision,train-mixed-precision))' | FileCheck %s

// The trainer records the storage; the step rounds, the update does not.
// CHECK: train.model @mlp attributes {trainer = {{{.*}}precision = "bf16"{{.*}}}}
// CHECK: train.step {
// A float input a matmul reads: one bf16 copy, used forward and (through
// the transpose) by the weight gradient.
// CHECK:      %[[X:.*]] = train.input "x"
// CHECK-NEXT: %[[XB:.*]] = train.round_bf16 %[[X]] : tensor<2x8xf32>
// Each weight a matmul reads: one bf16 copy per step; the bias stays f32.
// CHECK:      %[[W:.*]] = train.read @w
// CHECK-NEXT: %[[WB:.*]] = train.round_bf16 %[[W]] : tensor<8x16xf32>
// CHECK-NEXT: %[[B:.*]] = train.read @b
// CHECK-NEXT: %[[H:.*]] = train.read @head
// CHECK-NEXT: %[[HB:.*]] = train.round_bf16 %[[H]] : tensor<16x4xf32>
// Activations: every compute op's result, rounded once; a linear layer's
// product only after its bias add (the sum a GEMM's bias epilogue makes).
// Its GELU reads the sum unrounded (as a GEMM's GELU_AUX epilogue applies
// GELU to the f32 sum); the backward reads the rounded sum.
// CHECK-NEXT: %[[MM:.*]] = train.matmul %[[XB]], %[[WB]]
// CHECK-NEXT: %[[PRE:.*]] = train.add %[[MM]], %[[B]]
// CHECK-NEXT: %[[PREB:.*]] = train.round_bf16 %[[PRE]]
// CHECK-NEXT: %[[ACT:.*]] = train.gelu %[[PRE]]
// CHECK-NEXT: %[[ACTB:.*]] = train.round_bf16 %[[ACT]]
// CHECK-NEXT: %[[LOGITS:.*]] = train.matmul %[[ACTB]], %[[HB]]
// CHECK-NEXT: %[[LOGITSB:.*]] = train.round_bf16 %[[LOGITS]]
// The loss is a reduction: f32.
// CHECK-NEXT: %[[LOSS:.*]] = train.cross_entropy %[[LOGITSB]]
// CHECK-NOT:  train.round_bf16 %[[LOSS]]
// CHECK:      train.softmax %[[LOGITSB]]
// CHECK-NEXT: train.round_bf16
// one_hot makes 0 and 1 (bf16 values): not rounded.
// CHECK-NEXT: %[[ONE:.*]] = train.one_hot
// CHECK-NEXT: train.sub %{{.*}}, %[[ONE]]
// CHECK-NEXT: train.round_bf16
// The backward reads the weight's bf16 copy through its transpose.
// CHECK:      train.transpose %[[HB]] [1, 0]
// The GELU's output gradient (a product only multiplied by gelu_grad):
// not rounded.
// CHECK:      %[[DACT:.*]] = train.matmul %{{.*}}, %{{.*}} : tensor<2x4xf32>, tensor<4x16xf32> -> tensor<2x16xf32>
// CHECK-NOT:  train.round_bf16 %[[DACT]]
// Weight gradients are handed on: f32, not rounded.
// CHECK:      %[[DHEAD:.*]] = train.matmul %{{.*}}, %{{.*}} : tensor<16x2xf32>, tensor<2x4xf32> -> tensor<16x4xf32>
// CHECK-NOT:  train.round_bf16 %[[DHEAD]]
// GELU's derivative is not rounded either; the product of the two is,
// once (a GEMM's DGELU epilogue).
// CHECK:      %[[GG:.*]] = train.gelu_grad %[[PREB]]
// CHECK-NEXT: %[[DPRE:.*]] = train.mul %[[DACT]], %[[GG]]
// CHECK-NEXT: train.round_bf16 %[[DPRE]]
// Bias gradient: a reduction, f32.
// CHECK:      %[[DB:.*]] = train.reduce_sum
// CHECK-NEXT: train.transpose %[[XB]] [1, 0]
// CHECK-NEXT: %[[DW:.*]] = train.matmul
// CHECK-NEXT: train.grad %[[DW]] for @w
// CHECK-NEXT: train.grad %[[DB]] for @b
// CHECK-NEXT: train.grad %[[DHEAD]] for @head
// CHECK-NEXT: train.yield %[[LOSS]]
// The update phase stays f32.
// CHECK:      train.update {
// CHECK-NOT:  train.round_bf16
// CHECK:      train.write %{{.*}} to @head :
// CHECK-NEXT: }

train.model @mlp attributes {trainer = {optimizer = "sgd", lr = 0.1 : f64}} {
  train.param @w : tensor<8x16xf32> = normal(0.1)
  train.param @b : tensor<16xf32> = zeros
  train.param @head : tensor<16x4xf32> = normal(0.1)
  train.step {
    %x = train.input "x" : tensor<2x8xf32>
    %y = train.input "y" : tensor<2xi32>
    %w = train.read @w : tensor<8x16xf32>
    %b = train.read @b : tensor<16xf32>
    %h = train.read @head : tensor<16x4xf32>
    %0 = train.matmul %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
    %1 = train.add %0, %b : tensor<2x16xf32>, tensor<16xf32> -> tensor<2x16xf32>
    %2 = train.gelu %1 : tensor<2x16xf32>
    %3 = train.matmul %2, %h : tensor<2x16xf32>, tensor<16x4xf32> -> tensor<2x4xf32>
    %l = train.cross_entropy %3, %y : tensor<2x4xf32>, tensor<2xi32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
