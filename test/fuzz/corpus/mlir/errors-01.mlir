train.model @m {
  train.param @w : tensor<2xf32> = zeros(0.0)
  train.step {
    %w = train.read @w : tensor<2xf32>
    %l = train.reduce_sum %w [0] : tensor<2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.step {
    %w = train.read @w : tensor<2xf32>
    %l = train.reduce_sum %w [0] : tensor<2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
