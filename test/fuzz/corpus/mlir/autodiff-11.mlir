train.model @rms_norm {
  train.param @w : tensor<2x4xf32> = normal(1.0)
  train.param @g : tensor<4xf32> = ones
  train.step {
    %x = train.read @w : tensor<2x4xf32>
    %g = train.read @g : tensor<4xf32>
    %y = train.rms_norm %x, %g {eps = 0.25 : f64} : tensor<2x4xf32>, tensor<4xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
