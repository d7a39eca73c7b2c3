train.model @grad_order {
  train.param @b : tensor<3xf32> = zeros
  train.param @a : tensor<3xf32> = zeros
  train.state @m : tensor<3xf32> = zeros
  train.step {
    %a = train.read @a : tensor<3xf32>
    %b = train.read @b : tensor<3xf32>
    %m = train.read @m : tensor<3xf32>
    %y = train.mul %a, %b : tensor<3xf32>
    %z = train.add %y, %m : tensor<3xf32>
    %l = train.reduce_sum %z [0] : tensor<3xf32> -> tensor<f32>
    %ml = train.reduce_sum %m [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l, %ml : tensor<f32>, tensor<f32>
  }
}
