train.model @metric_only {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.step {
    %x = train.input "x" : tensor<3xf32>
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %x [0] : tensor<3xf32> -> tensor<f32>
    %m = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l, %m : tensor<f32>, tensor<f32>
  }
}
