train.model @add_zero {
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %z = train.constant dense<0.0> : tensor<f32>
    %a = train.add %x, %z : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %b = train.add %z, %a : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %b [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
