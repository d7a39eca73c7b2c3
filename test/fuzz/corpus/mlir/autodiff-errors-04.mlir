train.model @no_param {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.state @s : tensor<3xf32> = zeros
  train.step {
    %s = train.read @s : tensor<3xf32>
    %l = train.reduce_sum %s [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
