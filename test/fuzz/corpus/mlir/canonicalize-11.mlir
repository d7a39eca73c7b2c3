train.model @reshape_identity {
  train.step {
    %x = train.input "x" : tensor<2x3xi32>
    %r = train.reshape %x : tensor<2x3xi32> -> tensor<2x3xi32>
    %h = train.one_hot %r : tensor<2x3xi32> -> tensor<2x3x4xf32>
    %l = train.reduce_sum %h [0, 1, 2] : tensor<2x3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
