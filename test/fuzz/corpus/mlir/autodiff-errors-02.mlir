train.model @nondiff_off_path {
  train.param @w : tensor<3x3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3x3xf32>
    %o = train.newton_schulz %w : tensor<3x3xf32>
    %l = train.reduce_sum %w [0, 1] : tensor<3x3xf32> -> tensor<f32>
    %m = train.reduce_sum %o [0, 1] : tensor<3x3xf32> -> tensor<f32>
    train.yield %l, %m : tensor<f32>, tensor<f32>
  }
}
