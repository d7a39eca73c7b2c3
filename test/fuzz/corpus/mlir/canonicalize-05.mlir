train.model @mul_one_broadcasts {
  train.step {
    %x = train.input "x" : tensor<4xf32>
    %one = train.constant dense<1.0> : tensor<3x4xf32>
    %z = train.constant dense<0.0> : tensor<f32>
    %a = train.mul %x, %one : tensor<4xf32>, tensor<3x4xf32> -> tensor<3x4xf32>
    %b = train.mul %a, %z : tensor<3x4xf32>, tensor<f32> -> tensor<3x4xf32>
    %l = train.reduce_sum %b [0, 1] : tensor<3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
