train.model @add_scalar_param {
  train.param @s : tensor<f32> = zeros
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %s = train.read @s : tensor<f32>
    %y = train.add %x, %s : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
