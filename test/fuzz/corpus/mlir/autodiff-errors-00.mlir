train.model @newton_schulz {
  train.param @w : tensor<3x3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3x3xf32>
    %o = train.newton_schulz %w : tensor<3x3xf32>
    %l = train.reduce_sum %o [0, 1] : tensor<3x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
