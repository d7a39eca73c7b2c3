// One parameter of 10^10 elements: more than the 2^31 a TOML config may ask
// for in one tensor (input-validation.test).
train.model @m {
  train.param @w : tensor<100000x100000xf32> = zeros
  train.step {
    %w = train.read @w : tensor<100000x100000xf32>
    %l = train.reduce_sum %w [0, 1] : tensor<100000x100000xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
