train.model @mul_one {
  train.step {
    %x = train.input "x" : tensor<2x3x4xf32>
    %one = train.constant dense<1.0> : tensor<4xf32>
    %s = train.constant dense<1.0> : tensor<f32>
    %a = train.mul %x, %one : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<2x3x4xf32>
    %b = train.mul %s, %a : tensor<f32>, tensor<2x3x4xf32> -> tensor<2x3x4xf32>
    %l = train.reduce_sum %b [0, 1, 2] : tensor<2x3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
