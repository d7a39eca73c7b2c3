train.model @transpose_identity {
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %t = train.transpose %x [0, 1] : tensor<2x3xf32> -> tensor<2x3xf32>
    %r = train.reduce_sum %t [0] : tensor<2x3xf32> -> tensor<3xf32>
    %l = train.reduce_sum %r [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
