// RUN: stretto-opt %s -verify-diagnostics --pass-pipeline='builtin.module(train.model(train-autodiff,train-optimizer{optimizer=lion}))'

// An unknown optimizer pass option is an error at the model, listing the
// accepted ones (the trainer dictionary cannot carry one: its verifier rejects it).
// expected-error @+1 {{unknown optimizer 'lion'; expected sgd, adamw or muon}}
train.model @m attributes {trainer = {optimizer = "adamw"}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
