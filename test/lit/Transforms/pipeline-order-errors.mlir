// RUN: stretto-opt %s -split-input-file -verify-diagnostics --train-2bw
// RUN: not stretto-opt %s --pass-pipeline='builtin.module(train.model(train-delay-ef))' 2>&1 | FileCheck %s --check-prefix=EF

// 2BW and delay-EF act on the update phase: before train-optimizer there is none.
// expected-error @+1 {{train-2bw needs the train.update phase; run train-optimizer first}}
train.model @m {
  train.param @a : tensor<2xf32> = zeros
  train.step {
    %a = train.read @a : tensor<2xf32>
    %l = train.reduce_sum %a [0] : tensor<2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
// EF: error: train-delay-ef needs the train.update phase; run train-optimizer first
