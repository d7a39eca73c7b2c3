train.model @transpose_chain {
  train.step {
    %x = train.input "x" : tensor<2x3x4x5xf32>
    %t1 = train.transpose %x [1, 0, 2, 3] : tensor<2x3x4x5xf32> -> tensor<3x2x4x5xf32>
    %t2 = train.transpose %t1 [3, 0, 1, 2] : tensor<3x2x4x5xf32> -> tensor<5x3x2x4xf32>
    %t3 = train.transpose %t2 [0, 1, 2, 3] : tensor<5x3x2x4xf32> -> tensor<5x3x2x4xf32>
    %l = train.reduce_sum %t3 [0, 1, 2, 3] : tensor<5x3x2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
