train.model @add_zero_broadcasts {
  train.step {
    %x = train.input "x" : tensor<4xf32>
    %z = train.constant dense<0.0> : tensor<2x4xf32>
    %a = train.add %x, %z : tensor<4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
    %b = train.add %z, %x : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    %c = train.add %a, %b : tensor<2x4xf32>
    %l = train.reduce_sum %c [0, 1] : tensor<2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
