train.model @gt {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3xf32>
    %z = train.constant dense<0.0> : tensor<f32>
    %m = train.gt %w, %z : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
    %y = train.mul %w, %m : tensor<3xf32>
    %l = train.reduce_sum %y [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
