train.model @reshape_reshape {
  train.step {
    %x = train.input "x" : tensor<2x3x4xf32>
    %r1 = train.reshape %x : tensor<2x3x4xf32> -> tensor<24xf32>
    %r2 = train.reshape %r1 : tensor<24xf32> -> tensor<2x12xf32>
    %r3 = train.reshape %r2 : tensor<2x12xf32> -> tensor<4x6xf32>
    %r = train.reduce_sum %r3 [0] : tensor<4x6xf32> -> tensor<6xf32>
    %l = train.reduce_sum %r [0] : tensor<6xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
