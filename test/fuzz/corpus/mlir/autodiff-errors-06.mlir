train.model @grad_present {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.grad %w for @w : tensor<3xf32>
    train.yield %l : tensor<f32>
  }
}
