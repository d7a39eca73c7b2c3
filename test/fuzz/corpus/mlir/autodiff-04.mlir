train.model @add_broadcast {
  train.param @b : tensor<3xf32> = zeros
  train.param @c : tensor<2x1xf32> = zeros
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %b = train.read @b : tensor<3xf32>
    %c = train.read @c : tensor<2x1xf32>
    %y = train.add %x, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %z = train.sub %y, %c : tensor<2x3xf32>, tensor<2x1xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
