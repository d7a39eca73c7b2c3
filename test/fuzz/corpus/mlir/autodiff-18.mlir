train.model @transpose_broadcast {
  train.param @w : tensor<2x3x4xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<2x3x4xf32>
    %t = train.transpose %w [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
    %b = train.broadcast %t : tensor<3x4x2xf32> -> tensor<5x3x4x2xf32>
    %l = train.reduce_sum %b [0, 1, 2, 3] : tensor<5x3x4x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
