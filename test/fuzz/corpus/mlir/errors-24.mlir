train.model @m {
  train.param @w : tensor<4xf32> = zeros(0.0)
  train.step {
    %w = train.read @w : tensor<4xf32>
    train.grad %w for @u : tensor<4xf32>
    %l = train.reduce_sum %w [0] : tensor<4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
