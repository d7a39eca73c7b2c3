train.model @m {
  train.param @w : tensor<4x3xf32> = zeros(0.0)
  train.step {
    %w = train.read @w : tensor<3x4xf32>
    %l = train.reduce_sum %w [0, 1] : tensor<3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
