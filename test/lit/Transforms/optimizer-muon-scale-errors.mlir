// RUN: stretto-opt %s -verify-diagnostics --pass-pipeline='builtin.module(train.model(train-autodiff,train-optimizer{optimizer=muon muon-scale=spectral}))'

// An unknown muon-scale pass option is an error at the model, listing the accepted ones.
// expected-error @+1 {{unknown muon-scale 'spectral'; expected shape or rms}}
train.model @m {
  train.param @w : tensor<3x3xf32> = normal(0.02)
  train.step {
    %w = train.read @w : tensor<3x3xf32>
    %l = train.reduce_sum %w [0, 1] : tensor<3x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
