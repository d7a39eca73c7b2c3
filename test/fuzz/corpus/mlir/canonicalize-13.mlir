train.model @reshape_roundtrip {
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %r1 = train.reshape %x : tensor<2x3xf32> -> tensor<6xf32>
    %r2 = train.reshape %r1 : tensor<6xf32> -> tensor<2x3xf32>
    %r = train.reduce_sum %r2 [1] : tensor<2x3xf32> -> tensor<2xf32>
    %l = train.reduce_sum %r [0] : tensor<2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
