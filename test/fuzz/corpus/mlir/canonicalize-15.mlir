train.model @broadcast_leading_one {
  train.step {
    %x = train.input "x" : tensor<3xf32>
    %b = train.broadcast %x : tensor<3xf32> -> tensor<1x3xf32>
    %l = train.reduce_sum %b [0, 1] : tensor<1x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
