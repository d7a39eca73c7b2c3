// RUN: stretto-opt %s -verify-diagnostics --pass-pipeline='builtin.module(train.model(train-batch-newton-schulz{max-elements=0}))'

// A batch holds at least one element: max-elements below 1 is an error at
// the model.
// expected-error @+1 {{train-batch-newton-schulz: max-elements must be at least 1, got 0}}
train.model @m {
  train.step {
    %x = train.input "x" : tensor<4xf32>
    %l = train.reduce_sum %x [0] : tensor<4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
