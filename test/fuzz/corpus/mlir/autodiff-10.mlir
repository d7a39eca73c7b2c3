train.model @layer_norm_input {
  train.param @w : tensor<2x4xf32> = normal(1.0)
  train.step {
    %x = train.read @w : tensor<2x4xf32>
    %gamma = train.input "gamma" : tensor<4xf32>
    %y = train.layer_norm %x, %gamma, %gamma : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
