train.model @transpose_inverse {
  train.step {
    %x = train.input "x" : tensor<2x3x4xf32>
    %t1 = train.transpose %x [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
    %t2 = train.transpose %t1 [2, 0, 1] : tensor<3x4x2xf32> -> tensor<2x3x4xf32>
    %r = train.reduce_sum %t2 [1, 2] : tensor<2x3x4xf32> -> tensor<2xf32>
    %l = train.reduce_sum %r [0] : tensor<2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
